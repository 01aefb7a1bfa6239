//! Turn step 12 (§5.1, §5.2.1): a plan in the response becomes a work item
//! and its approval card. Split from `pipeline.rs` along the step seam.

use super::*;

impl Turn<'_> {
    /// A plan the agent proposed that must not reach a card: the reply says
    /// why and that nothing was scheduled.
    fn refuse_plan(&mut self, message: &str, why: &str) {
        self.push("plan_parse_failed", json!({"error": why}));
        self.reply = Some(format!(
            "{message}\n\n(The proposed plan was refused, so nothing was scheduled: {why}.)"
        ));
    }

    /// Step 12: plan approval flow (§5.1.2 up to the card). The agent's
    /// `needs_approval=false` is overridden unless a valid token exists —
    /// which a parsed plan never has.
    pub(super) fn plan_approval(&mut self) -> Result<(), TurnError> {
        self.step("plan_approval");
        let Some(resp) = self.response.clone() else {
            return Ok(());
        };
        let Some(markdown) = resp
            .plan_action
            .as_ref()
            .and_then(|p| p.plan_markdown.clone())
        else {
            return Ok(());
        };
        let mut work = match parse_plan(&markdown) {
            Ok(w) => w,
            Err(e @ crate::turn::plan::PlanParseError::ScriptGate(_)) => {
                self.refuse_plan(&resp.message, &e.to_string());
                return Ok(());
            }
            Err(e) => {
                self.plan_unreadable(&resp.message, &e.to_string());
                return Ok(());
            }
        };
        // The plan's gates run beside the owner's (compiled at step 0) when
        // the work executes: a name clash would fail the item after approval,
        // and a lookalike would read as the owner's gate, so such a plan
        // never reaches a card.
        let owner: Vec<&str> = self
            .active
            .gates()
            .iter()
            .map(|g| g.name.as_str())
            .collect();
        if let Some(why) = crate::turn::plan::gate_name_problem(&work.gates, &owner)
            .or_else(|| crate::turn::plan::gate_subject_problem(&work.gates))
            .or_else(|| {
                crate::turn::plan::schedule_problem(work.schedule.as_deref(), Timestamp::now())
            })
        {
            self.refuse_plan(&resp.message, &why);
            return Ok(());
        }
        // The id is the model's (a customer's turn can steer it) and is
        // printed by `silas work list` and in the audit: a newline, an
        // escape or a bidi override in it forged lines there. Such an id is
        // replaced by one derived from this turn (the raw one is not kept).
        if !crate::turn::plan::is_plain_item_id(&work.id) {
            let renamed = format!("plan-{}", self.record.inbox_id);
            self.push(
                "plan_id_replaced",
                json!({"work_item_id": renamed, "scope_id": self.scope.scope_id}),
            );
            work.id = renamed;
        }
        if let Some(prior) = resp
            .plan_action
            .as_ref()
            .and_then(|p| p.continuation_of.clone())
        {
            work.follow_up_of = Some(prior);
            if work.input_artifacts_from.is_empty() {
                work.input_artifacts_from = vec!["*".into()];
            }
        }
        // The item belongs to this scope (set here, never by the plan), and
        // may only build on work of the same scope.
        work.scope_id = Some(self.scope.scope_id.clone());
        if let Err(why) = crate::turn::plan::foreign_reference(&self.deps.store, &work) {
            self.push(
                "plan_reference_refused",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                       "detail": why}),
            );
            self.reply = Some(format!(
                "{}\n\n(The plan builds on work outside this conversation, so nothing was scheduled.)",
                resp.message
            ));
            return Ok(());
        }
        // A named workspace must be registered, writable if write is asked,
        // its extra paths real — else no card at all (issue #15).
        if let Err(why) = crate::workspaces::check_plan(&self.deps.store, &work) {
            let reason = match &why {
                crate::workspaces::PlanWorkspaceError::Refused(r) => r.kind(),
                crate::workspaces::PlanWorkspaceError::Store(_) => "registry_unreadable",
            };
            self.push(
                "plan_refused_workspace",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                   "reason": reason, "detail": why.to_string()}),
            );
            // A customer learns nothing about the owner's registry.
            self.reply = Some(if self.scope.scope_id == crate::turn::OWNER_SCOPE {
                format!(
                    "{}\n\n(The plan was refused, so nothing was scheduled: {why}.)",
                    resp.message
                )
            } else {
                format!(
                    "{}\n\n(The plan was refused, so nothing was scheduled.)",
                    resp.message
                )
            });
            return Ok(());
        }
        // The model writes the plan's budget: one over the owner's ceiling
        // is refused here, not left to the card's small print.
        let excess = self
            .deps
            .config
            .limits
            .plan_budget_ceiling
            .excess(&work.budget);
        if !excess.is_empty() {
            self.push(
                "plan_refused_budget",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                       "over": excess}),
            );
            self.reply = Some(format!(
                "{}\n\n(The plan was refused, so nothing was scheduled: its budget is over \
                 the ceiling in limits.plan_budget_ceiling: {}.)",
                resp.message,
                excess.join(", ")
            ));
            return Ok(());
        }
        // Skills the plan names are bound to their installed content hashes,
        // which the plan hash the owner signs covers (§10.5).
        if let Err(why) = crate::turn::skill_context::bind(self.deps.skills.as_deref(), &mut work) {
            self.push(
                "plan_refused_skill",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id,
                       "skills": work.skills, "detail": why}),
            );
            self.reply = Some(format!(
                "{}\n\n(The plan was refused, so nothing was scheduled: {why}.)",
                resp.message
            ));
            return Ok(());
        }
        let has_valid_token = false;
        let needs = effective_needs_approval(resp.needs_approval, has_valid_token);
        if needs && !resp.needs_approval {
            self.push(
                "needs_approval_overridden",
                json!({"work_item_id": work.id, "scope_id": self.scope.scope_id}),
            );
        }
        work.needs_approval = needs;
        work.status = WorkItemStatus::Pending;
        work.approval_token = None;
        let request_id = format!("card-{}", self.record.inbox_id);
        if let Some(existing) = self.deps.store.work_items().get(&work.id)? {
            // The model chooses the plan's id. Saving over an existing item
            // would replace an approved body (and drop its token) or retarget
            // another plan's pending card at the model's text. The only
            // legitimate same-id save is this turn's own replay after a
            // crash: its card still points at the item and nothing was
            // approved yet. Anything else keeps the stored item and files
            // the new plan under an id derived from this turn.
            let own_replay = existing.approval_token.is_none()
                && existing.status == WorkItemStatus::Pending
                && self
                    .deps
                    .store
                    .records::<PendingCard>()
                    .get(&request_id)?
                    .is_some_and(|c| c.card.work_item_id() == Some(work.id.as_str()));
            if !own_replay {
                let renamed = format!("{}-{}", work.id, self.record.inbox_id);
                self.push(
                    "plan_id_collision",
                    json!({"proposed_id": work.id, "work_item_id": renamed,
                           "scope_id": self.scope.scope_id}),
                );
                work.id = renamed;
            }
        }
        let plan_hash = match silas_core::projections::plan_hash(&work) {
            Ok(h) => h,
            Err(e) => {
                self.plan_unreadable(&resp.message, &e.to_string());
                return Ok(());
            }
        };
        // Every customer web connection is a scope of its own, so per-scope
        // limits do not bound how many cards strangers open in the owner's
        // Review: at most this many wait at once, a share of them per
        // address; more are not filed. Counted and filed under one lock
        // (the guard lives to the end of this step).
        let from_customer = self.scope.scope_id != crate::turn::OWNER_SCOPE;
        let limits = self.deps.limits.clone();
        let _filing = from_customer.then(|| limits.customer_card_filing());
        if from_customer {
            let address = self.record.message.ip.as_deref();
            let waiting = customer_cards_waiting(&self.deps.store, address)?;
            if let Some(limit) = waiting.refusal() {
                self.push(
                    "plan_refused_review_full",
                    json!({"scope_id": self.scope.scope_id, "limit": limit}),
                );
                self.reply = Some(REVIEW_FULL.to_string());
                return Ok(());
            }
        }
        self.deps.store.work_items().save(&work)?;
        self.scope.context.add(item(
            format!("plan:{}", work.id),
            ContextZone::Workspace,
            ContextItemKind::Plan,
            markdown,
            self.turn_number,
            self.source,
            self.taint,
            true,
        ));
        let now = Timestamp::now();
        let ttl =
            chrono::Duration::minutes(i64::from(self.deps.config.approval.default_ttl_minutes));
        // Only the owner approves: a plan from a chatbot customer's scope
        // goes to the owner's Review (the owner scope), never back to the
        // customer, who is told only that it was sent for review.
        // The plan hash binds the card to the plan as shown: an edit after
        // the card makes the approval fail (`decide_card`).
        let card = PendingCard {
            request_id,
            scope_id: crate::turn::OWNER_SCOPE.to_string(),
            card: silas_core::cards::with_goal_terms(
                silas_core::cards::proposed_plan_card(
                    &work,
                    &plan_hash,
                    &self.record.inbox_id,
                    &self.scope.scope_id,
                    crate::turn::OWNER_SCOPE,
                ),
                &crate::scheduler::zone_name(&self.deps.config.scheduler.timezone),
                self.deps.approvals.standing_limits(),
            ),
            created_at: now,
            expires_at: now.plus(ttl),
            audience: silas_storage::CardAudience::Owner,
        };
        let mut card = card;
        // The card shows the directory the registry has now; the approval
        // re-checks the registry (`approval_flow`).
        crate::workspaces::fill_card_path(&self.deps.store, &mut card);
        if from_customer {
            self.push(
                "plan_sent_for_review",
                json!({"work_item_id": work.id, "request_id": card.request_id,
                       "scope_id": self.scope.scope_id}),
            );
            self.reply = Some(SENT_FOR_REVIEW.to_string());
        }
        self.deps.store.records::<PendingCard>().put(&card)?;
        self.push(
            "plan_proposed",
            json!({"work_item_id": work.id, "request_id": card.request_id,
                   "scope_id": self.scope.scope_id}),
        );
        self.card = Some(card);
        Ok(())
    }

    /// A plan the turn cannot read (parse or hash): audited, nothing
    /// scheduled, and the reply says so.
    fn plan_unreadable(&mut self, message: &str, error: &str) {
        self.push("plan_parse_failed", json!({"error": error}));
        self.reply = Some(format!(
            "{message}\n\n(The proposed plan could not be read, so nothing was scheduled.)"
        ));
    }
}

