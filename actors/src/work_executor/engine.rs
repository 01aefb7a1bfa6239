//! The WorkExecutor's work, without the actor (§5.2): the task loop, the
//! project loop, the goal cycle and reviewed batch execution, sequenced over
//! the pure policy in [`super::policy`]. Every step persists the work item
//! (status, attempts, budget_used, verification_results) before the next
//! one, and every status change is published as a [`WorkStatusEvent`].
//!
//! Two waits end a run without ending the item, each persisted together with
//! the card it waits on ([`super::cards`], one transaction): a goal-spawned
//! fix task that no standing approval covers is saved `blocked` with a plan
//! card (§5.2.3 step 4), and a tool call deferred for approval pauses the
//! item (`paused`, §5.2.1 c2) with a tool card holding the paused run. When
//! the owner has answered a tool card, the next dispatch resumes the run
//! from the pause via `Agents::resume_executor` and the loop carries on.
//!
//! This file holds the shared types, the persistence/audit/publish helpers
//! and the entry points; the task loop is in [`super::task_loop`], one
//! attempt (model slot, run/resume, pause, artifacts, planner) in
//! [`super::attempt`], projects/goals/batches in their own modules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use silas_core::config::GateDefinition;
use silas_core::model::JsonObject;
use silas_core::model::execution::ExecutorAgentOutput;
use silas_core::model::work::{WorkItem, WorkItemResult, WorkItemStatus, WorkItemType};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_execution::artifacts;
use silas_execution::executors::ExecutorRegistry;
use silas_execution::verification::{VerificationReport, VerificationRunner};
use silas_gates::{ActiveGateSet, AuditEvent};
use silas_llm::agents::Agents;
use silas_llm::provider::ToolCall;
use silas_llm::tool_loop::{ApprovalResolution, PausedRun};
use silas_storage::{PendingCard, Store, StoreError};
use tokio::sync::broadcast;

use super::cards::ToolPause;
use super::policy;
use super::tools::{Ledger, ToolLimits};
use crate::approval::{ApprovalError, ApprovalService};
use crate::gate_runner::GateHandle;
use crate::work::{CheckOutcome, WorkStatusEvent, WorkStatusKind};

