//! The approval cards background work waits on (§5.2.1 c2, §5.2.3 step 4),
//! as plain data and pure functions; the engine persists them together with
//! the work item's new state (one transaction), the Stream delivers them and
//! `turn::approval_flow::decide_card` answers them.
//!
//! * A **fix-task card** is an ordinary plan card ([`PLAN_CARD`]) for a
//!   goal-spawned task that no standing approval covered. It carries the
//!   task's plan hash at the time it was asked, so an approval can only
//!   authorise the exact task the owner was shown.
//! * A **renewal card** is a plan card for a goal whose own approval no
//!   longer verifies at the start of a cycle (§5.2.3): the goal is stopped
//!   (`blocked`, stale token dropped) until the owner approves it again.
//! * A **tool card** ([`TOOL_CARD`]) is a paused tool call of a running
//!   item. Its payload *is* the durable pause: the [`ToolPause`] (the call's
//!   approval subject, the serialised [`PausedRun`] and the attempt's ledger
//!   so far). The owner's answer is written into the same card
//!   ([`ToolDecision`]); the executor consumes the card when it resumes the
//!   run, so a pause, and a decided-but-not-yet-resumed pause, both survive
//!   a restart.

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;
pub use silas_core::cards::ToolDecision;
use silas_core::cards::{self as model, CardOrigin, CardPayload, ChangesCard};
use silas_core::model::approval::ChangesAction;
use silas_core::model::approval::ToolCallApproval;
use silas_core::model::work::WorkItem;
use silas_llm::tool_loop::PausedRun;
use silas_storage::PendingCard;

use super::tools::Ledger;
pub use crate::turn::pipeline::{PLAN_CARD, TOOL_CARD};

/// Everything needed to resume a paused executor run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolPause {
    /// What a token for this call binds.
    pub tool_call: ToolCallApproval,
    pub paused: PausedRun,
    /// The attempt's tool ledger up to the pause (its artifacts count).
    pub ledger: Ledger,
}

/// Deterministic card id of a fix task (re-running the cycle step cannot
/// create a second card for the same task).
pub fn fix_task_card_id(task_id: &str) -> String {
    format!("card-{task_id}")
}

/// The plan card for a goal-spawned task waiting for interactive approval.
pub fn fix_task_card(
    task: &WorkItem,
    plan_hash: &str,
    goal_id: &str,
    reason: &str,
    scope_id: &str,
    now: Timestamp,
    ttl_minutes: u32,
) -> PendingCard {
    owner_card(
        model::fix_task_card(task, plan_hash, goal_id, reason),
        fix_task_card_id(&task.id),
        scope_id,
        now,
        ttl_minutes,
    )
}

/// A card of this flow: the owner's, open for `ttl_minutes`.
fn owner_card(
    card: CardPayload,
    request_id: String,
    scope_id: &str,
    now: Timestamp,
    ttl_minutes: u32,
) -> PendingCard {
    PendingCard {
        request_id,
        scope_id: scope_id.to_owned(),
        card,
        created_at: now,
        expires_at: now.plus(chrono::Duration::minutes(i64::from(ttl_minutes))),
        audience: silas_storage::CardAudience::Owner,
    }
}

/// Deterministic card id of a goal's renewal card: one open card per goal,
/// however many cycles are refused meanwhile.
pub fn renewal_card_id(goal_id: &str) -> String {
    format!("card-renew-{goal_id}")
}

/// The plan card asking the owner to approve a goal again after its
/// standing approval stopped verifying (expired, revoked, or the goal
/// changed). Bound to the goal's current plan hash like any plan card;
/// approving it mints a fresh token through the ordinary plan approval.
pub fn renewal_card(
    goal: &WorkItem,
    plan_hash: &str,
    reason: &str,
    scope_id: &str,
    now: Timestamp,
    ttl_minutes: u32,
    terms: (&str, silas_core::goal_terms::StandingLimits),
) -> PendingCard {
    owner_card(
        model::with_goal_terms(
            model::renewal_card(goal, plan_hash, reason),
            terms.0,
            terms.1,
        ),
        renewal_card_id(&goal.id),
        scope_id,
        now,
        ttl_minutes,
    )
}

