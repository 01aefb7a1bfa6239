//! The chaos run's fake model: every answer is computed from the request,
//! because SIGKILLs make the order of model calls unknowable. Each model
//! role has its own model name (`fake:proxy`, …), and every message the
//! client sends carries a marker the answers echo:
//!
//! * `chat-<i>-<k>` → the proxy answers directly with `re: chat-<i>-<k>`;
//! * `chaos-<i>` → the proxy routes to the planner, which proposes task
//!   `chaos-<i>` on the `chaos` workspace (`apply: direct`); the executor
//!   appends `<item> call <n>` to `ran-<item>.log` in its copy (`<item>` the
//!   work item's id, read from the copy's path; `n` unique per tool call
//!   issued), then reports.
//!
//! Every call waits a seeded random 30–300 ms, so kills land inside calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};

/// A message marker found in a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marker {
    Chat(String),
    Plan(String),
}

/// `prefix` followed by digit groups joined by `-` (`groups` of them), at
/// `at` in `s`.
fn marker_at(s: &str, at: usize, prefix: &str, groups: usize) -> Option<String> {
    let rest = &s[at + prefix.len()..];
    let mut end = 0;
    for g in 0..groups {
        let digits = rest[end..].bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        end += digits;
        if g + 1 < groups {
            if !rest[end..].starts_with('-') {
                return None;
            }
            end += 1;
        }
    }
    Some(format!("{prefix}{}", &rest[..end]))
}

/// The last well-formed occurrence of `prefix` in `s`, and where.
fn last(s: &str, prefix: &str, groups: usize) -> Option<(usize, String)> {
    s.match_indices(prefix)
        .filter_map(|(at, _)| marker_at(s, at, prefix, groups).map(|m| (at, m)))
        .last()
}

/// The marker the request is about: the latest one in its text (earlier
/// turns come first in the prompt).
pub fn marker_of(text: &str) -> Option<Marker> {
    let chat = last(text, "chat-", 2);
    let plan = last(text, "chaos-", 1);
    match (chat, plan) {
        (Some((a, c)), Some((b, _))) if a > b => Some(Marker::Chat(c)),
        (_, Some((_, p))) => Some(Marker::Plan(p)),
        (Some((_, c)), None) => Some(Marker::Chat(c)),
        (None, None) => None,
    }
}

/// The plan the planner proposes for `id`.
pub fn plan_markdown(id: &str) -> String {
    format!(
        "---\nid: {id}\ntype: task\ntitle: \"{id}\"\nverify:\n  - name: ran\n    run: \"ls ran-{id}*.log\"\n    expect: {{exit_code: 0}}\n    timeout: 60\nworkspace: {{name: chaos, access: write, apply: direct}}\n---\n\nAppend one line to ran-{id}.log ({id}).\n"
    )
}

fn direct(text: &str) -> Reply {
    Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": text}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"}))
}

/// The answer to one request body.
fn answer(body: &Value, calls: &AtomicU64) -> Reply {
    let role = body["model"].as_str().unwrap_or_default().to_string();
    // The proxy and the planner answer the message at hand: the last one
    // (earlier turns and plans are in the system prompt); the executor's
    // marker is in its briefing.
    let text = if role == "executor" {
        body["messages"].to_string()
    } else {
        body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m["content"].to_string())
            .unwrap_or_default()
    };
    let marker = marker_of(&text);
    match (role.as_str(), marker) {
        ("proxy", Some(Marker::Chat(m))) => direct(&format!("re: {m}")),
        ("proxy", Some(Marker::Plan(_))) => Reply::json(&json!({
            "route": "planner", "reason": "needs a plan",
            "interaction_register": "execution", "interaction_mode": "act_and_report",
            "context_profile": "conversation"})),
        ("planner", Some(Marker::Plan(id))) => Reply::json(&json!({
            "message": format!("Plan for {id}."),
            "plan_action": {"action": "propose", "plan_markdown": plan_markdown(&id)},
            "needs_approval": true})),
        ("executor", Some(Marker::Plan(_))) => {
            let ran_tool = body["messages"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["role"] == "tool"));
            if ran_tool {
                Reply::json(&json!({"summary": "appended",
                    "artifact_refs": [], "next_steps": []}))
            } else {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                // The line names the work item the daemon runs (its copy is
                // `ws-<item>/result`): a replayed plan turn may file the plan
                // under a new id. Slow work around the append, so kills land
                // inside it.
                Reply::tool_call(
                    "shell_exec",
                    &json!({"command": format!(
                        "sleep 0.2; w=$(basename \"$(dirname \"$PWD\")\"); i=${{w#ws-}}; \
                         echo \"$i call {n}\" >> \"ran-$i.log\"; sleep 0.2")}),
                )
            }
        }
        _ => direct("ok"),
    }
}

/// Installs the responder on `fake`; delays drawn from `seed`.
pub fn install(fake: &FakeLlm, seed: u64) {
    let calls = Arc::new(AtomicU64::new(0));
    let rng = Arc::new(std::sync::Mutex::new(fastrand::Rng::with_seed(
        seed ^ 0x5eed,
    )));
    fake.set_responder(move |body| {
        let delay = rng.lock().map(|mut r| r.u64(30..300)).unwrap_or(100);
        Some(answer(body, &calls).delayed(Duration::from_millis(delay)))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_marker_wins() {
        assert_eq!(
            marker_of("x chaos-2 then hello chat-3-1\"}]"),
            Some(Marker::Chat("chat-3-1".into()))
        );
        assert_eq!(
            marker_of("hello chat-3-1 then run chaos-4 now"),
            Some(Marker::Plan("chaos-4".into()))
        );
        assert_eq!(marker_of("chat-based chaos-theory"), None);
        assert_eq!(
            marker_of("ran-chaos-12.log"),
            Some(Marker::Plan("chaos-12".into()))
        );
    }
}
