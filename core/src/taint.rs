//! Message taint (spec §3.1, §5.1 step 2, §5.12), the pure decision.
//!
//! * a valid owner signature over `{text, timestamp, nonce}`, a timestamp
//!   within ±5 minutes of now, and a nonce never seen before → `owner`;
//! * a valid signature that is stale or whose nonce was already used →
//!   `external`, flagged as a replay attempt (the caller audits it);
//! * an invalid signature → `external` (never downgraded to `auth`: a forged
//!   signature is evidence of an attacker, not of the channel identity);
//! * no signature, known channel identity (e.g. the configured Telegram chat)
//!   → `auth`;
//! * anything else → `external`.
//!
//! The caller verifies the signature, checks and records the nonce (only for
//! valid, fresh signatures, so forged messages cannot burn nonces) and passes
//! the evidence here.

use chrono::Duration;

use crate::Timestamp;
use crate::model::messages::TaintLevel;

/// How far a signed message's timestamp may be from now, either way.
pub fn freshness_window() -> Duration {
    Duration::minutes(5)
}

/// What the caller established about a signed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureEvidence {
    pub signature_valid: bool,
    pub timestamp: Timestamp,
    /// The nonce was unused and is now recorded.
    pub nonce_fresh: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExternalReason {
    Unsigned,
    BadSignature,
    /// Valid signature, timestamp outside the freshness window.
    Stale,
    /// Valid signature, nonce already used.
    Replayed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    Owner,
    Auth,
    External(ExternalReason),
}

impl Classification {
    pub fn taint(&self) -> TaintLevel {
        match self {
            Classification::Owner => TaintLevel::Owner,
            Classification::Auth => TaintLevel::Auth,
            Classification::External(_) => TaintLevel::External,
        }
    }

    /// Whether this must be audited as `replay_attempt` (§5.1 step 2).
    pub fn is_replay_attempt(&self) -> bool {
        matches!(
            self,
            Classification::External(ExternalReason::Stale | ExternalReason::Replayed)
        )
    }
}

/// Whether `ts` lies within the freshness window around `now`.
pub fn is_fresh(ts: Timestamp, now: Timestamp) -> bool {
    let w = freshness_window();
    ts >= now.minus(w) && ts <= now.plus(w)
}

pub fn classify(
    signed: Option<SignatureEvidence>,
    now: Timestamp,
    known_identity: bool,
) -> Classification {
    match signed {
        Some(ev) if !ev.signature_valid => Classification::External(ExternalReason::BadSignature),
        Some(ev) if !is_fresh(ev.timestamp, now) => Classification::External(ExternalReason::Stale),
        Some(ev) if !ev.nonce_fresh => Classification::External(ExternalReason::Replayed),
        Some(_) => Classification::Owner,
        None if known_identity => Classification::Auth,
        None => Classification::External(ExternalReason::Unsigned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let now = Timestamp::parse("2026-11-22T12:00:00Z").unwrap();
        let at = |s: &str| Timestamp::parse(s).unwrap();
        let ev = |valid: bool, ts: Timestamp, fresh: bool| {
            Some(SignatureEvidence {
                signature_valid: valid,
                timestamp: ts,
                nonce_fresh: fresh,
            })
        };
        use Classification::*;
        use ExternalReason::*;
        let cases = [
            (ev(true, now, true), false, Owner),
            (ev(true, now, true), true, Owner),
            (ev(true, at("2026-11-22T11:55:00Z"), true), false, Owner), // exactly -5 min
            (ev(true, at("2026-11-22T12:05:00Z"), true), false, Owner), // exactly +5 min
            (
                ev(true, at("2026-11-22T11:54:59Z"), true),
                true,
                External(Stale),
            ),
            (
                ev(true, at("2026-11-22T12:05:01Z"), true),
                false,
                External(Stale),
            ),
            (ev(true, now, false), true, External(Replayed)),
            (ev(false, now, true), true, External(BadSignature)),
            (
                ev(false, at("2020-01-01T00:00:00Z"), false),
                true,
                External(BadSignature),
            ),
            (None, true, Auth),
            (None, false, External(Unsigned)),
        ];
        for (evidence, known, want) in cases {
            assert_eq!(
                classify(evidence, now, known),
                want,
                "{evidence:?} known={known}"
            );
        }
        assert!(External(Replayed).is_replay_attempt());
        assert!(External(Stale).is_replay_attempt());
        assert!(!External(BadSignature).is_replay_attempt());
        assert_eq!(Owner.taint(), TaintLevel::Owner);
        assert_eq!(Auth.taint(), TaintLevel::Auth);
        assert_eq!(External(Unsigned).taint(), TaintLevel::External);
    }
}
