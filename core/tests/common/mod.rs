//! Shared fixtures for the core integration tests: a representative goal and
//! one mutation per WorkItem field (included and excluded from the plan hash).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use silas_core::Timestamp;

pub fn base_goal() -> Value {
    json!({
        "id": "goal-1", "type": "goal", "title": "Keep the site healthy",
        "agent": "ephemeral", "body": "Check the site; fix what is broken.",
        "schedule": "*/30 * * * *",
        "verify": [
            {"name": "up", "run": "curl -fsS http://127.0.0.1:8080/health", "expect": {"exit_code": 0}},
            {"name": "fast", "run": "cat latency", "expect": {"output_lt": 250.0}},
        ],
        "gates": [
            {"name": "budget", "on": "on_tool_call", "type": "numeric_range", "extract": "usd",
             "auto_approve": {"min": 0.0, "max": 5.0}, "on_block": "page_owner"},
            {"name": "pii", "on": "every_agent_response", "provider": "guardrails_ai", "check": "pii"},
        ],
        "skills": ["coding", "ops"],
        "escalation": {
            "report": {"action": "report", "message": "Site check failed"},
            "page_owner": {"action": "escalate_human", "message": "Budget gate blocked"},
            "unused": {"action": "retry"},
        },
        "failure_context": "Fix these failures: $failed_checks",
        "tasks": ["t1"], "depends_on": ["d1"],
        "created_at": "2026-11-01T00:00:00Z",
    })
}

pub fn token_json() -> Value {
    json!({
        "token_id": "tok-1", "plan_hash": "ab".repeat(32), "work_item_id": "goal-1",
        "scope": "standing", "verdict": "approved", "signature": "AAEC",
        "issued_at": "2026-11-22T10:00:00Z", "expires_at": "2026-11-22T10:30:00Z",
        "nonce": "n-1", "approval_strength": "tap",
        "conditions": {"spawn_policy_hash": "cd".repeat(32)},
        "executions_used": 0, "max_executions": 10, "execution_nonces": [],
    })
}

/// One mutation per included field; each yields a valid, different WorkItem.
pub fn mutate_included(v: &mut Value, field: &str, s: &str) {
    let o = v.as_object_mut().unwrap();
    let s = format!("{s}~");
    match field {
        "id" | "title" | "body" | "on_failure" | "on_stuck" => {
            let old = o
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            o.insert(field.into(), json!(format!("{old}{s}")));
        }
        "type" => {
            o.insert(field.into(), json!("project"));
        }
        "parent" | "spawned_by" | "follow_up_of" | "domain" | "schedule" => {
            o.insert(field.into(), json!(s));
        }
        "failure_context" => {
            o.insert(field.into(), json!(format!("Fix: {s} $failed_checks")));
        }
        "agent" => {
            o.insert(field.into(), json!("stream"));
        }
        "budget" => {
            o.insert(
                field.into(),
                json!({"max_tokens": 200_001 + s.len() as u64}),
            );
        }
        "interaction_mode" => {
            o.insert(field.into(), json!("act_and_report"));
        }
        "input_artifacts_from" | "skills" | "tasks" | "depends_on" => {
            let mut list = o
                .get(field)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            list.push(json!(s));
            o.insert(field.into(), Value::Array(list));
        }
        "verify" => {
            o["verify"][0]["run"] = json!(format!("echo {s}"));
        }
        "gates" => {
            o["gates"][1]["check"] = json!(s);
        }
        "access_levels" => {
            o.insert(
                field.into(),
                json!({ s.clone(): {"description": "d", "tools": ["shell_exec"]} }),
            );
        }
        "escalation" => {
            o["escalation"]["report"]["message"] = json!(s);
        }
        other => panic!("no mutation for included field {other}"),
    }
}

pub fn mutate_excluded(v: &mut Value, field: &str, n: u64) {
    let o = v.as_object_mut().unwrap();
    match field {
        "approval_token" => {
            o.insert(field.into(), token_json());
        }
        "needs_approval" => {
            o.insert(field.into(), json!(false));
        }
        "status" => {
            o.insert(field.into(), json!("running"));
        }
        "attempts" => {
            o.insert(field.into(), json!(n + 1));
        }
        "budget_used" => {
            o.insert(
                field.into(),
                json!({"tokens": n + 1, "attempts": 1, "executor_runs": 2}),
            );
        }
        "verification_results" => {
            o.insert(
                field.into(),
                json!([{"name": "up", "passed": false, "n": n}]),
            );
        }
        "created_at" => {
            let t = Timestamp::from_micros(1_700_000_000_000_000 + n as i64).unwrap();
            o.insert(field.into(), json!(t));
        }
        "scope_id" => {
            o.insert(field.into(), json!(format!("ws-{n}")));
        }
        other => panic!("no mutation for excluded field {other}"),
    }
}
