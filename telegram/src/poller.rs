//! The long-polling run loop and the [`Handler`] seam the daemon implements.
//!
//! Each step: handle what the store still has pending (in `update_id`
//! order), long-poll `getUpdates` from the stored offset, record every
//! received update durably, handle the new ones. Handling an update = count
//! the attempt, call the handler, carry out its actions through the
//! [`Outbox`], then mark it handled (which is what advances the offset). A
//! crash at any point leaves the update pending, so it is handled on restart;
//! an update Telegram sends again is recognised by `update_id`. The handler
//! sees the attempt number and keys its effects by `update_id`, so a
//! redelivery after a crash between its effect and the handled mark does not
//! act twice.
//!
//! Errors: 429 waits `retry_after`; 5xx, timeouts and transport failures back
//! off exponentially; a rejected token (401/404) pauses the loop for
//! minutes (growing to an hour) and is then tried again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{Recorded, TelegramUpdates};
use tokio::sync::watch;

use crate::client::BotClient;
use crate::error::TelegramError;
use crate::health::{ChannelHealth, ChannelState};
use crate::outbox::{Action, Outbox, RetryPolicy};
use crate::policy::secrets;
use crate::types::{Update, UpdateId};

/// The code of a [`HandleError`] that asks to be called again because the
/// queue is full: not counted as a failed attempt, retried after
/// [`BUSY_WAIT`].
pub const BUSY: ErrorCode = ErrorCode::EChannelRateLimited;
const BUSY_WAIT: Duration = Duration::from_secs(1);
/// The shortest step that found nothing new.
const MIN_EMPTY_STEP: Duration = Duration::from_secs(1);

/// One update handed to the handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub update: Update,
    /// 1 on first delivery; more means an earlier attempt may have run
    /// (a crash before the handled mark) — effects must be keyed by
    /// `update.update_id`.
    pub attempt: u32,
}

/// A handler failure. `retry`: leave the update pending and try again after
/// a backoff; otherwise it is marked handled (logged with its code).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandleError {
    pub code: ErrorCode,
    pub message: String,
    pub retry: bool,
}

/// Update in → actions out. Implemented by the daemon (identity via
/// `policy::identity`, inbox, cards); a test implements it directly.
pub trait Handler: Send + Sync {
    fn handle(
        &self,
        delivery: &Delivery,
    ) -> impl Future<Output = Result<Vec<Action>, HandleError>> + Send;

    /// `update_id` was given up after `attempts` tries (a poison update):
    /// the daemon audits it. Default: nothing beyond the poller's log line.
    fn abandoned(&self, update_id: u64, attempts: u32) {
        let _ = (update_id, attempts);
    }
}

/// A shared handler (the daemon keeps a handle to it).
impl<H: Handler> Handler for Arc<H> {
    fn handle(
        &self,
        delivery: &Delivery,
    ) -> impl Future<Output = Result<Vec<Action>, HandleError>> + Send {
        self.as_ref().handle(delivery)
    }

    fn abandoned(&self, update_id: u64, attempts: u32) {
        self.as_ref().abandoned(update_id, attempts)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct PollerConfig {
    /// `getUpdates` long-poll timeout.
    pub long_poll_secs: u32,
    /// Backoff of the loop between failed steps.
    pub backoff: RetryPolicy,
    /// An update whose handling was started this many times (crashes
    /// included) is marked handled unhandled: a poison update must not
    /// wedge the channel.
    pub max_attempts: u32,
    /// After the Bot API rejected the token (401/404): the first wait before
    /// asking again, doubled each time up to [`REJECTED_WAIT_MAX`]. A token
    /// fixed at BotFather, or a proxy's passing 404, then needs no restart.
    pub rejected_wait: Duration,
}

/// The longest wait between tries of a rejected token.
pub const REJECTED_WAIT_MAX: Duration = Duration::from_secs(3600);

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            long_poll_secs: 25,
            backoff: RetryPolicy::default(),
            max_attempts: 5,
            rejected_wait: Duration::from_secs(300),
        }
    }
}

pub struct Poller<H> {
    client: BotClient,
    updates: TelegramUpdates,
    outbox: Arc<Outbox>,
    handler: H,
    config: PollerConfig,
    health: Arc<ChannelHealth>,
}

impl<H: Handler> Poller<H> {
    pub fn new(
        client: BotClient,
        updates: TelegramUpdates,
        outbox: Arc<Outbox>,
        handler: H,
        config: PollerConfig,
    ) -> Self {
        Poller {
            client,
            updates,
            outbox,
            handler,
            config,
            health: Arc::default(),
        }
    }

    /// The loop's state after its latest step (for `/health`, `silas status`).
    pub fn health(&self) -> Arc<ChannelHealth> {
        self.health.clone()
    }

