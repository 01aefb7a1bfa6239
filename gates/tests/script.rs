//! §14 "Script checker": real subprocesses. Injection strings reach the
//! script as inert data; timeouts kill the process group.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction};
use silas_gates::{PredicateProvider, ScriptProvider};

fn gate(v: Value) -> Gate {
    serde_json::from_value(v).unwrap()
}

fn provider(dir: &std::path::Path) -> ScriptProvider {
    ScriptProvider::new(
        dir.to_path_buf(),
        Arc::new(PredicateProvider::new(vec![dir.to_path_buf()])),
    )
    .with_timeout(Duration::from_secs(5))
}

fn ctx(v: Value) -> JsonObject {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn injection_strings_are_inert_data() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let marker_s = marker.to_string_lossy().into_owned();
    // The script echoes the value back; a shell would have run the payloads.
    let g = gate(
        json!({"name": "echo", "on": "every_user_message", "provider": "script",
        "check_command": "sh -c 'printf \"%s\" \"$SILAS_CTX_MESSAGE\"'",
        "check_expect": {"contains": "rm -rf"}}),
    );
    let payloads = [
        "'; rm -rf / #".to_owned(),
        format!("$(touch {marker_s})"),
        format!("`touch {marker_s}`; rm -rf / #"),
        format!("\"; touch {marker_s}; echo \""),
    ];
    for p in &payloads {
        let r = provider(dir.path())
            .evaluate(
                &g,
                &ctx(json!({"message": p, "note": format!("$(touch {marker_s})")})),
            )
            .await;
        assert!(!marker.exists(), "payload executed: {p}");
        // `contains rm -rf` passes only for payloads containing it verbatim.
        let want = if p.contains("rm -rf") {
            GateAction::Continue
        } else {
            GateAction::Block
        };
        assert_eq!(r.action, want, "{p}: {}", r.reason);
    }
    // The value arrives byte-exact.
    let g = gate(
        json!({"name": "echo", "on": "every_user_message", "provider": "script",
        "check_command": "sh -c 'printf \"got: %s\\n\" \"$SILAS_CTX_MESSAGE\"'", "extract": "got",
        "allowed_values": ["'; rm -rf / #"]}),
    );
    let r = provider(dir.path())
        .evaluate(&g, &ctx(json!({"message": "'; rm -rf / #"})))
        .await;
    assert_eq!(r.action, GateAction::Continue, "{}", r.reason);
    assert!(!marker.exists());
}

#[tokio::test]
async fn environment_is_minimal() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY of the test: a variable the daemon has must not leak.
    let g = gate(
        json!({"name": "env", "on": "every_user_message", "provider": "script",
        "check_command": "sh -c 'env | sort'", "check_expect": {"regex": "(?s)\\A(?:(?:PATH|PWD|SHLVL|_|SILAS_GATE_NAME|SILAS_CTX_[A-Z0-9_]+)=[^\\n]*\\n)*\\z"}}),
    );
    let r = provider(dir.path())
        .evaluate(&g, &ctx(json!({"message": "hi"})))
        .await;
    assert_eq!(r.action, GateAction::Continue, "{}", r.reason);
}

#[tokio::test]
async fn stdout_values_delegate_to_predicate_and_mutations_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let g = gate(
        json!({"name": "risk", "on": "on_tool_call", "provider": "script", "type": "numeric_range",
        "check_command": "sh -c 'echo \"size: $SILAS_CTX_TOOL_ARGS_SIZE\"; echo \"modified_context: {\\\"tool_args\\\": {\\\"dry_run\\\": true}}\"'",
        "extract": "size", "auto_approve": {"min": 0, "max": 10}}),
    );
    let p = provider(dir.path());
    let r = p
        .evaluate(&g, &ctx(json!({"tool_args": {"size": 5}})))
        .await;
    assert_eq!(r.action, GateAction::Continue, "{}", r.reason);
    assert_eq!(
        r.modified_context.unwrap()["tool_args"],
        json!({"dry_run": true})
    );
    let r = p
        .evaluate(&g, &ctx(json!({"tool_args": {"size": 50}})))
        .await;
    assert_eq!(r.action, GateAction::Block);
}

#[tokio::test]
async fn exit_status_and_errors_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path());
    let cases = [
        ("true", GateAction::Continue),
        ("false", GateAction::Block),
        ("/nonexistent/binary", GateAction::Block),
        ("sh -c 'echo modified_context: not-json'", GateAction::Block),
        ("'unterminated", GateAction::Block),
    ];
    for (cmd, want) in cases {
        let g = gate(
            json!({"name": "s", "on": "after_step", "provider": "script", "check_command": cmd}),
        );
        assert_eq!(
            p.evaluate(&g, &JsonObject::new()).await.action,
            want,
            "{cmd}"
        );
    }
    // A verdict (a non-zero exit) reads as one; a script killed by a signal
    // gave none: it fails closed, flagged so the owner is told.
    let verdict = gate(
        json!({"name": "s", "on": "after_step", "provider": "script",
                              "check_command": "sh -c 'exit 3'"}),
    );
    let r = p.evaluate(&verdict, &JsonObject::new()).await;
    assert_eq!(r.reason, "script exited with code 3");
    assert!(!silas_gates::provider::is_fail_closed(&r));
    let killed = gate(
        json!({"name": "s", "on": "after_step", "provider": "script",
                             "check_command": "sh -c 'kill -9 $$'"}),
    );
    let r = p.evaluate(&killed, &JsonObject::new()).await;
    assert_eq!(r.action, GateAction::Block);
    assert_eq!(r.reason, "script was killed by a signal");
    assert!(silas_gates::provider::is_fail_closed(&r));
}

#[tokio::test]
async fn timeout_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survived");
    let p = ScriptProvider::new(
        dir.path().to_path_buf(),
        Arc::new(PredicateProvider::new(vec![])),
    )
    .with_timeout(Duration::from_millis(300));
    // A background grandchild that would write the marker after 1 s.
    let g = gate(
        json!({"name": "slow", "on": "after_step", "provider": "script",
        "check_command": format!("sh -c '(sleep 1; touch {}) & sleep 30'", marker.display())}),
    );
    let t = Instant::now();
    let r = p.evaluate(&g, &JsonObject::new()).await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(r.action, GateAction::Block);
    assert!(r.reason.contains("timed out"), "{}", r.reason);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!marker.exists(), "grandchild outlived the timeout");
}

#[tokio::test]
async fn output_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path()).with_max_output(100);
    let g = gate(
        json!({"name": "big", "on": "after_step", "provider": "script",
        "check_command": "sh -c 'head -c 1000000 /dev/zero | tr \"\\\\0\" x; echo; echo tail: yes'", "extract": "tail",
        "allowed_values": ["yes"]}),
    );
    let r = p.evaluate(&g, &JsonObject::new()).await;
    // The `tail:` line is beyond the cap, so the value is not found.
    assert_eq!(r.action, GateAction::Block, "{}", r.reason);
    assert_eq!(r.reason, "value not found in context");
}
