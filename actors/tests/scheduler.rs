//! The Scheduler actor over a real store and a manual clock: goal cycles are
//! dispatched on their cron schedule in the configured zone, registered jobs
//! survive a restart and fire, missed runs are coalesced into one catch-up,
//! housekeeping is driven by scheduler jobs, and a panicking scheduler is
//! restarted by the root supervisor and rebuilds its jobs from redb.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef, call_t};
use serde_json::json;
use silas_actors::approval::ApprovalService;
use silas_actors::housekeeper::{Housekeeper, HousekeeperArgs};
use silas_actors::restart::RestartPolicy;
use silas_actors::scheduler::{
    JobAction, JobSpec, ManualClock, Scheduler, SchedulerArgs, SchedulerConfigJobs, SchedulerEvent,
    SchedulerHandle, SchedulerMsg, parse_timezone,
};
use silas_actors::supervisor::{RootSupervisor, SupervisorArgs, SupervisorMsg};
use silas_actors::work::DispatchRequest;
use silas_core::Timestamp;
use silas_core::approval::{IssuePolicy, Subject};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope};
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_keys::OwnerKey;
use silas_storage::{NonceDomain, Store};
use tokio::sync::{broadcast, mpsc};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

/// Config jobs that stay out of the way unless a test wants them.
fn quiet_config() -> SchedulerConfigJobs {
    let day = Duration::from_secs(86_400);
    SchedulerConfigJobs {
        heartbeat: None,
        nonce_prune_every: day,
        retention_every: day,
        checkpoint_every: day,
        sync_every: day,
        default_health_check: "*/30 * * * *".into(),
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    store: Store,
    clock: Arc<ManualClock>,
    dispatch_tx: mpsc::Sender<DispatchRequest>,
    dispatch_rx: mpsc::Receiver<DispatchRequest>,
    events: broadcast::Sender<SchedulerEvent>,
    svc: ApprovalService,
}

impl Fx {
    fn new(start: &str) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let (dispatch_tx, dispatch_rx) = mpsc::channel(16);
        let key = Arc::new(OwnerKey::generate().unwrap());
        Fx {
            svc: ApprovalService::new(store.clone(), key, IssuePolicy::default()),
            _dir: dir,
            store,
            clock: ManualClock::new(ts(start)),
            dispatch_tx,
            dispatch_rx,
            events: broadcast::channel(64).0,
        }
    }

    fn args(&self, tz: &str, config_jobs: SchedulerConfigJobs) -> SchedulerArgs {
        SchedulerArgs {
            store: self.store.clone(),
            timezone: parse_timezone(tz).unwrap(),
            clock: self.clock.clone(),
            config_jobs,
            dispatch: Some(self.dispatch_tx.clone()),
            housekeeper: None,
            connections: None,
            events: self.events.clone(),
        }
    }

    async fn spawn(
        &self,
        args: SchedulerArgs,
    ) -> (ActorRef<SchedulerMsg>, tokio::task::JoinHandle<()>) {
        let (a, j) = Actor::spawn(None, Scheduler, args).await.unwrap();
        (a, tokio::spawn(async move { j.await.unwrap() }))
    }

    /// A goal as persisted after the owner approved it.
    fn goal(&self, id: &str, schedule: &str, approved: bool) -> WorkItem {
        let mut g: WorkItem = serde_json::from_value(json!({
            "id": id, "type": "goal", "title": "Keep the site up", "body": "Watch it.",
            "schedule": schedule,
            "verify": [{"name": "up", "run": "true", "expect": {"exit_code": 0}}],
        }))
        .unwrap();
        if approved {
            let decision: ApprovalDecision =
                serde_json::from_value(json!({"verdict": "approved", "approval_strength": "tap"}))
                    .unwrap();
            let tok = self
                .svc
                .issue_token(
                    Subject::WorkItem(&g),
                    &decision,
                    ApprovalScope::Standing,
                    &owner_origin(&self.svc),
                    Timestamp::now(),
                )
                .unwrap();
            g.approval_token = Some(tok);
        }
        self.store.work_items().save(&g).unwrap();
        g
    }

    fn audit(&self, event: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
        self.store
            .audit()
            .tail(10_000)
            .unwrap()
            .into_iter()
            .filter(|e| e.event == event)
            .map(|e| e.data)
            .collect()
    }
}

async fn next_dispatch(rx: &mut mpsc::Receiver<DispatchRequest>) -> DispatchRequest {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a dispatch within 5 s")
        .unwrap()
}

