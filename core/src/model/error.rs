//! Typed validation errors for the domain model.

/// A model validator refused a value. Each variant names the rule it enforces.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    // §3.5 ContextProfile
    #[error("context profile {profile:?}: {field} must be within [0.0, 1.0], got {value}")]
    ProfilePctOutOfRange {
        profile: String,
        field: &'static str,
        value: f64,
    },
    #[error(
        "context profile {profile:?}: chronicle_pct + memory_pct + workspace_pct must be <= 0.80, got {sum}"
    )]
    ProfileSumTooHigh { profile: String, sum: f64 },

    // §3.3 Expectation
    #[error("expectation must set exactly one predicate field, got none")]
    ExpectationNoPredicate,
    #[error("expectation must set exactly one predicate field, got {fields:?}")]
    ExpectationMultiplePredicates { fields: Vec<&'static str> },
    #[error("expectation file_exists path must not contain '..', got {path:?}")]
    ExpectationPathTraversal { path: String },

    // §3.3 WorkItem
    #[error("work item {id:?}: a {kind} must use agent=\"ephemeral\", got \"stream\"")]
    WorkItemAgentMustBeEphemeral { id: String, kind: &'static str },

    // §3.2 MemoryOp / AgentResponse / RouteDecision
    #[error("memory op {op:?} requires field {field}")]
    MemoryOpMissingField {
        op: &'static str,
        field: &'static str,
    },
    #[error("agent response may carry at most {max} memory_queries, got {count}")]
    TooManyMemoryQueries { count: usize, max: usize },
    #[error("route decision: route \"direct\" requires a response")]
    DirectRouteMissingResponse,
    #[error("route decision: route \"planner\" must not carry a response")]
    PlannerRouteHasResponse,
    #[error("route decision: context_profile must be non-empty")]
    EmptyContextProfile,
    #[error(
        "route decision: context_profile {profile:?} is not in the configured profile registry"
    )]
    UnknownContextProfile { profile: String },

    // §3.6 ApprovalToken
    #[error(
        "approval token {token_id:?}: scope \"standing\" requires conditions.spawn_policy_hash (a non-empty string)"
    )]
    StandingTokenMissingSpawnPolicyHash { token_id: String },

    // §3.10 AxisProfile / MoodState
    #[error("{model}.{field} must be within [0.0, 1.0], got {value}")]
    PersonalityValueOutOfRange {
        model: &'static str,
        field: &'static str,
        value: f64,
    },

    // §3.11 BatchActionDecision
    #[error(
        "batch action decision: verdict \"edit_selection\" requires a non-empty selected_item_ids"
    )]
    EditSelectionWithoutItems,

    // Workspaces (issue #15)
    #[error("workspace name {name:?} must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'")]
    WorkspaceBadName { name: String },
    #[error("workspace path {path:?} must be absolute, without '.' or '..'")]
    WorkspaceRelativePath { path: String },
    #[error("workspace protected globs must not be empty")]
    WorkspaceEmptyGlob,
}
