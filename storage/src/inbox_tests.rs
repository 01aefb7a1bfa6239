//! Tests of `inbox.rs` (split from it along the module seam).

use silas_core::model::context::{ContextItemKind, ContextZone};

use super::*;
use crate::Store;

fn msg(scope: &str, text: &str) -> NewInbound {
    NewInbound {
        scope_id: scope.into(),
        channel: "web".into(),
        sender_id: "owner".into(),
        text: text.into(),
        signed: None,
        connection_id: scope.into(),
        ip: None,
        owner_authenticated: false,
        dedup_key: None,
    }
}

#[test]
fn a_keyed_message_is_accepted_once_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let keyed = || NewInbound {
        dedup_key: Some("telegram:update:7".into()),
        ..msg("owner", "hello")
    };
    let first = {
        let store = Store::open_in(dir.path()).unwrap();
        let (rec, fresh) = store
            .inbox()
            .accept_once(keyed(), Timestamp::now())
            .unwrap();
        assert!(fresh);
        rec
    };
    let store = Store::open_in(dir.path()).unwrap();
    let (again, fresh) = store
        .inbox()
        .accept_once(keyed(), Timestamp::now())
        .unwrap();
    assert!(!fresh);
    assert_eq!(again.inbox_id, first.inbox_id);
    assert_eq!(store.inbox().pending_all().unwrap().len(), 1);
    // Unkeyed messages are never deduplicated; another key is another message.
    let other = NewInbound {
        dedup_key: Some("telegram:update:8".into()),
        ..msg("owner", "hello")
    };
    assert!(
        store
            .inbox()
            .accept_once(other, Timestamp::now())
            .unwrap()
            .1
    );
    store
        .inbox()
        .accept(msg("owner", "hello"), Timestamp::now())
        .unwrap();
    store
        .inbox()
        .accept(msg("owner", "hello"), Timestamp::now())
        .unwrap();
    assert_eq!(store.inbox().pending_all().unwrap().len(), 4);
}

fn item(text: &str) -> ContextItem {
    ContextItem {
        ctx_id: text.into(),
        zone: ContextZone::Chronicle,
        content: text.into(),
        token_count: 1,
        created_at: Timestamp::now(),
        turn_number: 0,
        source: "test".into(),
        taint: TaintLevel::Owner,
        kind: ContextItemKind::Message,
        relevance: 1.0,
        masked: false,
        pinned: false,
    }
}

#[test]
fn begin_attempt_counts_durably_and_old_records_decode() {
    let dir = tempfile::tempdir().unwrap();
    let a = {
        let store = Store::open_in(dir.path()).unwrap();
        let inbox = store.inbox();
        let a = inbox.accept(msg("s1", "a"), Timestamp::now()).unwrap();
        // The first attempt is counted by the acceptance itself, and
        // its begin_attempt writes nothing (no durable commit).
        assert_eq!(a.attempts, 1);
        let commits = store.group_commit_stats().durable_commits;
        assert_eq!(inbox.begin_attempt(&a.inbox_id).unwrap().attempts, 1);
        assert_eq!(store.group_commit_stats().durable_commits, commits);
        // A second attempt in this process (a restarted processor) counts.
        assert_eq!(inbox.begin_attempt(&a.inbox_id).unwrap().attempts, 2);
        // Stage changes keep the count.
        inbox
            .record_input(&a.inbox_id, TaintLevel::Owner, 1, &item("in"))
            .unwrap();
        assert_eq!(inbox.get(&a.inbox_id).unwrap().unwrap().attempts, 2);
        a
    };
    // Survives reopening (a daemon restart).
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let r = inbox.begin_attempt(&a.inbox_id).unwrap();
    assert_eq!(r.attempts, 3);
    assert_eq!(r.stage, InboxStage::InputRecorded);
    assert_eq!(inbox.pending_for_scope("s1").unwrap()[0].attempts, 3);
    // A delivered record is not counted again.
    inbox
        .mark_delivered(&a.inbox_id, ReplyAck::Channel)
        .unwrap();
    assert_eq!(inbox.begin_attempt(&a.inbox_id).unwrap().attempts, 3);
    assert!(matches!(
        inbox.begin_attempt("missing"),
        Err(StoreError::NotFound { .. })
    ));

    // A record stored before the field existed decodes with 0 attempts.
    let mut json = serde_json::to_value(&r).unwrap();
    json.as_object_mut().unwrap().remove("attempts");
    let mut bytes = vec![codec::RECORD_V1];
    bytes.extend(serde_json::to_vec(&json).unwrap());
    let old: InboxRecord = codec::decode(TABLE, &bytes).unwrap();
    assert_eq!(old.attempts, 0);
    assert_eq!(old.inbox_id, r.inbox_id);
}

