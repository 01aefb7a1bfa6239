//! The spec's MVP-1 example end to end over the real binary (issue #15,
//! §0.7, §13.1): "Fix the timezone bug in this repo" with pytest
//! verification. The owner registers a small Python project with a failing
//! test; the fake model plans a task on it and, once approved, fixes the
//! sign in the sandboxed copy; the check passes on a copy of the result; the
//! apply card shows the diff; approving it changes the real project (whose
//! test then passes there), and the undo card puts it back byte for byte.
//! The same with decline leaves the project untouched. Replaying an answer
//! to the apply card applies nothing twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{Ws, audit_events, frame_of_type, plan_replies, send, silas, start_daemon};

const BUGGY: &str = "def to_utc(hour, offset):\n    return hour + offset\n";
const TEST: &str =
    "from clock import to_utc\n\ndef test_offset():\n    assert to_utc(12, 2) == 10\n";
const CHECK: &str = "verify:\n  - name: tests\n    run: \"python3 -m pytest -q -p no:cacheprovider tests\"\n    expect: {exit_code: 0}\n    timeout: 120\nworkspace: {name: clock, access: write}";

fn has_pytest() -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success())
}

fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel.contains("__pycache__") {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, (std::fs::read(&p).unwrap(), m.permissions().mode()));
            }
        }
    }
    out
}

fn pytest_passes_in(dir: &Path) -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success()
}

/// The fake model's replies for one fix: the proxy routes to the planner,
/// which proposes the task; once approved, the executor fixes the sign in
/// its copy (a relative path: the copy is its working directory) and
/// reports.
fn fix_replies(fake: &FakeLlm, id: &str) {
    plan_replies(fake, id, "task", CHECK);
    fake.push(Reply::tool_call(
        "shell_exec",
        &json!({"command": "sed -i 's/hour + offset/hour - offset/' clock.py"}),
    ));
    fake.push(Reply::json(
        &json!({"summary": "fixed the sign", "artifact_refs": [], "next_steps": []}),
    ));
}

/// Waits for a `work_status` whose summary contains `needle`.
async fn work_note(ws: &mut Ws, needle: &str, log: &mut Vec<Value>) -> Value {
    loop {
        let f = frame_of_type(ws, "work_status", Duration::from_secs(120), log).await;
        if f["summary"].as_str().unwrap_or_default().contains(needle) {
            return f;
        }
        assert!(
            !["failed", "stuck", "blocked"].contains(&f["status"].as_str().unwrap_or_default()),
            "the task did not get done: {f}"
        );
    }
}

async fn card(ws: &mut Ws, phase: &str, log: &mut Vec<Value>) -> Value {
    // It may already have arrived while waiting for another frame.
    if let Some(f) = log
        .iter()
        .find(|f| f["type"] == "apply_changes" && f["phase"] == phase && !f["seen"].is_boolean())
        .cloned()
    {
        mark_seen(log, &f);
        return f;
    }
    loop {
        let f = frame_of_type(ws, "apply_changes", Duration::from_secs(120), log).await;
        if f["phase"] == phase {
            mark_seen(log, &f);
            return f;
        }
    }
}

/// Marks a card in `log` as taken, so a later wait does not return it again.
fn mark_seen(log: &mut [Value], card: &Value) {
    if let Some(f) = log.iter_mut().find(|f| *f == card) {
        f["seen"] = json!(true);
    }
}

async fn answer(ws: &mut Ws, card: &Value, verdict: &str) {
    send(
        ws,
        json!({"type": "approval_response", "request_id": card["request_id"], "verdict": verdict}),
    )
    .await;
}

