//! Automatic permission escalation on the real binary, from the client's
//! side (spec §5.10.2, the PermissionEscalationCard of §0.5.3): a connection
//! skill `notes-conn` installed through its card over the WebSocket, its
//! connection set up with `silas connection add` (holding `notes.read`), and
//! owner-approved plans whose executor (a scripted fake model) calls
//! `scripts/append.py`, which declares `notes.write`. The daemon's
//! `connection_permission` gate sends a `permission_escalation` card to the
//! owner's socket; then:
//!
//! * a chatbot customer answers that card id → a typed error frame, its
//!   socket stays open; a connection with a wrong credential is closed 4001
//!   before its answer frame is read;
//! * the owner answers with a forged card id, or with the wrong frame type
//!   for the card → error frames; nothing changed meanwhile;
//! * the owner denies → the script never ran (its output never reached the
//!   model, no `skill_script_run`), the grant is unchanged; the deny frame
//!   replayed verbatim → refused;
//! * a second plan, "just this once" → that call runs through a single-use
//!   token, the grant is unchanged; the frame replayed → refused;
//! * a third plan, approved → the skill's setup re-authorises, the grant
//!   grows to `notes.write`, the script ran exactly once more; the approve
//!   frame replayed verbatim → refused, still once.
//!
//! The script's side effect is its output, not a file: the sandbox confines
//! a skill script's writes to its own work dir (landlock, deleted after the
//! run) and its network to its declared hosts through a guard that refuses
//! loopback, so what the script did is observable only as its stdout in the
//! tool result the model is sent (the fake model records every request) and
//! as `skill_script_run` in the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{Ws, audit_events, frame_of_type, next_frame, send, silas};
use tokio_tungstenite::tungstenite::Message;

const SKILL: &str = "notes-conn";
const CONN: &str = "conn-notes-conn";
const WITHIN: Duration = Duration::from_secs(60);

const FRONT: &str = "---\nname: notes-conn\ndescription: Use when the owner wants a line added to their hosted notes.\ntype: connection\nauth_strategy: secure_input\ninitial_permissions: [notes.read]\navailable_permissions: [notes.read, notes.write]\nscript_permissions:\n  scripts/append.py: [notes.write]\nscript_args:\n  scripts/append.py:\n    text: {type: string, max_length: 200}\nui:\n  display_name: \"Hosted notes\"\n---\n# Notes\n\nRun scripts/append.py with the text to add.\n";
const APPEND: &str = "import sys\nargs = sys.argv[1:]\nif args == ['--help'] or not args:\n    print('usage: append.py --text TEXT')\n    sys.exit(0)\nprint('appended:', args[args.index('--text') + 1])\n";
const HEALTH: &str = "import json\nprint(json.dumps({'healthy': True, 'latency_ms': 1}))\n";
// The setup and the re-authorisation: the provider grants what is asked.
const SETUP: &str = "import json, sys\nif sys.argv[1:] == ['--help']:\n    print('usage: setup.py')\n    sys.exit(0)\nprint(json.dumps({'type': 'token', 'secret_ref': 'access', 'value': 'tok-escalation'}), flush=True)\nprint(json.dumps({'type': 'done'}), flush=True)\n";

fn write_skill(root: &Path) -> std::path::PathBuf {
    let dir = root.join(SKILL);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("SKILL.md"), FRONT).unwrap();
    std::fs::write(dir.join("scripts/append.py"), APPEND).unwrap();
    std::fs::write(dir.join("scripts/health_check.py"), HEALTH).unwrap();
    std::fs::write(dir.join("scripts/setup.py"), SETUP).unwrap();
    dir
}

/// `silas connection list --json` over the running daemon: `CONN`'s record.
async fn connection(dir: &Path) -> Option<Value> {
    let d = dir.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        silas(&d)
            .args(["connection", "list", "--json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|c| c["connection_id"] == CONN)
}

async fn granted(dir: &Path) -> Value {
    connection(dir).await.expect("the connection")["permissions_granted"].clone()
}

/// How many tool results the model was sent that carry the script's output
/// `needle` (each run's result is sent once, in the request right after it).
fn script_outputs_seen(fake: &FakeLlm, needle: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| {
                    m["role"] == "tool" && m["content"].as_str().unwrap_or("").contains(needle)
                })
        })
        .count()
}

/// The last tool result the model was sent.
fn last_tool_result(fake: &FakeLlm) -> String {
    fake.requests()
        .iter()
        .filter_map(|r| {
            r.body["messages"]
                .as_array()
                .and_then(|m| m.iter().rfind(|m| m["role"] == "tool"))
                .and_then(|m| m["content"].as_str())
                .map(str::to_string)
        })
        .next_back()
        .unwrap_or_default()
}

/// The fake model's answers for one plan: the proxy routes to the planner,
/// whose task binds `notes-conn`; once approved the executor calls
/// `append.py` with `text`, then reports.
fn script_plan(fake: &FakeLlm, id: &str, text: &str) {
    support::plan_replies(fake, id, "task", &format!("skills: [{SKILL}]"));
    fake.push(Reply::tool_call(
        "run_skill_script",
        &json!({"skill": SKILL, "script": "scripts/append.py", "args": {"text": text}}),
    ));
    fake.push(Reply::json(
        &json!({"summary": "done", "artifact_refs": [], "next_steps": []}),
    ));
}

