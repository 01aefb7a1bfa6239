//! Tolerant where it is safe, strict where it matters (issue #16, item 2).
//!
//! Small and local models return schema-shaped JSON whose *cosmetic* values
//! are slightly off: an unknown `context_profile`, a missing `reason`, an
//! invented register. Discarding the whole turn for that helps nobody, so
//! before the answer is deserialised into the core types each cosmetic field
//! that is missing or outside its enum gets its documented default, and the
//! call reports a [`Coercion`] (audited as `llm_output_coerced` with the field
//! name). The defaults are the §5.1.0 proxy-fallback values:
//!
//! | field | default |
//! |---|---|
//! | `reason` | `"unspecified"` |
//! | `interaction_register` | `status` |
//! | `interaction_mode` | `confirm_only_when_required` |
//! | `context_profile` | `context.default_profile` |
//! | `plan_action.interaction_mode_override` (unknown only) | none |
//!
//! (and the same inside a proxy's `response`). One more, only as a last
//! resort and never upward ([`last_resort_route_decision`]): when the
//! repair round still answers a `planner` route that carries a complete
//! reply (a `response` with a non-empty `message`: small models do this for
//! plain questions), it becomes `direct` with that reply — it plans nothing
//! and runs nothing (a plan in the reply still goes to a card), where the
//! fallback was an apology. Nothing is ever routed to the planner that the
//! model did not route there. Everything else — the route otherwise,
//! `response` itself, `message`, `plan_action` and its action and plan,
//! `needs_approval`, memory ops and queries, tool names and arguments — is
//! security-relevant or carries the answer itself and is never guessed: an
//! invalid value there fails validation, which takes the existing repair →
//! fallback path. [`COSMETIC_FIELDS`] is the complete list of what may ever
//! be coerced.

use serde::Serialize;
use serde_json::{Map, Value};
use silas_core::model::agents::{InteractionMode, InteractionRegister};

/// Every field path [`coerce_route_decision`] / [`coerce_agent_response`]
/// may change. Nothing else is ever touched.
pub const COSMETIC_FIELDS: &[&str] = &[
    "reason",
    "interaction_register",
    "interaction_mode",
    "context_profile",
    "plan_action.interaction_mode_override",
    "response.plan_action.interaction_mode_override",
    "route",
];

/// Why a field was replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CoercionCause {
    Missing,
    /// Present but not an allowed value (outside the enum or the profile
    /// registry, or of the wrong JSON type).
    Unknown,
}

/// One cosmetic field that took its default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Coercion {
    /// Dotted path, one of [`COSMETIC_FIELDS`].
    pub field: &'static str,
    pub cause: CoercionCause,
    /// The default it took (never the model's value: that could be long or
    /// carry anything).
    pub default: String,
}

/// The default `reason`.
pub const DEFAULT_REASON: &str = "unspecified";

/// Coerces a proxy answer (`RouteDecision`) in place; `profile_known`
/// answers whether a context profile is configured.
pub fn coerce_route_decision(
    value: &mut Value,
    default_profile: &str,
    profile_known: impl Fn(&str) -> bool,
) -> Vec<Coercion> {
    let mut out = Vec::new();
    let Some(obj) = value.as_object_mut() else {
        return out;
    };
    fix(obj, "reason", &mut out, DEFAULT_REASON, |v| v.is_string());
    fix(
        obj,
        "interaction_register",
        &mut out,
        InteractionRegister::Status.as_str(),
        |v| is_one_of(v, InteractionRegister::ALL.iter().map(|r| r.as_str())),
    );
    fix(
        obj,
        "interaction_mode",
        &mut out,
        InteractionMode::ConfirmOnlyWhenRequired.as_str(),
        |v| is_one_of(v, InteractionMode::ALL.iter().map(|m| m.as_str())),
    );
    fix(obj, "context_profile", &mut out, default_profile, |v| {
        v.as_str().is_some_and(&profile_known)
    });
    if let Some(resp) = obj.get_mut("response") {
        out.extend(coerce_agent_response(resp).into_iter().map(|c| Coercion {
            field: "response.plan_action.interaction_mode_override",
            ..c
        }));
    }
    out
}

