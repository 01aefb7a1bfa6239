//! The whole loop through the real daemon and a real WebSocket client, with
//! no API key (the labelled offline responder): greeting → reply; a file
//! request → plan approval card → owner approves → sandboxed execution →
//! external verification → `work_status` done; then a clean shutdown whose
//! audit chain verifies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn silas(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_silas"));
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .arg("--data-dir")
        .arg(dir.join("data"));
    c
}

fn start(dir: &std::path::Path) -> (Daemon, String, Vec<String>) {
    let mut child = silas(dir)
        .env("SILAS__CHANNELS__WEB__PORT", "0")
        .arg("start")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if let Some(rest) = line.split_once("http://").map(|(_, r)| r)
            && line.starts_with("Silas is running")
        {
            let addr = rest.split('/').next().unwrap().to_string();
            // Keep draining stdout so the daemon never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return (Daemon { child }, addr, seen);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("daemon never announced readiness: {seen:?}");
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_frame(ws: &mut Ws, within: Duration) -> Value {
    loop {
        let msg = tokio::time::timeout(within, ws.next())
            .await
            .expect("no frame in time")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap();
        }
    }
}

async fn frame_of_type(ws: &mut Ws, ty: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame(ws, left).await;
        if f["type"] == ty {
            return f;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_plan_approve_run_verify_over_websocket() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start(dir.path());
    assert!(
        banner
            .iter()
            .any(|l| l.starts_with("model: offline") && l.contains("not an LLM")),
        "no offline label: {banner:?}"
    );
    // The daemon holds the signing key: no core dumps.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.child.id())).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    let fields: Vec<&str> = core.split_whitespace().collect();
    assert_eq!(&fields[4..6], &["0", "0"], "{core}");
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let auth = next_frame(&mut ws, Duration::from_secs(5)).await;
    assert_eq!(auth["type"], "auth_ok");
    assert_eq!(auth["scope_id"], "owner");
    // The UI label: the runtime announces the offline responder as such.
    assert_eq!(auth["model"]["offline"], true);
    let description = auth["model"]["description"].as_str().unwrap();
    assert!(description.contains("not an LLM"), "{auth}");

    ws.send(Message::text(r#"{"type":"message","text":"hello"}"#))
        .await
        .unwrap();
    let reply = frame_of_type(&mut ws, "message", Duration::from_secs(20)).await;
    assert!(
        reply["text"].as_str().unwrap().contains("offline"),
        "{reply}"
    );

    ws.send(Message::text(
        r#"{"type":"message","text":"create a file notes.txt containing hello"}"#,
    ))
    .await
    .unwrap();
    let card = frame_of_type(&mut ws, "approval_request", Duration::from_secs(20)).await;
    let request_id = card["request_id"].as_str().unwrap().to_string();
    assert!(
        card["body"].as_str().unwrap().contains("notes.txt"),
        "{card}"
    );
    assert!(
        !card["verify"].as_array().unwrap().is_empty(),
        "plan carries no verification: {card}"
    );

    ws.send(Message::text(
        json!({"type": "approval_response", "request_id": request_id, "verdict": "approved"})
            .to_string(),
    ))
    .await
    .unwrap();
    let mut statuses = Vec::new();
    let done = loop {
        let f = frame_of_type(&mut ws, "work_status", Duration::from_secs(60)).await;
        statuses.push(f["status"].as_str().unwrap().to_string());
        if ["done", "failed", "stuck", "blocked"].contains(&f["status"].as_str().unwrap()) {
            break f;
        }
    };
    assert_eq!(done["status"], "done", "statuses {statuses:?}, last {done}");
    assert!(statuses.contains(&"running".to_string()));
    let checks = done["verification"].as_array().unwrap();
    assert!(
        !checks.is_empty() && checks.iter().all(|c| c["passed"] == true),
        "{done}"
    );

    // Answering the same card again changes nothing.
    ws.send(Message::text(
        json!({"type": "approval_response", "request_id": request_id, "verdict": "approved"})
            .to_string(),
    ))
    .await
    .unwrap();
    let again = frame_of_type(&mut ws, "error", Duration::from_secs(10)).await;
    assert_eq!(again["request_id"], request_id.as_str());

    // Clean shutdown; the audit chain written by the whole run verifies.
    let pid = daemon.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut daemon = daemon;
    let status = loop {
        if let Some(s) = daemon.child.try_wait().unwrap() {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success());
    let out = silas(dir.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tail = silas(dir.path())
        .args(["audit", "tail", "-n", "500", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&tail.stdout);
    for event in ["approval.issued", "approval.verified"] {
        assert!(text.contains(event), "{event} not audited");
    }
    assert!(
        !text.contains("containing hello"),
        "message text reached the audit log"
    );
}
