//! Approval models (spec §3.6): scopes, verdicts, the user's decision and
//! the signed approval token. The signing payload and the plan / spawn-policy
//! hashes are projections (`crate::projections`); this file owns only shapes
//! and the one structural rule (standing tokens bind a spawn policy).

use serde::{Deserialize, Serialize};

use super::{JsonObject, ModelError};
use crate::{Base64Bytes, Timestamp};

spec_enum! {
    /// What an approval covers (§3.6).
    pub enum ApprovalScope {
        FullPlan => "full_plan",
        SingleStep => "single_step",
        StepRange => "step_range",
        ToolType => "tool_type",
        SkillInstall => "skill_install",
        CredentialUse => "credential_use",
        Budget => "budget",
        SelfUpdate => "self_update",
        ConnectionAct => "connection_act",
        ConnectionManage => "connection_manage",
        AutonomyThreshold => "autonomy_threshold",
        Standing => "standing",
    }
}

spec_enum! {
    /// The user's decision on an approval request (§3.6).
    pub enum ApprovalVerdict {
        Approved => "approved",
        Declined => "declined",
        EditRequested => "edit_requested",
        Conditional => "conditional",
    }
}

spec_enum! {
    /// User-verification strength (the spec's `Literal["tap"]`). This spec has
    /// exactly one level; it is still an enum so a stronger level can be added
    /// without a shape change, and so any other string is refused.
    #[derive(Default)]
    pub enum ApprovalStrength {
        #[default]
        Tap => "tap",
    }
}

/// The signed `conditions` key naming the channel the owner approved on
/// (`web`, `telegram`, `cli`), set by the ApprovalEngine — never the client.
pub const APPROVED_VIA_KEY: &str = "approved_via";

/// The key a standing token's `conditions` must carry (§3.6).
pub const SPAWN_POLICY_HASH_KEY: &str = "spawn_policy_hash";

/// One paused tool call of a background work item, as the owner approves it
/// (§5.2.1 c2, §4.24 deferred approvals). A token for it (scope
/// `single_step`) binds the call's exact name and arguments *and* the plan
/// hash of the work item it belongs to, so it authorises neither another
/// call nor the same call under a changed plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallApproval {
    pub work_item_id: String,
    /// `plan_hash` of the work item when the call paused.
    pub plan_hash: String,
    /// The attempt the call belongs to.
    pub attempt: u64,
    /// The model's id for the call.
    pub call_id: String,
    pub tool_name: String,
    /// The arguments as the model produced them (parsed JSON).
    pub arguments: serde_json::Value,
}

/// The subject of a `[Just this once]` permission escalation (§5.10.2): one
/// script call of one work item, with the connection permissions it gets for
/// that call only. Its token (scope `connection_act`, always
/// `max_executions = 1`) binds all of it, so it authorises neither another
/// call, nor other arguments, nor more permissions, nor a second run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectionPermissionApproval {
    pub connection_id: String,
    /// The permissions beyond the connection's grant, granted once.
    pub permissions: Vec<String>,
    pub work_item_id: String,
    /// The execution the script runs as (fresh per tool call).
    pub execution_id: String,
    pub skill: String,
    pub script: String,
    /// The script's arguments as the model produced them.
    pub arguments: serde_json::Value,
}

/// What a change-set approval does to the owner's workspace (issue #15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangesAction {
    /// Write a verified change set into the real workspace.
    Apply,
    /// Reverse an apply from its backups (within the undo window).
    Undo,
}

impl ChangesAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangesAction::Apply => "apply",
            ChangesAction::Undo => "undo",
        }
    }
}

/// The subject of an apply (or undo) approval. A token for it (scope
/// `single_step`) binds the work item, its plan hash and the SHA-256 of the
/// exact stored change set (`changes.json`), so it authorises neither another
/// change set nor the same one under a changed plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangesApproval {
    pub work_item_id: String,
    pub plan_hash: String,
    pub action: ChangesAction,
    pub changes_sha256: String,
}

