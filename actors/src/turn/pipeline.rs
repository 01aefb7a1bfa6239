//! The turn pipeline of spec §5.1, steps 0–16, as named functions called in
//! order by [`process`]. Each step reports its name to the
//! [`TurnObserver`] (tests record the order; production logs at debug).
//!
//! Durability and replay (see `silas_storage::inbox`): the message's taint
//! and chronicle entry commit together at step 3; the response's chronicle
//! entry, the reply and the turn's audit events commit together at the end
//! of step 12 (after the plan's work item and card, whose ids are
//! deterministic, are stored); delivery is marked after step 13. A turn
//! replayed after a crash resumes from the recorded stage, so nothing it
//! already recorded or sent happens twice.
//!
//! Stand-ins, called through their real interfaces: the review/proactive
//! queue (step 0.5) is empty until the review issue; the context window is
//! [`ScopeContext`]; memory is a [`MemoryIndex`]; personality (steps 7, 15)
//! is not yet applied beyond the audit of register/mode/profile.

use std::sync::Arc;

use serde_json::{Value, json};
use silas_core::approval::effective_needs_approval;
use silas_core::config::Config;
use silas_core::model::JsonObject;
use silas_core::model::agents::{AgentResponse, MemoryOp, MemoryOpType, Route};
use silas_core::model::context::{ContextItemKind, ContextZone};
use silas_core::model::gates::{GateAction, GateTrigger};
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier, TrustLevel};
use silas_core::model::messages::{ChannelMessage, TaintLevel};
use silas_core::model::work::WorkItemStatus;
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_gates::escalation::{self, ChannelCaps, EscalationStep, GateBlock};
use silas_gates::{
    AccessController, ActiveGateSet, AuditEvent, GateOutcome, GateRunner, TurnBudget,
};
use silas_llm::Agents;
use silas_llm::structured::Structured;
use silas_llm::toolset::{self, AgentRole, ApprovalByName, Preparation, SkillToolset, Toolset};
use silas_storage::{InboxRecord, InboxStage, PendingCard, Store, StoreError};

use crate::approval::{ApprovalError, ApprovalService};
use crate::channel::{ChannelError, ChannelSink, Outbound};
use crate::gate_runner::{GateHandle, GateRunnerArgs};
use crate::memory::{MemoryIndex, new_item};
use crate::turn::context::{ContextManager, item};
use crate::turn::plan::parse_plan;

/// The step names, in pipeline order.
pub const STEPS: [&str; 19] = [
    "active_gate_set",
    "review_queue",
    "input_gates",
    "sign_taint",
    "chronicle_input",
    "raw_memory_ingest",
    "auto_retrieve",
    "enforce_budget",
    "build_toolset",
    "route",
    "output_gates",
    "memory_queries",
    "memory_ops",
    "chronicle_response",
    "plan_approval",
    "send",
    "access_update",
    "post_turn_events",
    "turn_counter",
];

/// Memories injected by auto-retrieve (step 4).
pub const AUTO_RETRIEVE_LIMIT: usize = 5;
/// Card types of a plan approval request and of a paused tool call of
/// background work (§5.2.1 c2, §4.24).
pub use silas_core::cards::{PLAN_CARD, TOOL_CARD};
// Step 5 (the context manager's budget, eviction and subscriptions) lives
// in its own file; a child module, so it sees `Turn`'s fields.
#[path = "pipeline_context.rs"]
mod context_step;

/// What a chatbot customer is told when its request needs the owner's
/// approval: nothing about the plan, the owner or the card.
pub const SENT_FOR_REVIEW: &str = "Thanks — your request needs a person's review before anything is done. It has been sent for review.";

/// Sees each step as it starts (tests record the order).
pub trait TurnObserver: Send + Sync {
    fn step(&self, scope_id: &str, inbox_id: &str, step: &'static str);
}

/// Logs steps at debug level.
#[derive(Clone, Copy, Default)]
pub struct TraceObserver;

impl TurnObserver for TraceObserver {
    fn step(&self, scope_id: &str, inbox_id: &str, step: &'static str) {
        tracing::debug!(scope_id, inbox_id, step, "turn step");
    }
}

/// Everything a turn needs (the spec's `TurnContext` dependencies).
#[derive(Clone)]
pub struct TurnDeps {
    pub store: Store,
    pub config: Arc<Config>,
    pub agents: Agents,
    /// The GateRunner actor (fails closed when it cannot answer).
    pub gates: GateHandle,
    /// Token checks that are not issuance (message classification, the
    /// owner-session lookup for card answers).
    pub approvals: ApprovalService,
    /// The ApprovalEngine actor: the only way an answer becomes a token.
    pub approval_engine: crate::approval::ApprovalHandle,
    pub memory: Arc<dyn MemoryIndex>,
    pub sink: Arc<dyn ChannelSink>,
    pub observer: Arc<dyn TurnObserver>,
    /// §18.5 model-call and memory-op limits, shared with the WorkExecutor
    /// (one `Arc` in the daemon, so the global model-call cap covers both).
    pub limits: Arc<crate::limits::RuntimeLimits>,
    /// The skill install flow (issue #17): answers `skill_install` cards.
    /// `None` refuses them (nothing is installed without the dry run).
    pub skills: Option<Arc<crate::skills::SkillHost>>,
}

/// The gate runner with the built-in providers (`guardrails_ai` → guard,
/// `predicate`) that the GateRunner actor hosts for the turn pipeline and the
/// WorkExecutor (`crate::gate_runner`). Gates that
/// name an unregistered provider block ("No provider: …") — fail closed.
pub fn standard_gate_runner(config: &Config) -> GateRunner {
    let mut gates = GateRunner::new();
    gates.register("guardrails_ai", Arc::new(silas_gates::GuardProvider));
    gates.register(
        "predicate",
        Arc::new(silas_gates::PredicateProvider::new(vec![
            config.data_dir.clone(),
        ])),
    );
    gates
}

impl TurnDeps {
    /// The production wiring: the built-in gate providers (`guardrails_ai`,
    /// `predicate`) in a standalone GateRunner actor, keyword memory over the
    /// store, and the tracing observer. The daemon replaces `gates` and
    /// `approval_engine` with its supervised actors' handles
    /// ([`GateHandle::daemon`], [`crate::approval::ApprovalHandle::daemon`]).
    pub fn standard(
        store: Store,
        config: Arc<Config>,
        agents: Agents,
        approvals: ApprovalService,
        sink: Arc<dyn ChannelSink>,
    ) -> TurnDeps {
        let memory = standard_memory(&store, &config);
        Self::standard_with(store, config, agents, approvals, sink, memory)
    }

