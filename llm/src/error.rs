//! Errors of the model layer, each mapped to one `E_LLM_*` taxonomy code
//! (§18.1: bounded retry, then fallback).
//!
//! Messages never contain API keys: the provider reads the key from the
//! environment and hands it to the HTTP client only; errors carry status
//! codes and the server's error text.

use silas_core::{Coded, ErrorCode};

/// A failed model call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The request did not complete within the configured timeout.
    #[error("model request timed out after {seconds}s")]
    Timeout { seconds: u64 },
    /// 429 from the endpoint, still after the configured retries.
    #[error("rate limited by the model endpoint after {attempts} attempt(s): {message}")]
    RateLimited { attempts: u32, message: String },
    /// Any other API failure (non-2xx status, connection error, bad request).
    #[error("model API error{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Api {
        status: Option<u16>,
        message: String,
    },
    /// The endpoint answered, but not with a usable chat completion.
    #[error("cannot parse the model response: {message}")]
    Parse { message: String },
    /// The provider's API key variable is unset.
    #[error("environment variable {var} (API key of provider {provider}) is not set")]
    MissingKey { provider: String, var: String },
}

impl Coded for LlmError {
    fn code(&self) -> ErrorCode {
        match self {
            LlmError::Timeout { .. } => ErrorCode::ELlmTimeout,
            LlmError::RateLimited { .. } => ErrorCode::ELlmRateLimited,
            LlmError::Api { .. } | LlmError::MissingKey { .. } => ErrorCode::ELlmApi,
            LlmError::Parse { .. } => ErrorCode::ELlmParse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let cases = [
            (LlmError::Timeout { seconds: 1 }, "E_LLM_TIMEOUT"),
            (
                LlmError::RateLimited {
                    attempts: 2,
                    message: "x".into(),
                },
                "E_LLM_RATE_LIMITED",
            ),
            (
                LlmError::Api {
                    status: Some(500),
                    message: "x".into(),
                },
                "E_LLM_API",
            ),
            (
                LlmError::MissingKey {
                    provider: "p".into(),
                    var: "V".into(),
                },
                "E_LLM_API",
            ),
            (
                LlmError::Parse {
                    message: "x".into(),
                },
                "E_LLM_PARSE",
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.code().as_str(), code, "{e}");
        }
        let e = LlmError::Api {
            status: Some(503),
            message: "down".into(),
        };
        assert_eq!(e.to_string(), "model API error (HTTP 503): down");
    }
}
