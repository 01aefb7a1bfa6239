//! Gates (spec §3.4): the unified guardrail / approval / access-control
//! primitive — gate definitions, their lanes, providers and triggers, access
//! levels, gate results and the context-mutation allowlist.

use serde::{Deserialize, Serialize};

use super::work::Expectation;
use super::{JsonObject, ModelError};

spec_enum! {
    /// What kind of check a gate performs (§3.4).
    #[derive(Default)]
    pub enum GateType {
        NumericRange => "numeric_range",
        #[default]
        StringMatch => "string_match",
        Regex => "regex",
        FileValid => "file_valid",
        ApprovalAlways => "approval_always",
        CustomCheck => "custom_check",
    }
}

spec_enum! {
    /// Whether a gate can block (`policy`) or only advise (`quality`) (§3.4).
    pub enum GateLane {
        Policy => "policy",
        Quality => "quality",
    }
}

spec_enum! {
    /// Who evaluates a gate (§3.4).
    #[derive(Default)]
    pub enum GateProvider {
        GuardrailsAi => "guardrails_ai",
        #[default]
        Predicate => "predicate",
        Llm => "llm",
        Script => "script",
        Custom => "custom",
    }
}

impl GateProvider {
    /// The provider's natural lane: `llm` is advisory, all others block.
    pub fn lane(&self) -> GateLane {
        match self {
            GateProvider::Llm => GateLane::Quality,
            _ => GateLane::Policy,
        }
    }
}

spec_enum! {
    /// When a gate fires (§3.4).
    pub enum GateTrigger {
        EveryUserMessage => "every_user_message",
        EveryAgentResponse => "every_agent_response",
        AfterStep => "after_step",
        OnToolCall => "on_tool_call",
    }
}

spec_enum! {
    /// A gate's decision (§3.4 `GateResult.action`).
    pub enum GateAction {
        Continue => "continue",
        Block => "block",
        RequireApproval => "require_approval",
    }
}

/// The only top-level keys a gate's `modified_context` may carry (§3.4); the
/// gate runner strips (and audits) every other key.
pub const ALLOWED_MUTATIONS: [&str; 3] = ["response", "message", "tool_args"];

/// A gate definition (§3.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub name: String,
    pub on: GateTrigger,
    #[serde(default)]
    pub after_step: Option<u64>,
    #[serde(default)]
    pub provider: GateProvider,
    #[serde(rename = "type", default)]
    pub kind: GateType,
    #[serde(default)]
    pub check: Option<String>,
    #[serde(default)]
    pub config: JsonObject,
    #[serde(default)]
    pub extract: Option<String>,
    /// `{"min": float, "max": float}`; kept as an object, as the spec types it.
    #[serde(default)]
    pub auto_approve: Option<JsonObject>,
    /// `{"min": float, "max": float}`.
    #[serde(default)]
    pub require_approval: Option<JsonObject>,
    /// `{"outside": [float, float]}`.
    #[serde(default)]
    pub block: Option<JsonObject>,
    #[serde(default)]
    pub allowed_values: Option<Vec<String>>,
    #[serde(default)]
    pub approval_values: Option<Vec<String>>,
    #[serde(default = "default_on_block")]
    pub on_block: String,
    #[serde(default)]
    pub check_command: Option<String>,
    #[serde(default)]
    pub check_expect: Option<Expectation>,
    #[serde(default)]
    pub promote_to_policy: bool,
}

fn default_on_block() -> String {
    "report".to_string()
}

impl Gate {
    /// A gate with the spec defaults (predicate provider, string_match type,
    /// on_block "report", not promoted).
    pub fn new(name: impl Into<String>, on: GateTrigger) -> Self {
        Gate {
            name: name.into(),
            on,
            after_step: None,
            provider: GateProvider::default(),
            kind: GateType::default(),
            check: None,
            config: JsonObject::new(),
            extract: None,
            auto_approve: None,
            require_approval: None,
            block: None,
            allowed_values: None,
            approval_values: None,
            on_block: default_on_block(),
            check_command: None,
            check_expect: None,
            promote_to_policy: false,
        }
    }

    /// The lane this gate runs in: an `llm` gate is `quality` unless promoted
    /// (`promote_to_policy`, ignored for other providers); all else `policy`.
    pub fn lane(&self) -> GateLane {
        if self.provider == GateProvider::Llm && self.promote_to_policy {
            GateLane::Policy
        } else {
            self.provider.lane()
        }
    }

    /// A gate as written in `gates.system` (or any JSON definition):
    /// `provider: guard` is the guard's short name. The error is the field
    /// that is wrong and why.
    pub fn from_definition(def: &JsonObject) -> Result<Gate, String> {
        let mut def = def.clone();
        if def.get("provider").and_then(serde_json::Value::as_str) == Some("guard") {
            def.insert("provider".into(), "guardrails_ai".into());
        }
        let gate: Gate =
            serde_json::from_value(serde_json::Value::Object(def)).map_err(|e| e.to_string())?;
        gate.validate().map_err(|e| e.to_string())?;
        Ok(gate)
    }

