//! Audit events as data. The gate crate cannot reach the audit log (a
//! same-layer crate), so the runner, escalation planner and access controller
//! return these for the caller to persist with `AuditLog::log`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use silas_core::model::JsonObject;

/// One entry to append to the audit log: the `event` name and its `data`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub event: String,
    pub data: JsonObject,
}

/// Event names, in one place so callers and tests agree on spelling.
pub mod names {
    pub const GATE_EVALUATED: &str = "gate_evaluated";
    pub const GATE_BLOCKED: &str = "gate_blocked";
    /// A block after the first one in the same pass: logged, not escalated.
    pub const GATE_BLOCK_ADDITIONAL: &str = "gate_block_additional";
    pub const GATE_MUTATION: &str = "gate_mutation";
    pub const REJECTED_MUTATION: &str = "rejected_mutation";
    pub const QUALITY_LANE_VIOLATION: &str = "quality_lane_violation";
    pub const QUALITY_LLM_ERROR: &str = "quality_llm_error";
    pub const GATE_EVAL_CAP_REACHED: &str = "gate_eval_cap_reached";
    pub const ESCALATION_UNKNOWN: &str = "escalation_unknown";
    pub const ESCALATION_CYCLE: &str = "escalation_cycle";
    pub const ACCESS_TRANSITION: &str = "access_transition";
    pub const ACCESS_CONTEXT_REFUSED: &str = "access_customer_context_refused";
}

impl AuditEvent {
    /// Builds an event from `(key, value)` pairs.
    pub fn new<const N: usize>(event: &str, fields: [(&str, Value); N]) -> Self {
        let mut data = JsonObject::new();
        for (k, v) in fields {
            data.insert(k.to_owned(), v);
        }
        AuditEvent {
            event: event.to_owned(),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_collects_fields() {
        let e = AuditEvent::new("x", [("gate", Value::from("g")), ("n", Value::from(1))]);
        assert_eq!(e.event, "x");
        assert_eq!(e.data["gate"], "g");
        assert_eq!(e.data["n"], 1);
    }
}
