//! Glue between the web channel (`silas-web`) and the turn runtime
//! (`silas-actors`): the binary is the only layer that sees both.
//!
//! Inbound: a chat `message` becomes an `InboundMessage` submitted to the
//! Stream (durably recorded before it is acknowledged); every card response
//! (`approval_response`, `gate_response`, `checkpoint`, `batch_review_response`,
//! `draft_review_response`, `decision_response`, `suggestion_response`,
//! `autonomy_threshold_response`, `secure_input_completed`,
//! `connection_setup_response`, `permission_escalation_response`,
//! `connection_failure_response`) goes to the Stream, which checks it against
//! the stored card (scope, type, deadline, answered once) and records it; a
//! refusal comes back as a typed `error` frame and changes nothing. A full
//! queue or a rate limit is a typed error frame too. Outbound: replies,
//! cards of every type (plan cards filled from the stored work item),
//! work-status events and notices become the protocol's server frames on the
//! scope's connections. When a scope's last connection closes, its pending
//! cards resolve to their safe defaults (§8.1).
//!
//! Replies carry their id (the inbox id they answer) and the client
//! acknowledges each with `ack` (issue #19 item 6): the owner's replies stay
//! unacknowledged in the store until then and are sent again, same id, to
//! the next connection of the scope (`ready`); a client drops an id it has
//! shown. An `ack` for another conversation's id is refused (`E_CHANNEL_AUTH`).
//!
//! Also here: the Activity feed (owner connections only: the timeline is
//! built from the audit log by `silas_actors::activity`), `/health` queue
//! pressure, and [`SecretVault`], the `SecretSink` behind
//! `POST /secrets/{ref_id}` (only refs of a pending `secure_input_request`
//! card; values go to `silas_keys::secrets::SecretStore` and nowhere else).
//! The owner asks for a secure form with the chat command `/secret <label>`
//! (e.g. `/secret GitHub token`): the value is stored under the card's
//! `ref_id`, which skills and connections reference — never the value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use silas_actors::activity::{self, WorkFacts};
use silas_actors::approval::{AnswerOrigin, OwnerSessions};
use silas_actors::cards::{CardRejection, CardResponse, CardTimeouts};
use silas_actors::channel::{ChannelError, ChannelSink, Outbound};
use silas_actors::stream::{InboundMessage, StreamHandle, SubmitOutcome, scope_for};
use silas_actors::turn::OWNER_SCOPE;
use silas_core::model::approval::{ApprovalDecision, ApprovalStrength};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{AckOutcome, CardAudience, PendingCard, ReplyAck, Store};
use silas_web::cards::CardAnswerFrame;
use silas_web::protocol::{ActivityItem, ClientFrame, ProtocolError, ServerFrame};
use silas_web::ws::{BoxFuture, ConnectionInfo, QueuePressure, WebBackend};
use tokio::sync::mpsc;

mod secret_vault;

pub use secret_vault::SecretVault;

/// Items in the `activity` frame sent after `auth_ok`.
pub const ACTIVITY_INITIAL_ITEMS: usize = 50;
/// How often the Activity feed looks for new audit entries.
pub const ACTIVITY_POLL: Duration = Duration::from_secs(1);
/// The chat command that opens a secure input card.
pub const SECRET_COMMAND: &str = "/secret";

struct Conn {
    scope_id: String,
    ip: Option<String>,
    owner: bool,
    outbound: mpsc::Sender<ServerFrame>,
}

