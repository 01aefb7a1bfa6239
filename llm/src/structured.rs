//! Structured output with one repair retry and a deterministic fallback —
//! `run_structured_agent` of spec §5.1.0.
//!
//! 1. The request carries the output type's JSON Schema as its response
//!    format; the answer is always validated here (JSON → core type, whose
//!    validators run at deserialisation, plus call-specific checks such as the
//!    context-profile registry for `RouteDecision`).
//! 2. On a validation failure the *same* request (same model, tools and
//!    limits) is sent once more with `"\n\n[SCHEMA VALIDATION ERROR]\n" +
//!    summary` appended to the prompt (the last user message).
//! 3. If that fails too — or the provider itself fails after its bounded
//!    retries (§18.1: bounded retry, then fallback) — the call type's
//!    deterministic fallback is returned ([`StructuredOutput::fallback`]):
//!    proxy → direct `RouteDecision` with a user-visible error, register
//!    `status`, mode `confirm_only_when_required`, the default profile;
//!    planner → `AgentResponse` reporting the failure, no `plan_action`;
//!    executor → the attempt fails with `executor_structured_output_invalid`;
//!    scorer → skip model eviction, use aggressive heuristic eviction.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use silas_core::config::Config;
use silas_core::model::agents::{
    AgentResponse, InteractionMode, InteractionRegister, Route, RouteDecision,
};
use silas_core::model::execution::ExecutorAgentOutput;

use crate::coerce::{self, Coercion};
use crate::error::LlmError;
use crate::negotiate::extract_json;
use crate::provider::{ChatMessage, ChatRequest, Provider, ResponseSchema, Usage};
use crate::schema::{self, ScorerOutput};

/// The marker the repair prompt appends (§5.1.0).
pub const REPAIR_MARKER: &str = "\n\n[SCHEMA VALIDATION ERROR]\n";

/// The executor fallback's `last_error` (§5.1.0).
pub const EXECUTOR_INVALID_OUTPUT: &str = "executor_structured_output_invalid";

/// Longest validation summary sent back to the model.
const MAX_SUMMARY_CHARS: usize = 1000;

/// Which structured call this is; decides schema and fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    Proxy,
    Planner,
    Executor,
    Scorer,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Proxy => "proxy",
            CallKind::Planner => "planner",
            CallKind::Executor => "executor",
            CallKind::Scorer => "scorer",
        }
    }
}

/// What validation and the fallbacks need from the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct StructuredContext {
    /// Configured context profile names (`RouteDecision.context_profile`
    /// must be one of them).
    pub profiles: BTreeSet<String>,
    /// `context.default_profile`, used by the proxy fallback.
    pub default_profile: String,
}

impl StructuredContext {
    pub fn from_config(cfg: &Config) -> Self {
        StructuredContext {
            profiles: cfg.context.profiles.keys().cloned().collect(),
            default_profile: cfg.context.default_profile.clone(),
        }
    }
}

/// Why a fallback was used.
#[derive(Clone, Debug, PartialEq)]
pub enum FallbackCause {
    /// Both attempts produced invalid output; the last summary.
    InvalidOutput(String),
    /// The provider failed (after its own retries).
    Provider(LlmError),
}

/// The executor's fallback: this attempt fails; retry/budget policy goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorAttemptFailed {
    pub last_error: &'static str,
}

/// The scorer's fallback: no model eviction this turn; the context manager
/// applies its aggressive heuristic eviction instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeuristicEviction;

/// A type an agent call must produce.
pub trait StructuredOutput: Sized + DeserializeOwned {
    /// The deterministic replacement when no valid value can be had.
    type Fallback: Clone + std::fmt::Debug + PartialEq;
    const KIND: CallKind;
    /// Response-format name (also what the offline responder dispatches on).
    const SCHEMA_NAME: &'static str;
    fn schema() -> Arc<Value>;
    /// Replaces cosmetic fields that are missing or outside their enum with
    /// their documented defaults, before deserialising ([`crate::coerce`]).
    /// Security-relevant fields are never touched.
    fn coerce(_value: &mut Value, _ctx: &StructuredContext) -> Vec<Coercion> {
        Vec::new()
    }
    /// What the repair round's answer may still be read as when it fails
    /// validation ([`crate::coerce::last_resort_route_decision`]); nothing
    /// for most types.
    fn last_resort(_value: &mut Value) -> Vec<Coercion> {
        Vec::new()
    }
    /// Checks beyond the type's own validators (run after deserialising).
    fn check(&self, _ctx: &StructuredContext) -> Result<(), String> {
        Ok(())
    }
    fn fallback(ctx: &StructuredContext) -> Self::Fallback;
}

