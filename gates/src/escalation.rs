//! Gate block handling (§5.1.1): resolving a gate's `on_block` name to an
//! escalation and turning it into the steps the runtime performs. Pure.
//!
//! Resolution order: the active goal's `escalation` map, then the built-in
//! defaults (`polite_redirect` → respond with a fixed message, `report` →
//! report); an unknown name is treated as `report` with an
//! `escalation_unknown` warning. A `fallback` is resolved the same way;
//! fallbacks are followed at most [`MAX_FALLBACK_DEPTH`] times (a cycle ends
//! in `report` with an `escalation_cycle` warning).

use std::collections::BTreeMap;

use serde_json::Value;
use silas_core::model::work::{EscalationAction, EscalationKind};

use crate::audit::{AuditEvent, names};

/// The built-in `polite_redirect` message (§5.1.1).
pub const POLITE_REDIRECT_MESSAGE: &str = "I can't help with that. How else can I assist you?";
/// Default text for hand-offs when the escalation sets none.
pub const DEFAULT_HANDOFF_MESSAGE: &str = "I'm handing this over to a person who can help.";
/// Fallbacks followed before giving up on a chain.
pub const MAX_FALLBACK_DEPTH: usize = 4;

/// The built-in escalation for `name`, if there is one.
pub fn builtin(name: &str) -> Option<EscalationAction> {
    match name {
        "polite_redirect" => Some(EscalationAction {
            message: Some(POLITE_REDIRECT_MESSAGE.to_owned()),
            ..EscalationAction::new(EscalationKind::Respond)
        }),
        "report" => Some(EscalationAction::new(EscalationKind::Report)),
        _ => None,
    }
}

/// Resolves `name`: goal map, then built-ins, else `report` plus a warning.
pub fn resolve(
    name: &str,
    goal: Option<&BTreeMap<String, EscalationAction>>,
) -> (EscalationAction, Option<AuditEvent>) {
    if let Some(a) = goal.and_then(|m| m.get(name)) {
        return (a.clone(), None);
    }
    if let Some(a) = builtin(name) {
        return (a, None);
    }
    (
        EscalationAction::new(EscalationKind::Report),
        Some(AuditEvent::new(
            names::ESCALATION_UNKNOWN,
            [("escalation", Value::from(name))],
        )),
    )
}

/// A policy block to handle.
#[derive(Clone, Debug, PartialEq)]
pub struct GateBlock {
    pub gate_name: String,
    pub reason: String,
    pub on_block: String,
    pub sender_id: String,
}

/// What the channel can do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelCaps {
    pub human_handoff: bool,
}

/// One thing the runtime does, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum EscalationStep {
    /// Do not deliver the blocked response.
    Suppress,
    /// Send this text to the user (as the response, or before a hand-off).
    SendMessage(String),
    /// Open the channel's live-agent hand-off.
    RequestHumanHandoff,
    TransferToQueue(String),
    /// Re-run the agent with this instruction appended (attempt is 1-based).
    Rephrase {
        instruction: String,
        attempt: u64,
    },
    /// Re-execute the current step (attempt is 1-based).
    RetryStep {
        attempt: u64,
    },
    /// Log the block and notify the owner.
    ReportToOwner,
    /// Create a fix task from the failure context.
    SpawnFixTask,
}

/// The plan for one block: steps plus the audit events (always starting
/// with `gate_blocked` carrying gate, reason and sender, §5.1.1 step 3).
#[derive(Clone, Debug, PartialEq)]
pub struct EscalationPlan {
    pub steps: Vec<EscalationStep>,
    pub audit: Vec<AuditEvent>,
}

/// Plans the handling of `block`. `attempts` is how many rephrase/retry
/// attempts this block has already had (the caller counts per turn/step);
/// once `max_retries` are used up the `fallback` escalation takes over.
pub fn plan(
    block: &GateBlock,
    goal: Option<&BTreeMap<String, EscalationAction>>,
    caps: ChannelCaps,
    attempts: u64,
) -> EscalationPlan {
    let mut p = EscalationPlan {
        steps: Vec::new(),
        audit: vec![AuditEvent::new(
            names::GATE_BLOCKED,
            [
                ("gate", Value::from(block.gate_name.as_str())),
                ("reason", Value::from(block.reason.as_str())),
                ("sender_id", Value::from(block.sender_id.as_str())),
                ("on_block", Value::from(block.on_block.as_str())),
            ],
        )],
    };
    let mut name = block.on_block.clone();
    let mut attempts = attempts;
    for _ in 0..=MAX_FALLBACK_DEPTH {
        let (action, warn) = resolve(&name, goal);
        p.audit.extend(warn);
        match step(&action, caps, attempts, &mut p.steps) {
            None => return p,
            Some(fallback) => {
                name = fallback;
                // A fallback starts its own retry count.
                attempts = 0;
            }
        }
    }
    p.audit.push(AuditEvent::new(
        names::ESCALATION_CYCLE,
        [("escalation", Value::from(block.on_block.as_str()))],
    ));
    if p.steps.last() != Some(&EscalationStep::ReportToOwner) {
        p.steps.push(EscalationStep::ReportToOwner);
    }
    p
}

