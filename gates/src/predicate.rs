//! The predicate provider (§5.5.2): deterministic numeric-range, string,
//! regex, file and always-approve checks, plus explicit clamp mutations.
//!
//! The decisions are pure functions ([`decide_numeric`], [`decide_string`],
//! [`lexical_path_ok`]); [`PredicateProvider`] only adds the file-system look
//! for `file_valid` and a regex cache. Every malformed input fails closed to
//! `block`: this is a policy-lane provider.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use regex::Regex;
use serde_json::Value;
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction, GateResult, GateType};

use crate::context::{TOOL_ARGS, extract_value, subject_key};
use crate::provider::{BoxFuture, GateCheckProvider, block, gate_value, result};

/// An inclusive `{"min", "max"}` range; a missing bound is unbounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

impl Range {
    pub fn contains(&self, v: f64) -> bool {
        self.min <= v && v <= self.max
    }
}

/// Parses `{"min": f, "max": f}`. A bound that is present but not a finite
/// number is an error (the gate then blocks) rather than silently unbounded.
pub fn parse_range(obj: &JsonObject) -> Result<Range, String> {
    let bound = |key: &str, default: f64| match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| format!("range bound {key} is not a number")),
    };
    let r = Range {
        min: bound("min", f64::NEG_INFINITY)?,
        max: bound("max", f64::INFINITY)?,
    };
    if r.min > r.max {
        return Err(format!("range min {} > max {}", r.min, r.max));
    }
    Ok(r)
}

/// Parses `{"outside": [low, high]}`.
pub fn parse_outside(obj: &JsonObject) -> Result<Range, String> {
    let pair = obj
        .get("outside")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 2)
        .ok_or("block.outside must be [low, high]")?;
    let n = |v: &Value| v.as_f64().filter(|f| f.is_finite());
    match (n(&pair[0]), n(&pair[1])) {
        (Some(min), Some(max)) if min <= max => Ok(Range { min, max }),
        _ => Err("block.outside must be two numbers, low <= high".to_owned()),
    }
}

/// A gate's numeric configuration, parsed once per evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NumericRule {
    pub block_outside: Option<Range>,
    pub auto_approve: Option<Range>,
    pub require_approval: Option<Range>,
    /// `config.clamp`: an explicit normalisation range (§5.5.2 "optional
    /// mutation behaviour").
    pub clamp: Option<Range>,
}

impl NumericRule {
    pub fn from_gate(gate: &Gate) -> Result<Self, String> {
        Ok(NumericRule {
            block_outside: gate.block.as_ref().map(parse_outside).transpose()?,
            auto_approve: gate.auto_approve.as_ref().map(parse_range).transpose()?,
            require_approval: gate
                .require_approval
                .as_ref()
                .map(parse_range)
                .transpose()?,
            clamp: match gate.config.get("clamp") {
                None | Some(Value::Null) => None,
                Some(Value::Object(o)) => Some(parse_range(o)?),
                Some(_) => return Err("config.clamp must be {min, max}".to_owned()),
            },
        })
    }
}

/// A finite number from a JSON number or a numeric string (models and
/// scripts report numbers as text). `NaN`/`inf` are not numeric.
pub fn parse_number(v: &Value) -> Option<f64> {
    let f = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }?;
    f.is_finite().then_some(f)
}

/// §5.5.2 numeric order: hard block outside, then auto-approve, then
/// require-approval, else block. (Clamping happens before this, see
/// [`PredicateProvider`].)
pub fn decide_numeric(v: f64, rule: &NumericRule) -> (GateAction, &'static str) {
    if let Some(b) = rule.block_outside
        && !b.contains(v)
    {
        return (GateAction::Block, "value outside the blocked range");
    }
    if rule.auto_approve.is_some_and(|r| r.contains(v)) {
        return (GateAction::Continue, "value within auto-approve range");
    }
    if rule.require_approval.is_some_and(|r| r.contains(v)) {
        return (GateAction::RequireApproval, "value requires approval");
    }
    (GateAction::Block, "value matches no permitted range")
}

/// §5.5.2 string match: allowed → continue, approval → require approval,
/// anything else → block. Exact, case-sensitive comparison.
pub fn decide_string(v: &str, allowed: &[String], approval: &[String]) -> GateAction {
    if allowed.iter().any(|a| a == v) {
        GateAction::Continue
    } else if approval.iter().any(|a| a == v) {
        GateAction::RequireApproval
    } else {
        GateAction::Block
    }
}

/// The `Expectation.file_exists` path rule, lexically: non-empty, no NUL, no
/// `..` component. Symlinks and absolute paths are judged after resolution.
pub fn lexical_path_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\0')
        && !Path::new(p)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
}

