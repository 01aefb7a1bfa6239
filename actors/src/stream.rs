//! The Stream (§5.1): Silas's permanent session. It admits inbound messages
//! (rate limits §18.5, bounded queues §18.6), records each one durably in
//! the inbox *before* acknowledging it, wakes the scope's
//! [`TurnProcessor`](crate::turn::TurnProcessor) (one per `scope_id`,
//! spawned linked on first use or at startup for scopes with pending
//! work), answers plan cards (`decide_card`), forwards background work
//! status events to the channel, and drains on shutdown (§18.2).
//!
//! Cards (§8.1): the Stream owns every card's lifecycle, with the pure
//! policy of [`crate::cards`]. A card is answered once, from its own scope,
//! before its deadline; a sweep resolves cards past their deadline to the
//! safe default (declined / block) and audits it without waiting for anyone;
//! the scope's last connection closing does the same. Cards opened through
//! [`StreamHandle::ask`] have an in-memory waiter that receives the
//! [`CardAnswer`]. Plan cards go through `approval_flow::decide_card` (with
//! a declined decision for every safe default), so the flow that mints
//! tokens is the only one that touches work items. On shutdown, waiters get
//! the safe default; plan cards stay stored (their work item is pending and
//! unapproved, nothing runs without a fresh signed approval) and are served
//! again — or swept — after the restart.
//!
//! Restart policy: the Stream is a permanent child of the root supervisor;
//! it supervises its TurnProcessors itself — a failed processor is
//! restarted (with backoff) and replays its scope's pending inbox records;
//! more than `restart_policy.max_restarts` processor failures within the
//! window stop the Stream with a reason, which the root counts against its
//! own intensity (and, past that, exits the daemon cleanly).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::{Deserialize, Serialize};
use serde_json::json;
use silas_core::Timestamp;
use silas_core::cards::CardPayload;
use silas_core::model::approval::ApprovalDecision;
use silas_core::model::messages::SignedMessage;
use silas_storage::{CardAudience, NewInbound, PendingCard};

use crate::approval::AnswerOrigin;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::cards::{
    self, CardAnswer, CardKind, CardRejection, CardResponse, CardTimeouts, RecentlyResolved,
    Resolution,
};
use crate::channel::{Outbound, undelivered};
use crate::limits::{Admission, CardLimits, LimitKind, OpenLimit, RateLimiter, TurnQueues};
use crate::refusal_audit::RefusalAudit;
use crate::restart::{RestartDecision, RestartPolicy, RestartTracker};
use crate::scope_release::IdleScopes;
use crate::stream_accept::{Accepting, Admit};
use crate::turn::approval_flow::{self, DecideOutcome};
use crate::turn::pipeline::{TurnDeps, TurnError};
use crate::turn::{OWNER_SCOPE, TurnArgs, TurnDone, TurnMsg, TurnProcessor, TurnStarts};
use crate::work::{DispatchRequest, WorkStatusEvent};

/// Timeout of every RPC to the Stream.
pub const STREAM_RPC_TIMEOUT_MS: u64 = 5_000;
/// Suggested client back-off on `busy_retry`.
pub const BUSY_RETRY_AFTER_MS: u64 = 1_000;
/// The deterministic safe response to a rate-limited message (§18.5).
pub const RATE_LIMITED_MESSAGE: &str =
    "You are sending messages faster than I can take them. Please wait a minute and try again.";

/// Told to the sender when a credential was removed from their message.
pub const SECRET_REDACTED_NOTICE: &str = "Your message contained what looks like a password or key. I removed it before storing or reading the message. To give me a credential, type /secret followed by a name, and use the secure form.";

/// A message from any channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    pub scope_id: String,
    pub channel: String,
    pub sender_id: String,
    pub text: String,
    pub signed: Option<SignedMessage>,
    pub connection_id: String,
    pub ip: Option<String>,
    /// The channel's idempotency key: the same key is accepted once, even
    /// across restarts (a Telegram update redelivered after a crash).
    pub dedup_key: Option<String>,
}

