//! The pure core of the approval engine (spec §4.4, §5.11): how a token is
//! minted from a decision, and whether a presented token authorises a given
//! piece of work. No keys, no storage, no clock: the signature check is a
//! function the caller supplies, "now" is an argument, and the consuming half
//! of `verify` (execution nonce + token state) is done by the storage layer in
//! one transaction. Every refusal is a distinct [`Denial`] with a taxonomy code.
//!
//! Binding rules:
//! * single-use scopes: `token.plan_hash == plan_hash(work_item)` and
//!   `token.work_item_id == work_item.id`; the execution binds that hash.
//! * `standing`: at `verify`, `work_item` is the parent goal (its plan hash is
//!   checked) and `spawned_task` is required, must have `parent ==
//!   token.work_item_id`, and its spawn-policy projection (failure-context
//!   template, skills, gates, verify, referenced escalations) must hash to
//!   `conditions.spawn_policy_hash`; the execution binds the spawned task's
//!   plan hash. At `check`, `work_item` is the spawned task itself.
//! * batch and autonomy-threshold approvals use the same token with
//!   `plan_hash` = the batch hash / threshold binding ([`Subject`]).
//! * a paused tool call of background work (scope `single_step`) binds the
//!   tool-call hash, which covers the call and its work item's plan hash.

use serde_json::Value;

use crate::error::ErrorCode;
use crate::model::JsonObject;
use crate::model::approval::{
    ApprovalDecision, ApprovalScope, ApprovalStrength, ApprovalToken, ApprovalVerdict,
    ChangesApproval, ConnectionPermissionApproval, SPAWN_POLICY_HASH_KEY, ToolCallApproval,
};
use crate::model::review::{AutonomyThresholdProposal, BatchProposal};
use crate::model::work::{WorkItem, WorkItemType};
use crate::projections;
use crate::{Base64Bytes, Timestamp};

