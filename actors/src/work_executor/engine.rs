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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use silas_core::approval::Subject;
use silas_core::config::GateDefinition;
use silas_core::model::JsonObject;
use silas_core::model::approval::ToolCallApproval;
use silas_core::model::execution::ExecutorAgentOutput;
use silas_core::model::gates::{GateAction, GateTrigger};
use silas_core::model::work::{WorkItem, WorkItemResult, WorkItemStatus, WorkItemType};
use silas_core::{Coded, ErrorCode, Timestamp, projections};
use silas_execution::artifacts;
use silas_execution::executors::ExecutorRegistry;
use silas_execution::verification::{VerificationReport, VerificationRunner};
use silas_gates::{ActiveGateSet, AuditEvent, TurnBudget};
use silas_llm::agents::{Agents, ExecutorOutcome};
use silas_llm::prompts::RenderedContext;
use silas_llm::provider::ToolCall;
use silas_llm::structured::{EXECUTOR_INVALID_OUTPUT, Structured};
use silas_llm::tool_loop::{ApprovalResolution, PausedRun};
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, Preparation, SkillToolset, build_chain, core_tools,
};
use silas_storage::{PendingCard, Store, StoreError};
use tokio::sync::broadcast;

use super::cards::{self, ToolDecision, ToolPause};
use super::policy::{
    self, build_briefing, format_failures, loop_budget, next_attempt, results_as_json,
    should_consult_planner, with_egress_refusals,
};
use super::tools::{Ledger, ToolLimits, WorkTools};
use super::workspace::{StoredChanges, WorkspaceRun};
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
    /// Skills' MCP servers (issue #17 item 7); `None`: no MCP tools.
    pub mcp: Option<Arc<crate::skills_mcp::McpSkills>>,
}