fn suppress(steps: &mut Vec<EscalationStep>) {
    // A fallback chain may suppress more than once; once is what happens.
    if !steps.contains(&EscalationStep::Suppress) {
        steps.push(EscalationStep::Suppress);
    }
}

/// Appends the steps of one action; returns the fallback name to continue
/// with, if the action hands over.
fn step(
    a: &EscalationAction,
    caps: ChannelCaps,
    attempts: u64,
    steps: &mut Vec<EscalationStep>,
) -> Option<String> {
    let fallback = || a.fallback.clone().unwrap_or_else(|| "report".to_owned());
    let message = || {
        a.message
            .clone()
            .unwrap_or_else(|| DEFAULT_HANDOFF_MESSAGE.to_owned())
    };
    match a.action {
        EscalationKind::Report => steps.push(EscalationStep::ReportToOwner),
        EscalationKind::Respond => {
            suppress(steps);
            steps.push(EscalationStep::SendMessage(
                a.message
                    .clone()
                    .unwrap_or_else(|| POLITE_REDIRECT_MESSAGE.to_owned()),
            ));
        }
        EscalationKind::EscalateHuman => {
            suppress(steps);
            steps.push(EscalationStep::SendMessage(message()));
            if caps.human_handoff {
                steps.push(EscalationStep::RequestHumanHandoff);
            } else if let Some(q) = &a.queue {
                steps.push(EscalationStep::TransferToQueue(q.clone()));
            } else {
                steps.push(EscalationStep::ReportToOwner);
            }
        }
        EscalationKind::TransferToQueue => {
            suppress(steps);
            steps.push(EscalationStep::SendMessage(message()));
            match &a.queue {
                Some(q) => steps.push(EscalationStep::TransferToQueue(q.clone())),
                // A transfer with nowhere to go still must not vanish.
                None => steps.push(EscalationStep::ReportToOwner),
            }
        }
        EscalationKind::SuppressAndRephrase => {
            suppress(steps);
            if attempts < a.max_retries {
                steps.push(EscalationStep::Rephrase {
                    instruction: a.instruction.clone().unwrap_or_else(|| {
                        "Rephrase your previous answer so it complies with policy.".to_owned()
                    }),
                    attempt: attempts + 1,
                });
            } else {
                return Some(fallback());
            }
        }
        EscalationKind::SuppressAndEscalate => {
            suppress(steps);
            steps.push(EscalationStep::SendMessage(message()));
            return Some(fallback());
        }
        EscalationKind::SpawnTask => steps.push(EscalationStep::SpawnFixTask),
        EscalationKind::Retry => {
            if attempts < a.max_retries {
                steps.push(EscalationStep::RetryStep {
                    attempt: attempts + 1,
                });
            } else {
                return Some(fallback());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]
    use super::EscalationStep::*;
    use super::*;

    fn blk(on_block: &str) -> GateBlock {
        GateBlock {
            gate_name: "g".into(),
            reason: "r".into(),
            on_block: on_block.into(),
            sender_id: "u1".into(),
        }
    }

    fn act(kind: EscalationKind) -> EscalationAction {
        EscalationAction::new(kind)
    }

    #[test]
    fn resolution_order() {
        let mut goal = BTreeMap::new();
        goal.insert("report".to_owned(), act(EscalationKind::SpawnTask));
        // goal map wins over the built-in of the same name
        assert_eq!(
            resolve("report", Some(&goal)).0.action,
            EscalationKind::SpawnTask
        );
        assert_eq!(resolve("report", None).0.action, EscalationKind::Report);
        let (a, w) = resolve("polite_redirect", None);
        assert_eq!(a.action, EscalationKind::Respond);
        assert_eq!(a.message.as_deref(), Some(POLITE_REDIRECT_MESSAGE));
        assert!(w.is_none());
        let (a, w) = resolve("nonesuch", Some(&goal));
        assert_eq!(a.action, EscalationKind::Report);
        assert_eq!(w.unwrap().event, names::ESCALATION_UNKNOWN);
    }

    #[test]
    fn every_action_plans() {
        let mk = |kind: EscalationKind, f: &dyn Fn(&mut EscalationAction)| {
            let mut a = act(kind);
            f(&mut a);
            let mut m = BTreeMap::new();
            m.insert("x".to_owned(), a);
            m
        };
        let no_handoff = ChannelCaps::default();
        let handoff = ChannelCaps {
            human_handoff: true,
        };
        let msg = |s: &str| SendMessage(s.to_owned());
        // (goal map, caps, attempts, expected steps)
        let cases: Vec<(
            BTreeMap<String, EscalationAction>,
            ChannelCaps,
            u64,
            Vec<EscalationStep>,
        )> = vec![
            (
                mk(EscalationKind::Report, &|_| {}),
                no_handoff,
                0,
                vec![ReportToOwner],
            ),
            (
                mk(EscalationKind::Respond, &|a| a.message = Some("no".into())),
                no_handoff,
                0,
                vec![Suppress, msg("no")],
            ),
            (
                mk(EscalationKind::EscalateHuman, &|a| {
                    a.message = Some("hold".into())
                }),
                handoff,
                0,
                vec![Suppress, msg("hold"), RequestHumanHandoff],
            ),
            (
                mk(EscalationKind::EscalateHuman, &|a| {
                    a.message = Some("hold".into());
                    a.queue = Some("support".into());
                }),
                no_handoff,
                0,
                vec![Suppress, msg("hold"), TransferToQueue("support".into())],
            ),
            (
                mk(EscalationKind::EscalateHuman, &|a| {
                    a.message = Some("hold".into())
                }),
                no_handoff,
                0,
                vec![Suppress, msg("hold"), ReportToOwner],
            ),
            (
                mk(EscalationKind::TransferToQueue, &|a| {
                    a.message = Some("m".into());
                    a.queue = Some("q".into());
                }),
                no_handoff,
                0,
                vec![Suppress, msg("m"), TransferToQueue("q".into())],
            ),
            (
                mk(EscalationKind::SuppressAndRephrase, &|a| {
                    a.instruction = Some("be nice".into())
                }),
                no_handoff,
                0,
                vec![
                    Suppress,
                    Rephrase {
                        instruction: "be nice".into(),
                        attempt: 1,
                    },
                ],
            ),
            (
                mk(EscalationKind::SuppressAndRephrase, &|a| {
                    a.instruction = Some("be nice".into())
                }),
                no_handoff,
                1,
                vec![
                    Suppress,
                    Rephrase {
                        instruction: "be nice".into(),
                        attempt: 2,
                    },
                ],
            ),
            // retries (default 2) exhausted → fallback polite_redirect
            (
                mk(EscalationKind::SuppressAndRephrase, &|a| {
                    a.fallback = Some("polite_redirect".into())
                }),
                no_handoff,
                2,
                vec![Suppress, msg(POLITE_REDIRECT_MESSAGE)],
            ),
            // exhausted without fallback → report
            (
                mk(EscalationKind::SuppressAndRephrase, &|a| a.max_retries = 0),
                no_handoff,
                0,
                vec![Suppress, ReportToOwner],
            ),
            (
                mk(EscalationKind::SuppressAndEscalate, &|a| {
                    a.message = Some("m".into());
                    a.fallback = Some("report".into());
                }),
                no_handoff,
                0,
                vec![Suppress, msg("m"), ReportToOwner],
            ),
            (
                mk(EscalationKind::SpawnTask, &|_| {}),
                no_handoff,
                0,
                vec![SpawnFixTask],
            ),
            (
                mk(EscalationKind::Retry, &|_| {}),
                no_handoff,
                0,
                vec![RetryStep { attempt: 1 }],
            ),
            (
                mk(EscalationKind::Retry, &|_| {}),
                no_handoff,
                2,
                vec![ReportToOwner],
            ),
        ];
        for (goal, caps, attempts, want) in cases {
            let p = plan(&blk("x"), Some(&goal), caps, attempts);
            assert_eq!(p.steps, want, "{:?} attempts={attempts}", goal["x"].action);
            assert_eq!(p.audit[0].event, names::GATE_BLOCKED);
            assert_eq!(p.audit[0].data["sender_id"], "u1");
        }
    }

    #[test]
    fn unknown_name_reports_with_warning_and_cycles_end() {
        let p = plan(&blk("mystery"), None, ChannelCaps::default(), 0);
        assert_eq!(p.steps, vec![ReportToOwner]);
        assert_eq!(p.audit[1].event, names::ESCALATION_UNKNOWN);

        let mut goal = BTreeMap::new();
        let mut a = act(EscalationKind::Retry);
        a.max_retries = 0;
        a.fallback = Some("a".into());
        goal.insert("a".to_owned(), a);
        let p = plan(&blk("a"), Some(&goal), ChannelCaps::default(), 0);
        assert_eq!(p.steps, vec![ReportToOwner]);
        assert_eq!(p.audit.last().unwrap().event, names::ESCALATION_CYCLE);
    }

    #[test]
    fn default_system_gates_resolve_without_a_goal() {
        let p = plan(&blk("polite_redirect"), None, ChannelCaps::default(), 0);
        assert_eq!(
            p.steps,
            vec![Suppress, SendMessage(POLITE_REDIRECT_MESSAGE.into())]
        );
        assert_eq!(p.audit.len(), 1);
    }
}
