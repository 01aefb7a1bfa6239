//! Issue #12 items 6 and 7 over the real sandbox: what an executor produces
//! cannot carry privileges out of the sandbox, and cannot steer the checks
//! that verify it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox;
use serde_json::json;
use silas_core::model::execution::ExecutionEnvelope;
use silas_core::model::work::VerificationCheck;
use silas_execution::artifacts::{ArtifactError, copy_plain_file, create_private_dir};
use silas_execution::executors::ExecutorRegistry;
use silas_execution::verification::VerificationRunner;
use silas_sandbox::Limits;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn shell(command: &str, id: &str) -> ExecutionEnvelope {
    serde_json::from_value(json!({
        "execution_id": id, "step_index": 0, "task_description": "t", "action": "shell_exec",
        "args": {"command": command}, "timeout_seconds": 20, "max_output_bytes": 2000,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_setuid_artifact_is_stored_without_the_bit_and_links_are_not_followed() {
    let base = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("owner.key");
    std::fs::write(&key, "PRIVATE-KEY-MATERIAL").unwrap();
    let reg = ExecutorRegistry::new(sandbox(), base.path().to_path_buf());
    let cmd = format!(
        "printf '#!/bin/sh\\nid\\n' > tool && chmod 4755 tool && \
         printf 'x' > shared && chmod 2775 shared && \
         ln -s /etc/shadow shadow && ln -s {} key && echo made",
        key.display()
    );
    let r = reg.execute(&shell(&cmd, "exec-setuid")).await;
    assert!(r.success, "{r:?}");
    // The sandbox really produced a setuid file: the attack is live.
    let produced = Path::new(&r.artifacts["tool"]).to_path_buf();
    assert_eq!(mode(&produced), 0o4755);
    assert_eq!(mode(Path::new(&r.artifacts["shared"])), 0o2775);
    // Links never become artifacts.
    assert!(!r.artifacts.contains_key("shadow"), "{:?}", r.artifacts);
    assert!(!r.artifacts.contains_key("key"), "{:?}", r.artifacts);

    // Stored the way the work executor stores them.
    let store = base.path().join("artifacts").join("item-1");
    create_private_dir(&store).unwrap();
    assert_eq!(mode(&store), 0o700);
    for (name, src) in &r.artifacts {
        copy_plain_file(Path::new(src), &store.join(name)).unwrap();
    }
    assert_eq!(mode(&store.join("tool")), 0o600);
    assert_eq!(mode(&store.join("shared")), 0o600);
    assert_eq!(
        std::fs::read_to_string(store.join("tool")).unwrap(),
        "#!/bin/sh\nid\n"
    );
    // A link swapped in after the listing is refused at copy time, not followed.
    let work = produced.parent().unwrap();
    for link in ["shadow", "key"] {
        let err = copy_plain_file(&work.join(link), &store.join(link)).unwrap_err();
        assert!(matches!(err, ArtifactError::Refused { .. }), "{err}");
        assert!(!store.join(link).exists());
    }
}

fn check(v: serde_json::Value) -> VerificationCheck {
    serde_json::from_value(v).unwrap()
}

/// Every file named `MARKER*` below `dir`.
/// `run`, then the names of any marker files the planted modules left in
/// `$HOME` (the check's own dir, removed once the check is done, so the
/// check itself has to say), keeping `run`'s exit code.
fn probed(run: &str) -> String {
    format!("{{ {run}\n}}; rc=$?; ls -A \"$HOME\" | grep MARKER; exit $rc")
}

/// Artifacts an executor could leave: modules that write a marker file into
/// `$HOME` and print `PLANTED` the moment they are imported.
fn planted_artifacts() -> tempfile::TempDir {
    let a = tempfile::tempdir().unwrap();
    let payload = |tag: &str| {
        format!(
            "import os\nopen(os.path.join(os.environ.get('HOME', '/tmp'), 'MARKER-{tag}'), 'w').write('x')\nprint('PLANTED-{tag}')\n"
        )
    };
    std::fs::write(a.path().join("json.py"), payload("json")).unwrap();
    std::fs::write(a.path().join("conftest.py"), payload("conftest")).unwrap();
    std::fs::write(a.path().join("data.json"), "{\"n\": 7}").unwrap();
    a
}

fn runner(verify: &Path) -> VerificationRunner {
    VerificationRunner::new(
        sandbox(),
        verify.to_path_buf(),
        Vec::new(),
        Limits::default(),
    )
}

#[tokio::test]
async fn a_planted_json_py_never_runs_inside_the_verifier() {
    let artifacts = planted_artifacts();
    // Control: imported from the artifacts dir the way the old layout ran
    // checks (cwd = artifacts, cwd on sys.path), the planted module does run.
    // So its silence below is the layout's doing, not a broken payload.
    let control_dir = tempfile::tempdir().unwrap();
    let control = runner(control_dir.path())
        .run_check(
            &check(json!({"name": "old layout", "expect": {"contains": "PLANTED-json"},
                "run": probed("cd \"$SILAS_ARTIFACTS\" && env -u PYTHONSAFEPATH python3 -c 'import json'")})),
            Some(artifacts.path()),
        )
        .await;
    assert!(control.passed, "{control:?}");
    assert!(control.output.contains("MARKER-json"), "{control:?}");

    let verify = tempfile::tempdir().unwrap();
    let report = runner(verify.path())
        .run_checks(
            &[
                check(json!({"name": "json", "expect": {"equals": "7 ['conftest.py', 'data.json', 'json.py']"},
                    "run": probed("python3 -c \"import json, os; d = os.environ['SILAS_ARTIFACTS']; print(json.load(open(d + '/data.json'))['n'], sorted(os.listdir(d)))\"")})),
                check(json!({"name": "script in cwd", "expect": {"equals": "7"},
                    "run": probed("printf 'import json\\nprint(json.load(open(\"artifacts/data.json\"))[\"n\"])\\n' > check.py && python3 check.py")})),
                check(json!({"name": "module run", "expect": {"contains": "\"a\""},
                    "run": probed("echo '{\"a\": 1}' | python3 -m json.tool")})),
            ],
            Some(artifacts.path()),
        )
        .await;
    assert!(report.all_passed, "{report:?}");
    for r in &report.results {
        assert!(!r.output.contains("PLANTED"), "{r:?}");
        assert!(!r.output.contains("MARKER"), "{r:?}");
    }
}

#[tokio::test]
async fn a_planted_conftest_py_never_runs_inside_the_verifier() {
    // The python3 the sandbox finds, not the one on the test's PATH.
    let has_pytest = std::process::Command::new("python3")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pytest {
        eprintln!("SKIPPED: pytest is not installed; the conftest.py half needs it");
        return;
    }
    let artifacts = planted_artifacts();
    let verify = tempfile::tempdir().unwrap();
    let test = "printf 'import json, os\\ndef test_data():\\n    d = os.environ[\"SILAS_ARTIFACTS\"]\\n    assert json.load(open(d + \"/data.json\"))[\"n\"] == 7\\n' > test_check.py";
    let report = runner(verify.path())
        .run_checks(
            &[
                check(json!({"name": "named test", "expect": {"exit_code": 0},
                    "run": probed(&format!("{test} && python3 -m pytest -q -p no:cacheprovider test_check.py"))})),
                check(json!({"name": "bare pytest", "expect": {"exit_code": 0},
                    "run": probed(&format!("{test} && python3 -m pytest -q -p no:cacheprovider"))})),
            ],
            Some(artifacts.path()),
        )
        .await;
    assert!(report.all_passed, "{report:?}");
    for r in &report.results {
        assert!(!r.output.contains("PLANTED"), "{r:?}");
        assert!(!r.output.contains("MARKER"), "{r:?}");
        assert!(r.output.contains("1 passed"), "{r:?}");
    }
}
