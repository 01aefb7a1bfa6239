//! Card lifecycle through a real Stream (§8.1, §4.1.1): a card opened with
//! `StreamHandle::ask` is answered once, only from its scope, only with its
//! own response type; past its deadline, on disconnect, with no connection
//! and on shutdown it resolves to its safe default — each audited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Turns, approvals, pending_card, spawn_stream, wait_for_card};
use serde_json::{Value, json};
use silas_actors::cards::{CardKind, CardRejection, CardResponse, CardTimeouts, Resolution};
use silas_actors::channel::{BoxFuture, ChannelError, ChannelSink, MemorySink, Outbound};
use silas_actors::restart::RestartPolicy;
use silas_actors::stream::StreamHandle;
use silas_actors::turn::pipeline::TurnDeps;
use silas_core::config::Config;
use silas_llm::Agents;
use silas_llm::provider::Provider;
use silas_storage::{PendingCard, Store};

struct SwitchSink {
    inner: MemorySink,
    down: Arc<AtomicBool>,
}

impl ChannelSink for SwitchSink {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(ChannelError::Disconnected("no connection".into())) });
        }
        self.inner.send(out)
    }
}

struct Rt {
    stream: StreamHandle,
    sink: MemorySink,
    down: Arc<AtomicBool>,
    store: Store,
    timeouts: CardTimeouts,
    _dir: tempfile::TempDir,
    _turns: Turns,
}

async fn start(gate_timeout_s: u64) -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("silas.redb")).unwrap();
    let cfg = Arc::new(Config {
        data_dir: dir.path().to_path_buf(),
        approval: silas_core::config::ApprovalConfig {
            gate_card_timeout_seconds: gate_timeout_s,
            ..Default::default()
        },
        ..Default::default()
    });
    let p: Arc<dyn Provider> = Arc::new(silas_llm::select::offline_provider(&cfg));
    let agents = Agents::from_config(&cfg, |_| Ok((p.clone(), "rules".into()))).unwrap();
    let sink = MemorySink::new();
    let down = Arc::new(AtomicBool::new(false));
    let deps = TurnDeps::standard(
        store.clone(),
        cfg.clone(),
        agents,
        approvals(&store, &cfg),
        Arc::new(SwitchSink {
            inner: sink.clone(),
            down: down.clone(),
        }),
    );
    let turns = spawn_stream(deps, RestartPolicy::default()).await;
    Rt {
        stream: turns.stream.clone(),
        sink,
        down,
        store,
        timeouts: CardTimeouts::from_config(&cfg),
        _dir: dir,
        _turns: turns,
    }
}

/// A gate card answer.
fn verdict(v: &str) -> CardResponse {
    CardResponse::Verdict { verdict: v.into() }
}

fn card(kind: CardKind, id: &str, payload: Value) -> PendingCard {
    pending_card(kind, id, "owner", payload)
}

