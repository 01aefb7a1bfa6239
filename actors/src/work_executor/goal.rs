//! §5.2.3–5.2.4: a goal's cycle (checks, fix tasks under its standing
//! approval or a plan card, renewal), spawn authorisation and reviewed batch
//! execution (split from `engine.rs`; same engine, same persistence rules).

use serde_json::{Value, json};
use silas_core::approval::Subject;
use silas_core::model::approval::{ApprovalScope, ApprovalToken};
use silas_core::model::review::BatchProposal;
use silas_core::model::work::{WorkItem, WorkItemStatus, WorkItemType};
use silas_core::{Coded, Timestamp, projections};
use silas_execution::artifacts;
use silas_execution::verification::VerificationReport;
use silas_storage::PendingCard;

use super::cards;
use super::engine::{GoalCycleOutcome, WorkEngine, WorkError, artifact_error};
use super::policy::{
    SPAWN_TASK, build_fix_task, format_failures, goal_fix_spend, remaining_fix_budget,
    results_as_json, with_egress_refusals,
};
use crate::work::WorkStatusKind;

impl WorkEngine {
    /// §5.2.3: one cycle of a goal (called by the scheduler).
    pub async fn run_goal_cycle(
        &self,
        id: &str,
        scope: &str,
    ) -> Result<GoalCycleOutcome, WorkError> {
        let goal = self.load(id)?;
        if goal.kind != WorkItemType::Goal {
            return Err(WorkError::WrongKind {
                id: id.to_owned(),
                kind: goal.kind.as_str(),
                expected: "goal",
            });
        }
        // 0. The goal's own approval, re-verified every cycle before its
        // checks run in the sandbox.
        if let Err(reason) = self.goal_approval(&goal) {
            return self.stop_goal(goal, scope, reason);
        }
        // 1–2. Checks, logged to audit.
        let dir = self.artifact_dir(id);
        artifacts::create_private_dir(&dir).map_err(artifact_error)?;
        // A goal watching a workspace checks a fresh copy of it.
        let report = match self.goal_checks_on_workspace(&goal).await? {
            Some(report) => report,
            None => self.verifier.run_checks(&goal.verify, Some(&dir)).await,
        };
        self.audit(
            "goal_cycle_checks",
            with_egress_refusals(
                json!({"work_item_id": id, "all_passed": report.all_passed, "failed": report.failed}),
                &report,
            ),
        )?;
        let results = results_as_json(&report);
        let healthy = report.all_passed;
        self.store.work_items().update(id, move |g| {
            g.verification_results = results;
            g.status = if healthy {
                WorkItemStatus::Healthy
            } else {
                WorkItemStatus::Failed
            };
            Ok(())
        })?;
        if healthy {
            self.publish(
                id,
                scope,
                WorkStatusKind::Done,
                "goal healthy",
                Some(&report),
            );
            return Ok(GoalCycleOutcome::Healthy);
        }
        self.publish(
            id,
            scope,
            WorkStatusKind::VerificationFailed,
            "goal checks failed",
            Some(&report),
        );
        if goal.on_failure != SPAWN_TASK {
            self.publish(
                id,
                scope,
                WorkStatusKind::Failed,
                "goal checks failed",
                Some(&report),
            );
            return Ok(GoalCycleOutcome::Failed {
                failed_checks: report.failed,
            });
        }
        // A goal that only reads its workspace cannot be fixed by a task:
        // the task's change set could never be applied. Say so rather than
        // spend its budget on fixes that go nowhere.
        if let Some(ws) = goal
            .workspace
            .as_ref()
            .filter(|w| w.access == silas_core::model::workspace::Access::Read)
        {
            self.audit(
                "goal_fix_skipped",
                json!({"work_item_id": id, "reason": "read_only_workspace",
                       "workspace": ws.name}),
            )?;
            let why = format!(
                "goal checks failed; it only reads workspace {:?}, so no fix task is spawned (a goal with write access to it can fix it)",
                ws.name
            );
            return Ok(self.failed_without_fix(id, scope, why, report));
        }
        // 4. Spawn a fix task from the goal's template, with what is left
        // of the goal's budget (its card's budget is the fix tasks' total).
        // Deterministic id: the goal's n-th spawned task.
        let children = self.store.work_items().list_by_parent(id)?;
        let spent = goal_fix_spend(&goal, &children);
        let task_id = format!("{id}-fix-{}", children.len() + 1);
        let recorded = spent.clone();
        self.store.work_items().update(id, move |g| {
            g.budget_used = recorded;
            Ok(())
        })?;
        let Some(budget) = remaining_fix_budget(&goal, &spent) else {
            self.audit(
                "goal_budget_exhausted",
                json!({"work_item_id": id, "tokens": spent.tokens, "cost_usd": spent.cost_usd,
                       "max_tokens": goal.budget.max_tokens,
                       "max_cost_usd": goal.budget.max_cost_usd}),
            )?;
            let why = format!(
                "goal checks failed; its fix tasks have used its budget (${:.2} of ${:.2}, {} of {} tokens): no more fix tasks until you approve the goal again",
                spent.cost_usd, goal.budget.max_cost_usd, spent.tokens, goal.budget.max_tokens
            );
            return Ok(self.failed_without_fix(id, scope, why, report));
        };
        let mut fix = build_fix_task(&goal, &task_id, &format_failures(&report));
        fix.budget = budget;
        let spawned_task_hash = projections::plan_hash(&fix)
            .map_err(|e| WorkError::Io(format!("unhashable spawned task: {e}")))?;
        self.audit(
            "goal_spawned_task",
            json!({"work_item_id": id, "spawned_task_id": task_id,
                   "spawned_task_hash": spawned_task_hash}),
        )?;
        match self.authorize_spawn(&goal, fix.clone()) {
            Ok(task) => {
                self.store.work_items().save(&task)?;
                let r = self.run_task(&task_id, scope).await?;
                Ok(GoalCycleOutcome::FixTask(r))
            }
            Err(reason) => {
                // A fresh interactive approval is needed (§5.2.3 step 4):
                // the task waits, blocked, with its plan card — saved in one
                // transaction, so a restart never finds one without the
                // other. The card binds the plan hash the owner is shown.
                let mut blocked = fix;
                blocked.needs_approval = true;
                blocked.status = WorkItemStatus::Blocked;
                let card = cards::fix_task_card(
                    &blocked,
                    &spawned_task_hash,
                    id,
                    &reason,
                    scope,
                    Timestamp::now(),
                    self.approvals.default_ttl_minutes(),
                );
                self.block_with_card(
                    &blocked,
                    &card,
                    scope,
                    "spawned_task_needs_approval",
                    json!({"work_item_id": id, "spawned_task_id": task_id, "reason": reason,
                           "request_id": card.request_id}),
                    format!("fix task for goal {id:?} needs your approval ({reason})"),
                    Some(&report),
                )?;
                Ok(GoalCycleOutcome::FixTaskBlocked { task_id, reason })
            }
        }
    }

