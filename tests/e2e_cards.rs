//! Card lifecycle, secure input and scope isolation through the real daemon
//! binary and real WebSocket clients (offline model, no network):
//! a plan card past its (shortened) timeout is declined and audited without
//! an answer; an answer to it afterwards is an error frame; a disconnect
//! while a card is pending declines it; every card response type with an
//! unknown id or a malformed body gets an error frame on an open socket;
//! `/health` reports queue pressure; the Activity timeline arrives after
//! `auth_ok`; a secret posted to `/secrets/{ref_id}` appears in no frame, no
//! log line, no audit entry and no byte of the redb file; 100 customer
//! connections each see only their own frames.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{
    Daemon, Ws, assert_audit_verifies, audit_json, frame_of_type, next_frame, request_plan, send,
    silas, start_daemon,
};

/// `silas start` over `dir` with extra environment and the given stderr.
fn start(dir: &std::path::Path, env: &[(&str, &str)], stderr: Stdio) -> (Daemon, String) {
    let mut cmd = silas(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (daemon, addr, _) = start_daemon(cmd, stderr);
    (daemon, addr)
}

async fn connect(addr: &str) -> (Ws, Value) {
    support::connect(addr, Duration::from_secs(10)).await
}

/// A plain HTTP/1.1 request over loopback, as the owner: (status, body).
fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let token = support::owner_token_for(addr);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Chunked bodies: keep only the JSON between the chunk sizes.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => body[a..=b].to_string(),
        _ => body.to_string(),
    };
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_time_out_decline_on_disconnect_and_refuse_bad_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(
        dir.path(),
        &[("SILAS__APPROVAL__PLAN_CARD_TIMEOUT_SECONDS", "3")],
        Stdio::null(),
    );
    let (mut ws, auth) = connect(&addr).await;
    assert_eq!(auth["scope_id"], "owner");
    let mut log = Vec::new();
    // The owner's Activity timeline follows auth_ok.
    let activity = frame_of_type(&mut ws, "activity", Duration::from_secs(5), &mut log).await;
    assert_eq!(activity["initial"], true);
    assert!(
        activity["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["text"] == "Silas started"),
        "{activity}"
    );

    // /health reports connections and queue pressure.
    let (status, body) = http(&addr, "GET", "/health", None);
    assert_eq!(status, 200);
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["connections"], 1);
    assert_eq!(health["queue"]["capacity_total"], 500);
    assert_eq!(health["queue"]["capacity_per_scope"], 20);
    assert_eq!(health["queue"]["pressure"], "ok");
    assert_eq!(health["queue"]["accepting"], true);
    // Under another site's name (a DNS-rebinding page): liveness only.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: rebound.example:80\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.ends_with(r#"{"service":"silas","status":"ok"}"#),
        "{out}"
    );

    // 1. Timeout: nobody answers; the card is declined within its 3 s.
    let card = request_plan(
        &mut ws,
        "create a file notes.txt containing hello",
        Duration::from_secs(30),
        &mut log,
    )
    .await;
    let timed_out = card["request_id"].as_str().unwrap().to_string();
    let notice = loop {
        let m = frame_of_type(&mut ws, "message", Duration::from_secs(15), &mut log).await;
        if m["text"].as_str().unwrap().contains("not approved") {
            break m;
        }
    };
    assert!(
        notice["text"].as_str().unwrap().contains("nothing runs"),
        "{notice}"
    );
    // An answer after the timeout changes nothing: error frame.
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": timed_out, "verdict": "approved"}),
    )
    .await;
    let err = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(err["request_id"], timed_out.as_str());
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("already answered"),
        "{err}"
    );

    // 2. Every card response type: unknown id → error frame; malformed → error frame.
    let answers = [
        json!({"type": "gate_response", "request_id": "nope-1", "verdict": "approve"}),
        json!({"type": "checkpoint", "request_id": "nope-2", "verdict": "go"}),
        json!({"type": "batch_review_response", "request_id": "nope-3", "verdict": "approve"}),
        json!({"type": "draft_review_response", "request_id": "nope-4", "verdict": "approve"}),
        json!({"type": "decision_response", "request_id": "nope-5", "selected_value": "a"}),
        json!({"type": "suggestion_response", "request_id": "nope-6", "selected_value": "do_it"}),
        json!({"type": "autonomy_threshold_response", "request_id": "nope-7", "verdict": "decline"}),
        json!({"type": "secure_input_completed", "ref_id": "nope-8", "success": true}),
        json!({"type": "connection_setup_response", "request_id": "nope-9", "step_type": "device_code", "action": "done"}),
        json!({"type": "permission_escalation_response", "request_id": "nope-10", "verdict": "deny"}),
        json!({"type": "connection_failure_response", "request_id": "nope-11", "selected_action": "skip"}),
        json!({"type": "approval_response", "request_id": "nope-12", "verdict": "approved"}),
    ];
    for a in &answers {
        send(&mut ws, a.clone()).await;
        let err = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
        let rid = a.get("request_id").or_else(|| a.get("ref_id")).unwrap();
        assert_eq!(&err["request_id"], rid, "{a} → {err}");
    }
    let malformed = [
        json!({"type": "gate_response", "request_id": "m1"}),
        json!({"type": "checkpoint", "verdict": "x"}),
        json!({"type": "batch_review_response", "request_id": "m3", "verdict": "edit_selection"}),
        json!({"type": "draft_review_response", "request_id": "m4", "verdict": 3}),
        json!({"type": "decision_response", "request_id": "m5", "bogus": true}),
        json!({"type": "suggestion_response"}),
        json!({"type": "autonomy_threshold_response", "request_id": "m7", "verdict": "widen_everything"}),
        json!({"type": "secure_input_completed", "ref_id": "m8", "success": "yes", "value": "x"}),
        json!({"type": "connection_setup_response", "request_id": "m9", "step_type": "x", "action": "explode"}),
        json!({"type": "permission_escalation_response", "request_id": "m10", "verdict": "sudo"}),
        json!({"type": "connection_failure_response", "request_id": "m11"}),
        json!({"type": "approval_response", "request_id": "m12", "verdict": "maybe"}),
    ];
    for m in &malformed {
        send(&mut ws, m.clone()).await;
        let err = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
        assert_eq!(err["code"], "E_CHANNEL_PROTOCOL", "{m} → {err}");
    }
    // The socket is still open and serving.
    send(&mut ws, json!({"type": "message", "text": "hello"})).await;
    frame_of_type(&mut ws, "message", Duration::from_secs(20), &mut log).await;

    // 3. Disconnect while a card is pending: declined at once, nothing runs.
    let card = request_plan(
        &mut ws,
        "create a file other.txt containing hi",
        Duration::from_secs(30),
        &mut log,
    )
    .await;
    let disconnected = card["request_id"].as_str().unwrap().to_string();
    ws.close(None).await.unwrap();
    drop(ws);
    // Reconnect: the card is gone (not re-served) and cannot be approved.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut ws, _) = connect(&addr).await;
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": disconnected, "verdict": "approved"}),
    )
    .await;
    let mut log2 = Vec::new();
    let err = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log2).await;
    assert_eq!(err["request_id"], disconnected.as_str());
    assert!(
        !log2.iter().any(|f| f["type"] == "approval_request"),
        "{log2:?}"
    );
    drop(ws);
    daemon.stop().await;

    let audit = audit_json(dir.path());
    let entries: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let has = |event: &str, rid: &str| {
        entries
            .iter()
            .any(|e| e["event"] == event && e["data"]["request_id"] == rid)
    };
    assert!(has("card_timed_out", &timed_out), "timeout not audited");
    assert!(has("plan_declined", &timed_out));
    assert!(
        has("card_declined_disconnected", &disconnected),
        "disconnect not audited"
    );
    assert!(has("plan_declined", &disconnected));
    // Neither plan is left waiting for good: both items are ended blocked
    // (they stayed `pending` in `silas work list` forever).
    let listed = silas(dir.path())
        .args(["work", "list", "--json"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let items: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(items.len() >= 2, "{items:?}");
    for item in &items {
        assert_eq!(item["status"], "blocked", "{item}");
    }
    for never in ["approval.issued", "work_dispatched", "approval.verified"] {
        assert!(
            !entries.iter().any(|e| e["event"] == never),
            "{never} happened without an approval"
        );
    }
    assert_audit_verifies(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_canary_reaches_no_frame_log_audit_or_database() {
    const CANARY: &str = "CANARY-7f3a9c1e-do-not-leak-5b2d";
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("daemon.stderr");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let (daemon, addr) = start(
        dir.path(),
        &[("SILAS_LOG", "debug,warp::server=off")],
        Stdio::from(stderr),
    );
    let (mut ws, _) = connect(&addr).await;
    let mut frames = Vec::new();
    send(
        &mut ws,
        json!({"type": "message", "text": "/secret GitHub token"}),
    )
    .await;
    let req = frame_of_type(
        &mut ws,
        "secure_input_request",
        Duration::from_secs(10),
        &mut frames,
    )
    .await;
    let ref_id = req["ref_id"].as_str().unwrap().to_string();
    assert_eq!(req["label"], "GitHub token");
    assert!(req["guidance"]["instructions"].as_str().is_some(), "{req}");

    // Unknown refs are refused; the pending one is stored once.
    let body = json!({"value": CANARY}).to_string();
    let (status, _) = http(&addr, "POST", "/secrets/sec-unknown", Some(&body));
    assert_eq!(status, 404);
    let (status, resp) = http(&addr, "POST", &format!("/secrets/{ref_id}"), Some(&body));
    assert_eq!((status, resp.as_str()), (200, r#"{"stored":true}"#));
    let (status, _) = http(&addr, "POST", &format!("/secrets/{ref_id}"), Some(&body));
    assert_eq!(status, 409);

    send(
        &mut ws,
        json!({"type": "secure_input_completed", "ref_id": ref_id, "success": true}),
    )
    .await;
    let done = loop {
        let m = frame_of_type(&mut ws, "message", Duration::from_secs(10), &mut frames).await;
        if m["text"].as_str().unwrap().contains("GitHub token") {
            break m;
        }
    };
    assert!(
        done["text"].as_str().unwrap().starts_with("Stored"),
        "{done}"
    );
    // The Activity feed narrates it (without the value).
    let activity = loop {
        let a = frame_of_type(&mut ws, "activity", Duration::from_secs(10), &mut frames).await;
        if a["initial"] == false {
            break a;
        }
    };
    assert!(
        activity
            .to_string()
            .contains("Stored a credential securely (GitHub token)"),
        "{activity}"
    );
    // Drain whatever else is in flight, then stop.
    while let Some(f) = next_frame(&mut ws, Duration::from_millis(1500)).await {
        frames.push(f);
    }
    drop(ws);
    daemon.stop().await;

    let all_frames = serde_json::to_string(&frames).unwrap();
    assert!(!all_frames.contains(CANARY), "secret in a WebSocket frame");
    let mut log = String::new();
    std::fs::File::open(&stderr_path)
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!log.is_empty(), "no daemon log captured");
    assert!(!log.contains(CANARY), "secret in the daemon log");
    let audit = audit_json(dir.path());
    assert!(audit.contains("secret_stored") && audit.contains(&ref_id));
    assert!(!audit.contains(CANARY), "secret in the audit log");
    // No byte of the database file, in any file but the encrypted secret.
    let canary = CANARY.as_bytes();
    let mut scanned = 0;
    for entry in walk(&dir.path().join("data")) {
        let bytes = std::fs::read(&entry).unwrap();
        scanned += usize::from(entry.extension().is_some_and(|e| e == "redb"));
        assert!(
            !bytes.windows(canary.len()).any(|w| w == canary),
            "secret in plaintext in {}",
            entry.display()
        );
    }
    assert!(scanned >= 1, "no redb file scanned");
    let sealed = dir.path().join(format!("data/secrets/{ref_id}.sec"));
    assert!(sealed.exists(), "the secret was not stored");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_customer_scopes_see_only_their_own_frames() {
    let dir = tempfile::tempdir().unwrap();
    let goal = dir.path().join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    // All from 127.0.0.1: above the default per-address cap (32).
    let (daemon, addr) = start(
        dir.path(),
        &[
            ("SILAS__ACTIVE_GOAL", goal.to_str().unwrap()),
            ("SILAS__LIMITS__CUSTOMER_CONNECTIONS_PER_IP", "100"),
        ],
        Stdio::null(),
    );
    let mut clients = Vec::new();
    // No owner credential: each is a customer in its own scope.
    for _ in 0..100 {
        clients.push(support::connect_anonymous(&addr, Duration::from_secs(10)).await);
    }
    let mut scopes: Vec<String> = clients
        .iter()
        .map(|(_, a)| a["scope_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !scopes.iter().any(|s| s == "owner"),
        "a customer got the owner scope"
    );
    scopes.sort();
    scopes.dedup();
    assert_eq!(scopes.len(), 100, "scopes are not distinct");

    // Everyone speaks at once; each hears exactly one reply, on its own socket.
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, (mut ws, auth))| {
            tokio::spawn(async move {
                send(
                    &mut ws,
                    json!({"type": "message", "text": format!("hello number {i}")}),
                )
                .await;
                let mut seen = Vec::new();
                let reply =
                    frame_of_type(&mut ws, "message", Duration::from_secs(120), &mut seen).await;
                // Then quiet: no one else's reply arrives here.
                while let Some(f) = next_frame(&mut ws, Duration::from_secs(2)).await {
                    seen.push(f);
                }
                (auth["scope_id"].clone(), reply, seen)
            })
        })
        .collect();
    for t in tasks {
        let (scope, _reply, seen) = t.await.unwrap();
        let messages = seen.iter().filter(|f| f["type"] == "message").count();
        assert_eq!(messages, 1, "{scope}: {seen:?}");
        assert!(
            !seen.iter().any(|f| f["type"] == "activity"),
            "{scope}: a customer received the owner's Activity timeline"
        );
    }
    daemon.stop().await;
}
