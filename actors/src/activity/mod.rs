//! The Activity surface (§0.5.1, §0.5 principle 7): a plain-language
//! timeline built from the audit log — "Approved and ran 'Create notes.txt'
//! — 2 checks passed", not a raw log.
//!
//! [`describe`] is a pure function from one audit entry (plus what the
//! store knows about the work item it names) to an [`ActivityItem`], or
//! `None` for bookkeeping the owner does not need to read (every gate
//! evaluation, every routing decision, …). Audit data never carries message
//! text or secrets (NEVER_LOG), so nothing here can leak them; the only
//! free text used is a work item's title, which the owner approved.
//!
//! Every event name the runtime emits is listed in [`KNOWN_EVENTS`] with
//! its treatment, and the tests check each one; an event added later
//! without a sentence still shows as "Recorded: …" rather than vanishing.

mod known;
mod memory;
pub(crate) mod outside;
mod skills;

pub use known::KNOWN_EVENTS;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use silas_core::model::JsonObject;

/// One line of the Activity timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityItem {
    /// Audit sequence number (stable id; the client orders and dedups by it).
    pub seq: u64,
    /// When it happened (the audit entry's timestamp).
    pub at: String,
    /// `work`, `approval`, `card`, `security`, `system` or `other`.
    pub kind: String,
    /// The sentence shown to the owner.
    pub text: String,
}

/// What the store knows about a work item named by an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkFacts {
    pub title: String,
    /// `(passed, total)` verification checks, when it was verified.
    pub checks: Option<(usize, usize)>,
}

/// How an event is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    Shown,
    /// Internal bookkeeping: not on the timeline.
    Hidden,
}

fn s<'a>(data: &'a JsonObject, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
}

fn n(data: &JsonObject, key: &str) -> Option<u64> {
    data.get(key).and_then(Value::as_u64)
}

/// A count in the event's data; 0 when absent.
fn count(data: &JsonObject, key: &str) -> u64 {
    n(data, key).unwrap_or(0)
}

/// "a gate approval" from `gate_approval`, "a plan approval" from
/// `approval_request`.
fn card_name(card_type: &str) -> String {
    let name = match card_type {
        "approval_request" => "plan approval",
        "gate_approval" => "gate approval",
        "autonomy_threshold_review" => "autonomy threshold",
        "secure_input_request" => "secure input",
        "connection_setup_step" => "connection setup",
        other => return format!("{} card", other.replace('_', " ")),
    };
    format!("{name} card")
}

/// `text` with its first letter upper case ("a task" starts a sentence).
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn plural(count: u64, one: &str) -> String {
    if count == 1 {
        format!("1 {one}")
    } else {
        format!("{count} {one}s")
    }
}

