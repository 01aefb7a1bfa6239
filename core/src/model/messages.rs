//! Channel messages (spec §3.1): the taint classification every piece of
//! input carries, the raw channel message, and the owner-signed envelope.
//! The signature's canonical bytes are a projection (`crate::projections`),
//! not a concern of these types.

use serde::{Deserialize, Serialize};

use crate::{Base64Bytes, Timestamp};

spec_enum! {
    /// How far a message (or anything derived from it) is trusted (§3.1).
    /// `Default` is `external`: anything of unknown origin is untrusted.
    #[derive(Default)]
    pub enum TaintLevel {
        Owner => "owner",
        Auth => "auth",
        #[default]
        External => "external",
    }
}

/// A raw message from any channel (§3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelMessage {
    /// `"web"`, `"telegram"`, `"cli"`, `"webhook"` — open, since channels are
    /// pluggable.
    pub channel: String,
    pub sender_id: String,
    pub text: String,
    #[serde(default = "Timestamp::now")]
    pub timestamp: Timestamp,
    #[serde(default)]
    pub attachments: Vec<String>,
    pub reply_to: Option<String>,
}

/// A channel message with the owner's Ed25519 signature (§3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignedMessage {
    pub message: ChannelMessage,
    pub signature: Base64Bytes,
    pub nonce: String,
    #[serde(default)]
    pub taint: TaintLevel,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    fn message() -> ChannelMessage {
        ChannelMessage {
            channel: "web".into(),
            sender_id: "owner".into(),
            text: "hello | with | delimiters".into(),
            timestamp: Timestamp::parse("2026-01-15T10:00:00.123456Z").unwrap(),
            attachments: vec!["/tmp/a.png".into()],
            reply_to: Some("m-1".into()),
        }
    }

    #[test]
    fn taint_strings() {
        assert_enum_strings(
            TaintLevel::ALL,
            &[
                (TaintLevel::Owner, "owner"),
                (TaintLevel::Auth, "auth"),
                (TaintLevel::External, "external"),
            ],
        );
    }

    #[test]
    fn channel_message_round_trips_and_defaults() {
        let v = round_trip(&message());
        assert_eq!(v["timestamp"], "2026-01-15T10:00:00.123456Z");

        let before = Timestamp::now();
        let m: ChannelMessage =
            serde_json::from_value(json!({"channel": "cli", "sender_id": "u", "text": "hi"}))
                .unwrap();
        assert!(m.timestamp >= before, "timestamp defaults to now");
        assert!(m.attachments.is_empty());
        assert_eq!(m.reply_to, None);
        // Optional fields serialise as null, never skipped.
        assert!(serde_json::to_value(&m).unwrap()["reply_to"].is_null());
    }

    #[test]
    fn naive_timestamp_is_refused() {
        let r = serde_json::from_value::<ChannelMessage>(json!({
            "channel": "cli", "sender_id": "u", "text": "hi",
            "timestamp": "2026-01-15T10:00:00"
        }));
        assert!(r.is_err());
    }

    #[test]
    fn signed_message_round_trips_with_base64_signature() {
        let s = SignedMessage {
            message: message(),
            signature: Base64Bytes(vec![0, 1, 2, 0xff]),
            nonce: "n-1".into(),
            taint: TaintLevel::Owner,
        };
        let v = round_trip(&s);
        assert_eq!(v["signature"], "AAEC/w==");
        assert_eq!(v["taint"], "owner");
    }

    #[test]
    fn signed_message_taint_defaults_to_external() {
        let s: SignedMessage = serde_json::from_value(json!({
            "message": {"channel": "web", "sender_id": "u", "text": "x",
                        "timestamp": "2026-01-15T10:00:00Z"},
            "signature": "AAEC/w==",
            "nonce": "n"
        }))
        .unwrap();
        assert_eq!(s.taint, TaintLevel::External);
    }
}
