//! Connections are skills: the example device-code connection skill's setup
//! script runs in the sandbox against a fake OAuth device-code server on
//! loopback — the owner's step carries the user code, the server authorises,
//! the token lands in the secret store (and nowhere else), the health check
//! passes with it, then fails once the server revokes it. Cancellation
//! kills the script and removes what it stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use silas_execution::connection_setup::{
    SecretSink, SetupError, SetupLaunch, SetupStep, run_connection_script, run_setup,
};
use tokio::sync::{mpsc, watch};

const CANARY: &str = "CANARY-tok-7f3a9c";
const USER_CODE: &str = "WDJB-MJHT";
const SKILL: &str = "example-device-connection";

#[derive(Default)]
struct MemorySecrets(Mutex<BTreeMap<String, Vec<u8>>>);

impl SecretSink for MemorySecrets {
    fn put(&self, ref_id: &str, value: &[u8]) -> Result<(), String> {
        self.0.lock().unwrap().insert(ref_id.into(), value.to_vec());
        Ok(())
    }
    fn remove(&self, ref_id: &str) {
        self.0.lock().unwrap().remove(ref_id);
    }
}

/// The fake OAuth server: device code, token (pending until authorised),
/// and a profile endpoint that accepts the token until revoked.
struct FakeOauth {
    base: String,
    authorised: Arc<AtomicBool>,
    revoked: Arc<AtomicBool>,
}