    /// A failed cycle that starts no fix task: the owner is told `why`.
    fn failed_without_fix(
        &self,
        id: &str,
        scope: &str,
        why: String,
        report: VerificationReport,
    ) -> GoalCycleOutcome {
        self.publish(id, scope, WorkStatusKind::Failed, why, Some(&report));
        GoalCycleOutcome::Failed {
            failed_checks: report.failed,
        }
    }

    /// Why the goal's token does not authorise a cycle, if it does not: a
    /// standing token by `check_standing`; any other (a plan-approved goal)
    /// by the ordinary non-consuming `check`.
    fn goal_approval(&self, goal: &WorkItem) -> Result<(), String> {
        let Some(token) = goal.approval_token.as_ref() else {
            return Err("the goal has no approval".into());
        };
        let now = Timestamp::now();
        let checked = if token.scope == ApprovalScope::Standing {
            self.approvals.check_standing(token, goal, now)
        } else {
            self.approvals.check(token, goal, now)
        };
        checked.map_err(|e| format!("{}: {e}", e.code()))
    }

    /// Stops a goal whose approval did not verify: `blocked` (so the
    /// scheduler drops it), the stale token detached (so the renewal card's
    /// approval mints a fresh one), and the renewal card, in one transaction.
    fn stop_goal(
        &self,
        mut goal: WorkItem,
        scope: &str,
        reason: String,
    ) -> Result<GoalCycleOutcome, WorkError> {
        let id = goal.id.clone();
        let token_id = goal.approval_token.take().map(|t| t.token_id);
        goal.status = WorkItemStatus::Blocked;
        goal.needs_approval = true;
        let plan_hash = projections::plan_hash(&goal)
            .map_err(|e| WorkError::Io(format!("unhashable goal: {e}")))?;
        let card = cards::renewal_card(
            &goal,
            &plan_hash,
            &reason,
            scope,
            Timestamp::now(),
            self.approvals.default_ttl_minutes(),
            (&self.config.schedule_zone, self.approvals.standing_limits()),
        );
        self.block_with_card(
            &goal,
            &card,
            scope,
            "goal_stopped_approval_invalid",
            json!({"work_item_id": id, "token_id": token_id, "reason": reason,
                   "request_id": card.request_id}),
            format!("goal {id:?} stopped: its approval needs renewing ({reason})"),
            None,
        )?;
        Ok(GoalCycleOutcome::Stopped { reason })
    }

