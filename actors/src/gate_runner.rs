//! The GateRunner actor (issue #5; spec §4.9, §5.4, §18.1): the two-lane
//! [`silas_gates::GateRunner`] hosted under the root supervisor, so a gate
//! provider that panics (a regex, a script provider, an LLM quality judge)
//! takes down this actor — which the supervisor restarts with a freshly
//! built runner — instead of the TurnProcessor or the work run that asked.
//!
//! The lane logic stays in `silas-gates`; this module only moves it behind a
//! message boundary:
//!
//! * [`GateRunnerActor`] — one message enum ([`GateMsg`]), one state struct
//!   ([`GateRunnerState`]: the runner built from [`GateRunnerArgs`], rebuilt
//!   on every start because it holds nothing but config and providers).
//!   Each evaluation runs in its own task so one slow script or judge does
//!   not serialise every turn's gates behind it; the task is aborted at the
//!   caller's deadline. A panic in that task is reported back to the actor,
//!   which then fails on purpose: a provider that panicked may have left its
//!   own state inconsistent, so the supervisor rebuilds all of them.
//! * [`GateHandle`] — the cheap cloneable handle the turn pipeline and the
//!   WorkExecutor call. Every call is bounded by a timeout. It **fails
//!   closed** (§18.1 `E_GATE_*`: "policy lane fails closed, quality lane
//!   fails open with audit flag"): if the actor is down or restarting, the
//!   call times out, or the evaluation panicked, every matching policy gate
//!   is a `block` whose reason starts with the taxonomy code, every matching
//!   quality gate is a flagged `continue`, and a [`GATE_FAULT_EVENT`] audit
//!   event says what happened. Like the runner's own events, these are
//!   returned in [`GateOutcome::audit`] for the caller to persist.
//!
//! The daemon's handle finds the supervised actor by its registered name
//! ([`GATE_RUNNER_NAME`]) on every call, so it follows restarts. Tests and
//! tools without a supervision tree use [`GateHandle::standalone`]: the
//! handle spawns an unsupervised actor on first use and, having no
//! supervisor, starts a fresh one on the next call after it failed.

use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort};
use serde_json::Value;
use silas_core::config::Config;
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction, GateLane, GateTrigger};
use silas_core::{Coded, ErrorCode};
use silas_gates::audit::names;
use silas_gates::runner::gate_matches;
use silas_gates::{AuditEvent, GateOutcome, GateRunner, TurnBudget};

/// Registered name of the daemon's GateRunner (see [`GateHandle::daemon`]).
pub const GATE_RUNNER_NAME: &str = "silas.gate_runner";

/// Default bound on one `check_gates` call through the actor. Generous
/// because one call may run several gates in sequence (a script gate alone
/// may take its 30 s); past it the call fails closed.
pub const DEFAULT_EVAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Audit event of an evaluation that did not complete in the actor.
pub const GATE_FAULT_EVENT: &str = "gate_runner_fault";

/// Flag on every result produced by the fail-closed path.
pub const GATE_FAULT_FLAG: &str = "gate_runner_fault";

/// Why an evaluation did not come back from the actor. Every variant is a
/// provider failure (`E_GATE_PROVIDER`) for the taxonomy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateFault {
    /// No actor to ask (not started, restarting, stopped) or it stopped
    /// before answering.
    #[error("gate runner unavailable: {0}")]
    Unavailable(String),
    #[error("gate evaluation timed out after {0:?}")]
    Timeout(Duration),
    /// A provider panicked. The payload is deliberately not kept: a panic
    /// message may quote the context, which is NEVER_LOG content.
    #[error("a gate provider panicked during the evaluation")]
    Panicked,
}

impl GateFault {
    /// Short machine-readable kind for the audit record.
    pub fn kind(&self) -> &'static str {
        match self {
            GateFault::Unavailable(_) => "unavailable",
            GateFault::Timeout(_) => "timeout",
            GateFault::Panicked => "panicked",
        }
    }
}

impl Coded for GateFault {
    fn code(&self) -> ErrorCode {
        ErrorCode::EGateProvider
    }
}

