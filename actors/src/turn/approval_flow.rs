//! The owner's answer to a plan card (§5.1.2 steps 4–9): mint the token,
//! attach it, verify it (the single consuming authorisation), dispatch the
//! work in the background. Idempotent: a card is answered once; a work item
//! whose token was already consumed is never dispatched again, even if a
//! crash left its card behind.

use serde_json::json;
use silas_core::Timestamp;
use silas_core::approval::Subject;
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalVerdict};
use silas_core::model::work::WorkItemStatus;
use silas_storage::PendingCard;
use tokio::sync::mpsc;

use crate::channel::Outbound;
use crate::turn::pipeline::{PLAN_CARD, TurnDeps, TurnError};
use crate::work::DispatchRequest;

/// How long a dispatch may wait for room in the executor's queue.
pub const DISPATCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the decision did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecideOutcome {
    /// Token issued and verified; the work item was dispatched.
    Dispatched {
        work_item_id: String,
        token_id: String,
    },
    /// The owner declined (or asked for edits): nothing runs.
    Declined { work_item_id: String },
    /// The work item's token was already consumed: card closed, nothing re-run.
    AlreadyApproved { work_item_id: String },
}

fn audit(deps: &TurnDeps, event: &str, data: serde_json::Value) -> Result<(), TurnError> {
    if let serde_json::Value::Object(o) = data {
        deps.store.audit().log(event, o)?;
    }
    Ok(())
}

async fn notify(deps: &TurnDeps, scope_id: &str, text: String) -> Result<(), TurnError> {
    deps.sink
        .send(Outbound::OwnerNotice {
            scope_id: scope_id.to_string(),
            text,
        })
        .await?;
    Ok(())
}

/// `decide_card(request_id, decision)`.
pub async fn decide_card(
    deps: &TurnDeps,
    dispatch: &mpsc::Sender<DispatchRequest>,
    request_id: &str,
    decision: ApprovalDecision,
) -> Result<DecideOutcome, TurnError> {
    let cards = deps.store.records::<PendingCard>();
    let card = cards
        .get(request_id)?
        .filter(|c| c.card_type == PLAN_CARD)
        .ok_or_else(|| TurnError::UnknownCard(request_id.to_string()))?;
    let work_item_id = card
        .payload
        .get("work_item_id")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let mut work = deps
        .store
        .work_items()
        .get(&work_item_id)?
        .ok_or_else(|| TurnError::UnknownCard(request_id.to_string()))?;
    let now = Timestamp::now();
    if card.expires_at < now {
        cards.delete(request_id)?;
        audit(
            deps,
            "plan_card_expired",
            json!({"request_id": request_id, "work_item_id": work_item_id}),
        )?;
        return Err(TurnError::UnknownCard(request_id.to_string()));
    }
    if work
        .approval_token
        .as_ref()
        .is_some_and(|t| t.executions_used > 0)
    {
        cards.delete(request_id)?;
        return Ok(DecideOutcome::AlreadyApproved { work_item_id });
    }
    if decision.verdict != ApprovalVerdict::Approved {
        cards.delete(request_id)?;
        audit(
            deps,
            "plan_declined",
            json!({"request_id": request_id, "work_item_id": work_item_id,
                   "verdict": decision.verdict.as_str()}),
        )?;
        notify(
            deps,
            &card.scope_id,
            format!("Plan \"{}\" was not approved; nothing runs.", work.title),
        )
        .await?;
        return Ok(DecideOutcome::Declined { work_item_id });
    }
    // Steps 5–8: issue, attach + save, verify (consumes one execution; the
    // ledger mirrors the updated token onto the stored work item).
    let token = deps.approvals.issue_token(
        Subject::WorkItem(&work),
        &decision,
        ApprovalScope::FullPlan,
        now,
    )?;
    work.approval_token = Some(token.clone());
    work.needs_approval = true;
    work.status = WorkItemStatus::Pending;
    deps.store.work_items().save(&work)?;
    let verified = match deps.approvals.verify(&token, &work, None, now) {
        Ok(t) => t,
        Err(e) => {
            cards.delete(request_id)?;
            notify(
                deps,
                &card.scope_id,
                format!(
                    "The approval for \"{}\" could not be verified; nothing runs.",
                    work.title
                ),
            )
            .await?;
            return Err(e.into());
        }
    };
    cards.delete(request_id)?;
    // Step 9: background execution; the turn never waits for it.
    let req = DispatchRequest {
        work_item_id: work_item_id.clone(),
        scope_id: card.scope_id.clone(),
    };
    dispatch
        .send_timeout(req, DISPATCH_TIMEOUT)
        .await
        .map_err(|e| TurnError::Dispatch(e.to_string()))?;
    audit(
        deps,
        "work_dispatched",
        json!({"work_item_id": work_item_id, "token_id": verified.token_id,
               "scope_id": card.scope_id}),
    )?;
    notify(
        deps,
        &card.scope_id,
        format!("Approved: \"{}\" is running in the background.", work.title),
    )
    .await?;
    Ok(DecideOutcome::Dispatched {
        work_item_id,
        token_id: verified.token_id,
    })
}