    /// [`Self::standard`] over a memory the caller opened (the daemon shares
    /// its one index between turns and `silas memory` requests).
    pub fn standard_with(
        store: Store,
        config: Arc<Config>,
        agents: Agents,
        approvals: ApprovalService,
        sink: Arc<dyn ChannelSink>,
        memory: Arc<dyn MemoryIndex>,
    ) -> TurnDeps {
        let gates = GateHandle::standalone(GateRunnerArgs::from_config(config.clone()));
        TurnDeps {
            limits: Arc::new(crate::limits::RuntimeLimits::from_config(&config.limits)),
            memory,
            store,
            config,
            agents,
            gates,
            approval_engine: crate::approval::ApprovalHandle::standalone(approvals.clone()),
            approvals,
            sink,
            observer: Arc::new(TraceObserver),
            skills: None,
        }
    }
}

/// The full-text memory over `store`, its index in
/// `{data_dir}/memory-index` (rebuilt in the background when missing or
/// stale); the keyword scan when the index cannot be opened, so memory
/// still works (said in the log).
pub fn standard_memory(store: &Store, config: &Config) -> Arc<dyn MemoryIndex> {
    match open_memory(store, config) {
        Some(m) => Arc::new(m),
        None => Arc::new(crate::memory::KeywordMemory::new(store.clone())),
    }
}

/// The full-text memory, or `None` (logged) when its index cannot open.
pub fn open_memory(store: &Store, config: &Config) -> Option<silas_memory::Memory> {
    let dir = config.data_dir.join(silas_memory::INDEX_DIR);
    match silas_memory::Memory::open(store.clone(), &dir) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::error!(code = %silas_core::Coded::code(&e), dir = %dir.display(),
                "memory index unavailable, using the keyword scan: {e}");
            None
        }
    }
}

/// Why a turn (or an approval decision) failed. Each maps to a taxonomy code.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("card {0:?} is unknown or already decided")]
    UnknownCard(String),
    #[error("work dispatch unavailable: {0}")]
    Dispatch(String),
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
    /// Over a §18.5 limit; nothing was done.
    #[error("rate limited ({}): nothing was done", .0.config_key())]
    RateLimited(crate::limits::LimitKind),
    /// A plan names work of another conversation scope.
    #[error("refused: {0}")]
    ForeignReference(String),
    /// The plan's workspace is not (or no longer) registered as it asks.
    #[error("refused: {0}")]
    Workspace(String),
    /// The skill install flow refused or failed (named rule, hash or dry run).
    #[error(transparent)]
    Skill(#[from] crate::skills::SkillFlowError),
}

impl Coded for TurnError {
    fn code(&self) -> ErrorCode {
        match self {
            TurnError::Store(e) => e.code(),
            TurnError::Approval(e) => e.code(),
            TurnError::Channel(e) => e.code(),
            TurnError::UnknownCard(_) => ErrorCode::EDbNotFound,
            TurnError::Dispatch(_) => ErrorCode::ESandboxUnavailable,
            TurnError::Unavailable(_) => ErrorCode::EChannelTimeout,
            TurnError::RateLimited(_) => ErrorCode::EChannelRateLimited,
            TurnError::ForeignReference(_) | TurnError::Workspace(_) => ErrorCode::EApprovalScope,
            TurnError::Skill(e) => e.code(),
        }
    }
}

/// Per-scope state the TurnProcessor keeps between turns (rebuilt from
/// redb on restart).
pub struct ScopeState {
    pub scope_id: String,
    /// The number the next turn gets.
    pub turn_number: u64,
    pub context: ContextManager,
    pub access: AccessController,
}

/// What a processed turn did.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnSummary {
    pub inbox_id: String,
    pub reply: Option<String>,
    pub card: Option<String>,
    pub replayed_from: InboxStage,
}

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

struct Turn<'a> {
    deps: &'a TurnDeps,
    scope: &'a mut ScopeState,
    record: InboxRecord,
    turn_number: u64,
    active: ActiveGateSet,
    budget: TurnBudget,
    audit: Vec<(String, JsonObject)>,
    taint: TaintLevel,
    text: String,
    input: Option<GateOutcome>,
    toolset_names: Vec<String>,
    response: Option<AgentResponse>,
    source: &'static str,
    reply: Option<String>,
    blocked: bool,
    card: Option<PendingCard>,
    used: silas_core::model::work::BudgetUsed,
}