async fn no_dispatch(rx: &mut mpsc::Receiver<DispatchRequest>) {
    // Let the actor process whatever the clock change woke up.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(rx.try_recv().is_err(), "unexpected dispatch");
}

async fn next_fire(rx: &mut broadcast::Receiver<SchedulerEvent>, job: &str) -> SchedulerEvent {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let e = rx.recv().await.unwrap();
            let SchedulerEvent::Fired { job_id, .. } = &e;
            if job_id == job {
                return e;
            }
        }
    })
    .await
    .expect("the job fired within 5 s")
}

#[tokio::test]
async fn approved_goal_is_dispatched_on_its_schedule_and_others_never() {
    let mut f = Fx::new("2026-06-17T12:10:00Z");
    f.goal("goal-cron", "*/30 * * * *", true);
    f.goal("goal-unapproved", "*/30 * * * *", false);
    let mut paused = f.goal("goal-paused", "*/30 * * * *", true);
    paused.status = WorkItemStatus::Paused;
    f.store.work_items().save(&paused).unwrap();
    let (s, _j) = f.spawn(f.args("UTC", quiet_config())).await;

    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    let goal_jobs: Vec<&str> = jobs
        .iter()
        .filter(|j| matches!(j.action, JobAction::GoalCycle { .. }))
        .map(|j| j.job_id.as_str())
        .collect();
    assert_eq!(goal_jobs, ["goal:goal-cron"]);
    let job = jobs.iter().find(|j| j.job_id == "goal:goal-cron").unwrap();
    assert_eq!(job.next_fire, Some(ts("2026-06-17T12:30:00Z")));

    // Not yet due.
    f.clock.set(ts("2026-06-17T12:29:59Z"));
    no_dispatch(&mut f.dispatch_rx).await;
    // Due: one dispatch of that goal to the owner's scope.
    f.clock.set(ts("2026-06-17T12:30:00Z"));
    let d = next_dispatch(&mut f.dispatch_rx).await;
    assert_eq!(
        d,
        DispatchRequest {
            work_item_id: "goal-cron".into(),
            scope_id: "owner".into()
        }
    );
    no_dispatch(&mut f.dispatch_rx).await;
    // And again at the next slot.
    f.clock.set(ts("2026-06-17T13:00:00Z"));
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "goal-cron"
    );

    // Paused between fires: the fire re-checks and drops the job.
    let mut g = f.store.work_items().get("goal-cron").unwrap().unwrap();
    g.status = WorkItemStatus::Paused;
    f.store.work_items().save(&g).unwrap();
    f.clock.set(ts("2026-06-17T13:30:00Z"));
    no_dispatch(&mut f.dispatch_rx).await;
    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    assert!(jobs.iter().all(|j| j.job_id != "goal:goal-cron"));
    s.stop(None);
}

#[tokio::test]
async fn goal_approved_while_running_is_picked_up_by_the_store_sync() {
    let mut f = Fx::new("2026-06-17T12:00:00Z");
    let mut cfg = quiet_config();
    cfg.sync_every = Duration::from_secs(60);
    let (s, _j) = f.spawn(f.args("UTC", cfg)).await;
    let mut events = f.events.subscribe();
    f.goal("late-goal", "5 12 * * *", true);
    f.clock.set(ts("2026-06-17T12:01:00Z"));
    next_fire(&mut events, "config:store_sync").await;
    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    assert!(jobs.iter().any(|j| j.job_id == "goal:late-goal"));
    f.clock.set(ts("2026-06-17T12:05:00Z"));
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "late-goal"
    );
    s.stop(None);
}

#[tokio::test]
async fn weekday_schedule_in_the_configured_zone() {
    // 09:00 Vienna time, Monday to Friday. Saturday 2026-06-20, 10:00 UTC.
    let mut f = Fx::new("2026-06-20T10:00:00Z");
    f.goal("weekdays", "0 9 * * 1-5", true);
    let (s, _j) = f.spawn(f.args("Europe/Vienna", quiet_config())).await;
    let job = call_t!(s, SchedulerMsg::List, 2000)
        .unwrap()
        .into_iter()
        .find(|j| j.job_id == "goal:weekdays")
        .unwrap();
    // Not Saturday or Sunday: Monday 09:00 CEST = 07:00 UTC.
    assert_eq!(job.next_fire, Some(ts("2026-06-22T07:00:00Z")));
    f.clock.set(ts("2026-06-21T07:00:00Z"));
    no_dispatch(&mut f.dispatch_rx).await;
    f.clock.set(ts("2026-06-22T07:00:00Z"));
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "weekdays"
    );
    s.stop(None);
}