    /// A `blocked` item and the card that asks the owner about it, stored in
    /// one transaction; then audited and announced.
    #[allow(clippy::too_many_arguments)]
    fn block_with_card(
        &self,
        item: &WorkItem,
        card: &PendingCard,
        scope: &str,
        event: &str,
        data: Value,
        summary: String,
        report: Option<&VerificationReport>,
    ) -> Result<(), WorkError> {
        let mut card = card.clone();
        crate::workspaces::fill_card_path(&self.store, &mut card);
        self.store
            .work_items()
            .save_with_card(item, Some(&card), None)?;
        self.audit(event, data)?;
        self.publish(&item.id, scope, WorkStatusKind::Blocked, summary, report);
        Ok(())
    }

    /// Standing-approval verification of a spawned task (§5.2.3 step 4):
    /// consumes one execution of the goal's standing token and attaches it.
    /// Refuses (with the reason) when the goal has no usable standing token
    /// or the task does not match the goal's approved spawn policy.
    pub fn authorize_spawn(&self, goal: &WorkItem, mut task: WorkItem) -> Result<WorkItem, String> {
        let Some(token) = goal.approval_token.as_ref() else {
            return Err("the goal has no standing approval".into());
        };
        if token.scope != ApprovalScope::Standing {
            return Err(format!(
                "the goal's approval is {}, not standing",
                token.scope.as_str()
            ));
        }
        if token.executions_used >= token.max_executions {
            return Err("the goal's standing approval is used up".into());
        }
        match self
            .approvals
            .verify(token, goal, Some(&task), Timestamp::now())
        {
            Ok(updated) => {
                task.approval_token = Some(updated);
                task.needs_approval = false;
                Ok(task)
            }
            Err(e) => Err(format!("{}: {e}", e.code())),
        }
    }

    // --------------------------------------------------------------- batch

    /// §5.2.4 step 4: executes a reviewed batch only under a token bound to
    /// this exact payload (consuming one execution), then runs `action`.
    pub async fn execute_batch<F, Fut, R>(
        &self,
        proposal: &BatchProposal,
        token: &ApprovalToken,
        action: F,
    ) -> Result<R, WorkError>
    where
        F: FnOnce(BatchProposal) -> Fut,
        Fut: std::future::Future<Output = R>,
    {
        self.approvals
            .verify_subject(token, Subject::Batch(proposal), Timestamp::now())?;
        self.audit(
            "batch_executed",
            json!({"batch_id": proposal.batch_id, "goal_id": proposal.goal_id,
                   "action": proposal.action, "count": proposal.items.len()}),
        )?;
        Ok(action(proposal.clone()).await)
    }
}
