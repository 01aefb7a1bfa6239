//! Gates and guardrails (spec §3.4, §4.8–4.11, §5.1.1, §5.4–5.6).
//!
//! The crate is split the way the rest of Silas is: *pure policy* as plain
//! functions over data (predicate decisions, mutation filtering and merging,
//! lane rules, escalation resolution, access-state transitions, the Luhn/IBAN
//! checks and the text detectors), and thin async shells that sequence them
//! (the [`GateRunner`] and the providers that need a subprocess or a model).
//!
//! **Audit events are returned, not written.** The audit log lives in
//! `silas-storage` (same layer), so every operation here that the spec says
//! "logs to audit" instead returns [`AuditEvent`]s (`event` + `data`) in its
//! outcome. The caller (the runtime) persists them through `AuditLog`, which
//! applies NEVER_LOG sanitising. Events never carry message or response text.

pub mod access;
pub mod audit;
pub mod context;
pub mod definition;
pub mod error;
pub mod escalation;
pub mod expect;
pub mod guard;
pub mod jailbreak;
pub mod llm;
pub mod pii;
pub mod predicate;
pub mod provider;
pub mod runner;
pub mod script;

pub use access::{AccessController, AccessState, AllowedTools};
pub use audit::AuditEvent;
pub use error::GateError;
pub use escalation::{ChannelCaps, EscalationPlan, EscalationStep, GateBlock};
pub use guard::GuardProvider;
pub use llm::{JudgeError, JudgeRequest, LlmProvider, QualityJudge};
pub use predicate::PredicateProvider;
pub use provider::{BoxFuture, GateCheckProvider};
pub use runner::{ActiveGateSet, GateOutcome, GateRunner, TurnBudget};
pub use script::{ConfiguredScripts, ScriptProvider};
