//! Callback data for inline buttons, bound to (chat, card, action, nonce)
//! by a MAC, so a press can later be refused when it is foreign (another
//! chat's button or a forged payload), stale or replayed (the nonce is no
//! longer the card's live one — checked by the card layer, which sees the
//! nonce this returns).
//!
//! Format (at most 64 bytes, Telegram's limit):
//! `{action}:{card_id}:{nonce}:{mac}` — nonce 4 random bytes and mac the
//! first 9 bytes of HMAC-SHA256(key, v1|chat|card|action|nonce), both
//! base64url. 72 bits of MAC are ample against online guessing: every wrong
//! guess costs the attacker a Telegram round trip and an audit entry. The
//! nonce only has to differ between renders of a card (the card layer
//! compares it with the live one; the MAC makes it unforgeable), so 32 bits
//! do; with a UUID card id this leaves 7 bytes for the action.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// Telegram's `callback_data` limit, in bytes.
pub const MAX_CALLBACK_DATA: usize = 64;
const NONCE_BYTES: usize = 4;
const MAC_BYTES: usize = 9;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackPayload {
    pub card_id: String,
    pub action: String,
    pub nonce: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    #[error("callback data would exceed {MAX_CALLBACK_DATA} bytes ({0})")]
    TooLong(usize),
    #[error("card id and action must be non-empty and free of ':'")]
    BadField,
    #[error("no randomness for the callback nonce")]
    Random,
    #[error("callback key rejected")]
    Key,
    #[error("malformed callback data")]
    Malformed,
    /// Forged, tampered with, or issued for another chat or key.
    #[error("callback data does not verify")]
    BadMac,
}

/// A new render nonce (4 random bytes, base64url: 6 characters).
pub fn fresh_nonce() -> Result<String, CallbackError> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|_| CallbackError::Random)?;
    Ok(URL_SAFE_NO_PAD.encode(nonce))
}

impl silas_core::Coded for CallbackError {
    fn code(&self) -> silas_core::ErrorCode {
        match self {
            // A press whose MAC fails is a forged or foreign approval.
            CallbackError::BadMac => silas_core::ErrorCode::EApprovalSignature,
            _ => silas_core::ErrorCode::EChannelProtocol,
        }
    }
}

pub struct CallbackSigner {
    key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for CallbackSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallbackSigner(<key>)")
    }
}

impl CallbackSigner {
    /// The key is the daemon's (persisted, so buttons survive a restart).
    pub fn new(key: [u8; 32]) -> Self {
        CallbackSigner {
            key: Zeroizing::new(key),
        }
    }

