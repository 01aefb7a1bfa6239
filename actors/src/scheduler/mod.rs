//! The Scheduler (the spec's APScheduler wrapper; §5.1 startup steps 5–6,
//! §5.1.6 heartbeat, §5.2.3 goal cycles, §4.5 nonce pruning, §4.14
//! retention, §5.10.3 connection health checks and refreshes). It owns the
//! registered jobs and *when* they fire; what a fire does belongs to the
//! actor it is sent to.
//!
//! * [`cron_expr`] — standard 5-field cron on the `cron` crate (weekday
//!   translation, time zone, DST rules). Pure.
//! * [`policy`] — schedule strings ([`Trigger`]), next fire, and the
//!   missed-run policy ([`plan_on_start`]: coalesce into at most one catch-up
//!   run). Pure.
//! * [`Scheduler`] — the actor. One message enum ([`SchedulerMsg`]), one
//!   state struct ([`SchedulerState`]).
//!
//! **Jobs.** Every job is a [`ScheduledJob`] row in redb (`scheduled_jobs`),
//! updated with `last_fired_at` on each fire, so registered jobs and their
//! history survive a restart. Sources: `config` (heartbeat when
//! `suggestions.enabled`, nonce pruning every `nonce_store.
//! prune_interval_minutes`, chronicle retention hourly, audit checkpoints
//! every `audit.checkpoint_interval_minutes`, and a store sync every
//! minute), `goal` (every approved goal with a `schedule`), `connection`
//! (every active connection's `health_check` cron) and `api` (jobs
//! registered by message, e.g. a connection's one-shot token refresh).
//! Config, goal and connection jobs are *reconciled* from config and the
//! store on start and on every sync — added, re-timed or removed — so the
//! store stays the single source of truth and no other actor has to tell
//! the scheduler about a new goal.
//!
//! **Goals.** A goal is scheduled when it has a schedule, carries an approval
//! token, and is not `paused`, `done` or `blocked`: a goal that was never
//! approved never runs its checks on a timer. Each cron fire re-checks that
//! and sends a [`DispatchRequest`] for the goal (the WorkExecutor runs one
//! goal cycle, §5.2.3). `always_on` goals have no timer: on the `stream`
//! lane they are Stream configuration and are never dispatched (§3.3); on
//! the `ephemeral` lane they are dispatched once whenever the scheduler
//! starts (the WorkExecutor ignores a dispatch for an item already running).
//!
//! **Heartbeat.** §5.1.6 has the heartbeat run the suggestion engine, which
//! does not exist yet; the heartbeat is an audited `scheduler.heartbeat`
//! event plus a [`SchedulerEvent::Fired`] on the broadcast channel that the
//! suggestion engine will subscribe to. Missed heartbeats are skipped.
//!
//! **Timing.** One tokio task sleeps until the earliest next fire (at most
//! [`MAX_SLEEP`], so a wall-clock jump is noticed within a minute), then
//! casts [`SchedulerMsg::Wake`]. Time comes from a [`Clock`], so tests drive
//! a [`ManualClock`] instead of sleeping.
//!
//! **Missed runs while the daemon was down:** see [`policy`]. Goal cycles,
//! health checks, refreshes and maintenance catch up once; heartbeats and
//! the store sync are skipped. Each job with misses is audited as
//! `scheduler.missed` with the count and what was done.
//!
//! **Restart policy:** permanent child of the root supervisor. `pre_start`
//! reloads every job from redb and reconciles, so a panic loses nothing
//! but the current sleep.

pub mod cron_expr;
pub mod policy;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use silas_core::model::connections::{Connection, ConnectionStatus};
use silas_core::model::work::{AgentLane, WorkItem, WorkItemStatus, WorkItemType};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{ScheduledJob, Store, StoreError};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

pub use cron_expr::{
    CronError, CronExpr, config_errors, parse_timezone, unread_tz, unread_tz_warning, zone_name,
};
pub use policy::{MissedRunPolicy, StartupPlan, Trigger, plan_on_start};

use crate::housekeeper::{HousekeeperMsg, HousekeepingJob};
use crate::work::DispatchRequest;

