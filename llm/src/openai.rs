//! [`OpenAiProvider`]: any OpenAI-compatible chat-completions endpoint
//! (OpenRouter, OpenAI, Ollama, llama.cpp, vLLM) through async-openai.
//!
//! Each attempt runs under the configured timeout (`E_LLM_TIMEOUT`, not
//! retried); 429, 5xx and connection errors are retried with bounded
//! exponential backoff ([`RetryPolicy`]), then reported as
//! `E_LLM_RATE_LIMITED` / `E_LLM_API`. A 429 with `retry-after` waits the
//! server's delay instead, or gives up at once when it is too long
//! ([`crate::ratelimit`]).
//!
//! Tools follow the provider's [`ToolNegotiator`] (see
//! [`crate::toolprompt`]): rejected `tools` make an `auto` provider offer
//! them in the prompt from then on; a call written as text is read back.
//!
//! Structured output follows the provider's [`Negotiator`] (see
//! [`crate::negotiate`]): a `response_format` the server rejects makes an
//! `auto` provider step down a mode and resend at once (not counted as a
//! retry); it is never resent unchanged.
//!
//! The API key is read once from the environment variable the provider names
//! and handed to async-openai only. async-openai's own environment defaults
//! (`OPENAI_API_KEY`, `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`) are overridden so
//! one provider's credentials can never be sent to another's endpoint.

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{ChatCompletionMessageToolCalls, CreateChatCompletionResponse};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use silas_core::config::{EnvSource, ModelEndpoint};

use crate::error::LlmError;
use crate::negotiate::{
    EventSink, LlmEvent, ModeDowngrade, Negotiator, StepDown, WireMode, rejects_response_format,
};
use crate::provider::{
    BoxFuture, ChatRequest, ChatResponse, Provider, RetryPolicy, ToolCall, Usage, is_retryable,
};
use crate::ratelimit::{RateLimitResponse, RateLimitService, wait_for};
use crate::toolprompt::{
    ToolModeDowngrade, ToolNegotiator, ToolWire, read_text_calls, rejects_tools,
};
use crate::wire::{WireBody, wire_body};

/// An OpenAI-compatible HTTP provider.
pub struct OpenAiProvider {
    name: String,
    client: Client<OpenAIConfig>,
    policy: RetryPolicy,
    /// The structured-output mode, negotiated for the process.
    negotiator: Negotiator,
    /// How tools are offered (native or in the prompt), for the process.
    tool_negotiator: ToolNegotiator,
    /// Where mode downgrades are reported (the daemon's audit log).
    events: Option<EventSink>,
    /// The model's context window (`providers.<name>.context_window`, or
    /// learned from `GET /models`); 0 while unknown.
    window: AtomicU64,
    http: reqwest::Client,
    /// The API key, only to take it out of the server's error text (a
    /// server may echo what it was sent).
    key: String,
    /// `providers.<name>.temperature`, for requests that set none.
    temperature: Option<f32>,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the client (its config holds the key).
        f.debug_struct("OpenAiProvider")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// Builds a provider for a resolved endpoint, reading its key from `env`.
    /// A provider that names a key variable requires it to be set.
    pub fn from_endpoint(
        endpoint: &ModelEndpoint,
        env: &dyn EnvSource,
        policy: RetryPolicy,
    ) -> Result<Self, LlmError> {
        let key = match &endpoint.api_key_env {
            None => String::new(),
            Some(var) => match env.var(var) {
                Some(k) if !k.trim().is_empty() => k.trim().to_owned(),
                _ => {
                    return Err(LlmError::MissingKey {
                        provider: endpoint.provider.clone(),
                        var: var.clone(),
                    });
                }
            },
        };
        // async-openai builds the Authorization header with `unwrap`; refuse a
        // key that could not be a header value instead of panicking later.
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(LlmError::Api {
                status: None,
                message: format!(
                    "the API key in {} contains characters not allowed in an HTTP header",
                    endpoint.api_key_env.as_deref().unwrap_or("?")
                ),
            });
        }
        let config = OpenAIConfig::new()
            .with_api_base(endpoint.base_url.trim_end_matches('/'))
            .with_api_key(key.clone())
            .with_org_id("")
            .with_project_id("");
        // One HTTP client, built here: reqwest has no crypto backend of its
        // own (`rustls-no-provider`), and async-openai's `with_config` /
        // `ReqwestService::default()` would build theirs with a panicking
        // `Client::new()`.
        crate::tls::ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| LlmError::Api {
                status: None,
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(OpenAiProvider {
            name: endpoint.provider.clone(),
            // async-openai's default executor retries 429/5xx on its own;
            // our plain service leaves retrying to our bounded policy, so a
            // call makes exactly the attempts `RetryPolicy` allows, and it
            // keeps a 429's `retry-after` header.
            client: Client::build(http.clone(), config)
                .with_http_service(RateLimitService::new(http.clone())),
            policy,
            negotiator: Negotiator::new(endpoint.structured_output),
            tool_negotiator: ToolNegotiator::new(endpoint.tool_calling),
            events: None,
            window: AtomicU64::new(endpoint.context_window.unwrap_or(0)),
            http,
            key,
            temperature: endpoint.temperature.map(|t| t as f32),
        })
    }

