//! The WorkExecutor (spec §5.2, §4.12): runs approved, persisted work items
//! in the background — tasks (§5.2.1), projects (§5.2.2), goal cycles
//! (§5.2.3) and reviewed batches (§5.2.4).
//!
//! * [`policy`] — the pure loop policy (budget `>=`, attempts, planner
//!   consultation, briefing sections, topological order, `$failed_checks`,
//!   fix-task construction, argument schemas, batch selection).
//! * [`tools`] — the executor agent's [`silas_llm::tool_loop::ToolExecutor`]:
//!   schema check → `on_tool_call` gates → sandbox, with the tool ledger.
//! * [`engine`] — [`WorkEngine`]: the loops, persisting after every step.
//! * [`WorkExecutor`] — the actor shell. It receives [`DispatchRequest`]s as
//!   [`WorkExecutorMsg::Dispatch`] and, when the daemon hands it a
//!   [`DispatchInbox`] in [`WorkExecutorArgs::dispatch_rx`], from that
//!   channel too (a forwarder task turns each into a message). The inbox is
//!   shared across restarts: a restarted executor takes the same receiver
//!   over, so the Stream's and the scheduler's senders keep working.
//!   Every status change goes out on the broadcast sender in the engine.
//! * [`run`] — [`WorkRun`]: each running item is one child actor spawned
//!   linked under the WorkExecutor; the mailbox only books runs in and out
//!   (on the children's supervision events), so it stays responsive while
//!   work runs.
//!
//! **Restart semantics.** On start the actor loads every item persisted as
//! `running` and *resumes* it: the run starts again at step 0, whose
//! non-consuming `check` passes because the item's single-use token was
//! already verified (its execution nonce is on record) — nothing is
//! verified or consumed again. Attempts continue from the persisted count
//! (an attempt interrupted by the crash counts as spent; audited
//! `work_attempt_interrupted` and named as the last failure), so a resumed item
//! still ends deterministically within `max_attempts`. A token that has
//! expired meanwhile ends the item `blocked`. Projects resume skipping their
//! `done` tasks. Items in a terminal state are never re-run, whoever
//! dispatches them. Resumed items report to
//! [`WorkExecutorArgs::resume_scope_id`] (the originating scope is not part
//! of the persisted work item).
//!
//! Approval waits survive a restart as well ([`cards`]): a `paused` item is
//! dispatched again on start — if its tool card is still unanswered it only
//! re-announces itself (the Stream re-delivers the card), if the owner has
//! answered it resumes the paused run. A fix task blocked on its plan card
//! is re-announced the same way. An item that was approved and verified but
//! never started (`pending` with a consumed token: a crash between the
//! decision and the dispatch) is started — its token's execution is already
//! on record, so nothing is verified or consumed twice.
//!
//! **Supervision of runs** (handled on purpose in `handle_supervisor_evt`;
//! ractor's default would stop the executor when any run ends):
//!
//! * `ActorTerminated` — the run ended (done, failed, paused, blocked or
//!   with an engine error it reported itself): the item is booked out, its
//!   crash history cleared, and a dispatch queued for it meanwhile
//!   (`again`) starts now.
//! * `ActorFailed` — the run panicked. Because the item is persisted after
//!   every step, the crash is treated exactly like a daemon restart for that
//!   one item: it is *resumed* from redb (step 0's non-consuming `check`
//!   passes on the recorded execution, attempts continue from the persisted
//!   count), after the [`RunSupervision::restart`] backoff, and stays booked
//!   as running meanwhile. Past the per-item limit (2 restarts by default)
//!   the item ends `failed` — `running`/`pending` only; a paused, blocked or
//!   terminal item keeps its status — with an `E_SANDBOX_FAILED` summary
//!   (the §18.1 family whose policy is "fail the current work item"), a
//!   `Failed` [`WorkStatusEvent`](crate::work::WorkStatusEvent) and
//!   `work_run_crashed` + `work_item.failed` audit entries; a failed
//!   project's `running` tasks end with it, so no later start resumes them
//!   outside their project. Every crash is audited as `work_run_crashed`
//!   (`action`: `resumed`, `failed` or `cycle_dropped`).
//! * A crashed goal cycle is never re-run (a second cycle could spawn a
//!   second fix task under the standing token): it is reported `Failed`,
//!   the next scheduled cycle is the retry, and a fix task it had already
//!   spawned and left `running` is resumed on its own, like any task.
//!
//! A crash only ever ends its own child: the executor, its mailbox and the
//! other runs carry on, and no approval is verified or consumed again.
//! When the executor stops, its runs are killed with it (ractor terminates
//! linked children) and resume at the next start.