#[test]
fn a_first_attempt_counted_at_acceptance_counts_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open_in(dir.path()).unwrap();
        let r = store.inbox().accept(msg("s1", "a"), Timestamp::now());
        // The daemon died before (or while) the first attempt ran: it
        // cannot tell which, so the next attempt is the second.
        r.unwrap().inbox_id
    };
    let store = Store::open_in(dir.path()).unwrap();
    let r = store.inbox().begin_attempt(&id).unwrap();
    assert_eq!(r.attempts, 2);
    assert_eq!(store.inbox().get(&id).unwrap().unwrap().attempts, 2);
}

#[test]
fn stages_are_idempotent_and_pending_is_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let a = inbox.accept(msg("s1", "a"), Timestamp::now()).unwrap();
    let b = inbox.accept(msg("s2", "b"), Timestamp::now()).unwrap();
    let c = inbox.accept(msg("s1", "c"), Timestamp::now()).unwrap();
    let ids = |v: Vec<InboxRecord>| v.into_iter().map(|r| r.inbox_id).collect::<Vec<_>>();
    assert_eq!(
        ids(inbox.pending_for_scope("s1").unwrap()),
        vec![a.inbox_id.clone(), c.inbox_id.clone()]
    );
    assert_eq!(inbox.pending_all().unwrap().len(), 3);

    inbox
        .record_input(&a.inbox_id, TaintLevel::Owner, 1, &item("in"))
        .unwrap();
    // Replay: no second chronicle entry.
    inbox
        .record_input(&a.inbox_id, TaintLevel::External, 9, &item("in"))
        .unwrap();
    let r = inbox
        .record_response(&a.inbox_id, "hi", Some(&item("out")), Vec::new())
        .unwrap();
    assert_eq!(r.taint, Some(TaintLevel::Owner));
    assert_eq!(r.turn_number, Some(1));
    inbox
        .record_response(&a.inbox_id, "other", Some(&item("out")), Vec::new())
        .unwrap();
    assert_eq!(store.chronicle().get_recent("s1", 10).unwrap().len(), 2);
    inbox
        .mark_delivered(&a.inbox_id, ReplyAck::Channel)
        .unwrap();
    let r = inbox.get(&a.inbox_id).unwrap().unwrap();
    assert_eq!(r.stage, InboxStage::Delivered);
    assert_eq!(r.reply.as_deref(), Some("hi"));
    assert_eq!(
        ids(inbox.pending_for_scope("s1").unwrap()),
        vec![c.inbox_id]
    );
    assert_eq!(
        ids(inbox.pending_for_scope("s2").unwrap()),
        vec![b.inbox_id]
    );
}

