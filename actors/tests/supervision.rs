//! The root supervisor, one test per way a child can end, and the
//! housekeeper's maintenance across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, call_t};
use serde_json::json;
use silas_actors::housekeeper::{Housekeeper, HousekeeperArgs, HousekeeperMsg};
use silas_actors::restart::RestartPolicy;
use silas_actors::supervisor::{
    ChildSpec, RestartMode, RootSupervisor, SupervisorArgs, SupervisorMsg,
};
use silas_core::Timestamp;
use silas_core::model::context::ContextItem;
use silas_storage::Store;

/// A child that counts its starts and dies on request.
struct Flaky;

enum FlakyMsg {
    Panic,
    Fail,
    Stop,
    Generation(RpcReplyPort<u32>),
}

impl Actor for Flaky {
    type Msg = FlakyMsg;
    type State = u32;
    type Arguments = Arc<AtomicU32>;

    async fn pre_start(
        &self,
        _me: ActorRef<FlakyMsg>,
        starts: Arc<AtomicU32>,
    ) -> Result<u32, ActorProcessingErr> {
        Ok(starts.fetch_add(1, Ordering::SeqCst) + 1)
    }

    async fn handle(
        &self,
        me: ActorRef<FlakyMsg>,
        msg: FlakyMsg,
        generation: &mut u32,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FlakyMsg::Panic => panic!("injected panic"),
            FlakyMsg::Fail => return Err("injected error".into()),
            FlakyMsg::Stop => me.stop(Some("done".into())),
            FlakyMsg::Generation(reply) => {
                let _ = reply.send(*generation);
            }
        }
        Ok(())
    }
}

fn fast_policy(max: u32) -> RestartPolicy {
    RestartPolicy {
        max_restarts: max,
        within: Duration::from_secs(60),
        base_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    }
}

async fn start_flaky(
    mode: RestartMode,
    max: u32,
) -> (
    ActorRef<SupervisorMsg>,
    ractor::concurrency::JoinHandle<()>,
    Arc<AtomicU32>,
) {
    let starts = Arc::new(AtomicU32::new(0));
    let s = starts.clone();
    let spec = ChildSpec::new("flaky", mode, move || (Flaky, s.clone()));
    let (sup, join) = Actor::spawn(
        None,
        RootSupervisor,
        SupervisorArgs {
            children: vec![spec],
            policy: fast_policy(max),
        },
    )
    .await
    .unwrap();
    (sup, join, starts)
}

/// The current child, found through the supervisor's children.
fn child(sup: &ActorRef<SupervisorMsg>) -> ActorRef<FlakyMsg> {
    let cells = sup.get_children();
    assert_eq!(cells.len(), 1, "expected exactly one child");
    cells[0].clone().into()
}