/// The scope of a connection: `owner` in single-user mode (and for the
/// owner's own connections), else the connection id (§5.1 isolation model).
pub fn scope_for(connection_id: &str, is_owner: bool) -> String {
    if is_owner {
        OWNER_SCOPE.to_string()
    } else {
        connection_id.to_string()
    }
}

/// What the channel tells the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SubmitOutcome {
    /// Durably recorded; the reply will carry `reply_to = inbox_id`.
    Accepted { inbox_id: String },
    /// The scope's (or the global) queue is full.
    BusyRetry { retry_after_ms: u64 },
    /// Over a rate limit; `message` is the safe response to show.
    RateLimited { message: String },
    /// Shutting down: intake is closed.
    ShuttingDown,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStatus {
    pub accepting: bool,
    pub pending_total: u32,
    pub active_scopes: usize,
    pub processor_restarts: u32,
    /// `backpressure.max_pending_turns_total`.
    pub capacity_total: u32,
    /// `backpressure.max_pending_turns_per_scope`.
    pub capacity_per_scope: u32,
    /// Scopes with pending turns, deepest first (at most 20).
    pub scope_depths: Vec<(String, u32)>,
    /// Cards waiting for an answer.
    pub pending_cards: usize,
    /// Turns running now (a queued turn is not running).
    pub running_turns: u32,
}

/// How often the card sweep looks for cards past their deadline.
pub const CARD_SWEEP_EVERY: Duration = Duration::from_millis(500);

// ractor boxes each message into the mailbox, so variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum StreamMsg {
    /// `Err` when the store could not record the message (nothing was
    /// accepted; the sender is told why, and the Stream restarts).
    Submit(
        InboundMessage,
        RpcReplyPort<Result<SubmitOutcome, TurnError>>,
    ),
    DecideCard {
        request_id: String,
        decision: ApprovalDecision,
        origin: AnswerOrigin,
        reply: RpcReplyPort<Result<DecideOutcome, TurnError>>,
    },
    /// A plan decision from a channel connection: checked against the
    /// card's scope, deadline and answered state first.
    DecideCardFor {
        scope_id: String,
        request_id: String,
        decision: ApprovalDecision,
        origin: AnswerOrigin,
        reply: RpcReplyPort<Result<DecideOutcome, CardRejection>>,
    },
    /// Persist and send a card; `answer` receives its resolution.
    OpenCard {
        card: PendingCard,
        answer: oneshot::Sender<CardAnswer>,
        reply: RpcReplyPort<Result<(), TurnError>>,
    },
    /// The owner's answer to a non-plan card.
    AnswerCard {
        scope_id: String,
        request_id: String,
        kind: CardKind,
        response: CardResponse,
        origin: AnswerOrigin,
        reply: RpcReplyPort<Result<CardAnswer, CardRejection>>,
    },
    /// The scope's last connection closed: its cards resolve to the safe
    /// default. Replies with how many were resolved.
    ScopeDisconnected {
        scope_id: String,
        reply: RpcReplyPort<usize>,
    },
    /// Periodic: resolve cards past their deadline.
    SweepCards,
    /// From a TurnProcessor: a turn was delivered.
    TurnDone {
        scope_id: String,
        inbox_id: String,
    },
    /// From an admission's task: the message had been handed over before
    /// (its queue slot is given back).
    AdmissionReleased {
        scope_id: String,
    },
    /// From an admission's task: the inbox record could not be stored.
    AdmissionFailed {
        scope_id: String,
        error: String,
    },
    /// From the WorkExecutor's status channel.
    WorkStatus(WorkStatusEvent),
    /// The owner forgot memories of a scope: what of its conversation
    /// went with them leaves the running TurnProcessor's context too.
    ForgetHistory {
        scope_id: String,
        filter: crate::forget::HistoryFilter,
    },
    /// Cards whose asker no longer needs an answer: resolved to their safe
    /// default (`Resolution::Withdrawn`), so no reconnect shows them again.
    WithdrawCards {
        request_ids: Vec<String>,
    },
    /// A notice for the owner's channels ([`StreamHandle::notify_owner`]).
    OwnerNotice {
        text: String,
    },
    /// Stop intake (§18.2 steps 1–2); replies with the pending count.
    CloseIntake(RpcReplyPort<u32>),
    Status(RpcReplyPort<StreamStatus>),
}

