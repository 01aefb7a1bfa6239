//! The evaluation context (`dict` in the spec) and the pure rules over it:
//! where a gate finds its value, which text a trigger is about, and the
//! `ALLOWED_MUTATIONS` filter and left-to-right merge (§3.4, §5.4).

use serde_json::Value;
use silas_core::model::JsonObject;
use silas_core::model::gates::{ALLOWED_MUTATIONS, GateTrigger};

/// The context key holding a tool call's arguments; `tool_args` mutations
/// shallow-merge into it.
pub const TOOL_ARGS: &str = "tool_args";

/// Looks up a gate's `extract` name: a dotted path from the top level first,
/// then inside `tool_args` (an `on_tool_call` gate names the argument, e.g.
/// `position_usd`, not `tool_args.position_usd`).
pub fn extract_value<'a>(ctx: &'a JsonObject, name: &str) -> Option<&'a Value> {
    lookup(ctx, name).or_else(|| match ctx.get(TOOL_ARGS) {
        Some(Value::Object(args)) => lookup(args, name),
        _ => None,
    })
}

fn lookup<'a>(obj: &'a JsonObject, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut cur = obj.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

/// The text field a trigger is about: the user's `message` before processing
/// it, the agent's `response` before sending it, a step's `output` after it
/// (§5.2.1 d). A tool call has no single field: a gate without `extract`
/// reads the whole call ([`tool_call_text`], [`tool_arg_strings`]).
pub fn subject_key(trigger: GateTrigger) -> Option<&'static str> {
    match trigger {
        GateTrigger::EveryUserMessage => Some("message"),
        GateTrigger::EveryAgentResponse => Some("response"),
        GateTrigger::AfterStep => Some("output"),
        GateTrigger::OnToolCall => None,
    }
}

/// A tool call as one text, `tool_name {"arg": …}`, for a gate that judges
/// the call rather than one argument. `None` without a `tool_name`.
pub fn tool_call_text(ctx: &JsonObject) -> Option<String> {
    let name = ctx.get("tool_name")?.as_str()?;
    let args = ctx.get(TOOL_ARGS).cloned().unwrap_or(Value::Null);
    Some(format!("{name} {args}"))
}

/// Every string inside a call's `tool_args`, with the top-level argument it
/// sits under and whether it *is* that argument (only those can be
/// rewritten: `tool_args` mutations merge argument by argument).
pub fn tool_arg_strings(ctx: &JsonObject) -> Vec<ArgString<'_>> {
    fn walk<'a>(arg: &'a str, v: &'a Value, top: bool, out: &mut Vec<ArgString<'a>>) {
        match v {
            Value::String(text) => out.push(ArgString { arg, text, top }),
            Value::Array(a) => a.iter().for_each(|x| walk(arg, x, false, out)),
            Value::Object(o) => o.values().for_each(|x| walk(arg, x, false, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(Value::Object(args)) = ctx.get(TOOL_ARGS) {
        for (k, v) in args {
            walk(k, v, true, &mut out);
        }
    }
    out
}

/// One string of a tool call's arguments (see [`tool_arg_strings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgString<'a> {
    pub arg: &'a str,
    pub text: &'a str,
    /// The string is the whole argument, not nested inside it.
    pub top: bool,
}

/// The `modified_context` that puts `fixed` where `extract`-name `key` was
/// read from: `message`/`response` replaced, a tool argument merged into
/// `tool_args`. `None` when the value cannot be rewritten (a step's output,
/// a dotted path): a fix that cannot be applied must block, not pass the
/// original through as a rejected mutation.
pub fn fix_mutation(ctx: &JsonObject, key: &str, fixed: String) -> Option<JsonObject> {
    let mut m = JsonObject::new();
    if key.contains('.') {
        return None;
    }
    if ctx.contains_key(key) {
        if !ALLOWED_MUTATIONS.contains(&key) || key == TOOL_ARGS {
            return None;
        }
        m.insert(key.to_owned(), Value::String(fixed));
        return Some(m);
    }
    match ctx.get(TOOL_ARGS) {
        Some(Value::Object(args)) if args.contains_key(key) => {
            let mut a = JsonObject::new();
            a.insert(key.to_owned(), Value::String(fixed));
            m.insert(TOOL_ARGS.to_owned(), Value::Object(a));
            Some(m)
        }
        _ => None,
    }
}

/// A context value as the text a predicate compares: strings verbatim,
/// numbers and booleans in their JSON spelling, `null`/objects/arrays as
/// nothing (a string gate never silently matches a serialised structure).
pub fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why a mutation key was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// Not in `ALLOWED_MUTATIONS`.
    NotAllowed,
    /// Allowed key, wrong type (`response`/`message` must be strings,
    /// `tool_args` an object) — merging it would corrupt the context.
    WrongType,
}

impl RejectReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::NotAllowed => "not_in_allowlist",
            RejectReason::WrongType => "wrong_type",
        }
    }
}