/// Registered name of the daemon's scheduler.
pub const SCHEDULER_NAME: &str = "silas.scheduler";
/// Longest single sleep; the scheduler re-reads the clock at least this often.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Scope goal-cycle results are reported to (the owner's stream).
pub const GOAL_SCOPE: &str = "owner";

// ------------------------------------------------------------------ clock

/// Where the scheduler gets the time, and how it waits for a moment.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
    /// Resolves at `t` or earlier (callers re-check the time).
    fn sleep_until(&self, t: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The system clock; sleeps are capped at [`MAX_SLEEP`].
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, t: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let wait = (t.datetime() - Timestamp::now().datetime())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(MAX_SLEEP);
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when told to; sleepers wake when it passes their
/// moment. For tests of anything scheduled.
pub struct ManualClock {
    now: watch::Sender<Timestamp>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: watch::Sender::new(start),
        })
    }

    pub fn set(&self, t: Timestamp) {
        self.now.send_replace(t);
    }

    pub fn advance(&self, d: Duration) {
        let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        self.now.send_modify(|t| *t = t.plus(d));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, t: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|now| *now >= t).await;
        })
    }
}

// ------------------------------------------------------------------ jobs

/// What a job does when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobAction {
    /// Dispatch one cycle of this goal to the WorkExecutor.
    GoalCycle { work_item_id: String },
    /// The proactive heartbeat (§5.1.6).
    Heartbeat,
    /// Ask the Housekeeper to do one kind of maintenance.
    Housekeeping(HousekeepingJob),
    /// Ask the ConnectionManager to health-check a connection.
    ConnectionHealth { connection_id: String },
    /// Ask the ConnectionManager to refresh a connection's token.
    ConnectionRefresh { connection_id: String },
    /// Reconcile goal and connection jobs with the store.
    StoreSync,
}

impl JobAction {
    /// The stored `(action, target)` pair.
    pub fn to_parts(&self) -> (&'static str, Option<String>) {
        match self {
            JobAction::GoalCycle { work_item_id } => ("goal_cycle", Some(work_item_id.clone())),
            JobAction::Heartbeat => ("heartbeat", None),
            JobAction::Housekeeping(HousekeepingJob::ChronicleRetention) => {
                ("chronicle_retention", None)
            }
            JobAction::Housekeeping(HousekeepingJob::NoncePrune) => ("nonce_prune", None),
            JobAction::Housekeeping(HousekeepingJob::AuditCheckpoint) => ("audit_checkpoint", None),
            JobAction::ConnectionHealth { connection_id } => {
                ("connection_health", Some(connection_id.clone()))
            }
            JobAction::ConnectionRefresh { connection_id } => {
                ("connection_refresh", Some(connection_id.clone()))
            }
            JobAction::StoreSync => ("store_sync", None),
        }
    }

    pub fn from_parts(action: &str, target: Option<&str>) -> Option<JobAction> {
        let t = || target.map(str::to_owned);
        Some(match action {
            "goal_cycle" => JobAction::GoalCycle { work_item_id: t()? },
            "heartbeat" => JobAction::Heartbeat,
            "chronicle_retention" => JobAction::Housekeeping(HousekeepingJob::ChronicleRetention),
            "nonce_prune" => JobAction::Housekeeping(HousekeepingJob::NoncePrune),
            "audit_checkpoint" => JobAction::Housekeeping(HousekeepingJob::AuditCheckpoint),
            "connection_health" => JobAction::ConnectionHealth {
                connection_id: t()?,
            },
            "connection_refresh" => JobAction::ConnectionRefresh {
                connection_id: t()?,
            },
            "store_sync" => JobAction::StoreSync,
            _ => return None,
        })
    }

    /// What happens to fires missed while the daemon was down.
    pub fn missed_run_policy(&self) -> MissedRunPolicy {
        match self {
            // A check-in is only useful on time; the sync runs at start anyway.
            JobAction::Heartbeat | JobAction::StoreSync => MissedRunPolicy::Skip,
            _ => MissedRunPolicy::CatchUpOnce,
        }
    }
}

/// A job to register (source `api`) or reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub job_id: String,
    pub action: JobAction,
    /// A schedule string in [`Trigger::parse`] syntax.
    pub schedule: String,
}