pub mod apply;
mod attempt;
pub mod cancel;
pub mod cards;
pub mod engine;
pub mod goal;
mod leftovers;
mod mcp_tools;
pub mod policy;
pub mod project;
pub mod run;
mod skill_maker;
mod skill_tools;
mod task_loop;
pub mod tools;
pub mod workspace;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use serde_json::{Value, json};
use silas_core::ErrorCode;
use silas_core::model::work::{WorkItem, WorkItemStatus, WorkItemType};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use cancel::{CancelError, Cancelled};
pub use engine::{GoalCycleOutcome, WorkConfig, WorkEngine, WorkError};
pub use run::{RunAttempt, RunFault, RunSupervision, WorkRun, WorkRunMsg};
pub use tools::ToolLimits;

use crate::restart::{RestartDecision, RestartTracker};
use crate::work::{DispatchRequest, WorkStatusEvent, WorkStatusKind};

/// Audit event of a crashed run (see the module doc).
pub const WORK_RUN_CRASHED: &str = "work_run_crashed";
/// The name the daemon registers its WorkExecutor under.
pub const WORK_EXECUTOR_NAME: &str = "silas.work_executor";

/// Messages to the WorkExecutor. Plain owned data (reply ports aside).
pub enum WorkExecutorMsg {
    /// Run this item in the background (queued once if it is running).
    Dispatch(DispatchRequest),
    /// Run one cycle of a goal (the scheduler's call).
    RunGoalCycle(DispatchRequest),
    /// Ids of the items running now (including one waiting to restart).
    Running(RpcReplyPort<Vec<String>>),
    /// The owner cancels an item ([`cancel`]); `by` names who, for the audit.
    Cancel {
        id: String,
        by: String,
        reply: RpcReplyPort<Result<Cancelled, CancelError>>,
    },
}

/// The receiving end of the dispatch channel, shared by every incarnation
/// of the WorkExecutor. Only one forwarder holds the lock at a time; the old
/// one is aborted in `post_stop` (releasing it), so requests queued while the
/// actor restarts wait in the channel instead of being lost.
#[derive(Clone)]
pub struct DispatchInbox(Arc<tokio::sync::Mutex<mpsc::Receiver<DispatchRequest>>>);

impl From<mpsc::Receiver<DispatchRequest>> for DispatchInbox {
    fn from(rx: mpsc::Receiver<DispatchRequest>) -> Self {
        Self(Arc::new(tokio::sync::Mutex::new(rx)))
    }
}

pub struct WorkExecutorArgs {
    pub engine: WorkEngine,
    /// Optional dispatch channel from the Stream and the scheduler.
    pub dispatch_rx: Option<DispatchInbox>,
    /// Scope to report resumed items to.
    pub resume_scope_id: String,
    /// Per-item restart limit (and, in tests only, a fault hook).
    pub supervision: RunSupervision,
}

/// One booked run: its child and what it was started with (a crash
/// restarts it with the same request).
struct Booked {
    cell: ActorCell,
    req: DispatchRequest,
    goal_cycle: bool,
}

pub struct WorkExecutorState {
    engine: WorkEngine,
    supervision: RunSupervision,
    running: BTreeMap<String, Booked>,
    /// Child actor → the item it runs.
    by_actor: HashMap<ActorId, String>,
    /// Crash history per item, cleared when a run of it ends normally.
    crashes: BTreeMap<String, RestartTracker>,
    /// Dispatched again while running (e.g. a card answered before the
    /// pausing run had finished): started once more when it ends.
    again: BTreeMap<String, DispatchRequest>,
    forwarder: Option<JoinHandle<()>>,
}

pub struct WorkExecutor;

fn obj(v: Value) -> silas_core::model::JsonObject {
    match v {
        Value::Object(o) => o,
        _ => silas_core::model::JsonObject::new(),
    }
}

/// A panic message may quote anything the run held; the audit keeps a
/// bounded prefix (the full text is in the daemon log).
fn bounded(why: &str) -> String {
    const MAX: usize = 200;
    match why.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &why[..i]),
        None => why.to_owned(),
    }
}

