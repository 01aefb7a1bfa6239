//! Sending to Telegram within its limits: plain text split at 4,096 UTF-16
//! units, per-chat pacing, edits throttled and coalesced per message, and
//! retries in place on 429 (`retry_after`) and 5xx, so a transient failure
//! does not make the poller re-handle an update whose replies half went out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use silas_core::Coded;
use tokio::sync::{Mutex, watch};

use crate::client::BotClient;
use crate::error::TelegramError;
use crate::policy::text::{MAX_MESSAGE_UTF16, split_message};
use crate::policy::throttle::{ChatRateLimiter, EditDecision, EditThrottle, MessageKey};
use crate::types::{
    AnswerCallbackQuery, DeleteMessage, EditMessageReplyMarkup, EditMessageText,
    InlineKeyboardMarkup, LinkPreviewOptions, Message, ParseMode, SendMessage,
};

/// How often the flusher looks for held edits when none is due.
const FLUSH_IDLE_TICK: Duration = Duration::from_millis(100);

/// A message body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    /// Literal text, sent without a parse mode; split as needed.
    Plain(String),
    /// MarkdownV2 already escaped by the renderer (which splits the plain
    /// text with `policy::text` before escaping); sent as one message.
    MarkdownV2(String),
}

/// What a [`crate::Handler`] asks the transport to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Send {
        chat_id: i64,
        text: Text,
        /// Attached to the last piece.
        keyboard: Option<InlineKeyboardMarkup>,
    },
    Edit {
        chat_id: i64,
        message_id: i64,
        text: Text,
        keyboard: Option<InlineKeyboardMarkup>,
    },
    /// `None` removes the keyboard.
    EditKeyboard {
        chat_id: i64,
        message_id: i64,
        keyboard: Option<InlineKeyboardMarkup>,
    },
    AnswerCallback {
        callback_query_id: String,
        text: Option<String>,
    },
    Delete {
        chat_id: i64,
        message_id: i64,
    },
}

/// Retry policy for one call.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff for the `failures`-th consecutive failure.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.min(16));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// How long to wait after `err`, or `None` if it is not worth retrying.
    pub fn wait_for(&self, err: &TelegramError, failures: u32) -> Option<Duration> {
        match err {
            TelegramError::RateLimited { retry_after } => Some(*retry_after),
            e if e.is_transient() => Some(self.backoff(failures)),
            _ => None,
        }
    }
}

struct Pacing {
    chats: ChatRateLimiter,
    edits: EditThrottle,
    /// The full request of each held edit (the throttle keeps only text).
    held: HashMap<MessageKey, EditMessageText>,
}

pub struct Outbox {
    client: BotClient,
    retry: RetryPolicy,
    pacing: Mutex<Pacing>,
    /// (chat, status key) → the message that shows that status. Held across
    /// the first send so two first updates cannot post two messages.
    statuses: Mutex<HashMap<(i64, String), i64>>,
}

impl Outbox {
    pub fn new(client: BotClient, retry: RetryPolicy) -> Arc<Outbox> {
        Arc::new(Outbox {
            client,
            retry,
            pacing: Mutex::new(Pacing {
                chats: ChatRateLimiter::default(),
                edits: EditThrottle::default(),
                held: HashMap::new(),
            }),
            statuses: Mutex::new(HashMap::new()),
        })
    }

