//! Context models (spec §3.5): zones, profiles, items, subscriptions, budget.
//! These describe the harness's bookkeeping; the agent never manipulates them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ModelError;
use super::messages::TaintLevel;
use crate::Timestamp;

spec_enum! {
    /// The four zones of the context window (§3.5).
    pub enum ContextZone {
        System => "system",
        Chronicle => "chronicle",
        Memory => "memory",
        Workspace => "workspace",
    }
}

spec_enum! {
    /// The content type of a context item; drives its rendered metadata tag
    /// (§3.5 `ContextItem.kind`).
    pub enum ContextItemKind {
        Message => "message",
        ToolResult => "tool_result",
        Memory => "memory",
        Plan => "plan",
        ExecutionResult => "execution_result",
        Subscription => "subscription",
        System => "system",
    }
}

spec_enum! {
    /// What a subscription points at (§3.5 `ContextSubscription.sub_type`).
    pub enum SubscriptionType {
        File => "file",
        FileLines => "file_lines",
        MemoryQuery => "memory_query",
    }
}

/// A named zone-budget allocation (§3.5). Each pct is in [0, 1] and their sum
/// is at most 0.80, leaving at least 20% headroom of the allocable budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ContextProfileRaw")]
pub struct ContextProfile {
    pub name: String,
    pub chronicle_pct: f64,
    pub memory_pct: f64,
    pub workspace_pct: f64,
}

#[derive(Deserialize)]
struct ContextProfileRaw {
    #[serde(default)]
    name: String,
    chronicle_pct: f64,
    memory_pct: f64,
    workspace_pct: f64,
}

impl TryFrom<ContextProfileRaw> for ContextProfile {
    type Error = ModelError;
    fn try_from(r: ContextProfileRaw) -> Result<Self, ModelError> {
        let p = ContextProfile {
            name: r.name,
            chronicle_pct: r.chronicle_pct,
            memory_pct: r.memory_pct,
            workspace_pct: r.workspace_pct,
        };
        p.validate()?;
        Ok(p)
    }
}

/// Maximum combined share of the allocable budget the three zones may claim.
pub const MAX_PROFILE_SUM: f64 = 0.80;

impl ContextProfile {
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [
            ("chronicle_pct", self.chronicle_pct),
            ("memory_pct", self.memory_pct),
            ("workspace_pct", self.workspace_pct),
        ] {
            // `contains` is false for NaN, so NaN is refused too.
            if !(0.0..=1.0).contains(&value) {
                return Err(ModelError::ProfilePctOutOfRange {
                    profile: self.name.clone(),
                    field,
                    value,
                });
            }
        }
        let sum = self.chronicle_pct + self.memory_pct + self.workspace_pct;
        // A small epsilon keeps 0.45+0.20+0.15 (= 0.8000000000000002) valid.
        if sum > MAX_PROFILE_SUM + 1e-9 {
            return Err(ModelError::ProfileSumTooHigh {
                profile: self.name.clone(),
                sum,
            });
        }
        Ok(())
    }
}

impl ContextProfile {
    /// A named profile (validate before use if the numbers are not literals).
    pub fn new(
        name: impl Into<String>,
        chronicle_pct: f64,
        memory_pct: f64,
        workspace_pct: f64,
    ) -> Self {
        ContextProfile {
            name: name.into(),
            chronicle_pct,
            memory_pct,
            workspace_pct,
        }
    }

    /// The four default profiles of §11 (`context.profiles`), keyed by name.
    pub fn defaults() -> BTreeMap<String, ContextProfile> {
        [
            ContextProfile::new("conversation", 0.45, 0.20, 0.15),
            ContextProfile::new("coding", 0.20, 0.20, 0.40),
            ContextProfile::new("research", 0.20, 0.40, 0.20),
            ContextProfile::new("support", 0.40, 0.25, 0.15),
        ]
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect()
    }
}

/// One block in the context window (§3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextItem {
    pub ctx_id: String,
    pub zone: ContextZone,
    pub content: String,
    pub token_count: u64,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
    pub turn_number: u64,
    pub source: String,
    /// Required: taint is propagated from the source, never assumed.
    pub taint: TaintLevel,
    pub kind: ContextItemKind,
    #[serde(default = "default_relevance")]
    pub relevance: f64,
    #[serde(default)]
    pub masked: bool,
    #[serde(default)]
    pub pinned: bool,
}

