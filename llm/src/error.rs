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
    /// What answered is not an OpenAI-compatible chat API at all (an HTML
    /// page, plain text, JSON without `choices`): a wrong `base_url`, most
    /// often one without its `/v1`.
    #[error("the model server's answer is not a chat completion: {message}")]
    NotChatApi { message: String },
    /// The provider's API key variable is unset.
    #[error("environment variable {var} (API key of provider {provider}) is not set")]
    MissingKey { provider: String, var: String },
}

/// The most characters of a server's own error text kept in an error.
pub const MAX_SERVER_MESSAGE: usize = 300;

impl LlmError {
    /// The error with `key` and anything the secret detector finds taken
    /// out of the server's text: an endpoint may echo the key it was sent
    /// ("Incorrect API key provided: sk-…"), and this text reaches the log,
    /// the audit and the owner's reply.
    pub fn scrubbed(self, key: &str) -> LlmError {
        let clean = |message: String| {
            let message = if key.len() >= 8 {
                message.replace(key, "[redacted]")
            } else {
                message
            };
            // A server's error may echo the whole request (the prompt, the
            // text a gate checked): it reaches the log and the audit only
            // cut short.
            let message = silas_core::secrets::redact(&message).0;
            if message.chars().count() > MAX_SERVER_MESSAGE {
                format!(
                    "{}…",
                    silas_core::never_log::truncate_chars(&message, MAX_SERVER_MESSAGE)
                )
            } else {
                message
            }
        };
        match self {
            LlmError::RateLimited { attempts, message } => LlmError::RateLimited {
                attempts,
                message: clean(message),
            },
            LlmError::Api { status, message } => LlmError::Api {
                status,
                message: clean(message),
            },
            LlmError::Parse { message } => LlmError::Parse {
                message: clean(message),
            },
            LlmError::NotChatApi { message } => LlmError::NotChatApi {
                message: clean(message),
            },
            other => other,
        }
    }
}

impl LlmError {
    /// The error without any text the server wrote: what a warning in the
    /// log says (a server's error may echo the request — a gate's policy, a
    /// customer's message). The full, scrubbed text is logged at debug.
    pub fn summary(&self) -> String {
        match self {
            LlmError::RateLimited { attempts, .. } => {
                format!("rate limited by the model endpoint after {attempts} attempt(s)")
            }
            LlmError::Api { status, .. } => format!(
                "model API error{}",
                status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
            ),
            LlmError::Parse { .. } => "cannot parse the model response".to_owned(),
            LlmError::NotChatApi { .. } => {
                "the model server's answer is not a chat completion (check base_url)".to_owned()
            }
            other => other.to_string(),
        }
    }
}

impl Coded for LlmError {
    fn code(&self) -> ErrorCode {
        match self {
            LlmError::Timeout { .. } => ErrorCode::ELlmTimeout,
            LlmError::RateLimited { .. } => ErrorCode::ELlmRateLimited,
            LlmError::Api { .. } | LlmError::MissingKey { .. } => ErrorCode::ELlmApi,
            LlmError::Parse { .. } | LlmError::NotChatApi { .. } => ErrorCode::ELlmParse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echoed_key_is_taken_out_of_the_message() {
        let key = "local-KEY-0123456789";
        let e = LlmError::Api {
            status: Some(401),
            message: format!("Incorrect API key provided: {key}. Also sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD."),
        }
        .scrubbed(key);
        let text = e.to_string();
        assert!(!text.contains(key), "{text}");
        assert!(!text.contains("sk-proj-abcdefghijklmnop"), "{text}");
        assert!(text.contains("Incorrect API key provided"), "{text}");
        // A key too short to be told from ordinary words is left to the
        // detector, not replaced everywhere.
        let e = LlmError::Parse {
            message: "the answer is x".into(),
        }
        .scrubbed("x");
        assert_eq!(
            e.to_string(),
            "cannot parse the model response: the answer is x"
        );
    }

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
