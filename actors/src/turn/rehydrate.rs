//! Rehydration (§5.1.3): a scope's TurnProcessor starting — after a daemon
//! restart, an idle release (`scope_release.rs`) or a processor restart —
//! rebuilds the scope's context from redb, in the spec's order:
//!
//! 1. the **system zone**, pinned: the scope's configuration item (the
//!    constitution and tool list are in every agent's system prompt, which
//!    the budgets count as system tokens, so they are not repeated here);
//! 2. the **chronicle**: the most recent `rehydration.max_chronicle_entries`;
//! 3. the **profile memory**: the scope's `profile` memories, pinned in the
//!    memory zone so no eviction drops them — the scope's own only (the
//!    memory store has no cross-scope read);
//! 4. the **subscriptions** persisted for the scope (materialised at the
//!    next render, their TTL counting from now);
//! 5. the system message [`REHYDRATED_NOTICE`], when there was a session to
//!    restore (a scope with no chronicle is new, not rehydrated). It is
//!    audited `session_rehydrated` (counts only) here and shown once to
//!    whoever is on the scope's channel before the first reply of this
//!    processor ([`Rehydrated::notice`]).

use ractor::ActorProcessingErr;
use serde_json::json;
use silas_core::model::context::{ContextItemKind, ContextZone, ScopeSubscriptions};
use silas_gates::AccessController;

use super::context::{item, new_context};
use super::pipeline::{ScopeState, TurnDeps};
use super::{OWNER_SCOPE, obj};

/// §5.1.3 step 5's system message, also the notice the scope's user sees.
pub const REHYDRATED_NOTICE: &str = "[SYSTEM] Session rehydrated after restart.";

/// At most this many profile memories are pinned (newest first): pinned
/// items are never evicted, so their number is bounded here.
pub const MAX_PINNED_PROFILE: usize = 8;

/// The system zone's configuration item.
pub const SYSTEM_CONFIG_ID: &str = "sys:config";
/// The rehydration system message's item.
pub const SYSTEM_REHYDRATED_ID: &str = "sys:rehydrated";

/// What a rehydration restored (audited; counts, never content).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rehydrated {
    pub chronicle: usize,
    pub profile: usize,
    pub subscriptions: usize,
}

impl Rehydrated {
    /// The notice for the scope's channel, when a session was restored.
    pub fn notice(&self) -> Option<&'static str> {
        (self.chronicle > 0).then_some(REHYDRATED_NOTICE)
    }
}

/// The scope's configuration, as its pinned system item says it.
fn config_line(scope_id: &str, profile: &str) -> String {
    let who = if scope_id == OWNER_SCOPE {
        "the owner's own scope"
    } else {
        "a customer scope: the owner is not the one writing"
    };
    format!("Scope {scope_id} ({who}); context profile {profile}.")
}

/// Rebuilds a scope's state from redb (§5.1.3, order in the module docs).
pub fn rehydrate(
    deps: &TurnDeps,
    scope_id: &str,
) -> Result<(ScopeState, Rehydrated), ActorProcessingErr> {
    let cfg = &deps.config;
    let mut context = new_context(scope_id, &cfg.context.default_profile);
    let mut done = Rehydrated::default();
    // 1. The system zone first.
    context.add(item(
        SYSTEM_CONFIG_ID.into(),
        ContextZone::System,
        ContextItemKind::System,
        config_line(scope_id, &cfg.context.default_profile),
        0,
        "system:config",
        silas_core::model::messages::TaintLevel::Owner,
        true,
    ));
    // 2. The chronicle.
    let limit = cfg.rehydration.max_chronicle_entries as usize;
    let recent = deps.store.chronicle().get_recent(scope_id, limit)?;
    done.chronicle = recent.len();
    let mut next_turn = 0;
    for entry in recent {
        next_turn = next_turn.max(entry.turn_number + 1);
        context.add(entry);
    }
    // 3. The profile memory, pinned. The store answers for this scope only.
    for m in deps.memory.profile(scope_id, MAX_PINNED_PROFILE)? {
        let mut it = item(
            format!("mem:{}", m.memory_id),
            ContextZone::Memory,
            ContextItemKind::Memory,
            m.content,
            next_turn,
            "memory:profile",
            m.taint,
            true,
        );
        it.created_at = m.created_at;
        context.add(it);
        done.profile += 1;
    }
    // 4. Subscriptions (materialised at the next render).
    if let Some(saved) = deps.store.records::<ScopeSubscriptions>().get(scope_id)? {
        done.subscriptions = saved.subscriptions.len();
        context
            .subscriptions
            .restore(saved.subscriptions, next_turn);
    }
    // 5. The system message, when a session was restored.
    if let Some(notice) = done.notice() {
        context.add(item(
            SYSTEM_REHYDRATED_ID.into(),
            ContextZone::System,
            ContextItemKind::System,
            notice.to_owned(),
            next_turn,
            "system:rehydration",
            silas_core::model::messages::TaintLevel::Owner,
            true,
        ));
        deps.store.audit().log(
            "session_rehydrated",
            obj(
                json!({"scope_id": scope_id, "chronicle_entries": done.chronicle,
                       "profile_memories": done.profile,
                       "subscriptions": done.subscriptions}),
            ),
        )?;
    }
    let is_owner = scope_id == OWNER_SCOPE;
    let dir = cfg
        .sandbox
        .customer_context_dir
        .clone()
        .unwrap_or_else(|| cfg.data_dir.join("customer_context"));
    let scope = ScopeState {
        scope_id: scope_id.to_string(),
        turn_number: next_turn,
        context,
        access: AccessController::new(scope_id, is_owner, Default::default(), dir),
        memories_checked: None,
    };
    Ok((scope, done))
}
