//! Activity sentences for what reaches Silas from outside a conversation:
//! connections and MCP servers (skills that talk to services), the owner's
//! devices and channels (web sign-in, Telegram), and refused answers.
//! Audit data of these events carries ids, names and reasons; a script's
//! output, a message's text or a credential is never in it.

use serde_json::Value;
use silas_core::model::JsonObject;

use super::{count, s};

/// Why a setup did not complete, from the kind the runtime records.
fn setup_reason(reason: Option<&str>) -> &'static str {
    match reason {
        Some("cancelled") => "it was cancelled",
        Some("timed_out") => "it took longer than connections.setup_timeout_seconds",
        Some("failed") => "its script reported a failure",
        Some("protocol") => "its script broke the setup protocol",
        Some("sandbox") => "its script could not run in the sandbox",
        Some("secret_store") => "its token could not be stored",
        Some("no_credential") => "its script finished without handing over a credential",
        _ => "it was refused",
    }
}

/// The sentence for a setup that did not complete: Activity's, and the
/// notice the owner gets when it happens.
pub(crate) fn setup_failed_text(skill: &str, reason: Option<&str>, detail: Option<&str>) -> String {
    let mut text = format!(
        "Setting up the connection of skill '{skill}' did not complete: {}",
        setup_reason(reason)
    );
    if let Some(detail) = detail {
        text.push_str(&format!(" ({detail})"));
    }
    text
}

/// `(kind, sentence)` for a connection, MCP, device or channel event, or
/// `None` for another event.
pub(super) fn describe(event: &str, data: &JsonObject) -> Option<(&'static str, String)> {
    let skill = s(data, "skill").unwrap_or("a skill");
    let connection = s(data, "connection_id").unwrap_or("a connection");
    let tool = s(data, "tool").unwrap_or("a tool");
    Some(match event {
        "connection.registered" => ("system", "Added a connection".to_string()),
        "connection.recovered" => ("system", "A connection recovered".to_string()),
        "connection.failed" => (
            "system",
            "A connection failed and needs your attention".to_string(),
        ),
        "connection.setup_started" => (
            "system",
            format!("Started setting up the connection of skill '{skill}'"),
        ),
        "connection.setup_completed" => (
            "system",
            format!(
                "Connected skill '{skill}' ({} stored in the secret store)",
                super::plural(count(data, "secrets_stored"), "secret")
            ),
        ),
        "connection.setup_failed" => (
            "system",
            setup_failed_text(skill, s(data, "reason"), s(data, "detail")),
        ),
        "connection.script_run" => (
            "work",
            format!(
                "Ran {} of connection {connection}{}",
                s(data, "script").unwrap_or("a script"),
                if data.get("success").and_then(Value::as_bool) == Some(false) {
                    " — it failed"
                } else {
                    ""
                }
            ),
        ),
        "connection.permission_escalation" => (
            "approval",
            format!(
                "Connection {connection} asked for more permissions: {}",
                match s(data, "decision") {
                    Some("approve") => "you granted them",
                    Some("just_this_once") => "you allowed them just this once",
                    _ => "not granted",
                }
            ),
        ),
        "connection_failure_answered" => (
            "approval",
            format!(
                "You chose '{}' for failed connection {connection}",
                s(data, "action").unwrap_or("skip")
            ),
        ),
        "connection.egress_configured" => (
            "security",
            "Connections may reach the hosts and private networks named in the configuration"
                .to_string(),
        ),
        "connection.egress_refused" => (
            "security",
            format!(
                "Refused {} of connection {connection}'s {} to reach where it may not",
                super::plural(
                    data.get("refused")
                        .and_then(Value::as_array)
                        .map_or(0, |r| r.len() as u64)
                        + count(data, "not_listed"),
                    "attempt"
                ),
                s(data, "script").unwrap_or("script")
            ),
        ),
        "mcp_tool_called" => (
            "work",
            format!(
                "Called {tool} of skill '{skill}'{}",
                if data.get("is_error").and_then(Value::as_bool) == Some(true) {
                    " — it answered with an error"
                } else {
                    ""
                }
            ),
        ),
        "mcp_tool_refused" => (
            "security",
            format!("Did not call {tool} of skill '{skill}'"),
        ),
        "mcp_server_refused" => (
            "security",
            format!(
                "Refused to call {tool}: the tools of skill '{skill}' changed since you approved them"
            ),
        ),
        "web.auth_failed" => (
            "security",
            format!(
                "Refused a sign-in without a valid owner credential ({})",
                s(data, "channel").unwrap_or("web")
            ),
        ),
        "web.auth_throttled" => (
            "security",
            "Slowed down sign-in attempts after repeated failures".to_string(),
        ),
        "web.device_added" => (
            "security",
            format!(
                "Paired a new owner device ({})",
                s(data, "label").unwrap_or("unnamed")
            ),
        ),
        "web.device_revoked" => ("security", "Revoked an owner device".to_string()),
        "web.pairing_code_issued" => ("security", "Issued a device pairing link".to_string()),
        "telegram.refused" => (
            "security",
            format!(
                "Refused a Telegram {} from a chat that may not talk to Silas",
                s(data, "what").unwrap_or("message")
            ),
        ),
        "telegram.callback_refused" => (
            "security",
            "Refused a Telegram button press that was not valid for its card".to_string(),
        ),
        "telegram.approval_refused_risk" => (
            "security",
            "Refused an approval from Telegram: the card is above the risk Telegram may approve"
                .to_string(),
        ),
        "telegram.update_abandoned" => (
            "system",
            format!(
                "Gave up on a Telegram update after {}",
                super::plural(count(data, "attempts"), "attempt")
            ),
        ),
        "approval.refused_not_owner" => (
            "security",
            "Refused an approval that did not come from your own signed-in connection".to_string(),
        ),
        "card_answer_refused" => (
            "security",
            format!(
                "Refused an answer to a {}: {}",
                s(data, "card_type")
                    .map(super::card_name)
                    .unwrap_or_else(|| "card".into()),
                match s(data, "reason") {
                    Some("other_scope") => "it came from another conversation",
                    Some("not_owner") => "only you may answer it",
                    Some("turn_not_committed") => "its conversation turn was not saved yet",
                    _ => "it was not valid",
                }
            ),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(o) => o,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn a_failed_setup_says_why_and_a_call_names_its_skill() {
        let d = obj(json!({"skill": "mail", "reason": "protocol",
                           "detail": "line 2: unknown field `usercode`"}));
        let (kind, text) = describe("connection.setup_failed", &d).unwrap();
        assert_eq!(kind, "system");
        assert_eq!(
            text,
            "Setting up the connection of skill 'mail' did not complete: its script broke the \
             setup protocol (line 2: unknown field `usercode`)"
        );
        let d = obj(json!({"skill": "mail", "reason": "timed_out"}));
        let (_, text) = describe("connection.setup_failed", &d).unwrap();
        assert!(
            text.ends_with("took longer than connections.setup_timeout_seconds"),
            "{text}"
        );
        let d = obj(json!({"skill": "mail", "tool": "mcp__mail__send", "is_error": true}));
        let (_, text) = describe("mcp_tool_called", &d).unwrap();
        assert_eq!(
            text,
            "Called mcp__mail__send of skill 'mail' — it answered with an error"
        );
        let d = obj(json!({"card_type": "approval_request", "reason": "not_owner"}));
        let (kind, text) = describe("card_answer_refused", &d).unwrap();
        assert_eq!(kind, "security");
        assert!(text.contains("plan approval card: only you"), "{text}");
        assert_eq!(describe("plan_proposed", &d), None);
    }
}
