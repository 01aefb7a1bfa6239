//! The interface between the turn pipeline and background execution (spec
//! §5.1.2 dispatch, §5.2): what the Stream sends to the WorkExecutor and the
//! status events the WorkExecutor publishes back (to channels, the activity
//! log and the Stream). Plain owned data, so both sides — and a future
//! cluster transport — agree on one shape.

use serde::{Deserialize, Serialize};
use silas_core::model::work::WorkItemStatus;

/// Execution statuses reported while work runs in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkStatusKind {
    Running,
    VerificationFailed,
    Done,
    Failed,
    Stuck,
    Blocked,
}

impl WorkStatusKind {
    /// The persisted status this event corresponds to, if it ends the item.
    pub fn terminal_status(&self) -> Option<WorkItemStatus> {
        match self {
            WorkStatusKind::Done => Some(WorkItemStatus::Done),
            WorkStatusKind::Failed => Some(WorkItemStatus::Failed),
            WorkStatusKind::Stuck => Some(WorkItemStatus::Stuck),
            WorkStatusKind::Blocked => Some(WorkItemStatus::Blocked),
            WorkStatusKind::Running | WorkStatusKind::VerificationFailed => None,
        }
    }
}

/// One verification check's outcome, as shown to the owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOutcome {
    pub name: String,
    pub passed: bool,
    pub reason: String,
    /// A failed check's own words: the end of its stderr, else of its
    /// output (at most 1,000 characters each).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Published by the WorkExecutor for every status change (the web channel's
/// `work_status` frame carries exactly these fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkStatusEvent {
    pub work_item_id: String,
    /// The scope that asked for the work (where the event is shown).
    pub scope_id: String,
    pub status: WorkStatusKind,
    pub summary: String,
    pub verification: Vec<CheckOutcome>,
}

/// A request to run an approved, persisted work item in the background.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRequest {
    pub work_item_id: String,
    pub scope_id: String,
}
