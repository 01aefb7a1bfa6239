//! Card gallery: every Review card type of spec §8.1/§8.2 answered through
//! the real PWA in headless Chromium, against the real `silas-web` server
//! (token configured, offline model announced) with a scripted backend.
//!
//! The backend pushes one frame of each card type after the first
//! authenticated connection (plus audit-narrative `activity` frames, a
//! finished work item and its undo offer),
//! and records every client frame. `tests/browser/cards.mjs` enters the
//! token on the token screen, walks the onboarding, then answers each card
//! through the UI — chips, free text, checkboxes, the confirm chip, the
//! slide-to-confirm control by keyboard and by pointer, the secure-input
//! form — and screenshots each at 375 px into `target/tmp/browser/cards/`.
//! This side then asserts the exact client frames, in order, and that the
//! secret reached the secret sink only through `POST /secrets/{ref_id}`,
//! never over the socket.
//!
//! Needs `/usr/bin/chromium` (or `SILAS_CHROMIUM`), `node`, and
//! `npm ci --prefix tests/browser`; when one is missing the test FAILS with
//! the fix — it never passes silently.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use silas_core::Timestamp;
use silas_web::protocol::{ClientFrame, ModelInfo, ProtocolError, ServerFrame, parse_client_frame};
use silas_web::ws::{BoxFuture, ConnectionInfo, SecretSink, SecretStoreError, WebBackend};
use silas_web::{HealthState, WebSettings, bind};
use tokio::sync::{mpsc, oneshot};

const TOKEN: &str = "gallery-token-4f1c9a";
const SECRET: &str = "ntn_gallery-secret-value-93ab";
const REF_ID: &str = "ref-notion";

/// Pushes the gallery once, records every client frame.
struct Scripted {
    pushed: AtomicBool,
    frames: Mutex<Vec<ClientFrame>>,
}

impl WebBackend for Scripted {
    fn connected(
        &self,
        _c: ConnectionInfo,
        tx: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        let first = !self.pushed.swap(true, Ordering::SeqCst);
        Box::pin(async move {
            if first {
                tokio::spawn(async move {
                    // After auth_ok, which the session sends once this returns.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    for f in gallery() {
                        if tx.send(f).await.is_err() {
                            return;
                        }
                    }
                });
            }
            Ok("owner".to_string())
        })
    }
    fn frame(&self, _id: &str, frame: ClientFrame) -> BoxFuture<'_, Result<(), ProtocolError>> {
        self.frames.lock().unwrap().push(frame);
        Box::pin(async { Ok(()) })
    }
    fn disconnected(&self, _id: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[derive(Default)]
struct Vault {
    stored: Mutex<Vec<(String, String)>>,
}

impl SecretSink for Vault {
    fn store(
        &self,
        ref_id: &str,
        value: zeroize::Zeroizing<String>,
    ) -> Result<(), SecretStoreError> {
        let mut s = self.stored.lock().unwrap();
        if ref_id != REF_ID {
            return Err(SecretStoreError::UnknownRef);
        }
        if s.iter().any(|(r, _)| r == ref_id) {
            return Err(SecretStoreError::AlreadyFulfilled);
        }
        s.push((ref_id.to_string(), value.to_string()));
        Ok(())
    }
}

/// A gallery frame as the server sends it: the card's risk level from the
/// server's one function (`silas_core::risk::card_risk`), as the bridge sets
/// it, so the PWA is shown rendering the server's decision.
fn frame(mut v: Value) -> ServerFrame {
    if let Some(o) = v.as_object_mut()
        && !o.contains_key("risk_level")
        && let Some(kind) = o.get("type").and_then(Value::as_str).map(str::to_string)
        && kind != "activity"
        && kind != "approval_request"
        && let Ok(card) =
            silas_core::cards::CardPayload::from_parts(&kind, Value::Object(o.clone()))
        && let Some(r) = silas_core::risk::card_risk(&card)
    {
        o.insert("risk_level".into(), Value::from(r.as_str()));
    }
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("bad gallery frame {v}: {e}"))
}

/// What the card's facts show of the plan: a goal, with the terms the
/// daemon adds (how long, how many fix tasks, the zone of its schedule).
fn goal_view() -> Value {
    let mut goal = silas_core::model::work::WorkItem::new(
        "g-1",
        silas_core::model::work::WorkItemType::Goal,
        "Create notes.txt containing hello",
    );
    goal.schedule = Some("0 9 * * *".into());
    let card = silas_core::cards::with_goal_terms(
        silas_core::cards::CardPayload::Plan(silas_core::cards::plan_card(&goal, "h")),
        "Europe/Vienna",
        silas_core::goal_terms::StandingLimits {
            ttl_minutes: 30 * 24 * 60,
            max_executions: 100,
        },
    );
    match card {
        silas_core::cards::CardPayload::Plan(p) => serde_json::to_value(&p.plan).unwrap(),
        _ => unreachable!(),
    }
}