pub struct WebBridge {
    store: Store,
    vault: Arc<SecretVault>,
    timeouts: CardTimeouts,
    connections: Mutex<HashMap<String, Conn>>,
    /// Messages sent again (same `client_id`) on another connection than
    /// the one that first sent them, by inbox id: their progress and reply
    /// go to the connection that asked last — the first may be a dead
    /// socket not yet noticed (a phone that changed networks).
    answer_on: Mutex<HashMap<String, String>>,
    /// Where this channel reports owner-authenticated connections to the
    /// ApprovalEngine (and withdraws them when they close).
    owners: OwnerSessions,
    /// Another channel (Telegram) keeps the owner's scope reachable: closing
    /// the last web connection does not resolve the owner's cards.
    owner_reachable_elsewhere: std::sync::atomic::AtomicBool,
    /// Silas's own directories, which no workspace may overlap.
    workspace_reserved: Vec<(String, std::path::PathBuf)>,
    /// The model providers' circuit breakers, for `/health` (set once the
    /// agents are built).
    breakers: std::sync::OnceLock<Arc<silas_llm::chain::BreakerBoard>>,
    /// The daemon's memory index, for the owner's Memory panel.
    memory: std::sync::OnceLock<silas_memory::Memory>,
    /// The Telegram poll loop's state, when that channel is on.
    telegram_health: std::sync::OnceLock<Arc<silas_telegram::ChannelHealth>>,
}

/// The channel name answers and messages from this bridge carry.
pub const WEB_CHANNEL: &str = "web";

/// Whether a connection (owner or not) may be shown `card`.
fn may_see(card: &PendingCard, owner: bool) -> bool {
    owner || card.audience == CardAudience::Customer
}

/// The inbox's once-only key for a web message the client named `client_id`
/// in `scope_id`.
fn web_dedup_key(scope_id: &str, client_id: &str) -> String {
    format!("web:{scope_id}:{client_id}")
}

fn rejection(e: CardRejection) -> ProtocolError {
    let rid = e.request_id().map(str::to_string);
    ProtocolError::new(e.code().as_str(), e.to_string(), rid)
}

impl WebBridge {
    pub fn new(
        store: Store,
        vault: Arc<SecretVault>,
        timeouts: CardTimeouts,
        owners: OwnerSessions,
        workspace_reserved: Vec<(String, std::path::PathBuf)>,
    ) -> Arc<WebBridge> {
        Arc::new(WebBridge {
            store,
            vault,
            timeouts,
            connections: Mutex::new(HashMap::new()),
            answer_on: Mutex::new(HashMap::new()),
            owners,
            owner_reachable_elsewhere: std::sync::atomic::AtomicBool::new(false),
            workspace_reserved,
            breakers: std::sync::OnceLock::new(),
            memory: std::sync::OnceLock::new(),
            telegram_health: std::sync::OnceLock::new(),
        })
    }

    /// The Telegram poll loop's state, shown on `/health` and by `silas
    /// status`.
    pub fn set_telegram_health(&self, health: Arc<silas_telegram::ChannelHealth>) {
        let _ = self.telegram_health.set(health);
    }

    /// The daemon's memory index, for the owner's Memory panel.
    pub fn set_memory(&self, memory: silas_memory::Memory) {
        let _ = self.memory.set(memory);
    }

    /// The model providers' circuit breakers, shown on `/health`.
    pub fn set_breakers(&self, board: Arc<silas_llm::chain::BreakerBoard>) {
        let _ = self.breakers.set(board);
    }

