//! The whole loop through the real daemon and a real WebSocket client, with
//! no API key (the labelled offline responder): greeting → reply; a file
//! request → plan approval card → owner approves → sandboxed execution →
//! external verification → `work_status` done; then a clean shutdown whose
//! audit chain verifies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use support::{
    assert_audit_verifies, audit_json, connect, frame_of_type, request_plan, send, silas,
    start_daemon,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_plan_approve_run_verify_over_websocket() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start_daemon(silas(dir.path()), Stdio::null());
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
    let (mut ws, auth) = connect(&addr, Duration::from_secs(5)).await;
    let mut log = Vec::new();
    assert_eq!(auth["scope_id"], "owner");
    // The UI label: the runtime announces the offline responder as such.
    assert_eq!(auth["model"]["offline"], true);
    let description = auth["model"]["description"].as_str().unwrap();
    assert!(description.contains("not an LLM"), "{auth}");

    send(&mut ws, json!({"type": "message", "text": "hello"})).await;
    let reply = frame_of_type(&mut ws, "message", Duration::from_secs(20), &mut log).await;
    assert!(
        reply["text"].as_str().unwrap().contains("offline"),
        "{reply}"
    );

    let card = request_plan(
        &mut ws,
        "create a file notes.txt containing hello",
        Duration::from_secs(20),
        &mut log,
    )
    .await;
    let request_id = card["request_id"].as_str().unwrap().to_string();
    assert!(
        card["body"].as_str().unwrap().contains("notes.txt"),
        "{card}"
    );
    assert!(
        !card["verify"].as_array().unwrap().is_empty(),
        "plan carries no verification: {card}"
    );

    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": request_id, "verdict": "approved"}),
    )
    .await;
    let mut statuses = Vec::new();
    let done = loop {
        let f = frame_of_type(&mut ws, "work_status", Duration::from_secs(60), &mut log).await;
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
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": request_id, "verdict": "approved"}),
    )
    .await;
    let again = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(again["request_id"], request_id.as_str());

    // The paired devices (the live daemon answers `devices list`).
    let listed = silas(dir.path())
        .args(["devices", "list", "--json"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    let device: serde_json::Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();

    // Clean shutdown; the audit chain written by the whole run verifies.
    daemon.stop().await;
    assert_audit_verifies(dir.path());
    let text = audit_json(dir.path());
    for event in ["approval.issued", "approval.verified"] {
        assert!(text.contains(event), "{event} not audited");
    }
    // The approval names the paired device that gave it (here the CLI's
    // credential, which this socket presented): a device found leaked later
    // shows what it approved.
    let issued: Vec<serde_json::Value> = support::audit_events(dir.path())
        .into_iter()
        .filter(|e| e["event"] == "approval.issued")
        .collect();
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert_eq!(
        issued[0]["data"]["device_id"], device["device_id"],
        "{issued:?}"
    );
    assert_eq!(issued[0]["data"]["channel"], "web");
    assert!(
        !text.contains("containing hello"),
        "message text reached the audit log"
    );
}
