//! The TurnProcessor: one actor per scope, serialising that scope's turns
//! (its mailbox is the per-scope lock of §5.1). It holds no message queue of
//! its own: on every `Wake` it takes the oldest undelivered inbox record of
//! its scope and runs it through the [`pipeline`], so a restarted processor
//! finds exactly the work its predecessor left, in order.
//!
//! Restart policy: transient per scope, supervised by the Stream. On start
//! it [rehydrates](rehydrate) its context (§5.1.3: pinned system zone,
//! chronicle, pinned profile memory, subscriptions, the "session
//! rehydrated" message) and its turn counter from the highest recorded
//! turn number, then wakes itself.
//!
//! Poison messages: every processing attempt is counted durably in the
//! inbox record ([`InboxStore::begin_attempt`](silas_storage::InboxStore))
//! *before* it starts, so an attempt that panics or fails still counts —
//! across processor restarts and daemon restarts alike. A record that has
//! used [`MAX_TURN_ATTEMPTS`] is not processed again but
//! [quarantined](quarantine): it gets the fixed [`QUARANTINE_REPLY`] (audited
//! `turn_quarantined`), is delivered best effort and marked delivered, and
//! the scope moves on. One message that crashes its turn every time thus
//! costs at most `MAX_TURN_ATTEMPTS - 1` processor restarts, below the
//! Stream's restart intensity, instead of a crash loop that stops the
//! daemon. Replays resume from the recorded stage, so nothing the earlier
//! attempts committed (chronicle, plan card, reply) happens twice. A clean
//! stop mid-turn (daemon shutdown) also counts as an attempt.

pub mod approval_flow;
pub mod context;
pub mod customer_update;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod rehydrate;
pub mod skill_context;
pub mod subscribe;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use silas_core::model::JsonObject;
use silas_storage::{InboxRecord, InboxStage, ReplyAck};

use crate::channel::{ChannelError, Outbound};
use crate::turn::pipeline::{ScopeState, TurnDeps};

/// The single scope id of single-user mode.
pub const OWNER_SCOPE: &str = "owner";

/// Processing attempts a message gets (crashed ones included) before it is
/// quarantined instead of processed again. Below the Stream's restart
/// intensity (5 a minute), so one poison message cannot stop the Stream.
pub const MAX_TURN_ATTEMPTS: u32 = 3;

/// The fixed reply to a quarantined message.
pub const QUARANTINE_REPLY: &str = "I couldn't process that message because of an internal error; it was set aside and nothing was done.";

/// Messages of a TurnProcessor.
#[derive(Debug)]
pub enum TurnMsg {
    /// Process the oldest pending message of the scope, if any.
    Wake,
    /// Take what the owner forgot out of the live context.
    ForgetHistory(crate::forget::HistoryFilter),
}

/// Sent back to the Stream after every finished turn.
pub type TurnDone = Box<dyn Fn(String, String) + Send + Sync>;

pub struct TurnArgs {
    pub scope_id: String,
    pub deps: Arc<TurnDeps>,
    /// Called with `(scope_id, inbox_id)` after a turn is delivered.
    pub on_done: Arc<TurnDone>,
    /// Shared by every processor of the Stream: closed at shutdown.
    pub starts: Arc<TurnStarts>,
}

/// Whether turns may start, and how many are running (§18.2). At shutdown
/// the Stream closes it: turns already running finish within the grace,
/// and queued ones of a conversation that outlives its connection (the
/// owner's, a Telegram chat's) do not start — they stay in the inbox,
/// unattempted, and are taken at the next start. Starting them would spend
/// a model call on a turn the grace may cut off and the restart then pays
/// again. A web visitor's conversation ends with its connection (its reply
/// is sent once, never kept: nobody can come back for it after a restart),
/// so its queued turns still start while its socket is open.
#[derive(Debug, Default)]
pub struct TurnStarts {
    closed: std::sync::atomic::AtomicBool,
    running: std::sync::atomic::AtomicU32,
}

/// One running turn; dropping it (done, failed or panicked) ends it.
pub struct RunningTurn(Arc<TurnStarts>);

impl Drop for RunningTurn {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

impl TurnStarts {
    /// A turn starting, unless closed. Counted before the check, and
    /// `close` sets the flag before reading the count (both sequentially
    /// consistent): either the turn sees the close, or the drain sees it
    /// running — never neither.
    /// `can_wait`: the conversation outlives its connection, so a queued
    /// turn of it can wait for the next start.
    pub fn start(self: &Arc<Self>, can_wait: bool) -> Option<RunningTurn> {
        self.running.fetch_add(1, SeqCst);
        let turn = RunningTurn(self.clone());
        (!can_wait || !self.closed.load(SeqCst)).then_some(turn)
    }