/// The owner asks, approves the plan, and gets the escalation card.
async fn escalation_card(
    ws: &mut Ws,
    fake: &FakeLlm,
    id: &str,
    text: &str,
    log: &mut Vec<Value>,
) -> Value {
    script_plan(fake, id, text);
    let plan = support::request_plan(ws, &format!("add {text} to my notes"), WITHIN, log).await;
    assert!(plan["plan"].to_string().contains(SKILL), "{plan}");
    send(
        ws,
        json!({"type": "approval_response", "request_id": plan["request_id"], "verdict": "approved"}),
    )
    .await;
    frame_of_type(ws, "permission_escalation", WITHIN, log).await
}

/// Waits for the `work_status` frame that ends item `id`.
async fn finished(ws: &mut Ws, id: &str, log: &mut Vec<Value>) -> Value {
    loop {
        let f = frame_of_type(ws, "work_status", WITHIN, log).await;
        let status = f["status"].as_str().unwrap_or_default();
        if f.to_string().contains(id) && ["done", "failed", "stuck", "blocked"].contains(&status) {
            return f;
        }
    }
}

/// Sends `frame` on `ws` and returns the error frame it gets.
async fn refused(ws: &mut Ws, frame: &Value, log: &mut Vec<Value>) -> Value {
    send(ws, frame.clone()).await;
    let err = frame_of_type(ws, "error", Duration::from_secs(10), log).await;
    assert_eq!(err["request_id"], frame["request_id"], "{frame} → {err}");
    assert!(
        err["code"].as_str().is_some_and(|c| c.starts_with("E_")),
        "{err}"
    );
    err
}