    /// Keys of `def` (the definition this gate was read from) that no
    /// field of a gate has: serde dropped them while reading. Keys inside
    /// the range objects and `check_expect` are checked too
    /// (`auto_approve.mn`), as a path.
    pub fn unknown_keys(&self, def: &JsonObject) -> Vec<String> {
        let known = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(known)) => known,
            _ => return Vec::new(),
        };
        let mut unknown: Vec<String> = def
            .keys()
            .filter(|k| !known.contains_key(*k))
            .cloned()
            .collect();
        const RANGE: &[&str] = &["min", "max"];
        let nested: [(&str, &[&str]); 4] = [
            ("auto_approve", RANGE),
            ("require_approval", RANGE),
            ("block", &["outside"]),
            ("check_expect", &Expectation::FIELDS),
        ];
        for (field, allowed) in nested {
            if let Some(serde_json::Value::Object(inner)) = def.get(field) {
                unknown.extend(
                    inner
                        .keys()
                        .filter(|k| !allowed.contains(&k.as_str()))
                        .map(|k| format!("{field}.{k}")),
                );
            }
        }
        unknown
    }

    /// The key of `def` that stops it reading as a gate, when one alone
    /// does: a missing `name` or `on`, or a value its field cannot take
    /// (`on: on_every_moon`, `after_step: "two"`), so a config error names
    /// `gates.system[N].on` rather than the whole gate. Each key is tried
    /// on its own in a minimal definition.
    pub fn misread_key(def: &JsonObject) -> Option<String> {
        if let Some(missing) = ["name", "on"].into_iter().find(|k| !def.contains_key(*k)) {
            return Some(missing.to_owned());
        }
        let mut base = JsonObject::new();
        base.insert("name".into(), "g".into());
        base.insert("on".into(), GateTrigger::EveryUserMessage.as_str().into());
        def.iter()
            .find(|(key, value)| {
                let mut one = base.clone();
                one.insert((*key).clone(), (*value).clone());
                Gate::from_definition(&one).is_err()
            })
            .map(|(key, _)| key.clone())
    }

    /// Why this gate can never pass anything it checks, if so: a predicate
    /// on tool calls that names no argument (`extract`) finds no value and
    /// blocks every call. (Guard and LLM gates read the whole call;
    /// `approval_always` needs no value.)
    pub fn blocks_everything(&self) -> Option<String> {
        (self.on == GateTrigger::OnToolCall
            && self.provider == GateProvider::Predicate
            && self.kind != GateType::ApprovalAlways
            && self.extract.as_deref().is_none_or(|e| e.trim().is_empty()))
        .then(|| {
            format!(
                "gate {:?} checks tool calls but names no argument to check (e.g. `extract: command`), so it would block every call",
                self.name
            )
        })
    }

    /// Re-checks the nested `check_expect`, for values built in Rust.
    pub fn validate(&self) -> Result<(), ModelError> {
        match &self.check_expect {
            Some(e) => e.validate(),
            None => Ok(()),
        }
    }
}

/// A tool-access tier for chatbot deployments (§3.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccessLevel {
    pub description: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub requires: Vec<String>,
    /// Seconds until access drops back; `None` never expires.
    #[serde(default)]
    pub expires_after: Option<u64>,
}

/// The checked value of a gate result: the spec's `str | float | None` (the
/// `None` is the surrounding `Option`). Untagged, so it is a bare JSON string
/// or number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GateValue {
    Text(String),
    Number(f64),
}