/// The turn's outcome commits what earlier and later steps left to it, in
/// one write: the input record before the response, and the delivery mark
/// of a reply a client acknowledges by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_outcome_commits_the_input_the_response_and_the_mark_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let a = inbox.accept(msg("owner", "a"), Timestamp::now()).unwrap();
    // The chronicle keeps time order: the message's entry is the older.
    let (said, answered) = (item("in"), item("out"));
    let outcome = |delivered| TurnOutcome {
        reply: "hi".into(),
        chronicle: Some(answered.clone()),
        audit: Vec::new(),
        input: Some(InputRecord {
            taint: TaintLevel::External,
            turn_number: 4,
            chronicle: said.clone(),
        }),
        delivered,
    };
    let writes = store.group_commit_stats().writes;
    let r = inbox
        .record_outcome_async(&a.inbox_id, outcome(Some(ReplyAck::Client)))
        .await
        .unwrap();
    assert_eq!(store.group_commit_stats().writes, writes + 1);
    assert_eq!(r.stage, InboxStage::Delivered);
    assert_eq!(r.taint, Some(TaintLevel::External));
    assert_eq!(r.turn_number, Some(4));
    assert_eq!(r.reply.as_deref(), Some("hi"));
    assert_eq!(inbox.get(&a.inbox_id).unwrap(), Some(r));
    assert!(inbox.pending_all().unwrap().is_empty());
    let kept = inbox.unacked_for_scope("owner").unwrap();
    assert_eq!(kept.len(), 1);
    let chronicle = store.chronicle().get_recent("owner", 10).unwrap();
    let ids: Vec<&str> = chronicle.iter().map(|c| c.ctx_id.as_str()).collect();
    assert_eq!(ids, ["in", "out"]);

    // Once responded, a second outcome (a replay) changes nothing.
    inbox
        .record_outcome_async(&a.inbox_id, outcome(Some(ReplyAck::Client)))
        .await
        .unwrap();
    assert_eq!(store.chronicle().get_recent("owner", 10).unwrap().len(), 2);

    // A channel that confirms its own sends is marked after the send; a
    // customer's reply (nobody to resend it to) is marked now, kept nowhere.
    let b = inbox.accept(msg("owner", "b"), Timestamp::now()).unwrap();
    let r = inbox
        .record_outcome_async(&b.inbox_id, outcome(Some(ReplyAck::Channel)))
        .await
        .unwrap();
    assert_eq!(r.stage, InboxStage::Responded);
    assert_eq!(inbox.pending_all().unwrap().len(), 1);
    let c = inbox.accept(msg("s1", "c"), Timestamp::now()).unwrap();
    let r = inbox
        .record_outcome_async(&c.inbox_id, outcome(Some(ReplyAck::ClientOnce)))
        .await
        .unwrap();
    assert_eq!(r.stage, InboxStage::Delivered);
    assert!(inbox.unacked_for_scope("s1").unwrap().is_empty());
}

/// A signed message's input record committed on its own first is not
/// chronicled again by the outcome that also carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_recorded_first_is_not_recorded_again_by_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let a = inbox.accept(msg("owner", "a"), Timestamp::now()).unwrap();
    let input = InputRecord {
        taint: TaintLevel::Owner,
        turn_number: 1,
        chronicle: item("in"),
    };
    inbox
        .record_input_async(&a.inbox_id, input.clone())
        .await
        .unwrap();
    let outcome = TurnOutcome {
        reply: "hi".into(),
        input: Some(InputRecord {
            taint: TaintLevel::External,
            ..input
        }),
        ..TurnOutcome::default()
    };
    let r = inbox
        .record_outcome_async(&a.inbox_id, outcome)
        .await
        .unwrap();
    assert_eq!(r.taint, Some(TaintLevel::Owner));
    assert_eq!(store.chronicle().get_recent("owner", 10).unwrap().len(), 1);
    // Only a signed message is recorded first.
    assert!(!a.input_first());
}

