//! The hash and signature projections of the spec, every one built on
//! [`crate::canonical`] and nothing else:
//!
//! * [`plan_hash`] — §3.3 `work_item_plan_hash_bytes`: the immutable approval
//!   projection of a WorkItem (included fields only);
//! * [`spawn_policy_hash`] — §3.6: a goal's spawn-policy template, with its
//!   list normalisation (sets sorted, gates/verify as sorted canonical strings);
//! * [`batch_hash`] — §3.11: `{goal_id, action, ordered item_ids, count}`;
//! * [`autonomy_threshold_hash`] — §3.11: ordered changes plus evidence metadata;
//! * [`tool_call_hash`] — §5.2.1 c2: one paused tool call of a work item;
//! * [`token_signing_payload`] — §3.6: the bytes the owner key signs;
//! * [`signed_message_payload`] — §3.1: `{text, timestamp, nonce}`;
//! * [`audit_checkpoint_payload`] — §4.16: a signed audit checkpoint (head
//!   sequence and hash), domain-separated from every other owner signature.
//!
//! Two deliberate, documented choices:
//! * The spec's Python snippets call `json.dumps` with its default
//!   `ensure_ascii=True`; Silas has one canonical form (raw UTF-8, see
//!   `canonical`), used for every projection. Only Silas computes these hashes,
//!   so what matters is that there is exactly one form.
//! * The token signing payload also covers `token_id`. The spec's list omits
//!   it, yet execution nonces are bound to `token_id`; signing it is strictly
//!   stronger and means no token field outside the runtime-managed counters
//!   (`executions_used`, `execution_nonces`) can change without breaking the
//!   signature.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::Timestamp;
use crate::canonical::{self, CanonicalError};
use crate::model::approval::{ApprovalToken, ChangesApproval, ToolCallApproval};
use crate::model::review::{AutonomyThresholdProposal, BatchProposal};
use crate::model::work::WorkItem;

/// WorkItem fields that form the approval projection (§3.3).
pub const PLAN_HASH_INCLUDED: &[&str] = &[
    "id",
    "type",
    "title",
    "parent",
    "spawned_by",
    "follow_up_of",
    "domain",
    "agent",
    "budget",
    "body",
    "interaction_mode",
    "input_artifacts_from",
    "verify",
    "gates",
    "skills",
    "access_levels",
    "escalation",
    "schedule",
    "on_failure",
    "on_stuck",
    "failure_context",
    "tasks",
    "depends_on",
];

/// WorkItem fields in the approval projection only when set (not `null`):
/// added after plans were first hashed, so every plan without them keeps its
/// byte-identical hash, while a plan that sets one binds all of it (for
/// `workspace`: name, access, extra paths, protected globs, the
/// protected-edit permission, apply mode and commit message; for
/// `skill_hashes`: the content hash of every skill the plan names).
pub const PLAN_HASH_INCLUDED_WHEN_SET: &[&str] = &["workspace", "skill_hashes"];

/// Runtime-managed WorkItem fields, never part of the plan hash (§3.3).
pub const PLAN_HASH_EXCLUDED: &[&str] = &[
    "approval_token",
    "needs_approval",
    "status",
    "attempts",
    "budget_used",
    "verification_results",
    "created_at",
    // Set by the server from the turn that created the item; what it may
    // reference is checked against it, so it never needs the owner's eye.
    "scope_id",
];

fn to_object<T: Serialize>(v: &T) -> Result<Map<String, Value>, CanonicalError> {
    match serde_json::to_value(v).map_err(|e| CanonicalError::NotJson(e.to_string()))? {
        Value::Object(o) => Ok(o),
        other => Err(CanonicalError::NotJson(format!(
            "expected an object, got {other}"
        ))),
    }
}