/// One server frame per card type, in the order the UI will show them.
fn gallery() -> Vec<ServerFrame> {
    let expires = Timestamp::from_micros(Timestamp::now().as_micros() + 300_000_000)
        .unwrap()
        .to_string();
    vec![
        // The audit narrative: a backlog, then a resend plus one new item
        // (a reconnect resends; the UI de-duplicates by seq).
        frame(json!({"type": "activity", "initial": true, "items": [
            {"seq": 7, "at": "2026-01-15T09:00:00Z", "kind": "security", "text": "Refused a connection from another website"},
            {"seq": 8, "at": "2026-01-15T09:05:00Z", "kind": "work", "text": "Ran 'Tidy the downloads folder' — 1 check passed"}]})),
        frame(json!({"type": "activity", "initial": false, "items": [
            {"seq": 8, "at": "2026-01-15T09:05:00Z", "kind": "work", "text": "Ran 'Tidy the downloads folder' — 1 check passed"},
            {"seq": 9, "at": "2026-01-15T09:06:00Z", "kind": "system", "text": "Daemon started"}]})),
        frame(json!({"type": "approval_request", "request_id": "plan-1",
            "title": "Create notes.txt containing hello",
            // A bidi override (a command that would read backwards) is shown
            // as an escape, not obeyed.
            "body": "Write the file notes.txt in the workspace with the text hello, then check it. \u{202e}txt.seton",
            "budget": {"max_cost_usd": 0.5, "max_wall_time_seconds": 300, "max_attempts": 2},
            "verify": [{"name": "file exists", "run": "test -f notes.txt", "expect": {"exit_code": 0}},
                       {"name": "content", "run": "cat notes.txt", "expect": {"contains": "hello"}}],
            "risk_level": "medium",
            "risk_reasons": ["runs commands in the sandbox; checked by verification"],
            "plan": goal_view()})),
        frame(
            json!({"type": "gate_approval", "request_id": "gate-1", "gate_name": "spend_limit",
            "value": 42.5, "context": "This turn would spend $42.50, over your $20 per-turn limit."}),
        ),
        frame(
            json!({"type": "decision", "request_id": "dec-1", "question": "How often should I send the digest?",
            "options": [{"label": "Weekly", "value": "weekly", "approval_tier": "tap"},
                        {"label": "Daily", "value": "daily", "approval_tier": "tap"},
                        {"label": "Never", "value": "never", "approval_tier": "tap"}],
            "allow_freetext": true}),
        ),
        frame(json!({"type": "draft_review", "request_id": "draft-1",
            "context": "Ana asked whether Thursday works for the review.",
            "draft": "Hi Ana, Thursday works for me. Best, Sam",
            "metadata": {"recipient": "ana@example.org", "channel": "email"}})),
        frame(
            json!({"type": "batch_review", "request_id": "batch-1", "batch": {
            "batch_id": "b-1", "goal_id": "g-1", "action": "archive",
            "reason_summary": "Newsletters you have not opened in 30 days.",
            "confidence_min": 0.41, "created_at": "2026-01-15T10:00:00Z",
            "items": [
                {"item_id": "m1", "title": "Weekly deals", "actor": "shop@example.org", "reason": "unopened 6 weeks", "confidence": 0.97},
                {"item_id": "m2", "title": "Product news", "actor": "news@example.org", "reason": "unopened 5 weeks", "confidence": 0.93},
                {"item_id": "m3", "title": "Community digest", "actor": "forum@example.org", "reason": "unopened 8 weeks", "confidence": 0.95},
                {"item_id": "m4", "title": "Your invoice #2291", "actor": "billing@example.org", "reason": "unlike the rest: an invoice", "confidence": 0.41}
            ]}}),
        ),
        frame(
            json!({"type": "suggestion", "request_id": "sug-1", "suggestion": {
            "suggestion_id": "s-1", "scope_id": "owner", "source": "post_execution",
            "intent": "Archive the 12 older newsletters too",
            "rationale": "They match the batch you just approved.", "risk_level": "low",
            "proposed_work_item_id": null, "cooldown_key": "newsletters", "created_at": "2026-01-15T10:00:00Z"}}),
        ),
        frame(
            json!({"type": "autonomy_threshold_review", "request_id": "auto-1", "proposal": {
            "proposal_id": "p-1", "scope_id": "owner", "goal_id": null,
            "changes": [{"key": "batch_review.default_size", "current_value": "10", "proposed_value": "20", "direction": "widen"}],
            "sample_size": 50, "correction_rate": 0.02, "evidence_window": "last 50 batches / 14 days",
            "rationale": "You corrected 1 of the last 50 batches.", "risk_level": "high",
            "created_at": "2026-01-15T10:00:00Z"}}),
        ),
        frame(json!({"type": "checkpoint", "request_id": "cp-1",
            "message": "Half of the files are converted. Go on?", "options": ["continue", "stop"]})),
        frame(
            json!({"type": "secure_input_request", "ref_id": REF_ID, "label": "Notion integration token",
            "input_hint": "ntn_...", "guidance": {"instructions": "Create an internal integration in Notion and copy its secret.",
            "help_url": "https://www.notion.so/my-integrations"}}),
        ),
        frame(
            json!({"type": "connection_setup_step", "request_id": "setup-1", "step_type": "device_code",
            "verification_url": "https://microsoft.com/devicelogin", "user_code": "F7K-2QP",
            "expires_in": 900, "poll_interval": 5}),
        ),
        frame(
            json!({"type": "permission_escalation", "request_id": "perm-1", "connection_name": "Google Calendar",
            "current_permissions": ["calendar.read"], "requested_permissions": ["calendar.read", "calendar.write"],
            "reason": "To add the review meeting you asked for.", "risk_level": "high"}),
        ),
        frame(
            json!({"type": "connection_failure", "request_id": "fail-1", "failure_type": "enterprise_policy_block",
            "service": "Microsoft 365", "message": "Your organisation blocks new apps without admin approval.",
            "recovery_options": [
                {"action": "request_admin_approval", "label": "Ask your IT admin", "description": "Sends a request to your admin", "risk_level": "low"},
                {"action": "use_personal_account", "label": "Use a personal account", "description": "Connect a personal account instead", "risk_level": "medium"}]}),
        ),
        frame(
            json!({"type": "batch_review", "request_id": "batch-2", "batch": {
            "batch_id": "b-2", "goal_id": "g-1", "action": "delete",
            "reason_summary": "Duplicates of files already in your archive.",
            "confidence_min": 0.99, "created_at": "2026-01-15T10:00:00Z",
            "items": [
                {"item_id": "f1", "title": "report (1).pdf", "actor": "Downloads", "reason": "duplicate", "confidence": 0.99},
                {"item_id": "f2", "title": "report (2).pdf", "actor": "Downloads", "reason": "duplicate", "confidence": 0.99}
            ]}}),
        ),
        // Issue #15: a verified change set for one of the owner's workspaces.
        frame(
            json!({"type": "apply_changes", "request_id": "apply-1", "title": "Fix the timezone bug",
            "phase": "apply", "workspace": "clock", "path": "/home/sam/clock",
            "files": [{"path": "clock.py", "kind": "modified", "added": 1, "removed": 1, "binary": false, "protected": false}],
            "total_added": 1, "total_removed": 1, "protected_edits": ["tests/test_clock.py"],
            "protected_note": "Edits files that define the checks (tests/test_clock.py); the checks ran without these edits (originals put back, new files left out).",
            "refused": [],
            "diff": "diff --git a/clock.py b/clock.py\n--- a/clock.py\n+++ b/clock.py\n@@ -1,2 +1,2 @@\n def to_utc(hour, offset):\n-    return hour + offset\n+    return hour - offset\n",
            "diff_truncated": false, "commit_message": null, "undo_until": null,
            "risk_level": "medium", "risk_reasons": ["writes 1 file(s) in /home/sam/clock (+1 −1)"]}),
        ),
        frame(
            json!({"type": "work_status", "work_item_id": "w-archive", "status": "done",
            "summary": "Archived 2 newsletters.",
            "verification": [{"name": "archived", "passed": true, "reason": "2 of 2 in Archive"}]}),
        ),
        frame(
            json!({"type": "undo_offer", "request_id": "undo-1", "work_item_id": "w-archive",
            "summary": "Archived 2 newsletters.", "expires_at": expires}),
        ),
    ]
}

