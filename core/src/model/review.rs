//! Batch review and decision models (spec §3.11): batched action proposals
//! and decisions, draft verdicts, decision chips, proactive suggestions and
//! autonomy-threshold proposals. The batch and autonomy-threshold approval
//! bindings are projections (`crate::projections`), not fields here.

use serde::{Deserialize, Serialize};

use super::ModelError;
use super::approval::ApprovalStrength;
use crate::Timestamp;

/// A domain-defined action key such as `archive` or `close_ticket` (§3.11).
/// The spec calls it a "string key", so it is a bare JSON string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BatchActionType(pub String);

impl BatchActionType {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

spec_enum! {
    /// The user's decision on a batch (§3.11).
    pub enum BatchActionVerdict {
        Approve => "approve",
        Decline => "decline",
        EditSelection => "edit_selection",
    }
}

spec_enum! {
    /// The user's decision on a draft (§3.11).
    pub enum DraftVerdict {
        Approve => "approve",
        Edit => "edit",
        Rephrase => "rephrase",
        Reject => "reject",
    }
}

spec_enum! {
    /// Deterministic risk of a suggestion (§3.11 `SuggestionProposal.risk_level`).
    pub enum RiskLevel {
        Low => "low",
        Medium => "medium",
        High => "high",
        Irreversible => "irreversible",
    }
}

spec_enum! {
    /// Risk of changing autonomy boundaries (§3.11; only medium or high).
    pub enum AutonomyRiskLevel {
        Medium => "medium",
        High => "high",
    }
}

spec_enum! {
    /// Whether a threshold change increases or decreases autonomy (§3.11).
    pub enum ThresholdDirection {
        Widen => "widen",
        Tighten => "tighten",
    }
}

spec_enum! {
    /// The user's answer to an autonomy-threshold proposal (§3.11).
    pub enum AutonomyThresholdDecision {
        Approve => "approve",
        Decline => "decline",
        TightenNow => "tighten_now",
    }
}

/// One item in a reviewed batch (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchActionItem {
    pub item_id: String,
    pub title: String,
    pub actor: String,
    pub occurred_at: Timestamp,
    pub reason: String,
    pub confidence: f64,
}

/// A proposed batch action (§3.11). `batch_id` is metadata, never the
/// authorization hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchProposal {
    pub batch_id: String,
    pub goal_id: String,
    pub action: String,
    pub items: Vec<BatchActionItem>,
    pub reason_summary: String,
    pub confidence_min: f64,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
}

/// The user's decision on a batch (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "BatchActionDecisionRaw")]
pub struct BatchActionDecision {
    pub verdict: BatchActionVerdict,
    /// Required (non-empty) for `edit_selection`; ignored otherwise.
    pub selected_item_ids: Vec<String>,
}

#[derive(Deserialize)]
struct BatchActionDecisionRaw {
    verdict: BatchActionVerdict,
    /// `null` is accepted as "none", as for an optional list.
    #[serde(default)]
    selected_item_ids: Option<Vec<String>>,
}

impl TryFrom<BatchActionDecisionRaw> for BatchActionDecision {
    type Error = ModelError;
    fn try_from(r: BatchActionDecisionRaw) -> Result<Self, ModelError> {
        let v = BatchActionDecision {
            verdict: r.verdict,
            selected_item_ids: r.selected_item_ids.unwrap_or_default(),
        };
        v.validate()?;
        Ok(v)
    }
}

impl BatchActionDecision {
    /// `edit_selection` must name at least one item; an empty selection would
    /// be a decline in disguise.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.verdict == BatchActionVerdict::EditSelection && self.selected_item_ids.is_empty() {
            return Err(ModelError::EditSelectionWithoutItems);
        }
        Ok(())
    }
}

/// A decision chip/button (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionOption {
    pub label: String,
    pub value: String,
    #[serde(default)]
    pub approval_tier: ApprovalStrength,
}

/// The outcome of a decision card (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionResult {
    #[serde(default)]
    pub selected_value: Option<String>,
    #[serde(default)]
    pub freetext: Option<String>,
    pub approved: bool,
}

/// A proactive "what next" card (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuggestionProposal {
    pub suggestion_id: String,
    pub scope_id: String,
    pub source: String,
    pub intent: String,
    pub rationale: String,
    pub risk_level: RiskLevel,
    #[serde(default)]
    pub proposed_work_item_id: Option<String>,
    pub cooldown_key: String,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
}

/// One proposed threshold change (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutonomyThresholdChange {
    pub key: String,
    pub current_value: String,
    pub proposed_value: String,
    pub direction: ThresholdDirection,
}

