//! Agent-facing models (spec §3.2): responses, plan actions, memory ops and
//! queries, routing decisions, interaction register and mode.
//!
//! These are the structured outputs of LLM calls, so they are the first line
//! of schema defence: every validator here runs at deserialisation, and
//! unknown extra fields are tolerated (models may add them).

use serde::{Deserialize, Serialize};

use super::ModelError;
use super::memory::MemoryType;

spec_enum! {
    /// What kind of turn this is (§3.2, §0.5.7).
    pub enum InteractionRegister {
        Exploration => "exploration",
        Execution => "execution",
        Review => "review",
        Status => "status",
    }
}

spec_enum! {
    /// How Silas operates for a turn or work item (§3.2, ADR-022).
    #[derive(Default)]
    pub enum InteractionMode {
        DefaultAndOffer => "default_and_offer",
        ActAndReport => "act_and_report",
        #[default]
        ConfirmOnlyWhenRequired => "confirm_only_when_required",
    }
}

spec_enum! {
    /// What the agent wants done with the plan (§3.2).
    pub enum PlanActionType {
        Propose => "propose",
        Revise => "revise",
        ExecuteNext => "execute_next",
        Abort => "abort",
    }
}

spec_enum! {
    /// A memory operation kind (§3.2).
    pub enum MemoryOpType {
        Store => "store",
        Update => "update",
        Delete => "delete",
        Link => "link",
    }
}

spec_enum! {
    /// How a memory query retrieves (§3.2).
    pub enum MemoryQueryStrategy {
        Semantic => "semantic",
        Temporal => "temporal",
        Session => "session",
        Keyword => "keyword",
    }
}

spec_enum! {
    /// Where the Proxy routes a turn (§3.2).
    pub enum Route {
        Direct => "direct",
        Planner => "planner",
    }
}

/// The fixed structural cap on `AgentResponse.memory_queries` (§3.2). Not
/// config-dependent on purpose: it keeps the model free of runtime config.
pub const MAX_MEMORY_QUERIES: usize = 3;

/// The structured output of every Proxy/Planner call (§3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "AgentResponseRaw")]
pub struct AgentResponse {
    pub message: String,
    pub memory_queries: Vec<MemoryQuery>,
    pub memory_ops: Vec<MemoryOp>,
    pub plan_action: Option<PlanAction>,
    /// Advisory only: the runtime forces approval whenever no valid token
    /// exists, so defaulting to `true` when absent loses nothing.
    pub needs_approval: bool,
}

#[derive(Deserialize)]
struct AgentResponseRaw {
    message: String,
    #[serde(default)]
    memory_queries: Vec<MemoryQuery>,
    #[serde(default)]
    memory_ops: Vec<MemoryOp>,
    #[serde(default)]
    plan_action: Option<PlanAction>,
    #[serde(default = "default_true")]
    needs_approval: bool,
}

fn default_true() -> bool {
    true
}

impl TryFrom<AgentResponseRaw> for AgentResponse {
    type Error = ModelError;
    fn try_from(r: AgentResponseRaw) -> Result<Self, ModelError> {
        let v = AgentResponse {
            message: r.message,
            memory_queries: r.memory_queries,
            memory_ops: r.memory_ops,
            plan_action: r.plan_action,
            needs_approval: r.needs_approval,
        };
        v.validate()?;
        Ok(v)
    }
}

impl AgentResponse {
    /// A plain reply: no queries, ops or plan action.
    pub fn message(text: impl Into<String>) -> Self {
        AgentResponse {
            message: text.into(),
            memory_queries: Vec::new(),
            memory_ops: Vec::new(),
            plan_action: None,
            needs_approval: false,
        }
    }

    /// Removes credentials from everything the response would store, send
    /// or show — the reply, memory-op contents and the plan — the way an
    /// owner's pasted key is removed (probable and definite findings). A
    /// model that read a key somewhere (or was told to leak one) would
    /// otherwise put it in the chronicle, the memory, the client's frame and
    /// every later prompt. Returns the kinds found, in order.
    pub fn redact_secrets(&mut self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        let mut clean = |text: &mut String| {
            let (redacted, findings) = crate::secrets::redact_conversation(text);
            if !findings.is_empty() {
                kinds.extend(findings.iter().map(|f| f.kind));
                *text = redacted;
            }
        };
        clean(&mut self.message);
        for op in &mut self.memory_ops {
            if let Some(c) = op.content.as_mut() {
                clean(c);
            }
        }
        if let Some(md) = self
            .plan_action
            .as_mut()
            .and_then(|p| p.plan_markdown.as_mut())
        {
            clean(md);
        }
        kinds
    }