/// The repair round's last resort for a proxy answer: a `planner` route
/// carrying a complete reply becomes `direct` with it (see the module doc).
pub fn last_resort_route_decision(value: &mut Value) -> Vec<Coercion> {
    let mut out = Vec::new();
    let Some(obj) = value.as_object_mut() else {
        return out;
    };
    let wrote_a_reply = obj
        .get("response")
        .and_then(|r| r.get("message"))
        .and_then(Value::as_str)
        .is_some_and(|m| !m.trim().is_empty());
    if wrote_a_reply && obj.get("route").and_then(Value::as_str) == Some("planner") {
        obj.insert("route".to_owned(), Value::from("direct"));
        out.push(Coercion {
            field: "route",
            cause: CoercionCause::Unknown,
            default: "direct".to_owned(),
        });
    }
    out
}

/// Coerces a planner answer (`AgentResponse`) in place: only an unknown
/// `plan_action.interaction_mode_override` (dropped: no override). The plan
/// action itself is never touched.
pub fn coerce_agent_response(value: &mut Value) -> Vec<Coercion> {
    let mut out = Vec::new();
    let Some(action) = value
        .as_object_mut()
        .and_then(|o| o.get_mut("plan_action"))
        .and_then(Value::as_object_mut)
    else {
        return out;
    };
    let field = "interaction_mode_override";
    let bad = action.get(field).is_some_and(|v| {
        !v.is_null() && !is_one_of(v, InteractionMode::ALL.iter().map(|m| m.as_str()))
    });
    if bad {
        action.insert(field.to_owned(), Value::Null);
        out.push(Coercion {
            field: "plan_action.interaction_mode_override",
            cause: CoercionCause::Unknown,
            default: "none".to_owned(),
        });
    }
    out
}

/// Sets `obj[field]` to `default` when it is missing or fails `valid`.
fn fix(
    obj: &mut Map<String, Value>,
    field: &'static str,
    out: &mut Vec<Coercion>,
    default: &str,
    valid: impl Fn(&Value) -> bool,
) {
    let cause = match obj.get(field) {
        None | Some(Value::Null) => CoercionCause::Missing,
        Some(v) if valid(v) => return,
        Some(_) => CoercionCause::Unknown,
    };
    obj.insert(field.to_owned(), Value::String(default.to_owned()));
    out.push(Coercion {
        field,
        cause,
        default: default.to_owned(),
    });
}