/// The most chatbot customers' plan cards waiting for the owner at once.
pub const MAX_CUSTOMER_CARDS: usize = 20;

/// Of those, the most from one address (an IPv6 /64): one host cannot hold
/// the whole Review, and a visitor refused before its own share is used
/// learns only that at least `MAX_CUSTOMER_CARDS - MAX_CUSTOMER_CARDS_PER_ADDRESS`
/// others wait — not how many.
pub const MAX_CUSTOMER_CARDS_PER_ADDRESS: usize = 4;

// One address never holds more than a fifth of the Review.
const _: () = assert!(MAX_CUSTOMER_CARDS_PER_ADDRESS * 5 <= MAX_CUSTOMER_CARDS);

/// What a customer is told when the owner's Review is full (for everyone
/// or for its address: the same words, so neither is told apart).
pub const REVIEW_FULL: &str = "Thanks — your request needs a person's review, and too many requests are waiting for one right now. Nothing was done; please ask again later.";

/// Customers' plan cards waiting for the owner: in all, and from the
/// address of the turn at hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CustomerCardsWaiting {
    pub total: usize,
    pub same_address: usize,
}

impl CustomerCardsWaiting {
    /// The cap another card would pass (`"total"` or `"address"`), if any.
    pub(crate) fn refusal(self) -> Option<&'static str> {
        if self.total >= MAX_CUSTOMER_CARDS {
            Some("total")
        } else if self.same_address >= MAX_CUSTOMER_CARDS_PER_ADDRESS {
            Some("address")
        } else {
            None
        }
    }
}