/// Runs (or resumes) one accepted message through the pipeline.
pub async fn process(
    deps: &TurnDeps,
    scope: &mut ScopeState,
    record: InboxRecord,
) -> Result<TurnSummary, TurnError> {
    let replayed_from = record.stage;
    let turn_number = record.turn_number.unwrap_or(scope.turn_number);
    let text = record.message.text.clone();
    let mut t = Turn {
        budget: TurnBudget::new(deps.config.limits.max_gate_evals_per_turn),
        deps,
        scope,
        record,
        turn_number,
        active: ActiveGateSet::default(),
        audit: Vec::new(),
        taint: TaintLevel::External,
        text,
        input: None,
        toolset_names: Vec::new(),
        response: None,
        source: "agent:proxy",
        reply: None,
        blocked: false,
        card: None,
        used: Default::default(),
    };
    if t.record.stage == InboxStage::Delivered {
        return Ok(t.summary(replayed_from));
    }
    if t.record.stage < InboxStage::Responded {
        t.active_gate_set()?;
        t.review_queue();
        t.input_gates().await?;
        if !t.blocked {
            t.sign_taint()?;
            t.chronicle_input().await?;
            t.raw_memory_ingest()?;
            t.auto_retrieve()?;
            t.enforce_budget().await?;
            t.build_toolset();
            t.route().await;
            t.output_gates().await?;
        }
        if !t.blocked {
            t.memory_queries()?;
            t.memory_ops().await?;
        }
        let chronicle = t.chronicle_response();
        t.plan_approval()?;
        t.commit_response(chronicle).await?;
    } else {
        t.reply = t.record.reply.clone();
    }
    t.send().await?;
    t.access_update();
    t.post_turn_events().await?;
    t.turn_counter();
    Ok(t.summary(replayed_from))
}