#[derive(Clone)]
pub struct StreamArgs {
    pub deps: Arc<TurnDeps>,
    pub dispatch: mpsc::Sender<DispatchRequest>,
    pub status: broadcast::Sender<WorkStatusEvent>,
    pub restart_policy: RestartPolicy,
}

pub struct StreamState {
    args: StreamArgs,
    processors: HashMap<String, ActorRef<TurnMsg>>,
    by_id: HashMap<ActorId, String>,
    queues: TurnQueues,
    per_scope: RateLimiter,
    per_ip: RateLimiter,
    /// §18.5 card answers per scope; suggestion / autonomy cards opened.
    card_limits: CardLimits,
    accepting: bool,
    /// Closed with intake: queued turns do not start during the drain.
    starts: Arc<TurnStarts>,
    tracker: RestartTracker,
    restarts: u32,
    status_task: Option<JoinHandle<()>>,
    timeouts: CardTimeouts,
    /// Requesters awaiting a card's answer, by request id.
    waiters: HashMap<String, oneshot::Sender<CardAnswer>>,
    resolved: RecentlyResolved,
    sweep_task: Option<JoinHandle<()>>,
    /// Scopes whose visitor left: released when idle (issue #19).
    idle: IdleScopes,
    /// Refusals a sender can repeat at will, audited once a minute each.
    refusals: RefusalAudit,
}

pub struct Stream;

fn audit(deps: &TurnDeps, event: &str, data: serde_json::Value) -> Result<(), ActorProcessingErr> {
    if let serde_json::Value::Object(o) = data {
        deps.store.audit().log(event, o)?;
    }
    Ok(())
}

impl StreamState {
    /// Audits a refusal the sender can repeat at will: the first of a
    /// minute per (event, scope), with how many went unwritten since
    /// (`refused_since`); the rest are counted only.
    fn audit_refusal(
        &mut self,
        event: &'static str,
        scope_id: &str,
        data: serde_json::Value,
    ) -> Result<(), ActorProcessingErr> {
        let Some(since) = self.refusals.note(event, scope_id, Instant::now()) else {
            return Ok(());
        };
        let mut data = data;
        if since > 0
            && let Some(o) = data.as_object_mut()
        {
            o.insert("refused_since".into(), since.into());
        }
        audit(&self.args.deps, event, data)
    }

    async fn processor(
        &mut self,
        myself: &ActorRef<StreamMsg>,
        scope_id: &str,
    ) -> Result<ActorRef<TurnMsg>, ActorProcessingErr> {
        if let Some(p) = self.processors.get(scope_id) {
            return Ok(p.clone());
        }
        let me = myself.clone();
        let on_done: TurnDone = Box::new(move |scope_id, inbox_id| {
            let _ = me.cast(StreamMsg::TurnDone { scope_id, inbox_id });
        });
        let (p, _) = Actor::spawn_linked(
            None,
            TurnProcessor,
            TurnArgs {
                scope_id: scope_id.to_string(),
                deps: self.args.deps.clone(),
                on_done: Arc::new(on_done),
                starts: self.starts.clone(),
            },
            myself.get_cell(),
        )
        .await?;
        self.by_id.insert(p.get_id(), scope_id.to_string());
        self.processors.insert(scope_id.to_string(), p.clone());
        Ok(p)
    }

    /// Stops the processor of each scope idle past the interval with
    /// nothing queued and nothing undelivered (see `scope_release`).
    fn release_idle_scopes(&mut self) -> Result<(), ActorProcessingErr> {
        if !self.accepting || self.idle.is_empty() {
            return Ok(());
        }
        for scope in self.idle.due(Instant::now()) {
            if self.queues.pending(&scope) > 0
                || !self
                    .args
                    .deps
                    .store
                    .inbox()
                    .pending_for_scope(&scope)?
                    .is_empty()
            {
                continue; // busy: looked at again at the next sweep
            }
            self.idle.forget(&scope);
            if let Some(p) = self.processors.remove(&scope) {
                // Out of the maps first: a message arriving now gets a fresh
                // processor, and this one's termination restarts nothing.
                self.by_id.remove(&p.get_id());
                p.stop(Some("idle scope released".into()));
                tracing::debug!(scope_id = scope, "idle scope released");
            }
        }
        Ok(())
    }