/// The client frames the UI must send, in order, for the answers cards.mjs gives.
fn expected() -> Vec<ClientFrame> {
    [
        json!({"type": "approval_response", "request_id": "plan-1", "verdict": "approved"}),
        json!({"type": "gate_response", "request_id": "gate-1", "verdict": "block"}),
        json!({"type": "decision_response", "request_id": "dec-1", "selected_value": "weekly", "freetext": "Monday mornings, please"}),
        json!({"type": "draft_review_response", "request_id": "draft-1", "verdict": "edit", "edited_text": "Hi Ana, Thursday at 10 works. Best, Sam"}),
        json!({"type": "batch_review_response", "request_id": "batch-1", "verdict": "edit_selection", "selected_item_ids": ["m1", "m3"]}),
        json!({"type": "suggestion_response", "request_id": "sug-1", "selected_value": "not_now"}),
        json!({"type": "autonomy_threshold_response", "request_id": "auto-1", "verdict": "approve"}),
        json!({"type": "checkpoint", "request_id": "cp-1", "verdict": "continue"}),
        json!({"type": "secure_input_completed", "ref_id": REF_ID, "success": true}),
        json!({"type": "connection_setup_response", "request_id": "setup-1", "step_type": "device_code", "action": "done"}),
        json!({"type": "permission_escalation_response", "request_id": "perm-1", "verdict": "approve"}),
        json!({"type": "connection_failure_response", "request_id": "fail-1", "selected_action": "request_admin_approval"}),
        json!({"type": "batch_review_response", "request_id": "batch-2", "verdict": "approve"}),
        json!({"type": "approval_response", "request_id": "apply-1", "verdict": "approved"}),
        json!({"type": "decision_response", "request_id": "undo-1", "selected_value": "undo"}),
    ]
    .into_iter()
    .map(|v| parse_client_frame(&v.to_string()).unwrap())
    .collect()
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser")
}

