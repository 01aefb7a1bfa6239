//! Skill scripts in the real sandbox: the approved bytes only, arguments as
//! argv, credentials injected at spawn and redacted from every output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use silas_sandbox::{Launcher, SubprocessSandbox};
use silas_skill::run::{Invocation, RunError, RunRequest, SkillRunner};
use silas_skill::snapshot;
use zeroize::Zeroizing;

fn launcher() -> Launcher {
    if let Ok(l) = Launcher::sibling_binary() {
        return l;
    }
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "silas-sandbox",
            "--bin",
            "silas-sandbox-exec",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    Launcher::sibling_binary().unwrap()
}

const CANARY: &str = "canary-7f3a9c1e-skill-token";

fn skill(root: &Path) -> std::path::PathBuf {
    let dir = root.join("echo-arg");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: echo-arg\ndescription: Use when a text must be echoed back.\nrequirements:\n  credentials: [SKILL_TOKEN]\nscript_args:\n  scripts/echo.sh:\n    text: {type: string, default: \"dry\", max_length: 200}\n---\n# Echo\n",
    )
    .unwrap();
    // Proves the credential arrived (exit 3 otherwise), then leaks it on
    // both streams: the runner must redact it.
    std::fs::write(
        dir.join("scripts/echo.sh"),
        "[ \"$SKILL_TOKEN\" = \"canary-7f3a9c1e-skill-token\" ] || exit 3\nprintf 'arg=%s\\n' \"$2\"\necho \"token=$SKILL_TOKEN\"\necho \"token=$SKILL_TOKEN\" >&2\nls\n",
    )
    .unwrap();
    dir
}

fn hash(dir: &Path) -> String {
    snapshot::take(dir).unwrap().content_hash().unwrap()
}

fn creds(r: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    match r {
        "SKILL_TOKEN" => Ok(Zeroizing::new(CANARY.as_bytes().to_vec())),
        other => Err(format!("no secret {other}")),
    }
}

#[tokio::test]
async fn runs_the_approved_bytes_with_argv_args_and_redacted_credentials() {
    let root = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = skill(root.path());
    let approved = hash(&dir);
    let runner = SkillRunner::new(
        SubprocessSandbox::new(launcher()),
        work.path().to_path_buf(),
    );
    let pwned = root.path().join("pwned");
    let args = json!({"text": format!("$(touch {}) `id` ; echo x", pwned.display())});
    let out = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &approved,
            script: "scripts/echo.sh",
            invocation: Invocation::Call(args.as_object().unwrap().clone()),
            credentials: &creds,
            egress_proxy_port: None,
            execution_id: "run-1",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    // The argument arrived as one literal argv element; nothing ran it.
    assert!(out.stdout.contains("$(touch"), "{}", out.stdout);
    assert!(!pwned.exists());
    // The credential reached the script (else exit 3) but no output holds it.
    assert!(!out.stdout.contains(CANARY) && !out.stderr.contains(CANARY));
    assert!(out.stdout.contains("token=[REDACTED]"), "{}", out.stdout);
    assert!(!format!("{out:?}").contains(CANARY));
    assert_eq!(out.content_hash, approved);

    // The dry run uses the schema's default.
    let dry = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &approved,
            script: "scripts/echo.sh",
            invocation: Invocation::DryRun,
            credentials: &creds,
            egress_proxy_port: None,
            execution_id: "run-2",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert!(dry.stdout.contains("arg=dry"), "{}", dry.stdout);

    // Modified after approval: refused before anything runs.
    std::fs::write(dir.join("scripts/echo.sh"), "touch /tmp/should-not-run\n").unwrap();
    let err = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &approved,
            script: "scripts/echo.sh",
            invocation: Invocation::DryRun,
            credentials: &creds,
            egress_proxy_port: None,
            execution_id: "run-3",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Changed { .. }), "{err}");
    assert_eq!(
        silas_core::Coded::code(&err),
        silas_core::ErrorCode::EApprovalHash
    );
}

#[tokio::test]
async fn declared_network_without_an_egress_proxy_and_missing_credentials_refuse() {
    let root = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = skill(root.path());
    let runner = SkillRunner::new(
        SubprocessSandbox::new(launcher()),
        work.path().to_path_buf(),
    );
    let none = |_: &str| -> Result<Zeroizing<Vec<u8>>, String> { Err("not stored".into()) };
    let err = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &hash(&dir),
            script: "scripts/echo.sh",
            invocation: Invocation::DryRun,
            credentials: &none,
            egress_proxy_port: None,
            execution_id: "run-4",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, RunError::Credential(ref r, _) if r == "SKILL_TOKEN"),
        "{err}"
    );

    let md = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        md.replace(
            "requirements:\n",
            "requirements:\n  network: [api.example.com]\n",
        ),
    )
    .unwrap();
    let call = serde_json::Map::from_iter([("text".to_string(), json!("x"))]);
    let err = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &hash(&dir),
            script: "scripts/echo.sh",
            invocation: Invocation::Call(call),
            credentials: &creds,
            egress_proxy_port: None,
            execution_id: "run-5",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::NoEgress { .. }), "{err}");
    // The install dry run never gets the network, so it needs no proxy.
    let out = runner
        .run(RunRequest {
            dir: &dir,
            approved_hash: &hash(&dir),
            script: "scripts/echo.sh",
            invocation: Invocation::DryRun,
            credentials: &creds,
            egress_proxy_port: None,
            execution_id: "run-6",
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
}

#[test]
fn staging_copies_the_approved_bytes_and_refuses_a_changed_folder() {
    let root = tempfile::tempdir().unwrap();
    let dir = skill(root.path());
    let approved = hash(&dir);
    let dest = root.path().join("staged");
    let s = silas_skill::run::stage_approved(&dir, &approved, &dest).unwrap();
    assert_eq!(s.content_hash, approved);
    assert_eq!(hash(&dest), approved);
    std::fs::write(dir.join("scripts/echo.sh"), "echo changed\n").unwrap();
    let err =
        silas_skill::run::stage_approved(&dir, &approved, &root.path().join("again")).unwrap_err();
    assert!(matches!(err, RunError::Changed { .. }), "{err}");
    assert!(!root.path().join("again").exists());
}