/// A decision collected by a channel before a token is minted (§3.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    pub verdict: ApprovalVerdict,
    #[serde(default)]
    pub approval_strength: ApprovalStrength,
    #[serde(default)]
    pub conditions: JsonObject,
}

/// An owner-signed approval (§3.6). `executions_used` and `execution_nonces`
/// are runtime-managed and outside the signature; everything else is signed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ApprovalTokenRaw")]
pub struct ApprovalToken {
    pub token_id: String,
    pub plan_hash: String,
    pub work_item_id: String,
    pub scope: ApprovalScope,
    pub verdict: ApprovalVerdict,
    pub signature: Base64Bytes,
    pub issued_at: Timestamp,
    pub expires_at: Timestamp,
    pub nonce: String,
    pub approval_strength: ApprovalStrength,
    pub conditions: JsonObject,
    pub executions_used: u64,
    pub max_executions: u64,
    pub execution_nonces: Vec<String>,
}

#[derive(Deserialize)]
struct ApprovalTokenRaw {
    token_id: String,
    plan_hash: String,
    work_item_id: String,
    scope: ApprovalScope,
    verdict: ApprovalVerdict,
    signature: Base64Bytes,
    issued_at: Timestamp,
    expires_at: Timestamp,
    nonce: String,
    #[serde(default)]
    approval_strength: ApprovalStrength,
    #[serde(default)]
    conditions: JsonObject,
    #[serde(default)]
    executions_used: u64,
    #[serde(default = "default_max_executions")]
    max_executions: u64,
    #[serde(default)]
    execution_nonces: Vec<String>,
}

fn default_max_executions() -> u64 {
    1
}

impl TryFrom<ApprovalTokenRaw> for ApprovalToken {
    type Error = ModelError;
    fn try_from(r: ApprovalTokenRaw) -> Result<Self, ModelError> {
        let v = ApprovalToken {
            token_id: r.token_id,
            plan_hash: r.plan_hash,
            work_item_id: r.work_item_id,
            scope: r.scope,
            verdict: r.verdict,
            signature: r.signature,
            issued_at: r.issued_at,
            expires_at: r.expires_at,
            nonce: r.nonce,
            approval_strength: r.approval_strength,
            conditions: r.conditions,
            executions_used: r.executions_used,
            max_executions: r.max_executions,
            execution_nonces: r.execution_nonces,
        };
        v.validate()?;
        Ok(v)
    }
}

