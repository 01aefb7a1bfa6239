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
use silas_storage::{InboxRecord, InboxStage, InputRecord, PendingCard, Store, StoreError};

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
#[path = "pipeline_deps.rs"]
mod deps;
#[path = "pipeline_gates.rs"]
mod gates_step;
#[path = "pipeline_memory.rs"]
mod memory_step;
pub use deps::{
    TurnDeps, gate_config_errors, open_memory, script_gate_problems, standard_gate_runner,
    standard_memory,
};
pub use memory_step::MAX_MEMORY_CONTENT_CHARS;
pub use plan_step::{MAX_CUSTOMER_CARDS, MAX_CUSTOMER_CARDS_PER_ADDRESS, REVIEW_FULL};
#[path = "pipeline_plan.rs"]
mod plan_step;
#[path = "pipeline_send.rs"]
mod send_step;

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
    /// `MemoryIndex::removals` when the memories in `context` were last
    /// checked against the store (step 4): unchanged, none can be gone.
    pub memories_checked: Option<u64>,
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
    /// Step 3's record, left to the response commit (an unsigned message).
    input_record: Option<InputRecord>,
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
        input_record: None,
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
        t.redact_response();
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

    /// Step 0.5: review + proactive queue (empty until the review issue).
    fn review_queue(&mut self) {
        self.step("review_queue");
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
        let input = InputRecord {
            taint: self.taint,
            turn_number: self.turn_number,
            chronicle: it.clone(),
        };
        // Committed on its own only for a signed message (see
        // `input_first`); otherwise the turn's durable response commit
        // carries it, and the record moves on here, in memory.
        if self.record.input_first() {
            self.record = self
                .deps
                .store
                .inbox()
                .record_input_async(&self.record.inbox_id, input)
                .await?;
        } else {
            input.apply(&mut self.record);
            self.input_record = Some(input);
        }
        self.scope.context.add(it);
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
        // The proxy picks the turn's context profile from these; without
        // them its prompt read "one of: (none)" and every pick was coerced.
        rendered.profiles = self.deps.config.context.profiles.keys().cloned().collect();
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
            Structured::Fallback { mut value, cause } => {
                // The owner is told what failed and what to do; a customer
                // learns nothing about the deployment's model server.
                if self.scope.scope_id == crate::turn::OWNER_SCOPE
                    && let Some(r) = value.response.as_mut()
                {
                    r.message = silas_llm::structured::proxy_failure_message(&cause);
                }
                (value, true)
            }
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

    /// §0.5 secret isolation holds for what the model writes too: after the
    /// output gates (which judge the response as written and may block it),
    /// before anything stores, sends or shows it.
    fn redact_response(&mut self) {
        let Some(response) = self.response.as_mut() else {
            return;
        };
        let kinds = response.redact_secrets();
        if !kinds.is_empty() {
            let data =
                json!({"scope_id": self.scope.scope_id, "source": self.source, "kinds": kinds});
            self.push("secret_redacted_outbound", data);
        }
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
