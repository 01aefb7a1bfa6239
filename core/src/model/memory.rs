//! Memory models (spec §3.8): memory types, re-ingestion tiers, trust levels
//! and the stored memory item.

use serde::{Deserialize, Serialize};

use super::messages::TaintLevel;
use crate::Timestamp;

spec_enum! {
    /// Classification of a memory (§3.8).
    pub enum MemoryType {
        Fact => "fact",
        Episode => "episode",
        Preference => "preference",
        SkillNote => "skill_note",
        Decision => "decision",
        Foresight => "foresight",
        Profile => "profile",
    }
}

spec_enum! {
    /// Which ingestion lane a memory is in (§3.8).
    #[derive(Default)]
    pub enum ReingestionTier {
        #[default]
        Active => "active",
        LowReingestion => "low_reingestion",
    }
}

spec_enum! {
    /// How far a memory is trusted, and so who may modify it (§3.8).
    #[derive(Default)]
    pub enum TrustLevel {
        #[default]
        Working => "working",
        Verified => "verified",
        Constitutional => "constitutional",
    }
}

/// A stored memory (§3.8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryItem {
    pub memory_id: String,
    pub content: String,
    pub memory_type: MemoryType,
    #[serde(default)]
    pub reingestion_tier: ReingestionTier,
    #[serde(default)]
    pub trust_level: TrustLevel,
    /// Defaults to `owner` per §3.8 (unlike messages, which default to
    /// `external`), so it is spelled out rather than taken from `Default`.
    #[serde(default = "default_memory_taint")]
    pub taint: TaintLevel,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
    #[serde(default = "Timestamp::now")]
    pub updated_at: Timestamp,
    #[serde(default)]
    pub valid_from: Option<Timestamp>,
    #[serde(default)]
    pub valid_until: Option<Timestamp>,
    #[serde(default)]
    pub access_count: u64,
    #[serde(default)]
    pub last_accessed: Option<Timestamp>,
    #[serde(default)]
    pub semantic_tags: Vec<String>,
    #[serde(default)]
    pub entity_refs: Vec<String>,
    #[serde(default)]
    pub causal_refs: Vec<String>,
    #[serde(default)]
    pub temporal_next: Option<String>,
    #[serde(default)]
    pub temporal_prev: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// f64 so Python floats round-trip exactly through stored JSON.
    #[serde(default)]
    pub embedding: Option<Vec<f64>>,
    /// Input origin (`conversation_raw`, `memory_op`, ...). Open set; required
    /// so every memory states where it came from.
    pub source_kind: String,
}

fn default_memory_taint() -> TaintLevel {
    TaintLevel::Owner
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            MemoryType::ALL,
            &[
                (MemoryType::Fact, "fact"),
                (MemoryType::Episode, "episode"),
                (MemoryType::Preference, "preference"),
                (MemoryType::SkillNote, "skill_note"),
                (MemoryType::Decision, "decision"),
                (MemoryType::Foresight, "foresight"),
                (MemoryType::Profile, "profile"),
            ],
        );
        assert_enum_strings(
            ReingestionTier::ALL,
            &[
                (ReingestionTier::Active, "active"),
                (ReingestionTier::LowReingestion, "low_reingestion"),
            ],
        );
        assert_enum_strings(
            TrustLevel::ALL,
            &[
                (TrustLevel::Working, "working"),
                (TrustLevel::Verified, "verified"),
                (TrustLevel::Constitutional, "constitutional"),
            ],
        );
    }

    #[test]
    fn memory_item_defaults() {
        let m: MemoryItem = serde_json::from_value(json!({
            "memory_id": "m1", "content": "c", "memory_type": "fact",
            "source_kind": "memory_op"
        }))
        .unwrap();
        assert_eq!(m.reingestion_tier, ReingestionTier::Active);
        assert_eq!(m.trust_level, TrustLevel::Working);
        assert_eq!(m.taint, TaintLevel::Owner);
        assert_eq!(m.access_count, 0);
        assert_eq!(m.embedding, None);
        let v = round_trip(&m);
        for nullable in [
            "valid_from",
            "valid_until",
            "last_accessed",
            "temporal_next",
            "session_id",
            "embedding",
        ] {
            assert!(v[nullable].is_null(), "{nullable} serialises as null");
        }
    }

    #[test]
    fn memory_item_full_round_trip() {
        let t = Timestamp::parse("2026-01-15T10:00:00.5Z").unwrap();
        let m = MemoryItem {
            memory_id: "m1".into(),
            content: "prefers sources".into(),
            memory_type: MemoryType::Preference,
            reingestion_tier: ReingestionTier::LowReingestion,
            trust_level: TrustLevel::Verified,
            taint: TaintLevel::Auth,
            created_at: t,
            updated_at: t,
            valid_from: Some(t),
            valid_until: Some(t),
            access_count: 3,
            last_accessed: Some(t),
            semantic_tags: vec!["behavior:response/include_sources".into()],
            entity_refs: vec!["e1".into()],
            causal_refs: vec!["m0".into()],
            temporal_next: Some("m2".into()),
            temporal_prev: Some("m0".into()),
            session_id: Some("s1".into()),
            embedding: Some(vec![0.1, -0.25, 1e-7]),
            source_kind: "conversation_raw".into(),
        };
        let v = round_trip(&m);
        assert_eq!(v["reingestion_tier"], "low_reingestion");
    }

    #[test]
    fn naive_datetime_is_refused() {
        let r = serde_json::from_value::<MemoryItem>(json!({
            "memory_id": "m1", "content": "c", "memory_type": "fact",
            "source_kind": "memory_op", "created_at": "2026-01-15T10:00:00"
        }));
        assert!(r.is_err());
    }
}