/// What an approval is about. Non-plan approvals are canonical payload
/// wrappers so the same hash and signature path applies (§4.4).
#[derive(Clone, Copy, Debug)]
pub enum Subject<'a> {
    WorkItem(&'a WorkItem),
    Batch(&'a BatchProposal),
    AutonomyThreshold(&'a AutonomyThresholdProposal),
    ToolCall(&'a ToolCallApproval),
    /// Applying (or undoing) a workspace change set (issue #15).
    Changes(&'a ChangesApproval),
    /// A skill at one content hash (scope `skill_install`, §10.4).
    SkillInstall(&'a crate::model::skills::SkillInstallApproval),
    /// One script call granted connection permissions once (§5.10.2).
    ConnectionPermission(&'a ConnectionPermissionApproval),
}

impl Subject<'_> {
    /// (`work_item_id`, `plan_hash`) the token binds.
    pub fn binding(&self) -> Result<(String, String), Denial> {
        let hash_err = |e: crate::canonical::CanonicalError| Denial::Unhashable(e.to_string());
        match self {
            Subject::WorkItem(w) => {
                Ok((w.id.clone(), projections::plan_hash(w).map_err(hash_err)?))
            }
            Subject::Batch(b) => Ok((
                b.goal_id.clone(),
                projections::batch_proposal_hash(b).map_err(hash_err)?,
            )),
            Subject::AutonomyThreshold(p) => Ok((
                p.proposal_id.clone(),
                projections::autonomy_threshold_hash(p).map_err(hash_err)?,
            )),
            Subject::ToolCall(c) => Ok((
                c.work_item_id.clone(),
                projections::tool_call_hash(c).map_err(hash_err)?,
            )),
            Subject::Changes(c) => Ok((
                c.work_item_id.clone(),
                projections::changes_hash(c).map_err(hash_err)?,
            )),
            Subject::SkillInstall(s) => Ok((
                s.subject_id(),
                projections::skill_install_hash(s).map_err(hash_err)?,
            )),
            Subject::ConnectionPermission(c) => Ok((
                c.work_item_id.clone(),
                projections::connection_permission_hash(c).map_err(hash_err)?,
            )),
        }
    }
}

/// The longest lifetime any token may be given: one year.
pub const MAX_TTL_MINUTES: u32 = 60 * 24 * 366;

/// Issuance parameters from configuration (§11 `approval`, `autonomy`).
#[derive(Clone, Debug)]
pub struct IssuePolicy {
    pub default_ttl_minutes: u32,
    /// Default lifetime of standing (goal) tokens.
    pub standing_ttl_minutes: u32,
    /// `max_executions` of single-use tokens.
    pub max_executions: u32,
    /// Cap (and default) for standing tokens' `max_executions`.
    pub max_standing_executions: u32,
    /// Scope → minimum strength; scopes not listed need `tap`.
    pub scope_min_strength: Vec<(ApprovalScope, ApprovalStrength)>,
}

impl Default for IssuePolicy {
    fn default() -> Self {
        IssuePolicy {
            default_ttl_minutes: 30,
            standing_ttl_minutes: 30 * 24 * 60,
            max_executions: 1,
            max_standing_executions: 100,
            scope_min_strength: Vec::new(),
        }
    }
}

/// Strength tiers in order; `tap` is the only tier of this spec (§3.6), the
/// ordering is what makes "apply the policy minimum" well defined.
fn tier(s: ApprovalStrength) -> u8 {
    match s {
        ApprovalStrength::Tap => 0,
    }
}

/// The stronger of the decision's strength and the scope's minimum (§5.11 step 4).
pub fn resolve_strength(
    policy: &IssuePolicy,
    scope: ApprovalScope,
    given: ApprovalStrength,
) -> ApprovalStrength {
    let min = policy
        .scope_min_strength
        .iter()
        .find(|(s, _)| *s == scope)
        .map(|(_, m)| *m)
        .unwrap_or(ApprovalStrength::Tap);
    if tier(given) >= tier(min) { given } else { min }
}

/// Why a token was not issued.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IssueError {
    #[error("only an approved decision can be turned into a token (got {0})")]
    NotApproved(ApprovalVerdict),
    #[error("a standing token needs a goal work item (got {0})")]
    StandingNeedsGoal(String),
    #[error("scope {scope} does not fit this subject: {why}")]
    ScopeMismatch {
        scope: ApprovalScope,
        why: &'static str,
    },
    #[error("invalid condition {key}: {why}")]
    BadCondition {
        key: &'static str,
        why: &'static str,
    },
    #[error("cannot hash the subject: {0}")]
    Unhashable(String),
}

/// Build the token to be signed (signature empty, `executions_used = 0`).
/// `token_id` and `nonce` are fresh random strings from the caller.
pub fn unsigned_token(
    subject: Subject<'_>,
    decision: &ApprovalDecision,
    scope: ApprovalScope,
    policy: &IssuePolicy,
    now: Timestamp,
    token_id: String,
    nonce: String,
) -> Result<ApprovalToken, IssueError> {
    if decision.verdict != ApprovalVerdict::Approved {
        return Err(IssueError::NotApproved(decision.verdict));
    }
    match (&subject, scope) {
        (Subject::Batch(_), s)
            if s == ApprovalScope::Standing || s == ApprovalScope::AutonomyThreshold =>
        {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "a batch is approved for one execution of exactly its items",
            });
        }
        (Subject::AutonomyThreshold(_), s) if s != ApprovalScope::AutonomyThreshold => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "threshold proposals take scope autonomy_threshold",
            });
        }
        (Subject::ToolCall(_), s) if s != ApprovalScope::SingleStep => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "a paused tool call is approved as one single step",
            });
        }
        (Subject::Changes(_), s) if s != ApprovalScope::SingleStep => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "a change set is applied (or undone) as one single step",
            });
        }
        (Subject::SkillInstall(_), s) if s != ApprovalScope::SkillInstall => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "a skill is installed only with a skill_install approval",
            });
        }
        (_, ApprovalScope::SkillInstall) if !matches!(subject, Subject::SkillInstall(_)) => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "skill_install approves one skill at one content hash",
            });
        }
        (Subject::ConnectionPermission(_), s)
            if s != ApprovalScope::ConnectionAct && s != ApprovalScope::ConnectionManage =>
        {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "a connection permission grant is connection_act (once) or connection_manage",
            });
        }
        (Subject::WorkItem(_), ApprovalScope::AutonomyThreshold) => {
            return Err(IssueError::ScopeMismatch {
                scope,
                why: "autonomy_threshold approves a threshold proposal, not a work item",
            });
        }
        _ => {}
    }
    let (work_item_id, plan_hash) = subject
        .binding()
        .map_err(|d| IssueError::Unhashable(d.to_string()))?;

    let mut conditions: JsonObject = decision.conditions.clone();
    let ttl_minutes = match conditions.remove("ttl_minutes") {
        None if scope == ApprovalScope::Standing => i64::from(policy.standing_ttl_minutes),
        None => i64::from(policy.default_ttl_minutes),
        Some(v) => match v.as_u64() {
            Some(m) if m > 0 && m <= u64::from(MAX_TTL_MINUTES) => m as i64,
            _ => {
                return Err(IssueError::BadCondition {
                    key: "ttl_minutes",
                    why: "must be a whole number of minutes between 1 and one year",
                });
            }
        },
    };
    let requested_max = conditions.remove("max_executions");
    let max_executions = if scope == ApprovalScope::Standing {
        let Subject::WorkItem(goal) = subject else {
            return Err(IssueError::StandingNeedsGoal("not a work item".into()));
        };
        if goal.kind != WorkItemType::Goal {
            return Err(IssueError::StandingNeedsGoal(goal.kind.to_string()));
        }
        // §5.11 step 5: the standing token binds the goal's spawn policy.
        let policy_hash = projections::spawn_policy_hash(goal)
            .map_err(|e| IssueError::Unhashable(e.to_string()))?;
        conditions.insert(
            SPAWN_POLICY_HASH_KEY.to_string(),
            Value::String(policy_hash),
        );
        match requested_max {
            None => u64::from(policy.max_standing_executions),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 && n <= u64::from(policy.max_standing_executions) => n,
                _ => {
                    return Err(IssueError::BadCondition {
                        key: "max_executions",
                        why: "must be between 1 and autonomy.max_standing_executions",
                    });
                }
            },
        }
    } else {
        if conditions.contains_key(SPAWN_POLICY_HASH_KEY) {
            return Err(IssueError::BadCondition {
                key: "spawn_policy_hash",
                why: "only standing tokens carry a spawn policy",
            });
        }
        if requested_max.is_some() {
            return Err(IssueError::BadCondition {
                key: "max_executions",
                why: "only standing tokens may be used more than approval.max_executions times",
            });
        }
        if matches!(subject, Subject::ConnectionPermission(_)) {
            // §5.10.2 `[Just this once]`: exactly one execution, whatever
            // `approval.max_executions` says for other single-use tokens.
            1
        } else {
            u64::from(policy.max_executions.max(1))
        }
    };

    Ok(ApprovalToken {
        token_id,
        plan_hash,
        work_item_id,
        scope,
        verdict: decision.verdict,
        signature: Base64Bytes::default(),
        issued_at: now,
        expires_at: now.plus(chrono::Duration::minutes(ttl_minutes)),
        nonce,
        approval_strength: resolve_strength(policy, scope, decision.approval_strength),
        conditions,
        executions_used: 0,
        max_executions,
        execution_nonces: Vec::new(),
    })
}