    async fn with_retry<T, F, Fut>(&self, mut call: F) -> Result<T, TelegramError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TelegramError>>,
    {
        let mut failures = 0;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    failures += 1;
                    match self.retry.wait_for(&e, failures - 1) {
                        Some(wait) if failures < self.retry.attempts => {
                            tracing::warn!(code = e.code().as_str(), error = %e, ?wait, "telegram call failed; retrying");
                            tokio::time::sleep(wait).await;
                        }
                        _ => return Err(e),
                    }
                }
            }
        }
    }

    async fn pace(&self, chat_id: i64) {
        let wait = self
            .pacing
            .lock()
            .await
            .chats
            .reserve(chat_id, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Send a message (split if plain and long); returns the sent messages.
    pub async fn send(
        &self,
        chat_id: i64,
        text: &Text,
        keyboard: Option<&InlineKeyboardMarkup>,
    ) -> Result<Vec<Message>, TelegramError> {
        let (pieces, parse_mode) = match text {
            Text::Plain(t) => (split_message(t, MAX_MESSAGE_UTF16), None),
            Text::MarkdownV2(t) => (vec![t.clone()], Some(ParseMode::MarkdownV2)),
        };
        let last = pieces.len().saturating_sub(1);
        let mut sent = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.into_iter().enumerate() {
            let req = SendMessage {
                chat_id,
                text: piece,
                parse_mode,
                reply_markup: if i == last { keyboard.cloned() } else { None },
                link_preview_options: LinkPreviewOptions { is_disabled: true },
            };
            self.pace(chat_id).await;
            sent.push(self.with_retry(|| self.client.send_message(&req)).await?);
        }
        Ok(sent)
    }

    /// Edit a message's text, at most once per 500 ms per message: an edit
    /// inside the interval is held (replacing any held one) and sent by
    /// [`Outbox::flush_due`]. Plain text over the limit is cut to its first
    /// piece (a status message is one message).
    pub async fn edit(
        &self,
        chat_id: i64,
        message_id: i64,
        text: &Text,
        keyboard: Option<&InlineKeyboardMarkup>,
    ) -> Result<(), TelegramError> {
        let (body, parse_mode) = match text {
            Text::Plain(t) => (
                split_message(t, MAX_MESSAGE_UTF16)
                    .into_iter()
                    .next()
                    .unwrap_or_default(),
                None,
            ),
            Text::MarkdownV2(t) => (t.clone(), Some(ParseMode::MarkdownV2)),
        };
        let req = EditMessageText {
            chat_id,
            message_id,
            text: body,
            parse_mode,
            reply_markup: keyboard.cloned(),
            link_preview_options: LinkPreviewOptions { is_disabled: true },
        };
        let key = (chat_id, message_id);
        {
            let mut p = self.pacing.lock().await;
            match p.edits.offer(key, &req.text, Instant::now()) {
                EditDecision::SendNow => {
                    p.held.remove(&key);
                }
                EditDecision::Coalesced { .. } => {
                    p.held.insert(key, req);
                    return Ok(());
                }
                EditDecision::Unchanged => {
                    p.held.remove(&key);
                    return Ok(());
                }
            }
        }
        self.with_retry(|| self.client.edit_message_text(&req))
            .await
    }

    /// Show `text` as the status `key` in `chat_id`: the first call posts
    /// one message, later calls edit it (throttled and coalesced like any
    /// edit), so a busy work item updates one message instead of flooding
    /// the chat. Returns the status message's id.
    pub async fn status(&self, chat_id: i64, key: &str, text: &str) -> Result<i64, TelegramError> {
        let mut statuses = self.statuses.lock().await;
        let slot = (chat_id, key.to_string());
        if let Some(&message_id) = statuses.get(&slot) {
            drop(statuses);
            self.edit(chat_id, message_id, &Text::Plain(text.to_string()), None)
                .await?;
            return Ok(message_id);
        }
        let first = split_message(text, MAX_MESSAGE_UTF16)
            .into_iter()
            .next()
            .unwrap_or_default();
        let sent = self
            .send(chat_id, &Text::Plain(first.clone()), None)
            .await?;
        let message_id = sent.first().map_or(0, |m| m.message_id);
        // The post counts as the message's last edit for the throttle.
        self.pacing
            .lock()
            .await
            .edits
            .offer((chat_id, message_id), &first, Instant::now());
        statuses.insert(slot, message_id);
        Ok(message_id)
    }

    /// The status `key` is final: later calls post a new message.
    pub async fn end_status(&self, chat_id: i64, key: &str) -> Option<i64> {
        self.statuses
            .lock()
            .await
            .remove(&(chat_id, key.to_string()))
    }

    /// Send the held edits that are due; returns how many went out.
    pub async fn flush_due(&self) -> Result<usize, TelegramError> {
        let due: Vec<EditMessageText> = {
            let mut p = self.pacing.lock().await;
            let keys = p.edits.take_due(Instant::now());
            keys.into_iter()
                .filter_map(|(k, _)| p.held.remove(&k))
                .collect()
        };
        for req in &due {
            self.with_retry(|| self.client.edit_message_text(req))
                .await?;
        }
        Ok(due.len())
    }

    /// When the next held edit is due.
    pub async fn next_due(&self) -> Option<Instant> {
        self.pacing.lock().await.edits.next_due()
    }

    /// Send held edits as they fall due, until `shutdown` turns true (the
    /// daemon runs this as a task next to the poller).
    pub async fn run_flusher(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let wait = match self.next_due().await {
                Some(at) => at.saturating_duration_since(Instant::now()),
                // Nothing held: look again soon (an edit may be held meanwhile).
                None => FLUSH_IDLE_TICK,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait.min(FLUSH_IDLE_TICK)) => {}
                _ = shutdown.changed() => return,
            }
            if let Err(e) = self.flush_due().await {
                // The edit is dropped: a later status edit supersedes it.
                tracing::warn!(code = e.code().as_str(), error = %e, "telegram held edit failed");
            }
        }
    }

    /// Carry out one handler action.
    pub async fn execute(&self, action: &Action) -> Result<(), TelegramError> {
        match action {
            Action::Send {
                chat_id,
                text,
                keyboard,
            } => self.send(*chat_id, text, keyboard.as_ref()).await.map(drop),
            Action::Edit {
                chat_id,
                message_id,
                text,
                keyboard,
            } => {
                self.edit(*chat_id, *message_id, text, keyboard.as_ref())
                    .await
            }
            Action::EditKeyboard {
                chat_id,
                message_id,
                keyboard,
            } => {
                let req = EditMessageReplyMarkup {
                    chat_id: *chat_id,
                    message_id: *message_id,
                    reply_markup: keyboard.clone(),
                };
                self.with_retry(|| self.client.edit_message_reply_markup(&req))
                    .await
            }
            Action::AnswerCallback {
                callback_query_id,
                text,
            } => {
                let req = AnswerCallbackQuery {
                    callback_query_id: callback_query_id.clone(),
                    text: text.clone(),
                    show_alert: false,
                };
                self.with_retry(|| self.client.answer_callback_query(&req))
                    .await
            }
            Action::Delete {
                chat_id,
                message_id,
            } => {
                let req = DeleteMessage {
                    chat_id: *chat_id,
                    message_id: *message_id,
                };
                {
                    let mut p = self.pacing.lock().await;
                    p.edits.forget((*chat_id, *message_id));
                    p.held.remove(&(*chat_id, *message_id));
                }
                self.with_retry(|| self.client.delete_message(&req)).await
            }
        }
    }
}