/// A `modified_context` split into what may be merged and what is dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FilteredMutation {
    pub accepted: JsonObject,
    pub rejected: Vec<(String, RejectReason)>,
}

/// Applies the allowlist to one gate's `modified_context`. Pure; the runner
/// is the only caller and audits every rejected key.
pub fn filter_mutation(m: &JsonObject) -> FilteredMutation {
    let mut out = FilteredMutation::default();
    for (k, v) in m {
        if !ALLOWED_MUTATIONS.contains(&k.as_str()) {
            out.rejected.push((k.clone(), RejectReason::NotAllowed));
            continue;
        }
        let type_ok = match k.as_str() {
            TOOL_ARGS => v.is_object(),
            _ => v.is_string(),
        };
        if type_ok {
            out.accepted.insert(k.clone(), v.clone());
        } else {
            out.rejected.push((k.clone(), RejectReason::WrongType));
        }
    }
    out
}

/// One merged change, for the `gate_mutation` audit entry.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedChange {
    /// `response`, `message` or `tool_args.<arg>`.
    pub key: String,
    pub original: Option<Value>,
    pub modified: Value,
}

/// Merges an already-filtered mutation into the working context:
/// `response`/`message` replace, `tool_args` shallow-merges argument by
/// argument. Returns the changes in key order.
pub fn merge_mutation(ctx: &mut JsonObject, accepted: &JsonObject) -> Vec<MergedChange> {
    let mut changes = Vec::new();
    for (k, v) in accepted {
        if k == TOOL_ARGS {
            let Value::Object(new_args) = v else { continue };
            let slot = ctx
                .entry(TOOL_ARGS.to_owned())
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if !slot.is_object() {
                *slot = Value::Object(JsonObject::new());
            }
            if let Value::Object(args) = slot {
                for (ak, av) in new_args {
                    let original = args.insert(ak.clone(), av.clone());
                    changes.push(MergedChange {
                        key: format!("{TOOL_ARGS}.{ak}"),
                        original,
                        modified: av.clone(),
                    });
                }
            }
        } else {
            let original = ctx.insert(k.clone(), v.clone());
            changes.push(MergedChange {
                key: k.clone(),
                original,
                modified: v.clone(),
            });
        }
    }
    changes
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
    fn extract_prefers_top_level_then_tool_args_and_follows_dots() {
        let ctx = obj(json!({
            "size": 1, "tool_args": {"size": 2, "position_usd": 30, "nested": {"x": "y"}},
            "a": {"b": {"c": 3}}
        }));
        let cases: &[(&str, Option<Value>)] = &[
            ("size", Some(json!(1))),
            ("position_usd", Some(json!(30))),
            ("a.b.c", Some(json!(3))),
            ("nested.x", Some(json!("y"))),
            ("a.b.missing", None),
            ("missing", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(extract_value(&ctx, name).cloned(), *want, "{name}");
        }
    }

    #[test]
    fn subjects_by_trigger() {
        let cases = [
            (GateTrigger::EveryUserMessage, Some("message")),
            (GateTrigger::EveryAgentResponse, Some("response")),
            (GateTrigger::AfterStep, Some("output")),
            (GateTrigger::OnToolCall, None),
        ];
        for (t, want) in cases {
            assert_eq!(subject_key(t), want, "{t}");
        }
    }

    #[test]
    fn a_tool_call_reads_as_its_name_and_arguments() {
        let ctx = obj(json!({"tool_name": "shell_exec", "tool_args": {"command": "ls"}}));
        assert_eq!(
            tool_call_text(&ctx).as_deref(),
            Some(r#"shell_exec {"command":"ls"}"#)
        );
        assert_eq!(tool_call_text(&obj(json!({"tool_args": {}}))), None);
        let ctx = obj(json!({"tool_name": "t", "tool_args": {
            "a": "top", "n": 3, "list": ["x", {"deep": "y"}], "o": {"k": "z"}}}));
        let got: Vec<(&str, &str, bool)> = tool_arg_strings(&ctx)
            .iter()
            .map(|s| (s.arg, s.text, s.top))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "top", true),
                ("list", "x", false),
                ("list", "y", false),
                ("o", "z", false)
            ]
        );
        assert!(tool_arg_strings(&obj(json!({"tool_name": "t"}))).is_empty());
    }

    #[test]
    fn a_fix_goes_where_its_value_came_from_or_nowhere() {
        let ctx = obj(json!({"message": "m", "response": "r", "output": "o",
                             "tool_args": {"command": "c", "opts": {"x": "y"}}}));
        let cases: &[(&str, Option<Value>)] = &[
            ("message", Some(json!({"message": "F"}))),
            ("response", Some(json!({"response": "F"}))),
            ("command", Some(json!({"tool_args": {"command": "F"}}))),
            // A step's output is already produced: nothing to rewrite.
            ("output", None),
            ("opts.x", None),
            ("tool_args", None),
            ("missing", None),
        ];
        for (key, want) in cases {
            let got = fix_mutation(&ctx, key, "F".into()).map(Value::Object);
            assert_eq!(got, *want, "{key}");
        }
    }

    #[test]
    fn value_text_table() {
        let cases = [
            (json!("buy"), Some("buy")),
            (json!(2.5), Some("2.5")),
            (json!(3), Some("3")),
            (json!(true), Some("true")),
            (json!(null), None),
            (json!({"a": 1}), None),
            (json!(["a"]), None),
        ];
        for (v, want) in cases {
            assert_eq!(value_text(&v).as_deref(), want, "{v}");
        }
    }

    #[test]
    fn filter_mutation_table() {
        // (mutation, accepted keys, rejected (key, reason))
        let cases: Vec<(Value, Vec<&str>, Vec<(&str, RejectReason)>)> = vec![
            (json!({"response": "x"}), vec!["response"], vec![]),
            (json!({"message": "x"}), vec!["message"], vec![]),
            (json!({"tool_args": {"a": 1}}), vec!["tool_args"], vec![]),
            (
                json!({"approval_token": "t", "response": "x"}),
                vec!["response"],
                vec![("approval_token", RejectReason::NotAllowed)],
            ),
            (
                json!({"budget": {}, "access_level": "admin"}),
                vec![],
                vec![
                    ("access_level", RejectReason::NotAllowed),
                    ("budget", RejectReason::NotAllowed),
                ],
            ),
            (
                json!({"response": 5, "tool_args": "x", "message": null}),
                vec![],
                vec![
                    ("message", RejectReason::WrongType),
                    ("response", RejectReason::WrongType),
                    ("tool_args", RejectReason::WrongType),
                ],
            ),
            (
                json!({"Response": "x"}),
                vec![],
                vec![("Response", RejectReason::NotAllowed)],
            ),
            (json!({}), vec![], vec![]),
        ];
        for (m, acc, rej) in cases {
            let f = filter_mutation(&obj(m.clone()));
            let got: Vec<&str> = f.accepted.keys().map(String::as_str).collect();
            assert_eq!(got, acc, "{m}");
            let got: Vec<(&str, RejectReason)> =
                f.rejected.iter().map(|(k, r)| (k.as_str(), *r)).collect();
            assert_eq!(got, rej, "{m}");
        }
    }

    #[test]
    fn merge_is_shallow_for_tool_args_and_replacing_for_text() {
        let mut ctx = obj(json!({
            "message": "hi", "response": "old",
            "tool_args": {"command": "npm test", "cwd": "/w"}
        }));
        let changes = merge_mutation(
            &mut ctx,
            &obj(
                json!({"response": "new", "tool_args": {"command": "npm test --no-coverage", "extra": 1}}),
            ),
        );
        assert_eq!(
            Value::Object(ctx),
            json!({
                "message": "hi", "response": "new",
                "tool_args": {"command": "npm test --no-coverage", "cwd": "/w", "extra": 1}
            })
        );
        let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["response", "tool_args.command", "tool_args.extra"]);
        assert_eq!(changes[1].original, Some(json!("npm test")));
        assert_eq!(changes[2].original, None);
    }

    #[test]
    fn merge_creates_or_replaces_a_non_object_tool_args() {
        for start in [json!({}), json!({"tool_args": "junk"})] {
            let mut ctx = obj(start);
            merge_mutation(&mut ctx, &obj(json!({"tool_args": {"a": 1}})));
            assert_eq!(ctx["tool_args"], json!({"a": 1}));
        }
    }
}
