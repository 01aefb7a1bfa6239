//! The outbound side of a channel (§4.1 `ChannelAdapter.send`,
//! `RichCardChannel`): what the runtime delivers to the owner or a
//! connection. The web channel implements [`ChannelSink`] with WebSocket
//! frames; [`MemorySink`] keeps everything in memory (tests, and the daemon
//! until a channel is attached); [`LogSink`] only logs metadata.
//!
//! Delivery is idempotent by key: a reply carries the inbox id of the
//! message it answers, so a reply redelivered after a crash is recognisable
//! (and dropped) by the channel.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use silas_core::{Coded, ErrorCode};
use silas_storage::{PendingCard, ReplyAck};

use crate::work::WorkStatusEvent;

/// A boxed, sendable future (keeps the trait object-safe).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// One thing sent out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outbound {
    /// The answer to one inbound message (`reply_to` = its inbox id).
    Reply {
        scope_id: String,
        connection_id: String,
        reply_to: String,
        text: String,
    },
    /// A card awaiting the owner's decision (plan approval, …).
    Card { card: PendingCard },
    /// A background work status change.
    WorkStatus { event: WorkStatusEvent },
    /// A notice for whoever is on `scope_id`'s channel: the owner (gate
    /// `report` escalations, declines, …) or a chatbot customer (the fate
    /// of the request they sent for review, `turn::customer_update`).
    OwnerNotice { scope_id: String, text: String },
    /// A model call for the message `reply_to` is still running
    /// ([`crate::turn::progress`]); only the sender's connection hears it.
    Progress {
        scope_id: String,
        connection_id: String,
        reply_to: String,
        text: String,
        elapsed_seconds: u64,
    },
}

impl Outbound {
    pub fn scope_id(&self) -> &str {
        match self {
            Outbound::Reply { scope_id, .. }
            | Outbound::OwnerNotice { scope_id, .. }
            | Outbound::Progress { scope_id, .. } => scope_id,
            Outbound::Card { card } => &card.scope_id,
            Outbound::WorkStatus { event } => &event.scope_id,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("channel disconnected: {0}")]
    Disconnected(String),
    #[error("channel send timed out")]
    Timeout,
}

/// Logs a delivery that did not happen: quietly when nobody is connected
/// (what was sent is durable and shown again on the next connection), as a
/// warning otherwise.
pub(crate) fn undelivered(what: &str, e: ChannelError) {
    match e {
        ChannelError::Disconnected(why) => tracing::debug!("{what} not delivered: {why}"),
        e => tracing::warn!("{what} not delivered: {e}"),
    }
}

impl Coded for ChannelError {
    fn code(&self) -> ErrorCode {
        match self {
            ChannelError::Disconnected(_) => ErrorCode::EChannelDisconnected,
            ChannelError::Timeout => ErrorCode::EChannelTimeout,
        }
    }
}

/// Where outbound messages go. Implementations must be idempotent on
/// `Outbound::Reply::reply_to`.
pub trait ChannelSink: Send + Sync {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>>;

    /// Who confirms that the reply `out` reached its reader (issue #19
    /// item 6): the channel itself by default; a channel whose client
    /// acknowledges replies by id says [`ReplyAck::Client`] and the turn
    /// keeps the reply until the ack.
    fn reply_ack(&self, _out: &Outbound) -> ReplyAck {
        ReplyAck::Channel
    }

    /// Whether the reply `out` could reach its reader, now or later. Only a
    /// conversation that ends with its connection ([`ReplyAck::ClientOnce`])
    /// can become unreachable: its visitor left. A turn whose reply nobody
    /// can read is not run (its model call would be spent for nothing).
    fn reaches(&self, _out: &Outbound) -> bool {
        true
    }
}

/// Keeps every delivery in memory, dropping a reply whose `reply_to` was
/// already delivered.
#[derive(Clone, Default)]
pub struct MemorySink {
    sent: Arc<Mutex<Vec<Outbound>>>,
}

impl MemorySink {
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything delivered so far.
    pub fn sent(&self) -> Vec<Outbound> {
        self.sent.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The replies delivered, as `(reply_to, text)`.
    pub fn replies(&self) -> Vec<(String, String)> {
        self.sent()
            .into_iter()
            .filter_map(|o| match o {
                Outbound::Reply { reply_to, text, .. } => Some((reply_to, text)),
                _ => None,
            })
            .collect()
    }
}

impl ChannelSink for MemorySink {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let mut sent = self
                .sent
                .lock()
                .map_err(|_| ChannelError::Disconnected("sink lock poisoned".into()))?;
            if let Outbound::Reply { reply_to, .. } = &out
                && sent
                    .iter()
                    .any(|o| matches!(o, Outbound::Reply { reply_to: r, .. } if r == reply_to))
            {
                return Ok(());
            }
            sent.push(out);
            Ok(())
        })
    }
}

/// Logs what would be sent (kind and scope only, never content).
#[derive(Clone, Copy, Default)]
pub struct LogSink;

impl ChannelSink for LogSink {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let kind = match &out {
                Outbound::Reply { .. } => "reply",
                Outbound::Card { .. } => "card",
                Outbound::WorkStatus { .. } => "work_status",
                Outbound::OwnerNotice { .. } => "owner_notice",
                Outbound::Progress { .. } => "progress",
            };
            tracing::info!(
                kind,
                scope_id = out.scope_id(),
                "outbound (no channel attached)"
            );
            Ok(())
        })
    }
}