/// The user-visible text of the proxy fallback.
pub const PROXY_FALLBACK_MESSAGE: &str = "Sorry — I couldn't process that message (my language model returned an unusable answer). \
     Please try again or rephrase.";

/// What the owner is told when the proxy fell back: the cause, when the
/// provider failed, and what to do about it. "Try again or rephrase" fits
/// only an unusable answer; for a server that is down, slow, refusing the
/// model name or the message's length, it sent owners the wrong way.
pub fn proxy_failure_message(cause: &FallbackCause) -> String {
    let e = match cause {
        FallbackCause::InvalidOutput(_) => return PROXY_FALLBACK_MESSAGE.to_owned(),
        FallbackCause::Provider(e) => e,
    };
    let why = match e {
        LlmError::Timeout { seconds } => format!(
            "my language model did not answer within {seconds} s. A local model may be busy \
             or slow: try again, or raise the provider's `timeout_seconds`"
        ),
        LlmError::RateLimited { .. } => {
            "the model provider is rate-limiting me. Try again in a minute".to_owned()
        }
        LlmError::MissingKey { var, .. } => {
            format!("the model provider's API key is not set (environment variable {var})")
        }
        LlmError::Parse { .. } => {
            "my language model sent a response I could not read. Please try again".to_owned()
        }
        LlmError::NotChatApi { message } => format!(
            "the model server did not answer like a chat API ({message}). Check the \
             provider's `base_url`: an OpenAI-compatible server's usually ends in /v1 \
             (`silas doctor` tests the endpoint)"
        ),
        LlmError::Api {
            status: Some(status),
            message,
        } => {
            let lower = message.to_ascii_lowercase();
            if matches!(status, 400 | 413)
                && (lower.contains("context")
                    || lower.contains("too long")
                    || lower.contains("tokens"))
            {
                "the prompt was too long for the model server's context window. If your \
                 message was short, the server's window is smaller than my prompts need: start \
                 it with a larger one (llama.cpp `-c 8192`, llama-cpp-python `--n_ctx 8192`) \
                 and set the provider's `context_window` to match; else send your message in \
                 shorter parts"
                    .to_owned()
            } else if *status == 404 {
                "the model server answered HTTP 404: check the model name in `models` and the \
                 provider's `base_url` (`silas doctor` tests the endpoint)"
                    .to_owned()
            } else if matches!(status, 401 | 403) {
                format!(
                    "the model server refused my credentials (HTTP {status}): check the \
                     provider's API key"
                )
            } else {
                format!(
                    "the model server answered HTTP {status}. Please try again \
                     (`silas doctor` tests the endpoint)"
                )
            }
        }
        LlmError::Api { status: None, .. } => {
            "I could not reach my language model. Is the model server running? (`silas \
             doctor` tests the endpoint)"
                .to_owned()
        }
    };
    format!("Sorry — I couldn't reply: {why}.")
}

/// The planner fallback's message.
pub const PLANNER_FALLBACK_MESSAGE: &str = "I couldn't produce a valid plan for this (the planning output failed validation twice), \
     so nothing was planned. Please try again or rephrase the request.";

impl StructuredOutput for RouteDecision {
    type Fallback = RouteDecision;
    const KIND: CallKind = CallKind::Proxy;
    const SCHEMA_NAME: &'static str = "RouteDecision";
    fn schema() -> Arc<Value> {
        schema::route_decision()
    }
    fn coerce(value: &mut Value, ctx: &StructuredContext) -> Vec<Coercion> {
        coerce::coerce_route_decision(value, &ctx.default_profile, |p| ctx.profiles.contains(p))
    }
    fn last_resort(value: &mut Value) -> Vec<Coercion> {
        coerce::last_resort_route_decision(value)
    }
    fn check(&self, ctx: &StructuredContext) -> Result<(), String> {
        self.validate_profile(|p| ctx.profiles.contains(p))
            .map_err(|e| e.to_string())
    }
    fn fallback(ctx: &StructuredContext) -> RouteDecision {
        proxy_fallback(&ctx.default_profile)
    }
}

impl StructuredOutput for AgentResponse {
    type Fallback = AgentResponse;
    const KIND: CallKind = CallKind::Planner;
    const SCHEMA_NAME: &'static str = "AgentResponse";
    fn schema() -> Arc<Value> {
        schema::agent_response()
    }
    fn coerce(value: &mut Value, _: &StructuredContext) -> Vec<Coercion> {
        coerce::coerce_agent_response(value)
    }
    fn fallback(_: &StructuredContext) -> AgentResponse {
        planner_fallback()
    }
}

