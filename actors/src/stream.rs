//! The Stream (§5.1): Silas's permanent session. It admits inbound messages
//! (rate limits §18.5, bounded queues §18.6), records each one durably in
//! the inbox *before* acknowledging it, wakes the scope's
//! [`TurnProcessor`](crate::turn::TurnProcessor) (one per `scope_id`,
//! spawned linked on first use or at startup for scopes with pending
//! work), answers plan cards (`decide_card`), forwards background work
//! status events to the channel, and drains on shutdown (§18.2).
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
use silas_core::model::approval::ApprovalDecision;
use silas_core::model::messages::SignedMessage;
use silas_storage::NewInbound;
use tokio::sync::{broadcast, mpsc};

use crate::channel::Outbound;
use crate::limits::{Admission, RateLimiter, TurnQueues};
use crate::restart::{RestartDecision, RestartPolicy, RestartTracker};
use crate::turn::approval_flow::{self, DecideOutcome};
use crate::turn::pipeline::{TurnDeps, TurnError};
use crate::turn::{OWNER_SCOPE, TurnArgs, TurnDone, TurnMsg, TurnProcessor};
use crate::work::{DispatchRequest, WorkStatusEvent};

/// Timeout of every RPC to the Stream.
pub const STREAM_RPC_TIMEOUT_MS: u64 = 5_000;
/// Suggested client back-off on `busy_retry`.
pub const BUSY_RETRY_AFTER_MS: u64 = 1_000;
/// The deterministic safe response to a rate-limited message (§18.5).
pub const RATE_LIMITED_MESSAGE: &str =
    "You are sending messages faster than I can take them. Please wait a minute and try again.";

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
}

// ractor boxes each message into the mailbox, so variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum StreamMsg {
    Submit(InboundMessage, RpcReplyPort<SubmitOutcome>),
    DecideCard {
        request_id: String,
        decision: ApprovalDecision,
        reply: RpcReplyPort<Result<DecideOutcome, TurnError>>,
    },
    /// From a TurnProcessor: a turn was delivered.
    TurnDone {
        scope_id: String,
        inbox_id: String,
    },
    /// From the WorkExecutor's status channel.
    WorkStatus(WorkStatusEvent),
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
    accepting: bool,
    tracker: RestartTracker,
    restarts: u32,
    status_task: Option<JoinHandle<()>>,
}

pub struct Stream;

fn audit(deps: &TurnDeps, event: &str, data: serde_json::Value) -> Result<(), ActorProcessingErr> {
    if let serde_json::Value::Object(o) = data {
        deps.store.audit().log(event, o)?;
    }
    Ok(())
}