/// Plan → approve → the executor's fix → verified → the apply card.
async fn fixed_and_offered(ws: &mut Ws, fake: &FakeLlm, id: &str, log: &mut Vec<Value>) -> Value {
    fix_replies(fake, id);
    send(
        ws,
        json!({"type": "message", "text": "Fix the timezone bug in this repo"}),
    )
    .await;
    let plan = frame_of_type(ws, "approval_request", Duration::from_secs(30), log).await;
    assert_eq!(plan["plan"]["workspace"]["name"], "clock", "{plan}");
    assert_eq!(plan["plan"]["workspace"]["access"], "write", "{plan}");
    answer(ws, &plan, "approved").await;
    card(ws, "apply", log).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fix_the_timezone_bug_in_this_repo_apply_undo_and_decline() {
    if !has_pytest() {
        if std::env::var_os("SILAS_SKIP_PYTEST").is_some() {
            eprintln!("skipped: SILAS_SKIP_PYTEST is set");
            return;
        }
        panic!("/usr/bin/python3 has no pytest: install python3-pytest (.ci/run does)");
    }
    let fake = FakeLlm::start().await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let proj = dir.join("clock-project");
    std::fs::create_dir_all(proj.join("tests")).unwrap();
    std::fs::write(proj.join("clock.py"), BUGGY).unwrap();
    std::fs::write(proj.join("tests/test_clock.py"), TEST).unwrap();
    let original = tree(&proj);
    assert!(
        !pytest_passes_in(&proj),
        "the project's test must fail first"
    );
    let yaml = format!(
        "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), &yaml).unwrap();
    let mut cmd = silas(&dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    // The owner registers the project by the path they would type (over
    // the running daemon's control socket).
    let d = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        silas(&d)
            .args(["workspace", "add", "clock", "clock-project", "--write"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    let mut log = Vec::new();

    // 1. Approve: the real project is changed and its test passes there.
    let apply = fixed_and_offered(&mut ws, &fake, "fix-tz", &mut log).await;
    assert_eq!(apply["workspace"], "clock");
    let canon = std::fs::canonicalize(&proj).unwrap();
    assert_eq!(apply["path"], canon.display().to_string());
    assert_eq!(apply["files"][0]["path"], "clock.py");
    assert_eq!(apply["total_added"], 1);
    assert_eq!(apply["total_removed"], 1);
    let diff = apply["diff"].as_str().unwrap();
    assert!(diff.contains("-    return hour + offset"), "{diff}");
    assert!(diff.contains("+    return hour - offset"), "{diff}");
    assert_eq!(apply["risk_level"], "medium");
    assert_eq!(tree(&proj), original, "nothing applied before the approval");
    answer(&mut ws, &apply, "approved").await;
    let applied = work_note(&mut ws, "Applied to clock", &mut log).await;
    assert_eq!(applied["status"], "done");
    assert!(pytest_passes_in(&proj), "the fix is in the real project");
    assert!(
        std::fs::read_to_string(proj.join("clock.py"))
            .unwrap()
            .contains("hour - offset")
    );
    // A replayed answer to the apply card applies nothing twice.
    answer(&mut ws, &apply, "approved").await;
    let replay = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(replay["request_id"], apply["request_id"]);

    // 2. Undo from the post-execution card: byte for byte.
    let undo = card(&mut ws, "undo", &mut log).await;
    assert!(undo["undo_until"].is_string(), "{undo}");
    answer(&mut ws, &undo, "approved").await;
    work_note(&mut ws, "Undone", &mut log).await;
    assert_eq!(tree(&proj), original, "undo restored every byte and mode");

    // 3. Decline: untouched.
    let apply2 = fixed_and_offered(&mut ws, &fake, "fix-tz-again", &mut log).await;
    answer(&mut ws, &apply2, "declined").await;
    work_note(&mut ws, "untouched", &mut log).await;
    assert_eq!(tree(&proj), original);
    assert!(
        !dir.join("data/work/ws-fix-tz-again").exists(),
        "the declined task's copies are dropped"
    );

    // `silas work show` says what became of each change set.
    let show = |id: &str| {
        let out = silas(&dir).args(["work", "show", id]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = show("fix-tz");
    let lines: Vec<&str> = first
        .lines()
        .skip_while(|l| !l.starts_with("changes"))
        .collect();
    assert_eq!(lines.len(), 3, "{first}");
    assert!(
        lines[0].contains("offered for clock, waiting for your review"),
        "{first}"
    );
    assert!(lines[1].contains("applied 1 file(s) to clock"), "{first}");
    assert!(
        lines[2].contains("undone in clock (1 file(s) restored)"),
        "{first}"
    );
    let second = show("fix-tz-again");
    assert!(
        second.contains("not applied to clock (declined)"),
        "{second}"
    );
    assert!(!second.contains("applied 1"), "{second}");

    drop(ws);
    daemon.stop().await;
    let events = audit_events(&dir);
    let named = |n: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == n).collect() };
    assert_eq!(named("workspace_applied").len(), 1);
    assert_eq!(named("workspace_undone").len(), 1);
    assert_eq!(named("workspace_apply_declined").len(), 1);
    let applied = named("workspace_applied")[0];
    let approved = named("workspace_changes_approved");
    assert_eq!(
        applied["data"]["token_id"], approved[0]["data"]["token_id"],
        "the apply ran under the token the owner's answer minted"
    );
    support::assert_audit_verifies(&dir);
}