impl WorkExecutorState {
    async fn start(
        &mut self,
        myself: &ActorRef<WorkExecutorMsg>,
        req: DispatchRequest,
        goal_cycle: bool,
    ) {
        if self.running.contains_key(&req.work_item_id) {
            if !goal_cycle {
                self.again.insert(req.work_item_id.clone(), req);
            }
            return;
        }
        self.spawn_run(myself, req, goal_cycle, 0, Duration::ZERO)
            .await;
    }

    /// Spawns the item's [`WorkRun`] linked under this executor and books it.
    async fn spawn_run(
        &mut self,
        myself: &ActorRef<WorkExecutorMsg>,
        req: DispatchRequest,
        goal_cycle: bool,
        restart: u32,
        delay: Duration,
    ) {
        let args = run::WorkRunState {
            engine: self.engine.clone(),
            req: req.clone(),
            goal_cycle,
            restart,
            delay,
            fault: self.supervision.fault.clone(),
        };
        match Actor::spawn_linked(None, WorkRun, args, myself.get_cell()).await {
            Ok((child, _join)) => {
                let cell = child.get_cell();
                self.by_actor
                    .insert(cell.get_id(), req.work_item_id.clone());
                self.running.insert(
                    req.work_item_id.clone(),
                    Booked {
                        cell,
                        req,
                        goal_cycle,
                    },
                );
            }
            // Only possible while this executor is stopping: the item keeps
            // its persisted state and resumes at the next start.
            Err(e) => {
                tracing::error!(work_item_id = %req.work_item_id, code = %ErrorCode::ESandboxUnavailable, "could not start the work run: {e}");
            }
        }
    }

    /// A run ended normally: book it out and start what was queued for it.
    async fn ended(&mut self, myself: &ActorRef<WorkExecutorMsg>, id: &str) {
        self.running.remove(id);
        self.crashes.remove(id);
        // An engine error ends a run without its own clean-up.
        self.engine
            .sweep_work_base(Some(&std::iter::once(id.to_owned()).collect()));
        if let Some(req) = self.again.remove(id) {
            self.start(myself, req, false).await;
        }
    }

    fn audit(&self, event: &str, data: Value) {
        if let Err(e) = self.engine.store.audit().log(event, obj(data)) {
            tracing::error!(event, code = %silas_core::Coded::code(&e), "cannot audit: {e}");
        }
    }

    fn publish_failed(&self, id: &str, scope: &str, summary: String) {
        // No subscriber is not an error: the status is persisted anyway.
        let _ = self.engine.events.send(WorkStatusEvent {
            work_item_id: id.to_owned(),
            scope_id: scope.to_owned(),
            status: WorkStatusKind::Failed,
            summary,
            verification: Vec::new(),
        });
    }

    /// A run panicked (see the module doc for the policy).
    async fn crashed(&mut self, myself: &ActorRef<WorkExecutorMsg>, booked: Booked, why: String) {
        let req = booked.req;
        let id = req.work_item_id.clone();
        tracing::error!(work_item_id = %id, code = %ErrorCode::ESandboxFailed, "work run crashed: {why}");
        let item = match self.engine.store.work_items().get(&id) {
            Ok(item) => item,
            Err(e) => {
                // Nothing can be decided without the record; it stays as
                // persisted and resumes at the next start.
                tracing::error!(work_item_id = %id, code = %silas_core::Coded::code(&e), "cannot read the crashed item: {e}");
                self.crashes.remove(&id);
                self.again.remove(&id);
                return;
            }
        };
        let policy = self.supervision.restart;
        let tracker = self
            .crashes
            .entry(id.clone())
            .or_insert_with(|| RestartTracker::new(policy));
        let decision = tracker.record_failure(Instant::now());
        let crashes = tracker.failures_in_window();
        let is_goal =
            booked.goal_cycle || item.as_ref().is_some_and(|w| w.kind == WorkItemType::Goal);
        if is_goal {
            self.crashes.remove(&id);
            self.audit(
                WORK_RUN_CRASHED,
                json!({"work_item_id": id, "action": "cycle_dropped", "crashes": crashes,
                       "code": ErrorCode::ESandboxFailed.as_str(), "error": bounded(&why)}),
            );
            self.publish_failed(
                &id,
                &req.scope_id,
                format!(
                    "{}: the goal cycle crashed; the next scheduled cycle runs again",
                    ErrorCode::ESandboxFailed
                ),
            );
            self.resume_spawned(myself, &id, &req.scope_id).await;
            if let Some(again) = self.again.remove(&id) {
                self.start(myself, again, false).await;
            }
            return;
        }
        match decision {
            RestartDecision::Restart { after } => {
                self.audit(
                    WORK_RUN_CRASHED,
                    json!({"work_item_id": id, "action": "resumed", "crashes": crashes,
                           "code": ErrorCode::ESandboxFailed.as_str(), "error": bounded(&why)}),
                );
                tracing::warn!(work_item_id = %id, crashes, delay_ms = after.as_millis() as u64, "resuming crashed work run");
                let restart = u32::try_from(crashes).unwrap_or(u32::MAX);
                self.spawn_run(myself, req, false, restart, after).await;
            }
            RestartDecision::Escalate { failures_in_window } => {
                self.crashes.remove(&id);
                self.audit(
                    WORK_RUN_CRASHED,
                    json!({"work_item_id": id, "action": "failed",
                           "crashes": failures_in_window,
                           "code": ErrorCode::ESandboxFailed.as_str(), "error": bounded(&why)}),
                );
                if let Some(item) = item {
                    let summary = format!(
                        "{}: the run crashed {failures_in_window} times (restarted {} times); stopped",
                        ErrorCode::ESandboxFailed,
                        policy.max_restarts
                    );
                    self.fail(item, &req.scope_id, summary);
                }
                // Queued meanwhile: started (the engine never re-runs an
                // item that is now terminal, so this only re-announces).
                if let Some(again) = self.again.remove(&id) {
                    self.start(myself, again, false).await;
                }
            }
        }
    }

