//! The shared harness of the actors integration tests (each test crate
//! declares `mod common;`). It owns:
//!
//! * the sandbox [`launcher`] lookup (built on demand when only this
//!   crate's tests were built);
//! * the model side: [`agents`] over HTTP against testkit's `FakeLlm` and
//!   the scripted replies every suite sends ([`shell`], [`output`],
//!   [`direct`], [`to_planner`], [`system_of`]);
//! * [`Fx`], one data dir with the redb store, a real owner key and
//!   ApprovalService, the FakeLlm and the real `WorkEngine` (subprocess
//!   sandbox, verification runner, predicate gates), with its approve,
//!   item, audit and directory helpers;
//! * the turn runtime: [`approvals`], [`spawn_stream`] over a `TurnDeps`,
//!   [`inbound`] messages, [`Turns::turn`] and [`pending_card`];
//! * [`spawn_executor`], a WorkExecutor actor over an engine;
//! * audit readers ([`audit_events`], [`audit_data`]) and the bounded
//!   waits ([`wait_for`], [`wait_for_event`], [`wait_for_card`]).
//!
//! Items some test crates do not use carry `#[allow(dead_code)]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ractor::Actor;
use serde_json::{Map, Value, json};
use silas_actors::approval::ApprovalService;
use silas_actors::cards::CardKind;
use silas_actors::channel::{MemorySink, Outbound};
use silas_actors::gate_runner::GateHandle;
use silas_actors::limits::RuntimeLimits;
use silas_actors::restart::RestartPolicy;
use silas_actors::stream::{InboundMessage, Stream, StreamArgs, StreamHandle, SubmitOutcome};
use silas_actors::turn::pipeline::TurnDeps;
use silas_actors::work::{DispatchRequest, WorkStatusEvent, WorkStatusKind};
use silas_actors::work_executor::engine::{WorkConfig, WorkEngine};
use silas_actors::work_executor::{
    DispatchInbox, RunSupervision, ToolLimits, WorkExecutor, WorkExecutorArgs, WorkExecutorMsg,
};
use silas_core::Timestamp;
use silas_core::approval::{IssuePolicy, Subject};
use silas_core::config::{Config, MapEnv, ModelEndpoint};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope};
use silas_core::model::work::WorkItem;
use silas_execution::executors::ExecutorRegistry;
use silas_execution::verification::VerificationRunner;
use silas_gates::{GateRunner, PredicateProvider};
use silas_keys::OwnerKey;
use silas_llm::agents::{Agent, Agents};
use silas_llm::openai::OpenAiProvider;
use silas_llm::provider::{Provider, RetryPolicy};
use silas_llm::structured::StructuredContext;
use silas_sandbox::{Launcher, Limits, SubprocessSandbox};
use silas_storage::{AuditEntry, PendingCard, Store};
use silas_testkit::{FakeLlm, RecordedRequest, Reply};
use tokio::sync::{broadcast, mpsc};

// ------------------------------------------------------------ components

/// The sandbox launcher: built with the workspace; built on demand when
/// only this crate's tests were.
#[allow(dead_code)]
pub fn launcher() -> Launcher {
    if let Ok(l) = Launcher::sibling_binary() {
        return l;
    }
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "silas-sandbox",
            "--bin",
            "silas-sandbox-exec",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    Launcher::sibling_binary().unwrap()
}

/// The API key [`agents`] send to the FakeLlm.
#[allow(dead_code)]
pub const FAKE_API_KEY: &str = "sk-fake-123";

/// All four agents on the FakeLlm (real HTTP, real OpenAI client).
#[allow(dead_code)]
pub fn agents(fake: &FakeLlm) -> Agents {
    agents_with_key(fake, FAKE_API_KEY)
}

