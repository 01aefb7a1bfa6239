//! The provider abstraction: a chat-completion request/response in our own
//! small types, the [`Provider`] trait every backend implements (the
//! OpenAI-compatible HTTP one in [`crate::openai`], the rule-based one in
//! [`crate::offline`]), the retry policy, and the cost arithmetic that turns
//! reported usage into [`BudgetUsed`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use silas_core::config::{LlmConfig, ModelPrice};
use silas_core::model::work::BudgetUsed;

use crate::error::LlmError;

/// A boxed, sendable future (keeps [`Provider`] and
/// [`ToolExecutor`](crate::tool_loop::ToolExecutor) object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One tool invocation requested by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call, echoed back with the result.
    pub id: String,
    pub name: String,
    /// The raw JSON arguments text as the model produced it.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments parsed as JSON (`Null` when they are not JSON).
    pub fn arguments_json(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or(Value::Null)
    }
}

/// One message of the conversation sent to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChatMessage {
    System(String),
    User(String),
    /// An assistant turn: text and/or tool calls.
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        call_id: String,
        content: String,
    },
}

/// A tool as offered to the model (OpenAI function tool).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object; shared, since a toolset hands
    /// out its tools once per layer and per turn.
    pub parameters: Arc<Value>,
}

/// Structured-output request: the JSON Schema the answer must follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponseSchema {
    /// `[A-Za-z0-9_-]{1,64}`; the offline responder dispatches on it.
    pub name: String,
    /// Shared, not copied: the schemas are constants, and a copy of the
    /// tree per model call (and its drop) was a tenth of a loaded daemon's
    /// CPU (issue #19).
    pub schema: Arc<Value>,
}

/// One chat-completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Provider-side model id (the part after `provider:`).
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub response_schema: Option<ResponseSchema>,
    pub max_completion_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

impl ChatRequest {
    /// The bytes of text the request's messages carry (contents and
    /// tool-call arguments; the tool and schema definitions are left out),
    /// for [`Usage::floored`].
    pub fn text_bytes(&self) -> u64 {
        let bytes: usize = self
            .messages
            .iter()
            .map(|m| match m {
                ChatMessage::System(t) | ChatMessage::User(t) => t.len(),
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } => content.as_ref().map_or(0, String::len) + calls_bytes(tool_calls),
                ChatMessage::Tool { content, .. } => content.len(),
            })
            .sum();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// A request with a system prompt and one user message.
    pub fn new(
        model: impl Into<String>,
        system: impl Into<String>,
        user: impl Into<String>,
    ) -> Self {
        ChatRequest {
            model: model.into(),
            messages: vec![
                ChatMessage::System(system.into()),
                ChatMessage::User(user.into()),
            ],
            tools: Vec::new(),
            response_schema: None,
            max_completion_tokens: None,
            temperature: None,
        }
    }
}

/// Token usage as reported by the endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Bytes per token of an estimate: tokenizers average about four
/// characters a token on English prose and fewer on code and JSON.
pub const BYTES_PER_TOKEN: u64 = 4;

impl Usage {
    /// What a call that sent `sent` bytes of text and got `received` back
    /// counts: the server's figures, except that a figure of 0 (a server
    /// that leaves `usage` out, as many local servers and proxies do)
    /// counts as an estimate at [`BYTES_PER_TOKEN`]. Budgets stop work on
    /// these figures: with none reported, a task ran its attempts out
    /// at "0 of 20000 tokens".
    pub fn floored(self, sent: u64, received: u64) -> Usage {
        let floor = |reported: u64, bytes: u64| {
            if reported == 0 {
                bytes.div_ceil(BYTES_PER_TOKEN)
            } else {
                reported
            }
        };
        Usage {
            prompt_tokens: floor(self.prompt_tokens, sent),
            completion_tokens: floor(self.completion_tokens, received),
        }
    }