fn is_one_of<'a>(v: &Value, mut allowed: impl Iterator<Item = &'a str>) -> bool {
    v.as_str().is_some_and(|s| allowed.any(|a| a == s))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use silas_core::config::Config;
    use silas_core::model::agents::{AgentResponse, Route, RouteDecision};

    use super::*;
    use crate::structured::{StructuredContext, parse_output_coerced, parse_output_last_resort};

    fn ctx() -> StructuredContext {
        StructuredContext::from_config(&Config::default())
    }

    fn direct() -> Value {
        json!({"route": "direct", "reason": "greeting",
               "response": {"message": "Hello!", "needs_approval": false},
               "interaction_register": "exploration", "interaction_mode": "default_and_offer",
               "context_profile": "conversation"})
    }

    fn plan() -> Value {
        json!({"message": "Here is the plan.", "needs_approval": true,
               "plan_action": {"action": "propose", "plan_markdown": "---\nid: p\n---\n# Plan",
                               "interaction_mode_override": "act_and_report"}})
    }

    /// Removes (None) or replaces the value at a dotted path.
    fn set(v: &mut Value, path: &str, new: Option<Value>) {
        let (parent, last) = match path.rsplit_once('.') {
            Some((p, l)) => (
                p.split('.').fold(&mut *v, |node, k| match node {
                    Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
                    other => &mut other[k],
                }),
                l,
            ),
            None => (v, path),
        };
        let obj = parent.as_object_mut().unwrap();
        match new {
            None => {
                obj.remove(last);
            }
            Some(n) => {
                obj.insert(last.to_owned(), n);
            }
        }
    }

    fn route(v: &Value) -> Result<(RouteDecision, Vec<Coercion>), String> {
        parse_output_coerced::<RouteDecision>(Some(&v.to_string()), &ctx())
    }

    fn planner(v: &Value) -> Result<(AgentResponse, Vec<Coercion>), String> {
        parse_output_coerced::<AgentResponse>(Some(&v.to_string()), &ctx())
    }

    #[test]
    fn every_cosmetic_field_missing_or_unknown_takes_its_default() {
        let default_profile = ctx().default_profile;
        // (field, its default, an unknown value: outside the enum or the
        // registry — `reason` is free text, so only a non-string is unknown)
        let proxy_fields: [(&str, &str, Value); 4] = [
            ("reason", DEFAULT_REASON, json!(["why"])),
            ("interaction_register", "status", json!("chitchat")),
            (
                "interaction_mode",
                "confirm_only_when_required",
                json!("yolo"),
            ),
            ("context_profile", default_profile.as_str(), json!("poetry")),
        ];
        for (field, default, unknown) in proxy_fields {
            for (cause, new) in [
                (CoercionCause::Missing, None),
                (CoercionCause::Missing, Some(Value::Null)),
                (CoercionCause::Unknown, Some(unknown)),
                (CoercionCause::Unknown, Some(json!(42))),
            ] {
                let mut v = direct();
                set(&mut v, field, new.clone());
                let (d, coerced) = route(&v).unwrap_or_else(|e| panic!("{field} {new:?}: {e}"));
                let got = serde_json::to_value(&d).unwrap()[field].clone();
                assert_eq!(got, json!(default), "{field} {new:?}");
                assert_eq!(
                    coerced,
                    [Coercion {
                        field: COSMETIC_FIELDS.iter().find(|f| **f == field).unwrap(),
                        cause,
                        default: default.to_owned()
                    }],
                    "{field} {new:?}"
                );
                // Everything else is exactly what the model said.
                assert_eq!(d.route, Route::Direct);
                assert_eq!(d.response.as_ref().unwrap().message, "Hello!");
            }
        }
        // The mode override, in a planner answer and inside a proxy response.
        for (value, field) in [
            (plan(), "plan_action.interaction_mode_override"),
            (
                {
                    let mut v = direct();
                    v["response"] = plan();
                    v
                },
                "response.plan_action.interaction_mode_override",
            ),
        ] {
            for bad in [json!("yolo"), json!(7)] {
                let mut v = value.clone();
                set(&mut v, field, Some(bad.clone()));
                let resp = if field.starts_with("response.") {
                    let (d, c) = route(&v).unwrap();
                    (d.response.unwrap(), c)
                } else {
                    planner(&v).unwrap()
                };
                let action = resp.0.plan_action.as_ref().unwrap();
                assert_eq!(action.interaction_mode_override, None, "{field} {bad}");
                assert_eq!(
                    action.plan_markdown.as_deref(),
                    Some("---\nid: p\n---\n# Plan")
                );
                assert_eq!(resp.1.len(), 1);
                assert_eq!(resp.1[0].field, field);
                assert_eq!(resp.1[0].cause, CoercionCause::Unknown);
            }
            // Missing is simply "no override" (the field is optional).
            let mut v = value.clone();
            set(&mut v, field, None);
            let coerced = if field.starts_with("response.") {
                route(&v).unwrap().1
            } else {
                planner(&v).unwrap().1
            };
            assert!(coerced.is_empty(), "{field}");
        }
        // A valid answer is never coerced.
        assert!(route(&direct()).unwrap().1.is_empty());
        assert!(planner(&plan()).unwrap().1.is_empty());
    }

    #[test]
    fn no_security_relevant_field_is_ever_coerced() {
        let with_ops = || {
            let mut v = plan();
            v["memory_ops"] = json!([{"op": "store", "content": "likes tea"}]);
            v["memory_queries"] = json!([{"strategy": "keyword", "query": "tea"}]);
            v
        };
        // (answer, path, invalid replacements) — each must fail validation
        // (repair → fallback), with nothing coerced.
        let proxy: Vec<(&str, Vec<Option<Value>>)> = vec![
            ("route", vec![None, Some(json!("executor")), Some(json!(1))]),
            ("response", vec![None, Some(json!("hi"))]),
            ("response.message", vec![None, Some(json!(3))]),
            ("response.needs_approval", vec![Some(json!("maybe"))]),
        ];
        for (path, bads) in proxy {
            for bad in bads {
                let mut v = direct();
                set(&mut v, path, bad.clone());
                let mut raw = v.clone();
                let coerced = coerce_route_decision(&mut raw, "conversation", |_| true);
                assert!(
                    coerced.iter().all(|c| COSMETIC_FIELDS.contains(&c.field)),
                    "{path}"
                );
                assert_eq!(
                    raw.pointer(&ptr(path)),
                    v.pointer(&ptr(path)),
                    "{path} untouched"
                );
                assert!(route(&v).is_err(), "{path} = {bad:?} must fail");
            }
        }
        let planner_cases: Vec<(&str, Vec<Option<Value>>)> = vec![
            ("message", vec![None, Some(json!(1))]),
            ("needs_approval", vec![Some(json!("no")), Some(json!(0))]),
            (
                "plan_action.action",
                vec![None, Some(json!("execute_all")), Some(json!(2))],
            ),
            ("plan_action.plan_markdown", vec![Some(json!(5))]),
            (
                "plan_action",
                vec![Some(json!("propose")), Some(json!(["propose"]))],
            ),
            ("memory_ops.0.op", vec![Some(json!("drop_all"))]),
            ("memory_ops.0.content", vec![None, Some(json!(9))]),
            ("memory_ops", vec![Some(json!("store"))]),
            (
                "memory_queries.0.strategy",
                vec![None, Some(json!("fuzzy"))],
            ),
            ("memory_queries", vec![Some(json!([{}, {}, {}, {}]))]),
        ];
        for (path, bads) in planner_cases {
            for bad in bads {
                let mut v = with_ops();
                set(&mut v, path, bad.clone());
                let mut raw = v.clone();
                let coerced = coerce_agent_response(&mut raw);
                assert!(coerced.is_empty(), "{path} = {bad:?}: {coerced:?}");
                assert_eq!(raw, v, "{path}: nothing changed");
                assert!(planner(&v).is_err(), "{path} = {bad:?} must fail");
            }
        }
        // Missing needs_approval is the model type's own safe default
        // (approval required), not a coercion.
        let mut v = plan();
        set(&mut v, "needs_approval", None);
        let (r, c) = planner(&v).unwrap();
        assert!(r.needs_approval && c.is_empty());
    }

    /// A planner route carrying a complete reply is answered with it as a
    /// last resort (never the other way): the least privileged reading of
    /// the model's answer. The first round still fails, so the model is
    /// asked to repair it first.
    #[test]
    fn a_planner_route_with_a_written_reply_becomes_direct_only_as_a_last_resort() {
        let mut v = direct();
        v["route"] = json!("planner");
        assert!(route(&v).is_err(), "the first round is repaired as before");
        let (d, coerced) =
            parse_output_last_resort::<RouteDecision>(Some(&v.to_string()), &ctx()).unwrap();
        assert_eq!(d.route, Route::Direct);
        assert_eq!(d.response.unwrap().message, "Hello!");
        assert_eq!(coerced.len(), 1);
        assert_eq!(coerced[0].field, "route");
        assert_eq!(coerced[0].default, "direct");
        // An empty message is no reply: it still fails.
        for message in [json!(""), json!("   ")] {
            let mut v = direct();
            v["route"] = json!("planner");
            v["response"]["message"] = message;
            assert!(
                parse_output_last_resort::<RouteDecision>(Some(&v.to_string()), &ctx()).is_err()
            );
        }
        // A direct route without its reply is never sent to the planner.
        let mut v = direct();
        v.as_object_mut().unwrap().remove("response");
        let mut raw = v.clone();
        assert!(last_resort_route_decision(&mut raw).is_empty());
        assert_eq!(raw["route"], "direct");
    }

    fn ptr(path: &str) -> String {
        format!("/{}", path.replace('.', "/"))
    }
}
