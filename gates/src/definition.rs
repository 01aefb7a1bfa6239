//! What the providers would find wrong with the owner's gates only when
//! they first check something (`gates.system`): a regex gate without a
//! pattern or with one that does not compile, a numeric gate whose ranges do
//! not read, a script gate without a command. Each such gate fails closed on
//! every check at run time; here it is a configuration error naming the key,
//! so `silas config check` and `silas start` refuse it. (Core's rules come
//! first: a definition that does not read as a gate, unknown keys, a
//! tool-call predicate without `extract`.)

use silas_core::config::{ConfigError, GateDefinition};
use silas_core::model::gates::{Gate, GateProvider, GateType};

use crate::guard::{CHECKS, on_fail_mode, run_check};
use crate::predicate::{NumericRule, regex_pattern};
use crate::script::script_command;

/// The errors of every readable definition in `system`, in order.
pub fn config_errors(system: &[GateDefinition]) -> Vec<ConfigError> {
    system
        .iter()
        .enumerate()
        .filter_map(|(i, def)| {
            let gate = Gate::from_definition(def).ok()?;
            let (field, why) = problem(&gate)?;
            let key = match field {
                "" => format!("gates.system[{i}]"),
                field => format!("gates.system[{i}].{field}"),
            };
            Some(ConfigError::Invalid { key, message: why })
        })
        .collect()
}

/// The first problem of `gate` a provider would hit: the key within the
/// gate (`""`: the gate as a whole) and why.
pub fn problem(gate: &Gate) -> Option<(&'static str, String)> {
    match (gate.provider, gate.kind) {
        (GateProvider::Script, _) => script_command(gate)
            .is_none_or(|c| c.trim().is_empty())
            .then(|| {
                (
                    "check_command",
                    "a script gate needs check_command (the command to run)".into(),
                )
            }),
        (GateProvider::Predicate, GateType::Regex) => match regex_pattern(gate) {
            None => Some((
                "check",
                "a regex gate needs check (the pattern the value must match)".into(),
            )),
            Some((field, p)) => regex::Regex::new(p)
                .err()
                .map(|e| (field, format!("not a valid pattern: {e}"))),
        },
        (GateProvider::Predicate, GateType::NumericRange) => match NumericRule::from_gate(gate) {
            Err(e) => Some(("", e)),
            // `block` only narrows: a value in neither range is blocked.
            Ok(rule) if rule.auto_approve.is_none() && rule.require_approval.is_none() => Some((
                "auto_approve",
                "a numeric_range gate needs auto_approve or require_approval (a value in neither is blocked), so it would block everything".into(),
            )),
            Ok(_) => None,
        },
        (GateProvider::Predicate, GateType::StringMatch)
            if gate.allowed_values.as_ref().is_none_or(Vec::is_empty)
                && gate.approval_values.as_ref().is_none_or(Vec::is_empty) =>
        {
            Some((
                "allowed_values",
                "a string_match gate needs allowed_values or approval_values (any other value is blocked), so it would block everything".into(),
            ))
        }
        (GateProvider::GuardrailsAi, _) => guard_problem(gate),
        (_, GateType::CustomCheck) => Some(("type", "custom_check needs provider: script".into())),
        _ => None,
    }
}