    /// Ends a crashed item `failed` if it was still in flight, with its
    /// project's running tasks.
    fn fail(&self, item: WorkItem, scope: &str, summary: String) {
        let mut ids = vec![item.id.clone()];
        if item.kind == WorkItemType::Project {
            ids.extend(item.tasks.iter().cloned());
        }
        for (n, id) in ids.iter().enumerate() {
            let mut changed = false;
            let r = self.engine.store.work_items().update(id, |w| {
                let in_flight = if n == 0 {
                    matches!(w.status, WorkItemStatus::Running | WorkItemStatus::Pending)
                } else {
                    w.status == WorkItemStatus::Running
                };
                if in_flight {
                    w.status = WorkItemStatus::Failed;
                    changed = true;
                }
                Ok(())
            });
            match r {
                Ok(w) if changed => {
                    self.audit(
                        "work_item.failed",
                        json!({"work_item_id": w.id, "attempts": w.attempts,
                               "tokens": w.budget_used.tokens, "cost_usd": w.budget_used.cost_usd}),
                    );
                    self.publish_failed(&w.id, scope, summary.clone());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(work_item_id = %id, code = %silas_core::Coded::code(&e), "cannot end the crashed item: {e}");
                }
            }
        }
        self.engine
            .sweep_work_base(Some(&ids.into_iter().collect()));
    }

    /// A goal's fix tasks left `running` by a crashed cycle run on their own.
    async fn resume_spawned(
        &mut self,
        myself: &ActorRef<WorkExecutorMsg>,
        goal: &str,
        scope: &str,
    ) {
        let spawned = match self.engine.store.work_items().list_by_parent(goal) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(work_item_id = %goal, code = %silas_core::Coded::code(&e), "cannot list the goal's tasks: {e}");
                return;
            }
        };
        for task in spawned
            .into_iter()
            .filter(|t| t.status == WorkItemStatus::Running)
        {
            self.start(
                myself,
                DispatchRequest {
                    work_item_id: task.id,
                    scope_id: scope.to_owned(),
                },
                false,
            )
            .await;
        }
    }
}