/// Why a token does not authorise the work. Each is a distinct reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("signature is not valid for the owner key")]
    BadSignature,
    #[error("token verdict is {0}, not approved")]
    NotApproved(ApprovalVerdict),
    #[error("token is for work item {token}, not {presented}")]
    WrongWorkItem { token: String, presented: String },
    #[error("plan hash mismatch: the work item changed since it was approved")]
    PlanHashMismatch,
    #[error("Standing verification requires spawned_task")]
    StandingRequiresSpawnedTask,
    #[error("a spawned task was presented for a non-standing token")]
    UnexpectedSpawnedTask,
    #[error("spawned task's parent {parent:?} is not the approved goal {goal}")]
    SpawnedParentMismatch {
        parent: Option<String>,
        goal: String,
    },
    #[error("standing token carries no spawn_policy_hash")]
    MissingSpawnPolicyHash,
    #[error(
        "spawned task does not match the goal's approved spawn policy (skills, gates, verify, escalation or failure template differ)"
    )]
    SpawnPolicyMismatch,
    #[error("token expired at {0}")]
    Expired(Timestamp),
    #[error("token already used {used} of {max} times")]
    Exhausted { used: u64, max: u64 },
    #[error("token has not been consumed by verify() yet")]
    NotYetVerified,
    #[error("execution replay: this execution nonce was already recorded")]
    Replay,
    #[error("token is unknown or differs from the one issued")]
    UnknownToken,
    #[error("cannot hash the work item: {0}")]
    Unhashable(String),
}

