//! Issue #15 over the real sandbox and the fake model: a task that names a
//! workspace works on a copy of the owner's project, its checks run over a
//! copy of the result with the check-defining files restored, and the real
//! project is never touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{Fx, item, output, shell};
use serde_json::json;
use silas_actors::work_executor::engine::GoalCycleOutcome;
use silas_core::model::work::WorkItemStatus;

const BUGGY: &str = "def to_utc(hour, offset):\n    return hour + offset\n";
const TEST: &str =
    "from clock import to_utc\n\ndef test_offset():\n    assert to_utc(12, 2) == 10\n";

/// True (with a note) when the sandbox's python3 has no pytest.
fn skip_without_pytest() -> bool {
    let missing = !has_pytest();
    if missing {
        eprintln!("SKIPPED: /usr/bin/python3 has no pytest (CI installs python3-pytest)");
    }
    missing
}

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
    if skip_without_pytest() {
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
    if skip_without_pytest() {
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

/// A check run as `python3 -m unittest`: the working directory comes first
/// on its import path, and the executor plants a `unittest` package that
/// prints "OK" without running anything. What a check command reads its
/// instructions from is restored like a rewritten test: the real suite runs
/// on the unfixed code and fails.
#[tokio::test]
async fn a_planted_module_shadowing_the_check_does_not_pass_it() {
    let f = Fx::new().await;
    let root = f.path("owner-calc");
    std::fs::create_dir_all(root.join("tests")).unwrap();
    std::fs::write(root.join("calc.py"), "def one():\n    return 2\n").unwrap();
    std::fs::write(root.join("tests/__init__.py"), "").unwrap();
    std::fs::write(
        root.join("tests/test_calc.py"),
        "import unittest\nfrom calc import one\n\nclass T(unittest.TestCase):\n    def test_one(self):\n        self.assertEqual(one(), 1)\n",
    )
    .unwrap();
    silas_actors::workspaces::add(&f.store, "calc", &root, true, &[], "test").unwrap();
    let mut t = item(json!({
        "id": "t-shadow", "type": "task", "title": "Fix one()",
        "body": "Make the unit tests pass.",
        "workspace": {"name": "calc", "access": "write"},
        "verify": [{"name": "unit", "run": "python3 -m unittest discover -s tests -t .",
                    "expect": {"exit_code": 0}, "timeout": 60}],
        "budget": {"max_attempts": 1},
    }));
    f.approve(&mut t);
    f.fake.push(shell(
        "mkdir -p unittest && touch unittest/__init__.py && printf 'print(\"Ran 1 test\\n\\nOK\")\n' > unittest/__main__.py",
    ));
    f.fake.push(output("the tests pass now"));
    let r = f.engine.run_task("t-shadow", "owner").await.unwrap();
    assert_ne!(r.status, WorkItemStatus::Done, "{r:?}");
    let stored = f.get("t-shadow");
    assert!(
        !stored.verification_results[0]["passed"].as_bool().unwrap(),
        "{:?}",
        stored.verification_results
    );
    let restored = common::audit_data(&f.store, "workspace_checks_restored");
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(
        restored[0]["files"],
        json!(["unittest/__init__.py", "unittest/__main__.py"]),
        "{restored:?}"
    );
    assert!(!root.join("unittest").exists());
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

/// A workspace that cannot be copied (here: its directory was removed
/// after it was registered) fails the task as the owner's to fix, named,
/// not as a store failure.
#[tokio::test]
async fn a_workspace_that_cannot_be_copied_fails_the_task_naming_it() {
    let f = Fx::new().await;
    let root = project(&f);
    task(&f, "t-ws-gone", 1);
    std::fs::remove_dir_all(&root).unwrap();
    let r = f.engine.run_task("t-ws-gone", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(
        r.summary.starts_with("E_CFG_INVALID: workspace clock: "),
        "{}",
        r.summary
    );
    assert_eq!(f.executions(), 0);
}

// ---- applying the change set (issue #15 item 4) -------------------------

use silas_actors::work_executor::cards as wcards;
use silas_core::approval::Subject;
use silas_core::cards::CardPayload;
use silas_core::model::approval::{ApprovalScope, ChangesApproval};
use silas_storage::PendingCard;

fn change_card(
    f: &Fx,
    id: &str,
    phase: &str,
) -> Option<(PendingCard, silas_core::cards::ChangesCard)> {
    // By item and phase: a re-offered undo card has an id of its own.
    f.store
        .records::<PendingCard>()
        .list()
        .unwrap()
        .into_iter()
        .find_map(|card| match &card.card {
            CardPayload::Changes(c) if c.work_item_id == id && c.phase.as_str() == phase => {
                let c = (**c).clone();
                Some((card, c))
            }
            _ => None,
        })
}

/// The owner answers a change card the way `approval_flow::decide_card`
/// records it: a single-step token bound to exactly the card's change set.
fn answer(f: &Fx, id: &str, phase: &str, approve: bool) {
    let (card, c) = change_card(f, id, phase).expect("a change card");
    let decision = if approve {
        let subject = ChangesApproval {
            work_item_id: id.into(),
            plan_hash: c.plan_hash.clone(),
            action: c.phase,
            changes_sha256: c.changes_sha256.clone(),
        };
        let tok = f
            .svc
            .issue_token(
                Subject::Changes(&subject),
                &common::approved(),
                ApprovalScope::SingleStep,
                &common::owner_origin(&f.svc),
                silas_core::Timestamp::now(),
            )
            .unwrap();
        let tok = f
            .svc
            .verify_subject(
                &tok,
                Subject::Changes(&subject),
                silas_core::Timestamp::now(),
            )
            .unwrap();
        wcards::ToolDecision::Approved { token: tok }
    } else {
        wcards::ToolDecision::Declined {
            reason: "the owner answered declined".into(),
        }
    };
    f.store
        .records::<PendingCard>()
        .put(&wcards::with_decision(card, &decision))
        .unwrap();
}

/// Every file under `root` (path → bytes and mode), `.git` aside.
fn tree(root: &Path) -> std::collections::BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".git" || rel.contains("__pycache__") || rel.contains(".pytest_cache") {
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

/// Runs the fix task to `done` (its apply card waiting).
async fn fixed(f: &Fx, id: &str) -> WorkItemStatus {
    task(f, id, 2);
    f.fake
        .push(shell("sed -i 's/hour + offset/hour - offset/' clock.py"));
    f.fake.push(output("fixed the sign"));
    f.engine.run_task(id, "owner").await.unwrap().status
}

#[tokio::test]
async fn approving_the_apply_card_changes_the_real_project_and_undo_restores_it() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    let original = tree(&real);
    assert!(!pytest_passes_in(&real));
    assert_eq!(fixed(&f, "t-apply").await, WorkItemStatus::Done);
    // The card shows the change set; nothing is applied yet.
    let (_, c) = change_card(&f, "t-apply", "apply").expect("apply card");
    assert_eq!(c.workspace, "clock");
    assert_eq!(c.files.len(), 1);
    assert_eq!(c.files[0].path, "clock.py");
    assert_eq!((c.total_added, c.total_removed), (1, 1));
    assert!(c.diff.contains("+    return hour - offset"), "{}", c.diff);
    assert!(c.protected_edits().is_empty());
    assert_eq!(tree(&real), original);
    // Approve → applied to the real project; its test passes there.
    answer(&f, "t-apply", "apply", true);
    let r = f.engine.run_task("t-apply", "owner").await.unwrap();
    assert!(r.summary.contains("Applied to clock"), "{}", r.summary);
    assert!(read(&real.join("clock.py")).contains("hour - offset"));
    assert!(pytest_passes_in(&real));
    let applied = common::audit_data(&f.store, "workspace_applied");
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0]["files"][0], "clock.py");
    assert!(applied[0]["token_id"].is_string());
    // The apply card became the undo card; the copies are gone.
    assert!(change_card(&f, "t-apply", "apply").is_none());
    let (undo_card, u) = change_card(&f, "t-apply", "undo").expect("undo card");
    assert!(u.undo_until.is_some());
    assert!(undo_card.expires_at > silas_core::Timestamp::now());
    assert!(!f.path("work/ws-t-apply").exists());
    // A second dispatch changes nothing (no double apply).
    let again = f.engine.run_task("t-apply", "owner").await.unwrap();
    assert_eq!(again.status, WorkItemStatus::Done);
    assert_eq!(common::audit_data(&f.store, "workspace_applied").len(), 1);
    // Undo → byte for byte (and mode for mode) what it was.
    answer(&f, "t-apply", "undo", true);
    let r = f.engine.run_task("t-apply", "owner").await.unwrap();
    assert!(r.summary.contains("Undone"), "{}", r.summary);
    assert_eq!(tree(&real), original);
    assert!(change_card(&f, "t-apply", "undo").is_none());
    assert_eq!(common::audit_data(&f.store, "workspace_undone").len(), 1);
}

/// An undo refused because the owner edited an applied file since is
/// offered again while the window is open: once the edit is put back, the
/// undo goes through. The refused undo used to end the card for good.
#[tokio::test]
async fn an_undo_refused_for_a_later_edit_can_be_tried_again() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    let original = tree(&real);
    assert_eq!(fixed(&f, "t-undo-again").await, WorkItemStatus::Done);
    answer(&f, "t-undo-again", "apply", true);
    f.engine.run_task("t-undo-again", "owner").await.unwrap();
    let applied = read(&real.join("clock.py"));
    let (first, _) = change_card(&f, "t-undo-again", "undo").expect("undo card");
    std::fs::write(
        real.join("clock.py"),
        format!("{applied}# the owner's edit\n"),
    )
    .unwrap();
    answer(&f, "t-undo-again", "undo", true);
    let r = f.engine.run_task("t-undo-again", "owner").await.unwrap();
    assert!(
        r.summary
            .contains("Not undone: clock.py changed since the apply; nothing was changed."),
        "{}",
        r.summary
    );
    assert!(
        r.summary.contains("undo again from the card"),
        "{}",
        r.summary
    );
    assert!(read(&real.join("clock.py")).contains("the owner's edit"));
    let (again, c) = change_card(&f, "t-undo-again", "undo").expect("the undo offered again");
    assert_ne!(again.request_id, first.request_id);
    assert!(c.decision.is_none());
    assert_eq!(again.expires_at, first.expires_at, "the same window");
    // The edit put back: the undo goes through.
    std::fs::write(real.join("clock.py"), &applied).unwrap();
    answer(&f, "t-undo-again", "undo", true);
    let r = f.engine.run_task("t-undo-again", "owner").await.unwrap();
    assert!(r.summary.contains("Undone"), "{}", r.summary);
    assert_eq!(tree(&real), original);
    assert!(change_card(&f, "t-undo-again", "undo").is_none());
}

#[tokio::test]
async fn declining_the_apply_card_leaves_the_project_untouched() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    let original = tree(&real);
    assert_eq!(fixed(&f, "t-decline").await, WorkItemStatus::Done);
    answer(&f, "t-decline", "apply", false);
    let r = f.engine.run_task("t-decline", "owner").await.unwrap();
    assert!(r.summary.contains("untouched"), "{}", r.summary);
    assert_eq!(tree(&real), original);
    assert!(change_card(&f, "t-decline", "apply").is_none());
    assert!(change_card(&f, "t-decline", "undo").is_none());
    assert!(!f.path("work/ws-t-decline").exists(), "copies dropped");
    assert!(common::audit_data(&f.store, "workspace_applied").is_empty());
    assert_eq!(
        common::audit_data(&f.store, "workspace_apply_declined").len(),
        1
    );
}

