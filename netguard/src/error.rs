//! Guard and fetch errors and their §18.1 taxonomy codes.
//!
//! * `E_GATE_BLOCKED` — a policy refusal: host not allowlisted, method not
//!   allowed, blocked port, blocked address (private, metadata, …), userinfo
//!   in the URL, a scheme other than http(s), an https→http redirect. Nothing
//!   was sent to the refused destination.
//! * `E_SANDBOX_FAILED` — the fetch itself failed: unparsable URL or
//!   arguments, DNS failure or empty answer, connection/protocol errors, a
//!   redirect without a usable `Location`, too many redirects.
//! * `E_SANDBOX_TIMEOUT` — resolution or the whole fetch ran out of time.
//! * `E_SANDBOX_UNAVAILABLE` — the HTTP client could not be built (TLS setup).
//!
//! `Display` texts may reach model context through `ExecutionResult.error`,
//! so they name the host and the range but never the resolved IP addresses
//! (those go to metadata only).

use std::net::IpAddr;

use silas_core::{Coded, ErrorCode};

use crate::policy::{BlockedRange, Method};

/// Why [`crate::NetworkGuard::check`] refused a URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    #[error("scheme {0:?} is not allowed (only http and https)")]
    UnsupportedScheme(String),
    #[error("URLs with user credentials (user:password@) are not allowed")]
    UserInfo,
    #[error("port {0} is blocked")]
    BlockedPort(u16),
    #[error("host {0} is not in the web_fetch allowlist")]
    HostNotAllowed(String),
    #[error("method {method} is not allowed for host {host}")]
    MethodNotAllowed { method: Method, host: String },
    #[error("host {host} resolves to a blocked address ({range})")]
    BlockedAddress {
        host: String,
        addr: IpAddr,
        range: BlockedRange,
    },
    #[error("could not resolve host {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("host {0} has no addresses")]
    NoAddresses(String),
    #[error("resolving host {0} timed out")]
    ResolveTimeout(String),
}

impl Coded for GuardError {
    fn code(&self) -> ErrorCode {
        use GuardError::*;
        match self {
            UnsupportedScheme(_)
            | UserInfo
            | BlockedPort(_)
            | HostNotAllowed(_)
            | MethodNotAllowed { .. }
            | BlockedAddress { .. } => ErrorCode::EGateBlocked,
            InvalidUrl(_) | Resolve { .. } | NoAddresses(_) => ErrorCode::ESandboxFailed,
            ResolveTimeout(_) => ErrorCode::ESandboxTimeout,
        }
    }
}

/// Why a [`crate::GuardedFetcher`] fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("invalid web_fetch arguments: {0}")]
    InvalidArgs(String),
    #[error("{0}")]
    Guard(GuardError),
    #[error("redirect refused: {0}")]
    RedirectRefused(GuardError),
    #[error("redirect from https to http refused")]
    RedirectDowngrade,
    #[error("redirect with an invalid Location header")]
    BadRedirect,
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("the connection did not go to the validated address")]
    PinViolation,
    #[error("HTTP client unavailable: {0}")]
    Client(String),
    /// `detail` (the client's error chain) is for metadata/logs only.
    #[error("{stage} failed")]
    Http { stage: &'static str, detail: String },
    #[error("web_fetch timed out")]
    Timeout,
}

impl Coded for FetchError {
    fn code(&self) -> ErrorCode {
        use FetchError::*;
        match self {
            Guard(g) | RedirectRefused(g) => g.code(),
            RedirectDowngrade | PinViolation => ErrorCode::EGateBlocked,
            InvalidArgs(_) | BadRedirect | TooManyRedirects(_) | Http { .. } => {
                ErrorCode::ESandboxFailed
            }
            Client(_) => ErrorCode::ESandboxUnavailable,
            Timeout => ErrorCode::ESandboxTimeout,
        }
    }
}

impl FetchError {
    /// The guard refusal inside, if any (for metadata: blocked address/range).
    pub fn guard_error(&self) -> Option<&GuardError> {
        match self {
            FetchError::Guard(g) | FetchError::RedirectRefused(g) => Some(g),
            _ => None,
        }
    }

    pub(crate) fn http(stage: &'static str, e: &reqwest::Error) -> Self {
        if e.is_timeout() {
            return FetchError::Timeout;
        }
        let mut detail = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            src = s.source();
        }
        FetchError::Http { stage, detail }
    }
}