/// One `check_gates` call as owned data (messages carry no borrows).
#[derive(Clone, Debug)]
pub struct EvalRequest {
    pub gates: Vec<Gate>,
    pub trigger: GateTrigger,
    pub step: Option<u64>,
    pub context: JsonObject,
    /// The caller's per-turn allowance; the updated one comes back.
    pub budget: TurnBudget,
    /// The evaluation is aborted after this long.
    pub deadline: Duration,
}

/// The runner's answer and the budget after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluated {
    pub outcome: GateOutcome,
    pub budget: TurnBudget,
}

pub enum GateMsg {
    /// Run `GateRunner::check_gates` for the request.
    Evaluate {
        request: EvalRequest,
        reply: RpcReplyPort<Result<Evaluated, GateFault>>,
    },
    /// Sent by an evaluation task whose provider panicked: the actor
    /// rebuilds its providers in place. It does not fail: the panic was
    /// already contained in the evaluation's task, and a failure would count
    /// against the root supervisor's restart intensity — input that makes a
    /// provider panic on every message must not be able to stop the daemon.
    ProviderPanicked,
}

/// Builds the runner; called on every (re)start.
pub type RunnerFactory = Arc<dyn Fn() -> GateRunner + Send + Sync>;

/// The actor's arguments: how to build its runner.
#[derive(Clone)]
pub struct GateRunnerArgs {
    build: RunnerFactory,
}

impl GateRunnerArgs {
    pub fn new(build: impl Fn() -> GateRunner + Send + Sync + 'static) -> Self {
        GateRunnerArgs {
            build: Arc::new(build),
        }
    }

    /// The production runner (`standard_gate_runner`) for `config`, LLM
    /// gates without a model.
    pub fn from_config(config: Arc<Config>) -> Self {
        Self::from_config_with_judge(config, None)
    }

    /// The production runner for `config`, LLM gates asking `judge`.
    pub fn from_config_with_judge(
        config: Arc<Config>,
        judge: Option<Arc<dyn silas_gates::QualityJudge>>,
    ) -> Self {
        Self::new(move || crate::turn::pipeline::standard_gate_runner(&config, judge.clone()))
    }
}

/// The actor's state: the runner, shared with in-flight evaluation tasks.
pub struct GateRunnerState {
    runner: Arc<GateRunner>,
    build: RunnerFactory,
}

pub struct GateRunnerActor;

impl GateRunnerActor {
    /// The daemon's child spec: permanent, registered as [`GATE_RUNNER_NAME`].
    pub fn child_spec(args: GateRunnerArgs) -> crate::supervisor::ChildSpec {
        Self::child_spec_named(GATE_RUNNER_NAME, args)
    }

