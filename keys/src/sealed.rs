//! Sealing the 32-byte owner-key seed under a key-encryption key.
//!
//! * KDF: Argon2id (v0x13) over the KEK bytes and a random 16-byte salt,
//!   producing a 32-byte wrapping key. Argon2id because the KEK may be a
//!   human passphrase; the cost is paid once per `init`/`start`. The default
//!   cost is RFC 9106's second recommended option (64 MiB, 3 passes, one
//!   lane), chosen to stay usable on a small home server. The parameters are
//!   stored in the file so they can be raised later without breaking older
//!   files; on load they are bounded so a tampered file cannot ask for
//!   unbounded memory or time.
//! * AEAD: XChaCha20-Poly1305 with a random 24-byte nonce (random nonces are
//!   safe at this size; every seal draws a fresh salt too, so a wrapping key
//!   is never reused anyway).
//! * Associated data: a domain label, the algorithm and the public key
//!   ([`aad`]), so the sealed secret cannot be paired with another public key
//!   or reinterpreted. Salt, nonce and KDF parameters need not be in the AAD:
//!   changing any of them changes the wrapping key or keystream and the tag
//!   fails.
//!
//! Every intermediate secret (wrapping key, plaintext buffer) is zeroised on
//! drop; the cipher itself zeroises its key (`chacha20poly1305/zeroize`).

use argon2::{Algorithm, Argon2, Version};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

pub const SEED_LEN: usize = 32;
pub const SALT_LEN: usize = 16;
pub const NONCE_LEN: usize = 24;
pub const TAG_LEN: usize = 16;
pub const CIPHERTEXT_LEN: usize = SEED_LEN + TAG_LEN;

/// Argon2id cost parameters, stored in the key file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KdfParams {
    /// Memory in KiB.
    pub m_cost_kib: u32,
    /// Passes.
    pub t_cost: u32,
    /// Lanes.
    pub p_cost: u32,
}

impl KdfParams {
    /// RFC 9106 §4, second recommended option.
    pub const DEFAULT: KdfParams = KdfParams {
        m_cost_kib: 64 * 1024,
        t_cost: 3,
        p_cost: 1,
    };
    /// Upper bounds accepted from a file (1 GiB, 64 passes, 16 lanes).
    pub const MAX: KdfParams = KdfParams {
        m_cost_kib: 1024 * 1024,
        t_cost: 64,
        p_cost: 16,
    };

    fn argon2(&self) -> Result<Argon2<'static>, SealError> {
        let max = KdfParams::MAX;
        if self.m_cost_kib > max.m_cost_kib || self.t_cost > max.t_cost || self.p_cost > max.p_cost
        {
            return Err(SealError::Params(format!(
                "Argon2id parameters {self:?} exceed the accepted maximum {max:?}"
            )));
        }
        let params = argon2::Params::new(self.m_cost_kib, self.t_cost, self.p_cost, Some(SEED_LEN))
            .map_err(|e| SealError::Params(format!("invalid Argon2id parameters {self:?}: {e}")))?;
        Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
    }
}

/// A sealed seed with everything needed to open it except the KEK and AAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub kdf: KdfParams,
    pub salt: [u8; SALT_LEN],
    pub nonce: [u8; NONCE_LEN],
    /// Encrypted seed followed by the Poly1305 tag.
    pub ciphertext: [u8; CIPHERTEXT_LEN],
}

#[derive(Debug, PartialEq, Eq)]
pub enum SealError {
    /// Unusable KDF parameters (from a file, or a bug).
    Params(String),
    /// The OS random number generator failed.
    Random(String),
    /// The tag did not verify: wrong KEK, or modified salt, nonce,
    /// parameters, ciphertext or associated data.
    Authentication,
    /// Encryption failed (cannot happen for a 32-byte message).
    Encrypt,
}

/// The associated data binding a sealed seed to its public key.
pub fn aad(public_key_hex: &str) -> Vec<u8> {
    let mut aad = b"silas owner key v2\0ed25519\0".to_vec();
    aad.extend_from_slice(public_key_hex.as_bytes());
    aad
}

fn wrapping_key(
    kek: &[u8],
    salt: &[u8; SALT_LEN],
    kdf: KdfParams,
) -> Result<Zeroizing<[u8; 32]>, SealError> {
    let mut key = Zeroizing::new([0u8; 32]);
    kdf.argon2()?
        .hash_password_into(kek, salt, key.as_mut())
        .map_err(|e| SealError::Params(format!("Argon2id failed: {e}")))?;
    Ok(key)
}

