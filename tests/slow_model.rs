//! A small, slow model over the real binary (issue #16 item 5): the
//! provider's own `timeout_seconds` lets a call run past the global
//! `llm.timeout_seconds`; while it runs the sender sees `progress` frames,
//! then the reply; and with `context_window` set, earlier turns are
//! evicted whole so the prompt fits the window, where without it they stay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{next_frame, send, silas, start_daemon};

fn direct(text: &str) -> Reply {
    Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": text}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"}))
}

fn write_config(dir: &Path, fake: &FakeLlm, provider_extra: &str) {
    let yaml = format!(
        "silas:\n  models: {{proxy: \"slow:m\", planner: \"slow:m\", executor: \"slow:m\", scorer: \"slow:m\"}}\n  providers:\n    slow: {{base_url: \"{}\", api_key_env: null{provider_extra}}}\n  llm: {{max_retries: 0, timeout_seconds: 2}}\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
}

/// Frames until the reply; returns (progress frames, reply text).
async fn until_reply(ws: &mut support::Ws) -> (Vec<Value>, String) {
    let mut progress = Vec::new();
    loop {
        let f = next_frame(ws, Duration::from_secs(30))
            .await
            .expect("a reply within 30 s");
        match f["type"].as_str() {
            Some("progress") => progress.push(f),
            Some("message") => return (progress, f["text"].as_str().unwrap().to_owned()),
            Some("error") => panic!("{f}"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_shows_progress_and_answers_within_its_own_timeout() {
    let fake = FakeLlm::start().await.unwrap();
    // 6.5 s: past the global 2 s timeout and the 5 s progress mark.
    fake.push(direct("Slow but sure.").delayed(Duration::from_millis(6500)));
    let tmp = tempfile::tempdir().unwrap();
    write_config(tmp.path(), &fake, ", timeout_seconds: 20");
    let mut cmd = silas(tmp.path());
    cmd.arg("--config").arg(tmp.path().join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    send(
        &mut ws,
        json!({"type": "message", "text": "take your time"}),
    )
    .await;
    let (progress, reply) = until_reply(&mut ws).await;
    assert_eq!(reply, "Slow but sure.");
    assert_eq!(progress.len(), 1, "{progress:?}");
    let p = &progress[0];
    assert_eq!(p["elapsed_seconds"], 5);
    assert!(p["text"].as_str().unwrap().contains("5 s"), "{p}");
    assert!(p["reply_to"].as_str().is_some_and(|r| !r.is_empty()));
    daemon.stop().await;
}

/// A model that fails tells the owner why, not "rephrase": past its
/// timeout, the seconds waited; a 404 (a wrong model name), the status and
/// where to look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_is_named_as_the_cause() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(direct("too late").delayed(Duration::from_millis(3500)));
    fake.push(Reply::status(404, "model 'smollm3' not found"));
    let tmp = tempfile::tempdir().unwrap();
    write_config(tmp.path(), &fake, "");
    let mut cmd = silas(tmp.path());
    cmd.arg("--config").arg(tmp.path().join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    send(&mut ws, json!({"type": "message", "text": "hello"})).await;
    let (_, reply) = until_reply(&mut ws).await;
    assert!(reply.contains("did not answer within 2 s"), "{reply}");
    send(&mut ws, json!({"type": "message", "text": "hello again"})).await;
    let (_, reply) = until_reply(&mut ws).await;
    assert!(
        reply.contains("HTTP 404") && reply.contains("model name"),
        "{reply}"
    );
    assert!(!reply.contains("rephrase"), "{reply}");
    daemon.stop().await;
}

/// Three turns of ~2,400 characters each: the prompt of the fourth holds
/// all of them without a window, and only what fits with a 4,096-token one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_is_fitted_to_the_providers_context_window() {
    for (extra, fitted) in [("", false), (", context_window: 4096", true)] {
        let fake = FakeLlm::start().await.unwrap();
        fake.set_fallback(direct("Noted."));
        let tmp = tempfile::tempdir().unwrap();
        write_config(tmp.path(), &fake, extra);
        let mut cmd = silas(tmp.path());
        cmd.arg("--config").arg(tmp.path().join("silas.yaml"));
        let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
        let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
        for n in 0..4 {
            let text = format!("note-{n} {}", "lorem ipsum dolor sit amet ".repeat(90));
            send(&mut ws, json!({"type": "message", "text": text})).await;
            until_reply(&mut ws).await;
        }
        daemon.stop().await;
        let last = fake.requests().last().unwrap().body.to_string();
        assert!(last.contains("note-3"), "the current message is sent");
        let kept: Vec<bool> = (0..3)
            .map(|n| last.contains(&format!("note-{n} ")))
            .collect();
        if fitted {
            assert!(!kept[0], "the oldest turn was not evicted: {kept:?}");
            // chars/4 overestimates tokens, so this is a safe upper bound.
            assert!(last.len() < 4096 * 4, "prompt of {} bytes", last.len());
        } else {
            assert_eq!(kept, vec![true, true, true]);
        }
    }
}

/// A stop that gives up on a turn still waiting for the model says so: the
/// audit's `daemon.stopped` is `drained: false` (it said `true`) and the
/// log names the cut-off turns; the message is replayed at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_that_cuts_a_turn_off_is_not_a_clean_drain() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(direct("far too late").delayed(Duration::from_millis(15_000)));
    let tmp = tempfile::tempdir().unwrap();
    write_config(tmp.path(), &fake, ", timeout_seconds: 30");
    let log = tmp.path().join("daemon.log");
    let mut cmd = silas(tmp.path());
    cmd.arg("--config")
        .arg(tmp.path().join("silas.yaml"))
        .env("SILAS__BACKPRESSURE__SHUTDOWN_GRACE_SECONDS", "1");
    let (daemon, addr, _) = start_daemon(cmd, Stdio::from(std::fs::File::create(&log).unwrap()));
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    send(&mut ws, json!({"type": "message", "text": "think hard"})).await;
    // Accepted, and the model call under way.
    loop {
        let f = next_frame(&mut ws, Duration::from_secs(10))
            .await
            .expect("accepted");
        if f["type"] == "accepted" {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    daemon.stop().await;
    let stopped: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "daemon.stopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert_eq!(stopped[0]["data"]["drained"], json!(false), "{stopped:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("were cut off"), "{text}");
}

/// Asked twice, a stop does not wait out the grace for a turn still with
/// the model (Ctrl-C, then Ctrl-C again): it exits at once, cleanly, with
/// the audit checkpoint written and `hurried: true`. A message cut off this
/// way by three stops in a row is still answered after the fourth start:
/// an orderly stop does not count toward setting a message aside (it was
/// quarantined as "an internal error" after three restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_and_restarts_never_set_the_message_aside() {
    const CUT_OFFS: usize = 3;
    let fake = FakeLlm::start().await.unwrap();
    for _ in 0..CUT_OFFS {
        fake.push(direct("far too late").delayed(Duration::from_millis(40_000)));
    }
    fake.push(direct("Answered after the restarts."));
    let tmp = tempfile::tempdir().unwrap();
    write_config(tmp.path(), &fake, ", timeout_seconds: 60");
    let daemon_cmd = || {
        let mut cmd = silas(tmp.path());
        cmd.arg("--config").arg(tmp.path().join("silas.yaml"));
        cmd
    };
    for round in 0..CUT_OFFS {
        let (mut daemon, addr, _) = start_daemon(daemon_cmd(), Stdio::null());
        let mut ws = None;
        if round == 0 {
            let (mut socket, _) = support::connect(&addr, Duration::from_secs(5)).await;
            send(
                &mut socket,
                json!({"type": "message", "text": "think hard"}),
            )
            .await;
            ws = Some(socket);
        }
        // The turn (the first, or the replay) is with the model.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while fake.requests().len() <= round {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no model call"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pid = daemon.child.id().to_string();
        let int = || {
            assert!(
                std::process::Command::new("kill")
                    .args(["-INT", &pid])
                    .status()
                    .unwrap()
                    .success()
            );
        };
        int();
        // The default grace is 30 s: the first signal alone waits for the turn.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(
            daemon.child.try_wait().unwrap().is_none(),
            "gone on the first signal"
        );
        let asked_again = std::time::Instant::now();
        int();
        let status = loop {
            if let Some(s) = daemon.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                asked_again.elapsed() < Duration::from_secs(10),
                "still running 10 s after the second signal"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "{status:?}");
        drop(ws);
        drop(daemon);
    }
    let stopped: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "daemon.stopped")
        .collect();
    assert_eq!(stopped.len(), CUT_OFFS, "{stopped:?}");
    for s in &stopped {
        assert_eq!(s["data"]["hurried"], json!(true), "{s}");
        assert_eq!(s["data"]["drained"], json!(false), "{s}");
    }
    support::assert_audit_verifies(tmp.path());

    // Replayed once more, and answered: not set aside.
    let (daemon, addr, _) = start_daemon(daemon_cmd(), Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let f = next_frame(
            &mut ws,
            deadline.saturating_duration_since(std::time::Instant::now()),
        )
        .await
        .expect("the replayed reply");
        if f["type"] == "message" {
            assert_eq!(f["text"], "Answered after the restarts.", "{f}");
            break;
        }
    }
    daemon.stop().await;
    let events = support::audit_events(tmp.path());
    assert!(
        !events.iter().any(|e| e["event"] == "turn_quarantined"),
        "set aside"
    );
}

/// A stop lets the turn that is with the model finish, but does not start
/// the one queued behind it (§18.2 "in-flight turns"): a model call begun
/// during the drain could be cut off at the grace and paid again after the
/// restart. The queued message is answered at the next start, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_finishes_the_running_turn_and_starts_no_queued_one() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(direct("The first answer.").delayed(Duration::from_millis(2_000)));
    fake.push(direct("The second answer."));
    let tmp = tempfile::tempdir().unwrap();
    write_config(tmp.path(), &fake, ", timeout_seconds: 30");
    let daemon_cmd = || {
        let mut cmd = silas(tmp.path());
        cmd.arg("--config").arg(tmp.path().join("silas.yaml"));
        cmd
    };
    let (daemon, addr, _) = start_daemon(daemon_cmd(), Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    for text in ["first", "second"] {
        send(&mut ws, json!({"type": "message", "text": text})).await;
    }
    first_model_call(&fake).await;
    daemon.stop().await;
    assert_eq!(
        fake.requests().len(),
        1,
        "a queued turn started during the drain"
    );
    let stopped: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "daemon.stopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert_eq!(stopped[0]["data"]["drained"], json!(true), "{stopped:?}");
    assert_eq!(stopped[0]["data"]["left_queued"], json!(1), "{stopped:?}");
    let (_, first) = until_reply(&mut ws).await;
    assert_eq!(first, "The first answer.");
    drop(ws);

    let (daemon, addr, _) = start_daemon(daemon_cmd(), Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    // The first reply comes again first (its ack never reached the
    // stopped daemon), then the second message's.
    let mut replies = Vec::new();
    while replies.last().map(String::as_str) != Some("The second answer.") {
        replies.push(until_reply(&mut ws).await.1);
        assert!(replies.len() <= 2, "{replies:?}");
    }
    daemon.stop().await;
    assert_eq!(fake.requests().len(), 2, "each message cost one model call");
}

/// A chatbot visitor's conversation ends with its connection (its scope is
/// the connection; a reply is sent once and never kept), so at a stop its
/// queued turns still run while its socket is open: left for the restart,
/// they could never be answered (red-team F5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_still_answers_a_visitors_queued_messages() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(direct("The first answer.").delayed(Duration::from_millis(1_500)));
    fake.push(direct("The second answer."));
    let tmp = tempfile::tempdir().unwrap();
    let (daemon, mut ws) = chatbot_visitor(tmp.path(), &fake).await;
    for text in ["first", "second"] {
        send(&mut ws, json!({"type": "message", "text": text})).await;
    }
    first_model_call(&fake).await;
    let replies = tokio::spawn(async move {
        let mut texts = Vec::new();
        while texts.len() < 2 {
            texts.push(until_reply(&mut ws).await.1);
        }
        texts
    });
    daemon.stop().await;
    let texts = tokio::time::timeout(Duration::from_secs(5), replies)
        .await
        .expect("both replies before the stop")
        .unwrap();
    assert_eq!(texts, ["The first answer.", "The second answer."]);
    let stopped: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "daemon.stopped")
        .collect();
    assert_eq!(stopped[0]["data"]["left_queued"], json!(0), "{stopped:?}");
    assert_eq!(stopped[0]["data"]["drained"], json!(true), "{stopped:?}");
}

/// A visitor who leaves with messages still queued costs no model call for
/// them: its conversation ended with its connection, so nobody could read
/// their replies (a flood-and-leave visitor ran up the owner's model bill).
/// They are closed unanswered, audited `turn_abandoned`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitor_who_leaves_costs_no_model_call_for_its_queued_messages() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(direct("The first answer.").delayed(Duration::from_millis(1_500)));
    fake.set_fallback(direct("Another answer."));
    let tmp = tempfile::tempdir().unwrap();
    let (daemon, mut ws) = chatbot_visitor(tmp.path(), &fake).await;
    for text in ["first", "second", "third"] {
        send(&mut ws, json!({"type": "message", "text": text})).await;
    }
    let mut accepted = 0;
    while accepted < 3 {
        let f = next_frame(&mut ws, Duration::from_secs(10))
            .await
            .expect("accepted");
        accepted += usize::from(f["type"] == "accepted");
    }
    first_model_call(&fake).await;
    drop(ws);
    // The first turn finishes (its reply finds nobody); the others end.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        fake.requests().len(),
        1,
        "a model call for a visitor who left"
    );
    daemon.stop().await;
    let abandoned: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "turn_abandoned")
        .collect();
    assert_eq!(abandoned.len(), 2, "{abandoned:?}");
    assert!(
        abandoned
            .iter()
            .all(|e| e["data"]["reason"] == "visitor_gone")
    );
    let stopped: Vec<Value> = support::audit_events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "daemon.stopped")
        .collect();
    assert_eq!(stopped[0]["data"]["left_queued"], json!(0), "{stopped:?}");
}

/// A chatbot deployment over `dir` on `fake` (the provider's timeout 30 s)
/// and one visitor's connection to it.
async fn chatbot_visitor(dir: &Path, fake: &FakeLlm) -> (support::Daemon, support::Ws) {
    write_config(dir, fake, ", timeout_seconds: 30");
    let goal = dir.join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let mut cmd = silas(dir);
    cmd.arg("--config")
        .arg(dir.join("silas.yaml"))
        .env("SILAS__ACTIVE_GOAL", &goal);
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let (ws, _) = support::connect_anonymous(&addr, Duration::from_secs(5)).await;
    (daemon, ws)
}

/// Until `fake` has seen a request (at most 20 s).
async fn first_model_call(fake: &FakeLlm) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while fake.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no model call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
