//! `apply::{apply, recover, undo}` (issue #15 item 4): all-or-nothing apply to
//! the real workspace, crash recovery, undo.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

use common::{mode, tree, write};
use silas_core::{Coded, ErrorCode};
use silas_workspace::apply;
use silas_workspace::copy::{self, CopyLimits};
use silas_workspace::diff::{self, ChangeSet};
use silas_workspace::protect::Protected;
use silas_workspace::{ApplyError, Snapshot};

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    result: PathBuf,
    journal: PathBuf,
    snap: Snapshot,
    changes: ChangeSet,
}

fn is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A workspace, the executor's changes in its copy, and their change set:
/// `run.sh` modified (and chmod'ed by the executor), `notes.txt` modified,
/// `old.txt` deleted, `docs/new/guide.md` added in a new directory.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, "run.sh", b"#!/bin/sh\necho old\n");
    common::chmod(&ws, "run.sh", 0o755);
    write(&ws, "notes.txt", b"keep\nchange me\n");
    common::chmod(&ws, "notes.txt", 0o640);
    write(&ws, "old.txt", b"obsolete\n");
    write(&ws, "untouched.txt", b"same\n");
    fs::create_dir(ws.join("docs")).unwrap();
    if is_root() {
        // The owner is not the daemon's user: apply must keep their ids.
        std::os::unix::fs::chown(ws.join("notes.txt"), Some(4242), Some(4343)).unwrap();
        std::os::unix::fs::chown(ws.join("docs"), Some(5151), Some(5252)).unwrap();
    }
    let base = tmp.path().join("base");
    let snap = copy::take(&ws, &base, &CopyLimits::default()).unwrap();
    let result = tmp.path().join("result");
    copy::take(&ws, &result, &CopyLimits::default()).unwrap();
    write(&result, "run.sh", b"#!/bin/sh\necho new\n");
    common::chmod(&result, "run.sh", 0o644);
    write(&result, "notes.txt", b"keep\nchanged\n");
    fs::remove_file(result.join("old.txt")).unwrap();
    write(&result, "docs/new/guide.md", b"# Guide\n");
    common::chmod(&result, "docs/new/guide.md", 0o600);
    let changes = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    assert_eq!(changes.files.len(), 4);
    let journal = tmp.path().join("journal");
    Fixture {
        _tmp: tmp,
        ws,
        result,
        journal,
        snap,
        changes,
    }
}

fn leftovers(root: &Path) -> Vec<String> {
    tree(root)
        .into_keys()
        .filter(|p| p.contains(".silas-"))
        .collect()
}

fn assert_applied(f: &Fixture) {
    assert_eq!(
        fs::read(f.ws.join("run.sh")).unwrap(),
        b"#!/bin/sh\necho new\n"
    );
    assert_eq!(
        fs::read(f.ws.join("notes.txt")).unwrap(),
        b"keep\nchanged\n"
    );
    assert!(!f.ws.join("old.txt").exists());
    assert_eq!(
        fs::read(f.ws.join("docs/new/guide.md")).unwrap(),
        b"# Guide\n"
    );
    assert_eq!(fs::read(f.ws.join("untouched.txt")).unwrap(), b"same\n");
    assert!(leftovers(&f.ws).is_empty(), "{:?}", leftovers(&f.ws));
}

#[test]
fn apply_changes_the_real_tree_keeping_modes_and_owners() {
    let f = fixture();
    let applied = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap();
    assert_applied(&f);
    // Replaced files keep the owner's mode (not the executor's chmod) and ids.
    assert_eq!(mode(&f.ws.join("run.sh")), 0o755);
    assert_eq!(mode(&f.ws.join("notes.txt")), 0o640);
    // New files: the result's mode, the owner of their directory.
    assert_eq!(mode(&f.ws.join("docs/new/guide.md")), 0o600);
    if is_root() {
        let notes = fs::metadata(f.ws.join("notes.txt")).unwrap();
        assert_eq!((notes.uid(), notes.gid()), (4242, 4343));
        let guide = fs::metadata(f.ws.join("docs/new/guide.md")).unwrap();
        assert_eq!((guide.uid(), guide.gid()), (5151, 5252));
    }
    assert_eq!(applied.undo.files.len(), 4);
    assert_eq!(applied.undo.created_dirs, ["docs/new"]);
    // Nothing to recover after a clean apply.
    let report = apply::recover(&f.journal, &f.ws).unwrap();
    assert!(report.finished.is_empty() && report.rolled_back.is_empty());
}

