//! Checks an MCP tool call's arguments against the tool's input schema
//! (the one bound at install) before anything reaches the server.
//!
//! The JSON Schema subset MCP servers use for tool inputs: `type` (one or a
//! list), `enum`, `const`, `properties` / `required` /
//! `additionalProperties` (`false` or a schema), `items`, `minItems` /
//! `maxItems`, `minLength` / `maxLength`, `minimum` / `maximum` /
//! `exclusiveMinimum` / `exclusiveMaximum`, `anyOf` / `oneOf` / `allOf`.
//! Other keywords (`$ref`, `pattern`, `format` …) are not checked; the
//! server still sees only what this lets through. Nesting is bounded.

use serde_json::Value;

const MAX_DEPTH: usize = 32;

/// `Ok` when `value` satisfies `schema`; otherwise the first violation,
/// naming its path (`$.a.b[2]`) and never echoing the value.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    at(schema, value, "$", 0)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(t: &str, v: &Value) -> bool {
    match t {
        // An integral float (`2.0`) is an integer in JSON Schema.
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        other => type_name(v) == other,
    }
}

fn num(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn at(schema: &Value, value: &Value, path: &str, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested too deeply"));
    }
    let Value::Object(s) = schema else {
        // `true` / an empty schema accepts anything; `false` nothing.
        return if schema == &Value::Bool(false) {
            Err(format!("{path}: not allowed"))
        } else {
            Ok(())
        };
    };
    match s.get("type") {
        Some(Value::String(t)) if !is_type(t, value) => {
            return Err(format!("{path}: must be of type {t}"));
        }
        Some(Value::Array(ts))
            if !ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| is_type(t, value)) =>
        {
            return Err(format!("{path}: has the wrong type"));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(value)
    {
        return Err(format!("{path}: not one of the allowed values"));
    }
    if let Some(c) = s.get("const")
        && c != value
    {
        return Err(format!("{path}: not the required value"));
    }
    if let Value::String(text) = value {
        let len = text.chars().count() as f64;
        if num(schema, "minLength").is_some_and(|m| len < m) {
            return Err(format!("{path}: too short"));
        }
        if num(schema, "maxLength").is_some_and(|m| len > m) {
            return Err(format!("{path}: too long"));
        }
    }
    if let Some(x) = value.as_f64() {
        let out_of_range = num(schema, "minimum").is_some_and(|m| x < m)
            || num(schema, "maximum").is_some_and(|m| x > m)
            || num(schema, "exclusiveMinimum").is_some_and(|m| x <= m)
            || num(schema, "exclusiveMaximum").is_some_and(|m| x >= m);
        if out_of_range {
            return Err(format!("{path}: out of range"));
        }
    }
    if let Value::Array(items) = value {
        let n = items.len() as f64;
        if num(schema, "minItems").is_some_and(|m| n < m) {
            return Err(format!("{path}: too few items"));
        }
        if num(schema, "maxItems").is_some_and(|m| n > m) {
            return Err(format!("{path}: too many items"));
        }
        if let Some(item) = s.get("items") {
            for (i, v) in items.iter().enumerate() {
                at(item, v, &format!("{path}[{i}]"), depth + 1)?;
            }
        }
    }
    if let Value::Object(obj) = value {
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}: missing required `{r}`"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            let sub = format!("{path}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(p) => at(p, v, &sub, depth + 1)?,
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Err(format!("{path}: unexpected `{k}`"));
                    }
                    Some(extra @ Value::Object(_)) => at(extra, v, &sub, depth + 1)?,
                    _ => {}
                },
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            at(sub, value, path, depth + 1)?;
        }
    }
    if let Some(Value::Array(any)) = s.get("anyOf")
        && !any
            .iter()
            .any(|sub| at(sub, value, path, depth + 1).is_ok())
    {
        return Err(format!("{path}: matches none of the allowed shapes"));
    }
    if let Some(Value::Array(one)) = s.get("oneOf")
        && one
            .iter()
            .filter(|sub| at(sub, value, path, depth + 1).is_ok())
            .count()
            != 1
    {
        return Err(format!("{path}: must match exactly one allowed shape"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 10},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "mode": {"enum": ["fast", "full"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "filter": {
                    "type": "object",
                    "properties": {"since": {"type": ["string", "null"]}},
                    "additionalProperties": false
                }
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    #[test]
    fn valid_arguments_pass() {
        let s = schema();
        for ok in [
            json!({"query": "cats"}),
            json!({"query": "cats", "limit": 3, "mode": "full", "tags": ["a"],
                   "filter": {"since": null}}),
            json!({"query": "x", "limit": 2.0}),
        ] {
            assert_eq!(check(&s, &ok), Ok(()), "{ok}");
        }
        // No schema keywords: anything.
        assert_eq!(check(&json!({}), &json!({"a": 1})), Ok(()));
    }

    #[test]
    fn each_violation_is_named_by_its_path_without_the_value() {
        let s = schema();
        let cases = [
            (json!({}), "$: missing required `query`"),
            (json!({"query": 7}), "$.query: must be of type string"),
            (json!({"query": ""}), "$.query: too short"),
            (
                json!({"query": "secret-value-too-long"}),
                "$.query: too long",
            ),
            (json!({"query": "a", "limit": 0}), "$.limit: out of range"),
            (
                json!({"query": "a", "limit": 1.5}),
                "$.limit: must be of type integer",
            ),
            (
                json!({"query": "a", "mode": "slow"}),
                "$.mode: not one of the allowed values",
            ),
            (
                json!({"query": "a", "tags": ["a", 1]}),
                "$.tags[1]: must be of type string",
            ),
            (
                json!({"query": "a", "tags": ["a", "b", "c"]}),
                "$.tags: too many items",
            ),
            (
                json!({"query": "a", "filter": {"since": 1}}),
                "$.filter.since: has the wrong type",
            ),
            (
                json!({"query": "a", "filter": {"x": 1}}),
                "$.filter: unexpected `x`",
            ),
            (json!({"query": "a", "rm": true}), "$: unexpected `rm`"),
            (json!("cats"), "$: must be of type object"),
        ];
        for (value, want) in cases {
            let got = check(&s, &value).unwrap_err();
            assert_eq!(got, want, "{value}");
            assert!(!got.contains("secret-value"));
        }
    }

    #[test]
    fn combinators_and_depth() {
        let s = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        assert!(check(&s, &json!("a")).is_ok());
        assert!(check(&s, &json!(true)).is_err());
        let s = json!({"oneOf": [{"type": "number"}, {"type": "integer"}]});
        assert!(check(&s, &json!(1)).is_err(), "matches both");
        assert!(check(&s, &json!(1.5)).is_ok());
        let s = json!({"allOf": [{"minimum": 1}, {"maximum": 2}]});
        assert!(check(&s, &json!(3)).is_err());
        assert!(check(&json!(false), &json!(1)).is_err());
        // A schema nested past the bound is refused, not recursed into.
        let mut deep = json!({"type": "object"});
        let mut value = json!(1);
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
            value = json!({"a": value});
        }
        assert!(
            check(&deep, &value)
                .unwrap_err()
                .contains("nested too deeply")
        );
    }
}