/// Counts the customers' cards waiting, reading each one's address from
/// the message that asked for it. A card whose message is gone counts in
/// the total only.
fn customer_cards_waiting(
    store: &silas_storage::Store,
    address: Option<&str>,
) -> Result<CustomerCardsWaiting, TurnError> {
    let address = address.map(silas_core::address::counted_key);
    let mut waiting = CustomerCardsWaiting::default();
    for card in store.records::<PendingCard>().list()? {
        let silas_core::cards::CardPayload::Plan(plan) = &card.card else {
            continue;
        };
        if plan.from_scope.is_none() {
            continue;
        }
        waiting.total += 1;
        let Some(inbox_id) = plan.inbox_id.as_deref() else {
            continue;
        };
        let asked_from = store
            .inbox()
            .get(inbox_id)?
            .and_then(|r| r.message.ip)
            .map(|ip| silas_core::address::counted_key(&ip));
        if asked_from.is_some() && asked_from == address {
            waiting.same_address += 1;
        }
    }
    Ok(waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_is_refused_at_either_cap() {
        let w = |total, same_address| CustomerCardsWaiting {
            total,
            same_address,
        };
        assert_eq!(w(0, 0).refusal(), None);
        assert_eq!(
            w(MAX_CUSTOMER_CARDS - 1, MAX_CUSTOMER_CARDS_PER_ADDRESS - 1).refusal(),
            None
        );
        assert_eq!(w(MAX_CUSTOMER_CARDS, 0).refusal(), Some("total"));
        assert_eq!(w(MAX_CUSTOMER_CARDS + 3, 9).refusal(), Some("total"));
        assert_eq!(
            w(5, MAX_CUSTOMER_CARDS_PER_ADDRESS).refusal(),
            Some("address")
        );
    }
}
