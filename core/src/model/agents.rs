//! Agent-facing models (spec §3.2): responses, plan actions, memory ops and
//! queries, routing decisions, interaction register and mode.

use serde::{Deserialize, Serialize};

/// What kind of turn this is (§3.2, §0.5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionRegister {
    Exploration,
    Execution,
    Review,
    Status,
}

impl InteractionRegister {
    pub const ALL: [InteractionRegister; 4] = [
        InteractionRegister::Exploration,
        InteractionRegister::Execution,
        InteractionRegister::Review,
        InteractionRegister::Status,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            InteractionRegister::Exploration => "exploration",
            InteractionRegister::Execution => "execution",
            InteractionRegister::Review => "review",
            InteractionRegister::Status => "status",
        }
    }
}

/// How Silas operates for a turn or work item (§3.2, ADR-022).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InteractionMode {
    DefaultAndOffer,
    ActAndReport,
    #[default]
    ConfirmOnlyWhenRequired,
}