#[tokio::test]
async fn a_workspace_changed_since_the_copy_is_not_applied_and_nothing_is_half_written() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    assert_eq!(fixed(&f, "t-conflict").await, WorkItemStatus::Done);
    // The owner edits the file meanwhile.
    let mine = "def to_utc(hour, offset):\n    return (hour - offset) % 24\n";
    std::fs::write(real.join("clock.py"), mine).unwrap();
    let before = tree(&real);
    answer(&f, "t-conflict", "apply", true);
    let r = f.engine.run_task("t-conflict", "owner").await.unwrap();
    assert!(r.summary.contains("Not applied"), "{}", r.summary);
    assert!(r.summary.contains("clock.py"), "{}", r.summary);
    assert_eq!(
        tree(&real),
        before,
        "nothing written, no staging files left"
    );
    assert_eq!(
        common::audit_data(&f.store, "workspace_apply_refused").len(),
        1
    );
    assert!(change_card(&f, "t-conflict", "undo").is_none());
}

#[tokio::test]
async fn an_approval_for_other_bytes_writes_nothing() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    let original = tree(&real);
    assert_eq!(fixed(&f, "t-swap").await, WorkItemStatus::Done);
    answer(&f, "t-swap", "apply", true);
    // The stored change set is swapped after the owner approved it.
    let stored = f.artifact("t-swap", "changes.json");
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes.push(b'\n');
    std::fs::write(&stored, bytes).unwrap();
    let r = f.engine.run_task("t-swap", "owner").await.unwrap();
    assert!(
        r.summary.contains("not the one you approved"),
        "{}",
        r.summary
    );
    assert_eq!(tree(&real), original);
    // A token bound to another change set on the card is refused too.
    let f2 = Fx::new().await;
    let real2 = project(&f2);
    assert_eq!(fixed(&f2, "t-swap2").await, WorkItemStatus::Done);
    answer(&f2, "t-swap2", "apply", true);
    let (card, mut c) = change_card(&f2, "t-swap2", "apply").unwrap();
    c.changes_sha256 = "0".repeat(64);
    f2.store
        .records::<PendingCard>()
        .put(&PendingCard {
            card: CardPayload::Changes(Box::new(c)),
            ..card
        })
        .unwrap();
    let r = f2.engine.run_task("t-swap2", "owner").await.unwrap();
    assert!(r.summary.contains("Not applied"), "{}", r.summary);
    assert!(read(&real2.join("clock.py")).contains("hour + offset"));
}