    /// Reports [`LlmEvent`]s (mode downgrades) to `sink`.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// The structured-output mode the next request uses.
    pub fn structured_mode(&self) -> WireMode {
        self.negotiator.mode()
    }

    /// How the next request offers tools.
    pub fn tool_mode(&self) -> ToolWire {
        self.tool_negotiator.mode()
    }

    /// One request. A failure comes with the server's `retry-after`, if it
    /// sent one (only 429s carry it here).
    async fn attempt(
        &self,
        request: &WireBody<'_>,
    ) -> Result<ChatResponse, (LlmError, Option<Duration>)> {
        let chat = self.client.chat();
        let call = chat.create_byot::<&WireBody<'_>, CreateChatCompletionResponse>(request);
        match tokio::time::timeout(self.policy.timeout, call).await {
            Err(_) => Err((
                LlmError::Timeout {
                    seconds: self.policy.timeout.as_secs(),
                },
                None,
            )),
            Ok(Err(e)) => {
                let (e, retry_after) = map_error(e);
                Err((e.scrubbed(&self.key), retry_after))
            }
            Ok(Ok(resp)) => from_response(resp).map_err(|e| (e, None)),
        }
    }

    async fn complete_with_retries(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let tempered;
        let request = match (request.temperature, self.temperature) {
            (None, Some(t)) => {
                tempered = ChatRequest {
                    temperature: Some(t),
                    ..request.clone()
                };
                &tempered
            }
            _ => request,
        };
        let mut mode = self.negotiator.mode();
        let mut tools = self.tool_negotiator.mode();
        let mut wire = wire_body(request, mode, tools);
        let mut retry = 0u32;
        // The call's deadline: a `retry-after` wait must leave room for
        // the request after it.
        let deadline = Instant::now() + self.policy.timeout;
        loop {
            let (err, retry_after) = match self.attempt(&wire).await {
                Ok(mut r) => {
                    r.usage = r.usage.floored(request.text_bytes(), r.text_bytes());
                    return Ok(read_text_calls(r, &request.messages, &request.tools, tools));
                }
                Err(failure) => failure,
            };
            match err {
                // Checked first: a rejected response_format is never
                // resent unchanged, even on a retryable 5xx.
                e if request.response_schema.is_some() && rejects_response_format(&e) => {
                    mode = match self.negotiator.step_down(mode) {
                        StepDown::Changed(next) => {
                            self.report_downgrade(mode, next, &e);
                            next
                        }
                        StepDown::AlreadyLower(now) => now,
                        StepDown::Exhausted => return Err(e),
                    };
                    wire = wire_body(request, mode, tools);
                }
                // Likewise a rejected `tools`: an `auto` provider offers
                // them in the prompt from now on; a fixed one gives up.
                e if !request.tools.is_empty()
                    && tools == ToolWire::Native
                    && rejects_tools(&e) =>
                {
                    match self.tool_negotiator.step_down() {
                        Some(true) => self.report_tool_downgrade(&e),
                        Some(false) => {}
                        None => return Err(e),
                    }
                    tools = ToolWire::Prompt;
                    wire = wire_body(request, mode, tools);
                }
                // The server said how long to wait: wait that long when it
                // is short and fits the call's time, else give up now so a
                // chain moves on at once (no backoff on top of its delay).
                LlmError::Api {
                    status: Some(429),
                    message,
                } if retry_after.is_some() => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    let wait = retry_after
                        .and_then(|d| wait_for(d, remaining))
                        .filter(|_| retry < self.policy.max_retries);
                    let Some(delay) = wait else {
                        return Err(LlmError::RateLimited {
                            attempts: retry + 1,
                            message,
                        });
                    };
                    tracing::warn!(
                        provider = %self.name,
                        retry = retry + 1,
                        delay_ms = delay.as_millis() as u64,
                        "rate limited; waiting the server's retry-after"
                    );
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
                e if is_retryable(&e) && retry < self.policy.max_retries => {
                    let delay = self.policy.backoff(retry);
                    tracing::warn!(
                        provider = %self.name,
                        retry = retry + 1,
                        delay_ms = delay.as_millis() as u64,
                        error = %e.summary(),
                        "model call failed; retrying"
                    );
                    tracing::debug!(provider = %self.name, "model call failure in full: {e}");
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
                LlmError::Api {
                    status: Some(429),
                    message,
                } => {
                    return Err(LlmError::RateLimited {
                        attempts: retry + 1,
                        message,
                    });
                }
                e => return Err(e),
            }
        }
    }
}

impl OpenAiProvider {
    fn report_tool_downgrade(&self, error: &LlmError) {
        let status = match error {
            LlmError::Api { status, .. } => *status,
            _ => None,
        };
        tracing::warn!(
            provider = %self.name,
            "the model server rejected tools; tools are offered in the prompt from now on"
        );
        if let Some(sink) = &self.events {
            sink(LlmEvent::ToolModeDowngraded(ToolModeDowngrade {
                provider: self.name.clone(),
                from: ToolWire::Native,
                to: ToolWire::Prompt,
                status,
            }));
        }
    }