    pub fn total(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

fn calls_bytes(calls: &[ToolCall]) -> usize {
    calls.iter().map(|c| c.name.len() + c.arguments.len()).sum()
}

/// The first choice of a chat completion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatResponse {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

impl ChatResponse {
    /// The bytes of text the answer carries (content and tool calls), for
    /// [`Usage::floored`].
    pub fn text_bytes(&self) -> u64 {
        let bytes = self.content.as_ref().map_or(0, String::len) + calls_bytes(&self.tool_calls);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// A chat-completion backend. Object-safe so agents hold `Arc<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// `openrouter`, `ollama`, `offline`, …
    fn name(&self) -> &str;
    /// True only for the rule-based offline responder (it is not an LLM and
    /// must never be presented as one).
    fn is_offline(&self) -> bool {
        false
    }
    /// Performs one chat completion, including the provider's own bounded
    /// retries.
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;
    /// The model's context window in tokens, when configured or learned
    /// ([`Self::discover_context_window`]); prompts are fitted to it.
    fn context_window(&self) -> Option<u64> {
        None
    }
    /// Learns the context window of `model` from the server's model
    /// listing when none is configured (once; start-up does not wait).
    fn discover_context_window<'a>(&'a self, _model: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Timeout and bounded exponential backoff for one provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub timeout: Duration,
    pub max_retries: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl RetryPolicy {
    pub fn from_config(llm: &LlmConfig) -> Self {
        RetryPolicy {
            timeout: Duration::from_secs(llm.timeout_seconds),
            max_retries: llm.max_retries,
            backoff_initial: Duration::from_millis(llm.backoff_initial_ms),
            backoff_max: Duration::from_millis(llm.backoff_max_ms),
        }
    }

    /// [`Self::from_config`] with the provider's own call timeout
    /// (`providers.<name>.timeout_seconds`), when it sets one: CPU
    /// inference on a home server is slower than any hosted API.
    pub fn for_endpoint(llm: &LlmConfig, endpoint: &silas_core::config::ModelEndpoint) -> Self {
        let mut p = Self::from_config(llm);
        if let Some(t) = endpoint.timeout_seconds {
            p.timeout = Duration::from_secs(t);
        }
        p
    }

    /// Delay before retry number `retry` (0-based): `initial · 2^retry`,
    /// capped at `backoff_max`. Deterministic (no jitter) so tests can rely
    /// on it; one daemon makes few concurrent calls per endpoint.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.backoff_initial
            .checked_mul(factor)
            .unwrap_or(self.backoff_max)
            .min(self.backoff_max)
    }
}

/// Whether a failed attempt is worth retrying: 429, 5xx and connection-level
/// failures (no status) are; timeouts are not (the caller's latency budget is
/// already spent), nor are other 4xx (retrying a bad request cannot help).
pub fn is_retryable(err: &LlmError) -> bool {
    match err {
        LlmError::RateLimited { .. } => true,
        LlmError::Api { status: None, .. } => true,
        LlmError::Api {
            status: Some(s), ..
        } => *s == 429 || (500..=599).contains(s),
        LlmError::Timeout { .. }
        | LlmError::Parse { .. }
        | LlmError::NotChatApi { .. }
        | LlmError::MissingKey { .. } => false,
    }
}

/// USD cost of `usage` at `price` (per million tokens).
pub fn cost_usd(price: Option<&ModelPrice>, usage: Usage) -> f64 {
    match price {
        None => 0.0,
        Some(p) => {
            // u64 → f64 is exact below 2^53 tokens.
            (usage.prompt_tokens as f64 * p.input_per_mtok_usd
                + usage.completion_tokens as f64 * p.output_per_mtok_usd)
                / 1_000_000.0
        }
    }
}

/// Adds one call's tokens and cost to a work item's consumption.
pub fn charge(used: &mut BudgetUsed, usage: Usage, cost: f64) {
    used.tokens = used.tokens.saturating_add(usage.total());
    used.cost_usd += cost;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            timeout: Duration::from_secs(1),
            max_retries: 5,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = policy();
        let table = [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (10, 1000),
            (40, 1000),
        ];
        for (retry, ms) in table {
            assert_eq!(p.backoff(retry), Duration::from_millis(ms), "retry {retry}");
        }
    }

    #[test]
    fn retryable_classification() {
        let api = |s: Option<u16>| LlmError::Api {
            status: s,
            message: String::new(),
        };
        let table: &[(LlmError, bool)] = &[
            (api(Some(429)), true),
            (api(Some(500)), true),
            (api(Some(503)), true),
            (api(None), true),
            (api(Some(400)), false),
            (api(Some(401)), false),
            (api(Some(404)), false),
            (LlmError::Timeout { seconds: 1 }, false),
            (
                LlmError::Parse {
                    message: String::new(),
                },
                false,
            ),
        ];
        for (e, want) in table {
            assert_eq!(is_retryable(e), *want, "{e:?}");
        }
    }

    #[test]
    fn cost_math() {
        let price = ModelPrice {
            input_per_mtok_usd: 3.0,
            output_per_mtok_usd: 15.0,
        };
        let table = [
            ((0, 0), 0.0),
            ((1_000_000, 0), 3.0),
            ((0, 1_000_000), 15.0),
            ((1000, 500), 0.0105),
        ];
        for ((p, c), want) in table {
            let u = Usage {
                prompt_tokens: p,
                completion_tokens: c,
            };
            assert!((cost_usd(Some(&price), u) - want).abs() < 1e-12, "{p}/{c}");
        }
        let u = Usage {
            prompt_tokens: 10,
            completion_tokens: 10,
        };
        assert_eq!(cost_usd(None, u), 0.0, "unpriced models cost 0");
        let mut used = BudgetUsed::default();
        charge(&mut used, u, 0.5);
        charge(&mut used, u, 0.25);
        assert_eq!(used.tokens, 40);
        assert!((used.cost_usd - 0.75).abs() < 1e-12);
    }

    /// A server that reports no usage is counted by estimate; a reported
    /// figure is kept.
    #[test]
    fn usage_has_a_floor_from_the_text_sent_and_received() {
        let u = |p, c| Usage {
            prompt_tokens: p,
            completion_tokens: c,
        };
        let cases = [
            // (reported, sent bytes, received bytes) → counted
            (u(0, 0), 4_000, 400, u(1_000, 100)),
            (u(1, 1), 4_000, 400, u(1, 1)),
            (u(1_200, 90), 4_000, 400, u(1_200, 90)),
            (u(900, 0), 4_000, 3, u(900, 1)),
            (u(0, 0), 0, 0, u(0, 0)),
        ];
        for (reported, sent, received, want) in cases {
            assert_eq!(reported.floored(sent, received), want, "{reported:?}");
        }
        let req = ChatRequest {
            messages: vec![
                ChatMessage::System("abcd".into()),
                ChatMessage::Assistant {
                    content: Some("xy".into()),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "ls".into(),
                        arguments: "{}".into(),
                    }],
                },
                ChatMessage::Tool {
                    call_id: "c1".into(),
                    content: "out".into(),
                },
            ],
            ..ChatRequest::new("m", "", "")
        };
        assert_eq!(req.text_bytes(), 4 + 2 + 2 + 2 + 3);
    }
}