/// [`agents`] sending `api_key` (read from the `FAKE_API_KEY` variable).
#[allow(dead_code)]
pub fn agents_with_key(fake: &FakeLlm, api_key: &str) -> Agents {
    let endpoint = ModelEndpoint {
        provider: "fake".into(),
        base_url: fake.base_url(),
        api_key_env: Some("FAKE_API_KEY".into()),
        model: "fake-model".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    let env = MapEnv::new().with("FAKE_API_KEY", api_key);
    let policy = RetryPolicy {
        timeout: Duration::from_secs(10),
        max_retries: 0,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(20),
    };
    let provider: Arc<dyn Provider> =
        Arc::new(OpenAiProvider::from_endpoint(&endpoint, &env, policy).unwrap());
    let agent = Agent {
        provider,
        model: "fake-model".into(),
        price: None,
    };
    Agents {
        proxy: agent.clone(),
        planner: agent.clone(),
        executor: agent.clone(),
        scorer: agent.clone(),
        ctx: StructuredContext::from_config(&Config::default()),
        max_tool_rounds: 6,
        scorer_breaker: Default::default(),
        gate_model: silas_llm::judge::GateModelBinding::Bound(silas_llm::judge::GateModel {
            agent,
            temperature: 0.0,
            max_tokens: 256,
        }),
    }
}

/// An ApprovalService over `store` with a fresh owner key and the issue
/// policy of `cfg`.
#[allow(dead_code)]
pub fn approvals(store: &Store, cfg: &Config) -> ApprovalService {
    let svc = ApprovalService::new(
        store.clone(),
        Arc::new(OwnerKey::generate().unwrap()),
        IssuePolicy::from_config(cfg),
    );
    // The fixtures' owner answers arrive on this connection.
    owner_origin(&svc);
    svc
}

// ------------------------------------------------------ WorkEngine fixture

/// One data dir with a store, an approval service, the FakeLlm and the
/// real WorkEngine (sandbox + verifier).
#[allow(dead_code)]
pub struct Fx {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub svc: ApprovalService,
    pub fake: FakeLlm,
    pub engine: WorkEngine,
    /// The config the fixture was built from (`data_dir` = `dir`).
    pub cfg: Arc<Config>,
    /// The engine's status events.
    pub events: broadcast::Receiver<WorkStatusEvent>,
}

#[allow(dead_code)]
impl Fx {
    /// Default config, default issue policy, [`FAKE_API_KEY`].
    pub async fn new() -> Fx {
        Fx::build(FAKE_API_KEY, |_| {}, |_| IssuePolicy::default()).await
    }

    /// `edit` applied to the default config; the agents send `api_key`;
    /// the approval service issues by `policy(&config)`.
    pub async fn build(
        api_key: &str,
        edit: impl FnOnce(&mut Config),
        policy: impl FnOnce(&Config) -> IssuePolicy,
    ) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        // The sandbox user must be able to traverse into work, verify and
        // artifact directories.
        for d in ["", "work", "verify", "artifacts"] {
            let p = dir.path().join(d);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        let mut cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        edit(&mut cfg);
        let store = Store::open_in(dir.path()).unwrap();
        let key = Arc::new(OwnerKey::generate().unwrap());
        let svc = ApprovalService::new(store.clone(), key, policy(&cfg));
        owner_origin(&svc);
        let fake = FakeLlm::start().await.unwrap();
        let sandbox = SubprocessSandbox::new(launcher());
        let mut gate_runner = GateRunner::new();
        gate_runner.register("predicate", Arc::new(PredicateProvider::new(Vec::new())));
        gate_runner.register("guardrails_ai", Arc::new(silas_gates::GuardProvider));
        let (tx, events) = broadcast::channel(256);
        let engine = WorkEngine {
            store: store.clone(),
            approvals: svc.clone(),
            agents: Arc::new(agents_with_key(&fake, api_key)),
            registry: Arc::new(ExecutorRegistry::new(
                sandbox.clone(),
                dir.path().join("work"),
            )),
            verifier: Arc::new(VerificationRunner::new(
                sandbox,
                dir.path().join("verify"),
                Vec::new(),
                Limits::default(),
            )),
            gate_runner: GateHandle::from_runner(gate_runner),
            config: WorkConfig {
                system_gates: Vec::new(),
                max_gate_evals: 32,
                artifacts_dir: dir.path().join("artifacts"),
                journal_dir: dir.path().join("workspace-journal"),
                undo_window: std::time::Duration::from_secs(300),
                tool_limits: ToolLimits::default(),
                rate_limits: Arc::new(RuntimeLimits::from_config(&Default::default())),
                schedule_zone: "Europe/Vienna".into(),
            },
            events: tx,
            skills: None,
            mcp: None,
            connections: None,
        };
        Fx {
            dir,
            store,
            svc,
            fake,
            engine,
            cfg: Arc::new(cfg),
            events,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn artifact(&self, item: &str, name: &str) -> PathBuf {
        self.dir.path().join("artifacts").join(item).join(name)
    }

    /// Approves and verifies a task's plan as the Stream does (§5.1.2
    /// steps 5–8).
    pub fn approve(&self, item: &mut WorkItem) {
        self.approve_at(item, Timestamp::now(), true);
    }

    /// Issues a full-plan token at `issued`; with `verify`, verifies it
    /// (one nonce) at the same instant.
    pub fn approve_at(&self, item: &mut WorkItem, issued: Timestamp, verify: bool) {
        let tok = self
            .svc
            .issue_token(
                Subject::WorkItem(item),
                &approved(),
                ApprovalScope::FullPlan,
                &owner_origin(&self.svc),
                issued,
            )
            .unwrap();
        item.approval_token = Some(tok.clone());
        self.store.work_items().save(item).unwrap();
        if verify {
            let used = self.svc.verify(&tok, item, None, issued).unwrap();
            item.approval_token = Some(used);
            self.store.work_items().save(item).unwrap();
        }
    }

    /// `item(v)`, approved and verified.
    pub fn task(&self, v: Value) -> WorkItem {
        let mut t = item(v);
        self.approve(&mut t);
        t
    }

    pub fn get(&self, id: &str) -> WorkItem {
        self.store.work_items().get(id).unwrap().unwrap()
    }

    /// Every status event so far, without waiting.
    pub fn drain(&mut self) -> Vec<WorkStatusEvent> {
        std::iter::from_fn(|| self.events.try_recv().ok()).collect()
    }

    pub fn audit(&self) -> Vec<AuditEntry> {
        self.store.audit().tail(100_000).unwrap()
    }

    pub fn audit_events(&self) -> Vec<String> {
        audit_events(&self.store)
    }

    /// How many executions got a work directory.
    /// Sandboxed tool runs so far, from the audit log (their work dirs are
    /// removed once an attempt's artifacts are stored).
    pub fn executions(&self) -> usize {
        self.store
            .audit()
            .tail(100_000)
            .unwrap()
            .iter()
            .filter(|e| e.event == silas_actors::work_executor::tools::TOOL_EXECUTED)
            .count()
    }

    /// Every tool result the model was shown, in order, without repeats.
    pub fn tool_results(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for r in self.fake.requests() {
            for m in r.body["messages"].as_array().into_iter().flatten() {
                if m["role"] == "tool" {
                    let c = m["content"].as_str().unwrap_or_default().to_owned();
                    if !seen.contains(&c) {
                        seen.push(c);
                    }
                }
            }
        }
        seen
    }
}

// ------------------------------------------------------- items and replies

/// A tap-strength decision with `verdict`.
#[allow(dead_code)]
pub fn decision(verdict: &str) -> ApprovalDecision {
    serde_json::from_value(json!({"verdict": verdict, "approval_strength": "tap"})).unwrap()
}

#[allow(dead_code)]
pub fn approved() -> ApprovalDecision {
    decision("approved")
}

#[allow(dead_code)]
pub fn item(v: Value) -> WorkItem {
    serde_json::from_value(v).unwrap()
}

/// A verification check that passes once `path` exists.
#[allow(dead_code)]
pub fn file_check(name: &str, path: &Path) -> Value {
    json!({"name": name, "run": "true", "expect": {"file_exists": path.display().to_string()}})
}

/// The executor calls `shell_exec` with `cmd`.
#[allow(dead_code)]
pub fn shell(cmd: &str) -> Reply {
    Reply::tool_call("shell_exec", &json!({"command": cmd}))
}

/// The executor's final output, no next steps.
#[allow(dead_code)]
pub fn output(summary: &str) -> Reply {
    output_with(summary, &[])
}

/// The executor's final output with `next_steps`.
#[allow(dead_code)]
pub fn output_with(summary: &str, next_steps: &[&str]) -> Reply {
    Reply::json(&json!({"summary": summary, "artifact_refs": [], "next_steps": next_steps}))
}

/// The Proxy sends the turn to the Planner.
#[allow(dead_code)]
pub fn to_planner() -> Reply {
    Reply::json(&json!({"route": "planner", "reason": "needs a plan",
        "interaction_register": "execution", "interaction_mode": "act_and_report",
        "context_profile": "conversation"}))
}

/// The Proxy answers directly with this `AgentResponse` (extra fields kept:
/// the model may add anything).
#[allow(dead_code)]
pub fn direct(response: Value) -> Reply {
    Reply::json(&json!({"route": "direct", "reason": "simple",
        "response": response, "interaction_register": "status",
        "context_profile": "conversation"}))
}

/// The system prompt of a recorded request.
#[allow(dead_code)]
pub fn system_of(r: &RecordedRequest) -> String {
    r.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ------------------------------------------------------------ audit readers

/// Every audit event name, oldest first.
#[allow(dead_code)]
pub fn audit_events(store: &Store) -> Vec<String> {
    store
        .audit()
        .tail(100_000)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// The data of every `event` audit entry, oldest first.
#[allow(dead_code)]
pub fn audit_data(store: &Store, event: &str) -> Vec<Map<String, Value>> {
    store
        .audit()
        .tail(100_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == event)
        .map(|e| e.data)
        .collect()
}

// -------------------------------------------------------------- turn runtime

/// A message from `scope` (sender and connection named alike) on the web
/// channel from loopback.
#[allow(dead_code)]
pub fn inbound(scope: &str, text: &str) -> InboundMessage {
    InboundMessage {
        scope_id: scope.into(),
        channel: "web".into(),
        sender_id: scope.into(),
        text: text.into(),
        signed: None,
        connection_id: scope.into(),
        ip: Some("127.0.0.1".into()),
        dedup_key: None,
    }
}

/// A running Stream and what the tests read from it.
#[allow(dead_code)]
pub struct Turns {
    pub stream: StreamHandle,
    pub join: ractor::concurrency::JoinHandle<()>,
    pub dispatched: mpsc::Receiver<DispatchRequest>,
}

/// Spawns a Stream (with its TurnProcessors) over `deps`.
#[allow(dead_code)]
pub async fn spawn_stream(deps: TurnDeps, restart_policy: RestartPolicy) -> Turns {
    let (dispatch, dispatched) = mpsc::channel(16);
    let (status, _) = broadcast::channel(16);
    let (actor, join) = Actor::spawn(
        None,
        Stream,
        StreamArgs {
            deps: Arc::new(deps),
            dispatch,
            status,
            restart_policy,
        },
    )
    .await
    .unwrap();
    Turns {
        stream: StreamHandle { actor },
        join,
        dispatched,
    }
}

/// Spawns a WorkExecutor over `engine` that resumes for `owner`.
#[allow(dead_code)]
pub async fn spawn_executor(
    engine: &WorkEngine,
    dispatch_rx: Option<DispatchInbox>,
    supervision: RunSupervision,
) -> (
    ractor::ActorRef<WorkExecutorMsg>,
    ractor::concurrency::JoinHandle<()>,
) {
    Actor::spawn(
        None,
        WorkExecutor,
        WorkExecutorArgs {
            engine: engine.clone(),
            dispatch_rx,
            resume_scope_id: "owner".into(),
            supervision,
        },
    )
    .await
    .unwrap()
}

/// Restarts after 5 ms instead of the default backoff.
#[allow(dead_code)]
pub fn fast_restarts() -> RestartPolicy {
    RestartPolicy {
        base_backoff: Duration::from_millis(5),
        ..RestartPolicy::default()
    }
}

#[allow(dead_code)]
impl Turns {
    /// Sends one message from `scope` and waits until its reply is out on
    /// `sink`.
    pub async fn turn(&self, sink: &MemorySink, scope: &str, text: &str) -> String {
        self.turn_of(sink, inbound(scope, text)).await
    }

    /// Like [`Self::turn`], for a message built by the test (its address,
    /// its channel).
    pub async fn turn_of(&self, sink: &MemorySink, message: InboundMessage) -> String {
        let before = sink.replies().len();
        let SubmitOutcome::Accepted { inbox_id } = self.stream.submit(message).await.unwrap()
        else {
            panic!("message not accepted")
        };
        wait_for("reply", || sink.replies().len() > before).await;
        let (to, text) = sink.replies().pop().unwrap();
        assert_eq!(to, inbox_id);
        text
    }

    pub async fn stop(self) {
        self.stream.actor.stop(None);
        self.join.await.unwrap();
    }
}

/// A card of `kind` for `scope`, open for 30 minutes, decoded from the
/// payload a producer would have written.
#[allow(dead_code)]
pub fn pending_card(kind: CardKind, id: &str, scope: &str, payload: Value) -> PendingCard {
    let now = Timestamp::now();
    PendingCard {
        request_id: id.into(),
        scope_id: scope.into(),
        card: silas_core::cards::CardPayload::from_parts(kind.card_type(), payload).unwrap(),
        created_at: now,
        expires_at: now.plus(chrono::Duration::minutes(30)),
        audience: silas_storage::CardAudience::Owner,
    }
}

/// A card's payload in its stored JSON form (what a channel receives).
#[allow(dead_code)]
pub fn payload_of(card: &PendingCard) -> Value {
    serde_json::to_value(&card.card).unwrap()["payload"].clone()
}

// ------------------------------------------------------------------ waits

/// Polls `cond` every 10 ms until it holds; panics after 30 s.
#[allow(dead_code)]
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// The next settled status event (not `running`, not
/// `verification_failed`) of `id`; panics after 60 s.
#[allow(dead_code)]
pub async fn wait_for_event(
    rx: &mut broadcast::Receiver<WorkStatusEvent>,
    id: &str,
) -> WorkStatusEvent {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let e = rx.recv().await.unwrap();
            if e.work_item_id == id
                && e.status != WorkStatusKind::Running
                && e.status != WorkStatusKind::VerificationFailed
            {
                return e;
            }
        }
    })
    .await
    .unwrap()
}

/// Waits until card `id` went out on `sink`.
#[allow(dead_code)]
pub async fn wait_for_card(sink: &MemorySink, id: &str) {
    wait_for(&format!("card {id} sent"), || {
        sink.sent()
            .iter()
            .any(|o| matches!(o, Outbound::Card { card } if card.request_id == id))
    })
    .await;
}

/// Registers a test connection as owner-authenticated with the engine and
/// returns it as the origin of the owner's answers.
pub fn owner_origin(
    svc: &silas_actors::approval::ApprovalService,
) -> silas_actors::approval::AnswerOrigin {
    svc.owner_sessions().authenticated("test", "owner-device");
    silas_actors::approval::AnswerOrigin::new("test", "owner-device")
}
