//! The hostile-model suites' harness (`hostile_model.rs`, `hostile_memory.rs`,
//! `hostile_secrets.rs`): the WorkEngine fixture with the hostile model's
//! key, the turn runtime over it, plan builders, and the canary tools (every
//! tracing field captured; every place a secret could land).
#![allow(dead_code)]

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use crate::common::{Fx, Turns, agents_with_key, decision, fast_restarts, spawn_stream};
use serde_json::{Value, json};
use silas_actors::channel::{MemorySink, Outbound};
use silas_actors::gate_runner::GateHandle;
use silas_actors::memory::{KeywordMemory, MemoryIndex};
use silas_actors::turn::pipeline::{TraceObserver, TurnDeps, standard_gate_runner};
use silas_core::approval::IssuePolicy;
use silas_core::config::Config;
use silas_core::model::approval::ApprovalDecision;
use silas_gates::GateRunner;
use silas_storage::PendingCard;
use silas_testkit::Reply;

// ------------------------------------------------------------------ harness

/// The provider API key the agents send (allowed only in `Authorization`).
pub(crate) const API_KEY: &str = "sk-or-v1-c4n4ryK3yF0rTh3Pr0v1d3rOnlyInAuthHeader0001";

impl Fx {
    /// The shared WorkEngine fixture with the hostile model's key and the
    /// configured issue policy.
    pub(crate) async fn hostile() -> Fx {
        Fx::hostile_with(|_| {}).await
    }

    pub(crate) async fn hostile_with(edit: impl FnOnce(&mut Config)) -> Fx {
        Fx::build(API_KEY, edit, IssuePolicy::from_config).await
    }

    pub(crate) fn assert_chain_ok(&self) {
        let v = self.store.audit().verify_chain().unwrap();
        assert!(v.valid, "audit chain broken: {v:?}");
    }

    /// Starts the turn runtime (Stream + TurnProcessors) over this store
    /// with the production gate wiring and the hostile model.
    pub(crate) async fn runtime(&self) -> Rt {
        self.runtime_with(standard_gate_runner(&self.cfg, None))
            .await
    }

    pub(crate) async fn runtime_with(&self, gates: GateRunner) -> Rt {
        let sink = MemorySink::new();
        let memory: Arc<dyn MemoryIndex> = Arc::new(KeywordMemory::new(self.store.clone()));
        let deps = TurnDeps {
            skills: None,
            store: self.store.clone(),
            config: self.cfg.clone(),
            agents: agents_with_key(&self.fake, API_KEY),
            gates: GateHandle::from_runner(gates),
            approvals: self.svc.clone(),
            approval_engine: silas_actors::approval::ApprovalHandle::standalone(self.svc.clone()),
            memory,
            sink: Arc::new(sink.clone()),
            observer: Arc::new(TraceObserver),
            limits: Arc::new(silas_actors::limits::RuntimeLimits::from_config(
                &self.cfg.limits,
            )),
        };
        Rt {
            turns: spawn_stream(deps, fast_restarts()).await,
            sink,
        }
    }
}

/// The turn runtime and the sink its replies and cards go to.
pub(crate) struct Rt {
    pub(crate) turns: Turns,
    pub(crate) sink: MemorySink,
}

impl Deref for Rt {
    type Target = Turns;
    fn deref(&self) -> &Turns {
        &self.turns
    }
}

impl DerefMut for Rt {
    fn deref_mut(&mut self) -> &mut Turns {
        &mut self.turns
    }
}

impl Rt {
    /// Sends one message and waits until its reply is out.
    pub(crate) async fn turn(&self, scope: &str, text: &str) -> String {
        self.turns.turn(&self.sink, scope, text).await
    }

    /// Like [`Self::turn`], from the address `ip`.
    pub(crate) async fn turn_from(&self, scope: &str, text: &str, ip: &str) -> String {
        let mut message = crate::common::inbound(scope, text);
        message.ip = Some(ip.into());
        self.turns.turn_of(&self.sink, message).await
    }