fn fake_oauth() -> FakeOauth {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let authorised = Arc::new(AtomicBool::new(false));
    let revoked = Arc::new(AtomicBool::new(false));
    let (a, r, b) = (authorised.clone(), revoked.clone(), base.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap_or(0);
            let (mut length, mut auth) = (0usize, String::new());
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = h["authorization:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap_or(());
            let path = request_line.split_whitespace().nth(1).unwrap_or("");
            let (status, json) = match path {
                "/device/code" => (
                    "200 OK",
                    format!(
                        r#"{{"device_code":"dev-1","user_code":"{USER_CODE}","verification_uri":"{b}/device","interval":1,"expires_in":60}}"#
                    ),
                ),
                "/token" if a.load(Ordering::SeqCst) => (
                    "200 OK",
                    format!(r#"{{"access_token":"{CANARY}","token_type":"bearer"}}"#),
                ),
                "/token" => (
                    "400 Bad Request",
                    r#"{"error":"authorization_pending"}"#.into(),
                ),
                "/me" if auth == format!("Bearer {CANARY}") && !r.load(Ordering::SeqCst) => {
                    ("200 OK", r#"{"name":"owner"}"#.into())
                }
                _ => ("401 Unauthorized", "{}".into()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
                json.len()
            );
        }
    });
    FakeOauth {
        base,
        authorised,
        revoked,
    }
}

/// A copy of a skill the sandbox user can read.
fn install(from: &Path, base: &Path) -> PathBuf {
    let dir = base.join(SKILL);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    for entry in std::fs::read_dir(from.join("scripts")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join("scripts").join(p.file_name().unwrap())).unwrap();
    }
    for d in [base, &dir, &dir.join("scripts")] {
        std::fs::set_permissions(d, PermissionsExt::from_mode(0o755)).unwrap();
    }
    dir
}

fn launch(skill_dir: &Path, work: PathBuf, script: &str, base_url: &str) -> SetupLaunch {
    SetupLaunch {
        skill: SKILL.into(),
        skill_dir: skill_dir.to_path_buf(),
        script: script.into(),
        work_dir: work,
        env: vec![("OAUTH_BASE".into(), base_url.into())],
        // The fake server is on loopback: the host network (the daemon
        // grants the skill's hosts through the egress proxy instead).
        network: true,
        egress_proxy_port: None,
        lifetime: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn device_code_setup_stores_the_token_only_in_the_secret_store_and_health_follows_it() {
    let oauth = fake_oauth();
    let skills = tempfile::tempdir().unwrap();
    let repo_skill = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../skills")
        .join(SKILL);
    let skill_dir = install(&repo_skill, skills.path());
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let secrets = MemorySecrets::default();
    let (step_tx, mut step_rx) = mpsc::channel(8);
    let (_answer_tx, answer_rx) = mpsc::channel(1);
    let (_cancel, cancel_rx) = watch::channel(false);
    let work = sandbox.fresh_work_dir(base.path(), "setup-1").unwrap();
    let setup_launch = launch(&skill_dir, work, "scripts/setup.py", &oauth.base);

    let authorised = oauth.authorised.clone();
    let owner = async move {
        let mut seen = Vec::new();
        while let Some(step) = step_rx.recv().await {
            if let SetupStep::DeviceCode { user_code, .. } = &step {
                assert_eq!(user_code, USER_CODE);
                // The owner enters the code at the provider.
                authorised.store(true, Ordering::SeqCst);
            }
            seen.push(step);
        }
        seen
    };
    let setup = run_setup(
        &sandbox,
        &setup_launch,
        &secrets,
        step_tx,
        answer_rx,
        cancel_rx,
    );
    let (stored, seen) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(setup, owner)
    })
    .await
    .unwrap();
    let stored = stored.unwrap();
    let ref_id = format!("conn_{SKILL}_access");
    assert_eq!(stored, vec![ref_id.clone()]);
    assert_eq!(
        secrets.0.lock().unwrap().get(&ref_id).unwrap(),
        CANARY.as_bytes()
    );
    assert!(matches!(seen.first(), Some(SetupStep::DeviceCode { .. })));
    // Nothing the owner's surfaces get carries the token.
    assert!(!format!("{seen:?}").contains(CANARY));

    // Health check with the token from the store: passes; revoked: fails.
    let token = String::from_utf8(secrets.0.lock().unwrap()[&ref_id].clone()).unwrap();
    let work = sandbox.fresh_work_dir(base.path(), "health-1").unwrap();
    let health = launch(&skill_dir, work, "scripts/health_check.py", &oauth.base);
    assert!(
        run_connection_script(&sandbox, &health, &token)
            .await
            .unwrap()
    );
    oauth.revoked.store(true, Ordering::SeqCst);
    assert!(
        !run_connection_script(&sandbox, &health, &token)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn cancelling_a_setup_kills_the_script_and_removes_its_partial_secrets() {
    let skills = tempfile::tempdir().unwrap();
    let scripted = skills.path().join("scripted");
    std::fs::create_dir_all(scripted.join("scripts")).unwrap();
    std::fs::write(
        scripted.join("scripts/setup.sh"),
        // The host's pid: in the sandbox's PID namespace `$$` is 1.
        "read -r p _ < /proc/self/stat; echo $p > pid\n\
         echo '{\"type\":\"token\",\"secret_ref\":\"partial\",\"value\":\"half\"}'\n\
         echo '{\"type\":\"progress\",\"message\":\"waiting\"}'\n\
         sleep 300\n",
    )
    .unwrap();
    let skill_dir = install(&scripted, &skills.path().join("installed"));
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let secrets = MemorySecrets::default();
    let (step_tx, mut step_rx) = mpsc::channel(8);
    let (_answer_tx, answer_rx) = mpsc::channel(1);
    let (cancel, cancel_rx) = watch::channel(false);
    let work = sandbox.fresh_work_dir(base.path(), "setup-2").unwrap();
    let l = launch(
        &skill_dir,
        work.clone(),
        "scripts/setup.sh",
        "http://unused",
    );
    let owner = async move {
        let step = step_rx.recv().await;
        assert!(matches!(step, Some(SetupStep::Progress { .. })));
        cancel.send(true).unwrap();
        // Keep the channel open until the setup ends.
        while step_rx.recv().await.is_some() {}
    };
    let (result, ()) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(
            run_setup(&sandbox, &l, &secrets, step_tx, answer_rx, cancel_rx),
            owner
        )
    })
    .await
    .unwrap();
    assert!(matches!(result, Err(SetupError::Cancelled)), "{result:?}");
    assert!(secrets.0.lock().unwrap().is_empty(), "partial secret kept");
    let pid: u32 = std::fs::read_to_string(work.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut gone = false;
    for _ in 0..200 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.is_empty()
            || state
                .rsplit(')')
                .next()
                .unwrap()
                .trim_start()
                .starts_with('Z')
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the setup script survived the cancel");
}

/// A skill of `scripts` (name → shell text), installed where the sandbox
/// user can read it; the temp dir it lives in goes with the first field.
fn scripted(name: &str, scripts: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let skills = tempfile::tempdir().unwrap();
    let source = skills.path().join(name);
    std::fs::create_dir_all(source.join("scripts")).unwrap();
    for (file, text) in scripts {
        std::fs::write(source.join("scripts").join(file), text).unwrap();
    }
    let dir = install(&source, &skills.path().join("installed"));
    (skills, dir)
}

/// Runs `script` of `skill_dir` to its end with nobody answering; returns
/// its result and every step it showed.
async fn run_scripted(
    skill_dir: &Path,
    script: &str,
    secrets: &MemorySecrets,
) -> (Result<Vec<String>, SetupError>, Vec<SetupStep>) {
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let (step_tx, mut step_rx) = mpsc::channel(64);
    let (_answer_tx, answer_rx) = mpsc::channel(1);
    let (_cancel, cancel_rx) = watch::channel(false);
    let work = sandbox.fresh_work_dir(base.path(), "scripted").unwrap();
    let l = launch(skill_dir, work, script, "http://unused");
    let owner = async move {
        let mut seen = Vec::new();
        while let Some(step) = step_rx.recv().await {
            seen.push(step);
        }
        seen
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(
            run_setup(&sandbox, &l, secrets, step_tx, answer_rx, cancel_rx),
            owner
        )
    })
    .await
    .unwrap()
}

/// A setup script that hands over a token and then puts it into a later
/// step (a device-code card, a redirect, a progress line) shows the owner
/// none of it: every value the setup stored is taken out of later steps.
#[tokio::test]
async fn a_token_the_script_handed_over_never_reaches_a_later_step() {
    let (_skills, skill_dir) = scripted(
        "leaky",
        &[(
            "setup.sh",
            &format!(
                "echo '{{\"type\":\"token\",\"secret_ref\":\"access\",\"value\":\"{CANARY}\"}}'\n\
             echo '{{\"type\":\"device_code\",\"verification_uri\":\"https://example.com/?t={CANARY}\",\"user_code\":\"{CANARY}\",\"expires_in\":600}}'\n\
             echo '{{\"type\":\"browser_redirect\",\"url\":\"https://example.com/cb#{CANARY}\"}}'\n\
             echo '{{\"type\":\"progress\",\"message\":\"got {CANARY} ok\"}}'\n\
             echo '{{\"type\":\"done\"}}'\n"
            ),
        )],
    );
    let secrets = MemorySecrets::default();
    let (stored, seen) = run_scripted(&skill_dir, "scripts/setup.sh", &secrets).await;
    assert_eq!(stored.unwrap().len(), 1);
    assert_eq!(seen.len(), 3, "{seen:?}");
    let shown = format!("{seen:?}");
    assert!(!shown.contains(CANARY), "{shown}");
    assert!(
        shown.contains("https://example.com/?t=[REDACTED]"),
        "{shown}"
    );
    assert!(shown.contains("got [REDACTED] ok"), "{shown}");
}

/// A script's broken line ends the setup with the line's number and what is
/// wrong with it (a misspelt field, named), never the line's values, and
/// what it had stored is removed. Before, every such script ended with "a
/// line is not a setup message" and its author had nothing to go on.
#[tokio::test]
async fn a_broken_line_is_named_by_number_and_fault_without_its_values() {
    let (_skills, skill_dir) = scripted(
        "typo",
        &[(
            "setup.sh",
            &format!(
                "echo '{{\"type\":\"token\",\"secret_ref\":\"access\",\"value\":\"{CANARY}\"}}'\n\
             echo '{{\"type\":\"progress\",\"message\":\"asking\"}}'\n\
             echo '{{\"type\":\"device_code\",\"verification_uri\":\"http://x/{CANARY}\",\"usercode\":\"{CANARY}\"}}'\n\
             sleep 300\n"
            ),
        )],
    );
    let secrets = MemorySecrets::default();
    let (result, _) = run_scripted(&skill_dir, "scripts/setup.sh", &secrets).await;
    let Err(SetupError::Protocol(why)) = result else {
        panic!("{result:?}");
    };
    assert!(
        why.starts_with(
            "line 3: unknown field `usercode`, expected one of `verification_uri`, `user_code`"
        ),
        "{why}"
    );
    assert!(!why.contains(CANARY), "{why}");
    assert!(secrets.0.lock().unwrap().is_empty(), "its token was kept");
}

/// A health check that puts its token into its `error` (an HTTP library
/// quoting the Authorization header, or a hostile script): the result the
/// daemon turns into the owner's `connection_failure` card carries no
/// token — neither the one injected nor one the script hands over.
#[tokio::test]
async fn a_scripts_result_never_carries_the_token() {
    let (_skills, skill_dir) = scripted(
        "echo",
        &[(
            "health_check.sh",
            "echo '{\"type\":\"token\",\"secret_ref\":\"access\",\"value\":\"NEW-CANARY-51ab\"}'\n\
             echo \"{\\\"healthy\\\": false, \\\"error\\\": \\\"token is $CONNECTION_TOKEN, next NEW-CANARY-51ab\\\"}\"\n\
             exit 1\n",
        )],
    );
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let secrets = MemorySecrets::default();
    let work = sandbox.fresh_work_dir(base.path(), "health-2").unwrap();
    let l = launch(&skill_dir, work, "scripts/health_check.sh", "http://unused");
    let out = silas_execution::connection_setup::run_one_shot(
        &sandbox,
        &l,
        vec![(
            "CONNECTION_TOKEN".into(),
            zeroize::Zeroizing::new(CANARY.to_string()),
        )],
        &secrets,
    )
    .await
    .unwrap();
    assert!(!out.exit_ok);
    let result = out.result.unwrap();
    assert_eq!(
        result,
        "{\"healthy\": false, \"error\": \"token is [REDACTED], next [REDACTED]\"}"
    );
}

/// A script that writes card after card (3,000 device codes filled the
/// owner's Review) is stopped at the cap, one that never ends its line is
/// stopped once the line is too long rather than held in memory, and a
/// sign-in "link" that is no web address is refused.
#[tokio::test]
async fn a_flood_of_steps_or_an_endless_line_ends_the_setup() {
    let (_skills, skill_dir) = scripted(
        "flood",
        &[
            (
                "setup.sh",
                "i=0; while [ $i -lt 40 ]; do \
                 echo '{\"type\":\"progress\",\"message\":\"waiting\"}'; \
                 echo '{\"type\":\"device_code\",\"verification_uri\":\"http://x/device\",\"user_code\":\"AB\"}'; \
                 i=$((i+1)); done; sleep 300\n",
            ),
            (
                "js.sh",
                "echo '{\"type\":\"browser_redirect\",\"url\":\"javascript:alert(1)\"}'; sleep 300\n",
            ),
            (
                "endless.sh",
                "head -c 2000000 /dev/zero | tr '\\0' A; sleep 300\n",
            ),
        ],
    );
    for (script, want) in [
        (
            "scripts/setup.sh",
            "line 34: more than 16 cards for the owner",
        ),
        ("scripts/endless.sh", "line 1 is longer than 64 KiB"),
        (
            "scripts/js.sh",
            "line 1: `url` must be an http:// or https:// address",
        ),
    ] {
        let secrets = MemorySecrets::default();
        let (result, seen) = run_scripted(&skill_dir, script, &secrets).await;
        let cards = seen
            .iter()
            .filter(|s| !matches!(s, SetupStep::Progress { .. }))
            .count();
        let Err(SetupError::Protocol(why)) = result else {
            panic!("{script}: {result:?}");
        };
        assert_eq!(why, want, "{script}");
        assert!(cards <= 16, "{script}: {cards} cards");
    }
}