    /// No turn starts from now on.
    pub fn close(&self) {
        self.closed.store(true, SeqCst);
    }

    /// Turns running now.
    pub fn running(&self) -> u32 {
        self.running.load(SeqCst)
    }
}

pub struct TurnState {
    deps: Arc<TurnDeps>,
    scope: ScopeState,
    on_done: Arc<TurnDone>,
    starts: Arc<TurnStarts>,
    /// The rehydration notice not yet shown (once per rehydration, before
    /// this processor's first reply).
    notice: Option<&'static str>,
}

pub struct TurnProcessor;

impl Actor for TurnProcessor {
    type Msg = TurnMsg;
    type State = TurnState;
    type Arguments = TurnArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TurnMsg>,
        args: TurnArgs,
    ) -> Result<TurnState, ActorProcessingErr> {
        let (scope, restored) = rehydrate::rehydrate(&args.deps, &args.scope_id)?;
        myself.send_message(TurnMsg::Wake)?;
        Ok(TurnState {
            deps: args.deps,
            scope,
            on_done: args.on_done,
            starts: args.starts,
            // Only the owner hears about restarts: a chatbot customer
            // returning after an idle release would otherwise be told of a
            // "restart" that is the daemon's business, not theirs.
            notice: restored.notice().filter(|_| args.scope_id == OWNER_SCOPE),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TurnMsg>,
        msg: TurnMsg,
        state: &mut TurnState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TurnMsg::ForgetHistory(filter) => {
                let gone = state
                    .scope
                    .context
                    .remove_where(|item| filter.matches(&item.content));
                tracing::debug!(scope_id = %state.scope.scope_id, gone, "forgotten context items");
            }
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
                let reply = reply_probe(&record);
                let ends_with_connection =
                    state.deps.sink.reply_ack(&reply) == ReplyAck::ClientOnce;
                // Shutting down: left in the inbox for the next start,
                // unless nobody could be answered then.
                let Some(_running) = state.starts.start(!ends_with_connection) else {
                    return Ok(());
                };
                let inbox_id = record.inbox_id.clone();
                if let Some(text) = state.notice.take() {
                    show_notice(&state.deps, &state.scope.scope_id, text).await;
                }
                if record.attempts >= MAX_TURN_ATTEMPTS {
                    quarantine(&state.deps, &mut state.scope, record).await?;
                } else if ends_with_connection
                    && record.stage < InboxStage::Responded
                    && !state.deps.sink.reaches(&reply)
                {
                    abandon(&state.deps, record).await?;
                } else {
                    // Counted before it starts: a crash still counts.
                    let record = state
                        .deps
                        .store
                        .inbox()
                        .begin_attempt_async(&inbox_id)
                        .await?;
                    // A failure here fails the actor: the Stream restarts it
                    // and the record is replayed from its recorded stage.
                    pipeline::process(&state.deps, &mut state.scope, record).await?;
                }
                (state.on_done)(state.scope.scope_id.clone(), inbox_id);
                if pending.next().is_some() {
                    myself.send_message(TurnMsg::Wake)?;
                }
            }
        }
        Ok(())
    }
}

/// The reply `record`'s turn would send (empty), for asking the channel
/// how it would deliver it.
fn reply_probe(record: &InboxRecord) -> Outbound {
    Outbound::Reply {
        scope_id: record.message.scope_id.clone(),
        connection_id: record.message.connection_id.clone(),
        reply_to: record.inbox_id.clone(),
        text: String::new(),
    }
}

/// A web visitor's message whose visitor has left (its conversation ended
/// with its connection, and a restart never brings that back): closed
/// without a turn — no model call, nothing filed for review from a
/// conversation nobody is in — and audited `turn_abandoned` (ids only).
async fn abandon(deps: &TurnDeps, record: InboxRecord) -> Result<(), ActorProcessingErr> {
    tracing::info!(
        scope_id = %record.message.scope_id,
        inbox_id = %record.inbox_id,
        "a visitor's message is not answered: the visitor has left"
    );
    let event = (
        "turn_abandoned".to_string(),
        obj(
            json!({"scope_id": record.message.scope_id, "inbox_id": record.inbox_id,
                   "reason": "visitor_gone"}),
        ),
    );
    deps.store
        .inbox()
        .record_outcome_async(
            &record.inbox_id,
            silas_storage::TurnOutcome {
                reply: String::new(),
                audit: vec![event],
                delivered: Some(ReplyAck::ClientOnce),
                ..Default::default()
            },
        )
        .await?;
    Ok(())
}