/// A registered job as reported by [`SchedulerMsg::List`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: String,
    pub action: JobAction,
    pub schedule: String,
    pub source: String,
    pub last_fired_at: Option<Timestamp>,
    pub next_fire: Option<Timestamp>,
}

/// Published for every fire (the suggestion engine's heartbeat feed, tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedulerEvent {
    Fired {
        job_id: String,
        action: JobAction,
        at: Timestamp,
        /// A coalesced catch-up for runs missed while down.
        catch_up: bool,
    },
}

/// Why the scheduler refused or failed something.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Schedule(#[from] CronError),
    #[error("scheduler store: {0}")]
    Store(#[from] StoreError),
    /// The scheduler actor did not answer (stopped or restarting).
    #[error("scheduler unavailable: {0}")]
    Unavailable(String),
}

impl Coded for SchedulerError {
    fn code(&self) -> ErrorCode {
        match self {
            SchedulerError::Schedule(e) => e.code(),
            SchedulerError::Store(e) => e.code(),
            // The actor answers through its mailbox, the runtime's channel.
            SchedulerError::Unavailable(_) => ErrorCode::EChannelDisconnected,
        }
    }
}

// ------------------------------------------------------------------ actor

/// The config-derived jobs (§11 keys), computed by the daemon.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfigJobs {
    /// `suggestions.heartbeat_cron` when suggestions are enabled.
    pub heartbeat: Option<String>,
    pub nonce_prune_every: Duration,
    pub retention_every: Duration,
    pub checkpoint_every: Duration,
    /// How often goals and connections are re-read from the store.
    pub sync_every: Duration,
    /// `connections.health_check_default`, for connections without one.
    pub default_health_check: String,
}

impl SchedulerConfigJobs {
    pub fn from_config(cfg: &silas_core::config::Config) -> SchedulerConfigJobs {
        let minutes = |m: u32| Duration::from_secs(u64::from(m.max(1)) * 60);
        SchedulerConfigJobs {
            heartbeat: cfg
                .suggestions
                .enabled
                .then(|| cfg.suggestions.heartbeat_cron.clone()),
            nonce_prune_every: minutes(cfg.nonce_store.prune_interval_minutes),
            retention_every: Duration::from_secs(3600),
            checkpoint_every: minutes(cfg.audit.checkpoint_interval_minutes),
            sync_every: Duration::from_secs(60),
            default_health_check: cfg.connections.health_check_default.clone(),
        }
    }

    fn specs(&self) -> Vec<JobSpec> {
        let mut v = vec![
            JobSpec {
                job_id: "config:store_sync".into(),
                action: JobAction::StoreSync,
                schedule: Trigger::every(self.sync_every),
            },
            JobSpec {
                job_id: "config:nonce_prune".into(),
                action: JobAction::Housekeeping(HousekeepingJob::NoncePrune),
                schedule: Trigger::every(self.nonce_prune_every),
            },
            JobSpec {
                job_id: "config:chronicle_retention".into(),
                action: JobAction::Housekeeping(HousekeepingJob::ChronicleRetention),
                schedule: Trigger::every(self.retention_every),
            },
            JobSpec {
                job_id: "config:audit_checkpoint".into(),
                action: JobAction::Housekeeping(HousekeepingJob::AuditCheckpoint),
                schedule: Trigger::every(self.checkpoint_every),
            },
        ];
        if let Some(cron) = &self.heartbeat {
            v.push(JobSpec {
                job_id: "config:heartbeat".into(),
                action: JobAction::Heartbeat,
                schedule: cron.clone(),
            });
        }
        v
    }
}

#[derive(Clone)]
pub struct SchedulerArgs {
    pub store: Store,
    /// `scheduler.timezone`, parsed.
    pub timezone: Tz,
    pub clock: Arc<dyn Clock>,
    pub config_jobs: SchedulerConfigJobs,
    /// Goal cycles go here (the WorkExecutor's dispatch channel).
    pub dispatch: Option<mpsc::Sender<DispatchRequest>>,
    /// Registered name of the Housekeeper.
    pub housekeeper: Option<String>,
    /// Registered name of the ConnectionManager.
    pub connections: Option<String>,
    pub events: broadcast::Sender<SchedulerEvent>,
}

