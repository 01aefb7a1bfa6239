//! [`StreamHandle`]: a caller's typed handle to the Stream; every RPC has a
//! timeout.

use super::*;

/// A caller's handle to the Stream: every RPC has a timeout.
#[derive(Clone)]
pub struct StreamHandle {
    pub actor: ActorRef<StreamMsg>,
}

fn unavailable(e: impl std::fmt::Display) -> TurnError {
    TurnError::Unavailable(e.to_string())
}

impl StreamHandle {
    /// The daemon's Stream, if it is running.
    pub fn find() -> Option<StreamHandle> {
        ractor::registry::where_is(STREAM_NAME).map(|cell| StreamHandle {
            actor: ActorRef::from(cell),
        })
    }

    /// Takes forgotten conversation out of a running scope's context (no
    /// reply: the next turn of the scope comes after it in the mailbox).
    pub fn forget_history(&self, scope_id: &str, filter: crate::forget::HistoryFilter) {
        let _ = self.actor.cast(StreamMsg::ForgetHistory {
            scope_id: scope_id.to_owned(),
            filter,
        });
    }

    /// Withdraws cards their asker no longer needs answered (they resolve
    /// to their safe default, audited `card_withdrawn`). No reply: a card
    /// already answered or gone is skipped.
    pub fn withdraw_cards(&self, request_ids: Vec<String>) {
        if !request_ids.is_empty() {
            let _ = self.actor.cast(StreamMsg::WithdrawCards { request_ids });
        }
    }

    /// A notice on the owner's channels from outside a turn (a connection
    /// setup that ended in the background). Best effort, like every
    /// notice: nobody connected is not an error.
    pub fn notify_owner(&self, text: String) {
        let _ = self.actor.cast(StreamMsg::OwnerNotice { text });
    }

    pub async fn submit(&self, m: InboundMessage) -> Result<SubmitOutcome, TurnError> {
        ractor::call_t!(self.actor, StreamMsg::Submit, STREAM_RPC_TIMEOUT_MS, m)
            .map_err(unavailable)?
    }

    pub async fn decide_card(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
        origin: AnswerOrigin,
    ) -> Result<DecideOutcome, TurnError> {
        let request_id = request_id.to_string();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::DecideCard {
                request_id,
                decision,
                origin,
                reply
            },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(unavailable)?
    }

    /// A channel's plan decision, checked against the card's scope,
    /// deadline and answered state before `decide_card` runs.
    pub async fn decide_card_for(
        &self,
        scope_id: &str,
        request_id: &str,
        decision: ApprovalDecision,
        origin: AnswerOrigin,
    ) -> Result<DecideOutcome, CardRejection> {
        let (scope_id, request_id) = (scope_id.to_string(), request_id.to_string());
        let rid = request_id.clone();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::DecideCardFor {
                scope_id,
                request_id,
                decision,
                origin,
                reply
            },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(|e| rpc_failed(rid, e))?
    }

    /// The owner's answer to a non-plan card.
    pub async fn answer_card(
        &self,
        scope_id: &str,
        request_id: &str,
        kind: CardKind,
        response: CardResponse,
        origin: AnswerOrigin,
    ) -> Result<CardAnswer, CardRejection> {
        let (scope_id, request_id) = (scope_id.to_string(), request_id.to_string());
        let rid = request_id.clone();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::AnswerCard {
                scope_id,
                request_id,
                kind,
                response,
                origin,
                reply
            },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(|e| rpc_failed(rid, e))?
    }