fn cipher(key: &[u8; 32]) -> XChaCha20Poly1305 {
    // Borrow as `Key` (no unzeroised stack copy); the cipher zeroises its own.
    let key: &Key = key.into();
    XChaCha20Poly1305::new(key)
}

/// Seals `seed` under `kek` with fresh random salt and nonce.
pub fn seal(
    seed: &[u8; SEED_LEN],
    kek: &[u8],
    aad: &[u8],
    kdf: KdfParams,
) -> Result<Sealed, SealError> {
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut salt).map_err(|e| SealError::Random(e.to_string()))?;
    getrandom::fill(&mut nonce).map_err(|e| SealError::Random(e.to_string()))?;
    let key = wrapping_key(kek, &salt, kdf)?;
    let mut buf = Zeroizing::new(*seed);
    let tag = cipher(&key)
        .encrypt_inout_detached(&XNonce::from(nonce), aad, buf.as_mut_slice().into())
        .map_err(|_| SealError::Encrypt)?;
    let mut ciphertext = [0u8; CIPHERTEXT_LEN];
    ciphertext[..SEED_LEN].copy_from_slice(buf.as_slice());
    ciphertext[SEED_LEN..].copy_from_slice(tag.as_slice());
    Ok(Sealed {
        kdf,
        salt,
        nonce,
        ciphertext,
    })
}

/// Opens a sealed seed; any mismatch is [`SealError::Authentication`].
pub fn open(
    sealed: &Sealed,
    kek: &[u8],
    aad: &[u8],
) -> Result<Zeroizing<[u8; SEED_LEN]>, SealError> {
    let key = wrapping_key(kek, &sealed.salt, sealed.kdf)?;
    let mut buf = Zeroizing::new([0u8; SEED_LEN]);
    buf.copy_from_slice(&sealed.ciphertext[..SEED_LEN]);
    let mut tag = Tag::default();
    tag.copy_from_slice(&sealed.ciphertext[SEED_LEN..]);
    cipher(&key)
        .decrypt_inout_detached(
            &XNonce::from(sealed.nonce),
            aad,
            buf.as_mut_slice().into(),
            &tag,
        )
        .map_err(|_| SealError::Authentication)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cheap parameters so unit tests stay fast; the format is identical.
    const FAST: KdfParams = KdfParams {
        m_cost_kib: 64,
        t_cost: 1,
        p_cost: 1,
    };

    #[test]
    fn seal_open_round_trip_and_every_field_is_authenticated() {
        let seed = [7u8; 32];
        let aad = aad("ab");
        let s = seal(&seed, b"kek", &aad, FAST).unwrap();
        assert_ne!(&s.ciphertext[..32], &seed[..]);
        assert_eq!(*open(&s, b"kek", &aad).unwrap(), seed);

        assert_eq!(open(&s, b"kex", &aad), Err(SealError::Authentication));
        assert_eq!(
            open(&s, b"kek", &super::aad("ac")),
            Err(SealError::Authentication)
        );
        for i in 0..CIPHERTEXT_LEN {
            let mut t = s.clone();
            t.ciphertext[i] ^= 1;
            assert_eq!(open(&t, b"kek", &aad), Err(SealError::Authentication));
        }
        let mut t = s.clone();
        t.salt[0] ^= 1;
        assert_eq!(open(&t, b"kek", &aad), Err(SealError::Authentication));
        let mut t = s.clone();
        t.nonce[23] ^= 1;
        assert_eq!(open(&t, b"kek", &aad), Err(SealError::Authentication));
        let mut t = s.clone();
        t.kdf.t_cost = 2;
        assert_eq!(open(&t, b"kek", &aad), Err(SealError::Authentication));
    }

    #[test]
    fn fresh_salt_and_nonce_per_seal() {
        let a = seal(&[1; 32], b"k", b"", FAST).unwrap();
        let b = seal(&[1; 32], b"k", b"", FAST).unwrap();
        assert_ne!(a.salt, b.salt);
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[test]
    fn oversized_or_invalid_parameters_are_refused() {
        let s = seal(&[1; 32], b"k", b"", FAST).unwrap();
        for kdf in [
            KdfParams {
                m_cost_kib: KdfParams::MAX.m_cost_kib + 1,
                ..FAST
            },
            KdfParams {
                t_cost: KdfParams::MAX.t_cost + 1,
                ..FAST
            },
            KdfParams { t_cost: 0, ..FAST },
            KdfParams {
                m_cost_kib: 1,
                ..FAST
            },
        ] {
            let t = Sealed { kdf, ..s.clone() };
            assert!(matches!(open(&t, b"k", b""), Err(SealError::Params(_))));
        }
    }
}