    /// At most [`MAX_MEMORY_QUERIES`] queries; every memory op well-formed.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.memory_queries.len() > MAX_MEMORY_QUERIES {
            return Err(ModelError::TooManyMemoryQueries {
                count: self.memory_queries.len(),
                max: MAX_MEMORY_QUERIES,
            });
        }
        self.memory_ops.iter().try_for_each(MemoryOp::validate)
    }
}

/// A plan proposal, revision or execution request (§3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanAction {
    pub action: PlanActionType,
    pub plan_markdown: Option<String>,
    pub continuation_of: Option<String>,
    pub interaction_mode_override: Option<InteractionMode>,
}

/// A memory store/update/delete/link request (§3.2). One struct with an
/// op-specific validator rather than a tagged union, so the JSON shape is the
/// same for every op (as the spec's field table describes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "MemoryOpRaw")]
pub struct MemoryOp {
    pub op: MemoryOpType,
    pub content: Option<String>,
    pub memory_id: Option<String>,
    pub memory_type: MemoryType,
    pub tags: Vec<String>,
    pub entity_refs: Vec<String>,
    pub link_to: Option<String>,
    pub link_type: Option<String>,
}

#[derive(Deserialize)]
struct MemoryOpRaw {
    op: MemoryOpType,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    memory_id: Option<String>,
    #[serde(default = "default_memory_op_type")]
    memory_type: MemoryType,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    entity_refs: Vec<String>,
    #[serde(default)]
    link_to: Option<String>,
    #[serde(default)]
    link_type: Option<String>,
}

fn default_memory_op_type() -> MemoryType {
    MemoryType::Episode
}

impl TryFrom<MemoryOpRaw> for MemoryOp {
    type Error = ModelError;
    fn try_from(r: MemoryOpRaw) -> Result<Self, ModelError> {
        let v = MemoryOp {
            op: r.op,
            content: r.content,
            memory_id: r.memory_id,
            memory_type: r.memory_type,
            tags: r.tags,
            entity_refs: r.entity_refs,
            link_to: r.link_to,
            link_type: r.link_type,
        };
        v.validate()?;
        Ok(v)
    }
}

impl MemoryOp {
    /// A bare op of the given kind (memory type `episode`, nothing else set);
    /// fill in the fields its kind requires before use.
    pub fn new(op: MemoryOpType) -> Self {
        MemoryOp {
            op,
            content: None,
            memory_id: None,
            memory_type: default_memory_op_type(),
            tags: Vec::new(),
            entity_refs: Vec::new(),
            link_to: None,
            link_type: None,
        }
    }

    /// Op-specific required fields (§3.2): store needs `content`; update needs
    /// `memory_id` + `content`; delete needs `memory_id`; link needs
    /// `memory_id` + `link_to` + `link_type`. "Present" means non-`None`.
    pub fn validate(&self) -> Result<(), ModelError> {
        let required: &[(&'static str, bool)] = match self.op {
            MemoryOpType::Store => &[("content", self.content.is_some())],
            MemoryOpType::Update => &[
                ("memory_id", self.memory_id.is_some()),
                ("content", self.content.is_some()),
            ],
            MemoryOpType::Delete => &[("memory_id", self.memory_id.is_some())],
            MemoryOpType::Link => &[
                ("memory_id", self.memory_id.is_some()),
                ("link_to", self.link_to.is_some()),
                ("link_type", self.link_type.is_some()),
            ],
        };
        match required.iter().find(|(_, present)| !present) {
            Some((field, _)) => Err(ModelError::MemoryOpMissingField {
                op: self.op.as_str(),
                field,
            }),
            None => Ok(()),
        }
    }
}

/// A memory retrieval request (§3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryQuery {
    pub strategy: MemoryQueryStrategy,
    pub query: String,
    #[serde(default = "default_max_results")]
    pub max_results: u64,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
}

fn default_max_results() -> u64 {
    5
}

fn default_max_tokens() -> u64 {
    2000
}

impl MemoryQuery {
    /// A query with the spec's default limits (5 results, 2000 tokens).
    pub fn new(strategy: MemoryQueryStrategy, query: impl Into<String>) -> Self {
        MemoryQuery {
            strategy,
            query: query.into(),
            max_results: default_max_results(),
            max_tokens: default_max_tokens(),
        }
    }
}