/// What a successful task ends with.
pub(super) struct Done<'a> {
    pub summary: String,
    pub artifacts: BTreeMap<String, String>,
    pub next_steps: Vec<String>,
    pub report: Option<&'a VerificationReport>,
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
    card_id: String,
    pause: ToolPause,
    resolution: ApprovalResolution,
    /// The approved call (it alone passes its `require_approval` gate).
    approved: Option<ToolCall>,
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
    fn ended(
        &self,
        item: WorkItem,
        scope: &str,
        summary: String,
        report: Option<&VerificationReport>,
    ) -> Result<WorkItemResult, WorkError> {
        let status = item.status;
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
        let result = self.task_loop(item, scope, inputs, gates, resume).await;
        if let (true, Ok(r)) = (workspace, &result) {
            self.release_workspace(id, r.status);
        }
        result
    }

    pub(super) fn block_unapproved(
        &self,
        item: WorkItem,
        scope: &str,
        reason: String,
        code: Option<&str>,
    ) -> Result<WorkItemResult, WorkError> {
        self.audit(
            "execution_blocked_no_approval",
            json!({"work_item_id": item.id, "reason": reason, "code": code}),
        )?;
        let summary = format!("blocked: approval required ({reason})");
        self.finish(item, scope, WorkItemStatus::Blocked, summary, None)
    }

    /// Loads the artifacts a follow-up imports (name → content).
    pub(super) fn hydrate(&self, item: &WorkItem) -> Result<BTreeMap<String, String>, String> {
        let Some(prior_id) = &item.follow_up_of else {
            return Ok(BTreeMap::new());
        };
        let prior = match self.store.work_items().get(prior_id) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(format!("referenced work item {prior_id:?} not found")),
            Err(e) => return Err(format!("{}: {e}", e.code())),
        };
        if prior.status != WorkItemStatus::Done {
            return Err(format!(
                "referenced work item {prior_id:?} is {}, not done",
                prior.status.as_str()
            ));
        }
        let dir = self.artifact_dir(prior_id);
        let available: BTreeSet<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.path().is_file())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let wanted = policy::wanted_artifacts(&item.input_artifacts_from, &available)?;
        let mut out = BTreeMap::new();
        for name in wanted {
            let bytes = std::fs::read(dir.join(&name))
                .map_err(|e| format!("cannot read artifact {name}: {e}"))?;
            out.insert(name, String::from_utf8_lossy(&bytes).into_owned());
        }
        Ok(out)
    }

    pub(super) async fn task_loop(
        &self,
        mut item: WorkItem,
        scope: &str,
        inputs: BTreeMap<String, String>,
        gates: Vec<silas_core::model::gates::Gate>,
        mut resume: Option<Resume>,
    ) -> Result<WorkItemResult, WorkError> {
        let input_names: Vec<String> = inputs.keys().cloned().collect();
        let skills: BTreeSet<String> = item.skills.iter().cloned().collect();
        // web_search is offered only when the registry serves it (§9.2).
        let web_search = self
            .registry
            .names()
            .contains(&silas_llm::toolset::WEB_SEARCH);
        let skill_tools = super::mcp_tools::offer(
            SkillToolset::new(core_tools(web_search)),
            self.mcp.as_deref(),
            &skills,
        );
        let toolset = build_chain(
            skill_tools,
            Preparation {
                role: AgentRole::Executor,
                work_item_skills: skills,
            },
            AllowedTools::All,
            Arc::new(ApprovalByName::new(Vec::<String>::new())),
        );
        let mut failure: Option<String> = None;
        let mut guidance: Option<String> = None;
        let mut last_report: Option<VerificationReport> = None;
        // Issue #15: a workspace task works on a copy (made once, reused
        // across attempts and restarts); the real directory is never touched.
        let ws = match self.workspace_run(&item) {
            Ok(ws) => ws,
            Err(e) => {
                let summary = format!("{}: {e}", e.code());
                return self.finish(item, scope, WorkItemStatus::Failed, summary, None);
            }
        };
        loop {
            // A paused attempt continues where it stopped (same attempt
            // number); the card is consumed in the same write that marks the
            // item running again, so a crash from here on resumes as an
            // ordinary interrupted attempt and never replays the approval.
            let attempt = if let Some(r) = resume.take() {
                item.status = WorkItemStatus::Running;
                self.persist_with_card(&item, None, Some(&r.card_id))?;
                self.publish(
                    &item.id,
                    scope,
                    WorkStatusKind::Running,
                    format!("attempt {} resumed", item.attempts),
                    None,
                );
                self.resume_attempt(&mut item, scope, r, &toolset, &gates, &inputs)
                    .await?
            } else {
                // 1–2. Budget (>=) and attempts before every attempt.
                if let Err(stop) = next_attempt(item.attempts, &item.budget_used, &item.budget) {
                    let summary = match &failure {
                        Some(f) => format!(
                            "stuck: {} after {} attempts; last failure:\n{f}",
                            stop.as_str(),
                            item.attempts
                        ),
                        None => {
                            format!("stuck: {} after {} attempts", stop.as_str(), item.attempts)
                        }
                    };
                    return self.finish(
                        item,
                        scope,
                        WorkItemStatus::Stuck,
                        summary,
                        last_report.as_ref(),
                    );
                }
                // a. Count the attempt and persist before running it.
                item.attempts += 1;
                item.budget_used.attempts = item.attempts;
                item.status = WorkItemStatus::Running;
                self.persist(&item)?;
                self.publish(
                    &item.id,
                    scope,
                    WorkStatusKind::Running,
                    format!("attempt {}", item.attempts),
                    None,
                );

                // b–c. Brief and run the executor agent.
                let previous = failure.as_deref().map(|f| (item.attempts - 1, f));
                let briefing =
                    build_briefing(&item.body, &input_names, previous, guidance.as_deref());
                self.attempt(&mut item, scope, &briefing, &toolset, &gates, &inputs)
                    .await?
            };
            self.persist(&item)?;
            let (output, ledger) = match attempt {
                Attempt::Output(o, l) => (o, l),
                Attempt::Retry(why) => {
                    failure = Some(why);
                    continue;
                }
                Attempt::Pause(paused, ledger) => {
                    return self.pause(item, scope, *paused, ledger);
                }
            };
            // c3. Artifacts from the ledger only.
            let artifacts = self.store_artifacts(&item.id, &ledger);
            // Stored (or refused): the attempt's work dirs are done with.
            self.discard_work_dirs(&ledger);
            let artifacts = artifacts?;
            let refs: BTreeSet<&str> = output.artifact_refs.iter().map(String::as_str).collect();
            let actual: BTreeSet<&str> = artifacts.keys().map(String::as_str).collect();
            if refs != actual {
                self.audit(
                    "artifact_ref_mismatch",
                    json!({"work_item_id": item.id, "claimed": refs, "actual": actual}),
                )?;
            }
            // d. after_step gates.
            let step = item.attempts.saturating_sub(1);
            let mut ctx = JsonObject::new();
            ctx.insert("work_item_id".into(), Value::from(item.id.as_str()));
            ctx.insert("step".into(), Value::from(step));
            ctx.insert("output".into(), Value::from(output.summary.as_str()));
            ctx.insert("artifacts".into(), json!(actual));
            let mut gbudget = TurnBudget::new(self.config.max_gate_evals);
            let gated = self
                .gate_runner
                .check_gates(
                    &gates,
                    GateTrigger::AfterStep,
                    Some(step),
                    ctx,
                    &mut gbudget,
                )
                .await;
            self.audit_events(&gated.audit)?;
            if let Some(b) = gated.blocked() {
                let summary = format!(
                    "{}: blocked by after_step gate {}: {}",
                    ErrorCode::EGateBlocked,
                    b.gate_name,
                    b.reason
                );
                return self.finish(item, scope, WorkItemStatus::Blocked, summary, None);
            }
            if let Some(r) = gated
                .policy_results
                .iter()
                .find(|r| r.action == GateAction::RequireApproval)
            {
                let summary = format!("awaiting approval: after_step gate {}", r.gate_name);
                return self.finish(item, scope, WorkItemStatus::Blocked, summary, None);
            }
            // e–f. External verification (or a single successful run).
            if item.verify.is_empty() {
                let (summary, changes) =
                    self.summary_with_changes(&item, ws.as_ref(), &output.summary)?;
                let done = Done {
                    summary,
                    artifacts,
                    next_steps: output.next_steps,
                    report: None,
                };
                return self.done(item, scope, done, ws.as_ref().zip(changes));
            }
            let report = match &ws {
                Some(run) => self.verify_workspace(&item, run).await?,
                None => {
                    let dir = self.artifact_dir(&item.id);
                    self.verifier.run_checks(&item.verify, Some(&dir)).await
                }
            };
            item.verification_results = results_as_json(&report);
            self.audit(
                "verification_completed",
                with_egress_refusals(
                    json!({"work_item_id": item.id, "attempt": item.attempts,
                           "all_passed": report.all_passed, "failed": report.failed}),
                    &report,
                ),
            )?;
            if report.all_passed {
                let (summary, changes) =
                    self.summary_with_changes(&item, ws.as_ref(), &output.summary)?;
                let done = Done {
                    summary,
                    artifacts,
                    next_steps: output.next_steps,
                    report: Some(&report),
                };
                return self.done(item, scope, done, ws.as_ref().zip(changes));
            }
            let details = format_failures(&report);
            self.persist(&item)?;
            self.publish(
                &item.id,
                scope,
                WorkStatusKind::VerificationFailed,
                format!("attempt {} failed verification", item.attempts),
                Some(&report),
            );
            if should_consult_planner(&item) {
                guidance = self.consult_planner(&mut item, scope, &details).await;
                self.persist(&item)?;
            }
            failure = Some(details);
            last_report = Some(report);
        }
    }

    /// Ends an item `done`. A workspace run's change set is offered on an
    /// apply card (or applied, `apply: direct`) stored in the same
    /// transaction as the status, so the Stream delivers it with the result.
    pub(super) fn done(
        &self,
        mut item: WorkItem,
        scope: &str,
        done: Done<'_>,
        changes: Option<(&WorkspaceRun, StoredChanges)>,
    ) -> Result<WorkItemResult, WorkError> {
        let mut summary = done.summary;
        let mut card = None;
        if let Some((run, changes)) = changes {
            let outcome = self.changes_outcome(&item, scope, run, &changes)?;
            if let Some(note) = outcome.note {
                summary = format!("{summary} {note}");
            }
            card = outcome.card;
        }
        item.status = WorkItemStatus::Done;
        self.persist_with_card(&item, card.as_ref(), None)?;
        let mut r = self.ended(item, scope, summary, done.report)?;
        r.artifacts = done.artifacts;
        r.next_steps = done.next_steps;
        Ok(r)
    }

    /// §18.5: a model-call slot for `scope`. Background work waits for the
    /// window to free one (at most `RuntimeLimits::work_wait_max` per call);
    /// past that the call is refused and audited, and the caller ends what
    /// it was doing without calling the model.
    pub(super) async fn llm_slot(
        &self,
        item_id: &str,
        scope: &str,
        agent: &str,
    ) -> Result<Result<(), crate::limits::LimitKind>, WorkError> {
        let limits = &self.config.rate_limits;
        let max = limits.work_wait_max();
        let mut waited = std::time::Duration::ZERO;
        loop {
            let now = Instant::now();
            let kind = match limits.llm_call(scope, now) {
                Ok(()) => return Ok(Ok(())),
                Err(kind) => kind,
            };
            // Never a zero sleep: another scope may take the freed slot.
            let wait = limits
                .llm_retry_after(scope, now)
                .max(std::time::Duration::from_millis(10));
            if waited + wait > max {
                self.audit(
                    "security_rate_limited",
                    json!({"scope_id": scope, "limit": kind.as_str(), "agent": agent,
                           "work_item_id": item_id, "waited_ms": waited.as_millis() as u64}),
                )?;
                return Ok(Err(kind));
            }
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }

    /// The attempt's end when no model-call slot was granted: it counts
    /// like any failed attempt, so the item still ends within
    /// `max_attempts` (as `stuck`, naming the limit).
    pub(super) fn rate_limited(kind: crate::limits::LimitKind) -> Attempt {
        Attempt::Retry(format!(
            "{}: model-call rate limit reached ({}); nothing was sent to the model",
            ErrorCode::EChannelRateLimited,
            kind.config_key()
        ))
    }

    pub(super) async fn attempt(
        &self,
        item: &mut WorkItem,
        scope: &str,
        briefing: &str,
        toolset: &dyn silas_llm::toolset::Toolset,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
    ) -> Result<Attempt, WorkError> {
        if let Err(kind) = self.llm_slot(&item.id, scope, "executor").await? {
            return Ok(Self::rate_limited(kind));
        }
        let tools = self.tools(item, scope, gates, inputs, Ledger::default(), None);
        let started = Instant::now();
        let outcome = self
            .agents
            .execute(
                briefing,
                &item.skills,
                toolset,
                &tools,
                &loop_budget(&item.budget),
                &mut item.budget_used,
            )
            .await;
        item.budget_used.wall_time_seconds += started.elapsed().as_secs_f64();
        self.conclude(&tools, outcome)
    }

    /// Continues a paused attempt with the owner's answer (§4.24: the run
    /// resumes with the deferred call's result — its output, or the refusal).
    ///
    /// Over the model-call limit the resumption ends as a failed attempt:
    /// the card was consumed with the resume, so the approved call is not
    /// executed and the next attempt starts afresh (it may ask again).
    pub(super) async fn resume_attempt(
        &self,
        item: &mut WorkItem,
        scope: &str,
        r: Resume,
        toolset: &dyn silas_llm::toolset::Toolset,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
    ) -> Result<Attempt, WorkError> {
        let Resume {
            pause,
            resolution,
            approved,
            ..
        } = r;
        let mut ledger = pause.ledger;
        if let ApprovalResolution::Declined { reason } = &resolution {
            ledger.refused.push(pause.paused.call.name.clone());
            self.audit(
                "tool_call_resumed_declined",
                json!({"work_item_id": item.id, "tool_name": pause.paused.call.name,
                       "reason": reason}),
            )?;
        } else {
            self.audit(
                "tool_call_resumed_approved",
                json!({"work_item_id": item.id, "tool_name": pause.paused.call.name}),
            )?;
        }
        if let Err(kind) = self.llm_slot(&item.id, scope, "executor").await? {
            return Ok(Self::rate_limited(kind));
        }
        let tools = self.tools(item, scope, gates, inputs, ledger, approved);
        let started = Instant::now();
        let outcome = self
            .agents
            .resume_executor(
                pause.paused,
                resolution,
                toolset,
                &tools,
                &loop_budget(&item.budget),
                &mut item.budget_used,
            )
            .await;
        item.budget_used.wall_time_seconds += started.elapsed().as_secs_f64();
        self.conclude(&tools, outcome)
    }

    pub(super) fn tools(
        &self,
        item: &WorkItem,
        scope: &str,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
        ledger: Ledger,
        approved: Option<ToolCall>,
    ) -> WorkTools {
        let project = self.project_dir_for(item);
        WorkTools::new(
            self.registry.clone(),
            self.gate_runner.clone(),
            gates.to_vec(),
            item.id.clone(),
            item.attempts,
            inputs.clone(),
            self.config.tool_limits.clone(),
            self.config.max_gate_evals,
            ledger,
            approved,
        )
        .with_rate_limits(scope, self.config.rate_limits.clone())
        .with_project(project)
        .with_mcp(self.mcp.clone())
    }

    /// How a (possibly resumed) executor run ended, for the loop.
    pub(super) fn conclude(
        &self,
        tools: &WorkTools,
        outcome: ExecutorOutcome,
    ) -> Result<Attempt, WorkError> {
        let mut ledger = tools.take_ledger();
        self.audit_events(&std::mem::take(&mut ledger.audit))?;
        let ran: Vec<String> = ledger
            .executed
            .iter()
            .map(|r| r.execution_id.clone())
            .collect();
        let attempt = match outcome {
            ExecutorOutcome::Completed(Structured::Valid { value, .. }) => {
                Attempt::Output(value, ledger)
            }
            ExecutorOutcome::Completed(Structured::Fallback { cause, .. }) => {
                Attempt::Retry(format!("{EXECUTOR_INVALID_OUTPUT}: {cause:?}"))
            }
            ExecutorOutcome::ApprovalRequired(p) => Attempt::Pause(p, ledger),
            // The next budget check ends the loop as stuck.
            ExecutorOutcome::BudgetExhausted => Attempt::Retry("budget exhausted".into()),
            ExecutorOutcome::RequestLimit => Attempt::Retry("tool round limit reached".into()),
        };
        // A retried attempt's outputs are never used again (the next attempt
        // starts from the briefing); an output or a pause still needs them.
        if matches!(attempt, Attempt::Retry(_)) {
            for id in &ran {
                self.registry.discard_work_dir(id);
            }
        }
        Ok(attempt)
    }

    /// Deletes the work dirs of every execution in `ledger`.
    pub(super) fn discard_work_dirs(&self, ledger: &Ledger) {
        for r in &ledger.executed {
            self.registry.discard_work_dir(&r.execution_id);
        }
    }

    /// §5.2.1 c2: the item waits, `paused`, with a tool card holding the
    /// paused run — both in one transaction, so a restart finds the pause
    /// and its card or neither (then the attempt simply re-runs).
    pub(super) fn pause(
        &self,
        mut item: WorkItem,
        scope: &str,
        paused: PausedRun,
        ledger: Ledger,
    ) -> Result<WorkItemResult, WorkError> {
        let plan_hash = projections::plan_hash(&item)
            .map_err(|e| WorkError::Encoding(format!("unhashable work item: {e}")))?;
        let tool_call = ToolCallApproval {
            work_item_id: item.id.clone(),
            plan_hash,
            attempt: item.attempts,
            call_id: paused.call.id.clone(),
            tool_name: paused.call.name.clone(),
            arguments: paused.call.arguments_json(),
        };
        let reason = paused.reason.clone();
        let pause = ToolPause {
            tool_call,
            paused,
            ledger,
        };
        let card = cards::tool_card(
            &item,
            &pause,
            scope,
            Timestamp::now(),
            self.approvals.default_ttl_minutes(),
        )
        .map_err(|e| WorkError::Encoding(e.to_string()))?;
        item.status = WorkItemStatus::Paused;
        self.persist_with_card(&item, Some(&card), None)?;
        self.audit(
            "work_item.paused",
            json!({"work_item_id": item.id, "attempt": item.attempts,
                   "tool_name": pause.tool_call.tool_name, "request_id": card.request_id,
                   "reason": reason}),
        )?;
        let summary = format!("paused: {reason}; awaiting your approval");
        self.publish(
            &item.id,
            scope,
            WorkStatusKind::Blocked,
            summary.clone(),
            None,
        );
        Ok(Self::result(&item, summary, None))
    }

    /// Reads a paused item's card: still waiting, answered (with the
    /// resolution re-checked here — the token must be the verified one for
    /// exactly this call of exactly this plan), or gone.
    pub(super) fn pause_state(&self, item: &WorkItem) -> Result<PauseState, WorkError> {
        let all = self.store.records::<PendingCard>().list()?;
        let Some(card) = cards::tool_card_for(&all, &item.id) else {
            return Ok(PauseState::Gone("no approval card".into()));
        };
        let pause = match cards::pause_of(card) {
            Ok(p) => p,
            Err(e) => return Ok(PauseState::Gone(e)),
        };
        let Some(decision) = cards::decision_of(card).cloned() else {
            return Ok(PauseState::Waiting);
        };
        let call = &pause.paused.call;
        let c = &pause.tool_call;
        let same_call = c.work_item_id == item.id
            && c.call_id == call.id
            && c.tool_name == call.name
            && c.arguments == call.arguments_json();
        let resolution = match decision {
            ToolDecision::Declined { reason } => ApprovalResolution::Declined { reason },
            ToolDecision::Approved { .. } if !same_call => ApprovalResolution::Declined {
                reason: "the approval does not match the paused call".into(),
            },
            ToolDecision::Approved { token } => {
                let current = projections::plan_hash(item)
                    .map_err(|e| WorkError::Encoding(format!("unhashable work item: {e}")))?;
                if current != c.plan_hash {
                    ApprovalResolution::Declined {
                        reason: format!(
                            "{}: the work item changed since the call paused",
                            ErrorCode::EApprovalHash
                        ),
                    }
                } else {
                    match self.approvals.check_subject(
                        &token,
                        Subject::ToolCall(c),
                        Timestamp::now(),
                    ) {
                        Ok(()) => ApprovalResolution::Approved,
                        Err(e) => ApprovalResolution::Declined {
                            reason: format!("{}: approval not valid: {e}", e.code()),
                        },
                    }
                }
            }
        };
        let approved = (resolution == ApprovalResolution::Approved).then(|| call.clone());
        Ok(PauseState::Decided(Box::new(Resume {
            card_id: card.request_id.clone(),
            pause,
            resolution,
            approved,
        })))
    }

    /// Copies this attempt's artifacts into the item's durable directory
    /// (replacing the previous attempt's). Returns name → stored path.
    pub(super) fn store_artifacts(
        &self,
        id: &str,
        ledger: &Ledger,
    ) -> Result<BTreeMap<String, String>, WorkError> {
        let dir = self.artifact_dir(id);
        let io = |e: std::io::Error| WorkError::Io(format!("{}: {e}", dir.display()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        // Plain 0600 files in a 0700 dir: nothing a sandboxed run made leaves
        // it with setuid bits or as a followed link (issue #12 item 6).
        artifacts::create_private_dir(&dir).map_err(artifact_error)?;
        let mut out = BTreeMap::new();
        for (name, src) in ledger.artifacts() {
            let dst = dir.join(&name);
            match artifacts::copy_plain_file(Path::new(&src), &dst) {
                Ok(_) => {
                    out.insert(name, dst.display().to_string());
                }
                // Not an artifact (a link or hard link the run left): not
                // stored, and the owner can see why.
                Err(artifacts::ArtifactError::Refused { why, .. }) => self.audit(
                    "artifact_refused",
                    json!({"work_item_id": id, "name": name, "reason": why}),
                )?,
                Err(e) => return Err(artifact_error(e)),
            }
        }
        Ok(out)
    }

    /// Over the model-call limit there is no guidance (audited by
    /// `llm_slot`); the next attempt runs without it.
    pub(super) async fn consult_planner(
        &self,
        item: &mut WorkItem,
        scope: &str,
        failure: &str,
    ) -> Option<String> {
        if !matches!(self.llm_slot(&item.id, scope, "planner").await, Ok(Ok(()))) {
            return None;
        }
        let ctx = RenderedContext {
            access_level: "owner".into(),
            ..RenderedContext::default()
        };
        let message = format!(
            "Background work item {:?} ({}) has failed external verification {} times.\n\n\
             Briefing:\n{}\n\nLatest failure:\n{failure}\n\n\
             Reply with concrete guidance for the next attempt.",
            item.id, item.title, item.attempts, item.body
        );
        let run = self
            .agents
            .plan(&ctx, &message, &mut item.budget_used)
            .await;
        let _ = self.audit(
            "planner_consulted",
            json!({"work_item_id": item.id, "attempt": item.attempts,
                   "fallback": run.outcome.is_fallback()}),
        );
        match run.outcome {
            Structured::Valid { value, .. } => Some(value.message),
            Structured::Fallback { .. } => None,
        }
    }
}