/// An explicit autonomy-tuning request (§3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutonomyThresholdProposal {
    pub proposal_id: String,
    pub scope_id: String,
    #[serde(default)]
    pub goal_id: Option<String>,
    pub changes: Vec<AutonomyThresholdChange>,
    pub sample_size: u64,
    pub correction_rate: f64,
    pub evidence_window: String,
    pub rationale: String,
    pub risk_level: AutonomyRiskLevel,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            BatchActionVerdict::ALL,
            &[
                (BatchActionVerdict::Approve, "approve"),
                (BatchActionVerdict::Decline, "decline"),
                (BatchActionVerdict::EditSelection, "edit_selection"),
            ],
        );
        assert_enum_strings(
            DraftVerdict::ALL,
            &[
                (DraftVerdict::Approve, "approve"),
                (DraftVerdict::Edit, "edit"),
                (DraftVerdict::Rephrase, "rephrase"),
                (DraftVerdict::Reject, "reject"),
            ],
        );
        assert_enum_strings(
            RiskLevel::ALL,
            &[
                (RiskLevel::Low, "low"),
                (RiskLevel::Medium, "medium"),
                (RiskLevel::High, "high"),
                (RiskLevel::Irreversible, "irreversible"),
            ],
        );
        assert_enum_strings(
            AutonomyRiskLevel::ALL,
            &[
                (AutonomyRiskLevel::Medium, "medium"),
                (AutonomyRiskLevel::High, "high"),
            ],
        );
        assert!(serde_json::from_value::<AutonomyRiskLevel>(json!("low")).is_err());
        assert_enum_strings(
            ThresholdDirection::ALL,
            &[
                (ThresholdDirection::Widen, "widen"),
                (ThresholdDirection::Tighten, "tighten"),
            ],
        );
        assert_enum_strings(
            AutonomyThresholdDecision::ALL,
            &[
                (AutonomyThresholdDecision::Approve, "approve"),
                (AutonomyThresholdDecision::Decline, "decline"),
                (AutonomyThresholdDecision::TightenNow, "tighten_now"),
            ],
        );
    }

    #[test]
    fn batch_action_type_is_a_bare_string() {
        assert_eq!(
            round_trip(&BatchActionType("archive".into())),
            json!("archive")
        );
    }

    #[test]
    fn batch_proposal_round_trip() {
        let t = Timestamp::parse("2026-01-15T10:00:00Z").unwrap();
        let p = BatchProposal {
            batch_id: "b1".into(),
            goal_id: "g1".into(),
            action: "archive".into(),
            items: vec![BatchActionItem {
                item_id: "i1".into(),
                title: "Newsletter".into(),
                actor: "news@example.com".into(),
                occurred_at: t,
                reason: "unread for 30 days".into(),
                confidence: 0.93,
            }],
            reason_summary: "old newsletters".into(),
            confidence_min: 0.93,
            created_at: t,
        };
        round_trip(&p);
        let mut j = serde_json::to_value(&p).unwrap();
        j["items"][0]["occurred_at"] = json!("2026-01-15T10:00:00");
        assert!(
            serde_json::from_value::<BatchProposal>(j).is_err(),
            "naive datetime"
        );
    }

    #[test]
    fn batch_action_decision_rules() {
        for j in [
            json!({"verdict": "approve"}),
            json!({"verdict": "decline", "selected_item_ids": []}),
            json!({"verdict": "approve", "selected_item_ids": null}),
            json!({"verdict": "edit_selection", "selected_item_ids": ["i1", "i3"]}),
        ] {
            let d: BatchActionDecision = serde_json::from_value(j).unwrap();
            round_trip(&d);
        }
        for j in [
            json!({"verdict": "edit_selection"}),
            json!({"verdict": "edit_selection", "selected_item_ids": null}),
            json!({"verdict": "edit_selection", "selected_item_ids": []}),
        ] {
            assert_refused::<BatchActionDecision>(j, &ModelError::EditSelectionWithoutItems);
        }
        let d = BatchActionDecision {
            verdict: BatchActionVerdict::EditSelection,
            selected_item_ids: vec![],
        };
        assert_eq!(d.validate(), Err(ModelError::EditSelectionWithoutItems));
    }

    #[test]
    fn decisions_and_suggestions_round_trip() {
        let o: DecisionOption =
            serde_json::from_value(json!({"label": "Archive", "value": "archive"})).unwrap();
        assert_eq!(round_trip(&o)["approval_tier"], "tap");
        let r: DecisionResult = serde_json::from_value(json!({"approved": true})).unwrap();
        assert!(round_trip(&r)["freetext"].is_null());
        let s: SuggestionProposal = serde_json::from_value(json!({
            "suggestion_id": "s1", "scope_id": "owner", "source": "idle_heartbeat",
            "intent": "Clean up inbox", "rationale": "200 unread", "risk_level": "irreversible",
            "cooldown_key": "inbox-cleanup"
        }))
        .unwrap();
        assert!(round_trip(&s)["proposed_work_item_id"].is_null());
    }

    #[test]
    fn autonomy_threshold_proposal_round_trip() {
        let p: AutonomyThresholdProposal = serde_json::from_value(json!({
            "proposal_id": "p1", "scope_id": "owner", "goal_id": null,
            "changes": [{"key": "batch_review.default_size", "current_value": "10",
                         "proposed_value": "25", "direction": "widen"}],
            "sample_size": 50, "correction_rate": 0.02,
            "evidence_window": "last 50 batches / 14 days", "rationale": "few corrections",
            "risk_level": "medium", "created_at": "2026-01-15T10:00:00Z"
        }))
        .unwrap();
        let v = round_trip(&p);
        assert_eq!(v["changes"][0]["direction"], "widen");
    }
}