    async fn scope_disconnected(&mut self, scope_id: &str) -> Result<usize, ActorProcessingErr> {
        // During shutdown the sockets close after intake did: plan cards
        // stay for the restart (see the module doc).
        if !self.accepting {
            return Ok(0);
        }
        // A change card (apply or undo) holds nothing up and nobody awaits
        // it: it waits out its own deadline and is shown again when the
        // owner reconnects (`cards::deadline`). Declining it here threw a
        // finished task's result away because a browser tab closed.
        let cards = self.pending_cards(|c| {
            c.scope_id == scope_id && !matches!(c.card, CardPayload::Changes(_))
        })?;
        let n = cards.len();
        for card in cards {
            self.resolve_default(card, Resolution::Disconnected).await?;
        }
        Ok(n)
    }

    async fn restart_processor(
        &mut self,
        myself: &ActorRef<StreamMsg>,
        scope_id: String,
        why: String,
    ) -> Result<(), ActorProcessingErr> {
        match self.tracker.record_failure(Instant::now()) {
            RestartDecision::Escalate { failures_in_window } => {
                myself.stop(Some(format!(
                    "turn processor restart intensity exceeded ({failures_in_window}); last: {scope_id}: {why}"
                )));
            }
            RestartDecision::Restart { after } => {
                tracing::warn!(scope_id, reason = %why, "restarting turn processor");
                audit(
                    &self.args.deps,
                    "turn_processor_restarted",
                    json!({"scope_id": scope_id, "error": why}),
                )?;
                tokio::time::sleep(after).await;
                self.restarts += 1;
                self.processor(myself, &scope_id).await?;
            }
        }
        Ok(())
    }
}