/// Why the executor could not do its job (as opposed to the work failing).
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error("work item {0:?} not found")]
    NotFound(String),
    #[error("work item {id:?} is a {kind}, expected a {expected}")]
    WrongKind {
        id: String,
        kind: &'static str,
        expected: &'static str,
    },
    #[error("work store unavailable: {0}")]
    Store(#[from] StoreError),
    #[error("approval: {0}")]
    Approval(#[from] ApprovalError),
    #[error("artifact storage: {0}")]
    Io(String),
    #[error("batch selection refused: {0}")]
    Selection(#[from] policy::SelectionError),
    #[error("cannot encode work state: {0}")]
    Encoding(String),
    /// The workspace cannot be used as it is (gone from the registry, too
    /// large to copy, unreadable): the owner's to fix, not the store's.
    #[error("workspace {0}")]
    Workspace(String),
}

impl Coded for WorkError {
    fn code(&self) -> ErrorCode {
        match self {
            WorkError::NotFound(_) => ErrorCode::EDbNotFound,
            WorkError::WrongKind { .. } => ErrorCode::ECfgInvalid,
            WorkError::Store(e) => e.code(),
            WorkError::Approval(e) => e.code(),
            WorkError::Io(_) => ErrorCode::EDbIo,
            WorkError::Selection(_) => ErrorCode::EApprovalHash,
            WorkError::Encoding(_) => ErrorCode::EDbEncoding,
            WorkError::Workspace(_) => ErrorCode::ECfgInvalid,
        }
    }
}

/// Static configuration of the executor.
#[derive(Clone, Debug)]
pub struct WorkConfig {
    /// `config.gates.system`, compiled with each item's gates.
    pub system_gates: Vec<GateDefinition>,
    /// `limits.max_gate_evals_per_turn`, applied per attempt.
    pub max_gate_evals: u32,
    /// Durable per-item artifact directories: `{artifacts_dir}/{work_item_id}/`.
    pub artifacts_dir: PathBuf,
    /// Apply journals and the originals an undo puts back (owner-only):
    /// `{data_dir}/workspace-journal`.
    pub journal_dir: PathBuf,
    /// `approval.undo_window_seconds`: how long an apply can be undone.
    pub undo_window: std::time::Duration,
    pub tool_limits: ToolLimits,
    /// §18.5 limits shared with the turn pipeline: model calls per scope +
    /// the global cap (each executor attempt, resumption and planner
    /// consultation is one call) and `web_search` calls per scope.
    pub rate_limits: Arc<crate::limits::RuntimeLimits>,
    /// The zone goal schedules are read in (`scheduler.timezone`
    /// resolved), named on a goal's renewal card.
    pub schedule_zone: String,
}

/// Everything the executor sequences.
#[derive(Clone)]
pub struct WorkEngine {
    pub store: Store,
    pub approvals: ApprovalService,
    pub agents: Arc<Agents>,
    pub registry: Arc<ExecutorRegistry>,
    pub verifier: Arc<VerificationRunner>,
    /// The GateRunner actor (fails closed when it cannot answer).
    pub gate_runner: GateHandle,
    pub config: WorkConfig,
    pub events: broadcast::Sender<WorkStatusEvent>,
    /// Installed skills (issue #17): resolved and hash-checked before an
    /// item that names skills runs; `None`: such items are `blocked`.
    pub skills: Option<Arc<crate::skills::SkillHost>>,
    /// Skills' MCP servers (issue #17 item 7); `None`: no MCP tools.
    pub mcp: Option<Arc<crate::skills_mcp::McpSkills>>,
    /// The connection layer (§5.10.2): a connection skill's script needing
    /// permissions beyond the grant asks it for the owner's escalation.
    pub connections: Option<Arc<dyn crate::connection::permission_gate::PermissionEscalator>>,
}

/// What a successful task ends with.
pub(super) struct Done<'a> {
    pub summary: String,
    pub artifacts: BTreeMap<String, String>,
    pub next_steps: Vec<String>,
    pub report: Option<&'a VerificationReport>,
    /// Skills the skill-maker produced in the verified attempt.
    pub produced: Option<crate::skills::Produced>,
}

/// The outcome of one goal cycle (§5.2.3).
#[derive(Clone, Debug, PartialEq)]
pub enum GoalCycleOutcome {
    /// Every check passed.
    Healthy,
    /// Checks failed and the goal does not spawn tasks.
    Failed { failed_checks: Vec<String> },
    /// A fix task was spawned and run (its result).
    FixTask(WorkItemResult),
    /// A fix task was spawned but no standing approval authorised it: it is
    /// `blocked` awaiting a fresh interactive approval.
    FixTaskBlocked { task_id: String, reason: String },
    /// The goal's own approval did not verify at entry: nothing ran, the
    /// goal is `blocked` and a renewal card awaits the owner.
    Stopped { reason: String },
}

pub(super) fn terminal(s: WorkItemStatus) -> bool {
    matches!(
        s,
        WorkItemStatus::Done
            | WorkItemStatus::Failed
            | WorkItemStatus::Stuck
            | WorkItemStatus::Blocked
            | WorkItemStatus::Healthy
    )
}

pub(super) fn kind_for(s: WorkItemStatus) -> WorkStatusKind {
    match s {
        WorkItemStatus::Done | WorkItemStatus::Healthy => WorkStatusKind::Done,
        WorkItemStatus::Failed => WorkStatusKind::Failed,
        WorkItemStatus::Stuck => WorkStatusKind::Stuck,
        WorkItemStatus::Blocked | WorkItemStatus::Paused => WorkStatusKind::Blocked,
        WorkItemStatus::Pending | WorkItemStatus::Running => WorkStatusKind::Running,
    }
}

pub(super) fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

pub(super) fn artifact_error(e: artifacts::ArtifactError) -> WorkError {
    WorkError::Io(e.to_string())
}

pub(super) fn outcomes(report: Option<&VerificationReport>) -> Vec<CheckOutcome> {
    report
        .map(|r| {
            r.results
                .iter()
                .map(|c| CheckOutcome {
                    name: c.name.clone(),
                    passed: c.passed,
                    reason: c.reason.clone(),
                    detail: if c.passed {
                        String::new()
                    } else if c.errors.trim().is_empty() {
                        c.output.trim().to_owned()
                    } else {
                        c.errors.trim().to_owned()
                    },
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How one attempt ended, before verification.
pub(super) enum Attempt {
    Output(ExecutorAgentOutput, Ledger),
    Retry(String),
    /// A tool call awaits the owner's approval.
    Pause(Box<PausedRun>, Ledger),
}

/// A paused attempt the owner has answered: what the resumed run needs.
pub(super) struct Resume {
    pub(super) card_id: String,
    pub(super) pause: ToolPause,
    pub(super) resolution: ApprovalResolution,
    /// The approved call (it alone passes its `require_approval` gate).
    pub(super) approved: Option<ToolCall>,
}

/// Where a paused item stands.
pub(super) enum PauseState {
    /// The owner has not answered yet.
    Waiting,
    /// Answered; resume.
    Decided(Box<Resume>),
    /// The card is gone (expired or unreadable): the call stays unexecuted.
    Gone(String),
}

impl WorkEngine {
    pub(super) fn load(&self, id: &str) -> Result<WorkItem, WorkError> {
        self.store
            .work_items()
            .get(id)?
            .ok_or_else(|| WorkError::NotFound(id.to_owned()))
    }

    pub(super) fn persist(&self, item: &WorkItem) -> Result<(), WorkError> {
        // Only runtime state is written; the approval token (mirrored by the
        // ledger) and the plan fields stay as stored.
        let state = item.clone();
        self.store.work_items().update(&item.id, move |w| {
            w.status = state.status;
            w.attempts = state.attempts;
            w.budget_used = state.budget_used;
            w.verification_results = state.verification_results;
            Ok(())
        })?;
        Ok(())
    }

    /// Like [`Self::persist`], together with a card change (one transaction).
    pub(super) fn persist_with_card(
        &self,
        item: &WorkItem,
        card: Option<&PendingCard>,
        close: Option<&str>,
    ) -> Result<(), WorkError> {
        let mut stored = self.load(&item.id)?;
        stored.status = item.status;
        stored.attempts = item.attempts;
        stored.budget_used = item.budget_used.clone();
        stored.verification_results = item.verification_results.clone();
        self.store
            .work_items()
            .save_with_card(&stored, card, close)?;
        Ok(())
    }

    pub(super) fn audit(&self, event: &str, data: Value) -> Result<(), WorkError> {
        self.store.audit().log(event, obj(data))?;
        Ok(())
    }

    pub(super) fn audit_events(&self, events: &[AuditEvent]) -> Result<(), WorkError> {
        if !events.is_empty() {
            let batch = events
                .iter()
                .map(|e| (e.event.clone(), e.data.clone()))
                .collect();
            self.store.audit().log_batch(batch)?;
        }
        Ok(())
    }

    pub(super) fn publish(
        &self,
        id: &str,
        scope: &str,
        status: WorkStatusKind,
        summary: impl Into<String>,
        report: Option<&VerificationReport>,
    ) {
        // No subscriber is not an error: the status is persisted anyway.
        let _ = self.events.send(WorkStatusEvent {
            work_item_id: id.to_owned(),
            scope_id: scope.to_owned(),
            status,
            summary: summary.into(),
            verification: outcomes(report),
        });
    }

    pub(super) fn result(
        item: &WorkItem,
        summary: String,
        last_error: Option<String>,
    ) -> WorkItemResult {
        WorkItemResult {
            work_item_id: item.id.clone(),
            status: item.status,
            summary,
            last_error,
            verification_results: item.verification_results.clone(),
            budget_used: item.budget_used.clone(),
            artifacts: BTreeMap::new(),
            next_steps: Vec::new(),
        }
    }

    /// Ends an item: status, persist, audit, publish.
    pub(super) fn finish(
        &self,
        mut item: WorkItem,
        scope: &str,
        status: WorkItemStatus,
        summary: String,
        report: Option<&VerificationReport>,
    ) -> Result<WorkItemResult, WorkError> {
        item.status = status;
        self.persist(&item)?;
        self.ended(item, scope, summary, report)
    }

    /// Audits and publishes an item's persisted end.
    pub(super) fn ended(
        &self,
        item: WorkItem,
        scope: &str,
        summary: String,
        report: Option<&VerificationReport>,
    ) -> Result<WorkItemResult, WorkError> {
        let status = item.status;
        // The summary is the executor model's words (or a command's output
        // quoted in an error): no credential it came across goes to the
        // owner's screen or the store.
        let (summary, _) = silas_core::secrets::redact_conversation(&summary);
        self.audit(
            &format!("work_item.{}", status.as_str()),
            json!({"work_item_id": item.id, "attempts": item.attempts,
                   "tokens": item.budget_used.tokens, "cost_usd": item.budget_used.cost_usd}),
        )?;
        self.publish(&item.id, scope, kind_for(status), summary.clone(), report);
        let last_error = (status != WorkItemStatus::Done).then(|| summary.clone());
        Ok(Self::result(&item, summary, last_error))
    }

    /// The durable artifact directory of a work item.
    pub fn artifact_dir(&self, id: &str) -> PathBuf {
        self.config.artifacts_dir.join(id)
    }

    /// Runs any work item by kind (§4.12 `execute`). Goals run one cycle.
    pub async fn execute(&self, id: &str, scope: &str) -> Result<WorkItemResult, WorkError> {
        let item = self.load(id)?;
        match item.kind {
            WorkItemType::Task => self.run_task(id, scope).await,
            WorkItemType::Project => self.run_project(id, scope).await,
            WorkItemType::Goal => {
                let outcome = self.run_goal_cycle(id, scope).await?;
                let goal = self.load(id)?;
                let summary = match outcome {
                    GoalCycleOutcome::Healthy => "goal healthy".to_owned(),
                    GoalCycleOutcome::Failed { failed_checks } => {
                        format!("checks failed: {}", failed_checks.join(", "))
                    }
                    GoalCycleOutcome::FixTask(r) => {
                        format!("fix task {} ended {}", r.work_item_id, r.status.as_str())
                    }
                    GoalCycleOutcome::FixTaskBlocked { task_id, reason } => {
                        format!("fix task {task_id} blocked: {reason}")
                    }
                    GoalCycleOutcome::Stopped { reason } => {
                        format!("goal stopped: approval required ({reason})")
                    }
                };
                Ok(Self::result(&goal, summary, None))
            }
        }
    }

    // ---------------------------------------------------------------- task

    /// §5.2.1. An item already in a terminal state is returned as stored and
    /// never re-run.
    pub async fn run_task(&self, id: &str, scope: &str) -> Result<WorkItemResult, WorkError> {
        let item = self.load(id)?;
        if item.kind != WorkItemType::Task {
            return Err(WorkError::WrongKind {
                id: id.to_owned(),
                kind: item.kind.as_str(),
                expected: "task",
            });
        }
        if terminal(item.status) {
            return self.done_item(item, scope);
        }
        // 0. Approval gate: non-consuming check before anything runs.
        let Some(token) = item.approval_token.clone() else {
            return self.block_unapproved(item, scope, "no approval token".into(), None);
        };
        if let Err(e) = self.approvals.check(&token, &item, Timestamp::now()) {
            let code = e.code().as_str();
            return self.block_unapproved(item, scope, e.to_string(), Some(code));
        }
        // Skills at the content the approved plan bound (§10.5 hash-binding).
        let skills = match self.resolve_skills(&item)? {
            Ok(s) => s,
            Err(reason) => {
                let summary = format!("blocked: {reason}");
                return self.finish(item, scope, WorkItemStatus::Blocked, summary, None);
            }
        };
        // A paused item goes on only once the owner answered its card.
        let resume = if item.status == WorkItemStatus::Paused {
            match self.pause_state(&item)? {
                PauseState::Waiting => {
                    // Re-announce: the Stream (re)delivers the open card.
                    let s = "paused: a tool call awaits your approval".to_owned();
                    self.publish(&item.id, scope, WorkStatusKind::Blocked, s.clone(), None);
                    return Ok(Self::result(&item, s, None));
                }
                PauseState::Gone(why) => {
                    self.audit(
                        "tool_call_approval_lost",
                        json!({"work_item_id": item.id, "reason": why}),
                    )?;
                    let s =
                        format!("blocked: the paused tool call can no longer be approved ({why})");
                    return self.finish(item, scope, WorkItemStatus::Blocked, s, None);
                }
                PauseState::Decided(r) => Some(*r),
            }
        } else {
            None
        };
        // 0.5 Follow-up artifact hydration.
        let inputs = match self.hydrate(&item) {
            Ok(i) => i,
            Err(reason) => {
                self.audit(
                    "execution_blocked_linkage",
                    json!({"work_item_id": item.id, "follow_up_of": item.follow_up_of}),
                )?;
                let summary = format!("follow-up linkage error: {reason}");
                return self.finish(item, scope, WorkItemStatus::Blocked, summary, None);
            }
        };
        let gates = match ActiveGateSet::compile(&self.config.system_gates, &item.gates) {
            Ok(g) => g.gates().to_vec(),
            Err(e) => {
                let summary = format!("{}: gates do not compile: {e}", ErrorCode::EGateProvider);
                return self.finish(item, scope, WorkItemStatus::Blocked, summary, None);
            }
        };
        let workspace = item.workspace.is_some();
        let result = self
            .task_loop(item, scope, inputs, gates, resume, skills)
            .await;
        if let (true, Ok(r)) = (workspace, &result) {
            self.release_workspace(id, r.status);
        }
        result
    }
}
