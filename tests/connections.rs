//! Connections are skills, end to end on the real binary (issue #17 item 6,
//! "Shown by"): the example device-code connection skill is installed
//! through its card, `silas connection add` starts the setup, the owner's
//! web connection gets the device-code card with the user code, a fake
//! OAuth device-code server on loopback authorises, the token lands in the
//! secret store only (a canary absent from frames, audit, daemon log and the
//! redb file), the scheduled health check passes, the fake server starts
//! refusing and a `connection_failure` card reaches the owner. The skill's
//! declared host `oauth.example.com` reaches the loopback server only
//! through the owner's explicit, audited `connections.host_pins` and
//! `trusted_private_cidrs` — the same configuration a real owner uses for a
//! self-hosted service. A skill that is not installed, or whose files
//! changed after approval, is refused. Every agent talks to a fake model
//! on loopback, and an owner turn after the setup shows the canary never
//! reaches a model request either.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{audit_json, frame_of_type, send, silas, start_daemon};

const CANARY: &str = "CANARY-conn-tok-5e1d77";
const USER_CODE: &str = "WDJB-MJHT";
const SKILL: &str = "example-device-connection";

/// The fake OAuth server: device code, token (pending until authorised),
/// and a profile endpoint that accepts the token until revoked.
fn fake_oauth() -> (u16, Arc<AtomicBool>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let authorised = Arc::new(AtomicBool::new(false));
    let revoked = Arc::new(AtomicBool::new(false));
    let (a, r) = (authorised.clone(), revoked.clone());
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
                        r#"{{"device_code":"dev-1","user_code":"{USER_CODE}","verification_uri":"https://oauth.example.com/device","interval":1,"expires_in":120}}"#
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
    (port, authorised, revoked)
}

