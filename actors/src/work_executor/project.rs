//! §5.2.2: a project's tasks in dependency order, then its own checks
//! (split from `engine.rs`; same engine, same persistence rules).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use silas_core::model::work::{BudgetUsed, WorkItem, WorkItemResult, WorkItemStatus, WorkItemType};
use silas_core::{Coded, Timestamp};
use silas_execution::artifacts;

use super::engine::{WorkEngine, WorkError, artifact_error, terminal};
use super::policy::{
    format_failures, results_as_json, topological_order, unmet_dependency, with_egress_refusals,
};
use crate::work::WorkStatusKind;

impl WorkEngine {
    /// §5.2.2: tasks in topological order; each dependency must be `done`
    /// first; a task that does not end `done` ends the project (`blocked`
    /// if it was blocked, else `failed`); then project-level checks.
    /// Tasks already `done` are skipped, so a resumed project continues.
    pub async fn run_project(&self, id: &str, scope: &str) -> Result<WorkItemResult, WorkError> {
        let mut project = self.load(id)?;
        if project.kind != WorkItemType::Project {
            return Err(WorkError::WrongKind {
                id: id.to_owned(),
                kind: project.kind.as_str(),
                expected: "project",
            });
        }
        if terminal(project.status) {
            let s = format!("already {}", project.status.as_str());
            return Ok(Self::result(&project, s, None));
        }
        // Approval gate, as for a task: before any child runs.
        let Some(token) = project.approval_token.clone() else {
            return self.block_unapproved(project, scope, "no approval token".into(), None);
        };
        if let Err(e) = self.approvals.check(&token, &project, Timestamp::now()) {
            let code = e.code().as_str();
            return self.block_unapproved(project, scope, e.to_string(), Some(code));
        }
        project.status = WorkItemStatus::Running;
        self.persist(&project)?;
        self.publish(id, scope, WorkStatusKind::Running, "project started", None);

        let mut deps = BTreeMap::new();
        for t in &project.tasks {
            match self.store.work_items().get(t)? {
                Some(child) => {
                    deps.insert(t.clone(), child.depends_on.clone());
                }
                None => {
                    let s = format!("project task {t:?} not found");
                    return self.finish(project, scope, WorkItemStatus::Failed, s, None);
                }
            }
        }
        let order = match topological_order(&project.tasks, &deps) {
            Ok(o) => o,
            Err(e) => {
                let s = e.to_string();
                return self.finish(project, scope, WorkItemStatus::Failed, s, None);
            }
        };
        for t in &order {
            let child = self.load(t)?;
            if child.status != WorkItemStatus::Done {
                let store = self.store.work_items();
                let status_of = |d: &str| store.get(d).ok().flatten().map(|w| w.status);
                if let Some(dep) = unmet_dependency(&child.depends_on, status_of) {
                    let s = format!("task {t:?} depends on {dep:?}, which is not done");
                    project.budget_used = self.children_budget(&project)?;
                    return self.finish(project, scope, WorkItemStatus::Blocked, s, None);
                }
                let r = self.run_task(t, scope).await?;
                if r.status != WorkItemStatus::Done {
                    let status =
                        if matches!(r.status, WorkItemStatus::Blocked | WorkItemStatus::Paused) {
                            WorkItemStatus::Blocked
                        } else {
                            WorkItemStatus::Failed
                        };
                    let s = format!("task {t:?} ended {}: {}", r.status.as_str(), r.summary);
                    project.budget_used = self.children_budget(&project)?;
                    return self.finish(project, scope, status, s, None);
                }
            }
            project.budget_used = self.children_budget(&project)?;
            self.persist(&project)?;
        }
        if project.verify.is_empty() {
            return self.finish(
                project,
                scope,
                WorkItemStatus::Done,
                "all tasks done".into(),
                None,
            );
        }
        // Project-level checks over the union of the tasks' artifacts.
        let dir = self.artifact_dir(id);
        self.gather_artifacts(&dir, &order)?;
        let report = self.verifier.run_checks(&project.verify, Some(&dir)).await;
        project.verification_results = results_as_json(&report);
        self.audit(
            "verification_completed",
            with_egress_refusals(
                json!({"work_item_id": id, "all_passed": report.all_passed, "failed": report.failed}),
                &report,
            ),
        )?;
        if report.all_passed {
            self.finish(
                project,
                scope,
                WorkItemStatus::Done,
                "all tasks done; project checks passed".into(),
                Some(&report),
            )
        } else {
            let s = format!("project checks failed:\n{}", format_failures(&report));
            self.finish(project, scope, WorkItemStatus::Failed, s, Some(&report))
        }
    }

    fn children_budget(&self, project: &WorkItem) -> Result<BudgetUsed, WorkError> {
        let mut total = BudgetUsed::default();
        for t in &project.tasks {
            if let Some(c) = self.store.work_items().get(t)? {
                total.merge(&c.budget_used);
            }
        }
        Ok(total)
    }

    fn gather_artifacts(&self, dir: &Path, tasks: &[String]) -> Result<(), WorkError> {
        let io = |e: std::io::Error| WorkError::Io(format!("{}: {e}", dir.display()));
        artifacts::create_private_dir(dir).map_err(artifact_error)?;
        for t in tasks {
            let Ok(rd) = std::fs::read_dir(self.artifact_dir(t)) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                let dst = dir.join(e.file_name());
                // A later task's file of the same name wins.
                match std::fs::remove_file(&dst) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(io(err)),
                    _ => {}
                }
                match artifacts::copy_plain_file(&e.path(), &dst) {
                    Ok(_) | Err(artifacts::ArtifactError::Refused { .. }) => {}
                    Err(err) => return Err(artifact_error(err)),
                }
            }
        }
        Ok(())
    }
}