impl StructuredOutput for ExecutorAgentOutput {
    type Fallback = ExecutorAttemptFailed;
    const KIND: CallKind = CallKind::Executor;
    const SCHEMA_NAME: &'static str = "ExecutorAgentOutput";
    fn schema() -> Arc<Value> {
        schema::executor_output()
    }
    fn fallback(_: &StructuredContext) -> ExecutorAttemptFailed {
        ExecutorAttemptFailed {
            last_error: EXECUTOR_INVALID_OUTPUT,
        }
    }
}

impl StructuredOutput for ScorerOutput {
    type Fallback = HeuristicEviction;
    const KIND: CallKind = CallKind::Scorer;
    const SCHEMA_NAME: &'static str = "ScorerOutput";
    fn schema() -> Arc<Value> {
        schema::scorer_output()
    }
    fn fallback(_: &StructuredContext) -> HeuristicEviction {
        HeuristicEviction
    }
}

/// The proxy fallback (§5.1.0): a direct, honest error reply.
pub fn proxy_fallback(default_profile: &str) -> RouteDecision {
    RouteDecision {
        route: Route::Direct,
        reason: "structured_output_fallback".to_owned(),
        response: Some(AgentResponse::message(PROXY_FALLBACK_MESSAGE)),
        interaction_register: InteractionRegister::Status,
        interaction_mode: InteractionMode::ConfirmOnlyWhenRequired,
        continuation_of: None,
        context_profile: default_profile.to_owned(),
    }
}

/// The planner fallback (§5.1.0): reports the failure, no plan action.
pub fn planner_fallback() -> AgentResponse {
    AgentResponse::message(PLANNER_FALLBACK_MESSAGE)
}

/// The outcome of a structured call.
#[derive(Clone, Debug, PartialEq)]
pub enum Structured<T: StructuredOutput> {
    /// A valid value; `repaired` when it took the repair retry.
    Valid { value: T, repaired: bool },
    Fallback {
        value: T::Fallback,
        cause: FallbackCause,
    },
}

impl<T: StructuredOutput> Structured<T> {
    pub fn is_fallback(&self) -> bool {
        matches!(self, Structured::Fallback { .. })
    }
}

/// A structured outcome plus what the calls consumed.
#[derive(Clone, Debug, PartialEq)]
pub struct StructuredRun<T: StructuredOutput> {
    pub outcome: Structured<T>,
    /// Model requests made (1 or 2).
    pub requests: u32,
    pub usage: Usage,
    /// Cosmetic fields of the valid answer that took their default (to be
    /// audited as `llm_output_coerced`).
    pub coerced: Vec<Coercion>,
}

/// Parses and validates one answer. The error is the summary sent back in
/// the repair prompt.
pub fn parse_output<T: StructuredOutput>(
    content: Option<&str>,
    ctx: &StructuredContext,
) -> Result<T, String> {
    parse_output_coerced(content, ctx).map(|(value, _)| value)
}

/// [`parse_output`], also returning the cosmetic fields that were coerced.
pub fn parse_output_coerced<T: StructuredOutput>(
    content: Option<&str>,
    ctx: &StructuredContext,
) -> Result<(T, Vec<Coercion>), String> {
    parse_with(content, ctx, false)
}

/// [`parse_output_coerced`] with the type's last resort applied too (the
/// repair round's answer, before falling back).
pub fn parse_output_last_resort<T: StructuredOutput>(
    content: Option<&str>,
    ctx: &StructuredContext,
) -> Result<(T, Vec<Coercion>), String> {
    parse_with(content, ctx, true)
}

fn parse_with<T: StructuredOutput>(
    content: Option<&str>,
    ctx: &StructuredContext,
    last_resort: bool,
) -> Result<(T, Vec<Coercion>), String> {
    let Some(text) = content.filter(|t| !t.trim().is_empty()) else {
        return Err(format!(
            "the answer was empty; reply with one JSON object matching the {} schema",
            T::SCHEMA_NAME
        ));
    };
    let invalid = |e: serde_json::Error| {
        format!(
            "invalid {}: {e}; reply with one JSON object matching the schema",
            T::SCHEMA_NAME
        )
    };
    let mut raw: Value = serde_json::from_str(extract_json(text)).map_err(invalid)?;
    let mut coerced = T::coerce(&mut raw, ctx);
    if last_resort {
        coerced.extend(T::last_resort(&mut raw));
    }
    let value: T = serde_json::from_value(raw).map_err(invalid)?;
    value
        .check(ctx)
        .map_err(|e| format!("invalid {}: {e}", T::SCHEMA_NAME))?;
    Ok((value, coerced))
}

