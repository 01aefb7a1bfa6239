//! Glue between the Telegram channel (`silas-telegram`) and the turn runtime
//! (issue #14). The transport, identity, rendering and text policies live in
//! `silas-telegram`; this module only sequences them against the Stream and
//! the store:
//!
//! * inbound ([`inbound`]): the poller hands each recorded update to the
//!   [`TelegramBridge`] (`Handler`): identity first (`admit`), then a message
//!   becomes an `InboundMessage` keyed by its `update_id` (accepted once even
//!   if a crash makes the poller hand it over again), a button press an
//!   answer checked against the card's live render (handle, chat, nonce) and
//!   then by the Stream and the ApprovalEngine like any other channel's;
//! * outbound ([`ChannelSink`]): replies, notices, cards (inline keyboards,
//!   each render recorded as a [`TelegramCardMessage`]) and one edited status
//!   message per work item;
//! * [`TelegramBridge::sweep`]: cards answered elsewhere or timed out lose
//!   their buttons; handled updates and old renders are pruned.
//!
//! The owner's chat is the owner's scope (`owner`), so the conversation is
//! the same one the web app shows and rehydrates across restarts; with a
//! chatbot goal, other chats are customer scopes `telegram:{chat_id}`.

mod inbound;
pub mod setup;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use silas_actors::approval::OwnerSessions;
use silas_actors::cards::CardTimeouts;
use silas_actors::channel::{BoxFuture, ChannelError, ChannelSink, Outbound};
use silas_actors::turn::OWNER_SCOPE;
use silas_core::{Coded, Timestamp};
use silas_storage::{
    CardAudience, PendingCard, Store, TelegramCardMessage, TelegramProgressMessage,
};
use silas_telegram::cards::{RenderContext, render};
use silas_telegram::policy::callback::CallbackSigner;
use silas_telegram::policy::identity::customer_scope;
use silas_telegram::status::{Check, is_final, work_status_text};
use silas_telegram::{Action, Outbox, RetryPolicy, TelegramError, TelegramSettings, Text};

/// The channel name on answers, messages and the signed token.
pub const TELEGRAM_CHANNEL: &str = "telegram";
/// The owner's connection id on this channel (registered as an owner
/// session: Telegram vouches for the user id the update names).
pub const OWNER_CONNECTION: &str = "tg:owner";
/// How long handled updates and resolved card renders are kept.
const KEEP_HANDLED: chrono::Duration = chrono::Duration::days(2);
/// How long a reply the Bot API refused for a moment keeps being retried.
const REDELIVERY_WINDOW: Duration = Duration::from_secs(30 * 60);
/// The background redelivery's backoff: 5 s, doubling to 5 min (its end is
/// the window, not a count).
const REDELIVERY: RetryPolicy = RetryPolicy {
    attempts: u32::MAX,
    base: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

/// Replies remembered for de-duplication (a replayed turn redelivers).
const REMEMBERED_REPLIES: usize = 1024;

pub struct TelegramBridge {
    args: TelegramBridgeArgs,
    delivered: Mutex<VecDeque<String>>,
    /// Cards an answer from this chat is being applied to right now. The
    /// sweeper leaves them alone: applying the answer removes the pending
    /// card before the render is closed, and the sweeper would otherwise
    /// close it first as "answered elsewhere".
    answering: Mutex<HashSet<String>>,
    /// Card renders on their way to the chat: the press on a button can
    /// arrive before `sendMessage` returns the message id the render is
    /// recorded with, and waits here rather than reading as stale.
    sending: Mutex<HashSet<String>>,
    sent: tokio::sync::Notify,
}

/// Marks a render handle as being sent until dropped (recorded or failed).
struct Sending<'a> {
    bridge: &'a TelegramBridge,
    handle: String,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if let Ok(mut set) = self.bridge.sending.lock() {
            set.remove(&self.handle);
        }
        self.bridge.sent.notify_waiters();
    }
}

/// How long a press waits for its card's render to be recorded.
const RENDER_WAIT: Duration = Duration::from_secs(10);

/// Marks a card as being answered here until dropped.
pub(crate) struct Answering<'a> {
    set: &'a Mutex<HashSet<String>>,
    request_id: String,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        if let Ok(mut set) = self.set.lock() {
            set.remove(&self.request_id);
        }
    }
}