    fn report_downgrade(&self, from: WireMode, to: WireMode, error: &LlmError) {
        let status = match error {
            LlmError::Api { status, .. } => *status,
            _ => None,
        };
        tracing::warn!(
            provider = %self.name,
            from = from.as_str(),
            to = to.as_str(),
            "the model server rejected response_format; structured output steps down"
        );
        if let Some(sink) = &self.events {
            sink(LlmEvent::StructuredModeDowngraded(ModeDowngrade {
                provider: self.name.clone(),
                from,
                to,
                status,
            }));
        }
    }
}

impl OpenAiProvider {
    /// `GET {base_url}/models` with the provider's own headers, within the
    /// call timeout (bounded to 10 s: it is a listing, not inference).
    async fn listed_window(&self, model: &str) -> Option<u64> {
        use async_openai::config::Config as _;
        let config = self.client.config();
        let timeout = self.policy.timeout.min(std::time::Duration::from_secs(10));
        let resp = self
            .http
            .get(config.url("/models"))
            .headers(config.headers())
            .timeout(timeout)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let listing: Value = resp.json().await.ok()?;
        crate::probe::context_window_from_listing(&listing, model)
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.window.load(Ordering::Relaxed)).filter(|w| *w > 0)
    }

    fn discover_context_window<'a>(&'a self, model: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if self.context_window().is_some() {
                return;
            }
            match self.listed_window(model).await {
                Some(w) => {
                    // A configured value set meanwhile wins (compare-exchange
                    // from "unknown" only).
                    let _ =
                        self.window
                            .compare_exchange(0, w, Ordering::Relaxed, Ordering::Relaxed);
                    tracing::info!(provider = %self.name, window = w, "context window from the model listing");
                }
                None => tracing::info!(
                    provider = %self.name,
                    "the model listing gives no context window; set providers.{}.context_window to fit prompts to it",
                    self.name
                ),
            }
        })
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(self.complete_with_retries(request))
    }
}