impl Actor for Stream {
    type Msg = StreamMsg;
    type State = StreamState;
    type Arguments = StreamArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamMsg>,
        args: StreamArgs,
    ) -> Result<StreamState, ActorProcessingErr> {
        let cfg = args.deps.config.clone();
        let mut state = StreamState {
            queues: TurnQueues::new(
                cfg.backpressure.max_pending_turns_per_scope,
                cfg.backpressure.max_pending_turns_total,
            ),
            per_scope: RateLimiter::per_minute(cfg.limits.ws_messages_per_minute_per_scope),
            per_ip: RateLimiter::per_minute(cfg.limits.ws_messages_per_minute_per_ip),
            card_limits: CardLimits::from_config(&cfg.limits),
            refusals: RefusalAudit::default(),
            accepting: true,
            starts: Arc::new(TurnStarts::default()),
            tracker: RestartTracker::new(args.restart_policy),
            restarts: 0,
            processors: HashMap::new(),
            by_id: HashMap::new(),
            status_task: None,
            timeouts: CardTimeouts::from_config(&cfg),
            waiters: HashMap::new(),
            resolved: RecentlyResolved::default(),
            sweep_task: None,
            idle: IdleScopes::new(Duration::from_secs(
                cfg.backpressure.idle_scope_release_seconds,
            )),
            args,
        };
        // Rehydrate: every scope with undelivered messages gets its
        // processor now, which replays them in order.
        let pending = state.args.deps.store.inbox().pending_all()?;
        for r in &pending {
            state.queues.push(&r.message.scope_id);
        }
        for r in pending {
            state.processor(&myself, &r.message.scope_id).await?;
        }
        let mut rx = state.args.status.subscribe();
        let me = myself.clone();
        state.status_task = Some(tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => {
                        if me.cast(StreamMsg::WorkStatus(ev)).is_err() {
                            break;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "work status events dropped (slow stream)");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        }));
        let me = myself.clone();
        state.sweep_task = Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(CARD_SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if me.cast(StreamMsg::SweepCards).is_err() {
                    break;
                }
            }
        }));
        audit(
            &state.args.deps,
            "stream_started",
            json!({"pending": state.queues.total()}),
        )?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamMsg>,
        msg: StreamMsg,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            StreamMsg::Submit(m, reply) => match state.submit(&myself, m).await? {
                Admit::Done(out) => {
                    let _ = reply.send(Ok(out));
                }
                Admit::Accepting(a) => a.spawn(&state.args.deps.store, myself.clone(), reply),
                Admit::Known { inbox_id } => {
                    Admit::answer_known(&state.args.deps.store, inbox_id, reply)
                }
            },
            StreamMsg::AdmissionReleased { scope_id } => state.queues.pop(&scope_id),
            StreamMsg::AdmissionFailed { scope_id, error } => {
                state.queues.pop(&scope_id);
                return Err(format!("inbox accept failed: {error}").into());
            }
            StreamMsg::DecideCard {
                request_id,
                decision,
                origin,
                reply,
            } => {
                // §18.5: the card's own scope pays for the submission.
                let card = state
                    .args
                    .deps
                    .store
                    .records::<PendingCard>()
                    .get(&request_id)?;
                let limited = match &card {
                    Some(c) => state.card_submission(&c.scope_id, &request_id)?.is_err(),
                    None => false,
                };
                let allowed = match &card {
                    // No channel scope on this path: the card's own.
                    Some(c) => state.answer_allowed(c, &c.scope_id, &origin)?,
                    None => true,
                };
                let out = if limited {
                    Err(TurnError::RateLimited(LimitKind::Card))
                } else if !allowed {
                    Err(TurnError::UnknownCard(request_id.clone()))
                } else if state.accepting {
                    approval_flow::decide_card(
                        &state.args.deps,
                        &state.args.dispatch,
                        &request_id,
                        decision,
                        &origin,
                    )
                    .await
                } else {
                    Err(TurnError::Unavailable(
                        "shutting down; card intake closed".into(),
                    ))
                };
                if let (Ok(_), Some(c)) = (&out, &card) {
                    state.resolved.remember(&request_id, &c.scope_id);
                }
                let _ = reply.send(out);
            }
            StreamMsg::DecideCardFor {
                scope_id,
                request_id,
                decision,
                origin,
                reply,
            } => {
                let out = state
                    .decide_card_for(&scope_id, &request_id, decision, &origin)
                    .await?;
                let _ = reply.send(out);
            }
            StreamMsg::OpenCard {
                card,
                answer,
                reply,
            } => {
                let out = state.open_card(card, answer).await?;
                let _ = reply.send(out);
            }
            StreamMsg::AnswerCard {
                scope_id,
                request_id,
                kind,
                response,
                origin,
                reply,
            } => {
                let out = state
                    .answer_card(&scope_id, &request_id, kind, response, &origin)
                    .await?;
                let _ = reply.send(out);
            }
            StreamMsg::ScopeDisconnected { scope_id, reply } => {
                let n = state.scope_disconnected(&scope_id).await?;
                state.idle.disconnected(&scope_id, Instant::now());
                let _ = reply.send(n);
            }
            StreamMsg::ForgetHistory { scope_id, filter } => {
                // Between turns (its mailbox orders it); a released or
                // never-started scope rehydrates from the purged history.
                if let Some(p) = state.processors.get(&scope_id) {
                    let _ = p.cast(TurnMsg::ForgetHistory(filter));
                }
            }
            StreamMsg::WithdrawCards { request_ids } => {
                let cards = state.args.deps.store.records::<PendingCard>();
                for id in request_ids {
                    if let Some(card) = cards.get(&id)? {
                        state.resolve_default(card, Resolution::Withdrawn).await?;
                    }
                }
            }
            StreamMsg::OwnerNotice { text } => {
                // Sent off the actor: a slow channel does not hold the Stream.
                let sink = state.args.deps.sink.clone();
                tokio::spawn(async move {
                    let out = Outbound::OwnerNotice {
                        scope_id: crate::turn::OWNER_SCOPE.to_string(),
                        text,
                    };
                    if let Err(e) = sink.send(out).await {
                        tracing::info!("owner notice not shown: {e}");
                    }
                });
            }
            StreamMsg::SweepCards => {
                state.sweep_cards().await?;
                state.release_idle_scopes()?;
                // Windows that have passed, on a timer rather than per turn:
                // a table of every recent scope is walked twice a second,
                // not once per turn, and it empties after the last visitor.
                let now = Instant::now();
                state.per_scope.prune(now);
                state.per_ip.prune(now);
                state.card_limits.prune(now);
                // The counts a quiet sender left unwritten are written now.
                for (event, scope_id, since) in state.refusals.prune(now) {
                    audit(
                        &state.args.deps,
                        event,
                        json!({"scope_id": scope_id, "refused_since": since}),
                    )?;
                }
                state.args.deps.limits.prune(now);
            }
            StreamMsg::TurnDone { scope_id, .. } => {
                state.queues.pop(&scope_id);
            }
            StreamMsg::WorkStatus(event) => state.work_status(event).await?,
            StreamMsg::CloseIntake(reply) => {
                // §18.2 step 2: prompts someone is waiting on resolve to
                // their safe default now; plan cards stay (module doc).
                let waiting: Vec<String> = state.waiters.keys().cloned().collect();
                let cards = state.args.deps.store.records::<PendingCard>();
                for id in waiting {
                    match cards.get(&id)? {
                        Some(card) => state.resolve_default(card, Resolution::Shutdown).await?,
                        None => {
                            state.waiters.remove(&id);
                        }
                    }
                }
                state.accepting = false;
                state.starts.close();
                let _ = reply.send(state.starts.running());
            }
            StreamMsg::Status(reply) => {
                let mut scope_depths: Vec<(String, u32)> = state
                    .queues
                    .depths()
                    .map(|(s, n)| (s.to_string(), n))
                    .collect();
                scope_depths.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                scope_depths.truncate(20);
                let _ = reply.send(StreamStatus {
                    accepting: state.accepting,
                    running_turns: state.starts.running(),
                    pending_total: state.queues.total(),
                    active_scopes: state.processors.len(),
                    processor_restarts: state.restarts,
                    capacity_total: state.queues.max_total,
                    capacity_per_scope: state.queues.max_per_scope,
                    scope_depths,
                    pending_cards: state.args.deps.store.records::<PendingCard>().len()? as usize,
                });
            }
        }
        Ok(())
    }

    // Overridden on purpose: a failed TurnProcessor is restarted (and
    // replays its scope's inbox); the default would stop the Stream.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<StreamMsg>,
        event: SupervisionEvent,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(scope) = state.by_id.remove(&cell.get_id()) {
                    state.processors.remove(&scope);
                    state
                        .restart_processor(&myself, scope, err.to_string())
                        .await?;
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(scope) = state.by_id.remove(&cell.get_id()) {
                    state.processors.remove(&scope);
                    // Transient: a clean stop is only restarted if work is left.
                    if !state
                        .args
                        .deps
                        .store
                        .inbox()
                        .pending_for_scope(&scope)?
                        .is_empty()
                    {
                        let why = reason.unwrap_or_else(|| "stopped".into());
                        state.restart_processor(&myself, scope, why).await?;
                    }
                }
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<StreamMsg>,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.status_task.take() {
            t.abort();
        }
        if let Some(t) = state.sweep_task.take() {
            t.abort();
        }
        // Waiters whose Stream stops get the safe default (their sender is
        // dropped; `StreamHandle::ask` maps that to a decline).
        state.waiters.clear();
        for (id, p) in state.processors.drain() {
            state.by_id.retain(|_, s| s != &id);
            p.stop(Some("stream stopping".into()));
        }
        Ok(())
    }
}

/// Registered name of the daemon's Stream (see [`StreamHandle::find`]).
pub const STREAM_NAME: &str = "silas.stream";

impl Stream {
    /// A permanent child spec for the root supervisor; the Stream registers
    /// as [`STREAM_NAME`] so channels find it after a restart.
    pub fn child_spec(args: StreamArgs) -> crate::supervisor::ChildSpec {
        crate::supervisor::ChildSpec {
            label: "stream".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: Arc::new(move |parent| {
                let args = args.clone();
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some(STREAM_NAME.into()), Stream, args, parent).await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

mod admission;
mod card_flow;
mod handle;
mod work_status;

pub use handle::{Drained, StreamHandle};
