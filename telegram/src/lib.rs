//! `silas-telegram`: the Telegram channel's transport (issue #14).
//!
//! * [`client::BotClient`] — a small typed Bot API client on reqwest
//!   (`getMe`, `getUpdates`, `sendMessage`, `editMessageText`,
//!   `editMessageReplyMarkup`, `answerCallbackQuery`, `deleteMessage`); the
//!   [`token::BotToken`] never reaches an error, a log or `Debug`.
//! * [`poller::Poller`] — long polling with updates recorded durably
//!   (`silas_storage::TelegramUpdates`) before they are handled, the offset
//!   advanced only after, backoff on 5xx and 429 `retry_after`; the daemon
//!   plugs in through [`poller::Handler`] (update in → [`outbox::Action`]s out).
//! * [`outbox::Outbox`] — sends within Telegram's limits (splitting, per-chat
//!   pacing, throttled and coalesced edits).
//! * [`policy`] — pure policies: identity, text splitting and MarkdownV2
//!   escaping, throttles, callback-data MACs; [`admit`] runs identity with
//!   the durable once-per-chat refusal.
//!
//! * [`health::ChannelHealth`] — the poll loop's latest outcome, for
//!   `/health` and `silas status`.
//! * [`cards`] — every owner card as a MarkdownV2 message with an inline
//!   keyboard, and presses / typed answers mapped back to typed answers.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod admit;
pub mod cards;
pub mod client;
pub mod error;
pub mod health;
mod mend;
pub mod outbox;
pub mod policy;
pub mod poller;
pub mod settings;
pub mod status;
pub mod token;
pub mod types;

pub use admit::{Admission, admit};
pub use client::BotClient;
pub use error::TelegramError;
pub use health::{ChannelHealth, ChannelState};
pub use outbox::{Action, Outbox, RetryPolicy, Text};
pub use poller::{Delivery, HandleError, Handler, Poller, PollerConfig};
pub use settings::TelegramSettings;
pub use token::BotToken;
