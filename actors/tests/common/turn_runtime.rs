//! The turn runtime harness of `runtime*.rs` (issue #5): a Stream over a
//! real store with the offline responder behind a counting/gating double
//! ([`GatedLlm`]), a memory that can crash a turn ([`CrashingMemory`]), a
//! step log, an unpluggable channel ([`SwitchSink`]) and a WorkExecutor
//! double on the far end of the dispatch channel. Included by path, not
//! through `common/mod.rs`: the other suites do not need it.
// Each runtime test crate uses part of the harness.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::Actor;
use silas_actors::approval::ApprovalService;
use silas_actors::channel::{
    BoxFuture as ChannelFuture, ChannelError, ChannelSink, MemorySink, Outbound,
};
use silas_actors::gate_runner::GateHandle;
use silas_actors::memory::{KeywordMemory, MemoryIndex};
use silas_actors::restart::RestartPolicy;
use silas_actors::stream::{InboundMessage, Stream, StreamArgs, StreamHandle, SubmitOutcome};
use silas_actors::turn::pipeline::{TurnDeps, TurnObserver};
use silas_actors::work::{DispatchRequest, WorkStatusEvent};
use silas_core::config::Config;
use silas_core::model::agents::MemoryOp;
use silas_core::model::approval::{ApprovalDecision, ApprovalStrength, ApprovalVerdict};
use silas_core::model::memory::MemoryItem;
use silas_core::model::messages::TaintLevel;
use silas_gates::{GateRunner, GuardProvider, PredicateProvider};
use silas_keys::OwnerKey;
use silas_llm::provider::{BoxFuture, ChatMessage, ChatRequest, ChatResponse, Provider};
use silas_llm::{Agents, LlmError, OfflineProvider};
use silas_storage::{ReplyAck, Store, StoreError};
use tokio::sync::{Semaphore, broadcast, mpsc};

/// Offline responder that counts calls and holds any request whose user
/// text contains "wait" until the test adds a permit.
pub struct GatedLlm {
    pub inner: OfflineProvider,
    pub calls: AtomicUsize,
    pub gate: Semaphore,
    /// Every request's messages, rendered (scope-isolation checks).
    pub prompts: Mutex<Vec<String>>,
}

impl Provider for GatedLlm {
    fn name(&self) -> &str {
        "test"
    }
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.prompts
                .lock()
                .unwrap()
                .push(format!("{:?}", request.messages));
            let wait = request
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::User(t) if t.contains("wait")));
            if wait {
                let _permit = self.gate.acquire().await.unwrap();
            }
            Ok(self.inner.respond(request))
        })
    }
}

/// Memory double whose first search panics (the test-only crash hook), and
/// whose every search for a message containing [`POISON`] panics (the
/// crash-always hook: a poison message).
pub struct CrashingMemory {
    inner: KeywordMemory,
    armed: AtomicBool,
    /// Memories checked against the store (step 4), one per id.
    checked: Arc<AtomicUsize>,
}

/// A message containing this crashes its turn (at auto-retrieve, step 4,
/// after its chronicle entry was committed) on every attempt.
pub const POISON: &str = "poison-crash";

impl MemoryIndex for CrashingMemory {
    fn exist_each(&self, ids: &[&str]) -> Result<Vec<bool>, StoreError> {
        self.checked.fetch_add(ids.len(), Ordering::SeqCst);
        self.inner.exist_each(ids)
    }
    fn removals(&self) -> Option<u64> {
        self.inner.removals()
    }
    fn store_raw(&self, item: &MemoryItem) -> Result<(), StoreError> {
        self.inner.store_raw(item)
    }
    fn search(&self, s: &str, q: &str, n: usize) -> Result<Vec<MemoryItem>, StoreError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("injected crash in auto-retrieve");
        }
        if q.contains(POISON) {
            panic!("injected crash in auto-retrieve (poison message)");
        }
        self.inner.search(s, q, n)
    }
    // Rehydration's read; the injected crash is for the turn's retrieval.
    fn profile(&self, s: &str, n: usize) -> Result<Vec<MemoryItem>, StoreError> {
        self.inner.profile(s, n)
    }
    fn apply(&self, s: &str, op: &MemoryOp, t: TaintLevel, id: &str) -> Result<bool, StoreError> {
        self.inner.apply(s, op, t, id)
    }
}

