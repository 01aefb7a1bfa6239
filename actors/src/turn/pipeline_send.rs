//! Turn steps 12–13 (§5.1): the response's durable commit and its delivery.
//! Split from `pipeline.rs` along the step seam.

use silas_storage::{ReplyAck, TurnOutcome};

use super::*;

impl Turn<'_> {
    /// Commits the turn's outcome: reply + response chronicle + audit, with
    /// step 3's record when it was left to this commit and, for a reply
    /// its client acknowledges by id, the delivery mark (one commit, see
    /// `TurnOutcome`).
    pub(super) async fn commit_response(
        &mut self,
        chronicle: Option<silas_core::model::context::ContextItem>,
    ) -> Result<(), TurnError> {
        let reply = self.reply.clone().unwrap_or_default();
        let mut audit = std::mem::take(&mut self.audit);
        audit.push((
            "turn_completed".to_string(),
            obj(
                json!({"scope_id": self.scope.scope_id, "inbox_id": self.record.inbox_id,
                       "turn_number": self.turn_number, "blocked": self.blocked}),
            ),
        ));
        let delivered = self.reply_out().map(|out| self.deps.sink.reply_ack(&out));
        let outcome = TurnOutcome {
            reply,
            chronicle,
            audit,
            input: self.input_record.take(),
            delivered,
        };
        self.record = self
            .deps
            .store
            .inbox()
            .record_outcome_async(&self.record.inbox_id, outcome)
            .await?;
        Ok(())
    }

    /// The reply frame, when the turn has a reply.
    fn reply_out(&self) -> Option<Outbound> {
        let m = &self.record.message;
        self.reply.clone().map(|text| Outbound::Reply {
            scope_id: self.scope.scope_id.clone(),
            connection_id: m.connection_id.clone(),
            reply_to: self.record.inbox_id.clone(),
            text,
        })
    }

    /// Step 13: deliver the reply (and any card) and mark it delivered —
    /// unless the response commit did ([`ReplyAck::marked_with_response`]).
    /// A reply its client acknowledges ([`ReplyAck::Client`]) is marked
    /// first — kept as unacknowledged, visible before the frame leaves, so
    /// the client's ack always finds it, and a crash between the two sends
    /// it again on reconnect; any other is marked after it went out.
    pub(super) async fn send(&mut self) -> Result<(), TurnError> {
        self.step("send");
        let reply = self.reply_out();
        let ack = reply
            .as_ref()
            .map_or(ReplyAck::Channel, |out| self.deps.sink.reply_ack(out));
        let marked = self.record.stage >= InboxStage::Delivered;
        if ack == ReplyAck::Client && !marked {
            self.mark_delivered(ack).await?;
        }
        if let Some(out) = reply {
            self.deliver(out, "reply").await?;
        }
        if let Some(card) = self.card.clone() {
            self.deliver(Outbound::Card { card }, "card").await?;
        }
        if ack != ReplyAck::Client && !marked {
            self.mark_delivered(ack).await?;
        }
        Ok(())
    }

    /// The delivery mark of a reply the response commit did not mark (a
    /// channel that confirms itself: durable; a replay of a record
    /// responded before: visible at once and durable within the lazy
    /// window — a crash before that redelivers this reply under the same
    /// id, which the client drops, never reruns the turn).
    async fn mark_delivered(&mut self, ack: ReplyAck) -> Result<(), TurnError> {
        self.record = self
            .deps
            .store
            .inbox()
            .mark_delivered_async(&self.record.inbox_id, ack)
            .await?;
        Ok(())
    }

    /// Where progress notices of this turn's model calls go: the sender.
    pub(super) fn progress(&self) -> crate::turn::progress::ProgressTarget {
        crate::turn::progress::ProgressTarget {
            sink: self.deps.sink.clone(),
            scope_id: self.scope.scope_id.clone(),
            connection_id: self.record.message.connection_id.clone(),
            reply_to: self.record.inbox_id.clone(),
        }
    }

    /// One delivery. Nobody connected to the scope is not a failed turn: the
    /// reply is already durable (inbox record + chronicle, committed at step
    /// 11) and a card stays pending in the store until answered or expired.
    /// Failing here would restart the processor, replay into the same empty
    /// channel and, past the restart intensity, take the daemon down —
    /// because a client closed its tab. Audited (no content) instead.
    pub(super) async fn deliver(&mut self, out: Outbound, kind: &str) -> Result<(), TurnError> {
        match self.deps.sink.send(out).await {
            Ok(()) => Ok(()),
            Err(ChannelError::Disconnected(why)) => {
                tracing::info!(scope_id = %self.scope.scope_id, kind, "not delivered: {why}");
                let data = json!({"scope_id": self.scope.scope_id,
                                  "inbox_id": self.record.inbox_id, "kind": kind});
                self.push("delivery_no_connection", data);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