fn default_relevance() -> f64 {
    1.0
}

/// A live resource re-materialised on each render (§3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextSubscription {
    pub sub_id: String,
    pub sub_type: SubscriptionType,
    pub target: String,
    /// "Typically workspace", so that is the default.
    #[serde(default = "default_subscription_zone")]
    pub zone: ContextZone,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
    pub turn_created: u64,
    /// Empty until first materialised.
    #[serde(default)]
    pub content_hash: String,
    #[serde(default = "default_true")]
    pub active: bool,
    #[serde(default)]
    pub token_count: u64,
}

/// A scope's context subscriptions as persisted (issue #18, §5.1.3 step
/// 4): restored when the scope's context is rehydrated after a restart and
/// materialised at its next render.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopeSubscriptions {
    pub scope_id: String,
    pub subscriptions: Vec<ContextSubscription>,
}

fn default_subscription_zone() -> ContextZone {
    ContextZone::Workspace
}

fn default_true() -> bool {
    true
}

/// Context-window budget settings (§3.5), with the §11 defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBudget {
    #[serde(default = "default_total")]
    pub total: u64,
    #[serde(default = "default_system_max")]
    pub system_max: u64,
    #[serde(default = "default_skill_metadata_budget_pct")]
    pub skill_metadata_budget_pct: f64,
    #[serde(default = "default_eviction_threshold_pct")]
    pub eviction_threshold_pct: f64,
    #[serde(default = "default_scorer_threshold_pct")]
    pub scorer_threshold_pct: f64,
    #[serde(default = "default_max_subscription_tokens")]
    pub max_subscription_tokens: u64,
    #[serde(default = "default_subscription_ttl_turns")]
    pub subscription_ttl_turns: u64,
    #[serde(default = "default_observation_mask_after_turns")]
    pub observation_mask_after_turns: u64,
    /// Given profiles replace the defaults wholesale (no merge), as a
    /// Pydantic field default would.
    #[serde(default = "ContextProfile::defaults")]
    pub profiles: BTreeMap<String, ContextProfile>,
    #[serde(default = "default_profile_name")]
    pub default_profile: String,
}

fn default_total() -> u64 {
    180_000
}
fn default_system_max() -> u64 {
    8_000
}
fn default_skill_metadata_budget_pct() -> f64 {
    0.02
}
fn default_eviction_threshold_pct() -> f64 {
    0.80
}
fn default_scorer_threshold_pct() -> f64 {
    0.90
}
fn default_max_subscription_tokens() -> u64 {
    2_000
}
fn default_subscription_ttl_turns() -> u64 {
    10
}
fn default_observation_mask_after_turns() -> u64 {
    5
}
fn default_profile_name() -> String {
    "conversation".to_string()
}

impl Default for TokenBudget {
    fn default() -> Self {
        TokenBudget {
            total: default_total(),
            system_max: default_system_max(),
            skill_metadata_budget_pct: default_skill_metadata_budget_pct(),
            eviction_threshold_pct: default_eviction_threshold_pct(),
            scorer_threshold_pct: default_scorer_threshold_pct(),
            max_subscription_tokens: default_max_subscription_tokens(),
            subscription_ttl_turns: default_subscription_ttl_turns(),
            observation_mask_after_turns: default_observation_mask_after_turns(),
            profiles: ContextProfile::defaults(),
            default_profile: default_profile_name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            ContextZone::ALL,
            &[
                (ContextZone::System, "system"),
                (ContextZone::Chronicle, "chronicle"),
                (ContextZone::Memory, "memory"),
                (ContextZone::Workspace, "workspace"),
            ],
        );
        assert_enum_strings(
            ContextItemKind::ALL,
            &[
                (ContextItemKind::Message, "message"),
                (ContextItemKind::ToolResult, "tool_result"),
                (ContextItemKind::Memory, "memory"),
                (ContextItemKind::Plan, "plan"),
                (ContextItemKind::ExecutionResult, "execution_result"),
                (ContextItemKind::Subscription, "subscription"),
                (ContextItemKind::System, "system"),
            ],
        );
        assert_enum_strings(
            SubscriptionType::ALL,
            &[
                (SubscriptionType::File, "file"),
                (SubscriptionType::FileLines, "file_lines"),
                (SubscriptionType::MemoryQuery, "memory_query"),
            ],
        );
    }