/// Delivered records past retention lose their words (the chronicle's are
/// pruned at the same age); newer ones and one still in flight keep them,
/// and a record waiting behind an in-flight one is scrubbed once it is past.
#[test]
fn delivered_words_go_at_retention_and_forget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let long_ago = Timestamp::now().minus(chrono::Duration::days(100));
    let deliver = |text: &str, at: Timestamp| {
        let r = inbox.accept(msg("s1", text), at).unwrap();
        inbox
            .record_response(&r.inbox_id, &format!("re: {text}"), None, Vec::new())
            .unwrap();
        inbox
            .mark_delivered(&r.inbox_id, ReplyAck::Channel)
            .unwrap();
        r.inbox_id
    };
    let old = deliver("old secret plan", long_ago);
    let in_flight = inbox.accept(msg("s1", "still going"), long_ago).unwrap();
    let behind = deliver("behind it", long_ago);
    let recent = deliver("recent words", Timestamp::now());
    let cutoff = Timestamp::now().minus(chrono::Duration::days(90));
    assert_eq!(inbox.scrub_delivered_before(cutoff).unwrap(), 1);
    let r = inbox.get(&old).unwrap().unwrap();
    assert_eq!(
        (r.message.text.as_str(), r.reply.as_deref()),
        ("", Some(EXPIRED_REPLY))
    );
    for (id, text) in [
        (&in_flight.inbox_id, "still going"),
        (&behind, "behind it"),
        (&recent, "recent words"),
    ] {
        assert_eq!(inbox.get(id).unwrap().unwrap().message.text, text);
    }
    // Once the turn in flight is delivered, the walk goes on past it.
    inbox
        .record_response(&in_flight.inbox_id, "done", None, Vec::new())
        .unwrap();
    inbox
        .mark_delivered(&in_flight.inbox_id, ReplyAck::Channel)
        .unwrap();
    assert_eq!(inbox.scrub_delivered_before(cutoff).unwrap(), 2);
    assert_eq!(inbox.get(&behind).unwrap().unwrap().message.text, "");
    assert_eq!(
        inbox.get(&recent).unwrap().unwrap().message.text,
        "recent words"
    );
    assert_eq!(inbox.scrub_delivered_before(cutoff).unwrap(), 0);

    // Forget: only the matching delivered records of the scope.
    let kept = deliver("about tea", Timestamp::now());
    let other_scope = inbox
        .accept(msg("s2", "recent words"), Timestamp::now())
        .unwrap();
    assert_eq!(
        inbox
            .scrub_delivered("s1", |t| t.contains("recent"))
            .unwrap(),
        1
    );
    assert_eq!(
        inbox.get(&recent).unwrap().unwrap().reply.as_deref(),
        Some(FORGOTTEN_REPLY)
    );
    assert_eq!(inbox.get(&kept).unwrap().unwrap().message.text, "about tea");
    assert_eq!(
        inbox
            .get(&other_scope.inbox_id)
            .unwrap()
            .unwrap()
            .message
            .text,
        "recent words"
    );
}

/// An orderly stop gives back the attempt it cut off — a running turn's
/// and a queued message's counted at acceptance — and nothing else: a
/// crashed attempt before it still counts, a delivered record is left as
/// it is, and a second refund finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_stop_refunds_only_the_attempts_it_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (running, queued, done) = {
        let store = Store::open_in(dir.path()).unwrap();
        let inbox = store.inbox();
        let running = inbox.accept(msg("s1", "a"), Timestamp::now()).unwrap();
        let queued = inbox.accept(msg("s1", "b"), Timestamp::now()).unwrap();
        let done = inbox.accept(msg("s2", "c"), Timestamp::now()).unwrap();
        // `running`: one crashed attempt, then the one the stop cuts off.
        inbox.begin_attempt(&running.inbox_id).unwrap();
        assert_eq!(inbox.begin_attempt(&running.inbox_id).unwrap().attempts, 2);
        inbox.begin_attempt(&done.inbox_id).unwrap();
        inbox
            .mark_delivered(&done.inbox_id, ReplyAck::Channel)
            .unwrap();
        assert_eq!(inbox.refund_cut_off().await.unwrap(), 2);
        assert_eq!(inbox.refund_cut_off().await.unwrap(), 0);
        (running, queued, done)
    };
    let store = Store::open_in(dir.path()).unwrap();
    let inbox = store.inbox();
    let attempts = |id: &str| inbox.get(id).unwrap().unwrap().attempts;
    assert_eq!(attempts(&running.inbox_id), 1);
    assert_eq!(attempts(&queued.inbox_id), 0);
    assert_eq!(attempts(&done.inbox_id), 1);
    // The next start counts them again from there.
    assert_eq!(inbox.begin_attempt(&running.inbox_id).unwrap().attempts, 2);
    assert_eq!(inbox.begin_attempt(&queued.inbox_id).unwrap().attempts, 1);
}
