//! `silas-llm`: the model layer (spec §4.24, §5.1.0, §5.7 scorer, §7).
//!
//! * [`provider`] — our chat request/response types and the [`Provider`]
//!   trait; [`openai`] implements it for any OpenAI-compatible endpoint via
//!   async-openai, [`offline`] for the rule-based offline responder.
//! * [`structured`] — `run_structured_agent`: schema-guided output, one
//!   repair retry, then the per-call deterministic fallback.
//! * [`route`] — a direct route that came without its reply (small local
//!   models) is completed by a second, strictly validated call.
//! * [`coerce`] — cosmetic fields (register, mode, profile, reason) that
//!   are missing or outside their enum take their documented default;
//!   security-relevant fields are never coerced.
//! * [`toolset`] — the wrapper chain `SkillToolset → PreparedToolset →
//!   FilteredToolset → ApprovalRequiredToolset`; [`tool_loop`] — the
//!   executor's tool-calling loop over it.
//! * [`agents`], [`prompts`] — Proxy, Planner, Executor and Scorer with
//!   their versioned system prompts; [`interaction`] — the single
//!   `resolve_interaction_mode`.
//! * [`negotiate`] — structured-output modes per provider (`json_schema`
//!   → `json_object` → `prompt`), stepped down when a server rejects
//!   `response_format`, and the JSON extraction for text answers.
//! * [`toolprompt`] — tools offered in the prompt when a server rejects
//!   `tools` (`native` → `prompt`), and calls written as text read back.
//! * [`ratelimit`] — a 429's `retry-after`: waited when short and within
//!   the call's time, else the call gives up at once (a chain moves on).
//! * [`select`] — which provider `silas start` uses, and whether it fell
//!   back to offline.
//!
//! **Architecture invariant:** every structured model answer is validated
//! against the core model types before anything uses it; no code path hands
//! unvalidated model output onward. API keys are read from the environment
//! only and never logged.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod chain;
pub mod coerce;
pub mod error;
pub mod judge;
pub mod negotiate;
pub mod openai;
pub mod provider;
pub mod ratelimit;
pub mod route;
pub mod schema;
pub mod structured;
pub mod tls;
pub mod toolprompt;
pub mod wire;

pub use error::LlmError;
pub use provider::{
    BoxFuture, ChatMessage, ChatRequest, ChatResponse, Provider, ResponseSchema, RetryPolicy,
    ToolCall, ToolSpec, Usage,
};
pub mod agents;
pub mod interaction;
pub mod offline;
pub mod probe;
pub mod prompts;
pub mod select;
pub mod tool_loop;
pub mod toolset;

pub use agents::{Agent, Agents, ExecutorOutcome};
pub use interaction::{ModeInputs, resolve_interaction_mode};
pub use offline::OfflineProvider;
pub use select::{ProviderChoice, build_agents, build_agents_with_events, choose_provider};
pub use structured::{CallKind, Structured, StructuredContext, run_structured_agent};
pub use tls::ensure_crypto_provider;