pub struct TelegramBridgeArgs {
    pub store: Store,
    pub settings: TelegramSettings,
    pub signer: CallbackSigner,
    pub outbox: Arc<Outbox>,
    pub timeouts: CardTimeouts,
    /// A chatbot goal is active: other chats are customer scopes.
    pub chatbot_active: bool,
    /// Where the owner's devices reach the web app (Review and secure-form
    /// links).
    pub web_url: Option<String>,
}

/// A short random id (base64url of 8 bytes: 11 characters).
fn random_handle() -> Result<String, ChannelError> {
    use base64::Engine;
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| ChannelError::Disconnected(format!("no randomness: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// One audit entry (`data` must be a JSON object); a failed write is logged.
fn audit_to(store: &Store, event: &str, data: serde_json::Value) {
    let serde_json::Value::Object(data) = data else {
        return;
    };
    if let Err(e) = store.audit().log(event, data) {
        tracing::error!(code = %e.code(), "audit write failed: {e}");
    }
}

fn send_failed(e: TelegramError) -> ChannelError {
    ChannelError::Disconnected(format!("telegram: {e}"))
}

impl TelegramBridge {
    /// Registers the owner's connection with `owners` (the ApprovalEngine's
    /// record of owner-authenticated connections).
    pub fn new(args: TelegramBridgeArgs, owners: &OwnerSessions) -> Arc<TelegramBridge> {
        // The owner's chat is authenticated by Telegram (the bot token's
        // updates name the sender); `admit` decides per update whether the
        // sender is that owner before anything uses this connection.
        owners.authenticated(TELEGRAM_CHANNEL, OWNER_CONNECTION);
        Arc::new(TelegramBridge {
            args,
            delivered: Mutex::new(VecDeque::new()),
            answering: Mutex::new(HashSet::new()),
            sending: Mutex::new(HashSet::new()),
            sent: tokio::sync::Notify::new(),
        })
    }

    fn is_sending(&self, handle: &str) -> bool {
        self.sending.lock().is_ok_and(|set| set.contains(handle))
    }

    /// The recorded render `handle` names; a render still being sent is
    /// waited for (up to [`RENDER_WAIT`]).
    pub(crate) async fn render_of(&self, handle: &str) -> Option<TelegramCardMessage> {
        let read = || {
            self.args
                .store
                .records::<TelegramCardMessage>()
                .get(handle)
                .ok()
                .flatten()
        };
        let waited = tokio::time::timeout(RENDER_WAIT, async {
            loop {
                // Registered before the check, so a send finishing in
                // between still wakes this wait.
                let sent = self.sent.notified();
                tokio::pin!(sent);
                sent.as_mut().enable();
                if let Some(render) = read() {
                    return Some(render);
                }
                if !self.is_sending(handle) {
                    return None;
                }
                sent.await;
            }
        });
        waited.await.ok().flatten()
    }

    /// Holds `request_id` as being answered here (see `answering`).
    pub(crate) fn answering(&self, request_id: &str) -> Answering<'_> {
        if let Ok(mut set) = self.answering.lock() {
            set.insert(request_id.to_string());
        }
        Answering {
            set: &self.answering,
            request_id: request_id.to_string(),
        }
    }

    fn is_answering(&self, request_id: &str) -> bool {
        // A poisoned lock: assume an answer is in flight (the next sweep
        // closes the render if it is still open).
        self.answering
            .lock()
            .map_or(true, |set| set.contains(request_id))
    }

    pub fn outbox(&self) -> Arc<Outbox> {
        self.args.outbox.clone()
    }

    /// The chat a scope is shown in, if it is one of this channel's.
    fn chat_for_scope(&self, scope_id: &str) -> Option<i64> {
        if scope_id == OWNER_SCOPE {
            return Some(self.args.settings.owner.chat_id);
        }
        let chat: i64 = scope_id.strip_prefix("telegram:")?.parse().ok()?;
        (customer_scope(chat) == scope_id).then_some(chat)
    }

    /// The scope of a chat's owner or customer traffic.
    fn scope_of(&self, owner: bool, chat_id: i64) -> String {
        if owner {
            OWNER_SCOPE.to_string()
        } else {
            customer_scope(chat_id)
        }
    }

    fn audit(&self, event: &str, data: serde_json::Value) {
        audit_to(&self.args.store, event, data);
    }

    fn render_context<'a>(
        &'a self,
        chat_id: i64,
        handle: &'a str,
        nonce: &'a str,
    ) -> RenderContext<'a> {
        RenderContext {
            chat_id,
            handle,
            nonce,
            signer: &self.args.signer,
            max_approval_risk: self.args.settings.max_approval_risk,
            web_url: self.args.web_url.as_deref(),
        }
    }

    /// At start: the owner's cards already waiting (skill install cards
    /// offered while the daemon was stopped, cards from before a restart)
    /// are shown in the owner's chat, as the web app shows them when it
    /// connects. A card rendered there already keeps its message
    /// ([`Self::show_card`]).
    pub async fn show_waiting_cards(&self) {
        let cards = silas_actors::cards::waiting_cards(
            &self.args.store,
            OWNER_SCOPE,
            &self.args.timeouts,
            Timestamp::now(),
        );
        let chat_id = self.args.settings.owner.chat_id;
        for card in &cards {
            if let Err(e) = self.show_card(card, chat_id).await {
                tracing::warn!(request_id = %card.request_id, "waiting card not shown in telegram: {e}");
            }
        }
    }

    /// Deletes the "Still working…" messages a previous run left in chats
    /// (it died before their answers came; the answer, replayed, comes
    /// without them).
    pub async fn clear_stale_progress(&self) {
        let records = self.args.store.records::<TelegramProgressMessage>();
        let stale = match records.list() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("stale progress messages not read: {e}");
                return;
            }
        };
        for p in stale {
            let gone = Action::Delete {
                chat_id: p.chat_id,
                message_id: p.message_id,
            };
            if let Err(e) = self.args.outbox.execute(&gone).await {
                tracing::debug!("stale progress line not removed: {e}");
            }
            // Unless this run's own line for the same answer replaced it.
            let still_ours =
                matches!(records.get(&p.key), Ok(Some(r)) if r.message_id == p.message_id);
            if still_ours && let Err(e) = records.delete(&p.key) {
                tracing::warn!("stale progress record kept: {e}");
            }
        }
    }

    /// Records the progress line `message_id` for the answer to `reply_to`,
    /// once, so a restart can remove it if the answer never replaces it.
    fn remember_progress(&self, chat_id: i64, reply_to: &str, message_id: i64) {
        let records = self.args.store.records::<TelegramProgressMessage>();
        let key = progress_record_key(chat_id, reply_to);
        if matches!(records.get(&key), Ok(Some(r)) if r.message_id == message_id) {
            return;
        }
        let rec = TelegramProgressMessage {
            key,
            chat_id,
            message_id,
            sent_at: Timestamp::now(),
        };
        if let Err(e) = records.put(&rec) {
            tracing::warn!("progress line not recorded: {e}");
        }
    }

    /// Shows `card` in `chat_id` with fresh buttons and records the render.
    async fn show_card(&self, card: &PendingCard, chat_id: i64) -> Result<(), ChannelError> {
        let renders = self
            .args
            .store
            .records::<TelegramCardMessage>()
            .list()
            .map_err(|e| ChannelError::Disconnected(e.to_string()))?;
        // Redelivered (a restart, the executor re-announcing): the render
        // already in the chat still works.
        if renders
            .iter()
            .any(|r| r.request_id == card.request_id && r.chat_id == chat_id && r.outcome.is_none())
        {
            return Ok(());
        }
        let handle = random_handle()?;
        if let Ok(mut set) = self.sending.lock() {
            set.insert(handle.clone());
        }
        let _sending = Sending {
            bridge: self,
            handle: handle.clone(),
        };
        let nonce = silas_telegram::policy::callback::fresh_nonce()
            .map_err(|e| ChannelError::Disconnected(e.to_string()))?;
        let rendered = render(
            &card.request_id,
            &card.card,
            &self.render_context(chat_id, &handle, &nonce),
        )
        .map_err(|e| ChannelError::Disconnected(format!("card not renderable: {e}")))?;
        let sent = self
            .args
            .outbox
            .send(chat_id, &rendered.text, rendered.keyboard.as_ref())
            .await
            .map_err(send_failed)?;
        let Some(message) = sent.last() else {
            return Err(ChannelError::Disconnected("nothing was sent".into()));
        };
        self.args
            .store
            .records::<TelegramCardMessage>()
            .put(&TelegramCardMessage {
                handle,
                request_id: card.request_id.clone(),
                chat_id,
                message_id: message.message_id,
                nonce,
                sent_at: Timestamp::now(),
                outcome: None,
            })
            .map_err(|e| ChannelError::Disconnected(e.to_string()))?;
        Ok(())
    }

    /// Edit a card's message to its outcome (buttons removed) and record it,
    /// so no later press on it counts.
    async fn close_render(
        &self,
        mut render_rec: TelegramCardMessage,
        card: Option<&PendingCard>,
        outcome: &str,
    ) {
        render_rec.outcome = Some(outcome.to_string());
        if let Err(e) = self
            .args
            .store
            .records::<TelegramCardMessage>()
            .put(&render_rec)
        {
            tracing::warn!(code = %e.code(), "telegram card outcome not recorded: {e}");
        }
        let body = card.and_then(|c| {
            render(
                &c.request_id,
                &c.card,
                &self.render_context(render_rec.chat_id, &render_rec.handle, &render_rec.nonce),
            )
            .ok()
        });
        let text = match body.map(|r| r.text) {
            Some(Text::MarkdownV2(t)) => Text::MarkdownV2(format!(
                "{t}\n\n*{}*",
                silas_telegram::policy::text::escape_markdown_v2(outcome)
            )),
            Some(Text::Plain(t)) => Text::Plain(format!("{t}\n\n{outcome}")),
            None => Text::Plain(outcome.to_string()),
        };
        if let Err(e) = self
            .args
            .outbox
            .edit(render_rec.chat_id, render_rec.message_id, &text, None)
            .await
        {
            tracing::warn!(code = %e.code(), "telegram card message not edited: {e}");
        }
    }

    /// Cards resolved elsewhere (the web app, a timeout's safe default) lose
    /// their buttons here too; old records and handled updates are pruned.
    pub async fn sweep(&self) {
        let renders = match self.args.store.records::<TelegramCardMessage>().list() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(code = %e.code(), "telegram sweep: {e}");
                return;
            }
        };
        let now = Timestamp::now();
        let cutoff = now.plus(-KEEP_HANDLED);
        for r in renders {
            if r.outcome.is_some() {
                if r.sent_at < cutoff {
                    let _ = self
                        .args
                        .store
                        .records::<TelegramCardMessage>()
                        .delete(&r.handle);
                }
                continue;
            }
            let card = self
                .args
                .store
                .records::<PendingCard>()
                .get(&r.request_id)
                .ok()
                .flatten();
            let outcome = match &card {
                None => "Answered or closed elsewhere.",
                Some(c) if silas_actors::cards::is_expired(c, &self.args.timeouts, now) => {
                    "⏱ Timed out: the safe default applies."
                }
                Some(_) => continue,
            };
            // Checked after the card was read: if an answer here removed
            // it, that answer is still in flight, or it has finished and the
            // fresh record below carries its outcome.
            if self.is_answering(&r.request_id) {
                continue;
            }
            let fresh = self
                .args
                .store
                .records::<TelegramCardMessage>()
                .get(&r.handle)
                .ok()
                .flatten();
            let Some(fresh) = fresh.filter(|f| f.outcome.is_none()) else {
                continue;
            };
            self.close_render(fresh, card.as_ref(), outcome).await;
        }
        if let Err(e) = self.args.store.telegram_updates().prune_handled(cutoff) {
            tracing::warn!(code = %e.code(), "telegram updates not pruned: {e}");
        }
    }

    /// Runs [`Self::sweep`] every `every` until `stop` turns true.
    pub async fn run_sweeper(
        self: Arc<Self>,
        every: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => self.sweep().await,
                r = stop.changed() => if r.is_err() { return },
            }
        }
    }

    fn first_delivery(&self, reply_to: &str) -> bool {
        let Ok(mut seen) = self.delivered.lock() else {
            return true;
        };
        if seen.iter().any(|r| r == reply_to) {
            return false;
        }
        if seen.len() >= REMEMBERED_REPLIES {
            seen.pop_front();
        }
        seen.push_back(reply_to.to_string());
        true
    }

    /// A reply the Bot API could not take (429 past the outbox's retries, a
    /// 5xx, a dropped connection) is sent again in the background — on
    /// [`REDELIVERY`]'s backoff, for up to [`REDELIVERY_WINDOW`] — instead of
    /// being lost to an outage of a few seconds. Audited when it lands or is
    /// given up.
    fn redeliver_later(&self, chat_id: i64, reply_to: String, text: Text) {
        let outbox = self.args.outbox.clone();
        let store = self.args.store.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut attempts = 1u32;
            let outcome = loop {
                tokio::time::sleep(REDELIVERY.backoff(attempts - 1)).await;
                attempts += 1;
                match outbox.send(chat_id, &text, None).await {
                    Ok(_) => break "telegram.reply_redelivered",
                    Err(e) if e.is_transient() && started.elapsed() < REDELIVERY_WINDOW => {
                        tracing::info!(code = %e.code(), "telegram reply still not delivered: {e}");
                    }
                    Err(e) => {
                        tracing::warn!(code = %e.code(), "telegram reply given up: {e}");
                        break "telegram.reply_undelivered";
                    }
                }
            };
            audit_to(
                &store,
                outcome,
                serde_json::json!({"chat_id": chat_id, "reply_to": reply_to, "attempts": attempts}),
            );
        });
    }

    /// Whether this channel shows `out` at all (the multiplexer asks every
    /// channel; a reply goes only to the channel it came from).
    pub fn serves(&self, out: &Outbound) -> bool {
        match out {
            Outbound::Reply { connection_id, .. } | Outbound::Progress { connection_id, .. } => {
                connection_id.starts_with("tg:")
            }
            other => self.chat_for_scope(other.scope_id()).is_some(),
        }
    }
}