/// Fail loudly, with the fix, when the machine lacks the browser or driver.
fn require_tools() {
    let chromium = std::env::var("SILAS_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} not found: the card gallery test needs Debian's Chromium. Install it with \
         `sudo apt-get update && sudo apt-get install -y chromium` (.ci/run does this), \
         or point SILAS_CHROMIUM at a Chromium binary."
    );
    assert!(
        Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "`node` not found: the card gallery test drives Chromium with playwright-core on Node.js"
    );
    assert!(
        browser_dir().join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser` (.ci/run does this)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_card_type_is_answered_through_the_pwa() {
    require_tools();
    let backend = Arc::new(Scripted {
        pushed: AtomicBool::new(false),
        frames: Mutex::new(Vec::new()),
    });
    let vault = Arc::new(Vault::default());
    let settings = WebSettings {
        host: "127.0.0.1".into(),
        port: 0,
        auth_token: Some(TOKEN.into()),
    };
    let bound = bind(&settings, Arc::new(HealthState::default()))
        .await
        .unwrap()
        .attach(backend.clone(), vault.clone())
        .with_model(ModelInfo {
            offline: true,
            description: "No LLM API key is configured.".into(),
        });
    let addr = bound.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = bound.serve(async {
        let _ = stopped.await;
    });

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser/cards");
    // Fresh: a screenshot left by an earlier run must not pass for this one.
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let script = browser_dir().join("cards.mjs");
    let base = format!("http://{addr}");
    let shots2 = shots.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("node")
            .arg(script)
            .arg(&base)
            .arg(&shots2)
            .env("SILAS_GALLERY_TOKEN", TOKEN)
            .env("SILAS_GALLERY_SECRET", SECRET)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(240);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("card gallery ok"),
        "card gallery failed (screenshots in {}):\n{stdout}\n{stderr}",
        shots.display()
    );

    // The socket may still be delivering the last frame.
    let want = expected();
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.frames.lock().unwrap().len() < want.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = backend.frames.lock().unwrap().clone();
    assert_eq!(got, want, "client frames differ:\n{stdout}");

    // The secret went to the sink over HTTP, exactly once, and never over the socket.
    assert_eq!(
        *vault.stored.lock().unwrap(),
        vec![(REF_ID.to_string(), SECRET.to_string())]
    );
    for f in &got {
        let text = serde_json::to_string(f).unwrap();
        assert!(!text.contains(SECRET), "secret crossed the socket: {text}");
        assert!(!text.contains(TOKEN), "token in a card frame: {text}");
    }
    for shot in [
        "00-token.png",
        "01-onboarding.png",
        "02-queue.png",
        "03-approval_request.png",
        "09-autonomy_threshold_review.png",
        "11-secure_input_request.png",
        "15-batch_review-irreversible.png",
        "16-apply_changes.png",
        "17-result-undo.png",
        "18-desktop.png",
    ] {
        assert!(shots.join(shot).is_file(), "no screenshot {shot}");
    }
    let _ = stop.send(());
    let _ = server.await;
}