/// The canonical bytes of the plan-hash projection.
pub fn plan_hash_bytes(item: &WorkItem) -> Result<Vec<u8>, CanonicalError> {
    let mut full = to_object(item)?;
    let mut projection = Map::new();
    for key in PLAN_HASH_INCLUDED {
        let v = full.remove(*key).unwrap_or(Value::Null);
        projection.insert((*key).to_string(), v);
    }
    for key in PLAN_HASH_INCLUDED_WHEN_SET {
        match full.remove(*key) {
            None | Some(Value::Null) => {}
            Some(v) => {
                projection.insert((*key).to_string(), v);
            }
        }
    }
    canonical::to_bytes(&Value::Object(projection))
}

/// `ApprovalToken.plan_hash` for a work item: lowercase hex SHA-256.
pub fn plan_hash(item: &WorkItem) -> Result<String, CanonicalError> {
    Ok(canonical::sha256_hex(&plan_hash_bytes(item)?))
}

/// The canonical bytes of a goal's spawn-policy projection (§3.6).
pub fn spawn_policy_bytes(goal: &WorkItem) -> Result<Vec<u8>, CanonicalError> {
    let mut skills: Vec<&String> = goal.skills.iter().collect();
    skills.sort();
    skills.dedup();

    let mut gates = goal
        .gates
        .iter()
        .map(|g| {
            canonical::of(g).and_then(|b| {
                String::from_utf8(b).map_err(|e| CanonicalError::NotJson(e.to_string()))
            })
        })
        .collect::<Result<Vec<String>, _>>()?;
    gates.sort();
    let mut verify = goal
        .verify
        .iter()
        .map(|c| {
            canonical::of(c).and_then(|b| {
                String::from_utf8(b).map_err(|e| CanonicalError::NotJson(e.to_string()))
            })
        })
        .collect::<Result<Vec<String>, _>>()?;
    verify.sort();

    // Escalations the spawned tasks may use: on_failure plus every gate's
    // on_block, restricted to names the goal actually defines.
    let mut names: Vec<&str> = std::iter::once(goal.on_failure.as_str())
        .chain(
            goal.gates
                .iter()
                .map(|g| g.on_block.as_str())
                .filter(|n| !n.is_empty()),
        )
        .filter(|n| goal.escalation.contains_key(*n))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut escalation_config = Map::new();
    for name in names {
        if let Some(action) = goal.escalation.get(name) {
            escalation_config.insert(name.to_string(), Value::Object(to_object(action)?));
        }
    }

    let projection = json!({
        "failure_context_template": goal.failure_context.clone().unwrap_or_default(),
        "skills": skills,
        "gates": gates,
        "verify": verify,
        "escalation_config": escalation_config,
    });
    canonical::to_bytes(&projection)
}

pub fn spawn_policy_hash(goal: &WorkItem) -> Result<String, CanonicalError> {
    Ok(canonical::sha256_hex(&spawn_policy_bytes(goal)?))
}

/// §3.11 batch binding over the exact ordered item list.
pub fn batch_hash(
    goal_id: &str,
    action: &str,
    item_ids: &[String],
) -> Result<String, CanonicalError> {
    let projection = json!({
        "goal_id": goal_id,
        "action": action,
        "item_ids": item_ids,
        "count": item_ids.len(),
    });
    canonical::hash_of(&projection)
}

/// The batch hash of a proposal: its items in proposal order.
pub fn batch_proposal_hash(p: &BatchProposal) -> Result<String, CanonicalError> {
    let ids: Vec<String> = p.items.iter().map(|i| i.item_id.clone()).collect();
    batch_hash(&p.goal_id, &p.action, &ids)
}

/// §3.11 autonomy-threshold binding: ordered changes plus evidence metadata.
pub fn autonomy_threshold_hash(p: &AutonomyThresholdProposal) -> Result<String, CanonicalError> {
    let projection = json!({
        "scope_id": p.scope_id,
        "goal_id": p.goal_id,
        "changes": p.changes,
        "sample_size": p.sample_size,
        "correction_rate": p.correction_rate,
        "evidence_window": p.evidence_window,
    });
    canonical::hash_of(&projection)
}