/// What one gate decided (§3.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub gate_name: String,
    pub lane: GateLane,
    /// Quality-lane gates only ever return `continue`; the gate runner enforces
    /// that (and drops their mutations), not the model.
    pub action: GateAction,
    pub reason: String,
    #[serde(default)]
    pub value: Option<GateValue>,
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub modified_context: Option<JsonObject>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            GateType::ALL,
            &[
                (GateType::NumericRange, "numeric_range"),
                (GateType::StringMatch, "string_match"),
                (GateType::Regex, "regex"),
                (GateType::FileValid, "file_valid"),
                (GateType::ApprovalAlways, "approval_always"),
                (GateType::CustomCheck, "custom_check"),
            ],
        );
        assert_enum_strings(
            GateLane::ALL,
            &[(GateLane::Policy, "policy"), (GateLane::Quality, "quality")],
        );
        assert_enum_strings(
            GateProvider::ALL,
            &[
                (GateProvider::GuardrailsAi, "guardrails_ai"),
                (GateProvider::Predicate, "predicate"),
                (GateProvider::Llm, "llm"),
                (GateProvider::Script, "script"),
                (GateProvider::Custom, "custom"),
            ],
        );
        assert_enum_strings(
            GateTrigger::ALL,
            &[
                (GateTrigger::EveryUserMessage, "every_user_message"),
                (GateTrigger::EveryAgentResponse, "every_agent_response"),
                (GateTrigger::AfterStep, "after_step"),
                (GateTrigger::OnToolCall, "on_tool_call"),
            ],
        );
        assert_enum_strings(
            GateAction::ALL,
            &[
                (GateAction::Continue, "continue"),
                (GateAction::Block, "block"),
                (GateAction::RequireApproval, "require_approval"),
            ],
        );
    }

    #[test]
    fn gate_defaults() {
        let g: Gate =
            serde_json::from_value(json!({"name": "g", "on": "every_user_message"})).unwrap();
        assert_eq!(g, Gate::new("g", GateTrigger::EveryUserMessage));
        assert_eq!(g.provider, GateProvider::Predicate);
        assert_eq!(g.kind, GateType::StringMatch);
        assert_eq!(g.on_block, "report");
        assert!(!g.promote_to_policy);
        let v = round_trip(&g);
        assert_eq!(v["type"], "string_match");
        assert!(v["check_expect"].is_null() && v["allowed_values"].is_null());
    }

    #[test]
    fn gate_full_round_trip() {
        let g: Gate = serde_json::from_value(json!({
            "name": "position_size", "on": "on_tool_call", "after_step": 2,
            "provider": "predicate", "type": "numeric_range", "check": "size",
            "config": {"unit": "usd"}, "extract": "position_usd",
            "auto_approve": {"min": 0.0, "max": 50.0},
            "require_approval": {"min": 50.0, "max": 500.0},
            "block": {"outside": [0.0, 500.0]},
            "allowed_values": ["a"], "approval_values": ["b"],
            "on_block": "escalate", "check_command": "./check.sh",
            "check_expect": {"exit_code": 0}, "promote_to_policy": false
        }))
        .unwrap();
        let v = round_trip(&g);
        assert_eq!(v["block"]["outside"], json!([0.0, 500.0]));
    }

    #[test]
    fn gate_refuses_invalid_check_expect() {
        assert_refused::<Gate>(
            json!({"name": "g", "on": "after_step", "check_expect": {}}),
            &ModelError::ExpectationNoPredicate,
        );
        let mut g = Gate::new("g", GateTrigger::AfterStep);
        g.check_expect = Some(Expectation::default());
        assert_eq!(g.validate(), Err(ModelError::ExpectationNoPredicate));
        g.check_expect = Some(Expectation::exit_code(0));
        assert_eq!(g.validate(), Ok(()));
    }

    #[test]
    fn lane_derivation() {
        // (provider, promote_to_policy, expected lane)
        let cases = [
            (GateProvider::Llm, false, GateLane::Quality),
            (GateProvider::Llm, true, GateLane::Policy),
            (GateProvider::Predicate, false, GateLane::Policy),
            (GateProvider::Predicate, true, GateLane::Policy),
            (GateProvider::GuardrailsAi, false, GateLane::Policy),
            (GateProvider::Script, false, GateLane::Policy),
            (GateProvider::Custom, true, GateLane::Policy),
        ];
        for (provider, promote, lane) in cases {
            let mut g = Gate::new("g", GateTrigger::EveryAgentResponse);
            g.provider = provider;
            g.promote_to_policy = promote;
            assert_eq!(g.lane(), lane, "{provider} promote={promote}");
        }
    }

    #[test]
    fn allowed_mutations_are_the_spec_keys() {
        assert_eq!(ALLOWED_MUTATIONS, ["response", "message", "tool_args"]);
    }

    #[test]
    fn access_level_round_trip() {
        let a: AccessLevel = serde_json::from_value(json!({"description": "anon"})).unwrap();
        assert!(a.tools.is_empty() && a.requires.is_empty() && a.expires_after.is_none());
        let v = round_trip(&a);
        assert!(v["expires_after"].is_null());
    }

    #[test]
    fn gate_result_value_is_str_float_or_null() {
        let mut r = GateResult {
            gate_name: "g".into(),
            lane: GateLane::Quality,
            action: GateAction::Continue,
            reason: "fine".into(),
            value: Some(GateValue::Number(25.5)),
            score: Some(0.8),
            flags: vec!["verbose".into()],
            modified_context: None,
        };
        let v = round_trip(&r);
        assert_eq!(v["value"], json!(25.5));
        assert!(v["modified_context"].is_null());

        r.value = Some(GateValue::Text("buy".into()));
        r.lane = GateLane::Policy;
        r.action = GateAction::RequireApproval;
        r.modified_context = Some(
            json!({"tool_args": {"position_usd": 25.0}})
                .as_object()
                .unwrap()
                .clone(),
        );
        let v = round_trip(&r);
        assert_eq!(v["value"], "buy");

        r.value = None;
        assert!(round_trip(&r)["value"].is_null());

        let parsed: GateResult = serde_json::from_value(
            json!({"gate_name": "g", "lane": "policy", "action": "block", "reason": "r", "value": 3}),
        )
        .unwrap();
        assert_eq!(parsed.value, Some(GateValue::Number(3.0)));
        assert!(parsed.flags.is_empty());
        assert!(
            serde_json::from_value::<GateResult>(
                json!({"gate_name": "g", "lane": "policy", "action": "maybe", "reason": "r"})
            )
            .is_err()
        );
    }
}