#[tokio::test]
async fn a_fix_that_also_rewrites_the_test_is_flagged_on_the_card() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    project(&f);
    task(&f, "t-flag", 1);
    f.fake.push(shell(
        "sed -i 's/hour + offset/hour - offset/' clock.py && printf 'def test_offset():\\n    assert True\\n' > tests/test_clock.py",
    ));
    f.fake.push(output("fixed, and simplified the test"));
    let r = f.engine.run_task("t-flag", "owner").await.unwrap();
    // The fix is real, so the original test passes on it.
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let (card, c) = change_card(&f, "t-flag", "apply").expect("apply card");
    assert_eq!(c.protected_edits(), vec!["tests/test_clock.py"]);
    let risk = card.card.risk().unwrap();
    assert_eq!(risk.level, silas_core::risk::RiskLevel::High);
    assert!(
        risk.reasons.iter().any(|r| r.contains("define the checks")),
        "{risk:?}"
    );
    // The card and the result say the checks did not see the edit.
    let note = c.protected_note().unwrap();
    assert!(note.contains("ran without these edits"), "{note}");
    assert!(
        r.summary.contains("ran without these edits"),
        "{}",
        r.summary
    );
}

/// A plan that allows protected edits, whose work adds its own test: the
/// checks ran that new test, and the card and result say so — they said
/// "the checks ran on the originals", of a file that had none.
#[tokio::test]
async fn a_new_test_the_plan_allowed_is_said_to_have_been_checked_as_written() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    project(&f);
    let mut t = item(json!({
        "id": "t-own-test", "type": "task", "title": "Fix and add a test",
        "body": "Fix the bug and add a test.",
        "workspace": {"name": "clock", "access": "write", "allow_protected_edits": true},
        "verify": [{"name": "tests", "run": "python3 -m pytest -q -p no:cacheprovider tests",
                    "expect": {"exit_code": 0}, "timeout": 60}],
        "budget": {"max_attempts": 1},
    }));
    f.approve(&mut t);
    f.fake.push(shell(
        "sed -i 's/hour + offset/hour - offset/' clock.py && printf 'def test_new():\n    assert True\n' > tests/test_new.py",
    ));
    f.fake.push(output("fixed, and added a test"));
    let r = f.engine.run_task("t-own-test", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let (_, c) = change_card(&f, "t-own-test", "apply").expect("apply card");
    assert_eq!(c.protected_edits(), vec!["tests/test_new.py"]);
    assert!(c.checks_saw_edits);
    let note = c.protected_note().unwrap();
    assert!(note.contains("the checks ran on these edits"), "{note}");
    assert!(!note.contains("originals"), "{note}");
    assert!(
        r.summary.contains("the checks ran on these edits"),
        "{}",
        r.summary
    );
}