    /// Another channel shows the owner's scope (its cards stay answerable
    /// there when the web app closes).
    pub fn set_owner_reachable_elsewhere(&self, yes: bool) {
        self.owner_reachable_elsewhere
            .store(yes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether an owner card would reach someone now: an owner connection
    /// is open, or Telegram shows the owner's cards.
    pub fn owner_can_see_cards(&self) -> bool {
        self.owner_reachable_elsewhere
            .load(std::sync::atomic::Ordering::Relaxed)
            || !self.owner_targets().is_empty()
    }

    /// Connections a card may be shown on: its scope's, and for an
    /// owner-audience card (every approval) only the owner's.
    fn card_targets(&self, card: &PendingCard) -> Vec<mpsc::Sender<ServerFrame>> {
        let Ok(conns) = self.connections.lock() else {
            return Vec::new();
        };
        conns
            .values()
            .filter(|c| c.scope_id == card.scope_id && may_see(card, c.owner))
            .map(|c| c.outbound.clone())
            .collect()
    }

    fn targets(
        &self,
        scope_id: &str,
        connection_id: Option<&str>,
    ) -> Vec<mpsc::Sender<ServerFrame>> {
        let Ok(conns) = self.connections.lock() else {
            return Vec::new();
        };
        if let Some(c) = connection_id.and_then(|id| conns.get(id)) {
            return vec![c.outbound.clone()];
        }
        conns
            .values()
            .filter(|c| c.scope_id == scope_id)
            .map(|c| c.outbound.clone())
            .collect()
    }

    /// The connection the answer to `inbox_id` goes to: the one that sent
    /// it last (see `answer_on`), else `first`'s. `done`: the reply, after
    /// which nothing more is sent for it.
    fn answer_connection(&self, inbox_id: &str, first: &str, done: bool) -> String {
        let Ok(mut answer_on) = self.answer_on.lock() else {
            return first.to_string();
        };
        let last = if done {
            answer_on.remove(inbox_id)
        } else {
            answer_on.get(inbox_id).cloned()
        };
        last.unwrap_or_else(|| first.to_string())
    }

    fn owner_targets(&self) -> Vec<mpsc::Sender<ServerFrame>> {
        self.connections
            .lock()
            .map(|c| {
                c.values()
                    .filter(|c| c.owner && c.scope_id == OWNER_SCOPE)
                    .map(|c| c.outbound.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The server frame for a card: the typed card, rendered by
    /// `silas_web::cards` (a plan card's view was built from the same item,
    /// at the same moment, as the plan hash its approval is checked against).
    fn card_frame(card: &PendingCard) -> ServerFrame {
        silas_web::cards::card_frame(&card.request_id, &card.card)
    }

    fn frame_for(&self, out: &Outbound) -> Option<ServerFrame> {
        Some(match out {
            Outbound::Reply { text, reply_to, .. } => {
                silas_message(text.clone(), Some(reply_to.clone()))
            }
            Outbound::OwnerNotice { text, .. } => silas_message(text.clone(), None),
            Outbound::WorkStatus { event } => ServerFrame::WorkStatus {
                work_item_id: event.work_item_id.clone(),
                status: serde_json::to_value(event.status)
                    .ok()?
                    .as_str()?
                    .to_string(),
                summary: event.summary.clone(),
                verification: serde_json::to_value(&event.verification)
                    .unwrap_or(Value::Array(vec![])),
            },
            Outbound::Card { card } => Self::card_frame(card),
            Outbound::Progress {
                reply_to,
                text,
                elapsed_seconds,
                ..
            } => ServerFrame::Progress {
                reply_to: reply_to.clone(),
                text: text.clone(),
                elapsed_seconds: *elapsed_seconds,
            },
        })
    }

    fn work_facts(&self, work_item_id: &str) -> Option<WorkFacts> {
        let item = self.store.work_items().get(work_item_id).ok().flatten()?;
        let total = item.verification_results.len();
        let passed = item
            .verification_results
            .iter()
            .filter(|r| r.get("passed").and_then(Value::as_bool) == Some(true))
            .count();
        Some(WorkFacts {
            title: item.title,
            checks: (total > 0).then_some((passed, total)),
        })
    }

    /// Activity items for the audit entries with `seq >= from` among the
    /// last `window` entries.
    fn activity_since(&self, from: u64, window: usize) -> Vec<ActivityItem> {
        let entries = match self.store.audit().tail(window) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(code = %e.code(), "activity: cannot read the audit log: {e}");
                return Vec::new();
            }
        };
        let work = |id: &str| self.work_facts(id);
        entries
            .iter()
            .filter(|e| e.seq >= from)
            .filter_map(|e| {
                activity::describe(e.seq, &e.timestamp.to_string(), &e.event, &e.data, &work)
            })
            .map(|i| ActivityItem {
                seq: i.seq,
                at: i.at,
                kind: i.kind,
                text: i.text,
            })
            .collect()
    }

    /// Pushes new Activity items to the owner's connections until the
    /// bridge is dropped. Polling keeps the audit log free of callbacks.
    pub fn spawn_activity_feed(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut seen = match weak.upgrade().map(|b| b.store.audit().len()) {
                Some(Ok(n)) => n,
                _ => 0,
            };
            loop {
                tokio::time::sleep(ACTIVITY_POLL).await;
                let Some(bridge) = weak.upgrade() else { break };
                let Ok(len) = bridge.store.audit().len() else {
                    continue;
                };
                if len <= seen {
                    continue;
                }
                let window = usize::try_from(len - seen).unwrap_or(usize::MAX).min(2000);
                let items = bridge.activity_since(seen, window);
                seen = len;
                if items.is_empty() {
                    continue;
                }
                let frame = ServerFrame::Activity {
                    initial: false,
                    items,
                };
                for t in bridge.owner_targets() {
                    let _ = t.try_send(frame.clone());
                }
            }
        })
    }

    /// The `message` frames of `scope_id`'s unacknowledged replies, oldest
    /// first.
    fn unacked_frames(&self, scope_id: &str) -> Vec<ServerFrame> {
        let records = match self.store.inbox().unacked_for_scope(scope_id) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(code = %e.code(), "unacknowledged replies not read: {e}");
                return Vec::new();
            }
        };
        records
            .into_iter()
            .filter_map(|r| Some(silas_message(r.reply?, Some(r.inbox_id))))
            .collect()
    }

