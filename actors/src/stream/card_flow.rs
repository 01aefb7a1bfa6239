//! The Stream's cards (§0.5.3, §5.1.1): who may answer a card, opening one
//! for a scope, answering it, its default on timeout and the periodic sweep.
//! Methods of [`StreamState`]; the actor in `stream.rs` sequences them.

use super::*;

impl StreamState {
    /// Whether an answer from `origin`, arriving in `scope_id`, may answer
    /// `card`: only its own scope's, and an owner-audience card (every
    /// approval) only from a live owner-authenticated connection. A refusal
    /// is audited (`card_answer_refused` with the reason) and reads as an
    /// unknown card, so a client cannot probe other scopes' or the owner's
    /// cards.
    pub(super) fn answer_allowed(
        &self,
        card: &PendingCard,
        scope_id: &str,
        origin: &AnswerOrigin,
    ) -> Result<bool, ActorProcessingErr> {
        let reason = if card.scope_id != scope_id {
            "other_scope"
        } else if card.audience == CardAudience::Owner && !self.args.deps.approvals.is_owner(origin)
        {
            "not_owner"
        } else if !cards::turn_committed(&self.args.deps.store, card)? {
            "turn_not_committed"
        } else {
            return Ok(true);
        };
        audit(
            &self.args.deps,
            "card_answer_refused",
            json!({"request_id": card.request_id, "card_type": card.card_type(),
                   "reason": reason, "scope_id": scope_id,
                   "channel": origin.channel, "connection_id": origin.connection_id}),
        )?;
        Ok(false)
    }

    /// §18.5: one card submission from `scope_id`. Every submission counts
    /// (a flood of bogus answers is what the limit is for); over the limit
    /// it is refused before the card is even read — the card stays as it
    /// is and can be answered once the window allows — and audited.
    pub(super) fn card_submission(
        &mut self,
        scope_id: &str,
        request_id: &str,
    ) -> Result<Result<(), CardRejection>, ActorProcessingErr> {
        match self.card_limits.answer(scope_id, Instant::now()) {
            Ok(()) => Ok(Ok(())),
            Err(kind) => {
                self.audit_refusal(
                    "security_rate_limited",
                    scope_id,
                    json!({"scope_id": scope_id, "limit": kind.as_str(),
                           "request_id": crate::refusal_audit::quoted_id(request_id)}),
                )?;
                Ok(Err(CardRejection::RateLimited {
                    request_id: request_id.to_string(),
                }))
            }
        }
    }

    pub(super) fn declined() -> ApprovalDecision {
        ApprovalDecision {
            verdict: silas_core::model::approval::ApprovalVerdict::Declined,
            approval_strength: silas_core::model::approval::ApprovalStrength::Tap,
            conditions: Default::default(),
        }
    }

    /// Resolves one card to its safe default and audits why. Plan cards
    /// (and card types this module does not know, e.g. ones added by the
    /// execution flow) are declined through `decide_card`, so nothing they
    /// guard can run; others are deleted and their waiter told.
    pub(super) async fn resolve_default(
        &mut self,
        card: PendingCard,
        resolution: Resolution,
    ) -> Result<(), ActorProcessingErr> {
        let deps = self.args.deps.clone();
        let kind = card.card.kind();
        let response = match kind {
            Some(k) => cards::safe_default(k, &card),
            None => cards::safe_default(CardKind::Plan, &card),
        };
        let answer = CardAnswer {
            request_id: card.request_id.clone(),
            kind: kind.unwrap_or(CardKind::Plan),
            response,
            resolution,
            origin: None,
        };
        let (event, data) = cards::audit_record(&card, &answer);
        audit(&deps, event, data)?;
        self.resolved.remember(&card.request_id, &card.scope_id);
        if let Some(waiter) = self.waiters.remove(&card.request_id) {
            deps.store
                .records::<PendingCard>()
                .delete(&card.request_id)?;
            let _ = waiter.send(answer);
            return Ok(());
        }
        if matches!(kind, None | Some(CardKind::Plan)) {
            let out = approval_flow::decide_card(
                &deps,
                &self.args.dispatch,
                &card.request_id,
                Self::declined(),
                &AnswerOrigin::new("server", "safe_default"),
            )
            .await;
            if let Err(e) = out {
                // Declines are audited and the card deleted before the
                // owner notice, so a failed notice (nobody connected) or
                // an already-closed card leaves nothing to run.
                tracing::info!(request_id = %card.request_id, "card safe-declined: {e}");
            }
        }
        // Whatever decide_card did, the card no longer waits.
        deps.store
            .records::<PendingCard>()
            .delete(&card.request_id)?;
        Ok(())
    }

    /// The stored pending cards `keep` selects.
    pub(super) fn pending_cards(
        &self,
        keep: impl Fn(&PendingCard) -> bool,
    ) -> Result<Vec<PendingCard>, ActorProcessingErr> {
        let all = self.args.deps.store.records::<PendingCard>().list()?;
        Ok(all.into_iter().filter(|c| keep(c)).collect())
    }

    pub(super) async fn sweep_cards(&mut self) -> Result<(), ActorProcessingErr> {
        if !self.accepting {
            return Ok(());
        }
        let now = Timestamp::now();
        let timeouts = self.timeouts;
        let expired = self.pending_cards(|c| cards::is_expired(c, &timeouts, now))?;
        for card in expired {
            self.resolve_default(card, Resolution::TimedOut).await?;
        }
        Ok(())
    }

