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
//!   Each item runs as its own tokio task; the mailbox only books tasks in
//!   and out, so it stays responsive while work runs.
//!
//! **Restart semantics.** On start the actor loads every item persisted as
//! `running` and *resumes* it: the run starts again at step 0, whose
//! non-consuming `check` passes because the item's single-use token was
//! already verified (its execution nonce is on record) — nothing is
//! verified or consumed again. Attempts continue from the persisted count
//! (an attempt interrupted by the crash counts as spent), so a resumed item
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

pub mod cards;
pub mod engine;
pub mod policy;
pub mod tools;

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use silas_core::model::work::WorkItemStatus;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use engine::{GoalCycleOutcome, WorkConfig, WorkEngine, WorkError};
pub use tools::ToolLimits;

use crate::work::{DispatchRequest, WorkStatusKind};

/// Messages to the WorkExecutor. Plain owned data (reply ports aside).
pub enum WorkExecutorMsg {
    /// Run this item in the background (ignored if it is already running).
    Dispatch(DispatchRequest),
    /// Run one cycle of a goal (the scheduler's call).
    RunGoalCycle(DispatchRequest),
    /// Internal: a background run ended.
    Finished { work_item_id: String },
    /// Ids of the items running now.
    Running(RpcReplyPort<Vec<String>>),
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
}

pub struct WorkExecutorState {
    engine: WorkEngine,
    running: BTreeMap<String, JoinHandle<()>>,
    /// Dispatched again while running (e.g. a card answered before the
    /// pausing run had finished): started once more when it ends.
    again: BTreeMap<String, DispatchRequest>,
    forwarder: Option<JoinHandle<()>>,
}

pub struct WorkExecutor;

impl WorkExecutorState {
    fn start(
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
        let engine = self.engine.clone();
        let me = myself.clone();
        let id = req.work_item_id.clone();
        let handle = tokio::spawn(async move {
            let r = if goal_cycle {
                engine
                    .run_goal_cycle(&req.work_item_id, &req.scope_id)
                    .await
                    .map(|_| ())
            } else {
                engine
                    .execute(&req.work_item_id, &req.scope_id)
                    .await
                    .map(|_| ())
            };
            if let Err(e) = r {
                tracing::warn!(work_item_id = %req.work_item_id, code = %silas_core::Coded::code(&e), "work run failed: {e}");
                let _ = engine.events.send(crate::work::WorkStatusEvent {
                    work_item_id: req.work_item_id.clone(),
                    scope_id: req.scope_id.clone(),
                    status: WorkStatusKind::Failed,
                    summary: format!("{}: {e}", silas_core::Coded::code(&e)),
                    verification: Vec::new(),
                });
            }
            let _ = me.cast(WorkExecutorMsg::Finished {
                work_item_id: req.work_item_id,
            });
        });
        self.running.insert(id, handle);
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
                        .is_some_and(|p| p.kind == silas_core::model::work::WorkItemType::Goal),
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
        let mut state = WorkExecutorState {
            engine: args.engine,
            running: BTreeMap::new(),
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
            .filter(|c| c.card_type == cards::PLAN_CARD)
            .filter(|c| c.payload.get("origin").and_then(|v| v.as_str()) == Some(cards::ORIGIN))
        {
            let Some(id) = cards::work_item_of(&card) else {
                continue;
            };
            let _ = state.engine.events.send(crate::work::WorkStatusEvent {
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
            .filter(|w| w.kind == silas_core::model::work::WorkItemType::Project)
            .flat_map(|p| p.tasks.iter().cloned())
            .collect();
        for item in resumable
            .into_iter()
            .filter(|w| !in_projects.contains(&w.id))
        {
            tracing::info!(work_item_id = %item.id, attempts = item.attempts, "resuming work item");
            state.start(
                &myself,
                DispatchRequest {
                    work_item_id: item.id,
                    scope_id: args.resume_scope_id.clone(),
                },
                false,
            );
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
            WorkExecutorMsg::Dispatch(req) => state.start(&myself, req, false),
            WorkExecutorMsg::RunGoalCycle(req) => state.start(&myself, req, true),
            WorkExecutorMsg::Finished { work_item_id } => {
                state.running.remove(&work_item_id);
                if let Some(req) = state.again.remove(&work_item_id) {
                    state.start(&myself, req, false);
                }
            }
            WorkExecutorMsg::Running(reply) => {
                let _ = reply.send(state.running.keys().cloned().collect());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut WorkExecutorState,
    ) -> Result<(), ActorProcessingErr> {
        // Runs end with the actor; their state is persisted after every
        // step, so the next start resumes them.
        if let Some(f) = state.forwarder.take() {
            f.abort();
        }
        for (_, h) in std::mem::take(&mut state.running) {
            h.abort();
        }
        Ok(())
    }
}