    /// A client's `ack`: only a reply of the connection's own scope; any
    /// other id (another conversation's, or none) is refused alike and
    /// changes nothing.
    async fn acknowledge(
        &self,
        scope_id: &str,
        connection_id: &str,
        id: &str,
    ) -> Result<(), ProtocolError> {
        match self.store.inbox().acknowledge_async(scope_id, id).await {
            Ok(AckOutcome::Acknowledged | AckOutcome::AlreadyAcknowledged) => Ok(()),
            Ok(AckOutcome::NotThisScope) => {
                tracing::info!(
                    connection_id,
                    "ack refused: not a reply of this conversation"
                );
                Err(ProtocolError::new(
                    ErrorCode::EChannelAuth.as_str(),
                    "no reply of this conversation has that id",
                    None,
                ))
            }
            Err(e) => Err(ProtocolError::new(e.code().as_str(), e.to_string(), None)),
        }
    }

    /// `/secret <label>`: open a secure input card for the owner and report
    /// the outcome (stored or not) in the chat — never the value.
    fn request_secret(&self, stream: StreamHandle, scope_id: String, label: String) {
        let timeouts = self.timeouts;
        let outbound = self.targets(&scope_id, None);
        tokio::spawn(async move {
            let text = crate::channels::ask_for_secret(&stream, &scope_id, &label, &timeouts).await;
            let frame = silas_message(text, None);
            for t in outbound {
                let _ = t.try_send(frame.clone());
            }
        });
    }
}

impl WebBackend for WebBridge {
    fn connected(
        &self,
        conn: ConnectionInfo,
        outbound: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        let scope_id = scope_for(&conn.connection_id, conn.owner);
        if conn.owner {
            self.owners.authenticated_device(
                WEB_CHANNEL,
                &conn.connection_id,
                conn.device_id.clone(),
            );
        }
        if let Ok(mut conns) = self.connections.lock() {
            conns.insert(
                conn.connection_id.clone(),
                Conn {
                    scope_id: scope_id.clone(),
                    ip: conn.remote_ip.map(|ip| ip.to_string()),
                    owner: conn.owner,
                    outbound,
                },
            );
        }
        Box::pin(async move { Ok(scope_id) })
    }