#[derive(Default)]
pub struct StepLog(pub Mutex<Vec<(String, &'static str)>>);

impl TurnObserver for StepLog {
    fn step(&self, _scope: &str, inbox_id: &str, step: &'static str) {
        self.0.lock().unwrap().push((inbox_id.to_string(), step));
    }
}

pub struct Rt {
    pub stream: StreamHandle,
    pub join: ractor::concurrency::JoinHandle<()>,
    pub sink: MemorySink,
    /// While set, the channel reports "no connection" for every delivery.
    pub channel_down: Arc<AtomicBool>,
    /// Per reply sent with `client_ack`: kept as unacknowledged by then.
    pub kept_at_send: Arc<Mutex<Vec<bool>>>,
    pub llm: Arc<GatedLlm>,
    pub steps: Arc<StepLog>,
    /// Memories the turns checked against the store (step 4).
    pub memories_checked: Arc<AtomicUsize>,
    pub dispatched: mpsc::Receiver<DispatchRequest>,
    pub status: broadcast::Sender<WorkStatusEvent>,
}

#[derive(Default)]
pub struct Opts {
    pub cfg: Config,
    pub crash_once: bool,
    pub client_ack: bool,
}

impl Opts {
    /// Replies acknowledged by the client, as the owner's web replies are.
    pub fn client_acks() -> Opts {
        Opts {
            client_ack: true,
            ..Opts::default()
        }
    }
}

/// A channel that can be unplugged: while `down` is set every delivery
/// fails as "disconnected" (a closed browser tab, a killed CLI client).
pub struct SwitchSink {
    inner: MemorySink,
    down: Arc<AtomicBool>,
    /// Replies are acknowledged by the client (`ReplyAck::Client`), as the
    /// web channel's owner replies are; for each reply sent, whether the
    /// store already kept it as unacknowledged at that moment.
    client_ack: bool,
    store: Store,
    kept_at_send: Arc<Mutex<Vec<bool>>>,
}

impl ChannelSink for SwitchSink {
    fn reply_ack(&self, out: &Outbound) -> ReplyAck {
        match out {
            Outbound::Reply { .. } if self.client_ack => ReplyAck::Client,
            _ => ReplyAck::Channel,
        }
    }

    fn send(&self, out: Outbound) -> ChannelFuture<'_, Result<(), ChannelError>> {
        if let Outbound::Reply {
            scope_id, reply_to, ..
        } = &out
            && self.client_ack
        {
            let kept = self.store.inbox().unacked_for_scope(scope_id).unwrap();
            let kept = kept.iter().any(|r| &r.inbox_id == reply_to);
            self.kept_at_send.lock().unwrap().push(kept);
        }
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(ChannelError::Disconnected("no connection".into())) });
        }
        self.inner.send(out)
    }
}

pub fn key() -> Arc<OwnerKey> {
    static KEY: std::sync::OnceLock<Arc<OwnerKey>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| Arc::new(OwnerKey::generate().unwrap()))
        .clone()
}

pub async fn start(store: &Store, opts: Opts) -> Rt {
    let cfg = Arc::new(opts.cfg);
    let llm = Arc::new(GatedLlm {
        inner: silas_llm::select::offline_provider(&cfg),
        calls: AtomicUsize::new(0),
        gate: Semaphore::new(0),
        prompts: Mutex::new(Vec::new()),
    });
    let p: Arc<dyn Provider> = llm.clone();
    let agents = Agents::from_config(&cfg, |_| Ok((p.clone(), "rules".into()))).unwrap();
    let mut gates = GateRunner::new();
    gates.register("guardrails_ai", Arc::new(GuardProvider));
    gates.register("predicate", Arc::new(PredicateProvider::new(vec![])));
    let sink = MemorySink::new();
    let channel_down = Arc::new(AtomicBool::new(false));
    let kept_at_send = Arc::new(Mutex::new(Vec::new()));
    let steps = Arc::new(StepLog::default());
    let memories_checked = Arc::new(AtomicUsize::new(0));
    let memory: Arc<dyn MemoryIndex> = Arc::new(CrashingMemory {
        inner: KeywordMemory::new(store.clone()),
        armed: AtomicBool::new(opts.crash_once),
        checked: memories_checked.clone(),
    });
    let svc = ApprovalService::new(
        store.clone(),
        key(),
        silas_core::approval::IssuePolicy::from_config(&cfg),
    );
    svc.owner_sessions().authenticated("test", "owner-device");
    let deps = TurnDeps {
        skills: None,
        limits: Arc::new(silas_actors::limits::RuntimeLimits::from_config(
            &cfg.limits,
        )),
        store: store.clone(),
        approval_engine: silas_actors::approval::ApprovalHandle::standalone(svc.clone()),
        approvals: svc,
        config: cfg,
        agents,
        gates: GateHandle::from_runner(gates),
        memory,
        sink: Arc::new(SwitchSink {
            inner: sink.clone(),
            down: channel_down.clone(),
            client_ack: opts.client_ack,
            store: store.clone(),
            kept_at_send: kept_at_send.clone(),
        }),
        observer: steps.clone(),
    };
    let (dtx, dispatched) = mpsc::channel(16);
    let (status, _) = broadcast::channel(16);
    let policy = RestartPolicy {
        base_backoff: Duration::from_millis(5),
        ..RestartPolicy::default()
    };
    let (actor, join) = Actor::spawn(
        None,
        Stream,
        StreamArgs {
            deps: Arc::new(deps),
            dispatch: dtx,
            status: status.clone(),
            restart_policy: policy,
        },
    )
    .await
    .unwrap();
    Rt {
        stream: StreamHandle { actor },
        join,
        sink,
        channel_down,
        kept_at_send,
        llm,
        steps,
        memories_checked,
        dispatched,
        status,
    }
}

impl Rt {
    pub async fn stop(self) {
        self.stream.actor.stop(None);
        self.join.await.unwrap();
    }
}

pub fn msg(scope: &str, text: &str) -> InboundMessage {
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

pub async fn accept(rt: &Rt, scope: &str, text: &str) -> String {
    match rt.stream.submit(msg(scope, text)).await.unwrap() {
        SubmitOutcome::Accepted { inbox_id } => inbox_id,
        other => panic!("not accepted: {other:?}"),
    }
}

/// Waits until no accepted message is pending: every turn so far delivered.
pub async fn all_delivered(store: &Store, what: &str) {
    wait_for(what, || store.inbox().pending_all().unwrap().is_empty()).await;
}

pub async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

pub fn audit_events(store: &Store) -> Vec<String> {
    store
        .audit()
        .tail(10_000)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_in(dir.path()).unwrap();
    (dir, s)
}

pub fn approve() -> ApprovalDecision {
    ApprovalDecision {
        verdict: ApprovalVerdict::Approved,
        approval_strength: ApprovalStrength::Tap,
        conditions: Default::default(),
    }
}