fn connections(dir: &Path) -> Vec<Value> {
    let out = silas(dir)
        .args(["connection", "list", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_code_connection_is_set_up_checked_and_its_failure_reaches_the_owner() {
    let (port, authorised, revoked) = fake_oauth();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(silas(d).arg("init").output().unwrap().status.success());
    let repo_skill = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("skills")
        .join(SKILL);
    let install = silas(d)
        .args(["skill", "install"])
        .arg(&repo_skill)
        .output()
        .unwrap();
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stdout)
    );

    // Every agent on a fake model that records what it is sent.
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "status",
        "response": {"message": "All good."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    std::fs::write(
        d.join("silas.yaml"),
        format!(
            "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n",
            fake.base_url()
        ),
    )
    .unwrap();

    let log_path = d.join("daemon.log");
    let mut cmd = silas(d);
    cmd.arg("--config").arg(d.join("silas.yaml"));
    cmd.env(
        "SILAS__CONNECTIONS__HOST_PINS",
        r#"{"oauth.example.com": ["127.0.0.1"]}"#,
    )
    .env(
        "SILAS__CONNECTIONS__TRUSTED_PRIVATE_CIDRS",
        "[127.0.0.1/32]",
    )
    .env("SILAS__CONNECTIONS__HEALTH_CHECK_DEFAULT", "@every 2s")
    .env("SILAS__APPROVAL__PLAN_CARD_TIMEOUT_SECONDS", "120");
    let (daemon, addr, _) =
        start_daemon(cmd, Stdio::from(std::fs::File::create(&log_path).unwrap()));
    // Nobody to show the sign-in steps to: refused, not "started" (its
    // first card was declined at once and the setup failed unseen).
    let out = silas(d)
        .args(["connection", "add", SKILL])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("E_CHANNEL_DISCONNECTED") && err.contains("no owner client is connected"),
        "{err}"
    );
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(10)).await;
    let mut frames = Vec::new();

    // The install card (stored while the daemon was down) → approve. The
    // bundled skills `init` placed wait on their own cards (skipped here).
    let card = loop {
        let c = frame_of_type(
            &mut ws,
            "skill_install",
            Duration::from_secs(20),
            &mut frames,
        )
        .await;
        if c["skill"] == SKILL {
            break c;
        }
    };
    assert_eq!(card["skill"], SKILL);
    assert_eq!(card["network"], json!(["oauth.example.com"]));
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": card["request_id"], "verdict": "approved"}),
    )
    .await;
    let mut installed = false;
    for _ in 0..120 {
        if audit_json(d).contains("\"skill_installed\"") {
            installed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(installed, "the skill was not installed: {frames:?}");

    // A skill that is not installed is refused.
    let out = silas(d)
        .args(["connection", "add", "no-such-skill"])
        .output()
        .unwrap();
    assert!(!out.status.success());

    // A key typed as a setting is refused before anything is stored: the
    // connection's record keeps settings in plain text.
    const SET_CANARY: &str = "ghp_CanaryCanaryCanaryCanaryCanary012345";
    let out = silas(d)
        .args(["connection", "add", SKILL, "--set"])
        .arg(format!(
            "OAUTH_BASE=https://x:{SET_CANARY}@oauth.example.com"
        ))
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("setting OAUTH_BASE looks like a secret") && said.contains("secure input"),
        "{said}"
    );
    assert!(!said.contains(SET_CANARY), "{said}");

    // A setup that fails in the background (the script's host is not one
    // it declared: the egress proxy refuses it) reaches the owner as a
    // notice saying why, and the connection can be set up again.
    let out = silas(d)
        .args([
            "connection",
            "add",
            SKILL,
            "--set",
            "OAUTH_BASE=http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut notice = None;
    for _ in 0..10 {
        let m = frame_of_type(&mut ws, "message", Duration::from_secs(60), &mut frames).await;
        if m["text"]
            .as_str()
            .is_some_and(|t| t.contains("did not complete"))
        {
            notice = Some(m["text"].as_str().unwrap_or_default().to_string());
            break;
        }
    }
    let notice = notice.unwrap_or_else(|| panic!("no failure notice: {frames:?}"));
    assert!(
        notice.starts_with(&format!(
            "Setting up the connection of skill '{SKILL}' did not complete: its script reported a failure (it said: device code request failed"
        )),
        "{notice}"
    );
    assert!(
        notice.ends_with(&format!("`silas connection add {SKILL}` starts it again.")),
        "{notice}"
    );
    let mut proposed = false;
    for _ in 0..40 {
        if connections(d).iter().any(|c| c["status"] == "proposed") {
            proposed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(proposed, "{:?}", connections(d));

    // Setup: the owner's settings point the skill at its declared host.
    let out = silas(d)
        .args(["connection", "add", SKILL, "--set"])
        .arg(format!("OAUTH_BASE=http://oauth.example.com:{port}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let step = frame_of_type(
        &mut ws,
        "connection_setup_step",
        Duration::from_secs(60),
        &mut frames,
    )
    .await;
    assert_eq!(step["step_type"], "device_code");
    assert_eq!(step["user_code"], USER_CODE);
    // The owner enters the code at the provider.
    authorised.store(true, Ordering::SeqCst);

    // Active, then a scheduled health check passes.
    let mut checked = None;
    for _ in 0..240 {
        let list = connections(d);
        if let Some(c) = list
            .iter()
            .find(|c| c["status"] == "active" && !c["last_health_check"].is_null())
        {
            checked = Some(c.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let conn = checked.unwrap_or_else(|| panic!("no healthy connection: {:?}", connections(d)));
    // The setup is over: its device-code card is withdrawn, not shown again
    // on every reconnect with a fresh countdown.
    let mut withdrawn = false;
    for _ in 0..40 {
        let audit = audit_json(d);
        if audit.contains("\"card_withdrawn\"")
            && audit.contains(step["request_id"].as_str().unwrap_or("?"))
        {
            withdrawn = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(withdrawn, "the setup's card was not withdrawn");
    assert_eq!(conn["connection_id"], format!("conn-{SKILL}"));
    assert_eq!(conn["permissions_granted"], json!(["profile.read"]));

    // An owner turn with the token stored: what the models are sent.
    send(
        &mut ws,
        json!({"type": "message", "text": "is my profile connection healthy?"}),
    )
    .await;
    // (Other notices may come first; the reply is the fake model's text.)
    for _ in 0..10 {
        let m = frame_of_type(&mut ws, "message", Duration::from_secs(30), &mut frames).await;
        if m["text"] == "All good." {
            break;
        }
    }
    assert!(
        frames.iter().any(|f| f["text"] == "All good."),
        "no reply: {frames:?}"
    );

    // Forced failure: the provider refuses the token → failure card.
    revoked.store(true, Ordering::SeqCst);
    let failure = frame_of_type(
        &mut ws,
        "connection_failure",
        Duration::from_secs(60),
        &mut frames,
    )
    .await;
    assert!(
        failure["message"]
            .as_str()
            .unwrap_or("")
            .contains("token rejected"),
        "{failure}"
    );

    // A skill changed after approval is refused (content hash).
    let installed_dir = d.join("skills").join(SKILL);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(installed_dir.join("SKILL.md"))
        .unwrap();
    writeln!(f, "\nChanged after approval.").unwrap();
    let out = silas(d)
        .args(["connection", "add", SKILL])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("E_APPROVAL_HASH"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    drop(ws);
    daemon.stop().await;

    // The token is in the secret store (encrypted) and nowhere else.
    let secret = d
        .join("data/secrets")
        .join(format!("conn_{SKILL}_access.sec"));
    assert!(secret.is_file(), "no stored token");
    assert!(!contains(&std::fs::read(&secret).unwrap(), CANARY));
    let frames_text = serde_json::to_string(&frames).unwrap();
    assert!(!frames_text.contains(CANARY), "canary in a frame");
    let audit = audit_json(d);
    assert!(!audit.contains(CANARY), "canary in the audit log");
    for event in [
        "connection.egress_configured",
        "connection.setup_started",
        "connection.setup_completed",
        "connection.setup_failed",
        "connection.egress_refused",
        "connection.script_run",
        "connection.failed",
        "skill_use_refused",
    ] {
        assert!(audit.contains(&format!("\"{event}\"")), "no {event}");
    }
    let mut log = String::new();
    std::fs::File::open(&log_path)
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!log.contains(CANARY), "canary in the daemon log");
    let redb = std::fs::read(d.join("data").join("silas.redb")).unwrap();
    assert!(!contains(&redb, CANARY), "canary in the redb file");
    for (what, text) in [
        ("redb file", &String::from_utf8_lossy(&redb).into_owned()),
        ("audit", &audit),
        ("log", &log),
    ] {
        assert!(!text.contains(SET_CANARY), "refused setting in the {what}");
    }
    let requests = fake.requests();
    assert!(!requests.is_empty(), "no model request was made");
    for r in &requests {
        assert!(
            !r.body.to_string().contains(CANARY),
            "canary in a model request"
        );
    }
}