    /// `RichCardChannel` for every card type (§4.1.1): persist and send the
    /// card, then wait for its resolution — the owner's answer, or the safe
    /// default on timeout, disconnect or shutdown. Never waits past the
    /// card's deadline (plus a margin for the sweep).
    pub async fn ask(
        &self,
        card: PendingCard,
        timeouts: &CardTimeouts,
    ) -> Result<CardAnswer, TurnError> {
        let kind = card.card.kind().ok_or_else(|| {
            TurnError::Unavailable(format!("unknown card type {:?}", card.card_type()))
        })?;
        let fallback = CardAnswer {
            request_id: card.request_id.clone(),
            kind,
            response: cards::safe_default(kind, &card),
            resolution: Resolution::Disconnected,
            origin: None,
        };
        let wait = cards::deadline(&card, timeouts)
            .datetime()
            .signed_duration_since(Timestamp::now().datetime())
            .to_std()
            .unwrap_or_default()
            + Duration::from_secs(5);
        let (tx, rx) = oneshot::channel();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::OpenCard {
                card,
                answer: tx,
                reply
            },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(unavailable)??;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            // The Stream stopped (its waiters are dropped) or the sweep is
            // late: the safe default, never a silent hang.
            Ok(Err(_)) => Ok(fallback),
            Err(_) => Ok(CardAnswer {
                resolution: Resolution::TimedOut,
                ..fallback
            }),
        }
    }

    /// Ask the owner for a credential through a secure input card (§0.5.3,
    /// §5.10.1 — e.g. a connection setup). The answer says only whether the
    /// owner stored it (`POST /secrets/{ref_id}` + `secure_input_completed`);
    /// the value goes to the secret store, never through the runtime.
    pub async fn request_secure_input(
        &self,
        scope_id: &str,
        label: &str,
        input_hint: Option<&str>,
        guidance: serde_json::Value,
        timeouts: &CardTimeouts,
    ) -> Result<CardAnswer, TurnError> {
        let ref_id = format!(
            "sec-{}",
            crate::approval::random_id().map_err(|e| TurnError::Unavailable(e.to_string()))?
        );
        let card = cards::secure_input_card(
            &ref_id,
            scope_id,
            label,
            input_hint,
            guidance,
            Timestamp::now(),
            timeouts,
        );
        self.ask(card, timeouts).await
    }

    /// A scope's last connection closed: resolve its cards to their safe
    /// defaults. Returns how many were resolved.
    pub async fn scope_disconnected(&self, scope_id: &str) -> Result<usize, TurnError> {
        let scope_id = scope_id.to_string();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::ScopeDisconnected { scope_id, reply },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(unavailable)
    }

    pub async fn status(&self) -> Result<StreamStatus, TurnError> {
        ractor::call_t!(self.actor, StreamMsg::Status, STREAM_RPC_TIMEOUT_MS).map_err(unavailable)
    }

    /// §18.2 steps 1–3: close intake, then wait up to `grace` for the
    /// turns running now. Queued turns do not start (`TurnStarts`); with
    /// anything cut off at the grace they stay in the inbox and are taken
    /// at the next start. Returns what the drain left.
    pub async fn drain(&self, grace: Duration) -> Result<Drained, TurnError> {
        let mut running =
            ractor::call_t!(self.actor, StreamMsg::CloseIntake, STREAM_RPC_TIMEOUT_MS)
                .map_err(unavailable)?;
        let deadline = Instant::now() + grace;
        let mut status = self.status().await?;
        while running > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            status = self.status().await?;
            running = status.running_turns;
        }
        Ok(Drained {
            cut_off: running,
            // Queued turns include the ones still running.
            left_queued: status.pending_total.saturating_sub(running),
        })
    }
}

/// What a shutdown drain left in the inbox for the next start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Turns still running when the grace ended (cut off).
    pub cut_off: u32,
    /// Turns queued and never started.
    pub left_queued: u32,
}

impl Drained {
    /// Every turn that started finished.
    pub fn finished(&self) -> bool {
        self.cut_off == 0
    }
}

/// A card RPC the Stream did not answer (stopped, restarting, or past
/// [`STREAM_RPC_TIMEOUT_MS`]): the answer is refused as a channel timeout.
fn rpc_failed(request_id: String, e: impl std::fmt::Display) -> CardRejection {
    CardRejection::Failed {
        request_id,
        code: silas_core::ErrorCode::EChannelTimeout,
        message: e.to_string(),
    }
}