/// async-openai's error → ours, with a 429's `retry-after`.
fn map_error(e: OpenAIError) -> (LlmError, Option<Duration>) {
    let e = match e {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<RateLimitResponse>() {
            Ok(r) => {
                let RateLimitResponse {
                    message,
                    retry_after,
                } = *r;
                return (
                    LlmError::Api {
                        status: Some(429),
                        message,
                    },
                    retry_after,
                );
            }
            Err(other) => match other.downcast::<crate::ratelimit::UnusualAnswer>() {
                Ok(unusual) => {
                    return (
                        match *unusual {
                            crate::ratelimit::UnusualAnswer::NotChat(message) => {
                                LlmError::NotChatApi { message }
                            }
                            crate::ratelimit::UnusualAnswer::Status { status, message } => {
                                LlmError::Api {
                                    status: Some(status),
                                    message,
                                }
                            }
                        },
                        None,
                    );
                }
                Err(other) => match other.downcast::<crate::ratelimit::ResponseTooLarge>() {
                    // Not retried: the same server would send the same again.
                    Ok(big) => {
                        return (
                            LlmError::Parse {
                                message: big.to_string(),
                            },
                            None,
                        );
                    }
                    Err(other) => OpenAIError::Boxed(other),
                },
            },
        },
        other => other,
    };
    let mapped = match e {
        OpenAIError::ApiError(resp) => LlmError::Api {
            status: Some(resp.status_code.as_u16()),
            message: resp.api_error.message,
        },
        OpenAIError::Reqwest(e) => LlmError::Api {
            status: e.status().map(|s| s.as_u16()),
            // Without the URL: it is configuration, and keeps logs short.
            message: e.without_url().to_string(),
        },
        // An error body that is not OpenAI-shaped (FastAPI's `detail`,
        // Ollama's bare string) still says why a response_format or tools
        // were refused; keep that case an API error so negotiation sees it.
        OpenAIError::JSONDeserialize(_, body)
            if ["response_format", "tools", "tool_choice"]
                .iter()
                .any(|f| body.contains(f)) =>
        {
            LlmError::Api {
                status: None,
                message: body.chars().take(2000).collect(),
            }
        }
        OpenAIError::JSONDeserialize(err, _) => LlmError::Parse {
            message: err.to_string(),
        },
        other => LlmError::Api {
            status: None,
            message: other.to_string(),
        },
    };
    (mapped, None)
}

fn from_response(resp: CreateChatCompletionResponse) -> Result<ChatResponse, LlmError> {
    let usage = resp
        .usage
        .as_ref()
        .map(|u| Usage {
            prompt_tokens: u.prompt_tokens.into(),
            completion_tokens: u.completion_tokens.into(),
        })
        .unwrap_or_default();
    let Some(choice) = resp.choices.into_iter().next() else {
        return Err(LlmError::NotChatApi {
            message: "the response's `choices` is empty".to_owned(),
        });
    };
    let tool_calls = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| match c {
            ChatCompletionMessageToolCalls::Function(f) => Some(ToolCall {
                id: f.id,
                name: f.function.name,
                arguments: f.function.arguments,
            }),
            // Custom (free-form) tools are never offered, so never accepted.
            ChatCompletionMessageToolCalls::Custom(_) => None,
        })
        .collect();
    Ok(ChatResponse {
        content: choice.message.content,
        tool_calls,
        usage,
    })
}