/// Resolves `p` (relative to the first allowed directory) and requires the
/// real path — symlinks followed — to lie inside an allowed directory.
/// `Err` carries the §5.5.2 reason.
pub fn resolve_in_allowed(p: &str, allowed: &[PathBuf]) -> Result<PathBuf, &'static str> {
    const OUTSIDE: &str = "Path outside permitted directories";
    if !lexical_path_ok(p) {
        return Err(OUTSIDE);
    }
    let base = allowed.first().ok_or(OUTSIDE)?;
    let joined = base.join(p); // an absolute `p` replaces `base`
    let roots: Vec<PathBuf> = allowed
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .collect();
    // Lexically outside every root: refuse before touching the file, so the
    // answer for "elsewhere" never depends on whether it exists.
    let lex_inside = allowed.iter().any(|d| joined.starts_with(d))
        || roots.iter().any(|d| joined.starts_with(d));
    if !lex_inside {
        return Err(OUTSIDE);
    }
    let real = match joined.canonicalize() {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("File not found"),
        Err(_) => return Err(OUTSIDE),
    };
    if roots.iter().any(|d| real.starts_with(d)) {
        Ok(real)
    } else {
        Err(OUTSIDE)
    }
}

/// Deterministic checks. `allowed_dirs` is the `file_valid` allowlist (the
/// sandbox work and project directories the runtime hands in).
pub struct PredicateProvider {
    allowed_dirs: Vec<PathBuf>,
    // Patterns come from config and plans and are reused every turn;
    // compiling once per pattern keeps a regex gate in the microseconds.
    regexes: Mutex<HashMap<String, Arc<Regex>>>,
}

impl PredicateProvider {
    pub fn new(allowed_dirs: Vec<PathBuf>) -> Self {
        PredicateProvider {
            allowed_dirs,
            regexes: Mutex::new(HashMap::new()),
        }
    }

    /// Evaluates a gate on its own subject: `extract` if set, else the
    /// trigger's text (`message` / `response`).
    pub fn evaluate(&self, gate: &Gate, ctx: &JsonObject) -> GateResult {
        let value = match &gate.extract {
            Some(name) => extract_value(ctx, name),
            None => subject_key(gate.on).and_then(|k| ctx.get(k)),
        };
        self.evaluate_value(gate, value)
    }

