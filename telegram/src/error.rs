//! Telegram transport errors, each with its `E_CHANNEL_*` / `E_CFG_*` code.
//! No variant ever carries a request URL (the token is in it).

use std::time::Duration;

use silas_core::{Coded, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum TelegramError {
    #[error("telegram configuration: {0}")]
    Config(String),
    /// 401/404 from the Bot API: the token is wrong or revoked.
    #[error("telegram rejected the bot token ({status}): {description}")]
    Unauthorized { status: u16, description: String },
    /// 429: Telegram asks us to wait.
    #[error("telegram rate limit: retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    /// 5xx: the Bot API (or a proxy in front of it) failed; retry with backoff.
    #[error("telegram server error {status}: {description}")]
    Server { status: u16, description: String },
    /// Any other refusal (400 bad request, 403 blocked by the user, …).
    #[error("telegram refused {method} ({status}): {description}")]
    Refused {
        method: &'static str,
        status: u16,
        description: String,
    },
    #[error("telegram request timed out")]
    Timeout,
    #[error("telegram transport failed: {0}")]
    Transport(String),
    #[error("telegram sent an unreadable reply to {method}: {detail}")]
    Decode {
        method: &'static str,
        detail: String,
    },
    /// The handler asked for the update to be retried.
    #[error("telegram update handler: {message}")]
    Handler { code: ErrorCode, message: String },
    #[error("telegram store: {0}")]
    Store(#[from] silas_storage::StoreError),
}

impl TelegramError {
    /// Worth retrying after a backoff (the update stays pending).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            TelegramError::RateLimited { .. }
                | TelegramError::Server { .. }
                | TelegramError::Timeout
                | TelegramError::Transport(_)
                | TelegramError::Handler { .. }
        )
    }
}

impl Coded for TelegramError {
    fn code(&self) -> ErrorCode {
        match self {
            TelegramError::Config(_) => ErrorCode::ECfgInvalid,
            TelegramError::Unauthorized { .. } => ErrorCode::EChannelAuth,
            TelegramError::RateLimited { .. } => ErrorCode::EChannelRateLimited,
            TelegramError::Server { .. } | TelegramError::Transport(_) => {
                ErrorCode::EChannelDisconnected
            }
            TelegramError::Timeout => ErrorCode::EChannelTimeout,
            TelegramError::Refused { .. } | TelegramError::Decode { .. } => {
                ErrorCode::EChannelProtocol
            }
            TelegramError::Handler { code, .. } => *code,
            TelegramError::Store(e) => e.code(),
        }
    }
}