    fn mac(
        &self,
        chat_id: i64,
        card_id: &str,
        action: &str,
        nonce: &str,
    ) -> Result<Hmac<Sha256>, CallbackError> {
        // HMAC accepts keys of any length; the error is unreachable in practice.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.key.as_slice())
            .map_err(|_| CallbackError::Key)?;
        for part in [
            b"silas-tg-cb-v1".as_slice(),
            chat_id.to_string().as_bytes(),
            card_id.as_bytes(),
            action.as_bytes(),
            nonce.as_bytes(),
        ] {
            // Length-prefixed, so field boundaries cannot shift.
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        Ok(mac)
    }

    /// Callback data for a button of `card_id` doing `action` in `chat_id`.
    pub fn encode(
        &self,
        chat_id: i64,
        card_id: &str,
        action: &str,
    ) -> Result<String, CallbackError> {
        self.encode_with_nonce(chat_id, card_id, action, &fresh_nonce()?)
    }

    /// Callback data with a given nonce: every button of one render of a
    /// card shares the render's nonce, so one live nonce per card refuses
    /// presses on every older render at once.
    pub fn encode_with_nonce(
        &self,
        chat_id: i64,
        card_id: &str,
        action: &str,
        nonce: &str,
    ) -> Result<String, CallbackError> {
        let bad = |s: &str| s.is_empty() || s.contains(':');
        if bad(card_id) || bad(action) || bad(nonce) {
            return Err(CallbackError::BadField);
        }
        let tag = self
            .mac(chat_id, card_id, action, nonce)?
            .finalize()
            .into_bytes();
        let data = format!(
            "{action}:{card_id}:{nonce}:{}",
            URL_SAFE_NO_PAD.encode(&tag[..MAC_BYTES])
        );
        if data.len() > MAX_CALLBACK_DATA {
            return Err(CallbackError::TooLong(data.len()));
        }
        Ok(data)
    }

    /// Verify a press in `chat_id` and return what it binds.
    pub fn decode(&self, chat_id: i64, data: &str) -> Result<CallbackPayload, CallbackError> {
        let mut parts = data.split(':');
        let (Some(action), Some(card_id), Some(nonce), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(CallbackError::Malformed);
        };
        if action.is_empty() || card_id.is_empty() || nonce.is_empty() {
            return Err(CallbackError::Malformed);
        }
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| CallbackError::Malformed)?;
        if tag.len() != MAC_BYTES {
            return Err(CallbackError::Malformed);
        }
        // Constant-time comparison of the truncated tag.
        self.mac(chat_id, card_id, action, nonce)?
            .verify_truncated_left(&tag)
            .map_err(|_| CallbackError::BadMac)?;
        Ok(CallbackPayload {
            card_id: card_id.to_string(),
            action: action.to_string(),
            nonce: nonce.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> CallbackSigner {
        CallbackSigner::new([7u8; 32])
    }

    const CARD: &str = "0194f3c2-7b1e-7c3a-9d2e-5a6b7c8d9e0f";

    #[test]
    fn round_trips_and_fits_telegram_limit() {
        let s = signer();
        let data = s.encode(42, CARD, "approve").unwrap();
        assert!(data.len() <= MAX_CALLBACK_DATA, "{} bytes", data.len());
        let p = s.decode(42, &data).unwrap();
        assert_eq!(p.card_id, CARD);
        assert_eq!(p.action, "approve");
        // A fresh nonce per button: two encodings differ.
        let again = s.encode(42, CARD, "approve").unwrap();
        assert_ne!(data, again);
        assert_ne!(s.decode(42, &again).unwrap().nonce, p.nonce);
    }

    #[test]
    fn foreign_chat_other_key_and_tampering_are_refused() {
        let s = signer();
        let data = s.encode(42, CARD, "approve").unwrap();
        assert_eq!(s.decode(43, &data), Err(CallbackError::BadMac));
        let other = CallbackSigner::new([8u8; 32]);
        assert_eq!(other.decode(42, &data), Err(CallbackError::BadMac));
        let swapped = data.replacen("approve", "decline", 1);
        assert_eq!(s.decode(42, &swapped), Err(CallbackError::BadMac));
        let mut parts: Vec<&str> = data.split(':').collect();
        parts[2] = "AAAAAAAA";
        assert_eq!(s.decode(42, &parts.join(":")), Err(CallbackError::BadMac));
    }

    #[test]
    fn malformed_data_is_refused() {
        let s = signer();
        for bad in [
            "",
            "approve",
            "a:b:c",
            "a:b:c:d:e",
            "a:b:c:!!!",
            ":b:c:AAAAAAAAAAAA",
            "a:b:c:AAAA",
        ] {
            assert_eq!(s.decode(1, bad), Err(CallbackError::Malformed), "{bad}");
        }
    }

    #[test]
    fn encoding_refuses_fields_it_cannot_carry() {
        let s = signer();
        assert_eq!(s.encode(1, "a:b", "x"), Err(CallbackError::BadField));
        assert_eq!(s.encode(1, "a", ""), Err(CallbackError::BadField));
        let long = "c".repeat(50);
        assert!(matches!(
            s.encode(1, &long, "approve"),
            Err(CallbackError::TooLong(_))
        ));
    }

    #[test]
    fn one_nonce_can_sign_every_button_of_a_render() {
        let s = signer();
        let nonce = fresh_nonce().unwrap();
        assert_eq!(nonce.len(), 6);
        assert_ne!(nonce, fresh_nonce().unwrap());
        let ok = s.encode_with_nonce(42, "h1", "ok", &nonce).unwrap();
        let no = s.encode_with_nonce(42, "h1", "no", &nonce).unwrap();
        assert_eq!(s.decode(42, &ok).unwrap().nonce, nonce);
        assert_eq!(s.decode(42, &no).unwrap().nonce, nonce);
        assert_eq!(
            s.encode_with_nonce(42, "h1", "ok", "a:b"),
            Err(CallbackError::BadField)
        );
        assert_eq!(
            s.encode_with_nonce(42, "h1", "ok", ""),
            Err(CallbackError::BadField)
        );
    }

    #[test]
    fn debug_hides_the_key() {
        assert_eq!(format!("{:?}", signer()), "CallbackSigner(<key>)");
    }
}
