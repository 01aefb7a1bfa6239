//! The provider interface (§4.8) and result constructors shared by providers.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction, GateLane, GateResult, GateValue};

/// A boxed, sendable future; keeps [`GateCheckProvider`] object-safe without
/// pulling in an async-trait crate.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Evaluates one gate against a context (§4.8). A provider never fails: a
/// provider that cannot decide returns a result the runner can enforce
/// (policy lane: `block`; quality lane: `continue` with an error flag).
/// Providers need not police lanes or mutations — the runner does (§5.4).
pub trait GateCheckProvider: Send + Sync {
    fn check<'a>(&'a self, gate: &'a Gate, ctx: &'a JsonObject) -> BoxFuture<'a, GateResult>;
}

/// A result in the gate's own lane with no score, flags or mutation.
pub fn result(gate: &Gate, action: GateAction, reason: impl Into<String>) -> GateResult {
    GateResult {
        gate_name: gate.name.clone(),
        lane: gate.lane(),
        action,
        reason: reason.into(),
        value: None,
        score: None,
        flags: Vec::new(),
        modified_context: None,
    }
}

/// The flag on a block the gate did not decide: it could not run (a script
/// that did not start or timed out, a judge model that failed, a missing
/// provider, the per-turn evaluation cap). The owner is told so, instead of
/// the gate's `on_block` text meant for a verdict.
pub const FAILED_CLOSED_FLAG: &str = "failed_closed";

/// A policy-lane block for a gate that could not reach a verdict.
pub fn fail_closed(gate: &Gate, reason: impl Into<String>) -> GateResult {
    let mut r = block(gate, reason);
    r.flags = vec![FAILED_CLOSED_FLAG.to_owned()];
    r
}

/// Whether `r` is a block the gate did not decide ([`fail_closed`]).
pub fn is_fail_closed(r: &GateResult) -> bool {
    r.action == GateAction::Block && r.flags.iter().any(|f| f == FAILED_CLOSED_FLAG)
}

/// A policy-lane block (used for fail-closed paths of any provider).
pub fn block(gate: &Gate, reason: impl Into<String>) -> GateResult {
    GateResult {
        lane: GateLane::Policy,
        ..result(gate, GateAction::Block, reason)
    }
}

/// The value a result reports: strings and numbers as such, others as
/// their JSON text (the model's `value` is `str | float | None`).
pub fn gate_value(v: &Value) -> Option<GateValue> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(GateValue::Text(s.clone())),
        Value::Number(n) => n.as_f64().map(GateValue::Number),
        other => Some(GateValue::Text(other.to_string())),
    }
}