impl Denial {
    pub fn code(&self) -> ErrorCode {
        match self {
            Denial::BadSignature | Denial::UnknownToken => ErrorCode::EApprovalSignature,
            Denial::Expired(_) => ErrorCode::EApprovalExpired,
            Denial::Exhausted { .. } | Denial::NotYetVerified => ErrorCode::EApprovalExhausted,
            Denial::Replay => ErrorCode::EApprovalNonce,
            Denial::NotApproved(_)
            | Denial::UnexpectedSpawnedTask
            | Denial::StandingRequiresSpawnedTask => ErrorCode::EApprovalScope,
            Denial::WrongWorkItem { .. }
            | Denial::PlanHashMismatch
            | Denial::SpawnedParentMismatch { .. }
            | Denial::MissingSpawnPolicyHash
            | Denial::SpawnPolicyMismatch
            | Denial::Unhashable(_) => ErrorCode::EApprovalHash,
        }
    }

    /// A short machine-readable reason for audit entries.
    pub fn kind(&self) -> &'static str {
        match self {
            Denial::BadSignature => "bad_signature",
            Denial::NotApproved(_) => "not_approved",
            Denial::WrongWorkItem { .. } => "wrong_work_item",
            Denial::PlanHashMismatch => "plan_hash_mismatch",
            Denial::StandingRequiresSpawnedTask => "standing_requires_spawned_task",
            Denial::UnexpectedSpawnedTask => "unexpected_spawned_task",
            Denial::SpawnedParentMismatch { .. } => "spawned_parent_mismatch",
            Denial::MissingSpawnPolicyHash => "missing_spawn_policy_hash",
            Denial::SpawnPolicyMismatch => "spawn_policy_mismatch",
            Denial::Expired(_) => "expired",
            Denial::Exhausted { .. } => "exhausted",
            Denial::NotYetVerified => "not_yet_verified",
            Denial::Replay => "replay",
            Denial::UnknownToken => "unknown_token",
            Denial::Unhashable(_) => "unhashable",
        }
    }
}

/// What a successful `verify` authorises: one execution bound to this hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionBinding {
    pub token_id: String,
    /// The plan hash of the work that will run (the spawned task's for standing tokens).
    pub exec_hash: String,
}

fn hash(w: &WorkItem) -> Result<String, Denial> {
    projections::plan_hash(w).map_err(|e| Denial::Unhashable(e.to_string()))
}

