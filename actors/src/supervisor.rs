//! The root supervisor: spawns its children linked, restarts them when they
//! fail (with backoff), and escalates — stops itself with a reason — when the
//! restart intensity is exceeded. The daemon treats the root stopping on its
//! own as fatal and exits cleanly with a non-zero code, so a crash loop is
//! never silently tolerated.
//!
//! Children are described by [`ChildSpec`]s (a label, a restart mode and a
//! spawn function), so the same supervisor serves every layer of the tree.
//! A restarted child rebuilds its state from redb in its own `pre_start`.
//!
//! Restart modes: `Permanent` children are restarted whenever they end
//! (failure or unexpected clean stop); `Transient` children only on failure.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};

use crate::restart::{RestartDecision, RestartPolicy, RestartTracker};

pub type SpawnFuture = Pin<Box<dyn Future<Output = Result<ActorCell, SpawnErr>> + Send>>;
pub type SpawnFn = Arc<dyn Fn(ActorCell) -> SpawnFuture + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartMode {
    Permanent,
    Transient,
}

/// How to (re)start one child under a given supervisor cell.
#[derive(Clone)]
pub struct ChildSpec {
    pub label: String,
    pub mode: RestartMode,
    pub spawn: SpawnFn,
}

impl ChildSpec {
    /// A child spawned (unnamed, linked) from a fresh actor value and
    /// arguments each time it (re)starts.
    pub fn new<A, F>(label: impl Into<String>, mode: RestartMode, make: F) -> ChildSpec
    where
        A: Actor,
        F: Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    {
        Self::spawned(label, None, mode, make)
    }

    /// [`ChildSpec::new`], registered under `name` (found by other parts
    /// of the daemon whatever incarnation is running).
    pub fn named<A, F>(
        label: impl Into<String>,
        name: &'static str,
        mode: RestartMode,
        make: F,
    ) -> ChildSpec
    where
        A: Actor,
        F: Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    {
        Self::spawned(label, Some(name), mode, make)
    }

    fn spawned<A, F>(
        label: impl Into<String>,
        name: Option<&'static str>,
        mode: RestartMode,
        make: F,
    ) -> ChildSpec
    where
        A: Actor,
        F: Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    {
        let make = Arc::new(make);
        ChildSpec {
            label: label.into(),
            mode,
            spawn: Arc::new(move |parent: ActorCell| {
                let (actor, args) = make();
                Box::pin(async move {
                    let name = name.map(Into::into);
                    let (r, _join) = Actor::spawn_linked(name, actor, args, parent).await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildStatus {
    pub label: String,
    pub restarts: u32,
    pub running: bool,
}

pub enum SupervisorMsg {
    Status(RpcReplyPort<Vec<ChildStatus>>),
}

pub struct SupervisorArgs {
    pub children: Vec<ChildSpec>,
    pub policy: RestartPolicy,
}

pub struct SupervisorState {
    specs: Vec<ChildSpec>,
    /// Live child → index into `specs`.
    running: HashMap<ActorId, (usize, ActorCell)>,
    restarts: Vec<u32>,
    tracker: RestartTracker,
}

pub struct RootSupervisor;

impl SupervisorState {
    async fn spawn_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        idx: usize,
    ) -> Result<(), SpawnErr> {
        let spec = &self.specs[idx];
        let cell = (spec.spawn)(myself.get_cell()).await?;
        self.running.insert(cell.get_id(), (idx, cell));
        Ok(())
    }

    /// Restart child `idx` (repeatedly, if its start fails) or escalate.
    async fn restart(&mut self, myself: &ActorRef<SupervisorMsg>, idx: usize, why: String) {
        let label = self.specs[idx].label.clone();
        loop {
            match self.tracker.record_failure(Instant::now()) {
                RestartDecision::Escalate { failures_in_window } => {
                    tracing::error!(child = %label, failures_in_window, "restart intensity exceeded; escalating");
                    myself.stop(Some(format!(
                        "restart intensity exceeded: {failures_in_window} failures; last: {label}: {why}"
                    )));
                    return;
                }
                RestartDecision::Restart { after } => {
                    tracing::warn!(child = %label, reason = %why, delay_ms = after.as_millis() as u64, "restarting child");
                    tokio::time::sleep(after).await;
                    self.restarts[idx] += 1;
                    match self.spawn_child(myself, idx).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::error!(child = %label, "child failed to start: {e}");
                        }
                    }
                }
            }
        }
    }
}

impl Actor for RootSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let n = args.children.len();
        let mut state = SupervisorState {
            specs: args.children,
            running: HashMap::new(),
            restarts: vec![0; n],
            tracker: RestartTracker::new(args.policy),
        };
        for idx in 0..n {
            state.spawn_child(&myself, idx).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Status(reply) => {
                let status = state
                    .specs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| ChildStatus {
                        label: s.label.clone(),
                        restarts: state.restarts[i],
                        running: state.running.values().any(|(idx, _)| *idx == i),
                    })
                    .collect();
                let _ = reply.send(status);
            }
        }
        Ok(())
    }

    // Overridden on purpose: ractor's default stops the supervisor when any
    // child dies.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some((idx, _)) = state.running.remove(&cell.get_id()) {
                    state.restart(&myself, idx, format!("failed: {err}")).await;
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some((idx, _)) = state.running.remove(&cell.get_id())
                    && state.specs[idx].mode == RestartMode::Permanent
                {
                    let why = format!(
                        "stopped unexpectedly: {}",
                        reason.unwrap_or_else(|| "no reason".into())
                    );
                    state.restart(&myself, idx, why).await;
                }
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // Children are removed from `running` before stopping them, so their
        // termination events are not mistaken for failures.
        for (_, (_, cell)) in state.running.drain() {
            cell.stop(Some("supervisor stopping".into()));
        }
        Ok(())
    }
}