/// Messages to the Scheduler.
pub enum SchedulerMsg {
    /// The timer: fire what is due, then sleep again.
    Wake,
    /// Register (or replace) a job from another actor; source `api`.
    Register(JobSpec, RpcReplyPort<Result<(), SchedulerError>>),
    /// Remove a job.
    Unregister(String),
    /// Reconcile goal and connection jobs with the store now.
    Sync,
    /// Every registered job.
    List(RpcReplyPort<Vec<JobInfo>>),
    /// Fault injection for supervision tests: panics in the handler.
    InjectPanic,
}

struct LiveJob {
    record: ScheduledJob,
    action: JobAction,
    trigger: Trigger,
    next: Option<Timestamp>,
}

pub struct SchedulerState {
    args: SchedulerArgs,
    jobs: BTreeMap<String, LiveJob>,
    timer: Option<JoinHandle<()>>,
    /// Fires decided in `pre_start`, run in `post_start`: (job id, catch-up).
    startup_fires: Vec<(String, bool)>,
}

pub struct Scheduler;

impl Scheduler {
    /// The daemon's child spec: permanent, registered as [`SCHEDULER_NAME`].
    pub fn child_spec(args: SchedulerArgs) -> crate::supervisor::ChildSpec {
        crate::supervisor::ChildSpec {
            label: "scheduler".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: Arc::new(move |parent| {
                let args = args.clone();
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some(SCHEDULER_NAME.into()), Scheduler, args, parent)
                            .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

/// Whether a goal may run on a timer (pure).
pub fn goal_is_schedulable(goal: &WorkItem) -> bool {
    goal.kind == WorkItemType::Goal
        && goal
            .schedule
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty())
        && goal.approval_token.is_some()
        && !matches!(
            goal.status,
            WorkItemStatus::Paused | WorkItemStatus::Done | WorkItemStatus::Blocked
        )
}

fn obj(v: serde_json::Value) -> silas_core::model::JsonObject {
    match v {
        serde_json::Value::Object(o) => o,
        _ => Default::default(),
    }
}

impl SchedulerState {
    fn now(&self) -> Timestamp {
        self.args.clock.now()
    }

    fn audit(&self, event: &str, data: serde_json::Value) {
        if let Err(e) = self.args.store.audit().log(event, obj(data)) {
            tracing::error!(code = %e.code(), "scheduler audit write failed: {e}");
        }
    }

    fn live(record: ScheduledJob) -> Result<LiveJob, SchedulerError> {
        let trigger = Trigger::parse(&record.schedule)?;
        let action =
            JobAction::from_parts(&record.action, record.target.as_deref()).ok_or_else(|| {
                CronError::Invalid {
                    expr: record.schedule.clone(),
                    reason: format!("unknown job action {:?}", record.action),
                }
            })?;
        Ok(LiveJob {
            record,
            action,
            trigger,
            next: None,
        })
    }

    /// Add or re-time a job. An unchanged job keeps its history; a new or
    /// re-timed one counts from now. Returns whether it is new.
    fn upsert(&mut self, spec: &JobSpec, source: &str) -> Result<bool, SchedulerError> {
        let trigger = Trigger::parse(&spec.schedule)?;
        let now = self.now();
        let (action, target) = spec.action.to_parts();
        if let Some(j) = self.jobs.get(&spec.job_id)
            && j.record.schedule == spec.schedule
            && j.action == spec.action
        {
            return Ok(false);
        }
        let record = ScheduledJob {
            job_id: spec.job_id.clone(),
            action: action.to_owned(),
            target,
            schedule: spec.schedule.clone(),
            source: source.to_owned(),
            created_at: now,
            last_fired_at: self
                .jobs
                .get(&spec.job_id)
                .and_then(|j| j.record.last_fired_at),
        };
        self.args.store.records::<ScheduledJob>().put(&record)?;
        let next = trigger.next_after(&self.args.timezone, now);
        let is_new = !self.jobs.contains_key(&spec.job_id);
        self.jobs.insert(
            spec.job_id.clone(),
            LiveJob {
                record,
                action: spec.action.clone(),
                trigger,
                next,
            },
        );
        Ok(is_new)
    }

    fn remove(&mut self, job_id: &str) -> Result<(), SchedulerError> {
        self.jobs.remove(job_id);
        self.args.store.records::<ScheduledJob>().delete(job_id)?;
        Ok(())
    }

    /// Reconcile config, goal and connection jobs. Returns the ids of
    /// always-on ephemeral goals that are new (to dispatch once).
    fn sync(&mut self) -> Result<Vec<String>, SchedulerError> {
        let mut wanted: BTreeMap<String, (JobSpec, &'static str)> = BTreeMap::new();
        for spec in self.args.config_jobs.specs() {
            wanted.insert(spec.job_id.clone(), (spec, "config"));
        }
        let store = &self.args.store;
        let mut goals = Vec::new();
        for status in WorkItemStatus::ALL {
            if matches!(
                status,
                WorkItemStatus::Paused | WorkItemStatus::Done | WorkItemStatus::Blocked
            ) {
                continue;
            }
            goals.extend(
                store
                    .work_items()
                    .list_by_status(*status)?
                    .into_iter()
                    .filter(goal_is_schedulable),
            );
        }
        let mut always_on_ephemeral = BTreeMap::new();
        for goal in goals {
            let Some(schedule) = goal.schedule.clone() else {
                continue;
            };
            if Trigger::parse(&schedule).is_err() {
                tracing::warn!(work_item_id = %goal.id, %schedule, "goal schedule is invalid; not scheduled");
                continue;
            }
            let job_id = format!("goal:{}", goal.id);
            if schedule.trim() == silas_core::model::work::ALWAYS_ON
                && goal.agent == AgentLane::Ephemeral
            {
                always_on_ephemeral.insert(job_id.clone(), goal.id.clone());
            }
            wanted.insert(
                job_id.clone(),
                (
                    JobSpec {
                        job_id,
                        action: JobAction::GoalCycle {
                            work_item_id: goal.id,
                        },
                        schedule,
                    },
                    "goal",
                ),
            );
        }
        for conn in store.records::<Connection>().list()? {
            if conn.status != ConnectionStatus::Active {
                continue;
            }
            let schedule = if conn.health_check.trim().is_empty() {
                self.args.config_jobs.default_health_check.clone()
            } else {
                conn.health_check.clone()
            };
            let job_id = format!("health:{}", conn.connection_id);
            wanted.insert(
                job_id.clone(),
                (
                    JobSpec {
                        job_id,
                        action: JobAction::ConnectionHealth {
                            connection_id: conn.connection_id,
                        },
                        schedule,
                    },
                    "connection",
                ),
            );
        }
        // Remove reconciled jobs that are no longer wanted (never `api` ones).
        let stale: Vec<String> = self
            .jobs
            .iter()
            .filter(|(id, j)| j.record.source != "api" && !wanted.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            tracing::info!(job_id = %id, "scheduler job removed");
            self.remove(&id)?;
        }
        let mut new_always_on = Vec::new();
        for (id, (spec, source)) in wanted {
            match self.upsert(&spec, source) {
                Ok(true) => {
                    if let Some(goal_id) = always_on_ephemeral.get(&id) {
                        new_always_on.push(goal_id.clone());
                    }
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(job_id = %id, code = %e.code(), "job not scheduled: {e}"),
            }
        }
        Ok(new_always_on)
    }

    /// Run one job now.
    fn fire(&mut self, job_id: &str, catch_up: bool) -> Result<(), SchedulerError> {
        let now = self.now();
        let Some(job) = self.jobs.get(job_id) else {
            return Ok(());
        };
        let action = job.action.clone();
        match &action {
            JobAction::GoalCycle { work_item_id } => {
                // Re-check at fire time: a goal paused since the last sync
                // must not run.
                let goal = self.args.store.work_items().get(work_item_id)?;
                if !goal.as_ref().is_some_and(goal_is_schedulable) {
                    tracing::info!(%work_item_id, "goal no longer schedulable; job removed");
                    return self.remove(job_id);
                }
                if goal.is_some_and(|g| {
                    g.schedule.as_deref().map(str::trim) == Some(silas_core::model::work::ALWAYS_ON)
                        && g.agent == AgentLane::Stream
                }) {
                    // Stream configuration, never dispatched (§3.3).
                    return Ok(());
                }
                self.dispatch(work_item_id);
            }
            JobAction::Heartbeat => {
                self.audit(
                    "scheduler.heartbeat",
                    json!({"job_id": job_id, "at": now.to_string()}),
                );
            }
            JobAction::Housekeeping(h) => {
                self.send_named(self.args.housekeeper.as_deref(), HousekeeperMsg::Run(*h))
            }
            JobAction::ConnectionHealth { connection_id } => self.send_named(
                self.args.connections.as_deref(),
                crate::connection::ConnectionMsg::HealthCheck(connection_id.clone()),
            ),
            JobAction::ConnectionRefresh { connection_id } => self.send_named(
                self.args.connections.as_deref(),
                crate::connection::ConnectionMsg::Refresh(connection_id.clone()),
            ),
            JobAction::StoreSync => {
                for goal_id in self.sync()? {
                    self.dispatch(&goal_id);
                }
            }
        }
        let tz = self.args.timezone;
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.record.last_fired_at = Some(now);
            // Coalesce: the next fire counts from now, never a burst.
            job.next = job.trigger.next_after(&tz, now);
            if job.trigger.is_one_shot() {
                self.remove(job_id)?;
            } else {
                self.args.store.records::<ScheduledJob>().put(&job.record)?;
            }
        }
        let _ = self.args.events.send(SchedulerEvent::Fired {
            job_id: job_id.to_owned(),
            action,
            at: now,
            catch_up,
        });
        Ok(())
    }

    fn dispatch(&self, work_item_id: &str) {
        let Some(tx) = &self.args.dispatch else {
            tracing::warn!(%work_item_id, "no work executor to dispatch the goal cycle to");
            return;
        };
        let req = DispatchRequest {
            work_item_id: work_item_id.to_owned(),
            scope_id: GOAL_SCOPE.to_owned(),
        };
        // Never block the scheduler on a full queue: the cycle is skipped
        // (audited) and the next fire tries again.
        if let Err(e) = tx.try_send(req) {
            tracing::warn!(%work_item_id, "goal cycle not dispatched: {e}");
            self.audit(
                "scheduler.dispatch_failed",
                json!({"work_item_id": work_item_id, "reason": e.to_string()}),
            );
        }
    }

    fn send_named<M: ractor::Message>(&self, name: Option<&str>, msg: M) {
        let Some(name) = name else { return };
        match ractor::registry::where_is(name) {
            Some(cell) => {
                if let Err(e) = ActorRef::<M>::from(cell).cast(msg) {
                    tracing::warn!(actor = name, "scheduled message not delivered: {e}");
                }
            }
            // Being restarted by its supervisor: the next fire reaches it.
            None => tracing::warn!(actor = name, "scheduled job target not running"),
        }
    }

    fn fire_due(&mut self) -> Result<(), SchedulerError> {
        let now = self.now();
        let due: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, j)| policy::is_due(j.next, now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.fire(&id, false)?;
        }
        Ok(())
    }

    fn arm(&mut self, myself: &ActorRef<SchedulerMsg>) {
        if let Some(t) = self.timer.take() {
            t.abort();
        }
        let Some(next) = self.jobs.values().filter_map(|j| j.next).min() else {
            return;
        };
        let sleep = self.args.clock.sleep_until(next);
        let me = myself.clone();
        self.timer = Some(tokio::spawn(async move {
            sleep.await;
            let _ = me.cast(SchedulerMsg::Wake);
        }));
    }

    fn list(&self) -> Vec<JobInfo> {
        self.jobs
            .values()
            .map(|j| JobInfo {
                job_id: j.record.job_id.clone(),
                action: j.action.clone(),
                schedule: j.record.schedule.clone(),
                source: j.record.source.clone(),
                last_fired_at: j.record.last_fired_at,
                next_fire: j.next,
            })
            .collect()
    }
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        let now = args.clock.now();
        let tz = args.timezone;
        let mut state = SchedulerState {
            args,
            jobs: BTreeMap::new(),
            timer: None,
            startup_fires: Vec::new(),
        };
        // Rebuild from redb; a record this build cannot read is dropped
        // (audited) rather than wedging the scheduler in a restart loop.
        for record in state.args.store.records::<ScheduledJob>().list()? {
            let id = record.job_id.clone();
            match SchedulerState::live(record) {
                Ok(mut job) => {
                    let reference = job.record.last_fired_at.unwrap_or(job.record.created_at);
                    let plan = plan_on_start(
                        &job.trigger,
                        &tz,
                        reference,
                        now,
                        job.action.missed_run_policy(),
                    );
                    job.next = plan.next;
                    if plan.missed > 0 {
                        state.audit(
                            "scheduler.missed",
                            json!({"job_id": id, "missed": plan.missed, "caught_up": plan.run_now}),
                        );
                    }
                    if plan.run_now {
                        state.startup_fires.push((id.clone(), true));
                    }
                    state.jobs.insert(id, job);
                }
                Err(e) => {
                    state.audit(
                        "scheduler.job_dropped",
                        json!({"job_id": id, "code": e.code().as_str(), "reason": e.to_string()}),
                    );
                    state.remove(&id)?;
                }
            }
        }
        // One-shot jobs whose moment passed without a catch-up are done.
        let finished: Vec<String> = state
            .jobs
            .iter()
            .filter(|(id, j)| {
                j.trigger.is_one_shot()
                    && j.next.is_none()
                    && !state.startup_fires.iter().any(|(f, _)| f == *id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in finished {
            state.remove(&id)?;
        }
        state.sync()?;
        // Always-on ephemeral goals run whenever the scheduler starts.
        for (id, j) in &state.jobs {
            if matches!(j.trigger, Trigger::AlwaysOn) && j.record.source == "goal" {
                state.startup_fires.push((id.clone(), false));
            }
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        for (id, catch_up) in std::mem::take(&mut state.startup_fires) {
            state.fire(&id, catch_up)?;
        }
        tracing::info!(jobs = state.jobs.len(), "scheduler started");
        state.arm(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: SchedulerMsg,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SchedulerMsg::Wake => state.fire_due()?,
            SchedulerMsg::Register(spec, reply) => {
                let _ = reply.send(state.upsert(&spec, "api").map(|_| ()));
            }
            SchedulerMsg::Unregister(id) => state.remove(&id)?,
            SchedulerMsg::Sync => {
                for goal_id in state.sync()? {
                    state.dispatch(&goal_id);
                }
            }
            SchedulerMsg::List(reply) => {
                let _ = reply.send(state.list());
            }
            SchedulerMsg::InjectPanic => panic!("injected scheduler panic"),
        }
        state.arm(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.abort();
        }
        Ok(())
    }
}

/// A caller's handle to a scheduler (registered or not).
#[derive(Clone)]
pub struct SchedulerHandle {
    pub actor: ActorRef<SchedulerMsg>,
}

const RPC_TIMEOUT_MS: u64 = 5_000;

impl SchedulerHandle {
    /// The daemon's scheduler, if it is running.
    pub fn find() -> Option<SchedulerHandle> {
        Self::find_named(SCHEDULER_NAME)
    }

    pub fn find_named(name: &str) -> Option<SchedulerHandle> {
        ractor::registry::where_is(name).map(|cell| SchedulerHandle {
            actor: ActorRef::from(cell),
        })
    }

    pub async fn register(&self, spec: JobSpec) -> Result<(), SchedulerError> {
        match ractor::call_t!(self.actor, SchedulerMsg::Register, RPC_TIMEOUT_MS, spec) {
            Ok(r) => r,
            Err(e) => Err(SchedulerError::Unavailable(e.to_string())),
        }
    }

    /// Reconcile goal and connection jobs with the store now, without
    /// waiting for the answer (a stopped scheduler syncs at its start).
    pub fn sync(&self) {
        let _ = self.actor.cast(SchedulerMsg::Sync);
    }

    pub async fn list(&self) -> Vec<JobInfo> {
        ractor::call_t!(self.actor, SchedulerMsg::List, RPC_TIMEOUT_MS).unwrap_or_default()
    }
}
