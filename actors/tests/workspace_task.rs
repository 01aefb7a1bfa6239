//! Issue #15 over the real sandbox and the fake model: a task that names a
//! workspace works on a copy of the owner's project, its checks run over a
//! copy of the result with the check-defining files restored, and the real
//! project is never touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{Fx, item, output, shell};
use serde_json::json;
use silas_core::model::work::WorkItemStatus;

const BUGGY: &str = "def to_utc(hour, offset):\n    return hour + offset\n";
const TEST: &str =
    "from clock import to_utc\n\ndef test_offset():\n    assert to_utc(12, 2) == 10\n";

fn has_pytest() -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success())
}

/// The owner's project (outside Silas's dirs) registered as `clock`.
fn project(f: &Fx) -> std::path::PathBuf {
    let root = f.path("owner-project");
    std::fs::create_dir_all(root.join("tests")).unwrap();
    std::fs::write(root.join("clock.py"), BUGGY).unwrap();
    std::fs::write(root.join("tests/test_clock.py"), TEST).unwrap();
    silas_actors::workspaces::add(&f.store, "clock", &root, true, &[], "test").unwrap();
    root
}

fn task(f: &Fx, id: &str, attempts: u64) -> silas_core::model::work::WorkItem {
    let mut t = item(json!({
        "id": id, "type": "task", "title": "Fix the timezone bug",
        "body": "Make tests/test_clock.py pass.",
        "workspace": {"name": "clock", "access": "write"},
        "verify": [{"name": "tests", "run": "python3 -m pytest -q -p no:cacheprovider tests",
                    "expect": {"exit_code": 0}, "timeout": 60}],
        "budget": {"max_attempts": attempts},
    }));
    f.approve(&mut t);
    t
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[tokio::test]
async fn the_executor_fixes_a_copy_the_checks_pass_on_it_and_the_project_is_untouched() {
    if !has_pytest() {
        eprintln!("SKIPPED: /usr/bin/python3 has no pytest (CI installs python3-pytest)");
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    task(&f, "t-ws-fix", 2);
    // The executor works in the copy: relative paths are the project's.
    f.fake.push(shell(
        "sed -i 's/hour + offset/hour - offset/' clock.py && cat clock.py",
    ));
    // Writing to the real project from inside the sandbox is refused.
    f.fake.push(shell(&format!(
        "echo hacked > {}/clock.py && echo WROTE || echo refused",
        real.display()
    )));
    f.fake.push(output("fixed the sign"));
    let r = f.engine.run_task("t-ws-fix", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert!(
        r.summary.contains("Changes to workspace clock"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("1 file(s), +1 −1"), "{}", r.summary);
    // The real project is byte for byte what it was.
    assert_eq!(read(&real.join("clock.py")), BUGGY);
    assert_eq!(read(&real.join("tests/test_clock.py")), TEST);
    let outputs = f.tool_results();
    assert!(outputs.iter().any(|o| o.contains("refused")), "{outputs:?}");
    // The change set is stored with the item and audited.
    let diff = read(&f.artifact("t-ws-fix", "changes.diff"));
    assert!(diff.contains("-    return hour + offset"), "{diff}");
    assert!(diff.contains("+    return hour - offset"), "{diff}");
    let changes = common::audit_data(&f.store, "workspace_changes");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["workspace"], "clock");
    assert_eq!(changes[0]["files"][0]["path"], "clock.py");
    assert!(changes[0]["approval"].is_string());
    assert_eq!(common::audit_data(&f.store, "workspace_copied").len(), 1);
    let stored = f.get("t-ws-fix");
    assert!(stored.verification_results[0]["passed"].as_bool().unwrap());
    // Kept for applying: the untouched copy and the fixed one; the manifest
    // of the owner's files is the daemon's alone.
    let ws = f.path("work/ws-t-ws-fix");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join("snapshot.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    assert_eq!(read(&ws.join("base/clock.py")), BUGGY);
    assert!(read(&ws.join("result/clock.py")).contains("hour - offset"));
    // Verification copies are gone.
    let left: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("verify"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn rewriting_the_test_to_assert_true_does_not_pass_the_check() {
    if !has_pytest() {
        eprintln!("SKIPPED: /usr/bin/python3 has no pytest (CI installs python3-pytest)");
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    task(&f, "t-ws-cheat", 1);
    f.fake.push(shell(
        "printf 'def test_offset():\\n    assert True\\n' > tests/test_clock.py",
    ));
    f.fake.push(output("made the test pass"));
    let r = f.engine.run_task("t-ws-cheat", "owner").await.unwrap();
    // The check ran the original test against the unfixed code: it failed.
    assert_ne!(r.status, WorkItemStatus::Done, "{r:?}");
    let stored = f.get("t-ws-cheat");
    assert!(!stored.verification_results[0]["passed"].as_bool().unwrap());
    let restored = common::audit_data(&f.store, "workspace_checks_restored");
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(restored[0]["files"][0], "tests/test_clock.py");
    assert_eq!(read(&real.join("tests/test_clock.py")), TEST);
    // A task that did not get done keeps no copy of the owner's project.
    assert!(!f.path("work/ws-t-ws-cheat").exists());
}

#[tokio::test]
async fn a_task_naming_an_unregistered_workspace_never_runs() {
    let f = Fx::new().await;
    let mut t = item(json!({
        "id": "t-ws-none", "type": "task", "title": "x", "body": "x",
        "workspace": {"name": "nope", "access": "read"},
    }));
    f.approve(&mut t);
    let r = f.engine.run_task("t-ws-none", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(r.summary.contains("nope"), "{}", r.summary);
    assert_eq!(f.executions(), 0);
}