    /// Handle every pending update in order. Stops at the first one that
    /// must be retried (later ones wait: handling order is update order).
    pub async fn handle_pending(&self) -> Result<usize, TelegramError> {
        let mut handled = 0;
        for rec in self.updates.pending()? {
            let id = rec.update_id;
            let rec = self.updates.begin_attempt(id)?;
            if rec.attempts > self.config.max_attempts {
                tracing::warn!(
                    update_id = id,
                    attempts = rec.attempts,
                    "telegram update abandoned after repeated failed attempts"
                );
                self.handler.abandoned(id, rec.attempts);
            } else {
                match serde_json::from_str::<Update>(&rec.payload) {
                    Ok(update) => {
                        let delivery = Delivery {
                            update,
                            attempt: rec.attempts,
                        };
                        match self.handler.handle(&delivery).await {
                            Ok(actions) => {
                                for action in &actions {
                                    match self.outbox.execute(action).await {
                                        Ok(()) => {}
                                        Err(e) if e.is_transient() => return Err(e),
                                        // A refused reply (the user blocked the
                                        // bot, a deleted message) does not make
                                        // the update unhandled.
                                        Err(e) => {
                                            tracing::warn!(update_id = id, code = e.code().as_str(), error = %e, "telegram action refused")
                                        }
                                    }
                                }
                            }
                            Err(e) if e.retry => {
                                if e.code == BUSY {
                                    self.updates.undo_attempt(id)?;
                                }
                                return Err(TelegramError::Handler {
                                    code: e.code,
                                    message: e.message,
                                });
                            }
                            Err(e) => {
                                tracing::warn!(update_id = id, code = e.code.as_str(), error = %e, "telegram update failed");
                            }
                        }
                    }
                    Err(_) => {
                        tracing::warn!(update_id = id, "undecodable telegram update skipped");
                    }
                }
            }
            self.updates.mark_handled(id, Timestamp::now())?;
            handled += 1;
        }
        Ok(handled)
    }

    /// Long-poll once and record what arrived; returns how many were new.
    pub async fn poll_once(&self) -> Result<usize, TelegramError> {
        let offset = self.updates.offset()?;
        let raw = self
            .client
            .get_updates(offset, self.config.long_poll_secs)
            .await?;
        // The Bot API answered: the channel works (what follows may still
        // fail a step, which says so).
        self.health.set(ChannelState::Ok);
        let mut fresh = 0;
        for value in raw {
            let Ok(UpdateId { update_id }) = serde_json::from_value::<UpdateId>(value.clone())
            else {
                // Without an id it can be neither recorded nor confirmed.
                tracing::warn!("telegram update without update_id ignored");
                continue;
            };
            // What is stored is the typed update (unknown fields dropped),
            // secrets already redacted: the store is the first durable copy.
            let payload = match serde_json::from_value::<Update>(value) {
                Ok(mut update) => {
                    secrets::redact_update(&mut update);
                    serde_json::to_string(&update)
                }
                Err(_) => serde_json::to_string(&UpdateId { update_id }),
            }
            .map_err(|e| TelegramError::Decode {
                method: "getUpdates",
                detail: e.to_string(),
            })?;
            match self
                .updates
                .record(update_id, &payload, Timestamp::now(), Some(offset))?
            {
                Recorded::New => fresh += 1,
                Recorded::NewSequence => {
                    tracing::warn!(
                        update_id,
                        previous_offset = offset,
                        "telegram started a new update sequence (ids below the confirmed \
                         offset); following it"
                    );
                    fresh += 1;
                }
                Recorded::AlreadyPending | Recorded::AlreadyHandled | Recorded::BelowOffset => {}
            }
        }
        Ok(fresh)
    }

    /// One step: pending first, then a poll, then what it brought; returns
    /// how many updates the poll brought that were new.
    pub async fn step(&self) -> Result<usize, TelegramError> {
        self.handle_pending().await?;
        let fresh = self.poll_once().await?;
        if fresh > 0 {
            self.handle_pending().await?;
        }
        Ok(fresh)
    }

    /// Run until `shutdown` turns true. A rejected token is logged and
    /// tried again after [`PollerConfig::rejected_wait`] (growing): nothing
    /// works until the owner fixes it, and then it works without a restart.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), TelegramError> {
        let mut failures = 0u32;
        let mut rejected = 0u32;
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let started = tokio::time::Instant::now();
            let result = tokio::select! {
                r = self.step() => r,
                _ = shutdown.changed() => return Ok(()),
            };
            let wait = match result {
                Ok(fresh) => {
                    failures = 0;
                    rejected = 0;
                    // A long poll that came back at once with nothing new
                    // (a server not honouring the timeout, updates that
                    // cannot be recorded) must not spin.
                    if fresh > 0 || started.elapsed() >= MIN_EMPTY_STEP {
                        continue;
                    }
                    MIN_EMPTY_STEP.saturating_sub(started.elapsed())
                }
                Err(e @ TelegramError::Unauthorized { .. }) => {
                    let wait = RetryPolicy {
                        attempts: 0,
                        base: self.config.rejected_wait,
                        max: REJECTED_WAIT_MAX,
                    }
                    .backoff(rejected);
                    rejected = rejected.saturating_add(1);
                    self.health.set(ChannelState::TokenRejected);
                    tracing::error!(
                        code = %e.code(),
                        ?wait,
                        "telegram channel paused: {e}. Check channels.telegram.token; the web app \
                         keeps working, and the token is tried again"
                    );
                    wait
                }
                // A full queue is a wait, not a failure: try again soon
                // rather than after a growing backoff (the owner's next
                // message would wait behind it).
                Err(TelegramError::Handler { code, .. }) if code == BUSY => BUSY_WAIT,
                Err(e) => {
                    let wait = match &e {
                        TelegramError::RateLimited { retry_after } => *retry_after,
                        _ => self.config.backoff.backoff(failures),
                    };
                    tracing::warn!(code = e.code().as_str(), error = %e, ?wait, "telegram poll step failed");
                    failures = failures.saturating_add(1);
                    self.health.set(ChannelState::Failing {
                        failures,
                        code: e.code(),
                    });
                    wait
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
    }

    /// The backoff the loop would use after `failures` consecutive failures.
    pub fn backoff(&self, failures: u32) -> Duration {
        self.config.backoff.backoff(failures)
    }
}