#[tokio::test]
async fn registered_job_survives_a_restart_and_fires() {
    let f = Fx::new("2026-06-17T12:00:00Z");
    let (s, j) = f.spawn(f.args("UTC", quiet_config())).await;
    let handle = SchedulerHandle { actor: s.clone() };
    handle
        .register(JobSpec {
            job_id: "api:ping".into(),
            action: JobAction::Heartbeat,
            schedule: "@every 10m".into(),
        })
        .await
        .unwrap();
    // A bad schedule is refused with a taxonomy code, not stored.
    let err = handle
        .register(JobSpec {
            job_id: "api:bad".into(),
            action: JobAction::Heartbeat,
            schedule: "0 9 * * 8".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(silas_core::Coded::code(&err).as_str(), "E_CFG_INVALID");
    s.stop(None);
    j.await.unwrap();

    // A new scheduler over the same store (as after a daemon restart).
    let (s, _j) = f.spawn(f.args("UTC", quiet_config())).await;
    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    let ping = jobs
        .iter()
        .find(|j| j.job_id == "api:ping")
        .expect("job kept");
    assert_eq!(ping.source, "api");
    assert_eq!(ping.next_fire, Some(ts("2026-06-17T12:10:00Z")));
    assert!(jobs.iter().all(|j| j.job_id != "api:bad"));
    let mut events = f.events.subscribe();
    f.clock.set(ts("2026-06-17T12:10:00Z"));
    let SchedulerEvent::Fired { catch_up, at, .. } = next_fire(&mut events, "api:ping").await;
    assert!(!catch_up);
    assert_eq!(at, ts("2026-06-17T12:10:00Z"));
    // The heartbeat is audited.
    assert_eq!(f.audit("scheduler.heartbeat").len(), 1);
    s.stop(None);
}

#[tokio::test]
async fn runs_missed_while_down_coalesce_into_one_catch_up() {
    let mut f = Fx::new("2026-06-17T08:00:00Z");
    f.goal("nightly", "*/30 * * * *", true);
    let mut cfg = quiet_config();
    cfg.heartbeat = Some("*/15 * * * *".into());
    let (s, j) = f.spawn(f.args("UTC", cfg.clone())).await;
    f.clock.set(ts("2026-06-17T08:30:00Z"));
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "nightly"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.stop(None);
    j.await.unwrap();
    let heartbeats_before = f.audit("scheduler.heartbeat").len();

    // Down from 08:30 to 11:10: 08:30 fired; 09:00 … 11:00 (5) missed.
    f.clock.set(ts("2026-06-17T11:10:00Z"));
    let mut events = f.events.subscribe();
    let (s, _j) = f.spawn(f.args("UTC", cfg)).await;
    // Exactly one catch-up cycle…
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "nightly"
    );
    let SchedulerEvent::Fired { catch_up, .. } = next_fire(&mut events, "goal:nightly").await;
    assert!(catch_up);
    no_dispatch(&mut f.dispatch_rx).await;
    // …audited with the count; the heartbeat's misses are skipped, not run.
    let missed = f.audit("scheduler.missed");
    let goal = missed
        .iter()
        .find(|d| d["job_id"] == "goal:nightly")
        .unwrap();
    assert_eq!(goal["missed"], 5);
    assert_eq!(goal["caught_up"], true);
    let hb = missed
        .iter()
        .find(|d| d["job_id"] == "config:heartbeat")
        .unwrap();
    assert_eq!(hb["caught_up"], false);
    assert_eq!(f.audit("scheduler.heartbeat").len(), heartbeats_before);
    // Then the normal schedule from now: 11:30.
    let job = call_t!(s, SchedulerMsg::List, 2000)
        .unwrap()
        .into_iter()
        .find(|j| j.job_id == "goal:nightly")
        .unwrap();
    assert_eq!(job.next_fire, Some(ts("2026-06-17T11:30:00Z")));
    assert_eq!(job.last_fired_at, Some(ts("2026-06-17T11:10:00Z")));
    s.stop(None);
}

#[tokio::test]
async fn always_on_goals_dispatch_on_start_only_on_the_ephemeral_lane() {
    let mut f = Fx::new("2026-06-17T12:00:00Z");
    // Default lane for always_on is `stream`: Stream configuration.
    f.goal("chatbot", "always_on", true);
    let mut eph = f.goal("watcher", "always_on", true);
    eph.agent = silas_core::model::work::AgentLane::Ephemeral;
    f.store.work_items().save(&eph).unwrap();
    let (s, _j) = f.spawn(f.args("UTC", quiet_config())).await;
    assert_eq!(
        next_dispatch(&mut f.dispatch_rx).await.work_item_id,
        "watcher"
    );
    no_dispatch(&mut f.dispatch_rx).await;
    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    for id in ["goal:chatbot", "goal:watcher"] {
        let j = jobs.iter().find(|j| j.job_id == id).unwrap();
        assert_eq!(j.next_fire, None, "{id}: no timer");
    }
    // A day later nothing more is dispatched.
    f.clock.set(ts("2026-06-18T12:00:00Z"));
    no_dispatch(&mut f.dispatch_rx).await;
    s.stop(None);
}

#[tokio::test]
async fn housekeeping_runs_as_scheduler_jobs() {
    let f = Fx::new("2026-06-17T12:00:00Z");
    let now = Timestamp::now();
    let nonces = f.store.nonces();
    nonces
        .record(
            NonceDomain::Msg,
            "old",
            now.minus(chrono::Duration::days(1)),
        )
        .unwrap();
    nonces.record(NonceDomain::Msg, "fresh", now).unwrap();
    let (hk, _hj) = Actor::spawn(
        Some("test.housekeeper".into()),
        Housekeeper,
        HousekeeperArgs {
            store: f.store.clone(),
            retention_days: 90,
            nonce_ttl: Duration::from_secs(40 * 60),
            checkpoint_interval: Duration::from_secs(3600),
            signer: std::sync::Arc::new(silas_actors::audit_seal::OwnerSeal::new(
                std::sync::Arc::new(silas_keys::OwnerKey::generate().unwrap()),
            )),
            tick_every: None,
        },
    )
    .await
    .unwrap();
    let mut cfg = quiet_config();
    cfg.nonce_prune_every = Duration::from_secs(600);
    let mut args = f.args("UTC", cfg);
    args.housekeeper = Some("test.housekeeper".into());
    let (s, _j) = f.spawn(args).await;
    let mut events = f.events.subscribe();
    // No timer of its own: nothing pruned until the scheduler says so.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(nonces.is_used(NonceDomain::Msg, "old").unwrap());
    f.clock.set(ts("2026-06-17T12:10:00Z"));
    next_fire(&mut events, "config:nonce_prune").await;
    for _ in 0..100 {
        if !nonces.is_used(NonceDomain::Msg, "old").unwrap() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!nonces.is_used(NonceDomain::Msg, "old").unwrap());
    assert!(nonces.is_used(NonceDomain::Msg, "fresh").unwrap());
    s.stop(None);
    hk.stop(None);
}

#[tokio::test]
async fn panicking_scheduler_is_restarted_and_rebuilds_its_jobs() {
    let f = Fx::new("2026-06-17T12:00:00Z");
    let spec = Scheduler::child_spec(f.args("UTC", quiet_config()));
    let (sup, _join) = Actor::spawn(
        None,
        RootSupervisor,
        SupervisorArgs {
            children: vec![spec],
            policy: RestartPolicy {
                max_restarts: 3,
                within: Duration::from_secs(60),
                base_backoff: Duration::from_millis(5),
                max_backoff: Duration::from_millis(20),
            },
        },
    )
    .await
    .unwrap();
    let first = SchedulerHandle::find().expect("registered as silas.scheduler");
    first
        .register(JobSpec {
            job_id: "api:check".into(),
            action: JobAction::Heartbeat,
            schedule: "@every 5m".into(),
        })
        .await
        .unwrap();
    let first_id = first.actor.get_id();
    first.actor.cast(SchedulerMsg::InjectPanic).unwrap();

    let mut restarted = None;
    for _ in 0..200 {
        if let Some(h) = SchedulerHandle::find()
            && h.actor.get_id() != first_id
        {
            restarted = Some(h);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let h = restarted.expect("a new scheduler instance");
    let status = call_t!(sup, SupervisorMsg::Status, 1000).unwrap();
    assert_eq!(status[0].label, "scheduler");
    assert_eq!(status[0].restarts, 1);
    // Rebuilt from redb: the job is there and still fires.
    let jobs = h.list().await;
    assert!(jobs.iter().any(|j| j.job_id == "api:check"));
    let mut events = f.events.subscribe();
    f.clock.set(ts("2026-06-17T12:05:00Z"));
    next_fire(&mut events, "api:check").await;
    sup.stop(None);
}

/// Registers a test connection as owner-authenticated with the engine and
/// returns it as the origin of the owner's answers.
fn owner_origin(
    svc: &silas_actors::approval::ApprovalService,
) -> silas_actors::approval::AnswerOrigin {
    svc.owner_sessions().authenticated("test", "owner-device");
    silas_actors::approval::AnswerOrigin::new("test", "owner-device")
}