    /// Evaluates a gate on a given value (also used by the script provider
    /// to delegate an extracted stdout value).
    pub fn evaluate_value(&self, gate: &Gate, value: Option<&Value>) -> GateResult {
        if gate.kind == GateType::ApprovalAlways {
            // Always, regardless of the value (or its absence).
            let mut r = result(
                gate,
                GateAction::RequireApproval,
                "always requires approval",
            );
            r.value = value.and_then(gate_value);
            return r;
        }
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return block(gate, "value not found in context");
        };
        let mut r = match gate.kind {
            GateType::NumericRange => self.numeric(gate, value),
            GateType::StringMatch => match crate::context::value_text(value) {
                Some(s) => {
                    let action = decide_string(
                        &s,
                        gate.allowed_values.as_deref().unwrap_or_default(),
                        gate.approval_values.as_deref().unwrap_or_default(),
                    );
                    let reason = match action {
                        GateAction::Continue => "value allowed",
                        GateAction::RequireApproval => "value requires approval",
                        GateAction::Block => "value not in allowed values",
                    };
                    result(gate, action, reason)
                }
                None => block(gate, "value is not a string"),
            },
            GateType::Regex => self.regex(gate, value),
            GateType::FileValid => match value.as_str() {
                Some(p) => self.file_valid(gate, p),
                None => block(gate, "path is not a string"),
            },
            GateType::ApprovalAlways => result(gate, GateAction::RequireApproval, ""),
            GateType::CustomCheck => block(gate, "custom_check needs the script provider"),
        };
        if r.value.is_none() {
            r.value = gate_value(value);
        }
        r
    }

    fn numeric(&self, gate: &Gate, value: &Value) -> GateResult {
        let Some(v) = parse_number(value) else {
            return block(gate, "value is not numeric");
        };
        let rule = match NumericRule::from_gate(gate) {
            Ok(r) => r,
            Err(e) => return block(gate, format!("invalid gate config: {e}")),
        };
        // The hard block applies to the value as proposed: clamping must not
        // launder a value the gate forbids outright.
        if let Some(b) = rule.block_outside
            && !b.contains(v)
        {
            let mut r = block(gate, "value outside the blocked range");
            r.value = gate_value(value);
            return r;
        }
        let mut mutation = None;
        let mut effective = v;
        if let Some(c) = rule.clamp
            && !c.contains(v)
        {
            // Only a tool argument can be rewritten (ALLOWED_MUTATIONS), so a
            // clamp needs `extract` to name one.
            let Some(arg) = gate.extract.as_deref().filter(|a| !a.contains('.')) else {
                return block(
                    gate,
                    "invalid gate config: clamp needs extract naming a tool argument",
                );
            };
            effective = v.clamp(c.min, c.max);
            let mut args = JsonObject::new();
            args.insert(arg.to_owned(), Value::from(effective));
            let mut m = JsonObject::new();
            m.insert(TOOL_ARGS.to_owned(), Value::Object(args));
            mutation = Some(m);
        }
        let (action, reason) = decide_numeric(effective, &rule);
        let reason = if mutation.is_some() {
            format!("clamped {v} to {effective}; {reason}")
        } else {
            reason.to_owned()
        };
        let mut r = result(gate, action, reason);
        r.value = Some(silas_core::model::gates::GateValue::Number(v));
        r.modified_context = mutation;
        r
    }

    fn regex(&self, gate: &Gate, value: &Value) -> GateResult {
        let Some(text) = crate::context::value_text(value) else {
            return block(gate, "value is not a string");
        };
        let Some((_, pattern)) = regex_pattern(gate) else {
            return block(gate, "invalid gate config: regex gate has no pattern");
        };
        let re = match self.compiled(pattern) {
            Ok(re) => re,
            Err(e) => return block(gate, format!("invalid gate config: bad regex: {e}")),
        };
        // Unanchored search, like Python's `re.search`; anchor with ^…$.
        if re.is_match(&text) {
            result(gate, GateAction::Continue, "value matches pattern")
        } else {
            block(gate, "value does not match pattern")
        }
    }

    fn compiled(&self, pattern: &str) -> Result<Arc<Regex>, regex::Error> {
        if let Ok(cache) = self.regexes.lock()
            && let Some(re) = cache.get(pattern)
        {
            return Ok(Arc::clone(re));
        }
        let re = Arc::new(Regex::new(pattern)?);
        if let Ok(mut cache) = self.regexes.lock() {
            cache.insert(pattern.to_owned(), Arc::clone(&re));
        }
        Ok(re)
    }

    fn file_valid(&self, gate: &Gate, path: &str) -> GateResult {
        let real = match resolve_in_allowed(path, &self.allowed_dirs) {
            Ok(p) => p,
            Err(reason) => return block(gate, reason),
        };
        let meta = match std::fs::metadata(&real) {
            Ok(m) if m.is_file() => m,
            Ok(_) => return block(gate, "Not a regular file"),
            Err(_) => return block(gate, "File not found"),
        };
        match gate.config.get("max_size_bytes") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(max) if meta.len() > max => {
                    return block(gate, format!("File larger than {max} bytes"));
                }
                Some(_) => {}
                None => return block(gate, "invalid gate config: max_size_bytes"),
            },
        }
        result(gate, GateAction::Continue, "file valid")
    }
}

/// A regex gate's pattern, with the key it was written under:
/// `config.pattern`, else `check`.
pub fn regex_pattern(gate: &Gate) -> Option<(&'static str, &str)> {
    match gate.config.get("pattern") {
        Some(Value::String(p)) => Some(("config.pattern", p.as_str())),
        _ => gate.check.as_deref().map(|p| ("check", p)),
    }
}