/// Bounds the summary sent back to the model (never the raw answer).
pub fn summarize(error: &str) -> String {
    let mut s: String = error.chars().take(MAX_SUMMARY_CHARS).collect();
    if error.chars().count() > MAX_SUMMARY_CHARS {
        s.push('…');
    }
    s
}

/// The repair request: the same request with the summary appended to the
/// last user message (the prompt), exactly `prompt + REPAIR_MARKER + summary`.
pub fn repair_request(request: &ChatRequest, summary: &str) -> ChatRequest {
    let mut repaired = request.clone();
    let suffix = format!("{REPAIR_MARKER}{}", summarize(summary));
    match repaired.messages.iter_mut().rev().find_map(|m| match m {
        ChatMessage::User(text) => Some(text),
        _ => None,
    }) {
        Some(text) => text.push_str(&suffix),
        None => repaired
            .messages
            .push(ChatMessage::User(suffix.trim_start().to_owned())),
    }
    repaired
}

/// `run_structured_agent` (§5.1.0). Sets the response schema on `request`,
/// validates, repairs once, then falls back. The usage of every response is
/// returned for the caller to charge (see [`crate::agents::Agent`]).
pub async fn run_structured_agent<T: StructuredOutput>(
    provider: &dyn Provider,
    mut request: ChatRequest,
    ctx: &StructuredContext,
) -> StructuredRun<T> {
    request.response_schema = Some(ResponseSchema {
        name: T::SCHEMA_NAME.to_owned(),
        schema: T::schema(),
    });
    let mut usage = Usage::default();
    let mut requests = 0;
    // The first round sends `request` itself; only a repair builds another.
    let mut repaired: Option<ChatRequest> = None;
    let mut last_summary = String::new();
    for round in 0..2 {
        requests += 1;
        let attempt = repaired.as_ref().unwrap_or(&request);
        let resp = match provider.complete(attempt).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(call = T::KIND.as_str(), error = %e.summary(), "structured call failed; using fallback");
                tracing::debug!(
                    call = T::KIND.as_str(),
                    "structured call failure in full: {e}"
                );
                return StructuredRun {
                    outcome: Structured::Fallback {
                        value: T::fallback(ctx),
                        cause: FallbackCause::Provider(e),
                    },
                    requests,
                    usage,
                    coerced: Vec::new(),
                };
            }
        };
        usage.add(resp.usage);
        match parse_output_coerced::<T>(resp.content.as_deref(), ctx) {
            Ok((value, coerced)) => {
                if !coerced.is_empty() {
                    tracing::info!(call = T::KIND.as_str(), fields = ?coerced.iter().map(|c| c.field).collect::<Vec<_>>(), "cosmetic fields took their defaults");
                }
                return StructuredRun {
                    outcome: Structured::Valid {
                        value,
                        repaired: round == 1,
                    },
                    requests,
                    usage,
                    coerced,
                };
            }
            Err(summary) => {
                if round == 1
                    && let Ok((value, coerced)) =
                        parse_output_last_resort::<T>(resp.content.as_deref(), ctx)
                {
                    tracing::info!(call = T::KIND.as_str(), fields = ?coerced.iter().map(|c| c.field).collect::<Vec<_>>(), "the repaired answer was read by its last resort");
                    return StructuredRun {
                        outcome: Structured::Valid {
                            value,
                            repaired: true,
                        },
                        requests,
                        usage,
                        coerced,
                    };
                }
                tracing::info!(call = T::KIND.as_str(), round, "structured output invalid");
                // The summary names fields and serde's reason, bounded.
                tracing::debug!(call = T::KIND.as_str(), round, summary = %summarize(&summary), "validation errors");
                repaired = Some(repair_request(&request, &summary));
                last_summary = summary;
            }
        }
    }
    StructuredRun {
        outcome: Structured::Fallback {
            value: T::fallback(ctx),
            cause: FallbackCause::InvalidOutput(last_summary),
        },
        requests,
        usage,
        coerced: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn proxy_failures_name_their_cause_and_fix() {
        let api = |status: Option<u16>, message: &str| {
            FallbackCause::Provider(LlmError::Api {
                status,
                message: message.into(),
            })
        };
        let cases = [
            (
                FallbackCause::InvalidOutput("x".into()),
                "try again or rephrase",
            ),
            (
                FallbackCause::Provider(LlmError::Timeout { seconds: 60 }),
                "did not answer within 60 s",
            ),
            (
                api(None, "error sending request"),
                "could not reach my language model",
            ),
            (
                api(Some(404), "model not found"),
                "HTTP 404: check the model name",
            ),
            (
                api(Some(400), "maximum context length is 4096 tokens"),
                "too long for the model server's context window. If your message was short",
            ),
            (api(Some(401), "bad key"), "refused my credentials"),
            (api(Some(500), "boom"), "answered HTTP 500"),
            (
                FallbackCause::Provider(LlmError::RateLimited {
                    attempts: 3,
                    message: "slow down".into(),
                }),
                "rate-limiting",
            ),
        ];
        for (cause, want) in cases {
            let m = proxy_failure_message(&cause);
            assert!(
                m.to_lowercase().contains(&want.to_lowercase()),
                "{cause:?}: {m}"
            );
        }
    }

    fn ctx() -> StructuredContext {
        StructuredContext::from_config(&Config::default())
    }

    #[test]
    fn fallbacks_follow_the_spec() {
        let c = ctx();
        let d = RouteDecision::fallback(&c);
        assert_eq!(d.route, Route::Direct);
        assert_eq!(d.interaction_register, InteractionRegister::Status);
        assert_eq!(d.interaction_mode, InteractionMode::ConfirmOnlyWhenRequired);
        assert_eq!(d.context_profile, c.default_profile);
        assert!(d.validate().is_ok());
        assert!(d.check(&c).is_ok(), "the fallback itself is valid");
        let msg = &d.response.as_ref().unwrap().message;
        assert!(msg.contains("couldn't process"), "{msg}");
        let p = AgentResponse::fallback(&c);
        assert!(p.plan_action.is_none());
        assert!(p.memory_ops.is_empty() && p.memory_queries.is_empty());
        assert!(p.message.contains("couldn't produce a valid plan"));
        assert_eq!(
            ExecutorAgentOutput::fallback(&c).last_error,
            "executor_structured_output_invalid"
        );
        assert_eq!(ScorerOutput::fallback(&c), HeuristicEviction);
    }

    #[test]
    fn parse_output_table() {
        let c = ctx();
        let direct = json!({"route": "direct", "reason": "hi", "response": {"message": "hello"},
            "interaction_register": "status", "interaction_mode": "default_and_offer",
            "context_profile": "conversation"});
        // (content, Ok?, fragment of the error)
        let table: Vec<(Option<String>, Result<(), &str>)> = vec![
            (Some(direct.to_string()), Ok(())),
            (Some(format!("```json\n{direct}\n```")), Ok(())),
            // Prompt mode: small models wrap the object in prose.
            (Some(format!("Here is my answer:\n{direct}\nThanks")), Ok(())),
            (None, Err("empty")),
            (Some("  ".into()), Err("empty")),
            (Some("{not json".into()), Err("invalid RouteDecision")),
            (
                Some(json!({"route": "direct", "reason": "r", "interaction_register": "status", "context_profile": "conversation"}).to_string()),
                Err("response"),
            ),
            (
                Some({
                    let mut v = direct.clone();
                    v["context_profile"] = json!("poetry");
                    v.to_string()
                }),
                Ok(()),
            ),
            (
                Some({
                    let mut v = direct.clone();
                    v["interaction_register"] = json!("chitchat");
                    v.to_string()
                }),
                Ok(()),
            ),
        ];
        for (content, want) in table {
            let got = parse_output::<RouteDecision>(content.as_deref(), &c);
            match (want, got) {
                (Ok(()), Ok(_)) => {}
                (Err(frag), Err(e)) => assert!(e.contains(frag), "{e:?} lacks {frag:?}"),
                (w, g) => panic!("{content:?}: want {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn repair_request_appends_to_the_prompt_only() {
        let req = ChatRequest::new("m", "system prompt", "user prompt");
        let r = repair_request(&req, "missing field `route`");
        assert_eq!(r.messages[0], ChatMessage::System("system prompt".into()));
        assert_eq!(
            r.messages[1],
            ChatMessage::User(
                "user prompt\n\n[SCHEMA VALIDATION ERROR]\nmissing field `route`".into()
            )
        );
        assert_eq!(
            (r.model, r.tools, r.max_completion_tokens),
            (req.model, req.tools, req.max_completion_tokens)
        );
        let long = "x".repeat(5000);
        let r = repair_request(&ChatRequest::new("m", "s", "u"), &long);
        let ChatMessage::User(t) = &r.messages[1] else {
            panic!()
        };
        assert!(t.chars().count() < 1100, "summary is bounded");
    }
}
