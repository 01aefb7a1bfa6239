//! The two-lane gate runner (§4.9, §5.4).
//!
//! The rules are pure functions ([`gate_matches`], [`policy_lane_result`],
//! [`quality_lane_result`], and the allowlist filter/merge in
//! [`crate::context`]); [`GateRunner::check_gates`] sequences them:
//!
//! 1. gates are filtered by trigger (and `after_step` index);
//! 2. **policy lane** in order — each result is forced into the policy lane,
//!    its `modified_context` filtered through `ALLOWED_MUTATIONS` (a
//!    `rejected_mutation` event per dropped key) and merged left to right.
//!    The first `block` short-circuits enforcement: later policy gates still
//!    run and are audited (`gate_block_additional`), but their mutations are
//!    no longer merged — the blocked turn will not use the context;
//! 3. **quality lane** on the post-mutation context — a `block` or
//!    `require_approval` is rewritten to `continue` and audited as
//!    `quality_lane_violation`; any mutation is dropped;
//! 4. a gate whose provider is not registered is a policy block
//!    `"No provider: {name}"`;
//! 5. `limits.max_gate_evals_per_turn` is a per-turn [`TurnBudget`] shared
//!    by every `check_gates` call of the turn. Past it, policy gates block
//!    (fail closed — otherwise flooding tool calls could skip gates) and
//!    quality gates are skipped with the flag `eval_cap_reached`.
//!
//! Audit events are returned in [`GateOutcome::audit`] for the caller to
//! persist (see the crate docs); they never contain message/response text.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;
use silas_core::config::GateDefinition;
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction, GateLane, GateResult, GateTrigger};

use crate::audit::{AuditEvent, names};
use crate::context::{RejectReason, filter_mutation, merge_mutation};
use crate::error::GateError;
use crate::provider::{GateCheckProvider, fail_closed};

/// Flag on a quality result skipped because the per-turn cap was reached.
pub const EVAL_CAP_FLAG: &str = "eval_cap_reached";

/// Parses one configured gate. The provider name `guard` (this crate's name
/// for the built-in validators) is accepted as an alias of the spec's
/// `guardrails_ai`.
pub fn parse_gate(def: &GateDefinition, index: usize) -> Result<Gate, GateError> {
    Gate::from_definition(def).map_err(|message| GateError::InvalidDefinition { index, message })
}

/// The gates active for a turn or an execution (ADR-012): the system gates
/// from config followed by the work item's gates, parsed and checked once
/// and then reused for input, tool-call and output checks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActiveGateSet {
    gates: Vec<Gate>,
}

impl ActiveGateSet {
    /// System gates first (§5.4, ADR-012), then work-item gates. Names must
    /// be unique across both.
    pub fn compile(system: &[GateDefinition], work_item: &[Gate]) -> Result<Self, GateError> {
        let mut gates = Vec::with_capacity(system.len() + work_item.len());
        for (i, d) in system.iter().enumerate() {
            gates.push(parse_gate(d, i)?);
        }
        gates.extend(work_item.iter().cloned());
        let mut seen = BTreeSet::new();
        for g in &gates {
            if !seen.insert(g.name.as_str()) {
                return Err(GateError::DuplicateName(g.name.clone()));
            }
        }
        Ok(ActiveGateSet { gates })
    }

    pub fn gates(&self) -> &[Gate] {
        &self.gates
    }
}

/// Whether `gate` fires for `trigger` (an `after_step` gate with a step
/// index fires only after that step; without one, after every step).
pub fn gate_matches(gate: &Gate, trigger: GateTrigger, step: Option<u64>) -> bool {
    gate.on == trigger
        && (trigger != GateTrigger::AfterStep
            || gate.after_step.is_none()
            || gate.after_step == step)
}

/// Forces a provider's result into the policy lane under the gate's name.
pub fn policy_lane_result(gate: &Gate, mut r: GateResult) -> GateResult {
    r.gate_name = gate.name.clone();
    r.lane = GateLane::Policy;
    r
}

