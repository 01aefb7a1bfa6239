//! JSON Schemas of the structured outputs, generated with schemars from
//! schema twins of the core model types, plus the scorer's output types
//! (§5.7), which live here because only the model layer produces them.
//!
//! The core model stays free of schema derives; the twins below mirror its
//! serde shape field for field, and `tests` prove the two agree (every field
//! a core value serialises is a schema property, every enum value is
//! allowed). Parsing always goes through the core types, so their validators
//! run — the schema only guides the model.

use std::sync::{Arc, LazyLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One group of context blocks with the scorer's reason (§5.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScorerGroup {
    pub reason: String,
    pub block_ids: Vec<String>,
}

/// The scorer's structured output (§5.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScorerOutput {
    pub keep_groups: Vec<ScorerGroup>,
    pub evict_groups: Vec<ScorerGroup>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum InteractionRegister {
    Exploration,
    Execution,
    Review,
    Status,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum InteractionMode {
    DefaultAndOffer,
    ActAndReport,
    ConfirmOnlyWhenRequired,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum PlanActionType {
    Propose,
    Revise,
    ExecuteNext,
    Abort,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum MemoryOpType {
    Store,
    Update,
    Delete,
    Link,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum MemoryQueryStrategy {
    Semantic,
    Temporal,
    Session,
    Keyword,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum MemoryType {
    Fact,
    Episode,
    Preference,
    SkillNote,
    Decision,
    Foresight,
    Profile,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Route {
    Direct,
    Planner,
}

/// Memory retrieval request (§3.2).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct MemoryQuery {
    strategy: MemoryQueryStrategy,
    query: String,
    /// Default 5.
    max_results: Option<u64>,
    /// Default 2000.
    max_tokens: Option<u64>,
}

/// Memory operation (§3.2). store needs content; update needs memory_id and
/// content; delete needs memory_id; link needs memory_id, link_to, link_type.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct MemoryOp {
    op: MemoryOpType,
    content: Option<String>,
    memory_id: Option<String>,
    memory_type: Option<MemoryType>,
    tags: Option<Vec<String>>,
    entity_refs: Option<Vec<String>>,
    link_to: Option<String>,
    link_type: Option<String>,
}

/// Plan proposal, revision or execution request (§3.2).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct PlanAction {
    action: PlanActionType,
    /// Markdown plan with YAML front matter (§7.2).
    plan_markdown: Option<String>,
    continuation_of: Option<String>,
    interaction_mode_override: Option<InteractionMode>,
}

/// The structured output of Proxy/Planner calls (§3.2).
#[derive(JsonSchema)]
#[schemars(rename = "AgentResponse")]
#[allow(dead_code)]
struct AgentResponse {
    /// The text to send to the user.
    message: String,
    /// At most 3.
    #[schemars(length(max = 3))]
    memory_queries: Option<Vec<MemoryQuery>>,
    memory_ops: Option<Vec<MemoryOp>>,
    plan_action: Option<PlanAction>,
    needs_approval: Option<bool>,
}

/// The Proxy's routing decision (§3.2). `direct` requires `response`;
/// `planner` requires `response` to be null.
#[derive(JsonSchema)]
#[schemars(rename = "RouteDecision")]
#[allow(dead_code)]
struct RouteDecision {
    route: Route,
    reason: String,
    response: Option<AgentResponse>,
    interaction_register: InteractionRegister,
    interaction_mode: InteractionMode,
    continuation_of: Option<String>,
    /// A configured context profile name.
    context_profile: String,
}

/// The executor's structured output (§3.7).
#[derive(JsonSchema)]
#[schemars(rename = "ExecutorAgentOutput")]
#[allow(dead_code)]
struct ExecutorAgentOutput {
    summary: String,
    artifact_refs: Option<Vec<String>>,
    next_steps: Option<Vec<String>>,
}

fn to_value<T: JsonSchema>() -> Arc<Value> {
    Arc::new(serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null))
}

// The schemas are constants of the types: generated once per process, not
// once per model call (issue #19: schemars' generation and the conversion to
// a `Value` were a visible share of every turn's CPU under load), and
// shared rather than copied per call.
static ROUTE_DECISION: LazyLock<Arc<Value>> = LazyLock::new(to_value::<RouteDecision>);
static AGENT_RESPONSE: LazyLock<Arc<Value>> = LazyLock::new(to_value::<AgentResponse>);
static EXECUTOR_OUTPUT: LazyLock<Arc<Value>> = LazyLock::new(to_value::<ExecutorAgentOutput>);
static SCORER_OUTPUT: LazyLock<Arc<Value>> = LazyLock::new(to_value::<ScorerOutput>);

/// JSON Schema of `RouteDecision`.
pub fn route_decision() -> Arc<Value> {
    Arc::clone(&ROUTE_DECISION)
}

/// JSON Schema of `AgentResponse`.
pub fn agent_response() -> Arc<Value> {
    Arc::clone(&AGENT_RESPONSE)
}

/// JSON Schema of `ExecutorAgentOutput`.
pub fn executor_output() -> Arc<Value> {
    Arc::clone(&EXECUTOR_OUTPUT)
}

/// JSON Schema of `ScorerOutput`.
pub fn scorer_output() -> Arc<Value> {
    Arc::clone(&SCORER_OUTPUT)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;
    use silas_core::model::agents as core;
    use silas_core::model::execution::ExecutorAgentOutput as CoreExec;
    use silas_core::model::memory::MemoryType as CoreMemoryType;

    use super::*;

    /// The properties of the object schema at `pointer` (after following a
    /// `$ref` into `$defs`).
    fn props(root: &Value, pointer: &str) -> BTreeSet<String> {
        let mut node = root.pointer(pointer).unwrap_or(&Value::Null).clone();
        if let Some(r) = node.get("$ref").and_then(Value::as_str) {
            node = root.pointer(r.trim_start_matches('#')).unwrap().clone();
        }
        node["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no properties at {pointer}: {node}"))
            .keys()
            .cloned()
            .collect()
    }

    fn keys(v: &Value) -> BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    fn def_enum(root: &Value, name: &str) -> BTreeSet<String> {
        root["$defs"][name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("no enum {name}: {}", root["$defs"][name]))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    fn strs<T: std::fmt::Display>(all: &[T]) -> BTreeSet<String> {
        all.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn cached_schemas_are_the_generated_ones() {
        // Generated once and shared, never copied per call: each is the
        // schema schemars generates for the type, and a caller who wants to
        // edit one gets its own copy (the value is behind an `Arc`).
        assert_eq!(route_decision(), to_value::<RouteDecision>());
        assert_eq!(agent_response(), to_value::<AgentResponse>());
        assert_eq!(executor_output(), to_value::<ExecutorAgentOutput>());
        assert_eq!(scorer_output(), to_value::<ScorerOutput>());
        assert!(Arc::ptr_eq(&route_decision(), &route_decision()));
        let mut mine = route_decision();
        Arc::make_mut(&mut mine)["title"] = Value::String("edited".into());
        assert_eq!(route_decision(), to_value::<RouteDecision>());
    }

    #[test]
    fn route_decision_schema_matches_core_shape() {
        let s = route_decision();
        let d = core::RouteDecision {
            route: core::Route::Direct,
            reason: "r".into(),
            response: Some(core::AgentResponse::message("hi")),
            interaction_register: core::InteractionRegister::Status,
            interaction_mode: core::InteractionMode::DefaultAndOffer,
            continuation_of: None,
            context_profile: "conversation".into(),
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(props(&s, ""), keys(&v));
        assert_eq!(
            props(&s, "/properties/response/anyOf/0"),
            keys(&v["response"])
        );
        let required: BTreeSet<String> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let want: BTreeSet<String> = [
            "route",
            "reason",
            "interaction_register",
            "interaction_mode",
            "context_profile",
        ]
        .map(String::from)
        .into();
        assert_eq!(required, want);
        assert_eq!(def_enum(&s, "Route"), strs(core::Route::ALL));
        assert_eq!(
            def_enum(&s, "InteractionRegister"),
            strs(core::InteractionRegister::ALL)
        );
        assert_eq!(
            def_enum(&s, "InteractionMode"),
            strs(core::InteractionMode::ALL)
        );
    }

    #[test]
    fn agent_response_schema_matches_core_shape() {
        let s = agent_response();
        let mut op = core::MemoryOp::new(core::MemoryOpType::Store);
        op.content = Some("c".into());
        let r = core::AgentResponse {
            message: "m".into(),
            memory_queries: vec![core::MemoryQuery::new(
                core::MemoryQueryStrategy::Keyword,
                "q",
            )],
            memory_ops: vec![op],
            plan_action: Some(core::PlanAction {
                action: core::PlanActionType::Propose,
                plan_markdown: None,
                continuation_of: None,
                interaction_mode_override: None,
            }),
            needs_approval: true,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(props(&s, ""), keys(&v));
        assert_eq!(
            props(&s, "/$defs/MemoryQuery"),
            keys(&v["memory_queries"][0])
        );
        assert_eq!(props(&s, "/$defs/MemoryOp"), keys(&v["memory_ops"][0]));
        assert_eq!(props(&s, "/$defs/PlanAction"), keys(&v["plan_action"]));
        assert_eq!(
            def_enum(&s, "PlanActionType"),
            strs(core::PlanActionType::ALL)
        );
        assert_eq!(def_enum(&s, "MemoryOpType"), strs(core::MemoryOpType::ALL));
        assert_eq!(
            def_enum(&s, "MemoryQueryStrategy"),
            strs(core::MemoryQueryStrategy::ALL)
        );
        assert_eq!(def_enum(&s, "MemoryType"), strs(CoreMemoryType::ALL));
        assert_eq!(s["properties"]["memory_queries"]["maxItems"], json!(3));
    }

    #[test]
    fn executor_and_scorer_schemas() {
        let s = executor_output();
        let v = serde_json::to_value(CoreExec {
            summary: "s".into(),
            artifact_refs: vec![],
            next_steps: vec![],
        })
        .unwrap();
        assert_eq!(props(&s, ""), keys(&v));
        let s = scorer_output();
        assert_eq!(
            props(&s, ""),
            ["evict_groups", "keep_groups"].map(String::from).into()
        );
        assert_eq!(
            props(&s, "/$defs/ScorerGroup"),
            ["block_ids", "reason"].map(String::from).into()
        );
    }
}
