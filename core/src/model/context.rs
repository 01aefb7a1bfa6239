//! Context models (spec §3.5): zones, profiles, items, subscriptions, budget.

use serde::{Deserialize, Serialize};

use super::ModelError;

/// A named zone-budget allocation (§3.5). Each pct is in [0, 1] and their sum
/// is at most 0.80, leaving at least 20% headroom of the allocable budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ContextProfileRaw")]
pub struct ContextProfile {
    pub name: String,
    pub chronicle_pct: f64,
    pub memory_pct: f64,
    pub workspace_pct: f64,
}

#[derive(Deserialize)]
struct ContextProfileRaw {
    #[serde(default)]
    name: String,
    chronicle_pct: f64,
    memory_pct: f64,
    workspace_pct: f64,
}

impl TryFrom<ContextProfileRaw> for ContextProfile {
    type Error = ModelError;
    fn try_from(r: ContextProfileRaw) -> Result<Self, ModelError> {
        let p = ContextProfile {
            name: r.name,
            chronicle_pct: r.chronicle_pct,
            memory_pct: r.memory_pct,
            workspace_pct: r.workspace_pct,
        };
        p.validate()?;
        Ok(p)
    }
}

/// Maximum combined share of the allocable budget the three zones may claim.
pub const MAX_PROFILE_SUM: f64 = 0.80;

impl ContextProfile {
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [
            ("chronicle_pct", self.chronicle_pct),
            ("memory_pct", self.memory_pct),
            ("workspace_pct", self.workspace_pct),
        ] {
            // `contains` is false for NaN, so NaN is refused too.
            if !(0.0..=1.0).contains(&value) {
                return Err(ModelError::ProfilePctOutOfRange {
                    profile: self.name.clone(),
                    field,
                    value,
                });
            }
        }
        let sum = self.chronicle_pct + self.memory_pct + self.workspace_pct;
        // A small epsilon keeps 0.45+0.20+0.15 (= 0.8000000000000002) valid.
        if sum > MAX_PROFILE_SUM + 1e-9 {
            return Err(ModelError::ProfileSumTooHigh {
                profile: self.name.clone(),
                sum,
            });
        }
        Ok(())
    }
}
