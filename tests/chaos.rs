//! Chaos (issue #19 item 6, spec §14 "Chaos tests"): the real daemon is
//! SIGKILLed at seeded random points while turns and approved work are in
//! flight, restarted over the same data dir, and after every kill the
//! checker ([`chaos_kit::checker`], a pure function over what was observed
//! from outside) confirms: every accepted message answered exactly once, no
//! execution run twice, no approval consumed twice, the audit chain
//! verifies. The checker is itself checked: unit tests over fabricated
//! observations, and a real run into which a double execution and a
//! replayed reply are injected. Replies carry ids and the client acks each
//! and drops an id it has shown, as the real clients do: a reply lost on
//! the wire at a kill is sent again on reconnect, so none is tolerated as
//! lost, in the short form too.
//!
//! Short form (CI): `SILAS_CHAOS_ITERATIONS` (default 6) rounds, a random
//! seed printed with the summary; `SILAS_CHAOS_SEED` replays one.
//! Full form: `scripts/chaos.sh` (50 rounds, release build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chaos_kit;
mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chaos_kit::checker::{self, Violation};
use chaos_kit::observe::{self, Seen, SentMessage};
use chaos_kit::run::{self, Client, Rig};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_breaks_no_invariant() {
    let iterations = env_u64("SILAS_CHAOS_ITERATIONS").unwrap_or(6) as u32;
    let seed = env_u64("SILAS_CHAOS_SEED").unwrap_or_else(|| fastrand::u64(..));
    eprintln!(
        "chaos: seed={seed} iterations={iterations} (SILAS_CHAOS_SEED={seed} replays the kill points)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let rig = Rig::new(tmp.path(), seed).await;
    let summary = run::run(&rig, iterations, seed).await;
    // The one line scripts/chaos.sh prints and BENCHMARKS.md records.
    println!("{}", summary.line());
    // Every violation fails, the short form included: a reply lost on the
    // wire at a kill (handed to a live connection, recorded as delivered)
    // is no longer tolerated — it stays unacknowledged and is sent again,
    // same id, on the next connection (issue #19 item 6).
    assert!(
        summary.violations.is_empty(),
        "seed {seed}: {:#?}",
        summary.violations
    );
    if iterations >= 20 {
        assert!(
            summary.kills_in_turns > 0 && summary.kills_in_work > 0,
            "kills never landed inside both turns and work: {}",
            summary.line()
        );
    }
}

/// A real, quiet run (no kill) observes clean; the same observation with a
/// side-effect line appended a second time in the workspace — exactly what
/// a second execution of that tool call leaves — reports exactly that
/// double execution, and a delivered reply replayed into the client's
/// record adds exactly that duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_reports_an_injected_double_execution_and_a_replayed_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let rig = Rig::new(tmp.path(), 7).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (daemon, addr) = rig.start();
    let client = Client::connect(&addr, seen.clone()).await;
    let mut sent = Vec::new();
    for m in ["chat-0-0", "chaos-0"] {
        run::send_marked(&client.tx, format!("please {m}"), m);
        sent.push(SentMessage {
            marker: m.to_string(),
            round: 0,
            settled: false,
        });
    }
    run::settle(
        &seen,
        &sent,
        Duration::from_secs(10),
        Duration::from_secs(90),
    )
    .await;
    daemon.stop().await;
    client.finish(Duration::from_secs(1)).await;
    for m in &mut sent {
        m.settled = true;
    }
    let observe_now = |seen: &Seen| {
        let durable = observe::read_durable(&rig.data(), &rig.ws);
        let done: BTreeSet<String> = durable.items.iter().map(|i| i.id.clone()).collect();
        observe::observation(&sent, seen, durable, &done, observe::audit_chain(&rig.dir))
    };
    let clean = observe_now(&seen.lock().unwrap());
    assert_eq!(checker::check(&clean), vec![], "{clean:#?}");
    assert!(
        clean.items.iter().any(|i| i.id == "chaos-0" && i.done),
        "{clean:#?}"
    );
    let log = rig.ws.join("ran-chaos-0.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "the plan's command ran once: {text:?}");
    let call = observe::parse_line(lines[0]).unwrap().call;

    // The injected second execution: the command's line, appended again.
    std::fs::write(&log, format!("{text}{}\n", lines[0])).unwrap();
    let doubled = observe_now(&seen.lock().unwrap());
    assert_eq!(
        checker::check(&doubled),
        vec![Violation::ExecutedTwice {
            item_id: "chaos-0".into(),
            call,
            times: 2
        }]
    );

    // The same reply sent again under its id is dropped by the client: not
    // a duplicate.
    let mut replayed = seen.lock().unwrap();
    assert_eq!(replayed.replies, vec!["chat-0-0".to_string()]);
    let id = replayed
        .shown
        .keys()
        .next()
        .cloned()
        .expect("the reply's id");
    let again = serde_json::json!({"type": "message", "text": "re: chat-0-0", "id": id});
    assert_eq!(
        replayed.record(&again),
        Some(serde_json::json!({"type": "ack", "id": id}))
    );
    assert_eq!(replayed.replies, vec!["chat-0-0".to_string()]);
    assert_eq!(
        checker::check(&observe_now(&replayed)),
        vec![Violation::ExecutedTwice {
            item_id: "chaos-0".into(),
            call,
            times: 2
        }]
    );
    // The same answer under another id — a second reply — is shown, and
    // is the duplicate.
    let other = serde_json::json!({"type": "message", "text": "re: chat-0-0", "id": "x"});
    replayed.record(&other);
    let both = observe_now(&replayed);
    assert_eq!(
        checker::check(&both),
        vec![
            Violation::ReplyDuplicated {
                marker: "chat-0-0".into(),
                answers: 2
            },
            Violation::ExecutedTwice {
                item_id: "chaos-0".into(),
                call,
                times: 2
            },
        ]
    );
}