fn check_signature(
    token: &ApprovalToken,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<(), Denial> {
    let payload =
        projections::token_signing_payload(token).map_err(|e| Denial::Unhashable(e.to_string()))?;
    if sig_ok(&payload, token.signature.as_slice()) {
        Ok(())
    } else {
        Err(Denial::BadSignature)
    }
}

fn check_spawned(token: &ApprovalToken, task: &WorkItem) -> Result<(), Denial> {
    if task.parent.as_deref() != Some(token.work_item_id.as_str()) {
        return Err(Denial::SpawnedParentMismatch {
            parent: task.parent.clone(),
            goal: token.work_item_id.clone(),
        });
    }
    let bound = token
        .conditions
        .get(SPAWN_POLICY_HASH_KEY)
        .and_then(Value::as_str)
        .ok_or(Denial::MissingSpawnPolicyHash)?;
    let actual =
        projections::spawn_policy_hash(task).map_err(|e| Denial::Unhashable(e.to_string()))?;
    if actual != bound {
        return Err(Denial::SpawnPolicyMismatch);
    }
    Ok(())
}

fn check_not_exhausted(token: &ApprovalToken) -> Result<(), Denial> {
    if token.executions_used >= token.max_executions {
        return Err(Denial::Exhausted {
            used: token.executions_used,
            max: token.max_executions,
        });
    }
    Ok(())
}

/// `check`'s ledger condition: a consuming `verify` happened (at least one
/// execution used) and the ledger is not past its maximum.
fn check_was_verified(token: &ApprovalToken) -> Result<(), Denial> {
    if token.executions_used == 0 {
        return Err(Denial::NotYetVerified);
    }
    if token.executions_used > token.max_executions {
        return Err(Denial::Exhausted {
            used: token.executions_used,
            max: token.max_executions,
        });
    }
    Ok(())
}

fn check_common(
    token: &ApprovalToken,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<(), Denial> {
    check_signature(token, sig_ok)?;
    if token.verdict != ApprovalVerdict::Approved {
        return Err(Denial::NotApproved(token.verdict));
    }
    if now >= token.expires_at {
        return Err(Denial::Expired(token.expires_at));
    }
    Ok(())
}

/// The non-consuming part of `verify` (§5.11 steps 1–4). On success the caller
/// generates a fresh execution nonce and records it, together with the token
/// state, in one transaction (steps 5–8).
pub fn authorize_execution(
    token: &ApprovalToken,
    work_item: &WorkItem,
    spawned_task: Option<&WorkItem>,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<ExecutionBinding, Denial> {
    check_common(token, now, sig_ok)?;
    if token.work_item_id != work_item.id {
        return Err(Denial::WrongWorkItem {
            token: token.work_item_id.clone(),
            presented: work_item.id.clone(),
        });
    }
    if hash(work_item)? != token.plan_hash {
        return Err(Denial::PlanHashMismatch);
    }
    let exec_hash = if token.scope == ApprovalScope::Standing {
        let task = spawned_task.ok_or(Denial::StandingRequiresSpawnedTask)?;
        check_spawned(token, task)?;
        hash(task)?
    } else {
        if spawned_task.is_some() {
            return Err(Denial::UnexpectedSpawnedTask);
        }
        token.plan_hash.clone()
    };
    check_not_exhausted(token)?;
    Ok(ExecutionBinding {
        token_id: token.token_id.clone(),
        exec_hash,
    })
}

/// The token names this subject and carries its payload hash; returns
/// the hash (the execution binding).
fn bind_subject(token: &ApprovalToken, subject: Subject<'_>) -> Result<String, Denial> {
    let (id, h) = subject.binding()?;
    if token.work_item_id != id {
        return Err(Denial::WrongWorkItem {
            token: token.work_item_id.clone(),
            presented: id,
        });
    }
    if token.plan_hash != h {
        return Err(Denial::PlanHashMismatch);
    }
    Ok(h)
}

/// `verify` for a non-plan subject (batch, autonomy threshold): the payload
/// hash takes the place of the work item's plan hash.
pub fn authorize_subject(
    token: &ApprovalToken,
    subject: Subject<'_>,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<ExecutionBinding, Denial> {
    check_common(token, now, sig_ok)?;
    let h = bind_subject(token, subject)?;
    if token.scope == ApprovalScope::Standing {
        return Err(Denial::StandingRequiresSpawnedTask);
    }
    check_not_exhausted(token)?;
    Ok(ExecutionBinding {
        token_id: token.token_id.clone(),
        exec_hash: h,
    })
}

/// The non-consuming `check` for a non-plan subject: signature, verdict,
/// expiry, the payload binding, and a prior consuming `verify` (the caller
/// confirms the execution nonce is on record).
pub fn check_subject(
    token: &ApprovalToken,
    subject: Subject<'_>,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<ExecutionBinding, Denial> {
    check_common(token, now, sig_ok)?;
    let h = bind_subject(token, subject)?;
    check_was_verified(token)?;
    Ok(ExecutionBinding {
        token_id: token.token_id.clone(),
        exec_hash: h,
    })
}

/// The non-consuming check of a goal's own standing token at the start of
/// each cycle (§5.2.3): signature, verdict, expiry, the binding to this goal
/// and its current plan hash, and a ledger not past its maximum. Nothing is
/// consumed (only a spawned task consumes an execution), and a token whose
/// spawns are used up still lets the goal run its checks.
pub fn check_standing(
    token: &ApprovalToken,
    goal: &WorkItem,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<(), Denial> {
    check_common(token, now, sig_ok)?;
    if token.work_item_id != goal.id {
        return Err(Denial::WrongWorkItem {
            token: token.work_item_id.clone(),
            presented: goal.id.clone(),
        });
    }
    if hash(goal)? != token.plan_hash {
        return Err(Denial::PlanHashMismatch);
    }
    if token.executions_used > token.max_executions {
        return Err(Denial::Exhausted {
            used: token.executions_used,
            max: token.max_executions,
        });
    }
    Ok(())
}

/// `check` (§5.11): non-consuming. For standing tokens `work_item` is the
/// spawned task. Returns the execution hash a prior `verify` must have bound.
pub fn check(
    token: &ApprovalToken,
    work_item: &WorkItem,
    now: Timestamp,
    sig_ok: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<ExecutionBinding, Denial> {
    check_common(token, now, sig_ok)?;
    let exec_hash = if token.scope == ApprovalScope::Standing {
        check_spawned(token, work_item)?;
        hash(work_item)?
    } else {
        if token.work_item_id != work_item.id {
            return Err(Denial::WrongWorkItem {
                token: token.work_item_id.clone(),
                presented: work_item.id.clone(),
            });
        }
        let h = hash(work_item)?;
        if h != token.plan_hash {
            return Err(Denial::PlanHashMismatch);
        }
        h
    };
    check_was_verified(token)?;
    Ok(ExecutionBinding {
        token_id: token.token_id.clone(),
        exec_hash,
    })
}

/// The signed fields of two tokens are identical (runtime counters aside).
pub fn same_signed_token(a: &ApprovalToken, b: &ApprovalToken) -> bool {
    matches!(
        (projections::token_signing_payload(a), projections::token_signing_payload(b)),
        (Ok(x), Ok(y)) if x == y
    ) && a.signature == b.signature
}

/// §3.2 / §5.1.2: the agent's `needs_approval` is advisory. `false` is
/// honoured only when the work item already carries a valid token (a
/// pre-verified standing approval); otherwise approval is required.
pub fn effective_needs_approval(agent_says: bool, has_valid_token: bool) -> bool {
    agent_says || !has_valid_token
}

impl IssuePolicy {
    /// The issuance policy from `approval.*` and `autonomy.max_standing_executions`.
    /// Unknown scope or strength names were already refused by config validation;
    /// any that slip through are ignored here, which can only leave `tap`.
    pub fn from_config(cfg: &crate::config::Config) -> IssuePolicy {
        fn parse<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
            serde_json::from_value(Value::String(s.to_string())).ok()
        }
        IssuePolicy {
            default_ttl_minutes: cfg.approval.default_ttl_minutes,
            standing_ttl_minutes: cfg.approval.standing_ttl_minutes,
            max_executions: cfg.approval.max_executions,
            max_standing_executions: cfg.autonomy.max_standing_executions,
            scope_min_strength: cfg
                .approval
                .scope_min_strength
                .iter()
                .filter_map(|(scope, strength)| Some((parse(scope)?, parse(strength)?)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_from_default_config() {
        let p = IssuePolicy::from_config(&crate::config::Config::default());
        assert_eq!(p.default_ttl_minutes, 30);
        assert_eq!(p.max_executions, 1);
        assert_eq!(p.max_standing_executions, 100);
        assert_eq!(p.scope_min_strength.len(), 5);
        assert!(
            p.scope_min_strength
                .contains(&(ApprovalScope::SelfUpdate, ApprovalStrength::Tap))
        );
        for scope in ApprovalScope::ALL {
            assert_eq!(
                resolve_strength(&p, *scope, ApprovalStrength::Tap),
                ApprovalStrength::Tap
            );
        }
    }

    fn once_grant() -> ConnectionPermissionApproval {
        ConnectionPermissionApproval {
            connection_id: "conn-mail".into(),
            permissions: vec!["Mail.ReadWrite".into()],
            work_item_id: "t1".into(),
            execution_id: "t1-1".into(),
            skill: "mail".into(),
            script: "scripts/send.py".into(),
            arguments: serde_json::json!({"to": "a"}),
        }
    }

    fn approve() -> ApprovalDecision {
        serde_json::from_value(serde_json::json!({"verdict": "approved"})).unwrap()
    }

    #[test]
    fn a_just_this_once_grant_is_one_connection_act_execution_bound_to_its_call() {
        // Even a policy that lets single-use tokens run more than once.
        let policy = IssuePolicy {
            max_executions: 5,
            ..IssuePolicy::default()
        };
        let g = once_grant();
        let t = unsigned_token(
            Subject::ConnectionPermission(&g),
            &approve(),
            ApprovalScope::ConnectionAct,
            &policy,
            Timestamp::now(),
            "tok".into(),
            "n".into(),
        )
        .unwrap();
        assert_eq!(t.max_executions, 1);
        assert_eq!(t.work_item_id, "t1");
        // The binding covers the call: other arguments, another execution
        // or more permissions hash differently.
        let (_, h) = Subject::ConnectionPermission(&g).binding().unwrap();
        assert_eq!(t.plan_hash, h);
        for other in [
            ConnectionPermissionApproval {
                arguments: serde_json::json!({"to": "b"}),
                ..g.clone()
            },
            ConnectionPermissionApproval {
                execution_id: "t1-2".into(),
                ..g.clone()
            },
            ConnectionPermissionApproval {
                permissions: vec!["Mail.ReadWrite".into(), "Mail.Send".into()],
                ..g.clone()
            },
        ] {
            let (_, o) = Subject::ConnectionPermission(&other).binding().unwrap();
            assert_ne!(o, h);
        }
        // Not as a standing or plan approval.
        for scope in [ApprovalScope::Standing, ApprovalScope::FullPlan] {
            assert!(matches!(
                unsigned_token(
                    Subject::ConnectionPermission(&g),
                    &approve(),
                    scope,
                    &policy,
                    Timestamp::now(),
                    "tok".into(),
                    "n".into(),
                ),
                Err(IssueError::ScopeMismatch { .. })
            ));
        }
    }
}
