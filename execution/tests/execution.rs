//! Executors and the verification runner over the real sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::sandbox;
use serde_json::json;
use silas_core::model::execution::{ExecutionEnvelope, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_core::model::work::VerificationCheck;
use silas_execution::executors::ExecutorRegistry;
use silas_execution::verification::VerificationRunner;
use silas_sandbox::Limits;

fn envelope(action: &str, args: serde_json::Value, id: &str) -> ExecutionEnvelope {
    serde_json::from_value(json!({
        "execution_id": id, "step_index": 0, "task_description": "t", "action": action, "args": args,
        "timeout_seconds": 20, "max_output_bytes": 200,
    }))
    .unwrap()
}

#[tokio::test]
async fn shell_exec_runs_sandboxed_and_returns_external_redacted_output() {
    let base = tempfile::tempdir().unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let canary = "sk-proj-CANARYcanary0123456789abcdefXYZ";
    let env = envelope(
        "shell_exec",
        json!({"command": format!("echo key={canary}; echo hello > notes.txt; cat input.txt; env | cut -d= -f1 | sort | tr '\\n' ' '")}),
        "exec-a",
    );
    let mut env = env;
    env.input_artifacts
        .insert("input.txt".into(), "from-previous-step\n".into());
    env.sandbox_config
        .env
        .insert("SECRET_REF".into(), "ref_123".into());
    let r = reg.execute(&env).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.taint, TaintLevel::External);
    assert!(!r.return_value.contains("CANARY"), "{}", r.return_value);
    assert!(r.return_value.contains("[REDACTED:"));
    assert!(r.return_value.contains("from-previous-step"));
    // Only PATH, HOME, Python's no-bytecode switch and the configured
    // variable exist inside (sh adds PWD).
    assert!(
        r.return_value
            .trim_end()
            .ends_with("HOME PATH PWD PYTHONDONTWRITEBYTECODE SECRET_REF"),
        "{}",
        r.return_value
    );
    assert!(r.artifacts.contains_key("notes.txt"));
    assert!(!r.artifacts.contains_key("input.txt"));
    assert_eq!(
        r.metadata.get("secrets_redacted"),
        Some(&MetadataValue::Number(1.into()))
    );
    // Nothing model-facing carries metadata.
    assert!(!r.return_value.contains("termination"));
}

/// A command that imports the project's Python leaves no `__pycache__`
/// behind: in a project copy those files were offered as changes to apply.
#[tokio::test]
async fn python_run_by_a_command_writes_no_bytecode() {
    let base = tempfile::tempdir().unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let env = envelope(
        "shell_exec",
        json!({"command": "echo 'X = 1' > calc.py && python3 -c 'import calc; print(calc.X)' && ls -A"}),
        "exec-pyc",
    );
    let r = reg.execute(&env).await;
    assert!(r.success, "{r:?}");
    assert!(r.return_value.starts_with('1'), "{}", r.return_value);
    assert!(
        !r.return_value.contains("__pycache__"),
        "{}",
        r.return_value
    );
}

/// `a && b; c` exits with c's code: a's complaint on stderr is all that
/// says a failed, so the model sees stderr on success too (redacted).
#[tokio::test]
async fn a_successful_command_still_shows_what_it_said_on_stderr() {
    let base = tempfile::tempdir().unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let canary = "sk-proj-CANARYcanary0123456789abcdefXYZ";
    let env = envelope(
        "shell_exec",
        json!({"command": format!("touch /no-such-dir/x && echo made; echo {canary} >&2; echo done")}),
        "exec-stderr",
    );
    let r = reg.execute(&env).await;
    assert!(r.success, "{r:?}");
    assert!(r.return_value.starts_with("done"), "{}", r.return_value);
    assert!(r.return_value.contains("stderr: "), "{}", r.return_value);
    assert!(
        r.return_value.contains("/no-such-dir/x"),
        "{}",
        r.return_value
    );
    assert!(!r.return_value.contains("CANARY"), "{}", r.return_value);
    // Quiet commands are unchanged.
    let env = envelope("shell_exec", json!({"command": "echo quiet"}), "exec-quiet");
    assert_eq!(reg.execute(&env).await.return_value.trim_end(), "quiet");
}

#[tokio::test]
async fn python_exec_runs_a_script_and_output_is_capped() {
    let base = tempfile::tempdir().unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let env = envelope(
        "python_exec",
        json!({"script": "print('x' * 5000)"}),
        "exec-b",
    );
    let r = reg.execute(&env).await;
    assert!(r.success, "{r:?}");
    assert!(r.return_value.starts_with(&"x".repeat(200)));
    assert!(r.return_value.contains("[output truncated"));
}

