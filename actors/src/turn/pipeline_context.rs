//! Turn step 5 (§5.7): the context manager's budgets, two-tier eviction
//! and subscriptions for one turn. Split from `pipeline.rs` along the step
//! seam; the decisions themselves are in `silas-context`.

use serde_json::json;
use silas_core::model::context::{ContextItemKind, ContextZone};
use silas_core::model::memory::{MemoryType, ReingestionTier};
use silas_llm::structured::Structured;

use super::{Turn, TurnError};
use crate::memory::new_item;

impl Turn<'_> {
    /// Step 5: two-tier eviction (§5.7). Tier 1 always; the scorer only
    /// when usage stays above `scorer_threshold_pct` of the window, with
    /// the aggressive heuristic when it cannot answer. Evicted items and
    /// masked tool results become `episode` memories (taint kept, external
    /// content scrubbed of injection markers).
    pub(super) async fn enforce_budget(&mut self) -> Result<(), TurnError> {
        self.step("enforce_budget");
        // An Arc, not a copy of the context section per turn.
        let config = self.deps.config.clone();
        let cfg = &config.context;
        let turn = self.turn_number;
        self.subscriptions(turn, cfg.max_subscription_tokens);
        let budgets = self.budgets();
        let mut tier1 = self.scope.context.tier1(turn, cfg, &budgets);
        self.audit_subscription_notes(std::mem::take(&mut tier1.notes));
        let mut kept = tier1.masked;
        kept.extend(tier1.evicted);
        if tier1.needs_scorer {
            let evicted = self.tier2(turn, cfg, &budgets).await;
            kept.extend(evicted);
        }
        if !kept.is_empty() || tier1.dropped > 0 {
            self.push(
                "context_evicted",
                json!({"scope_id": self.scope.scope_id, "turn": turn, "kept_as_memory": kept.len(),
                       "dropped_trivial": tier1.dropped, "scorer": tier1.needs_scorer,
                       "usage": self.scope.context.usage(&budgets), "window": budgets.total}),
            );
        }
        for ev in kept {
            let content = if ev.taint == silas_core::model::messages::TaintLevel::External {
                silas_context::scrub::scrub_external(&ev.content)
            } else {
                ev.content
            };
            let m = new_item(
                &format!("evicted-{}", ev.ctx_id),
                &self.scope.scope_id,
                &content,
                MemoryType::Episode,
                ReingestionTier::Active,
                ev.taint,
                "context_eviction",
            );
            self.deps.memory.store_raw(&m)?;
        }
        self.persist_subscriptions()
    }

    /// Context subscriptions (issue #18 item 2): files the owner's message
    /// names in a registered workspace are subscribed (the owner's scope
    /// only), and every active subscription — files, and any scope's
    /// memory queries — is materialised for this turn.
    fn subscriptions(&mut self, turn: u64, max_tokens: u64) {
        let owner = self.scope.scope_id == crate::turn::OWNER_SCOPE;
        // A target is `workspace/path`: a message without a '/' names none,
        // and with nothing subscribed there is nothing to read either.
        let names_file = owner && self.text.contains('/');
        if !names_file && self.scope.context.subscriptions.active().next().is_none() {
            return;
        }
        // Only the owner's files are readable: a customer scope's
        // materialiser knows no workspace.
        let workspaces = if owner {
            crate::workspaces::list(&self.deps.store).unwrap_or_else(|e| {
                tracing::warn!("workspace registry unreadable: {e}");
                Vec::new()
            })
        } else {
            Vec::new()
        };
        let subs = &mut self.scope.context.subscriptions;
        for (sub_type, target) in crate::turn::subscribe::mentioned(&self.text, &workspaces) {
            subs.subscribe(sub_type, &target, turn);
        }
        // The owner naming a target keeps it alive like a reply does.
        subs.note_reply(&self.text, turn);
        let files = crate::turn::subscribe::WorkspaceFiles {
            workspaces,
            memory: self.deps.memory.clone(),
            scope_id: self.scope.scope_id.clone(),
        };
        let notes = self.scope.context.materialize(&files, turn, max_tokens);
        self.audit_subscription_notes(notes);
    }

    /// Keeps the scope's subscriptions in the store when they changed, so
    /// a restart restores them (§5.1.3 step 4). Deferred: durable with the
    /// turn's response commit (a replayed turn writes the same again).
    pub(super) fn persist_subscriptions(&mut self) -> Result<(), TurnError> {
        use silas_core::model::context::ScopeSubscriptions;
        let now = self.scope.context.subscriptions.export();
        let records = self.deps.store.records::<ScopeSubscriptions>();
        let stored = records.get(&self.scope.scope_id)?;
        if stored.as_ref().map(|s| &s.subscriptions) == Some(&now)
            || (stored.is_none() && now.is_empty())
        {
            return Ok(());
        }
        records.put_deferred(&ScopeSubscriptions {
            scope_id: self.scope.scope_id.clone(),
            subscriptions: now,
        })?;
        Ok(())
    }

    fn audit_subscription_notes(
        &mut self,
        notes: Vec<silas_context::subscriptions::SubscriptionNote>,
    ) {
        for note in notes {
            use silas_context::subscriptions::SubscriptionNote as N;
            let (sub_id, what) = match &note {
                N::TooLarge { sub_id, .. } => (sub_id, "too_large"),
                N::Expired { sub_id } => (sub_id, "expired"),
                N::Unreadable { sub_id, .. } => (sub_id, "unreadable"),
            };
            tracing::info!(scope_id = %self.scope.scope_id, ?note, "context subscription");
            self.push(
                "context_subscription",
                json!({"scope_id": self.scope.scope_id, "sub_id": sub_id, "note": what}),
            );
        }
    }

    /// This turn's budgets: the profile's zones of the window the model
    /// can take (its `context_window`, when known), after the system zone
    /// (the longest agent system prompt and the system items).
    pub(super) fn budgets(&self) -> silas_context::Budgets {
        let cfg = &self.deps.config.context;
        let profile = cfg
            .profiles
            .get(self.scope.context.profile())
            .or_else(|| cfg.profiles.get(&cfg.default_profile))
            .cloned()
            .unwrap_or_else(|| {
                silas_core::model::context::ContextProfile::new("fallback", 0.45, 0.20, 0.15)
            });
        let prompt =
            silas_context::CharsPerToken::for_chars(self.deps.agents.system_prompt_chars() as u64);
        silas_context::Budgets::compute(
            cfg,
            &profile,
            self.deps.agents.context_window(),
            prompt + self.scope.context.system_tokens(),
        )
    }

    /// Tier 2: the scorer's eviction groups (2 s, its own breaker, the
    /// §18.5 call limit), else the deterministic aggressive eviction.
    async fn tier2(
        &mut self,
        turn: u64,
        cfg: &silas_core::config::ContextConfig,
        budgets: &silas_context::Budgets,
    ) -> Vec<silas_core::model::context::ContextItem> {
        let allowed = self
            .deps
            .limits
            .llm_call(&self.scope.scope_id, std::time::Instant::now())
            .is_ok();
        let groups = if allowed {
            let blocks = self.scope.context.scorer_blocks(turn);
            let recent: Vec<String> = self
                .scope
                .context
                .items()
                .iter()
                .filter(|i| {
                    i.zone == ContextZone::Chronicle
                        && i.kind == ContextItemKind::Message
                        && i.turn_number + 3 > turn
                })
                .map(silas_context::render::item_block)
                .collect();
            let run = self
                .deps
                .agents
                .score(&self.text, &recent.join("\n"), &blocks, &mut self.used)
                .await;
            match run.outcome {
                Structured::Valid { value, .. } => Some(
                    value
                        .evict_groups
                        .into_iter()
                        .map(|g| g.block_ids)
                        .collect::<Vec<_>>(),
                ),
                Structured::Fallback { .. } => None,
            }
        } else {
            None
        };
        self.push(
            "context_scorer",
            json!({"scope_id": self.scope.scope_id, "turn": turn,
                   "outcome": if groups.is_some() { "groups" } else { "heuristic_fallback" }}),
        );
        match groups {
            Some(g) => self.scope.context.evict_groups(&g, turn, cfg, budgets),
            None => self.scope.context.evict_aggressively(turn, cfg, budgets),
        }
    }
}
