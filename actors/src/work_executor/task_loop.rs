//! The task loop (§5.2.1 steps 1–f): attempts, after_step gates, external
//! verification and planner consultation, persisting after every step; and
//! the helpers `run_task` uses before the loop (approval block, follow-up
//! hydration). Split from [`super::engine`] along its lanes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::gates::{GateAction, GateTrigger};
use silas_core::model::work::{WorkItem, WorkItemResult, WorkItemStatus};
use silas_core::{Coded, ErrorCode};
use silas_execution::verification::VerificationReport;
use silas_gates::TurnBudget;
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, Preparation, build_chain, core_tools,
};

use super::engine::{Attempt, Done, Resume, WorkEngine, WorkError};
use super::policy::{
    self, build_briefing, format_failures, next_attempt, results_as_json, should_consult_planner,
    with_egress_refusals,
};
use super::skill_tools::ItemSkills;
use super::workspace::{StoredChanges, WorkspaceRun};
use crate::work::WorkStatusKind;

impl WorkEngine {
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
        skills: ItemSkills,
    ) -> Result<WorkItemResult, WorkError> {
        let input_names: Vec<String> = inputs.keys().cloned().collect();
        let skills = Arc::new(skills);
        // web_search is offered only when the registry serves it (§9.2).
        let web_search = self
            .registry
            .names()
            .contains(&silas_llm::toolset::WEB_SEARCH);
        // Skills' MCP tools (issue #17 item 7) beside run_skill_script.
        let offered = super::mcp_tools::offer(
            skills.toolset(core_tools(web_search)),
            self.mcp.as_deref(),
            &skills.names(),
        );
        let toolset = build_chain(
            offered,
            Preparation {
                role: AgentRole::Executor,
                work_item_skills: skills.names(),
            },
            AllowedTools::All,
            Arc::new(ApprovalByName::new(Vec::<String>::new())),
        );
        let mut failure: Option<String> = None;
        // Persisted `running` and not a paused run going on: the last
        // attempt was cut off (Silas stopped, or the run crashed). It counts
        // as spent; the owner is told, in the record and in Activity, rather
        // than finding the item `stuck` (one attempt) or its commands run
        // again (more) with no word why.
        if resume.is_none() && item.status == WorkItemStatus::Running && item.attempts > 0 {
            let note = format!(
                "attempt {} was cut off before it finished (Silas stopped or the run crashed);                  an attempt is not resumed midway, so its commands run again in the next one",
                item.attempts
            );
            self.audit(
                "work_attempt_interrupted",
                json!({"work_item_id": item.id, "attempt": item.attempts}),
            )?;
            failure = Some(note);
        }
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
                self.resume_attempt(&mut item, scope, r, &toolset, &gates, &inputs, &skills)
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
                self.attempt(
                    &mut item, scope, &briefing, &toolset, &gates, &inputs, &skills,
                )
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
            // c3. Artifacts from the ledger only; skills the skill-maker
            // wrote are staged from the same work dirs.
            let artifacts = self.store_artifacts(&item.id, &ledger);
            let produced = self.capture_made_skills(&item.id, ws.is_some(), &skills, &ledger);
            // Stored (or refused): the attempt's work dirs are done with.
            self.discard_work_dirs(&ledger);
            let artifacts = artifacts?;
            let produced = produced?;
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
            // Calls refused before the sandbox are named in the result; a
            // task without checks whose every call was refused is not done.
            let refused = policy::refused_calls_note(&ledger.refused);
            let reported = match &refused {
                Some(note) => format!("{}\n\n{note}", output.summary),
                None => output.summary.clone(),
            };
            if policy::nothing_ran(
                ledger.executed.len(),
                ledger.refused.len(),
                !item.verify.is_empty(),
            ) {
                let summary = format!(
                    "{}: nothing ran. {}\n\nThe executor reported: {}",
                    ErrorCode::EGateBlocked,
                    refused.unwrap_or_default(),
                    output.summary
                );
                self.audit(
                    "task_nothing_ran",
                    json!({"work_item_id": item.id, "attempt": item.attempts,
                           "refused": ledger.refused}),
                )?;
                return self.finish(item, scope, WorkItemStatus::Failed, summary, None);
            }
            // e–f. External verification (or a single successful run).
            if item.verify.is_empty() {
                let (summary, changes) =
                    self.summary_with_changes(&item, ws.as_ref(), &reported)?;
                let done = Done {
                    summary,
                    artifacts,
                    next_steps: output.next_steps,
                    report: None,
                    produced,
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
                    self.summary_with_changes(&item, ws.as_ref(), &reported)?;
                let done = Done {
                    summary,
                    artifacts,
                    next_steps: output.next_steps,
                    report: Some(&report),
                    produced,
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
        // Offered before the item is `done`, so the Stream delivers the
        // cards with the result (a crash between re-runs the attempt and
        // finds the same cards open).
        if let Some(note) = self.offer_made_skills(&item.id, done.produced.as_ref())? {
            summary = format!("{summary} {note}");
        }
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
}
