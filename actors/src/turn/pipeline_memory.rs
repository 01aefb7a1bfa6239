//! Turn steps 3.5, 4, 11 and 11.5 (§5.1, §4.3): raw capture, auto-retrieve
//! and the agent's memory queries and operations. Split from `pipeline.rs`
//! along the step seam.

use super::*;

/// The longest memory the model may store or write: ample for a fact, a
/// preference or a summary; a longer one is refused (audited
/// `memory_op_refused`, reason `too_long`), since every memory may be
/// rendered into every later prompt of the scope.
pub const MAX_MEMORY_CONTENT_CHARS: usize = 2_000;

impl Turn<'_> {
    /// Step 3.5: raw capture in the low-reingestion lane (idempotent id).
    pub(super) fn raw_memory_ingest(&mut self) -> Result<(), TurnError> {
        self.step("raw_memory_ingest");
        let m = new_item(
            &format!("raw-{}", self.record.inbox_id),
            &self.scope.scope_id,
            &self.text,
            MemoryType::Episode,
            ReingestionTier::LowReingestion,
            self.taint,
            "conversation_raw",
        );
        self.deps.memory.store_raw(&m)?;
        Ok(())
    }

    pub(super) fn inject_memories(&mut self, found: Vec<silas_core::model::memory::MemoryItem>) {
        // Every memory retrieval returns counts (§3.8 `access_count`): the
        // consolidator's promotion proposals read it. Advisory, so a
        // failure to count does not fail the turn.
        let ids: Vec<String> = found.iter().map(|m| m.memory_id.clone()).collect();
        if !ids.is_empty()
            && let Err(e) = self.deps.memory.record_access(&ids)
        {
            tracing::warn!(scope_id = %self.scope.scope_id, "memory access not counted: {e}");
        }
        for m in found {
            let id = format!("mem:{}", m.memory_id);
            if self.scope.context.contains(&id) {
                continue;
            }
            let mut it = item(
                id,
                ContextZone::Memory,
                ContextItemKind::Memory,
                m.content.clone(),
                self.turn_number,
                "memory",
                m.taint,
                false,
            );
            it.relevance = 0.5;
            self.scope.context.add(it);
        }
    }

    /// Step 4: keyword retrieval into the memory zone — after dropping
    /// memories forgotten since they were injected (`silas memory forget`
    /// erases them from the prompt too, not only from the store).
    pub(super) fn auto_retrieve(&mut self) -> Result<(), TurnError> {
        self.step("auto_retrieve");
        // Read before the check: a removal racing it moves the count again
        // and the next turn looks once more.
        let removals = self.deps.memory.removals();
        if removals.is_none() || removals != self.scope.memories_checked {
            self.drop_forgotten()?;
        }
        self.scope.memories_checked = removals;
        let found =
            self.deps
                .memory
                .search(&self.scope.scope_id, &self.text, AUTO_RETRIEVE_LIMIT)?;
        self.inject_memories(found);
        Ok(())
    }

    /// Drops memory-zone items whose memory is no longer stored (one read
    /// for all of them).
    fn drop_forgotten(&mut self) -> Result<(), TurnError> {
        let recalled: Vec<&str> = self
            .scope
            .context
            .items()
            .iter()
            .filter_map(|i| i.ctx_id.strip_prefix("mem:"))
            .collect();
        if recalled.is_empty() {
            return Ok(());
        }
        let exist = self.deps.memory.exist_each(&recalled)?;
        let gone: std::collections::HashSet<String> = recalled
            .iter()
            .zip(exist)
            .filter(|(_, exists)| !exists)
            .map(|(id, _)| format!("mem:{id}"))
            .collect();
        if !gone.is_empty() {
            self.scope
                .context
                .remove_where(|i| gone.contains(&i.ctx_id));
        }
        Ok(())
    }

    /// Step 9: the agent's memory queries (max 3 by the model's validator).
    /// Each also becomes a `memory_query` subscription (the harness keeps
    /// what the agent asked for live: re-run at every render, deduped
    /// against the memory zone, within `max_subscription_tokens`, until
    /// neither a reply nor a new query names it for
    /// `subscription_ttl_turns`), kept across restarts.
    pub(super) fn memory_queries(&mut self) -> Result<(), TurnError> {
        self.step("memory_queries");
        let queries = self
            .response
            .as_ref()
            .map(|r| r.memory_queries.clone())
            .unwrap_or_default();
        for q in queries {
            let limit = usize::try_from(q.max_results).unwrap_or(usize::MAX).min(20);
            let found = self
                .deps
                .memory
                .search(&self.scope.scope_id, &q.query, limit)?;
            self.inject_memories(found);
            let query = q.query.trim();
            if !query.is_empty() {
                self.scope.context.subscriptions.subscribe(
                    silas_core::model::context::SubscriptionType::MemoryQuery,
                    query,
                    self.turn_number,
                );
            }
        }
        self.persist_subscriptions()
    }

    /// Step 10: memory ops, each gated `on_tool_call`, capped per turn and
    /// in size ([`MAX_MEMORY_CONTENT_CHARS`]).
    pub(super) async fn memory_ops(&mut self) -> Result<(), TurnError> {
        self.step("memory_ops");
        let mut ops = self
            .response
            .as_ref()
            .map(|r| r.memory_ops.clone())
            .unwrap_or_default();
        let max = self.deps.config.limits.max_memory_ops_per_turn as usize;
        if ops.len() > max {
            self.push(
                "memory_ops_truncated",
                json!({"requested": ops.len(), "max": max, "scope_id": self.scope.scope_id}),
            );
            ops.truncate(max);
        }
        // §18.5 per-minute limit (per scope): the first ops within the
        // scope's allowance run, the rest are dropped and audited.
        let asked = u32::try_from(ops.len()).unwrap_or(u32::MAX);
        let granted =
            self.deps
                .limits
                .memory_ops(&self.scope.scope_id, asked, std::time::Instant::now());
        if granted < asked {
            self.push(
                "security_rate_limited",
                json!({"scope_id": self.scope.scope_id,
                       "limit": crate::limits::LimitKind::MemoryOps.as_str(),
                       "requested": asked, "allowed": granted,
                       "inbox_id": self.record.inbox_id}),
            );
            ops.truncate(granted as usize);
        }
        for (i, op) in ops.iter().enumerate() {
            let chars = op.content.as_deref().map_or(0, |c| c.chars().count());
            if chars > MAX_MEMORY_CONTENT_CHARS {
                // A memory is a fact or a preference; one the size of a
                // page is a payload, re-sent in every later prompt.
                self.push(
                    "memory_op_refused",
                    json!({"op": op.op.as_str(), "index": i, "reason": "too_long",
                           "chars": chars, "max": MAX_MEMORY_CONTENT_CHARS,
                           "scope_id": self.scope.scope_id}),
                );
                continue;
            }
            if let Some(target) = self.constitutional_target(op)? {
                // §3.8: constitutional memories cannot be modified at runtime.
                self.push(
                    "memory_op_refused",
                    json!({"op": op.op.as_str(), "index": i, "memory_id": target,
                           "reason": "constitutional", "scope_id": self.scope.scope_id}),
                );
                continue;
            }
            let args = serde_json::to_value(op).unwrap_or(Value::Null);
            let ctx = obj(json!({"tool_name": "memory_op", "tool_args": args.clone(),
                                 "sender_id": self.record.message.sender_id}));
            let outcome = self.run_gates(GateTrigger::OnToolCall, ctx).await;
            let blocked = outcome
                .policy_results
                .iter()
                .any(|r| matches!(r.action, GateAction::Block | GateAction::RequireApproval));
            self.push_events(outcome.audit);
            // A policy gate may have rewritten the op (a secrets or PII guard
            // redacting `content`): what is kept is the gated op, never the
            // model's original beside a "redacted" audit entry.
            let gated = gated_memory_op(op, &args, outcome.merged_context.get("tool_args"));
            let Some(op) = gated.filter(|_| !blocked) else {
                self.push(
                    "memory_op_blocked",
                    json!({"op": op.op.as_str(), "index": i}),
                );
                continue;
            };
            let op = &op;
            let id = format!("mem-{}-{i}", self.record.inbox_id);
            let changed = self
                .deps
                .memory
                .apply(&self.scope.scope_id, op, self.taint, &id)?;
            if !changed {
                // An id that is not this conversation's memory (unknown and
                // another's read the same), or a link: nothing changed, and
                // the audit must not say it did.
                let reason = if op.op == MemoryOpType::Link {
                    "not_supported"
                } else {
                    "not_found"
                };
                self.push(
                    "memory_op_refused",
                    json!({"op": op.op.as_str(), "index": i, "memory_id": op.memory_id,
                           "reason": reason, "scope_id": self.scope.scope_id}),
                );
                continue;
            }
            // What the model made the memory keep is shown to the owner
            // (never its content): a memory comes back in later prompts
            // labelled with the turn's taint, and was a channel nobody saw.
            self.push(
                "memory_op_applied",
                json!({"op": op.op.as_str(),
                       "memory_id": op.memory_id.clone().unwrap_or_else(|| id.clone()),
                       "memory_type": op.memory_type.as_str(), "taint": self.taint.as_str(),
                       "scope_id": self.scope.scope_id, "inbox_id": self.record.inbox_id}),
            );
        }
        Ok(())
    }

    /// The constitutional memory an update/delete/link op touches, if any
    /// (memory records live in the store's `memory` table).
    pub(super) fn constitutional_target(&self, op: &MemoryOp) -> Result<Option<String>, TurnError> {
        if op.op == MemoryOpType::Store {
            return Ok(None);
        }
        let records = self.deps.store.records::<MemoryItem>();
        for id in [op.memory_id.as_deref(), op.link_to.as_deref()]
            .into_iter()
            .flatten()
        {
            if records
                .get(id)?
                .is_some_and(|m| m.trust_level == TrustLevel::Constitutional)
            {
                return Ok(Some(id.to_string()));
            }
        }
        Ok(None)
    }
}

/// The op the gates let through: the original when they left its arguments
/// alone, else the rewritten one — if it still parses and still does the same
/// thing to the same memory (a gate may redact what is kept, not retarget
/// it). `None` blocks the op.
fn gated_memory_op(op: &MemoryOp, original: &Value, gated: Option<&Value>) -> Option<MemoryOp> {
    match gated {
        None => Some(op.clone()),
        Some(g) if g == original => Some(op.clone()),
        Some(g) => serde_json::from_value::<MemoryOp>(g.clone())
            .ok()
            .filter(|new| {
                new.op == op.op && new.memory_id == op.memory_id && new.link_to == op.link_to
            }),
    }
}
