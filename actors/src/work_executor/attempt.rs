//! One executor attempt and what surrounds it: the model-call slot (§18.5),
//! running or resuming the executor agent, the tool executor it gets, the
//! pause on a deferred tool call (§5.2.1 c2) and the owner's answer to it,
//! storing artifacts, and planner consultation. Split from
//! [`super::engine`] along its lanes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use silas_core::approval::Subject;
use silas_core::model::approval::ToolCallApproval;
use silas_core::model::work::{WorkItem, WorkItemResult, WorkItemStatus};
use silas_core::{Coded, ErrorCode, Timestamp, projections};
use silas_execution::artifacts;
use silas_llm::agents::ExecutorOutcome;
use silas_llm::prompts::RenderedContext;
use silas_llm::provider::ToolCall;
use silas_llm::structured::{EXECUTOR_INVALID_OUTPUT, Structured};
use silas_llm::tool_loop::{ApprovalResolution, PausedRun};
use silas_storage::PendingCard;

use super::cards::{self, ToolDecision, ToolPause};
use super::engine::{Attempt, PauseState, Resume, WorkEngine, WorkError, artifact_error};
use super::policy::loop_budget;
use super::skill_tools::ItemSkills;
use super::tools::{Ledger, WorkTools};
use crate::work::WorkStatusKind;

impl WorkEngine {
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

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt(
        &self,
        item: &mut WorkItem,
        scope: &str,
        briefing: &str,
        toolset: &dyn silas_llm::toolset::Toolset,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
        skills: &Arc<ItemSkills>,
    ) -> Result<Attempt, WorkError> {
        if let Err(kind) = self.llm_slot(&item.id, scope, "executor").await? {
            return Ok(Self::rate_limited(kind));
        }
        let tools = self.tools(item, scope, gates, inputs, skills, Ledger::default(), None);
        let started = Instant::now();
        let outcome = self
            .agents
            .execute(
                briefing,
                &skills.prompt,
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
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn resume_attempt(
        &self,
        item: &mut WorkItem,
        scope: &str,
        r: Resume,
        toolset: &dyn silas_llm::toolset::Toolset,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
        skills: &Arc<ItemSkills>,
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
        let tools = self.tools(item, scope, gates, inputs, skills, ledger, approved);
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn tools(
        &self,
        item: &WorkItem,
        scope: &str,
        gates: &[silas_core::model::gates::Gate],
        inputs: &BTreeMap<String, String>,
        skills: &Arc<ItemSkills>,
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
        .with_skills(skills.clone())
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
        let all = ledger.artifacts();
        let sizes: Vec<(String, u64)> = all
            .iter()
            .map(|(name, src)| {
                let len = std::fs::symlink_metadata(src).map_or(0, |m| m.len());
                (name.clone(), len)
            })
            .collect();
        let (kept, over) = within_artifact_cap(&sizes, MAX_ARTIFACT_BYTES);
        for name in &over {
            self.audit(
                "artifact_refused",
                json!({"work_item_id": id, "name": name, "reason": format!(
                    "over the {} MiB a work item's artifacts may take",
                    MAX_ARTIFACT_BYTES >> 20
                )}),
            )?;
        }
        for (name, src) in kept.into_iter().filter_map(|n| all.get(&n).map(|s| (n, s))) {
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

/// What the artifacts of one work item may take in all: each file is capped
/// by the sandbox (`RLIMIT_FSIZE`), their number was not, and every one is
/// copied into the data dir (and staged again for verification) — a run
/// writing 20 files of 60 MiB kept 1.3 GB.
pub(crate) const MAX_ARTIFACT_BYTES: u64 = 256 << 20;

/// Splits `(name, bytes)` into what fits under `cap`, in name order, and
/// what does not (a file too big is skipped, smaller ones after it may
/// still fit).
pub(crate) fn within_artifact_cap(files: &[(String, u64)], cap: u64) -> (Vec<String>, Vec<String>) {
    let mut total = 0u64;
    let (mut kept, mut over) = (Vec::new(), Vec::new());
    for (name, len) in files {
        match total.checked_add(*len).filter(|t| *t <= cap) {
            Some(t) => {
                total = t;
                kept.push(name.clone());
            }
            None => over.push(name.clone()),
        }
    }
    (kept, over)
}

#[cfg(test)]
mod artifact_cap_tests {
    use super::*;

    fn files(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(n, l)| (n.to_string(), *l)).collect()
    }

    #[test]
    fn artifacts_are_kept_until_the_cap() {
        let (kept, over) = within_artifact_cap(&files(&[("a", 40), ("b", 40), ("c", 30)]), 100);
        assert_eq!(
            (kept, over),
            (vec!["a".into(), "b".into()], vec!["c".to_string()])
        );
        // A big one is skipped, a small one after it still fits.
        let (kept, over) = within_artifact_cap(&files(&[("a", 50), ("b", 60), ("c", 50)]), 100);
        assert_eq!(
            (kept, over),
            (vec!["a".into(), "c".into()], vec!["b".to_string()])
        );
        let (kept, over) = within_artifact_cap(&files(&[("a", u64::MAX), ("b", 1)]), 100);
        assert_eq!((kept, over), (vec!["b".to_string()], vec!["a".to_string()]));
        assert_eq!(within_artifact_cap(&[], 0), (vec![], vec![]));
    }
}