impl ApprovalToken {
    /// §3.6: a `standing` token's `conditions` must carry a non-empty string
    /// `spawn_policy_hash`, binding it to one class of spawned tasks. Whether
    /// the hash is *right* is the approval engine's check, not the model's.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.scope == ApprovalScope::Standing {
            let bound = self
                .conditions
                .get(SPAWN_POLICY_HASH_KEY)
                .and_then(|v| v.as_str())
                .is_some_and(|s| !s.is_empty());
            if !bound {
                return Err(ModelError::StandingTokenMissingSpawnPolicyHash {
                    token_id: self.token_id.clone(),
                });
            }
        }
        Ok(())
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
            ApprovalScope::ALL,
            &[
                (ApprovalScope::FullPlan, "full_plan"),
                (ApprovalScope::SingleStep, "single_step"),
                (ApprovalScope::StepRange, "step_range"),
                (ApprovalScope::ToolType, "tool_type"),
                (ApprovalScope::SkillInstall, "skill_install"),
                (ApprovalScope::CredentialUse, "credential_use"),
                (ApprovalScope::Budget, "budget"),
                (ApprovalScope::SelfUpdate, "self_update"),
                (ApprovalScope::ConnectionAct, "connection_act"),
                (ApprovalScope::ConnectionManage, "connection_manage"),
                (ApprovalScope::AutonomyThreshold, "autonomy_threshold"),
                (ApprovalScope::Standing, "standing"),
            ],
        );
        assert_enum_strings(
            ApprovalVerdict::ALL,
            &[
                (ApprovalVerdict::Approved, "approved"),
                (ApprovalVerdict::Declined, "declined"),
                (ApprovalVerdict::EditRequested, "edit_requested"),
                (ApprovalVerdict::Conditional, "conditional"),
            ],
        );
        assert_enum_strings(ApprovalStrength::ALL, &[(ApprovalStrength::Tap, "tap")]);
        assert!(serde_json::from_value::<ApprovalStrength>(json!("biometric")).is_err());
    }

    /// A full-plan token with non-default runtime state.
    fn token() -> ApprovalToken {
        ApprovalToken {
            token_id: "tok-1".into(),
            plan_hash: "ab".repeat(32),
            work_item_id: "w-1".into(),
            scope: ApprovalScope::FullPlan,
            verdict: ApprovalVerdict::Approved,
            signature: Base64Bytes((0u8..64).collect()),
            issued_at: Timestamp::parse("2026-01-15T10:00:00Z").unwrap(),
            expires_at: Timestamp::parse("2026-01-15T11:00:00.000001Z").unwrap(),
            nonce: "tn-1".into(),
            approval_strength: ApprovalStrength::Tap,
            conditions: JsonObject::new(),
            executions_used: 2,
            max_executions: 5,
            execution_nonces: vec!["en-1".into(), "en-2".into()],
        }
    }

    #[test]
    fn approval_decision_round_trips_and_defaults() {
        let d: ApprovalDecision =
            serde_json::from_value(json!({"verdict": "conditional"})).unwrap();
        assert_eq!(d.approval_strength, ApprovalStrength::Tap);
        assert!(d.conditions.is_empty());
        let mut d = d;
        d.conditions.insert("max_usd".into(), json!(25.0));
        let v = round_trip(&d);
        assert_eq!(v["approval_strength"], "tap");
    }

    #[test]
    fn approval_token_round_trips() {
        let v = round_trip(&token());
        assert_eq!(v["executions_used"], 2);
        assert_eq!(v["execution_nonces"], json!(["en-1", "en-2"]));
        assert!(v["signature"].is_string());
        assert_eq!(v["expires_at"], "2026-01-15T11:00:00.000001Z");
    }

    #[test]
    fn approval_token_defaults() {
        let t: ApprovalToken = serde_json::from_value(json!({
            "token_id": "t", "plan_hash": "h", "work_item_id": "w", "scope": "full_plan",
            "verdict": "approved", "signature": "AAEC", "issued_at": "2026-01-15T10:00:00Z",
            "expires_at": "2026-01-15T11:00:00Z", "nonce": "n"
        }))
        .unwrap();
        assert_eq!(t.max_executions, 1);
        assert_eq!(t.executions_used, 0);
        assert!(t.execution_nonces.is_empty());
        assert_eq!(t.approval_strength, ApprovalStrength::Tap);
    }

    #[test]
    fn approval_token_refuses_naive_datetimes_and_bad_base64() {
        let mut v = serde_json::to_value(token()).unwrap();
        v["expires_at"] = json!("2026-01-15T11:00:00");
        assert!(serde_json::from_value::<ApprovalToken>(v).is_err());
        let mut v = serde_json::to_value(token()).unwrap();
        v["signature"] = json!([1, 2, 3]);
        assert!(serde_json::from_value::<ApprovalToken>(v).is_err());
    }

    #[test]
    fn standing_token_needs_spawn_policy_hash() {
        let mut t = token();
        t.scope = ApprovalScope::Standing;
        let err = ModelError::StandingTokenMissingSpawnPolicyHash {
            token_id: "tok-1".into(),
        };
        assert_eq!(t.validate(), Err(err.clone()));
        assert_refused::<ApprovalToken>(serde_json::to_value(&t).unwrap(), &err);

        t.conditions.insert(SPAWN_POLICY_HASH_KEY.into(), json!(""));
        assert_eq!(t.validate(), Err(err.clone()));
        t.conditions.insert(SPAWN_POLICY_HASH_KEY.into(), json!(42));
        assert_eq!(t.validate(), Err(err));

        t.conditions
            .insert(SPAWN_POLICY_HASH_KEY.into(), json!("cd".repeat(32)));
        assert_eq!(t.validate(), Ok(()));
        round_trip(&t);
    }
}