/// Card id of a paused call: one per (item, attempt, call).
pub fn tool_card_id(c: &ToolCallApproval) -> String {
    let clean: String = c
        .call_id
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect();
    format!("card-tool-{}-a{}-{clean}", c.work_item_id, c.attempt)
}

/// The tool card for a paused call. The display fields (`tool_name`,
/// `arguments`, `reason`) sit beside the pause so a channel need not parse it.
pub fn tool_card(
    item: &WorkItem,
    pause: &ToolPause,
    scope_id: &str,
    now: Timestamp,
    ttl_minutes: u32,
) -> Result<PendingCard, serde_json::Error> {
    let c = &pause.tool_call;
    let call = model::ToolCall {
        tool_name: &c.tool_name,
        arguments: &c.arguments,
        reason: &pause.paused.reason,
        attempt: c.attempt,
    };
    let card = model::tool_card(item, call, serde_json::to_value(pause)?);
    Ok(owner_card(
        card,
        tool_card_id(c),
        scope_id,
        now,
        ttl_minutes,
    ))
}

/// Card id of a work item's change card (one per item and phase).
pub fn changes_card_id(work_item_id: &str, phase: ChangesAction) -> String {
    format!("card-{}-{work_item_id}", phase.as_str())
}

/// A change card of this flow, open until `expires_at`.
pub fn changes_card(
    card: ChangesCard,
    scope_id: &str,
    now: Timestamp,
    expires_at: Timestamp,
) -> PendingCard {
    PendingCard {
        request_id: changes_card_id(&card.work_item_id, card.phase),
        scope_id: scope_id.to_owned(),
        card: CardPayload::Changes(Box::new(card)),
        created_at: now,
        expires_at,
        audience: silas_storage::CardAudience::Owner,
    }
}

/// A work item's change card (apply or undo), if any.
pub fn changes_card_for<'a>(
    cards: &'a [PendingCard],
    work_item_id: &str,
) -> Option<(&'a PendingCard, &'a ChangesCard)> {
    cards.iter().find_map(|c| match &c.card {
        CardPayload::Changes(ch) if ch.work_item_id == work_item_id => Some((c, ch.as_ref())),
        _ => None,
    })
}

/// The card's work item id.
pub fn work_item_of(card: &PendingCard) -> Option<&str> {
    card.card.work_item_id()
}

/// A plan card the WorkExecutor made (fix task or renewal): it re-delivers
/// these after a restart.
pub fn is_executor_plan_card(card: &PendingCard) -> bool {
    matches!(&card.card, CardPayload::Plan(p) if p.origin == CardOrigin::WorkExecutor)
}

/// A tool card's pause, if it parses.
pub fn pause_of(card: &PendingCard) -> Result<ToolPause, String> {
    let CardPayload::Tool(t) = &card.card else {
        return Err(format!("card {} is not a tool card", card.request_id));
    };
    serde_json::from_value(t.pause.clone()).map_err(|e| format!("card {}: {e}", card.request_id))
}

/// A tool card's recorded decision (`None`: still waiting for the owner, or
/// not a tool card).
pub fn decision_of(card: &PendingCard) -> Option<&ToolDecision> {
    match &card.card {
        CardPayload::Tool(t) => t.decision.as_ref(),
        CardPayload::Changes(c) => c.decision.as_ref(),
        _ => None,
    }
}

/// The card with `decision` recorded (a card that is no tool card is
/// returned as it is: there is nothing to record on it).
pub fn with_decision(mut card: PendingCard, decision: &ToolDecision) -> PendingCard {
    match &mut card.card {
        CardPayload::Tool(t) => t.decision = Some(decision.clone()),
        CardPayload::Changes(c) => c.decision = Some(decision.clone()),
        _ => {}
    }
    card
}