/// The stored record's key of the progress line in `chat_id` for `reply_to`.
fn progress_record_key(chat_id: i64, reply_to: &str) -> String {
    format!("{chat_id}:{reply_to}")
}

/// The outbox status key of the progress line for the message `reply_to`.
fn progress_key(reply_to: &str) -> String {
    format!("progress:{reply_to}")
}

impl ChannelSink for TelegramBridge {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let Some(chat_id) = self.chat_for_scope(out.scope_id()) else {
                return Err(ChannelError::Disconnected(format!(
                    "no telegram chat for scope {}",
                    out.scope_id()
                )));
            };
            match out {
                Outbound::Reply { reply_to, text, .. } => {
                    // The progress line of a slow model goes once the answer is there.
                    if let Some(message_id) = self
                        .args
                        .outbox
                        .end_status(chat_id, &progress_key(&reply_to))
                        .await
                    {
                        let gone = Action::Delete {
                            chat_id,
                            message_id,
                        };
                        if let Err(e) = self.args.outbox.execute(&gone).await {
                            tracing::debug!("progress line not removed: {e}");
                        }
                        let key = progress_record_key(chat_id, &reply_to);
                        if let Err(e) = self
                            .args
                            .store
                            .records::<TelegramProgressMessage>()
                            .delete(&key)
                        {
                            tracing::warn!("progress record kept: {e}");
                        }
                    }
                    if self.first_delivery(&reply_to) {
                        let text = Text::Plain(text);
                        if let Err(e) = self.args.outbox.send(chat_id, &text, None).await {
                            if e.is_transient() {
                                self.redeliver_later(chat_id, reply_to, text);
                            }
                            return Err(send_failed(e));
                        }
                    }
                    Ok(())
                }
                // One message per answer in progress, edited as time passes.
                Outbound::Progress { reply_to, text, .. } => {
                    let message_id = self
                        .args
                        .outbox
                        .status(chat_id, &progress_key(&reply_to), &text)
                        .await
                        .map_err(send_failed)?;
                    self.remember_progress(chat_id, &reply_to, message_id);
                    Ok(())
                }
                Outbound::OwnerNotice { text, .. } => self
                    .args
                    .outbox
                    .send(chat_id, &Text::Plain(text), None)
                    .await
                    .map(drop)
                    .map_err(send_failed),
                Outbound::Card { card } => {
                    // Owner cards only in the owner's chat; a customer chat
                    // sees only its own customer-audience cards.
                    let owner_chat = card.scope_id == OWNER_SCOPE;
                    if !owner_chat && card.audience != CardAudience::Customer {
                        return Err(ChannelError::Disconnected(
                            "owner cards are not shown in customer chats".into(),
                        ));
                    }
                    self.show_card(&card, chat_id).await
                }
                Outbound::WorkStatus { event } => {
                    let status = serde_json::to_value(event.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let checks: Vec<Check> = event
                        .verification
                        .iter()
                        .map(|c| Check {
                            name: c.name.clone(),
                            passed: c.passed,
                        })
                        .collect();
                    let text = work_status_text(&status, &event.summary, &checks);
                    self.args
                        .outbox
                        .status(chat_id, &event.work_item_id, &text)
                        .await
                        .map_err(send_failed)?;
                    if is_final(&status) {
                        self.args
                            .outbox
                            .end_status(chat_id, &event.work_item_id)
                            .await;
                    }
                    Ok(())
                }
            }
        })
    }
}
