//! The TurnProcessor: one actor per scope, serialising that scope's turns
//! (its mailbox is the per-scope lock of §5.1). It holds no message queue of
//! its own: on every `Wake` it takes the oldest undelivered inbox record of
//! its scope and runs it through the [`pipeline`], so a restarted processor
//! finds exactly the work its predecessor left, in order.
//!
//! Restart policy: transient per scope, supervised by the Stream. On start
//! it rebuilds its context from the chronicle (§5.1.3 step 2, most recent
//! `rehydration.max_chronicle_entries`) and its turn counter from the
//! highest recorded turn number, then wakes itself.

pub mod approval_flow;
pub mod context;
pub mod pipeline;
pub mod plan;

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use silas_gates::AccessController;

use crate::turn::context::ScopeContext;
use crate::turn::pipeline::{ScopeState, TurnDeps};

/// The single scope id of single-user mode.
pub const OWNER_SCOPE: &str = "owner";

/// Messages of a TurnProcessor.
#[derive(Debug)]
pub enum TurnMsg {
    /// Process the oldest pending message of the scope, if any.
    Wake,
}

/// Sent back to the Stream after every finished turn.
pub type TurnDone = Box<dyn Fn(String, String) + Send + Sync>;

pub struct TurnArgs {
    pub scope_id: String,
    pub deps: Arc<TurnDeps>,
    /// Called with `(scope_id, inbox_id)` after a turn is delivered.
    pub on_done: Arc<TurnDone>,
}

pub struct TurnState {
    deps: Arc<TurnDeps>,
    scope: ScopeState,
    on_done: Arc<TurnDone>,
}

pub struct TurnProcessor;

/// Rebuilds a scope's state from redb (§5.1.3).
pub fn rehydrate(deps: &TurnDeps, scope_id: &str) -> Result<ScopeState, ActorProcessingErr> {
    let cfg = &deps.config;
    let limit = cfg.rehydration.max_chronicle_entries as usize;
    let recent = deps.store.chronicle().get_recent(scope_id, limit)?;
    let budget = cfg
        .context
        .total_tokens
        .saturating_sub(cfg.context.system_max);
    let mut context = ScopeContext::new(scope_id, &cfg.context.default_profile, budget);
    let mut next_turn = 0;
    for item in recent {
        next_turn = next_turn.max(item.turn_number + 1);
        context.add(item);
    }
    let is_owner = scope_id == OWNER_SCOPE;
    let levels = Default::default();
    let dir = cfg
        .sandbox
        .customer_context_dir
        .clone()
        .unwrap_or_else(|| cfg.data_dir.join("customer_context"));
    Ok(ScopeState {
        scope_id: scope_id.to_string(),
        turn_number: next_turn,
        context,
        access: AccessController::new(scope_id, is_owner, levels, dir),
    })
}

impl Actor for TurnProcessor {
    type Msg = TurnMsg;
    type State = TurnState;
    type Arguments = TurnArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TurnMsg>,
        args: TurnArgs,
    ) -> Result<TurnState, ActorProcessingErr> {
        let scope = rehydrate(&args.deps, &args.scope_id)?;
        myself.send_message(TurnMsg::Wake)?;
        Ok(TurnState {
            deps: args.deps,
            scope,
            on_done: args.on_done,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TurnMsg>,
        msg: TurnMsg,
        state: &mut TurnState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TurnMsg::Wake => {
                let pending = state
                    .deps
                    .store
                    .inbox()
                    .pending_for_scope(&state.scope.scope_id)?;
                let mut pending = pending.into_iter();
                let Some(record) = pending.next() else {
                    return Ok(());
                };
                let inbox_id = record.inbox_id.clone();
                // A failure here fails the actor: the Stream restarts it and
                // the record is replayed from its recorded stage.
                pipeline::process(&state.deps, &mut state.scope, record).await?;
                (state.on_done)(state.scope.scope_id.clone(), inbox_id);
                if pending.next().is_some() {
                    myself.send_message(TurnMsg::Wake)?;
                }
            }
        }
        Ok(())
    }
}