impl StreamState {
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
            },
            myself.get_cell(),
        )
        .await?;
        self.by_id.insert(p.get_id(), scope_id.to_string());
        self.processors.insert(scope_id.to_string(), p.clone());
        Ok(p)
    }

    async fn submit(
        &mut self,
        myself: &ActorRef<StreamMsg>,
        m: InboundMessage,
    ) -> Result<SubmitOutcome, ActorProcessingErr> {
        let deps = self.args.deps.clone();
        if !self.accepting {
            return Ok(SubmitOutcome::ShuttingDown);
        }
        let now = Instant::now();
        let ip_key = m.ip.clone().unwrap_or_default();
        let scope_ok = self.per_scope.would_allow(&m.scope_id, now);
        let ip_ok = ip_key.is_empty() || self.per_ip.would_allow(&ip_key, now);
        if !(scope_ok && ip_ok) {
            audit(
                &deps,
                "security_rate_limited",
                json!({"scope_id": m.scope_id, "channel": m.channel,
                       "limit": if scope_ok { "ip" } else { "scope" }}),
            )?;
            return Ok(SubmitOutcome::RateLimited {
                message: RATE_LIMITED_MESSAGE.to_string(),
            });
        }
        let is_owner = m.scope_id == OWNER_SCOPE;
        match self.queues.admission(&m.scope_id, is_owner) {
            Admission::Admit => {}
            full => {
                audit(
                    &deps,
                    "backpressure_busy_retry",
                    json!({"scope_id": m.scope_id,
                           "queue": if full == Admission::ScopeFull { "scope" } else { "global" },
                           "pending_total": self.queues.total()}),
                )?;
                return Ok(SubmitOutcome::BusyRetry {
                    retry_after_ms: BUSY_RETRY_AFTER_MS,
                });
            }
        }
        self.per_scope.try_take(&m.scope_id, now);
        if !ip_key.is_empty() {
            self.per_ip.try_take(&ip_key, now);
        }
        let scope_id = m.scope_id.clone();
        // Durable before acknowledged.
        let record = deps.store.inbox().accept(
            NewInbound {
                scope_id: m.scope_id,
                channel: m.channel,
                sender_id: m.sender_id,
                text: m.text,
                signed: m.signed,
                connection_id: m.connection_id,
                ip: m.ip,
            },
            Timestamp::now(),
        )?;
        self.queues.push(&scope_id);
        let p = self.processor(myself, &scope_id).await?;
        p.send_message(TurnMsg::Wake)?;
        Ok(SubmitOutcome::Accepted {
            inbox_id: record.inbox_id,
        })
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
            accepting: true,
            tracker: RestartTracker::new(args.restart_policy),
            restarts: 0,
            processors: HashMap::new(),
            by_id: HashMap::new(),
            status_task: None,
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
            StreamMsg::Submit(m, reply) => {
                let out = state.submit(&myself, m).await?;
                let _ = reply.send(out);
            }
            StreamMsg::DecideCard {
                request_id,
                decision,
                reply,
            } => {
                let out = if state.accepting {
                    approval_flow::decide_card(
                        &state.args.deps,
                        &state.args.dispatch,
                        &request_id,
                        decision,
                    )
                    .await
                } else {
                    Err(TurnError::Unavailable(
                        "shutting down; card intake closed".into(),
                    ))
                };
                let _ = reply.send(out);
            }
            StreamMsg::TurnDone { scope_id, .. } => {
                state.queues.pop(&scope_id);
                state.per_scope.prune(Instant::now());
                state.per_ip.prune(Instant::now());
            }
            StreamMsg::WorkStatus(event) => {
                audit(
                    &state.args.deps,
                    "work_status",
                    json!({"work_item_id": event.work_item_id, "scope_id": event.scope_id,
                           "status": event.status}),
                )?;
                if let Err(e) = state
                    .args
                    .deps
                    .sink
                    .send(Outbound::WorkStatus { event })
                    .await
                {
                    tracing::warn!("work status not delivered: {e}");
                }
            }
            StreamMsg::CloseIntake(reply) => {
                state.accepting = false;
                let _ = reply.send(state.queues.total());
            }
            StreamMsg::Status(reply) => {
                let _ = reply.send(StreamStatus {
                    accepting: state.accepting,
                    pending_total: state.queues.total(),
                    active_scopes: state.processors.len(),
                    processor_restarts: state.restarts,
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

    pub async fn submit(&self, m: InboundMessage) -> Result<SubmitOutcome, TurnError> {
        ractor::call_t!(self.actor, StreamMsg::Submit, STREAM_RPC_TIMEOUT_MS, m)
            .map_err(unavailable)
    }

    pub async fn decide_card(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
    ) -> Result<DecideOutcome, TurnError> {
        let request_id = request_id.to_string();
        ractor::call_t!(
            self.actor,
            |reply| StreamMsg::DecideCard {
                request_id,
                decision,
                reply
            },
            STREAM_RPC_TIMEOUT_MS
        )
        .map_err(unavailable)?
    }

    pub async fn status(&self) -> Result<StreamStatus, TurnError> {
        ractor::call_t!(self.actor, StreamMsg::Status, STREAM_RPC_TIMEOUT_MS).map_err(unavailable)
    }

    /// §18.2 steps 1–3: close intake, then wait up to `grace` for in-flight
    /// turns. Returns whether everything pending was delivered; what is left
    /// stays in the inbox and is replayed on the next start.
    pub async fn drain(&self, grace: Duration) -> Result<bool, TurnError> {
        let mut pending =
            ractor::call_t!(self.actor, StreamMsg::CloseIntake, STREAM_RPC_TIMEOUT_MS)
                .map_err(unavailable)?;
        let deadline = Instant::now() + grace;
        while pending > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            pending = self.status().await?.pending_total;
        }
        Ok(pending == 0)
    }
}