/// The tool card of a paused work item, if any.
pub fn tool_card_for<'a>(cards: &'a [PendingCard], work_item_id: &str) -> Option<&'a PendingCard> {
    cards
        .iter()
        .find(|c| matches!(&c.card, CardPayload::Tool(t) if t.work_item_id == work_item_id))
}

/// Cards of a work item still waiting for the owner (what to deliver when
/// the item reports it is waiting, or done with changes to review): plan
/// cards and undecided tool and change cards.
pub fn open_cards_for(cards: Vec<PendingCard>, work_item_id: &str) -> Vec<PendingCard> {
    cards
        .into_iter()
        .filter(|c| match &c.card {
            // A skill the item made waits for its install approval.
            CardPayload::SkillInstall(s) => s.made_by.as_deref() == Some(work_item_id),
            _ if work_item_of(c) != Some(work_item_id) => false,
            CardPayload::Plan(_) => true,
            CardPayload::Tool(t) => t.decision.is_none(),
            CardPayload::Changes(c) => c.decision.is_none(),
            _ => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(kind: &str, id: &str, decision: Option<ToolDecision>) -> PendingCard {
        let item: WorkItem = serde_json::from_value(json!({
            "id": id, "type": "task", "title": "t", "body": "b",
        }))
        .unwrap();
        let card = if kind == PLAN_CARD {
            model::fix_task_card(&item, "ab", "g", "why")
        } else {
            let call = model::ToolCall {
                tool_name: "shell_exec",
                arguments: &json!({}),
                reason: "r",
                attempt: 1,
            };
            match model::tool_card(&item, call, json!({})) {
                CardPayload::Tool(mut t) => {
                    t.decision = decision;
                    CardPayload::Tool(t)
                }
                other => other,
            }
        };
        PendingCard {
            request_id: format!("c-{id}-{kind}"),
            scope_id: "owner".into(),
            card,
            created_at: Timestamp::now(),
            expires_at: Timestamp::now(),
            audience: silas_storage::CardAudience::Owner,
        }
    }

    #[test]
    fn open_cards_skip_decided_tool_cards_and_other_items() {
        let cards = vec![
            card(PLAN_CARD, "a", None),
            card(TOOL_CARD, "a", None),
            card(TOOL_CARD, "b", None),
            card(
                TOOL_CARD,
                "c",
                Some(ToolDecision::Declined {
                    reason: "no".into(),
                }),
            ),
        ];
        let open: Vec<String> = open_cards_for(cards.clone(), "a")
            .into_iter()
            .map(|c| c.request_id)
            .collect();
        assert_eq!(open, vec!["c-a-approval_request", "c-a-tool_approval"]);
        assert!(open_cards_for(cards.clone(), "c").is_empty());
        assert_eq!(
            decision_of(&cards[3]),
            Some(&ToolDecision::Declined {
                reason: "no".into()
            })
        );
        assert_eq!(decision_of(&cards[1]), None);
        let decided = with_decision(
            cards[1].clone(),
            &ToolDecision::Declined {
                reason: "later".into(),
            },
        );
        assert!(matches!(
            decision_of(&decided),
            Some(ToolDecision::Declined { reason }) if reason == "later"
        ));
        assert!(is_executor_plan_card(&cards[0]));
        assert!(!is_executor_plan_card(&cards[1]));
        assert_eq!(
            tool_card_for(&cards, "b").unwrap().request_id,
            "c-b-tool_approval"
        );
    }

    #[test]
    fn tool_card_ids_are_plain_and_per_attempt() {
        let c = ToolCallApproval {
            work_item_id: "t1".into(),
            plan_hash: "h".into(),
            attempt: 2,
            call_id: "call/1 x".into(),
            tool_name: "shell_exec".into(),
            arguments: json!({}),
        };
        assert_eq!(tool_card_id(&c), "card-tool-t1-a2-call_1_x");
    }
}
