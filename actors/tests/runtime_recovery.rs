//! The turn runtime across crashes and restarts (issue #5, §14 "Restart
//! flow"): a crash mid-turn replayed exactly once, unfinished turns replayed
//! by a new runtime, an approved plan neither lost nor re-executed, and a
//! poison message quarantined so its scope moves on. Harness:
//! `common/turn_runtime.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/turn_runtime.rs"]
mod harness;

use harness::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

use silas_actors::channel::Outbound;
use silas_actors::restart::RestartPolicy;
use silas_actors::turn::approval_flow::DecideOutcome;
use silas_actors::turn::pipeline::TurnError;
use silas_actors::turn::{MAX_TURN_ATTEMPTS, QUARANTINE_REPLY};
use silas_actors::work::{WorkStatusEvent, WorkStatusKind};
use silas_core::Timestamp;
use silas_core::config::Config;
use silas_storage::{InboxStage, NewInbound, PendingCard, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_turn_is_replayed_exactly_once() {
    let (_d, store) = store();
    let rt = start(
        &store,
        Opts {
            cfg: Config::default(),
            crash_once: true,
            ..Opts::default()
        },
    )
    .await;
    let id = accept(&rt, "owner", "hello").await;
    wait_for("reply after restart", || rt.sink.replies().len() == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rt.sink.replies().len(), 1, "the reply is not sent twice");
    assert_eq!(rt.sink.replies()[0].0, id);
    let status = rt.stream.status().await.unwrap();
    assert_eq!(status.processor_restarts, 1);
    assert_eq!(status.pending_total, 0);
    // The message was chronicled once (before the crash) and not again.
    let chronicle = store.chronicle().get_recent("owner", 10).unwrap();
    assert_eq!(chronicle.len(), 2, "{chronicle:#?}");
    assert!(audit_events(&store).contains(&"turn_processor_restarted".to_string()));
    // The step trace shows the crashed attempt, then one full replay.
    let steps: Vec<&str> = rt.steps.0.lock().unwrap().iter().map(|(_, s)| *s).collect();
    assert_eq!(steps.iter().filter(|s| **s == "send").count(), 1);
    assert_eq!(steps.iter().filter(|s| **s == "auto_retrieve").count(), 2);
    rt.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_turns_are_replayed_by_a_new_runtime() {
    let (_d, store) = store();
    let rt = start(&store, Opts::default()).await;
    let id = accept(&rt, "owner", "hello wait").await;
    // Stop while the turn is stuck in the model call.
    wait_for("turn started", || rt.llm.calls.load(Ordering::SeqCst) == 1).await;
    rt.stop().await;
    assert_eq!(store.inbox().pending_all().unwrap().len(), 1);
    let rt = start(&store, Opts::default()).await;
    rt.llm.gate.add_permits(10);
    wait_for("replayed reply", || rt.sink.replies().len() == 1).await;
    assert_eq!(rt.sink.replies()[0].0, id);
    assert_eq!(store.chronicle().get_recent("owner", 10).unwrap().len(), 2);
    rt.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_flow_approved_plan_survives_and_is_not_re_executed() {
    let (_d, store) = store();
    let mut rt = start(&store, Opts::default()).await;
    accept(&rt, "owner", "create a file notes.txt containing hi").await;
    wait_for("reply and card", || rt.sink.sent().len() == 2).await;
    let card = rt
        .sink
        .sent()
        .into_iter()
        .find_map(|o| match o {
            Outbound::Card { card } => Some(card),
            _ => None,
        })
        .unwrap();
    let events = audit_events(&store);
    assert!(events.contains(&"plan_proposed".to_string()));
    let work_item_id = card.card.work_item_id().unwrap().to_string();
    let item = store.work_items().get(&work_item_id).unwrap().unwrap();
    assert!(item.needs_approval && item.approval_token.is_none());

    let out = rt
        .stream
        .decide_card(
            &card.request_id,
            approve(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap();
    assert!(matches!(out, DecideOutcome::Dispatched { .. }), "{out:?}");
    let req = rt.dispatched.recv().await.unwrap();
    assert_eq!(req.work_item_id, work_item_id);
    // The executor double reports status; the Stream forwards it.
    rt.status
        .send(WorkStatusEvent {
            work_item_id: work_item_id.clone(),
            scope_id: "owner".into(),
            status: WorkStatusKind::Running,
            summary: "running".into(),
            verification: vec![],
        })
        .unwrap();
    wait_for("status forwarded", || {
        rt.sink
            .sent()
            .iter()
            .any(|o| matches!(o, Outbound::WorkStatus { .. }))
    })
    .await;
    rt.stop().await;

    // A new runtime on the same store.
    let mut rt = start(&store, Opts::default()).await;
    let item = store.work_items().get(&work_item_id).unwrap().unwrap();
    let token = item.approval_token.expect("token attached and saved");
    assert_eq!(token.executions_used, 1, "verified exactly once");
    assert!(store.records::<PendingCard>().list().unwrap().is_empty());
    // Answering the old card again neither re-issues nor re-dispatches.
    let again = rt
        .stream
        .decide_card(
            &card.request_id,
            approve(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(again, Err(TurnError::UnknownCard(_))), "{again:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rt.dispatched.try_recv().is_err(), "nothing re-executed");
    assert!(rt.sink.replies().is_empty(), "no reply re-sent");
    rt.stop().await;
}

fn quarantine_events(store: &Store) -> Vec<silas_core::model::JsonObject> {
    store
        .audit()
        .tail(10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "turn_quarantined")
        .map(|e| e.data)
        .collect()
}

fn steps_of(rt: &Rt, id: &str, step: &str) -> usize {
    rt.steps
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(i, s)| i == id && *s == step)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_crashes_every_attempt_is_quarantined_and_the_scope_moves_on() {
    let (_d, store) = store();
    let rt = start(&store, Opts::default()).await;
    let id = accept(&rt, "owner", &format!("hello {POISON}")).await;
    wait_for("poison message set aside", || {
        store.inbox().get(&id).unwrap().unwrap().stage == InboxStage::Delivered
    })
    .await;
    let r = store.inbox().get(&id).unwrap().unwrap();
    assert_eq!(r.attempts, MAX_TURN_ATTEMPTS);
    assert_eq!(r.reply.as_deref(), Some(QUARANTINE_REPLY));
    // Processed MAX times (each crashed at step 4), never got further.
    assert_eq!(
        steps_of(&rt, &id, "auto_retrieve"),
        MAX_TURN_ATTEMPTS as usize
    );
    assert_eq!(steps_of(&rt, &id, "route"), 0);
    assert_eq!(steps_of(&rt, &id, "send"), 0);
    assert_eq!(rt.llm.calls.load(Ordering::SeqCst), 0);

    // A following message in the same scope is answered normally.
    let next = accept(&rt, "owner", "hello").await;
    wait_for("next reply", || {
        rt.sink.replies().iter().any(|(r, _)| *r == next)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let replies = rt.sink.replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0], (id.clone(), QUARANTINE_REPLY.to_string()));
    assert_eq!(replies[1].0, next);
    assert_ne!(replies[1].1, QUARANTINE_REPLY);

    // Audited once, with ids and the count, never the text.
    let events = quarantine_events(&store);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["inbox_id"], id.as_str());
    assert_eq!(events[0]["scope_id"], "owner");
    assert_eq!(events[0]["attempts"], MAX_TURN_ATTEMPTS);
    assert!(!serde_json::to_string(&events[0]).unwrap().contains(POISON));
    let restarted = audit_events(&store)
        .into_iter()
        .filter(|e| e == "turn_processor_restarted")
        .count();
    assert_eq!(restarted, MAX_TURN_ATTEMPTS as usize);

    // The Stream never escalated: it is running and accepting, with restarts
    // below its intensity limit.
    let status = rt.stream.status().await.unwrap();
    assert_eq!(status.processor_restarts, MAX_TURN_ATTEMPTS);
    assert!(status.processor_restarts < RestartPolicy::default().max_restarts);
    assert!(status.accepting);
    assert_eq!(status.pending_total, 0);
    assert_eq!(rt.stream.actor.get_status(), ractor::ActorStatus::Running);
    // The poison message never reached the chronicle: an unsigned
    // message's input record commits with its response, which no attempt
    // got to, so a restarted processor does not rehydrate it into every
    // later prompt of the scope (it stays in its inbox record). The next
    // turn added its message and response.
    let chronicle = store.chronicle().get_recent("owner", 10).unwrap();
    assert_eq!(
        chronicle
            .iter()
            .filter(|c| c.content.contains(POISON))
            .count(),
        0,
        "{chronicle:#?}"
    );
    assert_eq!(chronicle.len(), 2, "{chronicle:#?}");
    assert_eq!(r.message.text, format!("hello {POISON}"));
    rt.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_runtime_quarantines_records_that_used_their_attempts() {
    let (_d, store) = store();
    let inbound = |scope: &str, text: &str| NewInbound {
        scope_id: scope.into(),
        channel: "web".into(),
        sender_id: scope.into(),
        text: text.into(),
        signed: None,
        connection_id: scope.into(),
        ip: None,
        owner_authenticated: false,
        dedup_key: None,
    };
    let inbox = store.inbox();
    // Earlier daemon runs crashed on these (the attempts are durable): one
    // used all its attempts, the poison one has a last attempt left.
    let spent = inbox
        .accept(inbound("s1", "hello"), Timestamp::now())
        .unwrap()
        .inbox_id;
    let poison = inbox
        .accept(inbound("s2", &format!("hi {POISON}")), Timestamp::now())
        .unwrap()
        .inbox_id;
    for _ in 0..MAX_TURN_ATTEMPTS {
        inbox.begin_attempt(&spent).unwrap();
    }
    for _ in 1..MAX_TURN_ATTEMPTS {
        inbox.begin_attempt(&poison).unwrap();
    }

    let rt = start(&store, Opts::default()).await;
    wait_for("both set aside", || inbox.pending_all().unwrap().is_empty()).await;
    // The spent record was not processed at all: no step, no model call.
    assert!(
        rt.steps.0.lock().unwrap().iter().all(|(i, _)| *i != spent),
        "a spent record ran pipeline steps"
    );
    // The poison one got exactly its last attempt, then quarantine.
    assert_eq!(steps_of(&rt, &poison, "auto_retrieve"), 1);
    assert_eq!(rt.llm.calls.load(Ordering::SeqCst), 0);
    let mut replies = rt.sink.replies();
    replies.sort();
    assert_eq!(
        replies,
        vec![
            (spent.clone(), QUARANTINE_REPLY.to_string()),
            (poison.clone(), QUARANTINE_REPLY.to_string()),
        ]
    );
    for id in [&spent, &poison] {
        let r = inbox.get(id).unwrap().unwrap();
        assert_eq!(r.stage, InboxStage::Delivered);
        assert_eq!(r.attempts, MAX_TURN_ATTEMPTS);
    }
    let mut audited: Vec<String> = quarantine_events(&store)
        .iter()
        .map(|e| e["inbox_id"].as_str().unwrap().to_string())
        .collect();
    audited.sort();
    assert_eq!(audited, vec![spent.clone(), poison.clone()]);
    let status = rt.stream.status().await.unwrap();
    assert_eq!(status.processor_restarts, 1);
    assert!(status.accepting);
    // The scopes are usable afterwards.
    let next = accept(&rt, "s1", "hello").await;
    wait_for("next reply", || {
        rt.sink.replies().iter().any(|(r, _)| *r == next)
    })
    .await;
    rt.stop().await;
    assert!(store.chronicle().get_recent("s1", 10).unwrap().len() == 2);
}