impl Turn<'_> {
    fn step(&self, name: &'static str) {
        self.deps
            .observer
            .step(&self.scope.scope_id, &self.record.inbox_id, name);
    }

    fn summary(&self, replayed_from: InboxStage) -> TurnSummary {
        TurnSummary {
            inbox_id: self.record.inbox_id.clone(),
            reply: self.reply.clone(),
            card: self.card.as_ref().map(|c| c.request_id.clone()),
            replayed_from,
        }
    }

    fn push_events(&mut self, events: impl IntoIterator<Item = AuditEvent>) {
        for e in events {
            self.audit.push((e.event, e.data));
        }
    }

    fn push(&mut self, event: &str, data: Value) {
        self.audit.push((event.to_string(), obj(data)));
    }

    fn ctx_id(&self, what: &str) -> String {
        format!("{}:{what}", self.record.inbox_id)
    }

    /// Step 0: system gates + the active work item's gates, compiled once.
    fn active_gate_set(&mut self) -> Result<(), TurnError> {
        self.step("active_gate_set");
        match ActiveGateSet::compile(&self.deps.config.gates.system, &[]) {
            Ok(set) => self.active = set,
            Err(e) => {
                // A gate set that cannot be compiled fails closed: the
                // input lane blocks the turn (§18.1 E_GATE_*).
                self.push(
                    "gate_set_invalid",
                    json!({"error": e.to_string(), "code": ErrorCode::EGateProvider.as_str()}),
                );
                self.blocked = true;
                self.reply = Some(escalation::POLITE_REDIRECT_MESSAGE.to_string());
            }
        }
        Ok(())
    }

    /// Step 0.5: review + proactive queue (empty until the review issue).
    fn review_queue(&mut self) {
        self.step("review_queue");
    }

    fn gate_context(&self, key: &str, text: &str) -> JsonObject {
        obj(
            json!({key: text, "sender_id": self.record.message.sender_id,
                   "scope_id": self.scope.scope_id}),
        )
    }

    /// Applies a policy block's escalation (§5.1.1); returns the text sent
    /// instead of a response.
    fn escalate(&mut self, outcome: &GateOutcome) -> String {
        let Some(r) = outcome.blocked() else {
            return escalation::POLITE_REDIRECT_MESSAGE.to_string();
        };
        let on_block = self
            .active
            .gates()
            .iter()
            .find(|g| g.name == r.gate_name)
            .map(|g| g.on_block.clone())
            .unwrap_or_else(|| "report".to_string());
        let block = GateBlock {
            gate_name: r.gate_name.clone(),
            reason: r.reason.clone(),
            on_block,
            sender_id: self.record.message.sender_id.clone(),
        };
        let plan = escalation::plan(&block, None, ChannelCaps::default(), 0);
        // The escalation's own `gate_blocked` (with sender) replaces the runner's.
        let runner_events = outcome
            .audit
            .iter()
            .filter(|e| e.event != silas_gates::audit::names::GATE_BLOCKED)
            .cloned()
            .collect::<Vec<_>>();
        self.push_events(runner_events);
        self.push_events(plan.audit);
        let mut text = None;
        for s in plan.steps {
            match s {
                EscalationStep::SendMessage(m) => text = Some(m),
                EscalationStep::ReportToOwner => self.push(
                    "gate_block_reported",
                    json!({"gate": block.gate_name, "scope_id": self.scope.scope_id}),
                ),
                _ => {}
            }
        }
        text.unwrap_or_else(|| "This request was blocked by a policy gate.".to_string())
    }

    /// This turn's active gates for `trigger`, charged to the turn's
    /// evaluation budget (`max_gate_evals_per_turn`).
    async fn run_gates(&mut self, trigger: GateTrigger, ctx: JsonObject) -> GateOutcome {
        self.deps
            .gates
            .check_gates(self.active.gates(), trigger, None, ctx, &mut self.budget)
            .await
    }

    /// Step 1: input gates, two lanes; a policy block escalates and stops.
    async fn input_gates(&mut self) -> Result<(), TurnError> {
        self.step("input_gates");
        if self.blocked {
            return Ok(());
        }
        let ctx = self.gate_context("message", &self.text);
        let outcome = self.run_gates(GateTrigger::EveryUserMessage, ctx).await;
        if outcome.blocked().is_some() {
            self.reply = Some(self.escalate(&outcome));
            self.blocked = true;
            return Ok(());
        }
        self.push_events(outcome.audit.clone());
        if outcome.approvals_required().next().is_some() {
            // Gate approval cards need the card flow of the review issue;
            // until then a required approval fails closed.
            self.push("gate_approval_unavailable", json!({"lane": "input"}));
            self.reply = Some(escalation::POLITE_REDIRECT_MESSAGE.to_string());
            self.blocked = true;
            return Ok(());
        }
        if let Some(Value::String(m)) = outcome.merged_context.get("message") {
            self.text = m.clone();
        }
        if !outcome.quality_results.is_empty() {
            self.push(
                "quality_gate_input",
                json!({"results": outcome.quality_results.len()}),
            );
        }
        self.input = Some(outcome);
        Ok(())
    }

    /// Step 2: taint (once per message; a replay reuses the recorded one).
    fn sign_taint(&mut self) -> Result<(), TurnError> {
        self.step("sign_taint");
        if let Some(t) = self.record.taint {
            self.taint = t;
            return Ok(());
        }
        let m = &self.record.message;
        let message = ChannelMessage {
            channel: m.channel.clone(),
            sender_id: m.sender_id.clone(),
            text: m.text.clone(),
            timestamp: self.record.received_at,
            attachments: Vec::new(),
            reply_to: None,
        };
        // `auth` taint for a connection that authenticated with an owner
        // credential (set by the server at acceptance); a chatbot customer
        // or anything else is `external` unless it carries a valid owner
        // signature (§5.12).
        let known_identity = m.channel != "webhook" && m.owner_authenticated;
        let c = self.deps.approvals.classify_message(
            &message,
            m.signed.as_ref(),
            known_identity,
            Timestamp::now(),
        )?;
        self.taint = c.taint();
        Ok(())
    }

    /// Step 3: the message into the scope's chronicle (durable with taint).
    async fn chronicle_input(&mut self) -> Result<(), TurnError> {
        self.step("chronicle_input");
        let it = item(
            self.ctx_id("in"),
            ContextZone::Chronicle,
            ContextItemKind::Message,
            format!(
                "[{}] {}: {}",
                self.taint.as_str(),
                self.record.message.sender_id,
                self.text
            ),
            self.turn_number,
            &format!("channel:{}", self.record.message.channel),
            self.taint,
            false,
        );
        // Durable only for a signed message (see `input_wait`); otherwise
        // the turn's durable response commit carries it.
        let wait = self.record.input_wait();
        self.record = self
            .deps
            .store
            .inbox()
            .record_input_async(
                &self.record.inbox_id,
                self.taint,
                self.turn_number,
                &it,
                wait,
            )
            .await?;
        self.scope.context.add(it);
        Ok(())
    }

    /// Step 3.5: raw capture in the low-reingestion lane (idempotent id).
    fn raw_memory_ingest(&mut self) -> Result<(), TurnError> {
        self.step("raw_memory_ingest");
        let m = new_item(
            &format!("raw-{}", self.record.inbox_id),
            &self.scope.scope_id,
            &self.text,
            MemoryType::Episode,
            ReingestionTier::LowReingestion,
            self.taint,
            "conversation_raw",
        );
        self.deps.memory.store_raw(&m)?;
        Ok(())
    }

    fn inject_memories(&mut self, found: Vec<silas_core::model::memory::MemoryItem>) {
        // Every memory retrieval returns counts (§3.8 `access_count`): the
        // consolidator's promotion proposals read it. Advisory, so a
        // failure to count does not fail the turn.
        let ids: Vec<String> = found.iter().map(|m| m.memory_id.clone()).collect();
        if !ids.is_empty()
            && let Err(e) = self.deps.memory.record_access(&ids)
        {
            tracing::warn!(scope_id = %self.scope.scope_id, "memory access not counted: {e}");
        }
        for m in found {
            let id = format!("mem:{}", m.memory_id);
            if self.scope.context.contains(&id) {
                continue;
            }
            let mut it = item(
                id,
                ContextZone::Memory,
                ContextItemKind::Memory,
                m.content.clone(),
                self.turn_number,
                "memory",
                m.taint,
                false,
            );
            it.relevance = 0.5;
            self.scope.context.add(it);
        }
    }

    /// Step 4: keyword retrieval into the memory zone — after dropping
    /// memories forgotten since they were injected (`silas memory forget`
    /// erases them from the prompt too, not only from the store).
    fn auto_retrieve(&mut self) -> Result<(), TurnError> {
        self.step("auto_retrieve");
        let memory = self.deps.memory.clone();
        let mut failed = None;
        self.scope.context.remove_where(|i| {
            let Some(id) = i.ctx_id.strip_prefix("mem:") else {
                return false;
            };
            match memory.exists(id) {
                Ok(exists) => !exists,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        let found =
            self.deps
                .memory
                .search(&self.scope.scope_id, &self.text, AUTO_RETRIEVE_LIMIT)?;
        self.inject_memories(found);
        Ok(())
    }

    /// Step 6: the wrapper chain for the proxy/planner.
    fn build_toolset(&mut self) {
        self.step("build_toolset");
        let (allowed, events) = self.scope.access.allowed_tools(chrono::Utc::now());
        self.push_events(events);
        let allowed = match allowed {
            silas_gates::AllowedTools::All => toolset::AllowedTools::All,
            silas_gates::AllowedTools::Only(v) => toolset::AllowedTools::only(v),
        };
        let chain = toolset::build_chain(
            SkillToolset::new(toolset::core_tools(false)),
            Preparation {
                role: AgentRole::Proxy,
                work_item_skills: Default::default(),
            },
            allowed,
            Arc::new(ApprovalByName::new(Vec::<String>::new())),
        );
        self.toolset_names = chain.specs().into_iter().map(|s| s.name).collect();
    }

    /// §18.5: one model call for this scope, or — over the scope's limit
    /// or the global cap — the deterministic safe reply, audited, and the
    /// turn ends without a model call (`blocked`, so no memory ops run and
    /// no response enters the chronicle).
    fn llm_allowed(&mut self, agent: &str) -> bool {
        match self
            .deps
            .limits
            .llm_call(&self.scope.scope_id, std::time::Instant::now())
        {
            Ok(()) => true,
            Err(kind) => {
                self.push(
                    "security_rate_limited",
                    json!({"scope_id": self.scope.scope_id, "limit": kind.as_str(),
                           "agent": agent, "inbox_id": self.record.inbox_id}),
                );
                self.reply = Some(crate::limits::LLM_RATE_LIMITED_MESSAGE.to_string());
                self.response = None;
                self.blocked = true;
                false
            }
        }
    }

    /// Step 7: Proxy routing, then the Planner when asked for — each a
    /// model call under the §18.5 limit.
    async fn route(&mut self) {
        self.step("route");
        if !self.llm_allowed("proxy") {
            return;
        }
        let budgets = self.budgets();
        let mut rendered = crate::turn::context::rendered(
            &self.scope.context,
            &budgets,
            self.toolset_names.clone(),
            &self.scope.access.state().level,
        );
        rendered.skills = self.skill_lines();
        let progress = self.progress();
        let run = progress
            .around(
                self.deps
                    .agents
                    .route(&rendered, &self.text, &mut self.used),
            )
            .await;
        self.audit_coerced("proxy", &run.coerced);
        let (decision, fallback) = match run.outcome {
            Structured::Valid { value, .. } => (value, false),
            Structured::Fallback { value, .. } => (value, true),
        };
        if self.scope.context.set_profile(&decision.context_profile) {
            self.push(
                "context_profile_switched",
                json!({"scope_id": self.scope.scope_id, "profile": decision.context_profile}),
            );
        }
        self.push(
            "turn_routed",
            json!({"scope_id": self.scope.scope_id, "route": decision.route.as_str(),
                   "register": decision.interaction_register.as_str(),
                   "mode": decision.interaction_mode.as_str(),
                   "profile": decision.context_profile, "fallback": fallback}),
        );
        let response = match (decision.route, decision.response) {
            (Route::Direct, Some(r)) => r,
            (Route::Direct, None) => AgentResponse::message("I have no answer to that."),
            (Route::Planner, _) => {
                if !self.llm_allowed("planner") {
                    return;
                }
                self.source = "agent:planner";
                let mut rendered = rendered;
                // Only the owner's planner learns the workspace names: a
                // customer's conversation has no business with them.
                if self.scope.scope_id == crate::turn::OWNER_SCOPE {
                    match crate::workspaces::planner_lines(&self.deps.store) {
                        Ok(lines) => rendered.workspaces = lines,
                        Err(e) => tracing::warn!("workspace registry unreadable: {e}"),
                    }
                }
                let run = progress
                    .around(self.deps.agents.plan(&rendered, &self.text, &mut self.used))
                    .await;
                self.audit_coerced("planner", &run.coerced);
                match run.outcome {
                    Structured::Valid { value, .. } | Structured::Fallback { value, .. } => value,
                }
            }
        };
        self.response = Some(response);
    }

    /// §10.3: installed skills' metadata for the proxy and planner — the
    /// owner's conversation only (a customer has no business with them).
    fn skill_lines(&mut self) -> Vec<String> {
        let Some(host) = self.deps.skills.clone() else {
            return Vec::new();
        };
        if self.scope.scope_id != crate::turn::OWNER_SCOPE {
            return Vec::new();
        }
        let budget = crate::turn::skill_context::budget(&self.deps.config);
        match crate::turn::skill_context::metadata_lines(&host, &budget) {
            Ok(s) => {
                if !s.excluded.is_empty() {
                    self.push(
                        "skill_metadata_excluded",
                        json!({"scope_id": self.scope.scope_id, "excluded": s.excluded}),
                    );
                }
                s.lines
            }
            Err(e) => {
                tracing::warn!("skills directory unreadable: {e}");
                Vec::new()
            }
        }
    }

    /// One `llm_output_coerced` per cosmetic field that took its default
    /// (field name, cause and default only — never the model's value).
    fn audit_coerced(&mut self, agent: &str, coerced: &[silas_llm::coerce::Coercion]) {
        for c in coerced {
            self.push(
                "llm_output_coerced",
                json!({"scope_id": self.scope.scope_id, "agent": agent, "field": c.field,
                       "cause": c.cause, "default": c.default}),
            );
        }
    }

    /// Step 8: output gates; a policy block suppresses the response.
    async fn output_gates(&mut self) -> Result<(), TurnError> {
        self.step("output_gates");
        let Some(resp) = self.response.as_mut() else {
            return Ok(());
        };
        let ctx = obj(json!({"response": resp.message,
                             "sender_id": self.record.message.sender_id,
                             "scope_id": self.scope.scope_id}));
        // Field-level borrows: `resp` borrows `self.response` mutably.
        let outcome = self
            .deps
            .gates
            .check_gates(
                self.active.gates(),
                GateTrigger::EveryAgentResponse,
                None,
                ctx,
                &mut self.budget,
            )
            .await;
        if outcome.blocked().is_some()
            || outcome
                .policy_results
                .iter()
                .any(|r| r.action == GateAction::RequireApproval)
        {
            self.reply = Some(self.escalate(&outcome));
            self.response = None;
            self.blocked = true;
            return Ok(());
        }
        if let Some(Value::String(m)) = outcome.merged_context.get("response") {
            resp.message = m.clone();
        }
        if !outcome.quality_results.is_empty() {
            self.push(
                "quality_gate_output",
                json!({"results": outcome.quality_results.len()}),
            );
        }
        self.push_events(outcome.audit);
        Ok(())
    }

    /// Step 9: the agent's memory queries (max 3 by the model's validator).
    /// Each also becomes a `memory_query` subscription (the harness keeps
    /// what the agent asked for live: re-run at every render, deduped
    /// against the memory zone, within `max_subscription_tokens`, until
    /// neither a reply nor a new query names it for
    /// `subscription_ttl_turns`), kept across restarts.
    fn memory_queries(&mut self) -> Result<(), TurnError> {
        self.step("memory_queries");
        let queries = self
            .response
            .as_ref()
            .map(|r| r.memory_queries.clone())
            .unwrap_or_default();
        for q in queries {
            let limit = usize::try_from(q.max_results).unwrap_or(usize::MAX).min(20);
            let found = self
                .deps
                .memory
                .search(&self.scope.scope_id, &q.query, limit)?;
            self.inject_memories(found);
            let query = q.query.trim();
            if !query.is_empty() {
                self.scope.context.subscriptions.subscribe(
                    silas_core::model::context::SubscriptionType::MemoryQuery,
                    query,
                    self.turn_number,
                );
            }
        }
        self.persist_subscriptions()
    }

    /// Step 10: memory ops, each gated `on_tool_call`, capped per turn.
    async fn memory_ops(&mut self) -> Result<(), TurnError> {
        self.step("memory_ops");
        let mut ops = self
            .response
            .as_ref()
            .map(|r| r.memory_ops.clone())
            .unwrap_or_default();
        let max = self.deps.config.limits.max_memory_ops_per_turn as usize;
        if ops.len() > max {
            self.push(
                "memory_ops_truncated",
                json!({"requested": ops.len(), "max": max, "scope_id": self.scope.scope_id}),
            );
            ops.truncate(max);
        }
        // §18.5 per-minute limit (per scope): the first ops within the
        // scope's allowance run, the rest are dropped and audited.
        let asked = u32::try_from(ops.len()).unwrap_or(u32::MAX);
        let granted =
            self.deps
                .limits
                .memory_ops(&self.scope.scope_id, asked, std::time::Instant::now());
        if granted < asked {
            self.push(
                "security_rate_limited",
                json!({"scope_id": self.scope.scope_id,
                       "limit": crate::limits::LimitKind::MemoryOps.as_str(),
                       "requested": asked, "allowed": granted,
                       "inbox_id": self.record.inbox_id}),
            );
            ops.truncate(granted as usize);
        }
        for (i, op) in ops.iter().enumerate() {
            if let Some(target) = self.constitutional_target(op)? {
                // §3.8: constitutional memories cannot be modified at runtime.
                self.push(
                    "memory_op_refused",
                    json!({"op": op.op.as_str(), "index": i, "memory_id": target,
                           "reason": "constitutional", "scope_id": self.scope.scope_id}),
                );
                continue;
            }
            let args = serde_json::to_value(op).unwrap_or(Value::Null);
            let ctx = obj(json!({"tool_name": "memory_op", "tool_args": args,
                                 "sender_id": self.record.message.sender_id}));
            let outcome = self.run_gates(GateTrigger::OnToolCall, ctx).await;
            let blocked = outcome
                .policy_results
                .iter()
                .any(|r| matches!(r.action, GateAction::Block | GateAction::RequireApproval));
            self.push_events(outcome.audit);
            if blocked {
                self.push(
                    "memory_op_blocked",
                    json!({"op": op.op.as_str(), "index": i}),
                );
                continue;
            }
            let id = format!("mem-{}-{i}", self.record.inbox_id);
            self.deps
                .memory
                .apply(&self.scope.scope_id, op, self.taint, &id)?;
        }
        Ok(())
    }

    /// The constitutional memory an update/delete/link op touches, if any
    /// (memory records live in the store's `memory` table).
    fn constitutional_target(&self, op: &MemoryOp) -> Result<Option<String>, TurnError> {
        if op.op == MemoryOpType::Store {
            return Ok(None);
        }
        let records = self.deps.store.records::<MemoryItem>();
        for id in [op.memory_id.as_deref(), op.link_to.as_deref()]
            .into_iter()
            .flatten()
        {
            if records
                .get(id)?
                .is_some_and(|m| m.trust_level == TrustLevel::Constitutional)
            {
                return Ok(Some(id.to_string()));
            }
        }
        Ok(None)
    }

    /// Step 11: the response's chronicle entry (committed with step 12's
    /// outcome in [`Self::commit_response`]).
    fn chronicle_response(&mut self) -> Option<silas_core::model::context::ContextItem> {
        self.step("chronicle_response");
        let resp = self.response.as_ref()?;
        self.reply = Some(resp.message.clone());
        let message = resp.message.clone();
        self.scope
            .context
            .subscriptions
            .note_reply(&message, self.turn_number);
        // The response is only as trusted as what it was derived from.
        let it = item(
            self.ctx_id("out"),
            ContextZone::Chronicle,
            ContextItemKind::Message,
            format!("Silas: {}", resp.message),
            self.turn_number,
            self.source,
            self.taint,
            false,
        );
        self.scope.context.add(it.clone());
        Some(it)
    }

    /// Step 12: plan approval flow (§5.1.2 up to the card). The agent's
    /// `needs_approval=false` is overridden unless a valid token exists —
    /// which a parsed plan never has.
    fn plan_approval(&mut self) -> Result<(), TurnError> {
        self.step("plan_approval");
        let Some(resp) = self.response.clone() else {
            return Ok(());
        };
        let Some(markdown) = resp
            .plan_action
            .as_ref()
            .and_then(|p| p.plan_markdown.clone())
        else {
            return Ok(());
        };
        let mut work = match parse_plan(&markdown) {
            Ok(w) => w,
            Err(e) => {
                self.push("plan_parse_failed", json!({"error": e.to_string()}));
                self.reply = Some(format!(
                    "{}\n\n(The proposed plan could not be read, so nothing was scheduled.)",
                    resp.message
                ));
                return Ok(());
            }
        };
        if let Some(prior) = resp
            .plan_action
            .as_ref()
            .and_then(|p| p.continuation_of.clone())
        {
            work.follow_up_of = Some(prior);
            if work.input_artifacts_from.is_empty() {
                work.input_artifacts_from = vec!["*".into()];
            }
        }
        // The item belongs to this scope (set here, never by the plan), and
        // may only build on work of the same scope.
        work.scope_id = Some(self.scope.scope_id.clone());
        if let Err(why) = crate::turn::plan::foreign_reference(&self.deps.store, &work) {
            self.push(
                "plan_reference_refused",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                       "detail": why}),
            );
            self.reply = Some(format!(
                "{}\n\n(The plan builds on work outside this conversation, so nothing was scheduled.)",
                resp.message
            ));
            return Ok(());
        }
        // A named workspace must be registered, writable if write is asked,
        // its extra paths real — else no card at all (issue #15).
        if let Err(why) = crate::workspaces::check_plan(&self.deps.store, &work) {
            let reason = match &why {
                crate::workspaces::PlanWorkspaceError::Refused(r) => r.kind(),
                crate::workspaces::PlanWorkspaceError::Store(_) => "registry_unreadable",
            };
            self.push(
                "plan_refused_workspace",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                   "reason": reason, "detail": why.to_string()}),
            );
            // A customer learns nothing about the owner's registry.
            self.reply = Some(if self.scope.scope_id == crate::turn::OWNER_SCOPE {
                format!(
                    "{}\n\n(The plan was refused, so nothing was scheduled: {why}.)",
                    resp.message
                )
            } else {
                format!(
                    "{}\n\n(The plan was refused, so nothing was scheduled.)",
                    resp.message
                )
            });
            return Ok(());
        }
        // Skills the plan names are bound to their installed content hashes,
        // which the plan hash the owner signs covers (§10.5).
        if let Err(why) = crate::turn::skill_context::bind(self.deps.skills.as_deref(), &mut work) {
            self.push(
                "plan_refused_skill",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                       "skills": work.skills, "detail": why}),
            );
            self.reply = Some(format!(
                "{}\n\n(The plan was refused, so nothing was scheduled: {why}.)",
                resp.message
            ));
            return Ok(());
        }
        let has_valid_token = false;
        let needs = effective_needs_approval(resp.needs_approval, has_valid_token);
        if needs && !resp.needs_approval {
            self.push(
                "needs_approval_overridden",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id}),
            );
        }
        work.needs_approval = needs;
        work.status = WorkItemStatus::Pending;
        work.approval_token = None;
        let request_id = format!("card-{}", self.record.inbox_id);
        if let Some(existing) = self.deps.store.work_items().get(&work.id)? {
            // The model chooses the plan's id. Saving over an existing item
            // would replace an approved body (and drop its token) or retarget
            // another plan's pending card at the model's text. The only
            // legitimate same-id save is this turn's own replay after a
            // crash: its card still points at the item and nothing was
            // approved yet. Anything else keeps the stored item and files
            // the new plan under an id derived from this turn.
            let own_replay = existing.approval_token.is_none()
                && existing.status == WorkItemStatus::Pending
                && self
                    .deps
                    .store
                    .records::<PendingCard>()
                    .get(&request_id)?
                    .is_some_and(|c| c.card.work_item_id() == Some(work.id.as_str()));
            if !own_replay {
                let renamed = format!("{}-{}", work.id, self.record.inbox_id);
                self.push(
                    "plan_id_collision",
                    json!({"proposed_id": work.id, "work_item_id": renamed,
                           "scope_id": self.scope.scope_id}),
                );
                work.id = renamed;
            }
        }
        let plan_hash = match silas_core::projections::plan_hash(&work) {
            Ok(h) => h,
            Err(e) => {
                self.push("plan_parse_failed", json!({"error": e.to_string()}));
                self.reply = Some(format!(
                    "{}\n\n(The proposed plan could not be read, so nothing was scheduled.)",
                    resp.message
                ));
                return Ok(());
            }
        };
        self.deps.store.work_items().save(&work)?;
        self.scope.context.add(item(
            format!("plan:{}", work.id),
            ContextZone::Workspace,
            ContextItemKind::Plan,
            markdown,
            self.turn_number,
            self.source,
            self.taint,
            true,
        ));
        let now = Timestamp::now();
        let ttl =
            chrono::Duration::minutes(i64::from(self.deps.config.approval.default_ttl_minutes));
        // Only the owner approves: a plan from a chatbot customer's scope
        // goes to the owner's Review (the owner scope), never back to the
        // customer, who is told only that it was sent for review.
        let from_customer = self.scope.scope_id != crate::turn::OWNER_SCOPE;
        // The plan hash binds the card to the plan as shown: an edit after
        // the card makes the approval fail (`decide_card`).
        let card = PendingCard {
            request_id,
            scope_id: crate::turn::OWNER_SCOPE.to_string(),
            card: silas_core::cards::proposed_plan_card(
                &work,
                &plan_hash,
                &self.record.inbox_id,
                &self.scope.scope_id,
                crate::turn::OWNER_SCOPE,
            ),
            created_at: now,
            expires_at: now.plus(ttl),
            audience: silas_storage::CardAudience::Owner,
        };
        let mut card = card;
        // The card shows the directory the registry has now; the approval
        // re-checks the registry (`approval_flow`).
        crate::workspaces::fill_card_path(&self.deps.store, &mut card);
        if from_customer {
            self.push(
                "plan_sent_for_review",
                json!({"work_item_id": work.id, "request_id": card.request_id,
                       "scope_id": self.scope.scope_id}),
            );
            self.reply = Some(SENT_FOR_REVIEW.to_string());
        }
        self.deps.store.records::<PendingCard>().put(&card)?;
        self.push(
            "plan_proposed",
            json!({"work_item_id": work.id, "request_id": card.request_id,
                   "scope_id": self.scope.scope_id}),
        );
        self.card = Some(card);
        Ok(())
    }

    /// Commits the turn's outcome: reply + response chronicle + audit.
    async fn commit_response(
        &mut self,
        chronicle: Option<silas_core::model::context::ContextItem>,
    ) -> Result<(), TurnError> {
        let reply = self.reply.clone().unwrap_or_default();
        let mut audit = std::mem::take(&mut self.audit);
        audit.push((
            "turn_completed".to_string(),
            obj(
                json!({"scope_id": self.scope.scope_id, "inbox_id": self.record.inbox_id,
                       "turn_number": self.turn_number, "blocked": self.blocked}),
            ),
        ));
        self.record = self
            .deps
            .store
            .inbox()
            .record_response_async(&self.record.inbox_id, &reply, chronicle.as_ref(), audit)
            .await?;
        Ok(())
    }

    /// Step 13: deliver the reply (and any card), then mark it delivered.
    async fn send(&mut self) -> Result<(), TurnError> {
        self.step("send");
        let m = &self.record.message;
        if let Some(text) = self.reply.clone() {
            let out = Outbound::Reply {
                scope_id: self.scope.scope_id.clone(),
                connection_id: m.connection_id.clone(),
                reply_to: self.record.inbox_id.clone(),
                text,
            };
            self.deliver(out, "reply").await?;
        }
        if let Some(card) = self.card.clone() {
            self.deliver(Outbound::Card { card }, "card").await?;
        }
        // Visible at once, durable within the lazy window: a crash before
        // that redelivers this reply, never reruns the turn.
        self.record = self
            .deps
            .store
            .inbox()
            .mark_delivered_async(&self.record.inbox_id)
            .await?;
        Ok(())
    }

    /// One delivery. Nobody connected to the scope is not a failed turn: the
    /// reply is already durable (inbox record + chronicle, committed at step
    /// 11) and a card stays pending in the store until answered or expired.
    /// Failing here would restart the processor, replay into the same empty
    /// channel and, past the restart intensity, take the daemon down —
    /// because a client closed its tab. Audited (no content) instead.
    /// Where progress notices of this turn's model calls go: the sender.
    fn progress(&self) -> crate::turn::progress::ProgressTarget {
        crate::turn::progress::ProgressTarget {
            sink: self.deps.sink.clone(),
            scope_id: self.scope.scope_id.clone(),
            connection_id: self.record.message.connection_id.clone(),
            reply_to: self.record.inbox_id.clone(),
        }
    }

    async fn deliver(&mut self, out: Outbound, kind: &str) -> Result<(), TurnError> {
        match self.deps.sink.send(out).await {
            Ok(()) => Ok(()),
            Err(ChannelError::Disconnected(why)) => {
                tracing::info!(scope_id = %self.scope.scope_id, kind, "not delivered: {why}");
                let data = json!({"scope_id": self.scope.scope_id,
                                  "inbox_id": self.record.inbox_id, "kind": kind});
                self.push("delivery_no_connection", data);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Step 14: access state after passed `custom_check` input gates.
    fn access_update(&mut self) {
        self.step("access_update");
        let Some(input) = self.input.take() else {
            return;
        };
        let now = chrono::Utc::now();
        for r in &input.policy_results {
            let is_check = self.active.gates().iter().any(|g| {
                g.name == r.gate_name
                    && g.on == GateTrigger::EveryUserMessage
                    && g.kind == silas_core::model::gates::GateType::CustomCheck
            });
            if is_check && r.action == GateAction::Continue {
                let events = self.scope.access.gate_passed(&r.gate_name, None, now);
                self.push_events(events);
            }
        }
    }

    /// Step 15: post-turn events (personality engine is later work; the
    /// access-state audit gathered after the commit is written here).
    async fn post_turn_events(&mut self) -> Result<(), TurnError> {
        self.step("post_turn_events");
        if !self.audit.is_empty() {
            self.deps
                .store
                .audit()
                .log_batch_async(std::mem::take(&mut self.audit))
                .await?;
        }
        Ok(())
    }

    /// Step 16.
    fn turn_counter(&mut self) {
        self.step("turn_counter");
        self.scope.turn_number = self.scope.turn_number.max(self.turn_number + 1);
    }
}
