//! `resolve_interaction_mode` (§5.1.0): the single place an interaction
//! mode is decided. No component sets `interaction_mode` any other way.
//!
//! Precedence: risk/policy confirmation → planner override → work item mode
//! → proxy mode → high initiative (execution → act_and_report, exploration →
//! default_and_offer) → the register's configured default →
//! `default_and_offer`.

use std::collections::BTreeMap;

use silas_core::config::InteractionConfig;
use silas_core::model::agents::{InteractionMode, InteractionRegister};

/// The inputs of one resolution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModeInputs {
    pub proxy_mode: Option<InteractionMode>,
    pub planner_override: Option<InteractionMode>,
    pub work_item_mode: Option<InteractionMode>,
    pub risk_requires_confirmation: bool,
    pub initiative_level: f64,
    pub interaction_register: InteractionRegister,
}

/// Resolves the mode exactly as §5.1.0's reference function.
pub fn resolve_interaction_mode(
    inputs: &ModeInputs,
    high_initiative_min: f64,
    default_mode_by_register: &BTreeMap<InteractionRegister, InteractionMode>,
) -> InteractionMode {
    if inputs.risk_requires_confirmation {
        return InteractionMode::ConfirmOnlyWhenRequired;
    }
    if let Some(m) = inputs.planner_override {
        return m;
    }
    if let Some(m) = inputs.work_item_mode {
        return m;
    }
    if let Some(m) = inputs.proxy_mode {
        return m;
    }
    if inputs.initiative_level >= high_initiative_min {
        match inputs.interaction_register {
            InteractionRegister::Execution => return InteractionMode::ActAndReport,
            InteractionRegister::Exploration => return InteractionMode::DefaultAndOffer,
            InteractionRegister::Review | InteractionRegister::Status => {}
        }
    }
    default_mode_by_register
        .get(&inputs.interaction_register)
        .copied()
        .unwrap_or(InteractionMode::DefaultAndOffer)
}

/// [`resolve_interaction_mode`] with the thresholds from `interaction:`.
pub fn resolve_with_config(inputs: &ModeInputs, cfg: &InteractionConfig) -> InteractionMode {
    resolve_interaction_mode(
        inputs,
        cfg.high_initiative_min,
        &cfg.default_mode_by_register,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use InteractionMode::*;
    use InteractionRegister::*;

    #[test]
    fn precedence_table() {
        let base = ModeInputs {
            proxy_mode: None,
            planner_override: None,
            work_item_mode: None,
            risk_requires_confirmation: false,
            initiative_level: 0.5,
            interaction_register: Status,
        };
        // Default register map is the shipped config's, except Status which
        // is overridden to prove the map is consulted.
        let mut defaults = InteractionConfig::default().default_mode_by_register;
        defaults.insert(Status, ConfirmOnlyWhenRequired);
        let w = |f: fn(&mut ModeInputs)| {
            let mut i = base;
            f(&mut i);
            i
        };
        let table: Vec<(&str, ModeInputs, InteractionMode)> = vec![
            (
                "risk beats everything",
                w(|i| {
                    i.risk_requires_confirmation = true;
                    i.planner_override = Some(ActAndReport);
                    i.work_item_mode = Some(ActAndReport);
                    i.proxy_mode = Some(ActAndReport);
                    i.initiative_level = 1.0;
                    i.interaction_register = Execution;
                }),
                ConfirmOnlyWhenRequired,
            ),
            (
                "planner override beats work item",
                w(|i| {
                    i.planner_override = Some(DefaultAndOffer);
                    i.work_item_mode = Some(ActAndReport);
                    i.proxy_mode = Some(ConfirmOnlyWhenRequired);
                }),
                DefaultAndOffer,
            ),
            (
                "work item beats proxy",
                w(|i| {
                    i.work_item_mode = Some(ActAndReport);
                    i.proxy_mode = Some(DefaultAndOffer);
                }),
                ActAndReport,
            ),
            (
                "proxy beats initiative",
                w(|i| {
                    i.proxy_mode = Some(ConfirmOnlyWhenRequired);
                    i.initiative_level = 0.99;
                    i.interaction_register = Execution;
                }),
                ConfirmOnlyWhenRequired,
            ),
            (
                "high initiative + execution",
                w(|i| {
                    i.initiative_level = 0.65;
                    i.interaction_register = Execution;
                }),
                ActAndReport,
            ),
            (
                "high initiative + exploration",
                w(|i| {
                    i.initiative_level = 0.9;
                    i.interaction_register = Exploration;
                }),
                DefaultAndOffer,
            ),
            (
                "high initiative + review falls to the map",
                w(|i| {
                    i.initiative_level = 0.9;
                    i.interaction_register = Review;
                }),
                ConfirmOnlyWhenRequired,
            ),
            (
                "high initiative + status falls to the map",
                w(|i| {
                    i.initiative_level = 0.9;
                }),
                ConfirmOnlyWhenRequired,
            ),
            (
                "just below the threshold uses the map",
                w(|i| {
                    i.initiative_level = 0.6499;
                    i.interaction_register = Exploration;
                }),
                DefaultAndOffer,
            ),
            (
                "low initiative execution uses the map",
                w(|i| {
                    i.initiative_level = 0.1;
                    i.interaction_register = Execution;
                }),
                ActAndReport,
            ),
        ];
        for (name, inputs, want) in table {
            assert_eq!(
                resolve_interaction_mode(&inputs, 0.65, &defaults),
                want,
                "{name}"
            );
        }
        // A register missing from the map → default_and_offer.
        let empty = BTreeMap::new();
        assert_eq!(
            resolve_interaction_mode(&w(|i| i.interaction_register = Review), 0.65, &empty),
            DefaultAndOffer
        );
        assert_eq!(
            resolve_with_config(
                &w(|i| i.interaction_register = Review),
                &InteractionConfig::default()
            ),
            ConfirmOnlyWhenRequired
        );
    }
}
