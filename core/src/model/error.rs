//! Typed validation errors for the domain model.

/// A model validator refused a value. Each variant names the rule it enforces.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("context profile {profile:?}: {field} must be within [0.0, 1.0], got {value}")]
    ProfilePctOutOfRange {
        profile: String,
        field: &'static str,
        value: f64,
    },
    #[error("context profile {profile:?}: chronicle_pct + memory_pct + workspace_pct must be <= 0.80, got {sum}")]
    ProfileSumTooHigh { profile: String, sum: f64 },
}