/// Enforces quality-lane rules on a provider's result: only `continue`, no
/// mutation. Returns the corrected result and the events for what was
/// overridden.
pub fn quality_lane_result(gate: &Gate, mut r: GateResult) -> (GateResult, Vec<AuditEvent>) {
    let mut audit = Vec::new();
    r.gate_name = gate.name.clone();
    r.lane = GateLane::Quality;
    if r.action != GateAction::Continue {
        audit.push(AuditEvent::new(
            names::QUALITY_LANE_VIOLATION,
            [
                ("gate", Value::from(gate.name.as_str())),
                ("action", Value::from(r.action.as_str())),
            ],
        ));
        r.action = GateAction::Continue;
    }
    if let Some(m) = r.modified_context.take() {
        for k in m.keys() {
            audit.push(rejected(gate, k, "quality_lane"));
        }
    }
    (r, audit)
}

fn rejected(gate: &Gate, key: &str, reason: &str) -> AuditEvent {
    AuditEvent::new(
        names::REJECTED_MUTATION,
        [
            ("gate", Value::from(gate.name.as_str())),
            ("key", Value::from(key)),
            ("reason", Value::from(reason)),
        ],
    )
}

fn evaluated(gate: &Gate, trigger: GateTrigger, r: &GateResult) -> AuditEvent {
    let mut e = AuditEvent::new(
        names::GATE_EVALUATED,
        [
            ("gate", Value::from(gate.name.as_str())),
            ("provider", Value::from(gate.provider.as_str())),
            ("trigger", Value::from(trigger.as_str())),
            ("lane", Value::from(r.lane.as_str())),
            ("action", Value::from(r.action.as_str())),
            ("reason", Value::from(r.reason.as_str())),
        ],
    );
    if let Some(s) = r.score {
        e.data.insert("score".into(), Value::from(s));
    }
    if !r.flags.is_empty() {
        e.data.insert("flags".into(), Value::from(r.flags.clone()));
    }
    e
}

/// The per-turn evaluation allowance (`limits.max_gate_evals_per_turn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnBudget {
    pub max: u32,
    pub used: u32,
}

impl TurnBudget {
    pub fn new(max: u32) -> Self {
        TurnBudget { max, used: 0 }
    }

