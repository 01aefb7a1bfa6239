//! NEVER_LOG (meao M1.5/M3): what may never be written to the audit log, and
//! the sanitiser that enforces it no matter what a caller passes.
//!
//! Removed at any depth of an entry's data, even when the caller put them there:
//! message content, tool output, file content, memory content and response
//! text. They are recognised by field name — either a dedicated name
//! (`message_content`, `tool_output`, …) or a content-like leaf (`content`,
//! `text`, `output`, …) under a parent named after the thing it belongs to
//! (`message.content`, `tool.output`, `response.text`, …). Every remaining
//! string goes through the secret detector; error strings are additionally
//! cut to 500 characters. The paths removed are recorded (names only) under
//! `_never_log_removed` so an auditor can see something was withheld.

use serde_json::Value;

use crate::model::JsonObject;
use crate::secrets;

/// Field names that are removed wherever they appear.
const ALWAYS_REMOVED: &[&str] = &[
    "message_content",
    "message_text",
    "tool_output",
    "tool_result",
    "file_content",
    "file_contents",
    "memory_content",
    "response_text",
    "stdout",
    "stderr",
];

/// Parents whose content-like children are removed (`message.content`, …).
const SENSITIVE_PARENTS: &[&str] = &["message", "tool", "file", "memory", "response", "result"];
const CONTENT_LEAVES: &[&str] = &["content", "text", "output", "body", "value"];

/// Error-carrying fields: redacted and truncated to [`MAX_ERROR_CHARS`].
const ERROR_FIELDS: &[&str] = &[
    "error",
    "error_message",
    "errorMessage",
    "last_error",
    "reason",
];
pub const MAX_ERROR_CHARS: usize = 500;

/// Key under which the sanitiser lists the paths it removed.
pub const REMOVED_KEY: &str = "_never_log_removed";

/// Sanitise audit data in place. Returns the dotted paths that were removed.
pub fn sanitize(data: &mut JsonObject) -> Vec<String> {
    let mut removed = Vec::new();
    data.remove(REMOVED_KEY); // callers cannot forge the withheld list
    sanitize_object(data, None, "", &mut removed);
    if !removed.is_empty() {
        data.insert(
            REMOVED_KEY.to_string(),
            Value::Array(removed.iter().cloned().map(Value::String).collect()),
        );
    }
    removed
}

fn sanitize_object(
    obj: &mut JsonObject,
    parent: Option<&str>,
    prefix: &str,
    removed: &mut Vec<String>,
) {
    let parent_sensitive = parent.is_some_and(|p| SENSITIVE_PARENTS.contains(&p));
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let forbidden = ALWAYS_REMOVED.contains(&key.as_str())
            || (parent_sensitive && CONTENT_LEAVES.contains(&key.as_str()));
        if forbidden {
            obj.remove(&key);
            removed.push(path);
            continue;
        }
        if let Some(v) = obj.get_mut(&key) {
            let is_error = ERROR_FIELDS.contains(&key.as_str());
            sanitize_value(v, &key, &path, is_error, removed);
        }
    }
}

fn sanitize_value(v: &mut Value, key: &str, path: &str, is_error: bool, removed: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            let (mut clean, _) = secrets::redact(s);
            if is_error {
                clean = truncate_chars(&clean, MAX_ERROR_CHARS);
            }
            *s = clean;
        }
        Value::Object(o) => sanitize_object(o, Some(key), path, removed),
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                sanitize_value(item, key, &format!("{path}[{i}]"), is_error, removed);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// First `max` characters (not bytes) of `s`.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((idx, _)) => s[..idx].to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[test]
    fn removes_message_content_even_if_caller_provides_it() {
        let mut d = obj(json!({"message": {"content": "secret user message", "channel": "web"}}));
        let removed = sanitize(&mut d);
        assert_eq!(removed, vec!["message.content"]);
        assert_eq!(d["message"], json!({"channel": "web"}));
        assert_eq!(d[REMOVED_KEY], json!(["message.content"]));
    }

    #[test]
    fn removes_every_never_log_category() {
        let mut d = obj(json!({
            "tool": {"name": "shell_exec", "output": "file listing"},
            "file": {"path": "/x", "content": "file body"},
            "memory": {"memory_id": "m1", "content": "remembered"},
            "response": {"text": "agent reply", "len": 11},
            "message_content": "flat",
            "tool_output": "flat",
            "nested": [{"stdout": "out"}],
        }));
        sanitize(&mut d);
        let text = serde_json::to_string(&d).unwrap();
        for leaked in [
            "file listing",
            "file body",
            "remembered",
            "agent reply",
            "\"flat\"",
            "\"out\"",
        ] {
            assert!(!text.contains(leaked), "{leaked} leaked: {text}");
        }
        assert_eq!(d["tool"]["name"], "shell_exec");
        assert_eq!(d["response"]["len"], 11);
    }

    #[test]
    fn error_messages_are_redacted_and_cut_to_500_chars() {
        let long = format!(
            "failed with ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 {}",
            "x".repeat(1000)
        );
        let mut d = obj(json!({"error": long}));
        sanitize(&mut d);
        let e = d["error"].as_str().unwrap();
        assert_eq!(e.chars().count(), 500);
        assert!(e.starts_with("failed with [REDACTED:github_token] "));
    }

    #[test]
    fn secrets_are_redacted_in_every_string() {
        let canary = "sk-proj-CANARYcanary0123456789abcdefXYZ";
        let mut d = obj(json!({"cmd": format!("curl -H 'x: {canary}'"), "list": [canary]}));
        sanitize(&mut d);
        assert!(!serde_json::to_string(&d).unwrap().contains("CANARY"));
    }

    #[test]
    fn callers_cannot_forge_the_removed_list() {
        let mut d = obj(json!({REMOVED_KEY: ["nothing"], "ok": 1}));
        assert!(sanitize(&mut d).is_empty());
        assert!(!d.contains_key(REMOVED_KEY));
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        assert_eq!(truncate_chars("日本語", 2), "日本");
        assert_eq!(truncate_chars("ab", 5), "ab");
    }
}