/// The timeline sentence for one audit entry, or `None` if it is hidden.
pub fn describe(
    seq: u64,
    at: &str,
    event: &str,
    data: &JsonObject,
    work: &dyn Fn(&str) -> Option<WorkFacts>,
) -> Option<ActivityItem> {
    let facts = s(data, "work_item_id").and_then(work);
    let title = facts
        .as_ref()
        .map(|f| format!("'{}'", f.title))
        .unwrap_or_else(|| "a task".to_string());
    let gate = s(data, "gate").unwrap_or("a safety check");
    let card = s(data, "card_type")
        .map(card_name)
        .unwrap_or_else(|| "card".into());
    let (kind, text) = match event {
        "daemon.started" => ("system", "Silas started".to_string()),
        "daemon.stopped" => (
            "system",
            if data.get("escalated").and_then(Value::as_bool) == Some(true) {
                "Silas stopped after a component kept failing".to_string()
            } else if data.get("hurried").and_then(Value::as_bool) == Some(true) {
                "Silas stopped at once (asked twice); conversations it cut off resume at the next start".to_string()
            } else {
                "Silas stopped".to_string()
            },
        ),
        "turn_processor_restarted" => (
            "system",
            "Recovered from an internal error in a conversation".to_string(),
        ),
        "turn_quarantined" => (
            "system",
            "Set aside a message that kept causing an internal error — nothing was done with it"
                .to_string(),
        ),
        // A customer's plan says so: its title is the model's, steered by a
        // stranger, and may read like a notice from Silas itself.
        "plan_proposed" => (
            "approval",
            match s(data, "scope_id") {
                Some(scope) if scope != crate::turn::OWNER_SCOPE => format!(
                    "A customer's conversation ({scope}) proposed {title} and asked for your approval"
                ),
                _ => format!("Proposed {title} and asked for your approval"),
            },
        ),
        "plan_declined" => ("approval", format!("Declined {title} — nothing ran")),
        "plan_card_expired" => (
            "approval",
            format!("The approval request for {title} expired — nothing ran"),
        ),
        "plan_parse_failed" => (
            "work",
            "Could not read a proposed plan — nothing ran".to_string(),
        ),
        "needs_approval_overridden" => (
            "approval",
            format!("Asked for your approval of {title} although the plan claimed none was needed"),
        ),
        "approval.issued" => ("approval", format!("You approved {title}")),
        "approval.denied" => (
            "security",
            format!("Refused an approval for {title} that did not verify"),
        ),
        "work_dispatched" => ("work", format!("Started {title} in the background")),
        "work_item.done" => (
            "work",
            match facts.as_ref().and_then(|f| f.checks) {
                Some((passed, total)) if passed == total && total > 0 => format!(
                    "Approved and ran {title} — {} passed",
                    plural(total as u64, "check")
                ),
                Some((passed, total)) if total > 0 => {
                    format!("Ran {title} — {passed} of {total} checks passed")
                }
                _ => format!("Approved and ran {title}"),
            },
        ),
        "work_item.failed" => ("work", format!("{title} failed")),
        "work_item.stuck" => ("work", format!("{title} is stuck and needs you")),
        "work_item.blocked" => ("work", format!("{title} was blocked by a safety check")),
        "work_run_crashed" => (
            "work",
            match s(data, "action") {
                Some("failed") => format!("{title} kept crashing and was stopped as failed"),
                Some("cycle_dropped") => {
                    format!("A check cycle of {title} crashed; the next scheduled one runs again")
                }
                _ => format!("{title} crashed and was resumed from its last saved step"),
            },
        ),
        "verification_completed" => (
            "work",
            match (
                data.get("all_passed").and_then(Value::as_bool),
                n(data, "failed"),
            ) {
                (Some(true), _) => format!("Checked {title}: all checks passed"),
                (_, Some(failed)) => {
                    format!("Checked {title}: {} failed", plural(failed, "check"))
                }
                _ => format!("Checked {title}"),
            },
        ),
        "planner_consulted" => (
            "work",
            format!("Asked the planner to revise {title} after a failed attempt"),
        ),
        "execution_blocked_no_approval" => (
            "security",
            format!("Refused to run {title} without a valid approval"),
        ),
        "execution_blocked_linkage" => (
            "security",
            format!("Refused to run {title}: its follow-up link did not check out"),
        ),
        "artifact_ref_mismatch" => (
            "security",
            format!("Flagged {title}: the files it reported did not match what it produced"),
        ),
        "artifact_refused" => (
            "security",
            format!("Did not keep a file from {title}: it was a link, not a plain file"),
        ),
        "goal_cycle_checks" => ("work", format!("Checked on goal {title}")),
        // Issue #15: which workspace was read, what changed, by which approval.
        "workspace_copied" => (
            "work",
            format!(
                "Copied workspace '{}' for {title} ({} access) — the original is not touched",
                s(data, "workspace").unwrap_or("?"),
                s(data, "access").unwrap_or("read")
            ),
        ),
        "workspace_changes" => (
            "work",
            format!(
                "{title} changed {} in a copy of workspace '{}' (+{} −{}){}{}",
                plural(
                    data.get("files")
                        .and_then(Value::as_array)
                        .map_or(0, |f| f.len() as u64),
                    "file"
                ),
                s(data, "workspace").unwrap_or("?"),
                n(data, "added").unwrap_or(0),
                n(data, "removed").unwrap_or(0),
                match data.get("protected_edits").and_then(Value::as_array) {
                    Some(p) if !p.is_empty() => {
                        format!("; check-defining files edited: {}", p.len())
                    }
                    _ => String::new(),
                },
                s(data, "approval")
                    .map(|t| format!(" — approval {}", t.chars().take(8).collect::<String>()))
                    .unwrap_or_default(),
            ),
        ),
        "workspace_checks_refused" => (
            "security",
            format!(
                "Did not run the checks of {title}: its change makes code under test reach into the test runner ({})",
                data.get("files")
                    .and_then(Value::as_array)
                    .map(|f| f
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "))
                    .unwrap_or_default()
            ),
        ),
        "workspace_checks_restored" => (
            "security",
            format!(
                "{title} edited check-defining files ({}); the checks ran without these edits",
                data.get("files")
                    .and_then(Value::as_array)
                    .map_or(0, |f| f.len())
            ),
        ),
        "workspace_apply_offered" => (
            "approval",
            format!(
                "{title}'s changes to workspace '{}' wait for you to apply them",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "workspace_applied" => (
            "work",
            format!(
                "Applied {title}'s changes to workspace '{}' ({}, +{} −{}) — approval {}{}",
                s(data, "workspace").unwrap_or("?"),
                plural(
                    data.get("files")
                        .and_then(Value::as_array)
                        .map_or(0, |f| f.len() as u64),
                    "file"
                ),
                n(data, "added").unwrap_or(0),
                n(data, "removed").unwrap_or(0),
                s(data, "token_id")
                    .map(|t| t.chars().take(8).collect::<String>())
                    .unwrap_or_else(|| "?".into()),
                s(data, "commit")
                    .map(|c| format!("; committed as {}", c.chars().take(12).collect::<String>()))
                    .unwrap_or_default(),
            ),
        ),
        "workspace_apply_declined" => (
            "approval",
            format!(
                "Did not apply {title}'s changes: workspace '{}' is untouched",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "workspace_apply_refused" => (
            "security",
            format!(
                "Refused to apply {title}'s changes: the workspace changed since the copy, or the approval did not match"
            ),
        ),
        "workspace_commit_failed" => (
            "work",
            format!("Applied {title}'s changes, but the local commit failed"),
        ),
        "workspace_undone" => (
            "work",
            format!(
                "Undid {title}'s changes: workspace '{}' is as it was",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "workspace_undo_declined" => (
            "work",
            format!(
                "Kept {title}'s changes to workspace '{}'",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "workspace_undo_refused" => (
            "security",
            format!("Did not undo {title}'s changes: files changed since the apply"),
        ),
        "workspace_apply_recovered" => (
            "system",
            format!(
                "Finished or rolled back an apply to workspace '{}' that a restart interrupted",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "workspace_apply_recovery_failed" => (
            "security",
            format!(
                "Could not recover an interrupted apply to workspace '{}' — check it by hand",
                s(data, "workspace").unwrap_or("?")
            ),
        ),
        "goal_spawned_task" => ("work", format!("Goal {title} started a task")),
        "goal_budget_exhausted" => (
            "work",
            format!(
                "Goal {title} has used its budget; it starts no more fix tasks until you approve it again"
            ),
        ),
        "goal_fix_skipped" => (
            "work",
            format!(
                "Goal {title}'s checks failed; it only reads its workspace, so no fix task was started"
            ),
        ),
        "task_nothing_ran" => (
            "work",
            format!("{title} ran no tool call: every one was refused, so it did not count as done"),
        ),
        "spawned_task_needs_approval" => (
            "approval",
            format!("A task from goal {title} needs your approval"),
        ),
        "batch_executed" => ("work", format!("Ran a batch of actions for {title}")),
        "gate_blocked" => ("security", format!("The gate '{gate}' blocked a step")),
        "gate_block_reported" => ("security", format!("The gate '{gate}' reported a problem")),
        "gate_set_invalid" => (
            "security",
            "A gate is misconfigured, so its checks fail closed".to_string(),
        ),
        "gate_approval_unavailable" => (
            "security",
            format!("The gate '{gate}' needed your approval and nobody could answer — blocked"),
        ),
        "gate_eval_cap_reached" => (
            "security",
            "Stopped evaluating gates at the per-turn limit — blocked".to_string(),
        ),
        "rejected_mutation" => (
            "security",
            format!("Ignored a change the gate '{gate}' was not allowed to make"),
        ),
        "quality_lane_violation" => (
            "security",
            format!("The quality check '{gate}' flagged a reply"),
        ),
        "escalation_unknown" | "escalation_cycle" => (
            "security",
            "A gate escalation is misconfigured — blocked".to_string(),
        ),
        "access_transition" => (
            "security",
            "A connection's access level changed".to_string(),
        ),
        "access_customer_context_refused" => (
            "security",
            "Refused to load customer details from an unsafe place".to_string(),
        ),
        // §18.5: one event for every limit; `limit` says which.
        "security_rate_limited" => (
            "security",
            match data.get("limit").and_then(Value::as_str) {
                Some("card") => "Refused a card answer sent faster than the card rate limit allows",
                Some("llm_scope") | Some("llm_global") => {
                    "Held back a model call over the rate limit — nothing was sent to the model"
                }
                Some("web_search") => "Refused a web search over the search rate limit",
                Some("memory_ops") => "Dropped memory changes over the memory rate limit",
                Some("suggestion") => "Held back a suggestion over the hourly suggestion limit",
                Some("autonomy_proposal") => {
                    "Held back an autonomy proposal over the weekly proposal limit"
                }
                _ => "Slowed down a sender who went over the message rate limit",
            }
            .to_string(),
        ),
        "backpressure_busy_retry" => (
            "system",
            "Was too busy for a message and asked the sender to retry".to_string(),
        ),
        "message.bad_signature" => (
            "security",
            "Rejected a message whose signature did not verify".to_string(),
        ),
        "replay_attempt" => ("security", "Rejected a replayed message".to_string()),
        "chronicle.pruned" => (
            "system",
            "Cleared old conversation history (retention policy)".to_string(),
        ),
        "card_answered" => {
            let choice = s(data, "verdict")
                .or_else(|| s(data, "selected_value"))
                .or_else(|| s(data, "action"))
                .or_else(|| s(data, "selected_action"));
            let text = match (choice, data.get("success").and_then(Value::as_bool)) {
                (Some(c), _) => format!("You answered a {card}: {}", c.replace('_', " ")),
                (None, Some(true)) => "You stored a credential through the secure form".into(),
                (None, Some(false)) => "A secure input request was cancelled".into(),
                _ => format!("You answered a {card}"),
            };
            ("card", text)
        }
        "card_timed_out" => (
            "card",
            format!("A {card} got no answer in time and was declined — nothing changed"),
        ),
        "card_declined_disconnected" => (
            "card",
            format!("A {card} was declined because you disconnected — nothing changed"),
        ),
        "card_withdrawn" => (
            "card",
            format!("A {card} was withdrawn: what asked no longer needs an answer"),
        ),
        "card_declined_shutdown" => (
            "card",
            format!("A {card} was declined because Silas was shutting down"),
        ),
        "secret_stored" => (
            "security",
            format!(
                "Stored a credential securely{}",
                s(data, "label")
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ),
        ),
        "gate_runner_fault" => (
            "security",
            "A safety check failed internally, so what it guards was blocked".to_string(),
        ),
        "secret_redacted_inbound" => (
            "security",
            "Removed what looked like a credential from a message before storing or reading it"
                .to_string(),
        ),
        "secret_redacted_outbound" => (
            "security",
            "Removed what looked like a credential from my own reply before storing or showing it"
                .to_string(),
        ),
        "plan_card_refused" => (
            "security",
            if s(data, "reason") == Some("workspace") {
                format!(
                    "Refused an approval of {title}: its workspace changed in the registry after it was shown to you"
                )
            } else {
                format!(
                    "Refused an approval of {title}: the plan changed after it was shown to you"
                )
            },
        ),
        "plan_refused_workspace" => (
            "security",
            format!(
                "Refused a plan before asking you: {}",
                match s(data, "reason") {
                    Some("unknown_workspace") => "it named a workspace you have not registered",
                    Some("write_on_read_only") => "it asked to change a read-only workspace",
                    Some("relative_extra_path" | "missing_extra_path") => {
                        "it asked for an extra path that is not a real absolute path"
                    }
                    Some("forbidden_extra_path") => {
                        "it asked to read a directory no task may read (Silas's data, a home, credentials)"
                    }
                    _ => "its workspace could not be checked",
                }
            ),
        ),
        "workspace_added" => (
            "system",
            format!(
                "Registered workspace {} ({}{})",
                s(data, "name").unwrap_or("?"),
                s(data, "path").unwrap_or("?"),
                if data.get("writable").and_then(Value::as_bool) == Some(true) {
                    ", writable"
                } else {
                    ", read-only"
                }
            ),
        ),
        "workspace_removed" => (
            "system",
            format!("Removed workspace {}", s(data, "name").unwrap_or("?")),
        ),
        "plan_refused_review_full" => (
            "security",
            format!(
                "Turned away a customer's request: {} customer requests already wait for your review",
                data.get("waiting")
                    .and_then(Value::as_u64)
                    .unwrap_or_default()
            ),
        ),
        "plan_id_collision" => (
            "security",
            "A proposed plan reused the name of existing work; it was filed separately".to_string(),
        ),
        "tool_call_approved" => (
            "approval",
            format!(
                "You allowed one {} call in {title}",
                s(data, "tool_name").unwrap_or("tool")
            ),
        ),
        "tool_call_declined" => (
            "approval",
            format!(
                "You declined a {} call in {title} — it did not run",
                s(data, "tool_name").unwrap_or("tool")
            ),
        ),
        "tool_call_refused" => (
            "security",
            format!("Refused a tool approval for {title}: the work changed after it was asked"),
        ),
        "tool_call_approval_lost" => (
            "work",
            format!("A paused step of {title} could no longer be approved — it was stopped"),
        ),
        "scheduler.missed" => {
            let job = s(data, "job_id")
                .map(|j| format!("'{j}'"))
                .unwrap_or_else(|| "a scheduled job".into());
            let runs = plural(n(data, "missed").unwrap_or(1), "run");
            let text = if data.get("caught_up").and_then(Value::as_bool) == Some(true) {
                format!("Ran {job} once to catch up on {runs} missed while Silas was down")
            } else {
                format!("Skipped {runs} of {job} missed while Silas was down")
            };
            ("system", text)
        }
        "scheduler.job_dropped" => (
            "system",
            "Removed a scheduled job that no longer applies".to_string(),
        ),
        "scheduler.dispatch_failed" => {
            ("system", format!("Could not start scheduled work {title}"))
        }
        "plan_sent_for_review" => (
            "approval",
            match s(data, "scope_id") {
                Some(scope) => {
                    format!("A customer's request ({scope}) was sent to your Review: {title}")
                }
                None => format!("A customer's request was sent to your Review: {title}"),
            },
        ),
        "plan_reference_refused" => (
            "security",
            "Refused a plan that used something belonging to another conversation — nothing ran"
                .to_string(),
        ),
        "plan_refused_budget" => (
            "security",
            "Refused a plan that asked for more than its budget allows — nothing ran".to_string(),
        ),
        "plan_refused_skill" => (
            "security",
            "Refused a plan that named a skill that is not installed as approved — nothing ran"
                .to_string(),
        ),
        "work_item.paused" => (
            "approval",
            format!(
                "{} paused: its {} call waits for your approval",
                capitalised(&title),
                s(data, "tool_name").unwrap_or("tool")
            ),
        ),
        "work_item.cancelled" => ("work", format!("You cancelled {title}")),
        "work_attempt_interrupted" => (
            "work",
            format!(
                "Attempt {} of {title} was cut off when Silas stopped; attempts are not resumed midway, so its commands run again if an attempt is left",
                n(data, "attempt").unwrap_or(1)
            ),
        ),
        other => {
            let hidden = KNOWN_EVENTS
                .iter()
                .any(|(e, t)| *e == other && *t == Treatment::Hidden)
                || other.starts_with("work_item.");
            if hidden {
                return None;
            }
            skills::describe(other, data)
                .or_else(|| outside::describe(other, data))
                .or_else(|| memory::describe(other, data))
                .unwrap_or_else(|| {
                    (
                        "other",
                        format!("Recorded: {}", other.replace(['_', '.'], " ")),
                    )
                })
        }
    };
    Some(ActivityItem {
        seq,
        at: at.to_string(),
        kind: kind.to_string(),
        text,
    })
}

#[cfg(test)]
mod tests;