async fn wait_for_generation(sup: &ActorRef<SupervisorMsg>, want: u32) {
    for _ in 0..200 {
        let cells = sup.get_children();
        if cells.len() == 1 {
            let c: ActorRef<FlakyMsg> = cells[0].clone().into();
            if let Ok(g) = call_t!(c, FlakyMsg::Generation, 200)
                && g == want
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("child generation {want} never appeared");
}

async fn restarts(sup: &ActorRef<SupervisorMsg>) -> u32 {
    call_t!(sup, SupervisorMsg::Status, 1000).unwrap()[0].restarts
}

#[tokio::test]
async fn panicking_child_is_restarted() {
    let (sup, _join, starts) = start_flaky(RestartMode::Permanent, 5).await;
    child(&sup).cast(FlakyMsg::Panic).unwrap();
    wait_for_generation(&sup, 2).await;
    assert_eq!(starts.load(Ordering::SeqCst), 2);
    assert_eq!(restarts(&sup).await, 1);
    assert_eq!(sup.get_status(), ActorStatus::Running);
    sup.stop(None);
}

#[tokio::test]
async fn erroring_child_is_restarted() {
    let (sup, _join, _starts) = start_flaky(RestartMode::Transient, 5).await;
    child(&sup).cast(FlakyMsg::Fail).unwrap();
    wait_for_generation(&sup, 2).await;
    assert_eq!(restarts(&sup).await, 1);
    sup.stop(None);
}

#[tokio::test]
async fn permanent_child_that_stops_is_restarted_transient_is_not() {
    let (sup, _join, _) = start_flaky(RestartMode::Permanent, 5).await;
    child(&sup).cast(FlakyMsg::Stop).unwrap();
    wait_for_generation(&sup, 2).await;
    sup.stop(None);

    let (sup, _join, starts) = start_flaky(RestartMode::Transient, 5).await;
    child(&sup).cast(FlakyMsg::Stop).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    let st = call_t!(sup, SupervisorMsg::Status, 1000).unwrap();
    assert!(!st[0].running);
    assert_eq!(st[0].restarts, 0);
    sup.stop(None);
}

#[tokio::test]
async fn crash_loop_escalates_by_stopping_the_supervisor() {
    let (sup, join, starts) = start_flaky(RestartMode::Permanent, 2).await;
    for generation in 1..=3u32 {
        wait_for_generation(&sup, generation).await;
        child(&sup).cast(FlakyMsg::Panic).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), join)
        .await
        .expect("supervisor did not escalate")
        .unwrap();
    assert_eq!(sup.get_status(), ActorStatus::Stopped);
    assert_eq!(
        starts.load(Ordering::SeqCst),
        3,
        "no restart after the limit"
    );
}

fn chron(at: Timestamp) -> ContextItem {
    serde_json::from_value(json!({
        "ctx_id": format!("c{}", at.as_micros()), "zone": "chronicle", "content": "hi", "token_count": 1,
        "created_at": at, "turn_number": 1, "source": "channel:web", "taint": "owner", "kind": "message",
    }))
    .unwrap()
}

#[tokio::test]
async fn housekeeper_prunes_checkpoints_and_rebuilds_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let now = Timestamp::now();
    store
        .chronicle()
        .append("owner", &chron(now.minus(chrono_days(200))))
        .unwrap();
    store.chronicle().append("owner", &chron(now)).unwrap();
    store.audit().log("test.event", Default::default()).unwrap();
    let nonces = store.nonces();
    use silas_storage::NonceDomain;
    nonces
        .record(NonceDomain::Msg, "old", now.minus(chrono_days(1)))
        .unwrap();
    nonces.record(NonceDomain::Msg, "fresh", now).unwrap();
    // A message answered 200 days ago: its words go with the chronicle's.
    let inbox = store.inbox();
    let old = inbox
        .accept(
            silas_storage::NewInbound {
                scope_id: "owner".into(),
                channel: "web".into(),
                sender_id: "owner".into(),
                text: "an old confidence".into(),
                signed: None,
                connection_id: "c".into(),
                ip: None,
                owner_authenticated: true,
                dedup_key: None,
            },
            now.minus(chrono_days(200)),
        )
        .unwrap();
    inbox
        .record_response(&old.inbox_id, "noted", None, Vec::new())
        .unwrap();
    inbox
        .mark_delivered(&old.inbox_id, silas_storage::ReplyAck::Channel)
        .unwrap();

    let seal = silas_actors::audit_seal::OwnerSeal::new(std::sync::Arc::new(
        silas_keys::OwnerKey::generate().unwrap(),
    ));
    let args = HousekeeperArgs {
        store: store.clone(),
        retention_days: 90,
        nonce_ttl: Duration::from_secs(40 * 60),
        checkpoint_interval: Duration::from_secs(3600),
        signer: std::sync::Arc::new(seal.clone()),
        tick_every: Some(Duration::from_secs(3600)),
    };
    let (hk, join) = Actor::spawn(None, Housekeeper, args.clone()).await.unwrap();
    let r = call_t!(hk, HousekeeperMsg::RunNow, 2000).unwrap();
    assert_eq!(r.chronicle_pruned, 1);
    assert_eq!(r.nonces_pruned, 1);
    assert!(!nonces.is_used(NonceDomain::Msg, "old").unwrap());
    assert!(nonces.is_used(NonceDomain::Msg, "fresh").unwrap());
    let cp = r.checkpoint.expect("checkpoint written");
    assert_eq!(
        store
            .audit()
            .latest_checkpoint()
            .unwrap()
            .unwrap()
            .checkpoint_id,
        cp
    );
    assert_eq!(store.chronicle().get_recent("owner", 10).unwrap().len(), 1);
    let scrubbed = inbox.get(&old.inbox_id).unwrap().unwrap();
    assert_eq!(scrubbed.message.text, "", "{scrubbed:?}");
    let events: Vec<String> = store
        .audit()
        .tail(5)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert!(events.contains(&"chronicle.pruned".to_string()));

    // Nothing new: no second checkpoint.
    let r = call_t!(hk, HousekeeperMsg::RunNow, 2000).unwrap();
    assert_eq!(r, Default::default());
    hk.stop(None);
    join.await.unwrap();

    // A fresh instance (as after a restart) knows what is covered.
    let (hk, join) = Actor::spawn(None, Housekeeper, args).await.unwrap();
    assert_eq!(
        call_t!(hk, HousekeeperMsg::RunNow, 2000).unwrap(),
        Default::default()
    );
    store.audit().log("test.event", Default::default()).unwrap();
    assert!(
        call_t!(hk, HousekeeperMsg::RunNow, 2000)
            .unwrap()
            .checkpoint
            .is_some()
    );
    assert!(store.audit().verify_from_checkpoint(None).unwrap().valid);
    // The housekeeper's checkpoints are signed by its key and mirrored.
    let sealed = store.audit().verify_sealed(&seal).unwrap();
    assert_eq!(sealed.problem, None);
    assert_eq!(sealed.signed_checkpoints, 2);
    assert!(store.audit().head_mirror_path().is_file());
    hk.stop(None);
    join.await.unwrap();
}

fn chrono_days(d: i64) -> chrono::Duration {
    chrono::Duration::days(d)
}