impl Actor for WorkExecutor {
    type Msg = WorkExecutorMsg;
    type State = WorkExecutorState;
    type Arguments = WorkExecutorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: WorkExecutorArgs,
    ) -> Result<WorkExecutorState, ActorProcessingErr> {
        let items = args.engine.store.work_items();
        let mut resumable = items.list_by_status(WorkItemStatus::Running)?;
        resumable.extend(items.list_by_status(WorkItemStatus::Paused)?);
        // Approved and verified, never started (single-use tokens only: a
        // standing token is consumed per spawn, not per start).
        resumable.extend(
            items
                .list_by_status(WorkItemStatus::Pending)?
                .into_iter()
                .filter(|w| {
                    w.approval_token.as_ref().is_some_and(|t| {
                        t.executions_used > 0
                            && t.scope != silas_core::model::approval::ApprovalScope::Standing
                    })
                })
                // A project's tasks run in the project's order, never alone.
                .filter(|w| match &w.parent {
                    None => true,
                    Some(p) => items
                        .get(p)
                        .ok()
                        .flatten()
                        .is_some_and(|p| p.kind == WorkItemType::Goal),
                }),
        );
        let forwarder = args.dispatch_rx.map(|inbox| {
            let me = myself.clone();
            tokio::spawn(async move {
                let mut rx = inbox.0.lock().await;
                while let Some(req) = rx.recv().await {
                    if me.cast(WorkExecutorMsg::Dispatch(req)).is_err() {
                        break;
                    }
                }
            })
        });
        // What runs cut short by the daemon's end (or a cancel it did not
        // finish) left behind.
        args.engine.sweep_work_base(None);
        let mut state = WorkExecutorState {
            engine: args.engine,
            supervision: args.supervision,
            running: BTreeMap::new(),
            by_actor: HashMap::new(),
            crashes: BTreeMap::new(),
            again: BTreeMap::new(),
            forwarder,
        };
        // Fix tasks waiting on their plan card: announce them again so the
        // Stream re-delivers the card.
        for card in state
            .engine
            .store
            .records::<silas_storage::PendingCard>()
            .list()?
            .into_iter()
            .filter(cards::is_executor_plan_card)
        {
            let Some(id) = cards::work_item_of(&card) else {
                continue;
            };
            let _ = state.engine.events.send(WorkStatusEvent {
                work_item_id: id.to_owned(),
                scope_id: card.scope_id.clone(),
                status: WorkStatusKind::Blocked,
                summary: "a fix task needs your approval".into(),
                verification: Vec::new(),
            });
        }
        // Resume: a project's running tasks are driven by the project.
        let in_projects: std::collections::BTreeSet<String> = resumable
            .iter()
            .filter(|w| w.kind == WorkItemType::Project)
            .flat_map(|p| p.tasks.iter().cloned())
            .collect();
        for item in resumable
            .into_iter()
            .filter(|w| !in_projects.contains(&w.id))
        {
            tracing::info!(work_item_id = %item.id, attempts = item.attempts, "resuming work item");
            state
                .start(
                    &myself,
                    DispatchRequest {
                        work_item_id: item.id,
                        scope_id: args.resume_scope_id.clone(),
                    },
                    false,
                )
                .await;
        }
        // Workspace applies a crash interrupted are finished or rolled back
        // before anything else touches a workspace; then every change card
        // is settled again (a waiting one re-announced, an answered one
        // acted on).
        state.engine.recover_applies();
        let change_cards: Vec<silas_storage::PendingCard> = state
            .engine
            .store
            .records::<silas_storage::PendingCard>()
            .list()?
            .into_iter()
            .filter(|c| matches!(c.card, silas_core::cards::CardPayload::Changes(_)))
            .collect();
        for card in change_cards {
            let Some(id) = cards::work_item_of(&card) else {
                continue;
            };
            let req = DispatchRequest {
                work_item_id: id.to_owned(),
                scope_id: card.scope_id.clone(),
            };
            state.start(&myself, req, false).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: WorkExecutorMsg,
        state: &mut WorkExecutorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkExecutorMsg::Dispatch(req) => state.start(&myself, req, false).await,
            WorkExecutorMsg::RunGoalCycle(req) => state.start(&myself, req, true).await,
            WorkExecutorMsg::Running(reply) => {
                let _ = reply.send(state.running.keys().cloned().collect());
            }
            WorkExecutorMsg::Cancel { id, by, reply } => {
                let _ = reply.send(state.cancel(&id, &by).await);
            }
        }
        Ok(())
    }

    // Overridden on purpose: ractor's default stops the executor when any
    // run ends. Never returns an error for a run's end, so a crashing run
    // cannot take the executor (or the other runs) down.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut WorkExecutorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    state.ended(&myself, &id).await;
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(id) = state.by_actor.remove(&cell.get_id())
                    && let Some(booked) = state.running.remove(&id)
                {
                    state.crashed(&myself, booked, err.to_string()).await;
                }
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut WorkExecutorState,
    ) -> Result<(), ActorProcessingErr> {
        // Runs end with the actor; their state is persisted after every
        // step, so the next start resumes them. Unbooked first, so their
        // termination is not taken for an ordinary end.
        if let Some(f) = state.forwarder.take() {
            f.abort();
        }
        state.by_actor.clear();
        state.again.clear();
        for (_, booked) in std::mem::take(&mut state.running) {
            booked.cell.kill();
        }
        Ok(())
    }
}