/// Shows the rehydration notice on the scope's channel. Best effort: the
/// rehydration is audited already, and nobody connected (a replay at
/// start-up) is not a failure — the notice is not queued for later.
async fn show_notice(deps: &TurnDeps, scope_id: &str, text: &str) {
    let out = Outbound::OwnerNotice {
        scope_id: scope_id.to_string(),
        text: text.to_string(),
    };
    match deps.sink.send(out).await {
        Ok(()) => {}
        Err(e) => tracing::info!(scope_id, "rehydration notice not shown: {e}"),
    }
}

fn obj(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// Sets aside a record that used its [`MAX_TURN_ATTEMPTS`] without running
/// any pipeline step: records [`QUARANTINE_REPLY`] with a `turn_quarantined`
/// audit event (ids and count only, never the text) unless a reply is
/// already committed (then that reply is kept and redelivered, and the
/// event is audited on its own), delivers the reply best effort — a send
/// that fails or panics is contained, the reply stays durable in the
/// record — and marks the record delivered. Idempotent: a crash in here is
/// resumed by the next attempt from the recorded stage.
pub async fn quarantine(
    deps: &TurnDeps,
    scope: &mut ScopeState,
    record: InboxRecord,
) -> Result<(), ActorProcessingErr> {
    let inbox = deps.store.inbox();
    let inbox_id = record.inbox_id.clone();
    tracing::warn!(
        scope_id = %scope.scope_id,
        inbox_id,
        attempts = record.attempts,
        stage = ?record.stage,
        "quarantining a message whose turn failed on every attempt"
    );
    let event = || {
        (
            "turn_quarantined".to_string(),
            obj(json!({"scope_id": scope.scope_id, "inbox_id": inbox_id,
                       "attempts": record.attempts, "stage": record.stage})),
        )
    };
    let record = if record.stage < InboxStage::Responded {
        inbox
            .record_outcome_async(
                &inbox_id,
                silas_storage::TurnOutcome {
                    reply: QUARANTINE_REPLY.to_string(),
                    audit: vec![event()],
                    ..Default::default()
                },
            )
            .await?
    } else {
        if record.reply.as_deref() != Some(QUARANTINE_REPLY) {
            deps.store.audit().log_batch(vec![event()])?;
        }
        record
    };
    if let Some(turn) = record.turn_number {
        scope.turn_number = scope.turn_number.max(turn + 1);
    }
    if record.stage < InboxStage::Delivered {
        let out = Outbound::Reply {
            scope_id: scope.scope_id.clone(),
            connection_id: record.message.connection_id.clone(),
            reply_to: inbox_id.clone(),
            text: record
                .reply
                .clone()
                .unwrap_or_else(|| QUARANTINE_REPLY.to_string()),
        };
        let sink = deps.sink.clone();
        // As at step 13: a reply the client acknowledges is kept before it
        // goes out, so its ack always finds it.
        let ack = sink.reply_ack(&out);
        if ack == ReplyAck::Client {
            inbox.mark_delivered(&inbox_id, ack)?;
        }
        // Own task: a sink that panics on this message cannot fail the
        // processor again.
        match tokio::spawn(async move { sink.send(out).await }).await {
            Ok(Ok(())) => {}
            Ok(Err(ChannelError::Disconnected(why))) => {
                tracing::info!(scope_id = %scope.scope_id, "quarantine notice not delivered: {why}");
                deps.store.audit().log(
                    "delivery_no_connection",
                    obj(json!({"scope_id": scope.scope_id, "inbox_id": inbox_id,
                               "kind": "reply"})),
                )?;
            }
            Ok(Err(e)) => {
                tracing::warn!(scope_id = %scope.scope_id, inbox_id, "quarantine notice not delivered: {e}");
            }
            Err(e) => {
                tracing::warn!(scope_id = %scope.scope_id, inbox_id, "quarantine notice delivery panicked: {e}");
            }
        }
        if ack != ReplyAck::Client {
            inbox.mark_delivered(&inbox_id, ack)?;
        }
    }
    Ok(())
}