/// §5.2.1 c2 binding of a paused tool call: the call (id, name, arguments)
/// and the plan hash of the work item it runs for.
pub fn tool_call_hash(c: &ToolCallApproval) -> Result<String, CanonicalError> {
    let projection = json!({
        "work_item_id": c.work_item_id,
        "plan_hash": c.plan_hash,
        "attempt": c.attempt,
        "call_id": c.call_id,
        "tool_name": c.tool_name,
        "arguments": c.arguments,
    });
    canonical::hash_of(&projection)
}

/// Binding hash of a `[Just this once]` permission grant (§5.10.2): the
/// connection, the permissions, and the one script call they are for.
pub fn connection_permission_hash(
    c: &crate::model::approval::ConnectionPermissionApproval,
) -> Result<String, CanonicalError> {
    let projection = json!({
        "kind": "connection_permission",
        "connection_id": c.connection_id,
        "permissions": c.permissions,
        "work_item_id": c.work_item_id,
        "execution_id": c.execution_id,
        "skill": c.skill,
        "script": c.script,
        "arguments": c.arguments,
    });
    canonical::hash_of(&projection)
}

/// Binding hash of an apply/undo approval (issue #15): the change set's
/// own hash under the item's plan hash, with the action.
pub fn changes_hash(c: &ChangesApproval) -> Result<String, CanonicalError> {
    let projection = json!({
        "work_item_id": c.work_item_id,
        "plan_hash": c.plan_hash,
        "action": c.action.as_str(),
        "changes_sha256": c.changes_sha256,
    });
    canonical::hash_of(&projection)
}

/// The hash a `skill_install` token binds (§10.4): the skill's name and
/// the content hash of exactly the files its install card showed.
pub fn skill_install_hash(
    s: &crate::model::skills::SkillInstallApproval,
) -> Result<String, CanonicalError> {
    let projection = json!({
        "kind": "skill_install",
        "skill": s.skill,
        "content_hash": s.content_hash,
    });
    canonical::hash_of(&projection)
}

/// Token fields covered by the owner's signature.
pub const TOKEN_SIGNED_FIELDS: &[&str] = &[
    "token_id",
    "plan_hash",
    "work_item_id",
    "scope",
    "verdict",
    "nonce",
    "approval_strength",
    "issued_at",
    "expires_at",
    "max_executions",
    "conditions",
];

/// Token fields deliberately outside the signature: the signature itself and
/// the runtime-managed usage counters.
pub const TOKEN_UNSIGNED_FIELDS: &[&str] = &["signature", "executions_used", "execution_nonces"];

/// The bytes the owner key signs for an approval token (§3.6).
pub fn token_signing_payload(token: &ApprovalToken) -> Result<Vec<u8>, CanonicalError> {
    let mut full = to_object(token)?;
    let mut payload = Map::new();
    for key in TOKEN_SIGNED_FIELDS {
        payload.insert((*key).to_string(), full.remove(*key).unwrap_or(Value::Null));
    }
    canonical::to_bytes(&Value::Object(payload))
}

/// The bytes an owner-signed message is signed over (§3.1).
pub fn signed_message_payload(
    text: &str,
    timestamp: &Timestamp,
    nonce: &str,
) -> Result<Vec<u8>, CanonicalError> {
    canonical::to_bytes(&json!({
        "text": text,
        "timestamp": timestamp.to_string(),
        "nonce": nonce,
    }))
}

/// Domain tag of [`audit_checkpoint_payload`]: no token or message payload has
/// a `purpose` key, so a checkpoint signature can never pass as one of them.
pub const AUDIT_CHECKPOINT_PURPOSE: &str = "silas.audit_checkpoint.v1";

/// The bytes the owner key signs for an audit checkpoint (§4.16): the chain
/// head it covers (sequence number and entry hash), its ID and creation time.
pub fn audit_checkpoint_payload(
    checkpoint_id: &str,
    head_seq: u64,
    head_hash: &str,
    created_at: &Timestamp,
) -> Result<Vec<u8>, CanonicalError> {
    canonical::to_bytes(&json!({
        "purpose": AUDIT_CHECKPOINT_PURPOSE,
        "checkpoint_id": checkpoint_id,
        "head_seq": head_seq,
        "head_hash": head_hash,
        "created_at": created_at.to_string(),
    }))
}