/// A guard gate's check must be one the guard runs, with settings it
/// reads; otherwise it blocks every text (a typo never weakens a check).
fn guard_problem(gate: &Gate) -> Option<(&'static str, String)> {
    let Some(check) = gate.check.as_deref() else {
        return Some((
            "check",
            format!("a guard gate needs check: one of {}", CHECKS.join(", ")),
        ));
    };
    if !CHECKS.contains(&check) {
        return Some((
            "check",
            format!(
                "unknown guard check {check:?}: one of {}",
                CHECKS.join(", ")
            ),
        ));
    }
    if on_fail_mode(check, &gate.config).is_none() {
        return Some((
            "config.on_fail",
            format!(
                "not an on_fail mode for the {check} check (exception, or fix where the check can fix)"
            ),
        ));
    }
    // Running the check over nothing reads its settings; the only one that
    // can be wrong is the secrets check's threshold.
    run_check(check, "", &gate.config)
        .err()
        .map(|e| ("config.min_confidence", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn errors(defs: serde_json::Value) -> Vec<String> {
        let defs: Vec<GateDefinition> = serde_json::from_value(defs).unwrap();
        config_errors(&defs).iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn gates_that_would_fail_closed_on_every_check_are_named() {
        let got = errors(json!([
            {"name": "fine", "on": "on_tool_call", "type": "regex", "check": "^ls", "extract": "command"},
            {"name": "no-pattern", "on": "every_user_message", "type": "regex"},
            {"name": "bad", "on": "every_user_message", "type": "regex", "check": "printf ("},
            {"name": "bad-config", "on": "every_user_message", "type": "regex", "config": {"pattern": "a{"}},
            {"name": "script", "on": "every_user_message", "provider": "script"},
            {"name": "custom", "on": "every_user_message", "type": "custom_check"},
            {"name": "range", "on": "every_user_message", "type": "numeric_range", "block": {"outside": "x"}},
            {"name": "guard", "on": "every_user_message", "provider": "guard", "check": "pii"},
            {"name": "ask", "on": "on_tool_call", "type": "approval_always"},
            {"name": "blank", "on": "every_user_message", "provider": "script", "check_command": "  "},
            {"name": "llm-custom", "on": "every_user_message", "provider": "llm", "type": "custom_check", "check": "x"},
        ]));
        assert_eq!(got.len(), 8, "{got:#?}");
        assert!(
            got[0].starts_with("gates.system[1].check: a regex gate needs check"),
            "{got:#?}"
        );
        assert!(
            got[1].starts_with("gates.system[2].check: not a valid pattern"),
            "{got:#?}"
        );
        assert!(
            got[2].starts_with("gates.system[3].config.pattern: not a valid pattern"),
            "{got:#?}"
        );
        assert!(
            got[3].starts_with("gates.system[4].check_command: "),
            "{got:#?}"
        );
        assert!(
            got[4].starts_with("gates.system[5].type: custom_check needs"),
            "{got:#?}"
        );
        assert!(got[5].starts_with("gates.system[6]: "), "{got:#?}");
        assert!(
            got[6].starts_with("gates.system[9].check_command: "),
            "{got:#?}"
        );
        assert!(
            got[7].starts_with("gates.system[10].type: custom_check"),
            "{got:#?}"
        );
    }

    #[test]
    fn gates_that_would_block_every_value_or_never_run_their_check_are_named() {
        let got = errors(json!([
            {"name": "range-ok", "on": "every_user_message", "type": "numeric_range", "auto_approve": {"max": 5}},
            {"name": "range-none", "on": "every_user_message", "type": "numeric_range", "block": {"outside": [0, 9]}},
            {"name": "words-ok", "on": "every_user_message", "allowed_values": ["yes"]},
            {"name": "words-none", "on": "every_user_message"},
            {"name": "words-empty", "on": "every_user_message", "allowed_values": [], "approval_values": []},
            {"name": "guard-none", "on": "every_user_message", "provider": "guard"},
            {"name": "guard-typo", "on": "every_user_message", "provider": "guard", "check": "pi"},
            {"name": "guard-mode", "on": "every_user_message", "provider": "guard", "check": "jailbreak", "config": {"on_fail": "fix"}},
            {"name": "guard-level", "on": "every_user_message", "provider": "guard", "check": "secrets", "config": {"min_confidence": "sure"}},
            {"name": "guard-ok", "on": "every_user_message", "provider": "guard", "check": "secrets", "config": {"min_confidence": "definite"}},
            {"name": "approval-ok", "on": "every_user_message", "approval_values": ["maybe"]},
        ]));
        let want = [
            "gates.system[1].auto_approve: a numeric_range gate needs",
            "gates.system[3].allowed_values: a string_match gate needs",
            "gates.system[4].allowed_values: a string_match gate needs",
            "gates.system[5].check: a guard gate needs check: one of pii, secrets, jailbreak",
            "gates.system[6].check: unknown guard check \"pi\"",
            "gates.system[7].config.on_fail: ",
            "gates.system[8].config.min_confidence: unknown min_confidence",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (got, want) in got.iter().zip(want) {
            assert!(got.starts_with(want), "{got} / {want}");
        }
    }
}
