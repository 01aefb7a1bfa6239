//! What a chatbot customer hears of the plan their conversation caused.
//!
//! A customer's plan goes to the owner's Review and the customer is told
//! only that it was sent for review (`pipeline_plan`). Without this they
//! never learned more. They now get a fixed line at each turn of its
//! fate — approved or not, finished or not — and nothing of its content:
//! the plan, the owner's answer and the work's result are the owner's.

use silas_core::model::work::WorkItem;

use crate::channel::{Outbound, undelivered};
use crate::turn::OWNER_SCOPE;
use crate::turn::pipeline::TurnDeps;
use crate::work::WorkStatusKind;

/// One step of a customer's request's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CustomerUpdate {
    /// Declined, timed out, or refused at approval: nothing runs.
    NotApproved,
    /// Approved and dispatched.
    Approved,
    /// The work ended done.
    Finished,
    /// The work ended failed or stuck.
    NotFinished,
}

impl CustomerUpdate {
    pub fn text(self) -> &'static str {
        match self {
            CustomerUpdate::NotApproved => {
                "An update on the request you sent for review: it was not approved, so nothing was done."
            }
            CustomerUpdate::Approved => {
                "An update on the request you sent for review: it was approved, and work on it has started."
            }
            CustomerUpdate::Finished => {
                "An update on the request you sent for review: the work on it has finished."
            }
            CustomerUpdate::NotFinished => {
                "An update on the request you sent for review: the work on it could not be completed."
            }
        }
    }

    /// The update a work status event brings, if it ends the work.
    pub fn of_status(status: WorkStatusKind) -> Option<Self> {
        match status {
            WorkStatusKind::Done => Some(CustomerUpdate::Finished),
            WorkStatusKind::Failed | WorkStatusKind::Stuck => Some(CustomerUpdate::NotFinished),
            // Blocked waits for the owner (or was declined, told then);
            // the rest are not ends.
            WorkStatusKind::Blocked
            | WorkStatusKind::Running
            | WorkStatusKind::VerificationFailed => None,
        }
    }
}

/// The customer scope `work` came from, if it came from one.
pub fn customer_of(work: &WorkItem) -> Option<&str> {
    work.scope_id
        .as_deref()
        .filter(|scope| *scope != OWNER_SCOPE)
}

/// Tells `work`'s customer, if it has one. Best effort: a customer who has
/// gone (a web visitor's connection closed) simply does not hear it.
pub async fn tell(deps: &TurnDeps, work: &WorkItem, update: CustomerUpdate) {
    let Some(scope_id) = customer_of(work) else {
        return;
    };
    let out = Outbound::OwnerNotice {
        scope_id: scope_id.to_string(),
        text: update.text().to_string(),
    };
    if let Err(e) = deps.sink.send(out).await {
        undelivered("customer update", e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ends_of_work_are_told() {
        assert_eq!(
            CustomerUpdate::of_status(WorkStatusKind::Done),
            Some(CustomerUpdate::Finished)
        );
        for s in [WorkStatusKind::Failed, WorkStatusKind::Stuck] {
            assert_eq!(
                CustomerUpdate::of_status(s),
                Some(CustomerUpdate::NotFinished)
            );
        }
        for s in [
            WorkStatusKind::Blocked,
            WorkStatusKind::Running,
            WorkStatusKind::VerificationFailed,
        ] {
            assert_eq!(CustomerUpdate::of_status(s), None);
        }
    }

    #[test]
    fn the_owner_scope_and_old_items_have_no_customer() {
        let mut work = WorkItem::new("t", silas_core::model::work::WorkItemType::Task, "title");
        assert_eq!(customer_of(&work), None);
        work.scope_id = Some(OWNER_SCOPE.into());
        assert_eq!(customer_of(&work), None);
        work.scope_id = Some("web:abc".into());
        assert_eq!(customer_of(&work), Some("web:abc"));
    }
}