fn audited(rt: &Rt, event: &str, id: &str) -> bool {
    rt.store
        .audit()
        .tail(500)
        .unwrap()
        .iter()
        .any(|e| e.event == event && e.data.get("request_id") == Some(&Value::from(id)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_is_answered_once_from_its_scope_with_its_type() {
    let rt = start(120).await;
    let stream = rt.stream.clone();
    let t = rt.timeouts;
    let ask = tokio::spawn(async move {
        stream
            .ask(
                card(CardKind::Gate, "g1", json!({"gate_name": "budget"})),
                &t,
            )
            .await
    });
    wait_for_card(&rt.sink, "g1").await;
    let approve = || verdict("approve");
    // Another scope cannot see it; another type cannot answer it.
    let e = rt
        .stream
        .answer_card(
            "ws-7",
            "g1",
            CardKind::Gate,
            approve(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert_eq!(e, Err(CardRejection::Unknown("g1".into())));
    let e = rt
        .stream
        .answer_card(
            "owner",
            "g1",
            CardKind::Decision,
            approve(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(e, Err(CardRejection::WrongType { .. })), "{e:?}");
    let e = rt
        .stream
        .answer_card(
            "owner",
            "g1",
            CardKind::Gate,
            verdict("sure"),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(e, Err(CardRejection::Invalid { .. })), "{e:?}");
    // The valid answer is recorded and reaches the requester.
    let ok = rt
        .stream
        .answer_card(
            "owner",
            "g1",
            CardKind::Gate,
            approve(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap();
    assert_eq!(ok.resolution, Resolution::Answered);
    let got = ask.await.unwrap().unwrap();
    assert_eq!(got.response, approve());
    assert!(got.answered());
    assert!(audited(&rt, "card_answered", "g1"));
    // A second answer changes nothing.
    let again = rt
        .stream
        .answer_card(
            "owner",
            "g1",
            CardKind::Gate,
            verdict("block"),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert_eq!(again, Err(CardRejection::AlreadyAnswered("g1".into())));
    assert!(
        rt.store
            .records::<PendingCard>()
            .get("g1")
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_gate_card_blocks_at_its_timeout_without_an_answer() {
    let rt = start(1).await;
    let started = std::time::Instant::now();
    let got = rt
        .stream
        .ask(card(CardKind::Gate, "g2", json!({})), &rt.timeouts)
        .await
        .unwrap();
    assert_eq!(got.resolution, Resolution::TimedOut);
    assert_eq!(got.response, verdict("block"));
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(audited(&rt, "card_timed_out", "g2"));
    let late = rt
        .stream
        .answer_card(
            "owner",
            "g2",
            CardKind::Gate,
            verdict("approve"),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert_eq!(late, Err(CardRejection::AlreadyAnswered("g2".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_no_connection_and_shutdown_resolve_to_safe_defaults() {
    let rt = start(120).await;
    // The scope's last connection closes while a batch card waits.
    let stream = rt.stream.clone();
    let t = rt.timeouts;
    let ask = tokio::spawn(async move {
        stream
            .ask(
                card(CardKind::BatchReview, "b1", json!({"batch": {"items": []}})),
                &t,
            )
            .await
    });
    wait_for_card(&rt.sink, "b1").await;
    assert_eq!(rt.stream.scope_disconnected("owner").await.unwrap(), 1);
    let got = ask.await.unwrap().unwrap();
    assert_eq!(got.resolution, Resolution::Disconnected);
    assert_eq!(
        got.response,
        CardResponse::Batch {
            verdict: "decline".into(),
            selected_item_ids: vec![]
        }
    );
    assert!(audited(&rt, "card_declined_disconnected", "b1"));

    // No live connection at all: declined at once, not after 300 s.
    rt.down.store(true, Ordering::SeqCst);
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        rt.stream.ask(
            card(CardKind::AutonomyThreshold, "a1", json!({})),
            &rt.timeouts,
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got.response, verdict("decline"));
    rt.down.store(false, Ordering::SeqCst);

    // Shutdown: the waiting suggestion becomes "not now".
    let stream = rt.stream.clone();
    let ask = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Suggestion, "s1", json!({})), &t)
            .await
    });
    wait_for_card(&rt.sink, "s1").await;
    assert!(
        rt.stream
            .drain(Duration::from_secs(2))
            .await
            .unwrap()
            .finished()
    );
    let got = ask.await.unwrap().unwrap();
    assert_eq!(got.resolution, Resolution::Shutdown);
    assert_eq!(
        got.response,
        CardResponse::Choice {
            selected_value: Some("not_now".into()),
            freetext: None
        }
    );
    assert!(audited(&rt, "card_declined_shutdown", "s1"));
    assert!(rt.store.records::<PendingCard>().list().unwrap().is_empty());
}

/// A finished task's apply card as the executor stores it.
fn apply_card(id: &str) -> PendingCard {
    let payload = json!({
        "work_item_id": "t-1", "title": "fix the sign", "phase": "apply",
        "workspace": "clock", "path": "/home/owner/clock", "plan_hash": "p",
        "changes_sha256": "c",
        "files": [{"path": "clock.py", "kind": "modified", "added": 1, "removed": 1}],
        "total_added": 1, "total_removed": 1,
    });
    let mut card = common::pending_card(CardKind::Suggestion, id, "owner", json!({}));
    card.card =
        silas_core::cards::CardPayload::from_parts(silas_core::cards::CHANGES_CARD, payload)
            .unwrap();
    card
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_card_outlives_the_owner_closing_the_tab() {
    let rt = start(120).await;
    rt.store
        .records::<PendingCard>()
        .put(&apply_card("card-apply-t-1"))
        .unwrap();
    let stream = rt.stream.clone();
    let t = rt.timeouts;
    let ask = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Suggestion, "s2", json!({})), &t)
            .await
    });
    wait_for_card(&rt.sink, "s2").await;
    // The last connection closes: the waiting suggestion resolves, the
    // apply card (nobody waits on it) stays for the owner's return.
    assert_eq!(rt.stream.scope_disconnected("owner").await.unwrap(), 1);
    assert_eq!(
        ask.await.unwrap().unwrap().resolution,
        Resolution::Disconnected
    );
    let kept = rt
        .store
        .records::<PendingCard>()
        .get("card-apply-t-1")
        .unwrap();
    assert!(kept.is_some(), "the apply card was dropped on disconnect");
    assert!(!audited(
        &rt,
        "card_declined_disconnected",
        "card-apply-t-1"
    ));
    assert!(audited(&rt, "card_declined_disconnected", "s2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_input_request_card_carries_metadata_only() {
    let rt = start(120).await;
    let stream = rt.stream.clone();
    let t = rt.timeouts;
    let ask = tokio::spawn(async move {
        stream
            .request_secure_input(
                "owner",
                "GitHub token",
                Some("ghp_…"),
                json!({"instructions": "Create a token with repo scope", "help_url": null}),
                &t,
            )
            .await
    });
    let mut sent = None;
    for _ in 0..200 {
        sent = rt.sink.sent().into_iter().find_map(|o| match o {
            Outbound::Card { card } if card.card_type() == "secure_input_request" => Some(card),
            _ => None,
        });
        if sent.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let card = sent.expect("secure input card sent");
    assert_eq!(common::payload_of(&card)["label"], "GitHub token");
    // The ref is the card's request id; the typed card carries no copy.
    assert!(common::payload_of(&card).get("ref_id").is_none());
    assert!(card.request_id.starts_with("sec-"));
    rt.stream
        .answer_card(
            "owner",
            &card.request_id,
            CardKind::SecureInput,
            CardResponse::SecureInput { success: true },
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap();
    let got = ask.await.unwrap().unwrap();
    assert_eq!(got.response, CardResponse::SecureInput { success: true });
}

/// §5.10.4: a connection whose recovery failed reaches the owner as a
/// `connection_failure` card with the script's options; the owner's choice
/// is validated against them and audited (issue #17 item 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_failure_reaches_the_owner_as_a_card() {
    use silas_actors::connection::{ConnectionEvent, surface_failures};
    use silas_core::model::connections::{
        ConnectionFailure, ConnectionFailureType, RecoveryOption, RecoveryRiskLevel,
    };
    let rt = start(120).await;
    let (tx, rx) = tokio::sync::broadcast::channel(8);
    let handle = rt.stream.clone();
    tokio::spawn(surface_failures(
        rx,
        move || Some(handle.clone()),
        rt.store.clone(),
        rt.timeouts,
    ));
    tx.send(ConnectionEvent::Failure {
        connection_id: "gmail-work".into(),
        failure: ConnectionFailure {
            failure_type: ConnectionFailureType::TokenRevoked,
            service: "Gmail".into(),
            message: "access was revoked".into(),
            recovery_options: vec![RecoveryOption {
                action: "reauth".into(),
                label: "Sign in again".into(),
                description: "Run the device-code flow again".into(),
                risk_level: RecoveryRiskLevel::Low,
            }],
        },
    })
    .unwrap();
    let mut sent = None;
    for _ in 0..300 {
        sent = rt.sink.sent().into_iter().find_map(|o| match o {
            Outbound::Card { card } if card.card_type() == "connection_failure" => Some(card),
            _ => None,
        });
        if sent.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let card = sent.expect("the failure card reached the owner's channel");
    assert_eq!(card.scope_id, "owner");
    let p = common::payload_of(&card);
    assert_eq!(p["service"], "Gmail");
    assert_eq!(p["failure_type"], "token_revoked");
    assert_eq!(p["recovery_options"][0]["action"], "reauth");
    // An action it did not offer is refused; an offered one is taken.
    let answer = |action: &str| {
        let stream = rt.stream.clone();
        let id = card.request_id.clone();
        let action = action.to_owned();
        async move {
            stream
                .answer_card(
                    "owner",
                    &id,
                    CardKind::ConnectionFailure,
                    CardResponse::Recovery {
                        selected_action: action,
                    },
                    silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
                )
                .await
        }
    };
    assert!(answer("delete_everything").await.is_err());
    answer("reauth").await.unwrap();
    let mut answered = false;
    for _ in 0..300 {
        if audited(&rt, "connection_failure_answered", &card.request_id) {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(answered, "the owner's choice is audited");
}