    pub(super) async fn open_card(
        &mut self,
        card: PendingCard,
        answer: oneshot::Sender<CardAnswer>,
    ) -> Result<Result<(), TurnError>, ActorProcessingErr> {
        if !self.accepting {
            return Ok(Err(TurnError::Unavailable(
                "shutting down; card intake closed".into(),
            )));
        }
        let deps = self.args.deps.clone();
        // §18.5: proactive suggestion cards per hour and autonomy-threshold
        // proposals per week, per scope. Over the limit the card is never
        // stored or shown; the requester gets a typed refusal.
        if let Some(kind) = card.card.kind() {
            let limit = OpenLimit::for_kind(kind);
            if let Err(hit) = self.card_limits.open(limit, &card.scope_id, Instant::now()) {
                audit(
                    &deps,
                    "security_rate_limited",
                    json!({"scope_id": card.scope_id, "limit": hit.as_str(),
                           "request_id": card.request_id, "card_type": card.card_type()}),
                )?;
                return Ok(Err(TurnError::RateLimited(hit)));
            }
        }
        deps.store.records::<PendingCard>().put(&card)?;
        self.waiters.insert(card.request_id.clone(), answer);
        audit(
            &deps,
            "card_opened",
            json!({"request_id": card.request_id, "card_type": card.card_type(),
                   "scope_id": card.scope_id}),
        )?;
        // §8.1: a card for a scope with no live connection resolves to its
        // safe default at once instead of waiting for a response that
        // cannot come.
        if let Err(e) = deps.sink.send(Outbound::Card { card: card.clone() }).await {
            tracing::info!(request_id = %card.request_id, "card not delivered: {e}");
            self.resolve_default(card, Resolution::Disconnected).await?;
        }
        Ok(Ok(()))
    }

    pub(super) async fn answer_card(
        &mut self,
        scope_id: &str,
        request_id: &str,
        kind: CardKind,
        response: CardResponse,
        origin: &AnswerOrigin,
    ) -> Result<Result<CardAnswer, CardRejection>, ActorProcessingErr> {
        if !self.accepting {
            return Ok(Err(CardRejection::Closed("shutting down".into())));
        }
        if let Err(e) = self.card_submission(scope_id, request_id)? {
            return Ok(Err(e));
        }
        let deps = self.args.deps.clone();
        let card = deps.store.records::<PendingCard>().get(request_id)?;
        if let Some(c) = &card
            && !self.answer_allowed(c, scope_id, origin)?
        {
            return Ok(Err(CardRejection::Unknown(request_id.into())));
        }
        let checked = cards::check_answer(
            card.as_ref(),
            request_id,
            scope_id,
            kind,
            response,
            self.resolved.answered_in(request_id, scope_id),
            &self.timeouts,
            Timestamp::now(),
        );
        let (card, response) = match (card, checked) {
            (Some(card), Ok(r)) => (card, r),
            (Some(card), Err(e @ CardRejection::Expired(_))) => {
                self.resolve_default(card, Resolution::TimedOut).await?;
                return Ok(Err(e));
            }
            (_, Err(e)) => return Ok(Err(e)),
            (None, Ok(_)) => return Ok(Err(CardRejection::Unknown(request_id.into()))),
        };
        let answer = CardAnswer {
            request_id: request_id.to_string(),
            kind,
            response,
            resolution: Resolution::Answered,
            origin: Some(origin.clone()),
        };
        deps.store.records::<PendingCard>().delete(request_id)?;
        let (event, data) = cards::audit_record(&card, &answer);
        audit(&deps, event, data)?;
        self.resolved.remember(request_id, &card.scope_id);
        if let Some(w) = self.waiters.remove(request_id) {
            let _ = w.send(answer.clone());
        }
        Ok(Ok(answer))
    }

    pub(super) async fn decide_card_for(
        &mut self,
        scope_id: &str,
        request_id: &str,
        decision: ApprovalDecision,
        origin: &AnswerOrigin,
    ) -> Result<Result<DecideOutcome, CardRejection>, ActorProcessingErr> {
        if !self.accepting {
            return Ok(Err(CardRejection::Closed(
                "shutting down; card intake closed".into(),
            )));
        }
        if let Err(e) = self.card_submission(scope_id, request_id)? {
            return Ok(Err(e));
        }
        let deps = self.args.deps.clone();
        let card = deps.store.records::<PendingCard>().get(request_id)?;
        let card = match card {
            Some(c) => {
                if !self.answer_allowed(&c, scope_id, origin)? {
                    return Ok(Err(CardRejection::Unknown(request_id.into())));
                }
                c
            }
            _ if self.resolved.answered_in(request_id, scope_id) => {
                return Ok(Err(CardRejection::AlreadyAnswered(request_id.into())));
            }
            _ => return Ok(Err(CardRejection::Unknown(request_id.into()))),
        };
        // Known non-plan cards are answered with their own frame; unknown
        // types belong to decide_card (other approval flows).
        if let Some(kind) = card.card.kind()
            && kind != CardKind::Plan
        {
            return Ok(Err(CardRejection::WrongType {
                request_id: request_id.into(),
                card_type: card.card_type().to_string(),
                expected: kind.response_type().into(),
            }));
        }
        if cards::is_expired(&card, &self.timeouts, Timestamp::now()) {
            self.resolve_default(card, Resolution::TimedOut).await?;
            return Ok(Err(CardRejection::Expired(request_id.into())));
        }
        let out =
            approval_flow::decide_card(&deps, &self.args.dispatch, request_id, decision, origin)
                .await;
        self.resolved.remember(request_id, &card.scope_id);
        Ok(out.map_err(|e| match e {
            TurnError::UnknownCard(_) => CardRejection::Unknown(request_id.into()),
            other => CardRejection::Failed {
                request_id: request_id.into(),
                code: silas_core::Coded::code(&other),
                message: other.to_string(),
            },
        }))
    }
}