    #[test]
    fn profile_validation() {
        for p in ContextProfile::defaults().values() {
            assert_eq!(p.validate(), Ok(()), "{}", p.name);
            round_trip(p);
        }
        assert_refused::<ContextProfile>(
            json!({"name": "x", "chronicle_pct": 1.5, "memory_pct": 0.0, "workspace_pct": 0.0}),
            &ModelError::ProfilePctOutOfRange {
                profile: "x".into(),
                field: "chronicle_pct",
                value: 1.5,
            },
        );
        assert_refused::<ContextProfile>(
            json!({"name": "x", "chronicle_pct": 0.0, "memory_pct": -0.1, "workspace_pct": 0.0}),
            &ModelError::ProfilePctOutOfRange {
                profile: "x".into(),
                field: "memory_pct",
                value: -0.1,
            },
        );
        let err = ContextProfile::new("x", 0.5, 0.2, 0.2)
            .validate()
            .unwrap_err();
        assert!(
            matches!(err, ModelError::ProfileSumTooHigh { .. }),
            "{err:?}"
        );
        // Boundary: exactly 0.80 (with float noise) and the 1.0 edge are fine.
        assert_eq!(ContextProfile::new("x", 0.8, 0.0, 0.0).validate(), Ok(()));
        assert_eq!(ContextProfile::new("x", 0.0, 0.0, 0.0).validate(), Ok(()));
    }

    #[test]
    fn token_budget_defaults() {
        let b: TokenBudget = serde_json::from_value(json!({})).unwrap();
        assert_eq!(b, TokenBudget::default());
        assert_eq!(b.total, 180_000);
        assert_eq!(b.system_max, 8_000);
        assert_eq!(b.skill_metadata_budget_pct, 0.02);
        assert_eq!(b.eviction_threshold_pct, 0.80);
        assert_eq!(b.scorer_threshold_pct, 0.90);
        assert_eq!(b.max_subscription_tokens, 2_000);
        assert_eq!(b.subscription_ttl_turns, 10);
        assert_eq!(b.observation_mask_after_turns, 5);
        assert_eq!(b.default_profile, "conversation");
        let names: Vec<&str> = b.profiles.keys().map(String::as_str).collect();
        assert_eq!(names, ["coding", "conversation", "research", "support"]);
        assert_eq!(
            b.profiles["coding"],
            ContextProfile::new("coding", 0.20, 0.20, 0.40)
        );
        assert_eq!(b.profiles["research"].memory_pct, 0.40);
        assert_eq!(b.profiles["support"].chronicle_pct, 0.40);
        assert_eq!(b.profiles["conversation"].chronicle_pct, 0.45);
        round_trip(&b);
    }

    #[test]
    fn token_budget_refuses_invalid_profile() {
        let r = serde_json::from_value::<TokenBudget>(json!({
            "profiles": {"greedy": {"name": "greedy", "chronicle_pct": 0.5,
                                    "memory_pct": 0.3, "workspace_pct": 0.2}}
        }));
        assert!(r.is_err());
    }

    #[test]
    fn context_item_round_trip_and_defaults() {
        let i: ContextItem = serde_json::from_value(json!({
            "ctx_id": "c1", "zone": "chronicle", "content": "[owner] u: hi",
            "token_count": 7, "turn_number": 3, "source": "channel:web",
            "taint": "owner", "kind": "message"
        }))
        .unwrap();
        assert_eq!(i.relevance, 1.0);
        assert!(!i.masked && !i.pinned);
        let v = round_trip(&i);
        assert_eq!(v["kind"], "message");
        let r = serde_json::from_value::<ContextItem>(json!({
            "ctx_id": "c1", "zone": "chronicle", "content": "x", "token_count": 1,
            "turn_number": 1, "source": "s", "taint": "owner", "kind": "message",
            "created_at": "2026-01-15T10:00:00"
        }));
        assert!(r.is_err(), "naive datetime refused");
    }

    #[test]
    fn context_subscription_round_trip_and_defaults() {
        let s: ContextSubscription = serde_json::from_value(json!({
            "sub_id": "s1", "sub_type": "file_lines", "target": "auth.py:10-45",
            "turn_created": 8
        }))
        .unwrap();
        assert_eq!(s.zone, ContextZone::Workspace);
        assert!(s.active);
        assert_eq!(s.token_count, 0);
        round_trip(&s);
    }
}