#[tokio::test]
async fn failures_are_results_not_panics() {
    let base = tempfile::tempdir().unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let r = reg
        .execute(&envelope(
            "shell_exec",
            json!({"command": "echo boom >&2; exit 4"}),
            "exec-c",
        ))
        .await;
    assert!(!r.success);
    assert!(r.error.as_deref().unwrap().starts_with("exit code 4: boom"));
    let r = reg.execute(&envelope("rm_rf", json!({}), "exec-d")).await;
    assert!(r.error.unwrap().contains("unknown executor"));
    let r = reg
        .execute(&envelope("shell_exec", json!({"cmd": 1}), "exec-e"))
        .await;
    assert!(!r.success);
    let mut bad = envelope("shell_exec", json!({"command": "true"}), "exec-f");
    bad.input_artifacts.insert("../escape".into(), "x".into());
    assert!(
        reg.execute(&bad)
            .await
            .error
            .unwrap()
            .contains("refusing artifact name")
    );
    let mut bad = envelope("shell_exec", json!({"command": "true"}), "../exec-g");
    bad.execution_id = "../exec-g".into();
    assert!(!reg.execute(&bad).await.success);
}

fn check(v: serde_json::Value) -> VerificationCheck {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn verification_runs_each_check_in_its_own_minimal_sandbox() {
    let verify = tempfile::tempdir().unwrap();
    let artifacts = tempfile::tempdir().unwrap();
    std::fs::write(artifacts.path().join("result.txt"), "42\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", artifacts.path().join("link.txt")).unwrap();
    std::fs::set_permissions(
        artifacts.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(
        artifacts.path().join("result.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let runner = VerificationRunner::new(
        sandbox(),
        verify.path().to_path_buf(),
        Vec::new(),
        Limits::default(),
    );
    let a = artifacts.path().display();
    let checks = vec![
        check(json!({"name": "exit", "run": "true", "expect": {"exit_code": 0}})),
        check(
            json!({"name": "value", "run": "cat \"$SILAS_ARTIFACTS/result.txt\"", "expect": {"output_gt": 40.0}}),
        ),
        check(
            json!({"name": "env", "run": "env | sort | cut -d= -f1 | tr '\\n' ' '", "expect": {"equals": "HOME PATH PWD PYTEST_ADDOPTS PYTHONDONTWRITEBYTECODE PYTHONNOUSERSITE PYTHONSAFEPATH SILAS_ARTIFACTS"}}),
        ),
        check(
            json!({"name": "artifacts are read-only", "run": "echo x > \"$SILAS_ARTIFACTS/result.txt\" || echo RO", "expect": {"contains": "RO"}}),
        ),
        check(
            json!({"name": "made file", "run": "echo hi > out.txt", "expect": {"file_exists": "out.txt"}}),
        ),
        check(
            json!({"name": "no probing", "run": "true", "expect": {"file_exists": "/etc/passwd"}}),
        ),
        check(json!({"name": "slow", "run": "sleep 30", "timeout": 1, "expect": {"exit_code": 0}})),
        check(
            json!({"name": "relative artifact", "run": "cat artifacts/result.txt", "expect": {"contains": "42"}}),
        ),
        check(
            json!({"name": "artifact exists", "run": "true", "expect": {"file_exists": "artifacts/result.txt"}}),
        ),
        check(
            json!({"name": "planted link not followed", "run": "cat artifacts/link.txt || echo NOLINK", "expect": {"contains": "NOLINK"}}),
        ),
        check(
            json!({"name": "work dir is not the artifacts", "run": "test \"$PWD\" = \"$HOME\" && test \"$SILAS_ARTIFACTS\" = \"$PWD/artifacts\" && ls -A", "expect": {"equals": "artifacts"}}),
        ),
        check(
            json!({"name": "originals not granted", "run": format!("cat {a}/result.txt 2>/dev/null || echo DENIED"), "expect": {"equals": "DENIED"}}),
        ),
        check(
            json!({"name": "isolated", "run": "ls ..; cat ../verify-* 2>/dev/null | head -1", "expect": {"not_empty": false}}),
        ),
    ];
    let report = runner.run_checks(&checks, Some(artifacts.path())).await;
    let by_name = |n: &str| report.results.iter().find(|r| r.name == n).unwrap().clone();
    assert!(by_name("exit").passed);
    assert!(by_name("value").passed, "{:?}", by_name("value"));
    assert!(
        by_name("env").passed,
        "environment leaked: {:?}",
        by_name("env")
    );
    assert!(
        by_name("artifacts are read-only").passed,
        "{:?}",
        by_name("artifacts are read-only")
    );
    for n in ["work dir is not the artifacts", "originals not granted"] {
        assert!(by_name(n).passed, "{:?}", by_name(n));
    }
    assert_eq!(
        std::fs::read_to_string(artifacts.path().join("result.txt")).unwrap(),
        "42\n"
    );
    assert!(by_name("made file").passed, "{:?}", by_name("made file"));
    assert!(
        by_name("relative artifact").passed,
        "{:?}",
        by_name("relative artifact")
    );
    assert!(
        by_name("artifact exists").passed,
        "{:?}",
        by_name("artifact exists")
    );
    assert!(
        by_name("planted link not followed").passed,
        "{:?}",
        by_name("planted link not followed")
    );
    assert!(!by_name("no probing").passed);
    assert_eq!(
        by_name("no probing").reason,
        "Path outside permitted directories"
    );
    // `..` never even parses into a check (§3.3 path constraint).
    assert!(serde_json::from_value::<VerificationCheck>(
        json!({"name": "no dotdot", "run": "true", "expect": {"file_exists": "../../etc/passwd"}})
    )
    .is_err());
    let slow = by_name("slow");
    assert!(!slow.passed);
    assert_eq!(slow.reason, "Timeout after 1s");
    assert!(!report.all_passed);
    assert_eq!(report.failed, vec!["no probing", "slow"]);
}

/// Every check's directory is gone once the check is done, passed, failed,
/// timed out or booby-trapped with an unwritable subdirectory: years of
/// checks must not fill the server's disk.
#[tokio::test]
async fn finished_checks_leave_nothing_behind() {
    let verify = tempfile::tempdir().unwrap();
    let artifacts = tempfile::tempdir().unwrap();
    std::fs::write(artifacts.path().join("big.txt"), "x".repeat(10_000)).unwrap();
    let runner = VerificationRunner::new(
        sandbox(),
        verify.path().to_path_buf(),
        Vec::new(),
        Limits::default(),
    );
    let checks = vec![
        check(
            json!({"name": "ok", "run": "echo hi > out.txt", "expect": {"file_exists": "out.txt"}}),
        ),
        check(json!({"name": "fails", "run": "exit 3", "expect": {"exit_code": 0}})),
        check(json!({"name": "slow", "run": "sleep 30", "timeout": 1, "expect": {"exit_code": 0}})),
        check(
            json!({"name": "trap", "run": "mkdir -p d/e && echo x > d/e/f && chmod 000 d/e d && echo done", "expect": {"contains": "done"}}),
        ),
    ];
    let report = runner.run_checks(&checks, Some(artifacts.path())).await;
    let by_name = |n: &str| report.results.iter().find(|r| r.name == n).unwrap().clone();
    assert!(by_name("ok").passed, "{:?}", by_name("ok"));
    assert!(by_name("trap").passed, "{:?}", by_name("trap"));
    assert!(!by_name("fails").passed && !by_name("slow").passed);
    let left: Vec<_> = std::fs::read_dir(verify.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // The originals are untouched.
    assert!(artifacts.path().join("big.txt").is_file());
}

#[tokio::test]
async fn verification_output_is_cut_to_1000_chars_and_network_is_off() {
    let verify = tempfile::tempdir().unwrap();
    let runner = VerificationRunner::new(
        sandbox(),
        verify.path().to_path_buf(),
        Vec::new(),
        Limits::default(),
    );
    let r = runner
        .run_check(&check(json!({"name": "long", "run": "head -c 5000 /dev/zero | tr '\\0' y", "expect": {"not_empty": true}})), None)
        .await;
    assert!(r.passed);
    assert_eq!(r.output.chars().count(), 1000);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\",{port}),timeout=2)' && echo OPEN"
    );
    let r = runner
        .run_check(
            &check(json!({"name": "net", "run": probe, "expect": {"contains": "OPEN"}})),
            None,
        )
        .await;
    assert!(!r.passed, "verification reached the network without asking");
}

#[tokio::test]
async fn web_fetch_is_served_only_when_configured_and_denied_by_default() {
    use std::sync::Arc;
    let base = tempfile::tempdir().unwrap();
    let env = envelope("web_fetch", json!({"url": "http://example.org/"}), "exec-w");
    let plain = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    assert!(!plain.names().contains(&"web_fetch"));
    let r = plain.execute(&env).await;
    assert!(r.error.unwrap().contains("not configured"));

    // Default guard config: empty allowlist = no destination at all. The
    // scripted resolver proves no lookup (let alone a connection) happened.
    let resolver = Arc::new(silas_netguard::resolver::ScriptedResolver::new());
    let cfg = silas_netguard::NetworkGuardConfig::default();
    let guard = silas_netguard::guard::NetworkGuard::new(&cfg, resolver.clone()).unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf())
        .with_web_fetch(silas_netguard::GuardedFetcher::new(guard));
    assert!(reg.names().contains(&"web_fetch"));
    let r = reg.execute(&env).await;
    assert!(!r.success);
    assert_eq!(r.taint, TaintLevel::External);
    assert_eq!(resolver.calls("example.org"), 0);
}