/// The close code the server ends `ws` with (`None` if it just drops).
async fn close_code(ws: &mut Ws) -> Option<u16> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owners_answer_decides_an_escalation_and_only_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    assert!(silas(d).arg("init").output().unwrap().status.success());
    let src = write_skill(&d.join("skill-src"));
    let install = silas(d)
        .args(["skill", "install"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(install.status.success(), "{install:?}");

    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "Hello."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let (daemon, addr, mut ws) = support::start_chatbot_on_fake(d, &fake).await;
    let mut log = Vec::new();

    // The skill's install card (stored while the daemon was down) → approved.
    let card = support::install_card(&mut ws, SKILL, WITHIN, &mut log).await;
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": card["request_id"], "verdict": "approved"}),
    )
    .await;
    support::wait_installed(d, SKILL).await;

    // The connection, set up over the control socket: active with notes.read.
    let dd = d.to_path_buf();
    let add = tokio::task::spawn_blocking(move || {
        silas(&dd)
            .args(["connection", "add", SKILL])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(add.status.success(), "{add:?}");
    let mut active = None;
    for _ in 0..240 {
        if let Some(c) = connection(d).await.filter(|c| c["status"] == "active") {
            active = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let active = active.expect("the connection never became active");
    assert_eq!(active["permissions_granted"], json!(["notes.read"]));

    let (mut customer, auth) = support::connect_anonymous(&addr, Duration::from_secs(10)).await;
    assert_ne!(auth["scope_id"], "owner", "{auth}");
    let mut customer_log = Vec::new();

    // 1. A plan whose executor needs notes.write: the card reaches the owner.
    let esc = escalation_card(&mut ws, &fake, "t-deny", "buy milk", &mut log).await;
    let id = esc["request_id"].as_str().unwrap().to_string();
    assert_eq!(esc["connection_name"], "Hosted notes");
    assert_eq!(esc["current_permissions"], json!(["notes.read"]));
    assert_eq!(esc["requested_permissions"], json!(["notes.write"]));
    assert_eq!(esc["risk_level"], "medium");

    // (a) The customer answers the owner's card: refused, its socket kept.
    let approve =
        json!({"type": "permission_escalation_response", "request_id": id, "verdict": "approve"});
    let err = refused(&mut customer, &approve, &mut customer_log).await;
    // Refused at the channel: a customer may only name ids it was shown.
    assert_eq!(err["code"], "E_CHANNEL_AUTH", "{err}");
    let once = json!({"type": "permission_escalation_response", "request_id": id, "verdict": "just_this_once"});
    refused(&mut customer, &once, &mut customer_log).await;
    assert!(
        !customer_log
            .iter()
            .any(|f| f["type"] == "permission_escalation"),
        "the owner's card reached a customer: {customer_log:?}"
    );
    // A wrong credential: closed 4001, its answer frame never read.
    let (mut intruder, _) = tokio_tungstenite::connect_async(support::ws_request(
        &addr,
        "not-the-owner-token-000000000000",
    ))
    .await
    .unwrap();
    let _ = futures_util::SinkExt::send(&mut intruder, Message::text(approve.to_string())).await;
    assert_eq!(close_code(&mut intruder).await, Some(4001));

    // (d) The owner with a forged card id, and with a plan answer to this card.
    let forged = json!({"type": "permission_escalation_response", "request_id": format!("{id}-forged"), "verdict": "approve"});
    refused(&mut ws, &forged, &mut log).await;
    let wrong_type = json!({"type": "approval_response", "request_id": id, "verdict": "approved"});
    refused(&mut ws, &wrong_type, &mut log).await;
    // Nothing changed: the grant, the script's output, the card still open.
    assert_eq!(granted(d).await, json!(["notes.read"]));
    assert_eq!(script_outputs_seen(&fake, "appended:"), 0);

    // (b) The owner denies: the script never ran.
    let deny =
        json!({"type": "permission_escalation_response", "request_id": id, "verdict": "deny"});
    send(&mut ws, deny.clone()).await;
    let done = finished(&mut ws, "t-deny", &mut log).await;
    // Its only call was denied: nothing ran, and the task is not `done`.
    assert_eq!(done["status"], "failed", "{done}");
    assert!(
        done["summary"]
            .as_str()
            .unwrap()
            .starts_with("E_GATE_BLOCKED: nothing ran."),
        "{done}"
    );
    let result = last_tool_result(&fake);
    assert!(result.starts_with("E_GATE_BLOCKED"), "{result}");
    assert_eq!(script_outputs_seen(&fake, "appended:"), 0, "the script ran");
    assert_eq!(granted(d).await, json!(["notes.read"]));
    // (c) The deny frame replayed verbatim: refused.
    let err = refused(&mut ws, &deny, &mut log).await;
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("already answered"),
        "{err}"
    );
    // The customer's answer after the fact: still refused, socket still open.
    refused(&mut customer, &approve, &mut customer_log).await;

    // Just this once: that one call runs, the grant is unchanged; the frame
    // replayed is refused and runs nothing more.
    let esc = escalation_card(&mut ws, &fake, "t-once", "buy eggs", &mut log).await;
    let once = json!({"type": "permission_escalation_response", "request_id": esc["request_id"], "verdict": "just_this_once"});
    send(&mut ws, once.clone()).await;
    let done = finished(&mut ws, "t-once", &mut log).await;
    assert_eq!(done["status"], "done", "{done}");
    assert!(last_tool_result(&fake).contains("appended: buy eggs"));
    assert_eq!(granted(d).await, json!(["notes.read"]));
    refused(&mut ws, &once, &mut log).await;
    assert_eq!(script_outputs_seen(&fake, "appended:"), 1);

    // (b) A further plan, approved: re-authorised, it runs, the grant grows.
    let esc = escalation_card(&mut ws, &fake, "t-approve", "call mum", &mut log).await;
    assert_ne!(esc["request_id"], id.as_str(), "a new card");
    let approve = json!({"type": "permission_escalation_response", "request_id": esc["request_id"], "verdict": "approve"});
    send(&mut ws, approve.clone()).await;
    let done = finished(&mut ws, "t-approve", &mut log).await;
    assert_eq!(done["status"], "done", "{done}");
    assert!(last_tool_result(&fake).contains("appended: call mum"));
    assert_eq!(granted(d).await, json!(["notes.read", "notes.write"]));
    // (c) The approve frame replayed verbatim: refused; the script ran once.
    let err = refused(&mut ws, &approve, &mut log).await;
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("already answered"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(script_outputs_seen(&fake, "appended: call mum"), 1);
    assert_eq!(script_outputs_seen(&fake, "appended:"), 2);
    assert_eq!(granted(d).await, json!(["notes.read", "notes.write"]));
    while let Some(f) = next_frame(&mut customer, Duration::from_millis(300)).await {
        customer_log.push(f);
    }
    assert!(
        !customer_log
            .iter()
            .any(|f| f["type"] == "permission_escalation"),
        "{customer_log:?}"
    );

    drop((ws, customer));
    daemon.stop().await;

    // The audit log: two runs, the decisions, the single-use token consumed
    // by the once-run, the refusals by reason.
    let events = audit_events(d);
    let named = |n: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == n).collect() };
    let runs = named("skill_script_run");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r["data"]["skill"] == SKILL));
    let decisions: Vec<&Value> = named("connection.permission_escalation")
        .iter()
        .map(|e| &e["data"]["decision"])
        .collect();
    assert_eq!(
        decisions,
        [&json!("deny"), &json!("just_this_once"), &json!("approve")]
    );
    let once_run = named("tool_executed")
        .into_iter()
        .find(|e| {
            e["data"]["work_item_id"] == "t-once" && e["data"]["tool_name"] == "run_skill_script"
        })
        .expect("the once-run");
    assert_eq!(once_run["data"]["permissions_once"], json!(["notes.write"]));
    assert!(
        once_run["data"]["permissions_once_token"].is_string(),
        "{once_run}"
    );
    let reasons: Vec<&Value> = named("card_answer_refused")
        .iter()
        .map(|e| &e["data"]["reason"])
        .collect();
    // The customer's tries were refused at the channel (it may only name
    // ids it was shown): none reached the runtime.
    assert!(!reasons.contains(&&json!("other_scope")), "{reasons:?}");
    support::assert_audit_verifies(d);
}