/// The Proxy's routing decision for a turn (§3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RouteDecisionRaw")]
pub struct RouteDecision {
    pub route: Route,
    pub reason: String,
    pub response: Option<AgentResponse>,
    pub interaction_register: InteractionRegister,
    pub interaction_mode: InteractionMode,
    pub continuation_of: Option<String>,
    pub context_profile: String,
}

#[derive(Deserialize)]
struct RouteDecisionRaw {
    route: Route,
    reason: String,
    #[serde(default)]
    response: Option<AgentResponse>,
    interaction_register: InteractionRegister,
    #[serde(default)]
    interaction_mode: InteractionMode,
    #[serde(default)]
    continuation_of: Option<String>,
    context_profile: String,
}

impl TryFrom<RouteDecisionRaw> for RouteDecision {
    type Error = ModelError;
    fn try_from(r: RouteDecisionRaw) -> Result<Self, ModelError> {
        let v = RouteDecision {
            route: r.route,
            reason: r.reason,
            response: r.response,
            interaction_register: r.interaction_register,
            interaction_mode: r.interaction_mode,
            continuation_of: r.continuation_of,
            context_profile: r.context_profile,
        };
        v.validate()?;
        Ok(v)
    }
}

impl RouteDecision {
    /// The structural rules (§3.2): `context_profile` non-empty; `direct`
    /// carries a response, `planner` does not. Registry membership needs the
    /// configuration, so it is checked separately by [`Self::validate_profile`].
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.context_profile.is_empty() {
            return Err(ModelError::EmptyContextProfile);
        }
        match (self.route, &self.response) {
            (Route::Direct, None) => Err(ModelError::DirectRouteMissingResponse),
            (Route::Planner, Some(_)) => Err(ModelError::PlannerRouteHasResponse),
            (_, Some(resp)) => resp.validate(),
            (Route::Planner, None) => Ok(()),
        }
    }

    /// The "exists in the configured profile registry" rule (§3.2): `known`
    /// answers whether a profile name is configured. Checks only the profile.
    pub fn validate_profile(&self, known: impl Fn(&str) -> bool) -> Result<(), ModelError> {
        if self.context_profile.is_empty() {
            return Err(ModelError::EmptyContextProfile);
        }
        if !known(&self.context_profile) {
            return Err(ModelError::UnknownContextProfile {
                profile: self.context_profile.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_credential_in_a_model_response_is_removed_everywhere() {
        let key = "sk-proj-CANARYabcdefghijklmnopqrstuvwxyz0123456789";
        let mut r = AgentResponse::message(format!("your key is {key}"));
        r.memory_ops.push(MemoryOp {
            op: MemoryOpType::Store,
            content: Some(format!("api key: {key}")),
            memory_id: None,
            memory_type: MemoryType::Fact,
            tags: Vec::new(),
            entity_refs: Vec::new(),
            link_to: None,
            link_type: None,
        });
        r.plan_action = Some(PlanAction {
            action: PlanActionType::Propose,
            plan_markdown: Some(format!(
                "---\nid: x\n---\ncurl -H 'Authorization: Bearer {key}'\n"
            )),
            continuation_of: None,
            interaction_mode_override: None,
        });
        let kinds = r.redact_secrets();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        let all = format!("{r:?}");
        assert!(!all.contains("CANARY"), "{all}");
        // Nothing to find: nothing changes.
        let mut plain = AgentResponse::message("commit 4f2a9c1 fixed it");
        assert!(plain.redact_secrets().is_empty());
        assert_eq!(plain.message, "commit 4f2a9c1 fixed it");
    }
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            InteractionRegister::ALL,
            &[
                (InteractionRegister::Exploration, "exploration"),
                (InteractionRegister::Execution, "execution"),
                (InteractionRegister::Review, "review"),
                (InteractionRegister::Status, "status"),
            ],
        );
        assert_enum_strings(
            InteractionMode::ALL,
            &[
                (InteractionMode::DefaultAndOffer, "default_and_offer"),
                (InteractionMode::ActAndReport, "act_and_report"),
                (
                    InteractionMode::ConfirmOnlyWhenRequired,
                    "confirm_only_when_required",
                ),
            ],
        );
        assert_enum_strings(
            PlanActionType::ALL,
            &[
                (PlanActionType::Propose, "propose"),
                (PlanActionType::Revise, "revise"),
                (PlanActionType::ExecuteNext, "execute_next"),
                (PlanActionType::Abort, "abort"),
            ],
        );
        assert_enum_strings(
            MemoryOpType::ALL,
            &[
                (MemoryOpType::Store, "store"),
                (MemoryOpType::Update, "update"),
                (MemoryOpType::Delete, "delete"),
                (MemoryOpType::Link, "link"),
            ],
        );
        assert_enum_strings(
            MemoryQueryStrategy::ALL,
            &[
                (MemoryQueryStrategy::Semantic, "semantic"),
                (MemoryQueryStrategy::Temporal, "temporal"),
                (MemoryQueryStrategy::Session, "session"),
                (MemoryQueryStrategy::Keyword, "keyword"),
            ],
        );
        assert_enum_strings(
            Route::ALL,
            &[(Route::Direct, "direct"), (Route::Planner, "planner")],
        );
        assert_eq!(
            InteractionMode::default(),
            InteractionMode::ConfirmOnlyWhenRequired
        );
    }

    fn full_response() -> AgentResponse {
        let mut store = MemoryOp::new(MemoryOpType::Store);
        store.content = Some("user prefers terse answers".into());
        store.memory_type = MemoryType::Preference;
        store.tags = vec!["behavior:depth/terse".into()];
        let mut link = MemoryOp::new(MemoryOpType::Link);
        link.memory_id = Some("m1".into());
        link.link_to = Some("m2".into());
        link.link_type = Some("caused_by".into());
        AgentResponse {
            message: "Done.".into(),
            memory_queries: vec![
                MemoryQuery::new(MemoryQueryStrategy::Semantic, "auth fix"),
                MemoryQuery::new(MemoryQueryStrategy::Keyword, "payment"),
                MemoryQuery::new(MemoryQueryStrategy::Session, "today"),
            ],
            memory_ops: vec![store, link],
            plan_action: Some(PlanAction {
                action: PlanActionType::Propose,
                plan_markdown: Some("---\nid: w1\n---\nDo it".into()),
                continuation_of: None,
                interaction_mode_override: Some(InteractionMode::ActAndReport),
            }),
            needs_approval: true,
        }
    }

    #[test]
    fn agent_response_round_trips() {
        let v = round_trip(&full_response());
        assert!(v["plan_action"]["continuation_of"].is_null());
        assert_eq!(v["memory_queries"][0]["max_results"], 5);
        assert_eq!(v["memory_queries"][0]["max_tokens"], 2000);
        round_trip(&AgentResponse::message("hi"));
    }

    #[test]
    fn agent_response_defaults_and_tolerates_extras() {
        let r: AgentResponse =
            serde_json::from_value(json!({"message": "hi", "confidence": 0.9})).unwrap();
        assert!(r.memory_queries.is_empty() && r.memory_ops.is_empty());
        assert!(r.plan_action.is_none());
        assert!(r.needs_approval, "absent needs_approval is the safe value");
    }

    #[test]
    fn agent_response_caps_memory_queries_at_three() {
        let mut r = full_response();
        assert_eq!(r.validate(), Ok(()));
        r.memory_queries
            .push(MemoryQuery::new(MemoryQueryStrategy::Temporal, "x"));
        let err = ModelError::TooManyMemoryQueries { count: 4, max: 3 };
        assert_eq!(r.validate(), Err(err.clone()));
        // Bypass the validated Serialize→Deserialize path by building the JSON.
        let json = serde_json::to_value(&r).unwrap();
        assert_refused::<AgentResponse>(json, &err);
    }

    #[test]
    fn agent_response_refuses_invalid_nested_memory_op() {
        let err = ModelError::MemoryOpMissingField {
            op: "store",
            field: "content",
        };
        let mut r = AgentResponse::message("x");
        r.memory_ops.push(MemoryOp::new(MemoryOpType::Store));
        assert_eq!(r.validate(), Err(err.clone()));
        assert_refused::<AgentResponse>(
            json!({"message": "x", "memory_ops": [{"op": "store"}]}),
            &err,
        );
    }

    #[test]
    fn memory_op_defaults() {
        let op: MemoryOp = serde_json::from_value(json!({"op": "store", "content": "c"})).unwrap();
        assert_eq!(op.memory_type, MemoryType::Episode);
        let v = round_trip(&op);
        assert!(v["memory_id"].is_null() && v["link_to"].is_null() && v["link_type"].is_null());
    }

    #[test]
    fn memory_op_required_fields_per_op() {
        // (json, missing field or None when valid)
        let cases: Vec<(Value, Option<(&'static str, &'static str)>)> = vec![
            (json!({"op": "store", "content": "c"}), None),
            (json!({"op": "store"}), Some(("store", "content"))),
            (
                json!({"op": "store", "memory_id": "m"}),
                Some(("store", "content")),
            ),
            (
                json!({"op": "update", "memory_id": "m", "content": "c"}),
                None,
            ),
            (
                json!({"op": "update", "content": "c"}),
                Some(("update", "memory_id")),
            ),
            (
                json!({"op": "update", "memory_id": "m"}),
                Some(("update", "content")),
            ),
            (json!({"op": "delete", "memory_id": "m"}), None),
            (
                json!({"op": "delete", "content": "c"}),
                Some(("delete", "memory_id")),
            ),
            (
                json!({"op": "link", "memory_id": "m", "link_to": "n", "link_type": "t"}),
                None,
            ),
            (
                json!({"op": "link", "link_to": "n", "link_type": "t"}),
                Some(("link", "memory_id")),
            ),
            (
                json!({"op": "link", "memory_id": "m", "link_type": "t"}),
                Some(("link", "link_to")),
            ),
            (
                json!({"op": "link", "memory_id": "m", "link_to": "n"}),
                Some(("link", "link_type")),
            ),
            (
                json!({"op": "link", "memory_id": "m", "link_to": "n", "link_type": null}),
                Some(("link", "link_type")),
            ),
        ];
        for (json, missing) in cases {
            match missing {
                None => {
                    let op: MemoryOp = serde_json::from_value(json.clone()).unwrap();
                    assert_eq!(op.validate(), Ok(()), "{json}");
                }
                Some((op, field)) => {
                    assert_refused::<MemoryOp>(
                        json,
                        &ModelError::MemoryOpMissingField { op, field },
                    );
                }
            }
        }
    }

    fn planner_decision() -> RouteDecision {
        RouteDecision {
            route: Route::Planner,
            reason: "multi-step".into(),
            response: None,
            interaction_register: InteractionRegister::Execution,
            interaction_mode: InteractionMode::DefaultAndOffer,
            continuation_of: Some("w-1".into()),
            context_profile: "coding".into(),
        }
    }

    #[test]
    fn route_decision_round_trips() {
        let v = round_trip(&planner_decision());
        assert_eq!(v["route"], "planner");
        assert!(v["response"].is_null());
        let mut direct = planner_decision();
        direct.route = Route::Direct;
        direct.response = Some(AgentResponse::message("hello"));
        round_trip(&direct);
    }

    #[test]
    fn route_decision_defaults_interaction_mode() {
        let d: RouteDecision = serde_json::from_value(json!({
            "route": "planner", "reason": "r", "interaction_register": "review",
            "context_profile": "research"
        }))
        .unwrap();
        assert_eq!(d.interaction_mode, InteractionMode::ConfirmOnlyWhenRequired);
        assert_eq!(d.continuation_of, None);
    }

    #[test]
    fn route_decision_rules() {
        assert_eq!(planner_decision().validate(), Ok(()));

        let mut d = planner_decision();
        d.route = Route::Direct;
        assert_eq!(d.validate(), Err(ModelError::DirectRouteMissingResponse));

        let mut d = planner_decision();
        d.response = Some(AgentResponse::message("no"));
        assert_eq!(d.validate(), Err(ModelError::PlannerRouteHasResponse));

        let mut d = planner_decision();
        d.context_profile.clear();
        assert_eq!(d.validate(), Err(ModelError::EmptyContextProfile));

        let base = json!({"reason": "r", "interaction_register": "status", "context_profile": "conversation"});
        let with = |extra: Value| {
            let mut v = base.clone();
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        assert_refused::<RouteDecision>(
            with(json!({"route": "direct"})),
            &ModelError::DirectRouteMissingResponse,
        );
        assert_refused::<RouteDecision>(
            with(json!({"route": "planner", "response": {"message": "hi"}})),
            &ModelError::PlannerRouteHasResponse,
        );
        assert_refused::<RouteDecision>(
            with(json!({"route": "planner", "context_profile": ""})),
            &ModelError::EmptyContextProfile,
        );
        // Route is a closed set.
        assert!(
            serde_json::from_value::<RouteDecision>(with(json!({"route": "elsewhere"}))).is_err()
        );
    }

    #[test]
    fn route_decision_profile_registry() {
        let known = |p: &str| ["conversation", "coding"].contains(&p);
        assert_eq!(planner_decision().validate_profile(known), Ok(()));
        let mut d = planner_decision();
        d.context_profile = "poetry".into();
        assert_eq!(
            d.validate_profile(known),
            Err(ModelError::UnknownContextProfile {
                profile: "poetry".into()
            })
        );
        d.context_profile.clear();
        assert_eq!(
            d.validate_profile(known),
            Err(ModelError::EmptyContextProfile)
        );
    }
}