    fn ready(&self, connection_id: &str) -> BoxFuture<'_, ()> {
        let conn = self.connections.lock().ok().and_then(|c| {
            c.get(connection_id)
                .map(|c| (c.scope_id.clone(), c.owner, c.outbound.clone()))
        });
        Box::pin(async move {
            let Some((scope_id, owner, tx)) = conn else {
                return;
            };
            // Cards still waiting for this scope (a reload or a restart).
            let cards = silas_actors::cards::waiting_cards(
                &self.store,
                &scope_id,
                &self.timeouts,
                Timestamp::now(),
            );
            for card in cards.iter().filter(|c| may_see(c, owner)) {
                let _ = tx.send(Self::card_frame(card)).await;
            }
            // Replies sent before and never acknowledged (lost on the wire
            // in a crash or a reset, or sent while nobody was connected):
            // again, under their ids; a client drops one it has shown.
            for frame in self.unacked_frames(&scope_id) {
                let _ = tx.send(frame).await;
            }
            // The Activity timeline is the owner's audit trail: owner only.
            if owner && scope_id == OWNER_SCOPE {
                let mut items = self.activity_since(0, 500);
                let skip = items.len().saturating_sub(ACTIVITY_INITIAL_ITEMS);
                items.drain(..skip);
                let _ = tx
                    .send(ServerFrame::Activity {
                        initial: true,
                        items,
                    })
                    .await;
            }
        })
    }

    fn frame(
        &self,
        connection_id: &str,
        frame: ClientFrame,
    ) -> BoxFuture<'_, Result<(), ProtocolError>> {
        let conn = self.connections.lock().ok().and_then(|c| {
            c.get(connection_id)
                .map(|c| (c.scope_id.clone(), c.ip.clone(), c.owner))
        });
        let connection_id = connection_id.to_string();
        Box::pin(async move {
            let (scope_id, ip, owner) = conn.ok_or_else(|| {
                ProtocolError::new("E_CHANNEL_PROTOCOL", "unknown connection", None)
            })?;
            if let ClientFrame::Ack { id } = &frame {
                return self.acknowledge(&scope_id, &connection_id, id).await;
            }
            if frame.is_memory_op() {
                // Owner only, decided by the server as for workspaces.
                let (memories, forgotten) = crate::memory_cmd::web_op(
                    self.memory.get().cloned(),
                    owner && scope_id == OWNER_SCOPE,
                    &connection_id,
                    frame,
                )
                .await?;
                for tx in self.targets(&scope_id, Some(&connection_id)) {
                    let _ = tx
                        .send(ServerFrame::Memories {
                            memories: memories.clone(),
                            forgotten: forgotten.clone(),
                        })
                        .await;
                }
                return Ok(());
            }
            if frame.is_workspace_op() {
                // Owner only, decided by the server from how the connection
                // authenticated — never by the frame.
                let listed = crate::workspace_cmd::web_op(
                    &self.store,
                    &self.workspace_reserved,
                    owner && scope_id == OWNER_SCOPE,
                    &connection_id,
                    frame,
                )
                .await?;
                for tx in self.targets(&scope_id, Some(&connection_id)) {
                    let _ = tx
                        .send(ServerFrame::Workspaces {
                            workspaces: listed.clone(),
                        })
                        .await;
                }
                return Ok(());
            }
            let stream = StreamHandle::find().ok_or_else(|| {
                ProtocolError::new(
                    "E_CHANNEL_UNAVAILABLE",
                    "the assistant is not running",
                    None,
                )
            })?;
            match frame {
                ClientFrame::Message {
                    text, client_id, ..
                } if owner
                    && scope_id == OWNER_SCOPE
                    && (text.trim() == SECRET_COMMAND
                        || text.trim_start().starts_with("/secret ")) =>
                {
                    let label = text
                        .trim()
                        .trim_start_matches(SECRET_COMMAND)
                        .trim()
                        .chars()
                        .take(100)
                        .collect::<String>();
                    if label.is_empty() {
                        return Err(ProtocolError::new(
                            "E_CHANNEL_PROTOCOL",
                            "usage: /secret <what it is, e.g. GitHub token>",
                            client_id,
                        ));
                    }
                    self.request_secret(stream, scope_id, label);
                    Ok(())
                }
                ClientFrame::Message {
                    text, client_id, ..
                } => {
                    // Identity is the server's: the frame's `sender_id` is
                    // ignored (the Stream re-derives owner-ness too).
                    let sender_id = if owner {
                        OWNER_SCOPE.to_string()
                    } else {
                        format!("customer:{connection_id}")
                    };
                    let sender = self.targets(&scope_id, Some(&connection_id));
                    let dedup_key = client_id.as_ref().map(|id| web_dedup_key(&scope_id, id));
                    if let Some(key) = &dedup_key
                        && let Ok(Some(inbox_id)) = self.store.inbox().accepted_as(key)
                        && let Ok(mut answer_on) = self.answer_on.lock()
                    {
                        answer_on.insert(inbox_id, connection_id.clone());
                    }
                    let m = InboundMessage {
                        scope_id,
                        channel: WEB_CHANNEL.into(),
                        sender_id,
                        text,
                        signed: None,
                        connection_id,
                        ip,
                        // Bound to the scope: one visitor's id never
                        // answers for another's message.
                        dedup_key,
                    };
                    match stream.submit(m).await {
                        Ok(SubmitOutcome::Accepted { inbox_id }) => {
                            // Only to the connection that sent it.
                            if let [one] = sender.as_slice() {
                                let _ = one
                                    .send(ServerFrame::Accepted {
                                        id: inbox_id,
                                        client_id,
                                    })
                                    .await;
                            }
                            Ok(())
                        }
                        // Refused, not recorded: the error names the
                        // message by its client_id (as `request_id`), so
                        // the client knows which one to offer again.
                        Ok(SubmitOutcome::BusyRetry { retry_after_ms }) => Err(ProtocolError::new(
                            "busy_retry",
                            format!("busy, retry in {retry_after_ms} ms"),
                            client_id,
                        )),
                        Ok(SubmitOutcome::RateLimited { message }) => {
                            Err(ProtocolError::new("rate_limited", message, client_id))
                        }
                        Ok(SubmitOutcome::ShuttingDown) => Err(ProtocolError::new(
                            "E_CHANNEL_UNAVAILABLE",
                            "shutting down",
                            client_id,
                        )),
                        Err(e) => Err(ProtocolError::new(
                            e.code().as_str(),
                            e.to_string(),
                            client_id,
                        )),
                    }
                }
                other => match silas_web::cards::answer(other)? {
                    None => Err(ProtocolError::new(
                        "E_CHANNEL_PROTOCOL",
                        "not a card response",
                        None,
                    )),
                    Some(CardAnswerFrame::Approval {
                        request_id,
                        verdict,
                    }) => {
                        let decision = ApprovalDecision {
                            verdict,
                            approval_strength: ApprovalStrength::Tap,
                            conditions: Default::default(),
                        };
                        stream
                            .decide_card_for(
                                &scope_id,
                                &request_id,
                                decision,
                                AnswerOrigin::new(WEB_CHANNEL, &connection_id),
                            )
                            .await
                            .map(|_| ())
                            .map_err(rejection)
                    }
                    Some(CardAnswerFrame::Card {
                        request_id,
                        kind,
                        response,
                    }) => {
                        // A client cannot claim a secret it did not store.
                        let response = match response {
                            CardResponse::SecureInput { success } => CardResponse::SecureInput {
                                success: success && self.vault.fulfilled(&request_id),
                            },
                            r => r,
                        };
                        stream
                            .answer_card(
                                &scope_id,
                                &request_id,
                                kind,
                                response,
                                AnswerOrigin::new(WEB_CHANNEL, &connection_id),
                            )
                            .await
                            .map(|_| ())
                            .map_err(rejection)
                    }
                },
            }
        })
    }

    fn disconnected(&self, connection_id: &str) -> BoxFuture<'_, ()> {
        if let Ok(mut answer_on) = self.answer_on.lock() {
            answer_on.retain(|_, c| c != connection_id);
        }
        let orphaned = self.connections.lock().ok().and_then(|mut conns| {
            let gone = conns.remove(connection_id)?;
            self.owners.closed(WEB_CHANNEL, connection_id);
            let last = !conns.values().any(|c| c.scope_id == gone.scope_id);
            let elsewhere = gone.scope_id == OWNER_SCOPE
                && self
                    .owner_reachable_elsewhere
                    .load(std::sync::atomic::Ordering::Relaxed);
            (last && !elsewhere).then_some(gone.scope_id)
        });
        Box::pin(async move {
            // §8.1: the scope's last connection is gone, so nobody can answer
            // its cards: they resolve to their safe defaults now.
            if let (Some(scope_id), Some(stream)) = (orphaned, StreamHandle::find())
                && let Err(e) = stream.scope_disconnected(&scope_id).await
            {
                tracing::warn!(scope_id, "pending cards not resolved on disconnect: {e}");
            }
        })
    }

    fn channels(&self) -> std::collections::BTreeMap<String, String> {
        self.telegram_health
            .get()
            .map(|h| ("telegram".to_owned(), h.state().describe()))
            .into_iter()
            .collect()
    }

    fn providers(&self) -> std::collections::BTreeMap<String, String> {
        self.breakers.get().map_or_else(Default::default, |b| {
            b.snapshot()
                .into_iter()
                .map(|(k, v)| (k, v.as_str().to_string()))
                .collect()
        })
    }

    fn queue_pressure(&self) -> BoxFuture<'_, Option<QueuePressure>> {
        Box::pin(async {
            let status = StreamHandle::find()?.status().await.ok()?;
            let mut q = QueuePressure {
                accepting: status.accepting,
                pending_total: status.pending_total,
                capacity_total: status.capacity_total,
                capacity_per_scope: status.capacity_per_scope,
                scopes_waiting: u32::try_from(status.scope_depths.len()).unwrap_or(u32::MAX),
                deepest_scope: status.scope_depths.first().map_or(0, |(_, n)| *n),
                pending_cards: u32::try_from(status.pending_cards).unwrap_or(u32::MAX),
                pressure: String::new(),
            };
            q.pressure = q.label().to_string();
            Some(q)
        })
    }
}

