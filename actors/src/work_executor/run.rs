//! [`WorkRun`]: one running work item as a linked child actor of the
//! [`super::WorkExecutor`] (issue #5: "one linked child per running work
//! item").
//!
//! The run happens inside the child's one message handler, so a panic
//! anywhere below it — a provider, the engine, a gate — is caught by ractor
//! and reaches the WorkExecutor as `SupervisionEvent::ActorFailed` instead of
//! silently killing a bare task (which left the item booked as running, and
//! `running` in redb, until the daemon restarted). A run that ends — well or
//! with a [`WorkError`](super::WorkError), which is reported here — stops the
//! child normally (`ActorTerminated`). What the parent does with either is
//! documented on [`super::WorkExecutor`].
//!
//! [`RunSupervision`] carries the per-item restart limit and the test-only
//! fault hook. Both reach the executor only through
//! [`super::WorkExecutorArgs`], i.e. from whoever constructs the actor tree:
//! no message, channel or model output can set or trigger the hook, and the
//! daemon always passes [`RunSupervision::default`] (no hook).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use silas_core::Coded;

use super::engine::WorkEngine;
use crate::restart::RestartPolicy;
use crate::work::{DispatchRequest, WorkStatusEvent, WorkStatusKind};

/// What the fault hook is told about the run it is called for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAttempt {
    pub work_item_id: String,
    /// A goal cycle (`RunGoalCycle`) rather than `execute`.
    pub goal_cycle: bool,
    /// 0 for a fresh run; n for the n-th restart after a crash.
    pub restart: u32,
}

/// The future a fault hook returns; the run awaits it before the engine
/// starts, so a test can hold a run "in flight" and then make it panic.
pub type FaultFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Test-only fault injection: called at the start of every run, inside the
/// child's handler, so a panic in it (or in the future it returns) is
/// exactly a crashing run. Settable only through the constructor.
pub type RunFault = Arc<dyn Fn(RunAttempt) -> FaultFuture + Send + Sync>;

/// How the WorkExecutor supervises its runs.
#[derive(Clone)]
pub struct RunSupervision {
    /// Per-item restart limit and backoff. `max_restarts` crashes of one
    /// item are resumed from redb; the next one ends the item `failed`.
    /// `within` bounds how long crashes are remembered; a run that ends
    /// normally clears its item's history.
    pub restart: RestartPolicy,
    /// `None` in production.
    pub fault: Option<RunFault>,
}

/// Two restarts per item: enough to ride out a transient panic (the run
/// resumes from its last persisted step), few enough that a deterministic
/// bug fails the item within seconds instead of looping.
pub const RUN_RESTART_POLICY: RestartPolicy = RestartPolicy {
    max_restarts: 2,
    within: Duration::from_secs(3600),
    base_backoff: Duration::from_millis(50),
    max_backoff: Duration::from_secs(2),
};

impl Default for RunSupervision {
    fn default() -> Self {
        RunSupervision {
            restart: RUN_RESTART_POLICY,
            fault: None,
        }
    }
}

impl fmt::Debug for RunSupervision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSupervision")
            .field("restart", &self.restart)
            .field("fault", &self.fault.is_some())
            .finish()
    }
}

/// The child's one message.
pub enum WorkRunMsg {
    /// Run the item (sent to itself once, after start).
    Run,
}

/// Arguments and state of one run (the same data: a run is one job).
pub struct WorkRunState {
    pub engine: WorkEngine,
    pub req: DispatchRequest,
    pub goal_cycle: bool,
    /// Restart number (0 for a fresh run).
    pub restart: u32,
    /// Backoff before a restarted run starts. Waited here, not in the
    /// parent, so the WorkExecutor's mailbox stays responsive and the item
    /// stays booked as running meanwhile.
    pub delay: Duration,
    pub fault: Option<RunFault>,
}

pub struct WorkRun;

impl Actor for WorkRun {
    type Msg = WorkRunMsg;
    type State = WorkRunState;
    type Arguments = WorkRunState;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: WorkRunState,
    ) -> Result<WorkRunState, ActorProcessingErr> {
        Ok(args)
    }

    // The run starts only once the child is linked and running, so even a
    // panic at its very first step is reported to the parent.
    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut WorkRunState,
    ) -> Result<(), ActorProcessingErr> {
        myself.cast(WorkRunMsg::Run)?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: WorkRunMsg,
        state: &mut WorkRunState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkRunMsg::Run => {
                if !state.delay.is_zero() {
                    tokio::time::sleep(state.delay).await;
                }
                if let Some(fault) = &state.fault {
                    fault(RunAttempt {
                        work_item_id: state.req.work_item_id.clone(),
                        goal_cycle: state.goal_cycle,
                        restart: state.restart,
                    })
                    .await;
                }
                let engine = &state.engine;
                let req = &state.req;
                let r = if state.goal_cycle {
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
                // An engine error is an outcome, not a crash: reported, and
                // the child ends normally (the item's persisted state is as
                // the engine left it).
                if let Err(e) = r {
                    tracing::warn!(work_item_id = %req.work_item_id, code = %e.code(), "work run failed: {e}");
                    let _ = engine.events.send(WorkStatusEvent {
                        work_item_id: req.work_item_id.clone(),
                        scope_id: req.scope_id.clone(),
                        status: WorkStatusKind::Failed,
                        summary: format!("{}: {e}", e.code()),
                        verification: Vec::new(),
                    });
                }
                myself.stop(Some("run ended".into()));
            }
        }
        Ok(())
    }
}
