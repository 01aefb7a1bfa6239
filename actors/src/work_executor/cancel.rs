//! Owner cancellation of a work item (`silas work cancel`, over the daemon's
//! control socket): the item's run — and, for a project, its tasks' runs, for
//! a goal, its fix tasks' — is killed *before* the records are ended, so no
//! run persists a later step over the cancellation. Cancelled items end
//! `failed` (the spec has no cancelled state; `failed` is terminal, so no
//! later dispatch, restart or card answer re-runs them), each audited as
//! `work_item.cancelled` with who asked, and announced as a `Failed` status
//! event ("cancelled by the owner"); what their runs left in the work dir
//! (workspace copies, tool-call dirs) is removed. Items already ended are refused.
//!
//! A goal is different: between cycles it is `healthy` or `failed` (its last
//! check), not ended, and `failed` is not terminal for the scheduler. A
//! cancelled goal ends `done` with its standing approval withdrawn, so no
//! timer, restart or catch-up runs another cycle.

use std::time::Duration;

use serde_json::json;
use silas_core::model::work::{WorkItemStatus, WorkItemType};
use silas_core::{Coded, ErrorCode};

use super::WorkExecutorState;

/// Audit event of a cancellation.
pub const WORK_ITEM_CANCELLED: &str = "work_item.cancelled";
/// The status summary announced for a cancelled item.
pub const CANCELLED_SUMMARY: &str = "cancelled by the owner";
/// How long a cancelled run gets to stop.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Why a cancellation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    #[error("no work item {0:?}")]
    NotFound(String),
    #[error("work item {id} has already ended ({status})")]
    Ended { id: String, status: WorkItemStatus },
    #[error("cannot cancel: {0}")]
    Store(String),
}

impl Coded for CancelError {
    fn code(&self) -> ErrorCode {
        match self {
            CancelError::NotFound(_) => ErrorCode::EDbNotFound,
            CancelError::Ended { .. } => ErrorCode::ECfgInvalid,
            CancelError::Store(_) => ErrorCode::EDbIo,
        }
    }
}

/// What a cancellation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancelled {
    pub previous: WorkItemStatus,
    /// The status it ended in: `failed`, or `done` for a goal (a goal
    /// that stops has no failure to report).
    pub now: WorkItemStatus,
    /// A run of the item itself was in flight and was stopped.
    pub was_running: bool,
    /// Further items ended with it.
    pub also: Vec<String>,
}

/// States a cancellation can end: not yet terminal, or waiting on the owner;
/// for a goal, anything but `done` (it cycles through the others).
pub fn cancellable(kind: WorkItemType, s: WorkItemStatus) -> bool {
    match kind {
        WorkItemType::Goal => s != WorkItemStatus::Done,
        _ => matches!(
            s,
            WorkItemStatus::Pending
                | WorkItemStatus::Running
                | WorkItemStatus::Paused
                | WorkItemStatus::Blocked
        ),
    }
}

impl WorkExecutorState {
    pub(super) async fn cancel(&mut self, id: &str, by: &str) -> Result<Cancelled, CancelError> {
        let items = self.engine.store.work_items();
        let store_err = |e: silas_storage::StoreError| CancelError::Store(e.to_string());
        let item = items
            .get(id)
            .map_err(store_err)?
            .ok_or_else(|| CancelError::NotFound(id.to_owned()))?;
        if !cancellable(item.kind, item.status) {
            return Err(CancelError::Ended {
                id: id.to_owned(),
                status: item.status,
            });
        }
        let mut ids = vec![item.id.clone()];
        match item.kind {
            WorkItemType::Project => ids.extend(item.tasks.iter().cloned()),
            WorkItemType::Goal => ids.extend(
                items
                    .list_by_parent(&item.id)
                    .map_err(store_err)?
                    .into_iter()
                    .map(|t| t.id),
            ),
            _ => {}
        }
        // A goal's fix task runs inside the goal's cycle run, booked under
        // the goal: that run is what runs its command, so it is stopped too
        // (the goal itself stays; its next cycle starts afresh).
        let carrier = item
            .parent
            .clone()
            .filter(|p| !self.running.contains_key(&item.id) && self.running.contains_key(p));
        let scope = item.scope_id.clone().unwrap_or_else(|| "owner".into());
        // Stop the runs first: unbooked before the kill, so their end is
        // not taken for an ordinary one (nothing queued restarts them).
        let mut was_running = false;
        if let Some(p) = &carrier
            && let Some(booked) = self.running.remove(p)
        {
            self.by_actor.remove(&booked.cell.get_id());
            was_running = true;
            if let Err(e) = booked.cell.kill_and_wait(Some(KILL_WAIT)).await {
                tracing::warn!(work_item_id = %p, "the cycle running the cancelled item did not confirm its stop: {e}");
            }
        }
        for i in &ids {
            self.again.remove(i);
            self.crashes.remove(i);
            if let Some(booked) = self.running.remove(i) {
                self.by_actor.remove(&booked.cell.get_id());
                was_running |= i == id;
                if let Err(e) = booked.cell.kill_and_wait(Some(KILL_WAIT)).await {
                    tracing::warn!(work_item_id = %i, "cancelled run did not confirm its stop: {e}");
                }
            }
        }
        let mut also = Vec::new();
        let mut now = item.status;
        for (n, i) in ids.iter().enumerate() {
            let mut previous = None;
            let r = items.update(i, |w| {
                if cancellable(w.kind, w.status) {
                    previous = Some(w.status);
                    if w.kind == WorkItemType::Goal {
                        w.status = WorkItemStatus::Done;
                        w.approval_token = None;
                    } else {
                        w.status = WorkItemStatus::Failed;
                    }
                }
                Ok(())
            });
            match (r, previous) {
                (Ok(w), Some(prev)) => {
                    if n == 0 {
                        now = w.status;
                    }
                    self.audit(
                        WORK_ITEM_CANCELLED,
                        json!({"work_item_id": w.id, "previous_status": prev.as_str(),
                               "by": by, "attempts": w.attempts, "was_running": was_running && n == 0}),
                    );
                    self.publish_failed(&w.id, &scope, CANCELLED_SUMMARY.to_owned());
                    if n > 0 {
                        also.push(w.id);
                    }
                }
                (Ok(_), None) => {}
                (Err(e), _) if n == 0 => return Err(store_err(e)),
                (Err(e), _) => {
                    tracing::error!(work_item_id = %i, code = %e.code(), "cannot end the cancelled item's task: {e}");
                }
            }
        }
        // The killed runs did not clean up after themselves.
        self.engine
            .sweep_work_base(Some(&ids.iter().cloned().chain(carrier.clone()).collect()));
        Ok(Cancelled {
            previous: item.status,
            now,
            was_running,
            also,
        })
    }
}
