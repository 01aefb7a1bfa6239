//! Session models (spec §3.9): the permanent Stream session and ephemeral
//! side sessions.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

spec_enum! {
    /// Which kind of session (§3.9).
    pub enum SessionType {
        Stream => "stream",
        Side => "side",
    }
}

/// A conversation session (§3.9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub session_id: String,
    pub session_type: SessionType,
    pub title: String,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
    #[serde(default = "Timestamp::now")]
    pub last_active: Timestamp,
    #[serde(default)]
    pub turn_count: u64,
    /// A session is active from creation until closed.
    #[serde(default = "default_true")]
    pub active: bool,
    #[serde(default)]
    pub pinned_ctx_ids: Vec<String>,
}

fn default_true() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            SessionType::ALL,
            &[(SessionType::Stream, "stream"), (SessionType::Side, "side")],
        );
    }

    #[test]
    fn session_defaults_and_round_trip() {
        let s: Session = serde_json::from_value(
            json!({"session_id": "s1", "session_type": "side", "title": "Research"}),
        )
        .unwrap();
        assert_eq!(s.turn_count, 0);
        assert!(s.active);
        assert!(s.pinned_ctx_ids.is_empty());
        let mut s = s;
        s.pinned_ctx_ids.push("c1".into());
        round_trip(&s);
    }

    #[test]
    fn naive_datetime_is_refused() {
        let r = serde_json::from_value::<Session>(json!({
            "session_id": "s1", "session_type": "stream", "title": "t",
            "last_active": "2026-01-15 10:00:00"
        }));
        assert!(r.is_err());
    }
}