impl ChannelSink for WebBridge {
    /// The web clients acknowledge replies by id. Only the owner's
    /// conversation can be reconnected to (a customer's scope is its
    /// connection), so only its replies are kept until acknowledged.
    fn reply_ack(&self, out: &Outbound) -> ReplyAck {
        match out {
            Outbound::Reply { scope_id, .. } if scope_id == OWNER_SCOPE => ReplyAck::Client,
            Outbound::Reply { .. } => ReplyAck::ClientOnce,
            _ => ReplyAck::Channel,
        }
    }

    /// A visitor's reply reaches it only while its connection is open (its
    /// scope is that connection); the owner's waits for the next one.
    fn reaches(&self, out: &Outbound) -> bool {
        if self.reply_ack(out) != ReplyAck::ClientOnce {
            return true;
        }
        self.connections
            .lock()
            .map(|c| c.values().any(|c| c.scope_id == out.scope_id()))
            .unwrap_or(true)
    }

    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let connection = match &out {
                Outbound::Reply {
                    connection_id,
                    reply_to,
                    ..
                } => Some(self.answer_connection(reply_to, connection_id, true)),
                Outbound::Progress {
                    connection_id,
                    reply_to,
                    ..
                } => Some(self.answer_connection(reply_to, connection_id, false)),
                _ => None,
            };
            let targets = match &out {
                Outbound::Card { card } => self.card_targets(card),
                _ => self.targets(out.scope_id(), connection.as_deref()),
            };
            let Some(frame) = self.frame_for(&out) else {
                return Err(ChannelError::Disconnected(
                    "nothing to render for this card".into(),
                ));
            };
            if targets.is_empty() {
                return Err(ChannelError::Disconnected(format!(
                    "no connection for scope {}",
                    out.scope_id()
                )));
            }
            for t in targets {
                // A full queue means a stalled client; it catches up from the chronicle.
                let _ = t.try_send(frame.clone());
            }
            Ok(())
        })
    }
}

/// A `message` frame from Silas, stamped now; `id` is the inbox id a reply
/// answers (clients acknowledge it), `None` for a notice.
fn silas_message(text: String, id: Option<String>) -> ServerFrame {
    ServerFrame::Message {
        text,
        sender: "silas".into(),
        timestamp: Timestamp::now().to_string(),
        id,
    }
}
