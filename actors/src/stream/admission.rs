//! The Stream's admission of one inbound message (§5.1, §18.5, §18.6):
//! intake open, the scope's and the address's rate limits, the bounded
//! queues, secret redaction before the first durable copy, the sender's
//! identity from the server's record; then the durable record is written in
//! its own task ([`crate::stream_accept`]). Split from `stream.rs` along the
//! admission seam.

use super::*;

impl StreamState {
    /// Admits `m` or answers at once (shutting down, rate limited, busy).
    pub(super) async fn submit(
        &mut self,
        myself: &ActorRef<StreamMsg>,
        m: InboundMessage,
    ) -> Result<Admit, ActorProcessingErr> {
        let deps = self.args.deps.clone();
        // Sent again under a key already recorded (a web client resending
        // what it never saw `accepted` for, a channel's redelivery): it is
        // accepted as it was, whatever the limits, the queues or a drain
        // say now — a refusal would read as "not sent" for a message that
        // will be answered — and it costs no allowance.
        if let Some(key) = &m.dedup_key
            && let Ok(Some(inbox_id)) = deps.store.inbox().accepted_as(key)
        {
            return Ok(Admit::Known { inbox_id });
        }
        if !self.accepting {
            return Ok(SubmitOutcome::ShuttingDown.into());
        }
        self.idle.active(&m.scope_id);
        let now = Instant::now();
        let is_owner = m.scope_id == OWNER_SCOPE;
        // The owner's messages are bounded per scope only: behind a reverse
        // proxy the owner shares an address with every customer, whose
        // messages would otherwise use up the owner's allowance. A
        // customer's count under its /64: each of a host's connections may
        // come from another address of it.
        let ip_key = match &m.ip {
            Some(ip) if !is_owner => silas_core::address::counted_key(ip),
            _ => String::new(),
        };
        let scope_ok = self.per_scope.would_allow(&m.scope_id, now);
        let ip_ok = ip_key.is_empty() || self.per_ip.would_allow(&ip_key, now);
        if !(scope_ok && ip_ok) {
            self.audit_refusal(
                "security_rate_limited",
                &m.scope_id,
                json!({"scope_id": m.scope_id, "channel": m.channel,
                       "limit": if scope_ok { "ip" } else { "scope" }}),
            )?;
            return Ok(SubmitOutcome::RateLimited {
                message: RATE_LIMITED_MESSAGE.to_string(),
            }
            .into());
        }
        match self.queues.admission(&m.scope_id, is_owner) {
            Admission::Admit => {}
            full => {
                self.audit_refusal(
                    "backpressure_busy_retry",
                    &m.scope_id,
                    json!({"scope_id": m.scope_id,
                           "queue": if full == Admission::ScopeFull { "scope" } else { "global" },
                           "pending_total": self.queues.total()}),
                )?;
                return Ok(SubmitOutcome::BusyRetry {
                    retry_after_ms: BUSY_RETRY_AFTER_MS,
                }
                .into());
            }
        }
        self.per_scope.try_take(&m.scope_id, now);
        if !ip_key.is_empty() {
            self.per_ip.try_take(&ip_key, now);
        }
        let scope_id = m.scope_id.clone();
        // Secret isolation (§0.5): a credential pasted into chat is removed
        // before anything stores it or a model reads it — the inbox is the
        // first durable copy. A signed message redacted here no longer
        // verifies and is treated as external (fails closed).
        let (text, findings) = silas_core::secrets::redact_conversation(&m.text);
        if !findings.is_empty() {
            let kinds: Vec<&str> = findings.iter().map(|f| f.kind).collect();
            audit(
                &deps,
                "secret_redacted_inbound",
                json!({"scope_id": scope_id, "channel": m.channel, "kinds": kinds}),
            )?;
            // Best effort: the redaction already happened either way.
            let _ = deps
                .sink
                .send(Outbound::OwnerNotice {
                    scope_id: scope_id.clone(),
                    text: SECRET_REDACTED_NOTICE.to_string(),
                })
                .await;
        }
        // Identity comes from the server (§5.12): whether the connection
        // authenticated as the owner is the approval engine's record of it,
        // whatever the channel or the client said.
        let owner_authenticated = deps
            .approvals
            .is_owner(&AnswerOrigin::new(&m.channel, &m.connection_id));
        let sender_id = if owner_authenticated {
            OWNER_SCOPE.to_string()
        } else if m.sender_id == OWNER_SCOPE {
            format!("unauthenticated:{}", m.connection_id)
        } else {
            m.sender_id
        };
        let inbound = NewInbound {
            scope_id: m.scope_id,
            channel: m.channel,
            sender_id,
            text,
            signed: m.signed,
            connection_id: m.connection_id,
            ip: m.ip,
            owner_authenticated,
            dedup_key: m.dedup_key,
        };
        // Durable before acknowledged: the record is committed in its own
        // task (`stream_accept`), so concurrent admissions share the group
        // commit's fsync. Its queue slot and processor are taken now.
        self.queues.push(&scope_id);
        let processor = self.processor(myself, &scope_id).await?;
        Ok(Admit::Accepting(Box::new(Accepting { inbound, processor })))
    }
}