    /// A permanent child spec registering the actor under `name` (tests run
    /// several trees in one process).
    pub fn child_spec_named(
        name: impl Into<String>,
        args: GateRunnerArgs,
    ) -> crate::supervisor::ChildSpec {
        let name = name.into();
        crate::supervisor::ChildSpec {
            label: "gate_runner".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: Arc::new(move |parent| {
                let args = args.clone();
                let name = name.clone();
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some(name), GateRunnerActor, args, parent).await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

impl Actor for GateRunnerActor {
    type Msg = GateMsg;
    type State = GateRunnerState;
    type Arguments = GateRunnerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<GateMsg>,
        args: GateRunnerArgs,
    ) -> Result<GateRunnerState, ActorProcessingErr> {
        Ok(GateRunnerState {
            runner: Arc::new((args.build)()),
            build: args.build,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<GateMsg>,
        msg: GateMsg,
        state: &mut GateRunnerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            GateMsg::Evaluate { request, reply } => {
                tokio::spawn(evaluate(state.runner.clone(), request, reply, myself));
                Ok(())
            }
            GateMsg::ProviderPanicked => {
                // In-flight evaluations keep the old runner (their Arc);
                // new ones get fresh providers.
                tracing::warn!("a gate provider panicked; providers rebuilt");
                state.runner = Arc::new((state.build)());
                Ok(())
            }
        }
    }
}

/// One evaluation in its own task: panics and the deadline are caught here
/// and answered as faults (the caller fails closed on them).
async fn evaluate(
    runner: Arc<GateRunner>,
    request: EvalRequest,
    reply: RpcReplyPort<Result<Evaluated, GateFault>>,
    myself: ActorRef<GateMsg>,
) {
    let EvalRequest {
        gates,
        trigger,
        step,
        context,
        mut budget,
        deadline,
    } = request;
    let job = tokio::spawn(async move {
        let outcome = runner
            .check_gates(&gates, trigger, step, context, &mut budget)
            .await;
        Evaluated { outcome, budget }
    });
    let abort = job.abort_handle();
    let result = match tokio::time::timeout(deadline, job).await {
        Ok(Ok(evaluated)) => Ok(evaluated),
        Ok(Err(e)) if e.is_panic() => {
            // The actor may already be gone (restarting); then there is
            // nothing left to fail.
            let _ = myself.send_message(GateMsg::ProviderPanicked);
            Err(GateFault::Panicked)
        }
        Ok(Err(_)) => Err(GateFault::Unavailable(
            "the evaluation was cancelled".into(),
        )),
        Err(_) => {
            abort.abort();
            Err(GateFault::Timeout(deadline))
        }
    };
    // The caller may have given up (its own timeout); nothing to do then.
    let _ = reply.send(result);
}

/// What the handle does when the actor cannot answer (§18.1): policy gates
/// block with the `E_GATE_*` code, quality gates continue flagged, and the
/// fault is audited. `gates` are the gates matching the trigger; each is
/// charged to the budget (their evaluation was attempted).
pub fn fail_closed(
    gates: &[Gate],
    trigger: GateTrigger,
    context: JsonObject,
    budget: &mut TurnBudget,
    fault: &GateFault,
) -> GateOutcome {
    let code = fault.code();
    let reason = format!("{code}: {fault}");
    let (policy, quality): (Vec<&Gate>, Vec<&Gate>) =
        gates.iter().partition(|g| g.lane() == GateLane::Policy);
    let gate_names =
        |gs: &[&Gate]| Value::from(gs.iter().map(|g| g.name.clone()).collect::<Vec<_>>());
    let mut out = GateOutcome {
        merged_context: context,
        ..GateOutcome::default()
    };
    out.audit.push(AuditEvent::new(
        GATE_FAULT_EVENT,
        [
            ("code", Value::from(code.as_str())),
            ("fault", Value::from(fault.kind())),
            ("trigger", Value::from(trigger.as_str())),
            ("policy_gates", gate_names(&policy)),
            ("quality_gates", gate_names(&quality)),
        ],
    ));
    for g in &policy {
        let mut r = silas_gates::provider::block(g, reason.clone());
        r.flags = vec![GATE_FAULT_FLAG.to_owned()];
        out.policy_results.push(r);
    }
    if let Some(first) = policy.first() {
        out.first_block = Some(0);
        out.audit.push(AuditEvent::new(
            names::GATE_BLOCKED,
            [
                ("gate", Value::from(first.name.as_str())),
                ("reason", Value::from(reason.as_str())),
                ("on_block", Value::from(first.on_block.as_str())),
                ("code", Value::from(code.as_str())),
            ],
        ));
    }
    for g in &quality {
        let mut r = silas_gates::provider::result(g, GateAction::Continue, reason.clone());
        r.lane = GateLane::Quality;
        r.flags = vec![GATE_FAULT_FLAG.to_owned()];
        out.quality_results.push(r);
    }
    let charged = u32::try_from(gates.len()).unwrap_or(u32::MAX);
    budget.used = budget.used.saturating_add(charged).min(budget.max);
    out
}

/// An unsupervised actor owned by a handle (tests, benches, tools).
struct Standalone {
    args: GateRunnerArgs,
    actor: tokio::sync::Mutex<Option<ActorRef<GateMsg>>>,
}

impl Standalone {
    async fn actor(&self) -> Result<ActorRef<GateMsg>, GateFault> {
        let mut slot = self.actor.lock().await;
        if let Some(a) = slot.as_ref()
            && !matches!(a.get_status(), ActorStatus::Stopping | ActorStatus::Stopped)
        {
            return Ok(a.clone());
        }
        // First use, or the previous actor failed: with no supervisor, the
        // handle starts a fresh one (rebuilding the runner).
        let (a, _join) = Actor::spawn(None, GateRunnerActor, self.args.clone())
            .await
            .map_err(|e| GateFault::Unavailable(format!("cannot start the gate runner: {e}")))?;
        *slot = Some(a.clone());
        Ok(a)
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        if let Some(a) = self.actor.get_mut().take() {
            a.stop(None);
        }
    }
}

#[derive(Clone)]
enum Target {
    /// Looked up by registered name on every call, so restarts are followed.
    Named(Arc<str>),
    Standalone(Arc<Standalone>),
}

/// The callers' handle to the GateRunner actor: every call has a timeout and
/// fails closed (see the module docs).
#[derive(Clone)]
pub struct GateHandle {
    target: Target,
    timeout: Duration,
}

impl GateHandle {
    /// The daemon's supervised actor ([`GATE_RUNNER_NAME`]).
    pub fn daemon() -> Self {
        Self::named(GATE_RUNNER_NAME)
    }

    /// The actor registered under `name` (looked up per call).
    pub fn named(name: &str) -> Self {
        GateHandle {
            target: Target::Named(Arc::from(name)),
            timeout: DEFAULT_EVAL_TIMEOUT,
        }
    }

    /// An unsupervised actor built from `args`, spawned on first use.
    pub fn standalone(args: GateRunnerArgs) -> Self {
        GateHandle {
            target: Target::Standalone(Arc::new(Standalone {
                args,
                actor: tokio::sync::Mutex::new(None),
            })),
            timeout: DEFAULT_EVAL_TIMEOUT,
        }
    }

    /// A standalone actor hosting (a clone of) `runner`.
    pub fn from_runner(runner: GateRunner) -> Self {
        Self::standalone(GateRunnerArgs::new(move || runner.clone()))
    }

    /// Replaces the bound on each call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn actor(&self) -> Result<ActorRef<GateMsg>, GateFault> {
        match &self.target {
            Target::Named(name) => ractor::registry::where_is(name.as_ref())
                .map(ActorRef::from)
                .ok_or_else(|| GateFault::Unavailable(format!("no actor registered as {name}"))),
            Target::Standalone(s) => s.actor().await,
        }
    }

    /// One round trip to the actor, faults as errors (no fallback).
    pub async fn evaluate(&self, request: EvalRequest) -> Result<Evaluated, GateFault> {
        let actor = self.actor().await?;
        let timeout = self.timeout;
        match actor
            .call(|reply| GateMsg::Evaluate { request, reply }, Some(timeout))
            .await
        {
            Ok(CallResult::Success(r)) => r,
            Ok(CallResult::Timeout) => Err(GateFault::Timeout(timeout)),
            Ok(CallResult::SenderError) => Err(GateFault::Unavailable(
                "the gate runner stopped before answering".into(),
            )),
            Err(e) => Err(GateFault::Unavailable(format!(
                "cannot reach the gate runner: {e}"
            ))),
        }
    }

    /// `GateRunner::check_gates` through the actor, with the same signature
    /// and result; on a fault, the fail-closed outcome of [`fail_closed`].
    /// Gates not matching the trigger never leave the caller, and when none
    /// match the result is the runner's (nothing evaluated, context as is)
    /// without a round trip.
    pub async fn check_gates(
        &self,
        gates: &[Gate],
        trigger: GateTrigger,
        step: Option<u64>,
        context: JsonObject,
        budget: &mut TurnBudget,
    ) -> GateOutcome {
        let matching: Vec<Gate> = gates
            .iter()
            .filter(|g| gate_matches(g, trigger, step))
            .cloned()
            .collect();
        if matching.is_empty() {
            return GateOutcome {
                merged_context: context,
                ..GateOutcome::default()
            };
        }
        let request = EvalRequest {
            gates: matching.clone(),
            trigger,
            step,
            context: context.clone(),
            budget: *budget,
            deadline: self.timeout,
        };
        match self.evaluate(request).await {
            Ok(done) => {
                *budget = done.budget;
                done.outcome
            }
            Err(fault) => {
                tracing::warn!(
                    code = %fault.code(),
                    fault = fault.kind(),
                    trigger = trigger.as_str(),
                    "gate evaluation failed; failing closed: {fault}"
                );
                fail_closed(&matching, trigger, context, budget, &fault)
            }
        }
    }
}