    /// Takes one evaluation; `false` when the turn's allowance is spent.
    pub fn take(&mut self) -> bool {
        if self.used < self.max {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

/// What `check_gates` decided (§4.9's `(policy_results, quality_results,
/// merged_context)`), plus the audit events to persist.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateOutcome {
    pub policy_results: Vec<GateResult>,
    pub quality_results: Vec<GateResult>,
    pub merged_context: JsonObject,
    /// Index into `policy_results` of the first block: the only one that
    /// escalates.
    pub first_block: Option<usize>,
    pub audit: Vec<AuditEvent>,
}

impl GateOutcome {
    pub fn blocked(&self) -> Option<&GateResult> {
        self.first_block.and_then(|i| self.policy_results.get(i))
    }

    /// Policy results that ask for human approval (each is prompted; an
    /// `approval_always` gate never short-circuits).
    pub fn approvals_required(&self) -> impl Iterator<Item = &GateResult> {
        self.policy_results
            .iter()
            .filter(|r| r.action == GateAction::RequireApproval)
    }
}

/// Dispatches gates to providers registered by name.
#[derive(Clone, Default)]
pub struct GateRunner {
    providers: HashMap<String, Arc<dyn GateCheckProvider>>,
}

impl GateRunner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `provider` under `name` (a `GateProvider` string:
    /// `predicate`, `guardrails_ai`, `script`, `llm`, `custom`).
    pub fn register(&mut self, name: &str, provider: Arc<dyn GateCheckProvider>) -> &mut Self {
        self.providers.insert(name.to_owned(), provider);
        self
    }

    /// Evaluates one gate, lane rules applied (§4.9 `check_gate`). Mutations
    /// are returned unfiltered; `check_gates` is where they are enforced.
    pub async fn check_gate(&self, gate: &Gate, ctx: &JsonObject) -> GateResult {
        let name = gate.provider.as_str();
        match self.providers.get(name) {
            Some(p) => p.check(gate, ctx).await,
            None => fail_closed(gate, format!("No provider: {name}")),
        }
    }

    /// Evaluates the gates of `gates` matching `trigger` (and `step`) in two
    /// lanes. See the module docs for the exact rules.
    pub async fn check_gates(
        &self,
        gates: &[Gate],
        trigger: GateTrigger,
        step: Option<u64>,
        context: JsonObject,
        budget: &mut TurnBudget,
    ) -> GateOutcome {
        let mut out = GateOutcome {
            merged_context: context,
            ..GateOutcome::default()
        };
        let matching = || gates.iter().filter(|g| gate_matches(g, trigger, step));
        let mut cap_logged = false;
        let max = budget.max;
        let mut cap_hit = |out: &mut GateOutcome, gate: &Gate| {
            if !cap_logged {
                cap_logged = true;
                out.audit.push(AuditEvent::new(
                    names::GATE_EVAL_CAP_REACHED,
                    [
                        ("gate", Value::from(gate.name.as_str())),
                        ("max", Value::from(max)),
                    ],
                ));
            }
        };

        for gate in matching().filter(|g| g.lane() == GateLane::Policy) {
            let r = if budget.take() {
                policy_lane_result(gate, self.check_gate(gate, &out.merged_context).await)
            } else {
                cap_hit(&mut out, gate);
                fail_closed(
                    gate,
                    format!("gate evaluation cap reached ({max} per turn)"),
                )
            };
            out.audit.push(evaluated(gate, trigger, &r));
            if let Some(m) = &r.modified_context {
                let f = filter_mutation(m);
                for (k, why) in &f.rejected {
                    let reason = match why {
                        RejectReason::NotAllowed => "not_in_allowlist",
                        RejectReason::WrongType => "wrong_type",
                    };
                    out.audit.push(rejected(gate, k, reason));
                }
                if out.first_block.is_none() && r.action != GateAction::Block {
                    for c in merge_mutation(&mut out.merged_context, &f.accepted) {
                        out.audit.push(mutation_event(gate, &c));
                    }
                }
            }
            if r.action == GateAction::Block {
                let event = if out.first_block.is_none() {
                    out.first_block = Some(out.policy_results.len());
                    names::GATE_BLOCKED
                } else {
                    names::GATE_BLOCK_ADDITIONAL
                };
                out.audit.push(AuditEvent::new(
                    event,
                    [
                        ("gate", Value::from(gate.name.as_str())),
                        ("reason", Value::from(r.reason.as_str())),
                        ("on_block", Value::from(gate.on_block.as_str())),
                    ],
                ));
            }
            out.policy_results.push(r);
        }

        for gate in matching().filter(|g| g.lane() == GateLane::Quality) {
            let r = if budget.take() {
                let raw = self.check_gate(gate, &out.merged_context).await;
                let (r, events) = quality_lane_result(gate, raw);
                out.audit.extend(events);
                r
            } else {
                cap_hit(&mut out, gate);
                let mut r = crate::provider::result(
                    gate,
                    GateAction::Continue,
                    "skipped: gate evaluation cap reached",
                );
                r.lane = GateLane::Quality;
                r.flags = vec![EVAL_CAP_FLAG.to_owned()];
                r
            };
            out.audit.push(evaluated(gate, trigger, &r));
            out.quality_results.push(r);
        }
        out
    }
}

/// The `gate_mutation` event: tool arguments with both values (the audit
/// log redacts secrets on write); `response`/`message` by length only,
/// because their text is NEVER_LOG content — and so is a guard's rewrite of
/// an argument: it redacted PII or a secret, and the append-only audit must
/// not keep what the gate took out (the audit's own redaction knows secrets,
/// not PII).
fn mutation_event(gate: &Gate, c: &crate::context::MergedChange) -> AuditEvent {
    let mut e = AuditEvent::new(
        names::GATE_MUTATION,
        [
            ("gate", Value::from(gate.name.as_str())),
            ("key", Value::from(c.key.as_str())),
        ],
    );
    let redaction = gate.provider == silas_core::model::gates::GateProvider::GuardrailsAi;
    if c.key.starts_with("tool_args.") && !redaction {
        e.data
            .insert("original".into(), c.original.clone().unwrap_or(Value::Null));
        e.data.insert("modified".into(), c.modified.clone());
    } else {
        let len = |v: Option<&Value>| v.and_then(Value::as_str).map(|s| s.chars().count());
        e.data.insert(
            "original_chars".into(),
            Value::from(len(c.original.as_ref())),
        );
        e.data
            .insert("modified_chars".into(), Value::from(len(Some(&c.modified))));
    }
    e
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;
    use silas_core::model::gates::GateProvider;

    use super::*;

    #[test]
    fn gate_matches_table() {
        let mut g = Gate::new("g", GateTrigger::AfterStep);
        assert!(gate_matches(&g, GateTrigger::AfterStep, Some(3)));
        assert!(gate_matches(&g, GateTrigger::AfterStep, None));
        assert!(!gate_matches(&g, GateTrigger::OnToolCall, None));
        g.after_step = Some(2);
        assert!(gate_matches(&g, GateTrigger::AfterStep, Some(2)));
        assert!(!gate_matches(&g, GateTrigger::AfterStep, Some(3)));
        assert!(!gate_matches(&g, GateTrigger::AfterStep, None));
        let t = Gate::new("t", GateTrigger::OnToolCall);
        for trig in GateTrigger::ALL {
            assert_eq!(
                gate_matches(&t, *trig, None),
                *trig == GateTrigger::OnToolCall
            );
        }
    }

    #[test]
    fn quality_lane_rules_table() {
        let g = Gate::new("q", GateTrigger::EveryAgentResponse);
        let base = GateResult {
            gate_name: "whatever".into(),
            lane: GateLane::Policy,
            action: GateAction::Continue,
            reason: "r".into(),
            value: None,
            score: Some(0.5),
            flags: vec![],
            modified_context: None,
        };
        // (action in, mutation keys in, expected event names)
        let cases: Vec<(GateAction, Vec<&str>, Vec<&str>)> = vec![
            (GateAction::Continue, vec![], vec![]),
            (
                GateAction::Block,
                vec![],
                vec![names::QUALITY_LANE_VIOLATION],
            ),
            (
                GateAction::RequireApproval,
                vec![],
                vec![names::QUALITY_LANE_VIOLATION],
            ),
            (
                GateAction::Continue,
                vec!["response"],
                vec![names::REJECTED_MUTATION],
            ),
            (
                GateAction::Block,
                vec!["response", "x"],
                vec![
                    names::QUALITY_LANE_VIOLATION,
                    names::REJECTED_MUTATION,
                    names::REJECTED_MUTATION,
                ],
            ),
        ];
        for (action, keys, events) in cases {
            let mut r = base.clone();
            r.action = action;
            if !keys.is_empty() {
                r.modified_context =
                    Some(keys.iter().map(|k| (k.to_string(), json!("v"))).collect());
            }
            let (r, audit) = quality_lane_result(&g, r);
            assert_eq!(r.action, GateAction::Continue);
            assert_eq!(r.lane, GateLane::Quality);
            assert_eq!(r.gate_name, "q");
            assert!(r.modified_context.is_none());
            let got: Vec<&str> = audit.iter().map(|e| e.event.as_str()).collect();
            assert_eq!(got, events, "{action}");
        }
    }

    #[test]
    fn budget_takes_up_to_max() {
        let mut b = TurnBudget::new(2);
        assert!(b.take() && b.take());
        assert!(!b.take());
        assert_eq!(b.used, 2);
        assert!(!TurnBudget::new(0).take());
    }

    #[test]
    fn compile_orders_system_first_maps_guard_and_refuses_duplicates() {
        let sys: Vec<GateDefinition> = vec![
            json!({"name": "input_guard", "on": "every_user_message", "provider": "guardrails_ai", "check": "jailbreak"}),
            json!({"name": "pii", "on": "every_agent_response", "provider": "guard", "check": "pii"}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
        let work = vec![Gate::new("size", GateTrigger::OnToolCall)];
        let set = ActiveGateSet::compile(&sys, &work).unwrap();
        let names: Vec<&str> = set.gates().iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["input_guard", "pii", "size"]);
        assert_eq!(set.gates()[1].provider, GateProvider::GuardrailsAi);
        let dup = vec![Gate::new("pii", GateTrigger::OnToolCall)];
        assert_eq!(
            ActiveGateSet::compile(&sys, &dup),
            Err(GateError::DuplicateName("pii".into()))
        );
        let bad = vec![
            json!({"name": "x", "on": "sometimes"})
                .as_object()
                .unwrap()
                .clone(),
        ];
        assert!(matches!(
            ActiveGateSet::compile(&bad, &[]),
            Err(GateError::InvalidDefinition { index: 0, .. })
        ));
    }

    #[test]
    fn default_config_gates_parse() {
        let cfg = silas_core::config::GatesConfig::default();
        let set = ActiveGateSet::compile(&cfg.system, &[]).unwrap();
        assert_eq!(set.gates().len(), 2);
    }
}