    pub(crate) fn cards(&self) -> Vec<PendingCard> {
        self.sink
            .sent()
            .into_iter()
            .filter_map(|o| match o {
                Outbound::Card { card } => Some(card),
                _ => None,
            })
            .collect()
    }

    pub(crate) async fn stop(self) {
        self.turns.stop().await;
    }
}

pub(crate) fn declined() -> ApprovalDecision {
    decision("declined")
}

/// A plan whose front matter carries `extra` YAML lines.
pub(crate) fn plan_markdown(id: &str, extra: &str, body: &str) -> String {
    format!("---\nid: {id}\ntype: task\ntitle: \"Hostile {id}\"\n{extra}\n---\n\n{body}\n")
}

pub(crate) fn planner_reply(needs_approval: bool, markdown: &str) -> Reply {
    Reply::json(&json!({
        "message": "Plan ready; I already approved it myself.",
        "plan_action": {"action": "propose", "plan_markdown": markdown},
        "needs_approval": needs_approval,
    }))
}

pub(crate) fn gate_def(v: Value) -> silas_core::config::GateDefinition {
    v.as_object().unwrap().clone()
}

// ------------------------------------------------------------------ canary

/// Every tracing event and span field, as text, at every level.
struct CaptureLogs {
    buf: Arc<Mutex<String>>,
    next_id: std::sync::atomic::AtomicU64,
}

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!(" {}={value}", field.name()));
    }
}

impl CaptureLogs {
    fn push(&self, line: String) {
        let mut b = self
            .buf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.push_str(&line);
        b.push('\n');
    }
}

impl tracing::Subscriber for CaptureLogs {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = format!("span {}", attrs.metadata().name());
        attrs.record(&mut Fields(&mut line));
        self.push(line);
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::span::Id::from_u64(id + 1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut line = "record".to_owned();
        values.record(&mut Fields(&mut line));
        self.push(line);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} {}", event.metadata().level(), event.metadata().target());
        event.record(&mut Fields(&mut line));
        self.push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs the capturing subscriber for this test process (nextest runs
/// each test in its own process) and returns its buffer.
pub(crate) fn capture_logs() -> Arc<Mutex<String>> {
    static BUF: std::sync::OnceLock<Arc<Mutex<String>>> = std::sync::OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(String::new()));
        tracing::subscriber::set_global_default(CaptureLogs {
            buf: buf.clone(),
            next_id: std::sync::atomic::AtomicU64::new(0),
        })
        .expect("no other global subscriber");
        buf
    })
    .clone()
}

/// Where each place a canary could end up is looked at.
pub(crate) struct Places {
    pub(crate) request_bodies: String,
    pub(crate) authorization: Vec<Option<String>>,
    pub(crate) audit: String,
    pub(crate) redb: Vec<u8>,
    pub(crate) logs: String,
    pub(crate) frames: String,
}

impl Places {
    pub(crate) fn gather(f: &Fx, rt_frames: &[Outbound], logs: &Arc<Mutex<String>>) -> Places {
        let reqs = f.fake.requests();
        Places {
            request_bodies: reqs
                .iter()
                .map(|r| r.body.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            authorization: reqs.iter().map(|r| r.authorization.clone()).collect(),
            audit: serde_json::to_string(&f.audit()).unwrap(),
            redb: std::fs::read(f.path(silas_storage::STORE_FILE)).unwrap(),
            logs: logs.lock().unwrap().clone(),
            frames: serde_json::to_string(rt_frames).unwrap(),
        }
    }

    /// The places (by name) where `needle` appears.
    pub(crate) fn find(&self, needle: &str) -> Vec<&'static str> {
        let mut at = Vec::new();
        if self.request_bodies.contains(needle) {
            at.push("model request body");
        }
        if self.audit.contains(needle) {
            at.push("audit log");
        }
        if self
            .redb
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
        {
            at.push("redb file");
        }
        if self.logs.contains(needle) {
            at.push("tracing logs");
        }
        if self.frames.contains(needle) {
            at.push("channel frames");
        }
        at
    }
}