#[tokio::test]
async fn apply_direct_applies_at_once_and_commits_without_running_hooks() {
    if skip_without_pytest() {
        return;
    }
    let f = Fx::new().await;
    let real = project(&f);
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .arg("-C")
            .arg(&real)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "owner@example.test"]);
    git(&["config", "user.name", "Owner"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "init"]);
    std::fs::write(
        real.join(".git/hooks/pre-commit"),
        "#!/bin/sh\ntouch /tmp/silas-hook-ran-$$\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        real.join(".git/hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let mut t = item(json!({
        "id": "t-direct", "type": "task", "title": "Fix the timezone bug",
        "body": "Make tests/test_clock.py pass.",
        "workspace": {"name": "clock", "access": "write", "apply": "direct",
                      "commit_message": "Fix the UTC offset sign"},
        "verify": [{"name": "tests", "run": "python3 -m pytest -q -p no:cacheprovider tests",
                    "expect": {"exit_code": 0}, "timeout": 60}],
    }));
    f.approve(&mut t);
    f.fake
        .push(shell("sed -i 's/hour + offset/hour - offset/' clock.py"));
    f.fake.push(output("fixed"));
    let r = f.engine.run_task("t-direct", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert!(r.summary.contains("Applied to clock"), "{}", r.summary);
    assert!(r.summary.contains("Committed locally"), "{}", r.summary);
    assert!(pytest_passes_in(&real));
    assert_eq!(
        git(&["log", "-1", "--format=%s"]),
        "Fix the UTC offset sign"
    );
    assert_eq!(git(&["status", "--porcelain"]), "");
    assert!(change_card(&f, "t-direct", "apply").is_none());
    assert!(change_card(&f, "t-direct", "undo").is_some());
    assert!(!f.path("work/ws-t-direct").exists());
}

#[tokio::test]
async fn an_apply_cut_off_by_a_crash_is_finished_or_rolled_back_at_start() {
    use silas_workspace::{CopyLimits, Protected, apply, copy, diff};
    let f = Fx::new().await;
    let real = project(&f);
    let before = tree(&real);
    // An apply of two files that "crashes" after the first rename.
    std::fs::create_dir_all(f.path("crash")).unwrap();
    let base = f.path("crash/base");
    let snap = copy::take(&real, &base, &CopyLimits::default()).unwrap();
    let result = f.path("crash/result");
    copy::take_plain(&base, &result, &CopyLimits::default()).unwrap();
    std::fs::write(
        result.join("clock.py"),
        "def to_utc(h, o):\n    return h - o\n",
    )
    .unwrap();
    std::fs::write(result.join("notes.txt"), "new\n").unwrap();
    let set = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    assert_eq!(set.files.len(), 2);
    let journal = f.path("workspace-journal");
    let _ = apply::apply_with_fault(&set, &result, &snap, &journal, 1);
    let half = tree(&real);
    assert_ne!(half, before, "the fault left a half-applied tree");
    // The executor's start recovers it: all of it or none of it.
    f.engine.recover_applies();
    let after = tree(&real);
    let all = after.contains_key("notes.txt") && read(&real.join("clock.py")).contains("h - o");
    assert!(
        all || after == before,
        "neither applied nor rolled back: {after:?}"
    );
    let recovered = common::audit_data(&f.store, "workspace_apply_recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["workspace"], "clock");
    // Idempotent: a second start changes nothing.
    f.engine.recover_applies();
    assert_eq!(tree(&real), after);
    assert_eq!(
        common::audit_data(&f.store, "workspace_apply_recovered").len(),
        1
    );
}

/// A goal watching a workspace checks a fresh copy of the project as it is
/// at each cycle: healthy while `clock.py` is there, failed once the owner
/// removed it, healthy again when it is back. Before, its checks ran in an
/// empty directory and every cycle failed (spawning a fix task each time).
/// The goal never writes to the project and leaves no copy behind.
#[tokio::test]
async fn a_goals_checks_run_on_its_workspace_as_it_is_now() {
    let f = Fx::new().await;
    let real = project(&f);
    let mut goal = item(json!({
        "id": "goal-ws", "type": "goal", "title": "Clock stays importable", "body": "Watch.",
        "schedule": "*/30 * * * *",
        "workspace": {"name": "clock", "access": "read"},
        "verify": [{"name": "imports", "run": "python3 -c 'import clock'",
                    "expect": {"exit_code": 0}, "timeout": 60}],
    }));
    f.approve(&mut goal);
    let cycle = || f.engine.run_goal_cycle("goal-ws", "owner");
    let out = cycle().await.unwrap();
    assert!(matches!(out, GoalCycleOutcome::Healthy), "{out:?}");
    std::fs::remove_file(real.join("clock.py")).unwrap();
    let out = cycle().await.unwrap();
    assert!(
        matches!(&out, GoalCycleOutcome::Failed { failed_checks } if failed_checks == &["imports"]),
        "{out:?}"
    );
    std::fs::write(real.join("clock.py"), BUGGY).unwrap();
    let out = cycle().await.unwrap();
    assert!(matches!(out, GoalCycleOutcome::Healthy), "{out:?}");
    assert_eq!(read(&real.join("clock.py")), BUGGY);
    assert_eq!(read(&real.join("tests/test_clock.py")), TEST);
    let left: Vec<_> = std::fs::read_dir(f.engine.registry.work_base())
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !left.iter().any(|n| n.to_string_lossy().contains("goal-ws")),
        "{left:?}"
    );
}

/// A goal that only reads its workspace but asks for fix tasks gets none
/// when its checks fail: a fix's change set could never be applied, so a
/// task would only spend the goal's budget. The owner is told why.
#[tokio::test]
async fn a_goal_reading_its_workspace_spawns_no_fix_task() {
    let f = Fx::new().await;
    let real = project(&f);
    std::fs::remove_file(real.join("clock.py")).unwrap();
    let mut goal = item(json!({
        "id": "goal-ro", "type": "goal", "title": "Clock stays importable", "body": "Watch.",
        "schedule": "*/30 * * * *", "on_failure": "spawn_task",
        "workspace": {"name": "clock", "access": "read"},
        "verify": [{"name": "imports", "run": "python3 -c 'import clock'",
                    "expect": {"exit_code": 0}, "timeout": 60}],
    }));
    f.approve(&mut goal);
    let out = f.engine.run_goal_cycle("goal-ro", "owner").await.unwrap();
    assert!(
        matches!(&out, GoalCycleOutcome::Failed { failed_checks } if failed_checks == &["imports"]),
        "{out:?}"
    );
    assert!(
        f.store
            .work_items()
            .list_by_parent("goal-ro")
            .unwrap()
            .is_empty()
    );
    let skipped = common::audit_data(&f.store, "goal_fix_skipped");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0]["workspace"], "clock");
    assert!(common::audit_data(&f.store, "goal_spawned_task").is_empty());
}