impl GateCheckProvider for PredicateProvider {
    fn check<'a>(&'a self, gate: &'a Gate, ctx: &'a JsonObject) -> BoxFuture<'a, GateResult> {
        Box::pin(async move { self.evaluate(gate, ctx) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn parse_range_table() {
        let cases: Vec<(Value, Result<(f64, f64), ()>)> = vec![
            (json!({"min": 0, "max": 50}), Ok((0.0, 50.0))),
            (json!({"min": 1.5}), Ok((1.5, f64::INFINITY))),
            (json!({"max": 2}), Ok((f64::NEG_INFINITY, 2.0))),
            (json!({}), Ok((f64::NEG_INFINITY, f64::INFINITY))),
            (json!({"min": null, "max": 1}), Ok((f64::NEG_INFINITY, 1.0))),
            (json!({"min": "0"}), Err(())),
            (json!({"min": 5, "max": 1}), Err(())),
        ];
        for (v, want) in cases {
            let got = parse_range(&obj(v.clone()))
                .map(|r| (r.min, r.max))
                .map_err(|_| ());
            assert_eq!(got, want, "{v}");
        }
    }

    #[test]
    fn parse_outside_table() {
        let ok = parse_outside(&obj(json!({"outside": [0, 500]}))).unwrap();
        assert_eq!((ok.min, ok.max), (0.0, 500.0));
        for bad in [
            json!({}),
            json!({"outside": [1]}),
            json!({"outside": [1, 2, 3]}),
            json!({"outside": ["a", 2]}),
            json!({"outside": [5, 1]}),
            json!({"outside": {"min": 1}}),
        ] {
            assert!(parse_outside(&obj(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn parse_number_table() {
        let cases = [
            (json!(25), Some(25.0)),
            (json!(25.5), Some(25.5)),
            (json!("25.5"), Some(25.5)),
            (json!(" 7 "), Some(7.0)),
            (json!("-3"), Some(-3.0)),
            (json!("1e3"), Some(1000.0)),
            (json!("NaN"), None),
            (json!("inf"), None),
            (json!("twenty"), None),
            (json!(""), None),
            (json!(true), None),
            (json!(null), None),
            (json!([1]), None),
        ];
        for (v, want) in cases {
            assert_eq!(parse_number(&v), want, "{v}");
        }
    }

    fn trading_rule() -> NumericRule {
        NumericRule {
            block_outside: Some(Range {
                min: 0.0,
                max: 500.0,
            }),
            auto_approve: Some(Range {
                min: 0.0,
                max: 50.0,
            }),
            require_approval: Some(Range {
                min: 50.0,
                max: 500.0,
            }),
            clamp: None,
        }
    }

    #[test]
    fn numeric_boundaries() {
        use GateAction::*;
        let rule = trading_rule();
        let cases = [
            (-0.01, Block),  // just outside the hard range (low)
            (0.0, Continue), // min of auto-approve and of block range
            (25.0, Continue),
            (50.0, Continue), // shared boundary: auto-approve is checked first
            (50.01, RequireApproval),
            (499.99, RequireApproval),
            (500.0, RequireApproval), // max, inclusive
            (500.01, Block),          // just outside the hard range (high)
            (1e9, Block),
        ];
        for (v, want) in cases {
            assert_eq!(decide_numeric(v, &rule).0, want, "{v}");
        }
    }

    #[test]
    fn numeric_order_block_first_then_auto_then_approval_else_block() {
        use GateAction::*;
        let r = |b: Option<(f64, f64)>, a: Option<(f64, f64)>, q: Option<(f64, f64)>| NumericRule {
            block_outside: b.map(|(min, max)| Range { min, max }),
            auto_approve: a.map(|(min, max)| Range { min, max }),
            require_approval: q.map(|(min, max)| Range { min, max }),
            clamp: None,
        };
        let cases = [
            // block.outside wins over an auto-approve range that contains v
            (r(Some((0.0, 10.0)), Some((0.0, 100.0)), None), 20.0, Block),
            // auto-approve wins over an overlapping approval range
            (
                r(None, Some((0.0, 100.0)), Some((0.0, 100.0))),
                20.0,
                Continue,
            ),
            (r(None, None, Some((0.0, 100.0))), 20.0, RequireApproval),
            // no ranges at all: nothing permits it
            (r(None, None, None), 20.0, Block),
            // gap between ranges
            (r(None, Some((0.0, 10.0)), Some((20.0, 30.0))), 15.0, Block),
        ];
        for (rule, v, want) in cases {
            assert_eq!(decide_numeric(v, &rule).0, want, "{rule:?} {v}");
        }
    }

    #[test]
    fn string_match_table() {
        use GateAction::*;
        let allowed = vec!["buy".to_owned(), "hold".to_owned()];
        let approval = vec!["sell".to_owned()];
        let cases = [
            ("buy", Continue),
            ("hold", Continue),
            ("sell", RequireApproval),
            ("short", Block),
            ("BUY", Block),
            ("buy ", Block),
            ("", Block),
        ];
        for (v, want) in cases {
            assert_eq!(decide_string(v, &allowed, &approval), want, "{v:?}");
        }
        assert_eq!(decide_string("x", &[], &[]), Block);
    }

    #[test]
    fn lexical_path_table() {
        let cases = [
            ("out.txt", true),
            ("./work/out.txt", true),
            ("/abs/path", true),
            ("a/../b", false),
            ("..", false),
            ("../etc/passwd", false),
            ("a/..", false),
            ("a..b/c", true), // `..` inside a name is not traversal
            ("", false),
            ("a\0b", false),
        ];
        for (p, want) in cases {
            assert_eq!(lexical_path_ok(p), want, "{p:?}");
        }
    }
}