/// The executor's chmod never makes a new file of the owner's writable by
/// others (nor setuid): the card and the project get at most rwxr-xr-x.
#[test]
fn a_new_file_is_never_group_or_world_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, "app.py", b"x = 1\n");
    let base = tmp.path().join("base");
    let snap = copy::take(&ws, &base, &CopyLimits::default()).unwrap();
    let result = tmp.path().join("result");
    copy::take(&ws, &result, &CopyLimits::default()).unwrap();
    write(&result, "s.sh", b"#!/bin/sh\n");
    common::chmod(&result, "s.sh", 0o6777);
    write(&result, "shared.txt", b"hi\n");
    common::chmod(&result, "shared.txt", 0o666);
    let changes = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    let modes: Vec<(String, u32)> = changes
        .files
        .iter()
        .map(|c| (c.path.clone(), c.mode))
        .collect();
    assert_eq!(
        modes,
        [
            ("s.sh".to_string(), 0o755),
            ("shared.txt".to_string(), 0o644)
        ]
    );
    apply::apply(&changes, &result, &snap, &tmp.path().join("journal")).unwrap();
    assert_eq!(mode(&ws.join("s.sh")), 0o755);
    assert_eq!(mode(&ws.join("shared.txt")), 0o644);
}

#[test]
fn a_workspace_changed_since_the_copy_is_refused_and_left_byte_identical() {
    let f = fixture();
    // The owner keeps working after the copy was taken.
    write(&f.ws, "notes.txt", b"keep\nowner's own edit\n");
    write(&f.ws, "docs/new/guide.md", b"owner wrote this first\n");
    let before = tree(&f.ws);
    let err = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap_err();
    match &err {
        ApplyError::Conflict { paths } => {
            assert_eq!(paths, &["docs/new/guide.md", "notes.txt"])
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(err.code(), ErrorCode::EApprovalHash);
    assert!(
        err.to_string().contains("changed since the copy was taken"),
        "{err}"
    );
    assert_eq!(tree(&f.ws), before, "a refused apply wrote something");
}

#[test]
fn a_result_edited_after_the_diff_is_refused_and_nothing_is_half_written() {
    let f = fixture();
    let before = tree(&f.ws);
    // The approved diff said "changed"; the bytes now say something else.
    write(&f.result, "notes.txt", b"keep\nsneaky\n");
    let err = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap_err();
    assert!(
        matches!(err, ApplyError::ContentChanged { ref path } if path == "notes.txt"),
        "{err:?}"
    );
    assert_eq!(tree(&f.ws), before);
}

#[test]
fn a_symlinked_directory_in_the_workspace_is_never_written_through() {
    let f = fixture();
    let outside = f.ws.parent().unwrap().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::remove_dir(f.ws.join("docs")).unwrap();
    symlink(&outside, f.ws.join("docs")).unwrap();
    let err = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap_err();
    assert!(
        matches!(err, ApplyError::UnsafePath { ref path, .. } if path == "docs/new/guide.md"),
        "{err:?}"
    );
    assert_eq!(err.code(), ErrorCode::EApprovalScope);
    assert!(fs::read_dir(&outside).unwrap().next().is_none());
    assert_eq!(
        fs::read(f.ws.join("notes.txt")).unwrap(),
        b"keep\nchange me\n"
    );
}

#[test]
fn paths_into_git_or_out_of_the_root_are_refused() {
    let mut f = fixture();
    f.changes.files[0].path = "../escape.txt".into();
    let err = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap_err();
    assert!(matches!(err, ApplyError::UnsafePath { .. }), "{err:?}");
    f.changes.files[0].path = ".git/hooks/pre-commit".into();
    let err = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap_err();
    assert!(matches!(err, ApplyError::UnsafePath { .. }), "{err:?}");
}

#[test]
fn a_crash_mid_apply_is_finished_at_start() {
    for stop_after in 1..4 {
        let f = fixture();
        let err = apply::apply_with_fault(&f.changes, &f.result, &f.snap, &f.journal, stop_after)
            .unwrap_err();
        assert!(matches!(err, ApplyError::InjectedFault(n) if n == stop_after));
        // Half-applied on disk: some targets renamed, others still staged.
        assert!(!leftovers(&f.ws).is_empty(), "stop after {stop_after}");
        let report = apply::recover(&f.journal, &f.ws).unwrap();
        assert_eq!(
            report.finished.len(),
            1,
            "stop after {stop_after}: {report:?}"
        );
        assert!(report.rolled_back.is_empty());
        assert_applied(&f);
        assert_eq!(mode(&f.ws.join("run.sh")), 0o755);
        // Idempotent.
        let again = apply::recover(&f.journal, &f.ws).unwrap();
        assert!(again.finished.is_empty() && again.rolled_back.is_empty());
    }
}

#[test]
fn a_crash_with_a_lost_staged_file_is_rolled_back_to_the_original_tree() {
    let f = fixture();
    let original = tree(&f.ws);
    apply::apply_with_fault(&f.changes, &f.result, &f.snap, &f.journal, 1).unwrap_err();
    // One staged file did not survive: the apply cannot be finished.
    let staged: Vec<String> = leftovers(&f.ws);
    assert!(!staged.is_empty());
    fs::remove_file(f.ws.join(&staged[0])).unwrap();
    let report = apply::recover(&f.journal, &f.ws).unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");
    assert_eq!(tree(&f.ws), original, "rollback is not byte-identical");
}

#[test]
fn undo_restores_the_original_byte_for_byte() {
    let f = fixture();
    let original = tree(&f.ws);
    let applied = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap();
    assert_ne!(tree(&f.ws), original);
    // The record survives a round-trip through the daemon's store.
    let json = serde_json::to_string(&applied.undo).unwrap();
    let record: apply::UndoRecord = serde_json::from_str(&json).unwrap();
    apply::undo(&record, &f.ws, &f.journal).unwrap();
    assert_eq!(tree(&f.ws), original);
    if is_root() {
        let notes = fs::metadata(f.ws.join("notes.txt")).unwrap();
        assert_eq!((notes.uid(), notes.gid()), (4242, 4343));
    }
}

#[test]
fn undo_after_a_later_edit_is_refused() {
    let f = fixture();
    let applied = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap();
    write(&f.ws, "notes.txt", b"the owner edited after the apply\n");
    let after_edit = tree(&f.ws);
    let err = apply::undo(&applied.undo, &f.ws, &f.journal).unwrap_err();
    assert!(
        matches!(err, ApplyError::Conflict { ref paths } if paths == &["notes.txt"]),
        "{err:?}"
    );
    assert_eq!(tree(&f.ws), after_edit);
}

#[test]
fn prune_removes_finished_journals_past_the_window_and_keeps_the_rest() {
    let f = fixture();
    let applied = apply::apply(&f.changes, &f.result, &f.snap, &f.journal).unwrap();
    let dir = f.journal.join(&applied.id);
    assert!(dir.join("backups").is_dir());
    // Inside the window: kept (an undo still needs the backups).
    assert_eq!(
        apply::prune(&f.journal, std::time::Duration::from_secs(3600)).unwrap(),
        0
    );
    assert!(dir.is_dir());
    // An incomplete journal is never pruned, however old.
    let g = fixture();
    let _ = apply::apply_with_fault(&g.changes, &g.result, &g.snap, &f.journal, 1);
    let before: Vec<_> = fs::read_dir(&f.journal).unwrap().flatten().collect();
    assert_eq!(before.len(), 2);
    assert_eq!(
        apply::prune(&f.journal, std::time::Duration::ZERO).unwrap(),
        1
    );
    assert!(!dir.exists(), "the finished journal is gone");
    assert_eq!(fs::read_dir(&f.journal).unwrap().count(), 1);
    // Recovery still finds the incomplete one.
    let report = apply::recover(&f.journal, &g.ws).unwrap();
    assert_eq!(report.finished.len() + report.rolled_back.len(), 1);
}
