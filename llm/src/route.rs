//! The proxy's answer as small models give it (issue #16, items 2 and 6).
//!
//! A direct route carries the reply itself (`response`). Capable models
//! write both in one answer; small local ones, even under a grammar built
//! from the schema, often stop after the routing fields and leave the
//! optional `response` out. The reply is the answer itself, so it is never
//! guessed or coerced (nor is a blank one sent) — but the routing decision is valid, so throwing the
//! whole turn away would be wrong too. [`RouteDraft`] accepts exactly that
//! shape (a direct route without a response; every other rule of
//! `RouteDecision` holds), and the proxy then asks the same model for the
//! reply alone, as a strictly validated `AgentResponse`
//! ([`crate::Agents::route`]). A reply that does not validate falls back
//! like any proxy answer.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use silas_core::model::agents::{Route, RouteDecision};

use crate::coerce::Coercion;
use crate::structured::{CallKind, StructuredContext, StructuredOutput};

/// A proxy answer whose direct route may still lack its `response`.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteDraft {
    /// Valid as a `RouteDecision` except that a direct route may have no
    /// response yet ([`Self::needs_reply`]).
    decision: RouteDecision,
}

impl RouteDraft {
    /// True for a direct route whose reply is still to be written.
    pub fn needs_reply(&self) -> bool {
        self.decision.route == Route::Direct && self.decision.response.is_none()
    }

    /// The decision; `None` while [`Self::needs_reply`].
    pub fn complete(self) -> Option<RouteDecision> {
        (!self.needs_reply()).then_some(self.decision)
    }

    /// The decision with the reply the follow-up call produced; it is
    /// validated again as a whole, and a blank reply is no reply.
    pub fn with_reply(
        mut self,
        reply: silas_core::model::agents::AgentResponse,
    ) -> Result<RouteDecision, String> {
        if reply.message.trim().is_empty() {
            return Err("the reply was empty".to_owned());
        }
        self.decision.response = Some(reply);
        self.decision.validate().map_err(|e| e.to_string())?;
        Ok(self.decision)
    }
}

impl<'de> Deserialize<'de> for RouteDraft {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut raw = Value::deserialize(d)?;
        // A blank message is no reply either (small models fill the
        // required string with "").
        let unwritten = |r: &Value| {
            r.is_null()
                || r.get("message")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.trim().is_empty())
        };
        let pending = raw.get("route").and_then(Value::as_str) == Some(Route::Direct.as_str())
            && raw.get("response").is_none_or(unwritten);
        if !pending {
            return serde_json::from_value(raw)
                .map(|decision| RouteDraft { decision })
                .map_err(serde::de::Error::custom);
        }
        // Every other rule of RouteDecision is checked by deserialising the
        // answer as the one route that has no response; the route is then
        // put back. Only `response` is left open.
        if let Some(obj) = raw.as_object_mut() {
            obj.insert(
                "route".into(),
                Value::String(Route::Planner.as_str().into()),
            );
            obj.insert("response".into(), Value::Null);
        }
        let mut decision: RouteDecision =
            serde_json::from_value(raw).map_err(serde::de::Error::custom)?;
        decision.route = Route::Direct;
        Ok(RouteDraft { decision })
    }
}

/// Everything but what is accepted back is the complete decision's: the
/// same schema and name on the wire, coercion, profile check and fallback.
impl StructuredOutput for RouteDraft {
    type Fallback = RouteDecision;
    const KIND: CallKind = CallKind::Proxy;
    const SCHEMA_NAME: &'static str = <RouteDecision as StructuredOutput>::SCHEMA_NAME;
    fn schema() -> Arc<Value> {
        <RouteDecision as StructuredOutput>::schema()
    }
    fn coerce(value: &mut Value, ctx: &StructuredContext) -> Vec<Coercion> {
        <RouteDecision as StructuredOutput>::coerce(value, ctx)
    }
    fn last_resort(value: &mut Value) -> Vec<Coercion> {
        <RouteDecision as StructuredOutput>::last_resort(value)
    }
    fn check(&self, ctx: &StructuredContext) -> Result<(), String> {
        self.decision.check(ctx)
    }
    fn fallback(ctx: &StructuredContext) -> RouteDecision {
        <RouteDecision as StructuredOutput>::fallback(ctx)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use silas_core::config::Config;
    use silas_core::model::agents::AgentResponse;

    use super::*;
    use crate::structured::parse_output;

    fn ctx() -> StructuredContext {
        StructuredContext::from_config(&Config::default())
    }

    fn draft(v: Value) -> Result<RouteDraft, String> {
        parse_output::<RouteDraft>(Some(&v.to_string()), &ctx())
    }

    fn base() -> Value {
        json!({"route": "direct", "reason": "greeting", "interaction_register": "status",
               "interaction_mode": "confirm_only_when_required", "context_profile": "conversation"})
    }

    #[test]
    fn a_direct_route_without_its_reply_is_a_draft() {
        for response in [
            None,
            Some(Value::Null),
            Some(json!({"message": ""})),
            Some(json!({"message": "  \n"})),
        ] {
            let mut v = base();
            if let Some(r) = response {
                v["response"] = r;
            }
            let d = draft(v).unwrap();
            assert!(d.needs_reply());
            assert_eq!(d.clone().complete(), None);
            let done = d.with_reply(AgentResponse::message("Hello!")).unwrap();
            assert_eq!(done.route, Route::Direct);
            assert_eq!(done.response.unwrap().message, "Hello!");
        }
    }

    #[test]
    fn complete_answers_pass_through_unchanged() {
        let mut v = base();
        v["response"] = json!({"message": "hi"});
        let d = draft(v.clone()).unwrap();
        assert!(!d.needs_reply());
        let want: RouteDecision = serde_json::from_value(v).unwrap();
        assert_eq!(d.complete(), Some(want));
        let mut p = base();
        p["route"] = json!("planner");
        let d = draft(p).unwrap();
        assert_eq!(d.complete().unwrap().route, Route::Planner);
    }

    #[test]
    fn every_other_rule_still_holds() {
        // A planner route with a response, an unknown route, a broken
        // response and an empty message are refused as before.
        let mut planner_with_reply = base();
        planner_with_reply["route"] = json!("planner");
        planner_with_reply["response"] = json!({"message": "x"});
        let mut unknown_route = base();
        unknown_route["route"] = json!("executor");
        let mut no_route = base();
        no_route.as_object_mut().unwrap().remove("route");
        let mut bad_reply = base();
        bad_reply["response"] = json!({"text": "x"});
        for v in [planner_with_reply, unknown_route, no_route, bad_reply] {
            assert!(draft(v.clone()).is_err(), "{v}");
        }
    }

    #[test]
    fn a_reply_that_breaks_the_rules_is_refused() {
        let d = draft(base()).unwrap();
        let bad: AgentResponse = AgentResponse::message("");
        assert!(d.with_reply(bad).is_err());
    }
}
