//! Issue #15: checks over a project copy — the §13.1 `pytest` shape. The
//! check runs with the project as its working directory (so the tests import
//! the project), in its own sandbox, with `HOME` elsewhere; the verdict
//! follows the project's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox;
use serde_json::json;
use silas_core::model::work::VerificationCheck;
use silas_execution::verification::VerificationRunner;
use silas_sandbox::Limits;

fn check(name: &str, run: &str) -> VerificationCheck {
    serde_json::from_value(
        json!({"name": name, "run": run, "expect": {"exit_code": 0}, "timeout": 60}),
    )
    .unwrap()
}

fn has_pytest() -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success())
}

fn project(root: &Path, body: &str) {
    std::fs::create_dir_all(root.join("tests")).unwrap();
    std::fs::write(root.join("clock.py"), body).unwrap();
    std::fs::write(
        root.join("tests/test_clock.py"),
        "from clock import to_utc\n\ndef test_offset():\n    assert to_utc(12, 2) == 10\n",
    )
    .unwrap();
}

#[tokio::test]
async fn a_pytest_check_runs_in_the_project_copy_and_follows_its_code() {
    if !has_pytest() {
        eprintln!("SKIPPED: /usr/bin/python3 has no pytest (CI installs python3-pytest)");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let verify = base.path().join("verify");
    let runner = VerificationRunner::new(sandbox(), verify, Vec::new(), Limits::default());
    let checks = [
        check("tests", "python3 -m pytest -q -p no:cacheprovider tests"),
        // HOME is not the project: a planted ~/.profile cannot be the project's.
        check("home", "test \"$HOME\" != \"$PWD\" && test -f clock.py"),
    ];
    // The bug: the offset is added instead of subtracted.
    let buggy = base.path().join("buggy");
    project(
        &buggy,
        "def to_utc(hour, offset):\n    return hour + offset\n",
    );
    sandbox().hand_over_tree(&buggy).unwrap();
    let report = runner.run_checks_on_project(&checks, &buggy).await;
    assert!(!report.all_passed, "{report:?}");
    assert_eq!(report.failed, vec!["tests".to_string()], "{report:?}");
    assert!(report.results[0].output.contains("1 failed"), "{report:?}");

    let fixed = base.path().join("fixed");
    project(
        &fixed,
        "def to_utc(hour, offset):\n    return hour - offset\n",
    );
    sandbox().hand_over_tree(&fixed).unwrap();
    let report = runner.run_checks_on_project(&checks, &fixed).await;
    assert!(report.all_passed, "{report:?}");
    assert!(report.results[0].output.contains("1 passed"), "{report:?}");
}

/// unittest reports on stderr: a failed check carries the end of it (the
/// failing assertion, the summary), so the owner and the next attempt
/// learn why, not only "exit code 1".
#[tokio::test]
async fn a_failed_check_says_why_in_its_own_words() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let runner = VerificationRunner::new(
        sandbox(),
        base.path().join("verify"),
        Vec::new(),
        Limits::default(),
    );
    let root = base.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("test_sum.py"),
        format!(
            "import unittest\n{}\nclass T(unittest.TestCase):\n    def test_sum(self):\n        \
             self.assertEqual(1 + 1, 3, 'sum is off')\n",
            "# padding\n".repeat(200)
        ),
    )
    .unwrap();
    sandbox().hand_over_tree(&root).unwrap();
    let checks = [
        check("tests", "python3 -m unittest -v"),
        check("ok", "echo fine >&2"),
    ];
    let report = runner.run_checks_on_project(&checks, &root).await;
    let failed = &report.results[0];
    assert!(!failed.passed, "{report:?}");
    assert!(failed.output.is_empty(), "{report:?}");
    assert!(failed.errors.contains("sum is off"), "{report:?}");
    assert!(failed.errors.contains("FAILED (failures=1)"), "{report:?}");
    assert!(failed.errors.chars().count() <= 1001, "{report:?}");
    // A passing check's stderr is not kept.
    assert!(
        report.results[1].passed && report.results[1].errors.is_empty(),
        "{report:?}"
    );
}
