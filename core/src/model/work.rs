//! Work items (spec §3.3): the universal unit of work — types, statuses,
//! budgets and their accounting, verification predicates and checks,
//! escalation actions, the work item itself and the executor's result.
//! The plan-hash projection over a work item lives in `crate::projections`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::agents::InteractionMode;
use super::approval::ApprovalToken;
use super::gates::{AccessLevel, Gate};
use super::workspace::WorkspaceUse;
use super::{JsonObject, ModelError};
use crate::Timestamp;

spec_enum! {
    /// Determines how a work item executes (§3.3).
    pub enum WorkItemType {
        Task => "task",
        Project => "project",
        Goal => "goal",
    }
}

spec_enum! {
    /// Lifecycle state of a work item (§3.3).
    #[derive(Default)]
    pub enum WorkItemStatus {
        #[default]
        Pending => "pending",
        Running => "running",
        Healthy => "healthy",
        Done => "done",
        Failed => "failed",
        Stuck => "stuck",
        Blocked => "blocked",
        Paused => "paused",
    }
}

spec_enum! {
    /// Execution lane of a work item (the spec's `Literal["ephemeral","stream"]`).
    pub enum AgentLane {
        Ephemeral => "ephemeral",
        Stream => "stream",
    }
}

/// The `schedule` value marking a continuously-running goal (§3.3).
pub const ALWAYS_ON: &str = "always_on";

impl AgentLane {
    /// The lane used when a work item does not name one (§3.3): a goal with
    /// `schedule == "always_on"` configures the Stream; everything else is
    /// ephemeral work.
    pub fn default_for(kind: WorkItemType, schedule: Option<&str>) -> Self {
        if kind == WorkItemType::Goal && schedule == Some(ALWAYS_ON) {
            AgentLane::Stream
        } else {
            AgentLane::Ephemeral
        }
    }
}

spec_enum! {
    /// What an escalation does (§3.3 `EscalationAction.action`).
    pub enum EscalationKind {
        Report => "report",
        EscalateHuman => "escalate_human",
        TransferToQueue => "transfer_to_queue",
        SuppressAndRephrase => "suppress_and_rephrase",
        SuppressAndEscalate => "suppress_and_escalate",
        Respond => "respond",
        SpawnTask => "spawn_task",
        Retry => "retry",
    }
}

/// Resource limits enforced deterministically by the runtime (§3.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    #[serde(default = "default_max_cost_usd")]
    pub max_cost_usd: f64,
    #[serde(default = "default_max_wall_time_seconds")]
    pub max_wall_time_seconds: u64,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u64,
    #[serde(default = "default_max_planner_calls")]
    pub max_planner_calls: u64,
}

fn default_max_tokens() -> u64 {
    200_000
}
fn default_max_cost_usd() -> f64 {
    2.0
}
fn default_max_wall_time_seconds() -> u64 {
    1800
}
fn default_max_attempts() -> u64 {
    5
}
fn default_max_planner_calls() -> u64 {
    3
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_tokens: default_max_tokens(),
            max_cost_usd: default_max_cost_usd(),
            max_wall_time_seconds: default_max_wall_time_seconds(),
            max_attempts: default_max_attempts(),
            max_planner_calls: default_max_planner_calls(),
        }
    }
}

/// Resources consumed so far (§3.3). Checked before every action.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetUsed {
    #[serde(default)]
    pub tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub wall_time_seconds: f64,
    #[serde(default)]
    pub attempts: u64,
    #[serde(default)]
    pub planner_calls: u64,
    #[serde(default)]
    pub executor_runs: u64,
}

impl BudgetUsed {
    /// True when any limited resource has *reached* its limit (`>=`, §3.3):
    /// reaching the limit is exhaustion, so no final action can overshoot it.
    /// `executor_runs` has no limit in [`Budget`] and is not consulted.
    pub fn exceeds(&self, budget: &Budget) -> bool {
        self.tokens >= budget.max_tokens
            || self.cost_usd >= budget.max_cost_usd
            // u64 → f64 is exact for any realistic wall-time limit (< 2^53 s).
            || self.wall_time_seconds >= budget.max_wall_time_seconds as f64
            || self.attempts >= budget.max_attempts
            || self.planner_calls >= budget.max_planner_calls
    }

    /// Adds every field of a child's consumption into this one (§3.3),
    /// including `attempts` and `executor_runs`, so a project reflects the
    /// total of its tasks. Counters saturate rather than wrap.
    pub fn merge(&mut self, child: &BudgetUsed) {
        self.tokens = self.tokens.saturating_add(child.tokens);
        self.cost_usd += child.cost_usd;
        self.wall_time_seconds += child.wall_time_seconds;
        self.attempts = self.attempts.saturating_add(child.attempts);
        self.planner_calls = self.planner_calls.saturating_add(child.planner_calls);
        self.executor_runs = self.executor_runs.saturating_add(child.executor_runs);
    }
}

/// A deterministic success predicate (§3.3). Exactly one field is set, where
/// "set" means non-`None` — so `{"not_empty": false}` is a (single) predicate
/// and `{"contains": "x", "not_empty": false}` is two. Counting only `true`
/// would make `false` silently mean "no predicate", which hides mistakes.
///
/// `Default` is the empty (hence invalid) expectation: a base for
/// struct-update syntax, as in [`Expectation::exit_code`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ExpectationRaw")]
pub struct Expectation {
    pub exit_code: Option<i64>,
    pub equals: Option<String>,
    pub contains: Option<String>,
    pub regex: Option<String>,
    pub output_lt: Option<f64>,
    pub output_gt: Option<f64>,
    /// Checked against the runtime's directory allowlist by the verification
    /// runner; the model refuses any `..` up front (§3.3).
    pub file_exists: Option<String>,
    pub not_empty: Option<bool>,
}

#[derive(Deserialize)]
struct ExpectationRaw {
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    equals: Option<String>,
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    output_lt: Option<f64>,
    #[serde(default)]
    output_gt: Option<f64>,
    #[serde(default)]
    file_exists: Option<String>,
    #[serde(default)]
    not_empty: Option<bool>,
}

impl TryFrom<ExpectationRaw> for Expectation {
    type Error = ModelError;
    fn try_from(r: ExpectationRaw) -> Result<Self, ModelError> {
        let v = Expectation {
            exit_code: r.exit_code,
            equals: r.equals,
            contains: r.contains,
            regex: r.regex,
            output_lt: r.output_lt,
            output_gt: r.output_gt,
            file_exists: r.file_exists,
            not_empty: r.not_empty,
        };
        v.validate()?;
        Ok(v)
    }
}

impl Expectation {
    pub fn exit_code(code: i64) -> Self {
        Expectation {
            exit_code: Some(code),
            ..Default::default()
        }
    }

    pub fn contains(s: impl Into<String>) -> Self {
        Expectation {
            contains: Some(s.into()),
            ..Default::default()
        }
    }

    pub fn file_exists(path: impl Into<String>) -> Self {
        Expectation {
            file_exists: Some(path.into()),
            ..Default::default()
        }
    }

    /// Every predicate field's key, in spec order.
    pub const FIELDS: [&'static str; 8] = [
        "exit_code",
        "equals",
        "contains",
        "regex",
        "output_lt",
        "output_gt",
        "file_exists",
        "not_empty",
    ];

    /// Names of the predicate fields that are set (non-`None`), in spec order.
    pub fn set_fields(&self) -> Vec<&'static str> {
        let set = [
            self.exit_code.is_some(),
            self.equals.is_some(),
            self.contains.is_some(),
            self.regex.is_some(),
            self.output_lt.is_some(),
            self.output_gt.is_some(),
            self.file_exists.is_some(),
            self.not_empty.is_some(),
        ];
        Self::FIELDS
            .into_iter()
            .zip(set)
            .filter_map(|(name, set)| set.then_some(name))
            .collect()
    }

    /// Exactly one predicate set; a `file_exists` path never contains `..`.
    pub fn validate(&self) -> Result<(), ModelError> {
        let fields = self.set_fields();
        match fields.len() {
            0 => return Err(ModelError::ExpectationNoPredicate),
            1 => {}
            _ => return Err(ModelError::ExpectationMultiplePredicates { fields }),
        }
        if let Some(path) = &self.file_exists
            && path.contains("..")
        {
            return Err(ModelError::ExpectationPathTraversal { path: path.clone() });
        }
        Ok(())
    }
}

/// An external verification check the agent cannot modify (§3.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerificationCheck {
    pub name: String,
    pub run: String,
    pub expect: Expectation,
    #[serde(default = "default_check_timeout")]
    pub timeout: u64,
    #[serde(default)]
    pub network: bool,
}

fn default_check_timeout() -> u64 {
    60
}

impl VerificationCheck {
    /// A check with the spec defaults (60 s timeout, no network).
    pub fn new(name: impl Into<String>, run: impl Into<String>, expect: Expectation) -> Self {
        VerificationCheck {
            name: name.into(),
            run: run.into(),
            expect,
            timeout: default_check_timeout(),
            network: false,
        }
    }

    pub fn validate(&self) -> Result<(), ModelError> {
        self.expect.validate()
    }
}

/// What happens when a gate blocks or verification fails (§3.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EscalationAction {
    pub action: EscalationKind,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub instruction: Option<String>,
    #[serde(default = "default_max_retries")]
    pub max_retries: u64,
    #[serde(default)]
    pub fallback: Option<String>,
}

fn default_max_retries() -> u64 {
    2
}

impl EscalationAction {
    pub fn new(action: EscalationKind) -> Self {
        EscalationAction {
            action,
            queue: None,
            message: None,
            instruction: None,
            max_retries: default_max_retries(),
            fallback: None,
        }
    }
}

/// The universal work structure (§3.3). Fields are in the spec's order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WorkItemRaw")]
pub struct WorkItem {
    // Identity
    pub id: String,
    #[serde(rename = "type")]
    pub kind: WorkItemType,
    pub title: String,
    pub parent: Option<String>,
    pub spawned_by: Option<String>,
    pub follow_up_of: Option<String>,
    pub domain: Option<String>,
    // Scope
    pub agent: AgentLane,
    pub budget: Budget,
    pub needs_approval: bool,
    pub approval_token: Option<ApprovalToken>,
    // Briefing
    pub body: String,
    pub interaction_mode: InteractionMode,
    pub input_artifacts_from: Vec<String>,
    // Verification, gates, skills, access, escalation
    pub verify: Vec<VerificationCheck>,
    pub gates: Vec<Gate>,
    pub skills: Vec<String>,
    pub access_levels: BTreeMap<String, AccessLevel>,
    pub escalation: BTreeMap<String, EscalationAction>,
    // Lifecycle
    pub schedule: Option<String>,
    pub on_failure: String,
    pub on_stuck: String,
    pub failure_context: Option<String>,
    // Hierarchy
    pub tasks: Vec<String>,
    pub depends_on: Vec<String>,
    // State (runtime-managed)
    pub status: WorkItemStatus,
    pub attempts: u64,
    pub budget_used: BudgetUsed,
    pub verification_results: Vec<JsonObject>,
    pub created_at: Timestamp,
    /// The conversation scope whose turn created the item, set by the
    /// server (never by a plan). `follow_up_of` / `input_artifacts_from`
    /// may only name items of the same scope. `None` for items from before
    /// scopes were recorded, which only the owner's scope may then use.
    pub scope_id: Option<String>,
    /// The registered workspace the plan works in, and how (issue #15).
    /// In the plan hash only when set, so older plans keep their hashes.
    pub workspace: Option<WorkspaceUse>,
    /// The content hash of every skill in `skills`, bound when the plan is
    /// made (issue #17, §10.5 "hash-binding"): a skill whose files change
    /// after approval no longer matches. In the plan hash only when set, so
    /// plans without skills keep their hashes.
    pub skill_hashes: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WorkItemRaw {
    id: String,
    #[serde(rename = "type")]
    kind: WorkItemType,
    title: String,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    spawned_by: Option<String>,
    #[serde(default)]
    follow_up_of: Option<String>,
    #[serde(default)]
    domain: Option<String>,
    /// Absent → [`AgentLane::default_for`]; an explicit `null` is treated the
    /// same, as Pydantic would for a defaulted optional.
    #[serde(default)]
    agent: Option<AgentLane>,
    #[serde(default)]
    budget: Budget,
    #[serde(default = "default_true")]
    needs_approval: bool,
    #[serde(default)]
    approval_token: Option<ApprovalToken>,
    #[serde(default)]
    body: String,
    #[serde(default)]
    interaction_mode: InteractionMode,
    #[serde(default)]
    input_artifacts_from: Vec<String>,
    #[serde(default)]
    verify: Vec<VerificationCheck>,
    #[serde(default)]
    gates: Vec<Gate>,
    #[serde(default)]
    skills: Vec<String>,
    #[serde(default)]
    access_levels: BTreeMap<String, AccessLevel>,
    #[serde(default)]
    escalation: BTreeMap<String, EscalationAction>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default = "default_on_failure")]
    on_failure: String,
    #[serde(default = "default_on_stuck")]
    on_stuck: String,
    #[serde(default)]
    failure_context: Option<String>,
    #[serde(default)]
    tasks: Vec<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    status: WorkItemStatus,
    #[serde(default)]
    attempts: u64,
    #[serde(default)]
    budget_used: BudgetUsed,
    #[serde(default)]
    verification_results: Vec<JsonObject>,
    #[serde(default = "Timestamp::now")]
    created_at: Timestamp,
    #[serde(default)]
    scope_id: Option<String>,
    #[serde(default)]
    workspace: Option<WorkspaceUse>,
    #[serde(default)]
    skill_hashes: Option<BTreeMap<String, String>>,
}

fn default_true() -> bool {
    true
}
fn default_on_failure() -> String {
    "report".to_string()
}
fn default_on_stuck() -> String {
    "consult_planner".to_string()
}

impl TryFrom<WorkItemRaw> for WorkItem {
    type Error = ModelError;
    fn try_from(r: WorkItemRaw) -> Result<Self, ModelError> {
        let agent = r
            .agent
            .unwrap_or_else(|| AgentLane::default_for(r.kind, r.schedule.as_deref()));
        let v = WorkItem {
            id: r.id,
            kind: r.kind,
            title: r.title,
            parent: r.parent,
            spawned_by: r.spawned_by,
            follow_up_of: r.follow_up_of,
            domain: r.domain,
            agent,
            budget: r.budget,
            needs_approval: r.needs_approval,
            approval_token: r.approval_token,
            body: r.body,
            interaction_mode: r.interaction_mode,
            input_artifacts_from: r.input_artifacts_from,
            verify: r.verify,
            gates: r.gates,
            skills: r.skills,
            access_levels: r.access_levels,
            escalation: r.escalation,
            schedule: r.schedule,
            on_failure: r.on_failure,
            on_stuck: r.on_stuck,
            failure_context: r.failure_context,
            tasks: r.tasks,
            depends_on: r.depends_on,
            status: r.status,
            attempts: r.attempts,
            budget_used: r.budget_used,
            verification_results: r.verification_results,
            created_at: r.created_at,
            scope_id: r.scope_id,
            workspace: r.workspace,
            skill_hashes: r.skill_hashes,
        };
        v.validate()?;
        Ok(v)
    }
}

impl WorkItem {
    /// A work item with every spec default: lane from
    /// [`AgentLane::default_for`] (no schedule, so ephemeral), default budget,
    /// approval needed, status pending, created now.
    pub fn new(id: impl Into<String>, kind: WorkItemType, title: impl Into<String>) -> Self {
        WorkItem {
            id: id.into(),
            kind,
            title: title.into(),
            parent: None,
            spawned_by: None,
            follow_up_of: None,
            domain: None,
            agent: AgentLane::default_for(kind, None),
            budget: Budget::default(),
            needs_approval: true,
            approval_token: None,
            body: String::new(),
            interaction_mode: InteractionMode::default(),
            input_artifacts_from: Vec::new(),
            verify: Vec::new(),
            gates: Vec::new(),
            skills: Vec::new(),
            access_levels: BTreeMap::new(),
            escalation: BTreeMap::new(),
            schedule: None,
            on_failure: default_on_failure(),
            on_stuck: default_on_stuck(),
            failure_context: None,
            tasks: Vec::new(),
            depends_on: Vec::new(),
            status: WorkItemStatus::default(),
            attempts: 0,
            budget_used: BudgetUsed::default(),
            verification_results: Vec::new(),
            created_at: Timestamp::now(),
            scope_id: None,
            workspace: None,
            skill_hashes: None,
        }
    }

    /// §3.3: tasks and projects run on the ephemeral lane. Also re-checks the
    /// nested validated models, for values built in Rust.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.agent == AgentLane::Stream && self.kind != WorkItemType::Goal {
            return Err(ModelError::WorkItemAgentMustBeEphemeral {
                id: self.id.clone(),
                kind: self.kind.as_str(),
            });
        }
        self.verify
            .iter()
            .try_for_each(VerificationCheck::validate)?;
        self.gates.iter().try_for_each(Gate::validate)?;
        if let Some(token) = &self.approval_token {
            token.validate()?;
        }
        if let Some(ws) = &self.workspace {
            ws.validate()?;
        }
        Ok(())
    }
}

/// The executor's deterministic return contract (§3.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkItemResult {
    pub work_item_id: String,
    pub status: WorkItemStatus,
    pub summary: String,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub verification_results: Vec<JsonObject>,
    #[serde(default)]
    pub budget_used: BudgetUsed,
    #[serde(default)]
    pub artifacts: BTreeMap<String, String>,
    #[serde(default)]
    pub next_steps: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::Base64Bytes;
    use crate::model::approval::{ApprovalScope, ApprovalStrength, ApprovalVerdict};
    use crate::model::gates::{GateProvider, GateTrigger, GateType};
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            WorkItemType::ALL,
            &[
                (WorkItemType::Task, "task"),
                (WorkItemType::Project, "project"),
                (WorkItemType::Goal, "goal"),
            ],
        );
        assert_enum_strings(
            WorkItemStatus::ALL,
            &[
                (WorkItemStatus::Pending, "pending"),
                (WorkItemStatus::Running, "running"),
                (WorkItemStatus::Healthy, "healthy"),
                (WorkItemStatus::Done, "done"),
                (WorkItemStatus::Failed, "failed"),
                (WorkItemStatus::Stuck, "stuck"),
                (WorkItemStatus::Blocked, "blocked"),
                (WorkItemStatus::Paused, "paused"),
            ],
        );
        assert_enum_strings(
            AgentLane::ALL,
            &[
                (AgentLane::Ephemeral, "ephemeral"),
                (AgentLane::Stream, "stream"),
            ],
        );
        assert_enum_strings(
            EscalationKind::ALL,
            &[
                (EscalationKind::Report, "report"),
                (EscalationKind::EscalateHuman, "escalate_human"),
                (EscalationKind::TransferToQueue, "transfer_to_queue"),
                (EscalationKind::SuppressAndRephrase, "suppress_and_rephrase"),
                (EscalationKind::SuppressAndEscalate, "suppress_and_escalate"),
                (EscalationKind::Respond, "respond"),
                (EscalationKind::SpawnTask, "spawn_task"),
                (EscalationKind::Retry, "retry"),
            ],
        );
    }

    #[test]
    fn budget_defaults() {
        let b: Budget = serde_json::from_value(json!({})).unwrap();
        assert_eq!(b, Budget::default());
        round_trip(&b);
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!({"max_tokens": 200000, "max_cost_usd": 2.0, "max_wall_time_seconds": 1800,
                   "max_attempts": 5, "max_planner_calls": 3})
        );
        let u: BudgetUsed = serde_json::from_value(json!({})).unwrap();
        assert_eq!(u, BudgetUsed::default());
        round_trip(&BudgetUsed {
            tokens: 1,
            cost_usd: 0.25,
            wall_time_seconds: 1.5,
            attempts: 2,
            planner_calls: 3,
            executor_runs: 4,
        });
    }

    /// A budget whose every limit is a distinct small number.
    fn small_budget() -> Budget {
        Budget {
            max_tokens: 100,
            max_cost_usd: 1.0,
            max_wall_time_seconds: 60,
            max_attempts: 3,
            max_planner_calls: 2,
        }
    }

    #[test]
    fn exceeds_is_inclusive_for_every_field() {
        let b = small_budget();
        assert!(!BudgetUsed::default().exceeds(&b));
        type Set = fn(&mut BudgetUsed, bool);
        // Each setter puts one field exactly at its limit (true) or one below.
        let fields: [(&str, Set); 5] = [
            ("tokens", |u, at| u.tokens = if at { 100 } else { 99 }),
            ("cost_usd", |u, at| u.cost_usd = if at { 1.0 } else { 0.99 }),
            ("wall_time_seconds", |u, at| {
                u.wall_time_seconds = if at { 60.0 } else { 59.0 }
            }),
            ("attempts", |u, at| u.attempts = if at { 3 } else { 2 }),
            ("planner_calls", |u, at| {
                u.planner_calls = if at { 2 } else { 1 }
            }),
        ];
        for (name, set) in fields {
            let mut at = BudgetUsed::default();
            set(&mut at, true);
            assert!(at.exceeds(&b), "{name} at its limit is exhausted");
            let mut below = BudgetUsed::default();
            set(&mut below, false);
            assert!(!below.exceeds(&b), "{name} one below its limit is not");
        }
        // executor_runs has no limit.
        let runs = BudgetUsed {
            executor_runs: u64::MAX,
            ..Default::default()
        };
        assert!(!runs.exceeds(&b));
    }

    #[test]
    fn merge_sums_all_six_fields() {
        let mut parent = BudgetUsed {
            tokens: 10,
            cost_usd: 0.5,
            wall_time_seconds: 2.0,
            attempts: 1,
            planner_calls: 1,
            executor_runs: 2,
        };
        let child = BudgetUsed {
            tokens: 5,
            cost_usd: 0.25,
            wall_time_seconds: 3.5,
            attempts: 2,
            planner_calls: 3,
            executor_runs: 4,
        };
        parent.merge(&child);
        assert_eq!(
            parent,
            BudgetUsed {
                tokens: 15,
                cost_usd: 0.75,
                wall_time_seconds: 5.5,
                attempts: 3,
                planner_calls: 4,
                executor_runs: 6,
            }
        );
    }

    #[test]
    fn expectation_exactly_one_predicate() {
        let valid = [
            json!({"exit_code": 0}),
            json!({"exit_code": -1}),
            json!({"equals": "ok"}),
            json!({"contains": "passed"}),
            json!({"regex": "^\\d+ passed$"}),
            json!({"output_lt": 0.5}),
            json!({"output_gt": 10}),
            json!({"file_exists": "out/report.md"}),
            json!({"not_empty": true}),
            // non-None counts as set, so false is a predicate too
            json!({"not_empty": false}),
            // explicit nulls are unset
            json!({"exit_code": 0, "equals": null, "not_empty": null}),
        ];
        for j in valid {
            let e: Expectation = serde_json::from_value(j.clone()).unwrap();
            assert_eq!(e.set_fields().len(), 1, "{j}");
            let v = round_trip(&e);
            assert_eq!(v.as_object().unwrap().len(), 8, "all 8 fields serialise");
        }

        assert_refused::<Expectation>(json!({}), &ModelError::ExpectationNoPredicate);
        assert_refused::<Expectation>(
            json!({"exit_code": null, "not_empty": null}),
            &ModelError::ExpectationNoPredicate,
        );
        assert_refused::<Expectation>(
            json!({"exit_code": 0, "contains": "x"}),
            &ModelError::ExpectationMultiplePredicates {
                fields: vec!["exit_code", "contains"],
            },
        );
        assert_refused::<Expectation>(
            json!({"contains": "x", "not_empty": false}),
            &ModelError::ExpectationMultiplePredicates {
                fields: vec!["contains", "not_empty"],
            },
        );
        assert_eq!(
            Expectation::default().validate(),
            Err(ModelError::ExpectationNoPredicate)
        );
    }

    #[test]
    fn expectation_refuses_parent_traversal() {
        for p in ["../etc/shadow", "work/../../x", ".."] {
            assert_refused::<Expectation>(
                json!({"file_exists": p}),
                &ModelError::ExpectationPathTraversal { path: p.into() },
            );
        }
        assert_eq!(
            Expectation::file_exists("./work/out.txt").validate(),
            Ok(())
        );
    }

    #[test]
    fn verification_check_defaults_and_nested_validation() {
        let c: VerificationCheck = serde_json::from_value(
            json!({"name": "tests", "run": "pytest -q", "expect": {"exit_code": 0}}),
        )
        .unwrap();
        assert_eq!(
            c,
            VerificationCheck::new("tests", "pytest -q", Expectation::exit_code(0))
        );
        assert_eq!((c.timeout, c.network), (60, false));
        round_trip(&c);
        assert_refused::<VerificationCheck>(
            json!({"name": "t", "run": "true", "expect": {}}),
            &ModelError::ExpectationNoPredicate,
        );
    }

    #[test]
    fn escalation_action_defaults() {
        let e: EscalationAction = serde_json::from_value(json!({"action": "retry"})).unwrap();
        assert_eq!(e, EscalationAction::new(EscalationKind::Retry));
        assert_eq!(e.max_retries, 2);
        let v = round_trip(&e);
        assert!(v["fallback"].is_null() && v["queue"].is_null());
        assert!(serde_json::from_value::<EscalationAction>(json!({"action": "explode"})).is_err());
    }

    fn parse(j: Value) -> Result<WorkItem, serde_json::Error> {
        serde_json::from_value(j)
    }

    #[test]
    fn work_item_minimal_defaults() {
        let before = Timestamp::now();
        let w = parse(json!({"id": "w1", "type": "task", "title": "T"})).unwrap();
        assert_eq!(w.agent, AgentLane::Ephemeral);
        assert_eq!(w.budget, Budget::default());
        assert!(w.needs_approval);
        assert_eq!(w.interaction_mode, InteractionMode::ConfirmOnlyWhenRequired);
        assert_eq!(w.on_failure, "report");
        assert_eq!(w.on_stuck, "consult_planner");
        assert_eq!(w.status, WorkItemStatus::Pending);
        assert_eq!(w.attempts, 0);
        assert!(w.created_at >= before);
        let v = round_trip(&w);
        assert_eq!(v["type"], "task");
        assert!(v.get("kind").is_none());
        assert!(v["approval_token"].is_null() && v["schedule"].is_null());
    }

    #[test]
    fn work_item_serialises_fields_in_spec_order() {
        let v = serde_json::to_string(&WorkItem::new("w", WorkItemType::Task, "t")).unwrap();
        let order = [
            "id",
            "type",
            "title",
            "parent",
            "spawned_by",
            "follow_up_of",
            "domain",
            "agent",
            "budget",
            "needs_approval",
            "approval_token",
            "body",
            "interaction_mode",
            "input_artifacts_from",
            "verify",
            "gates",
            "skills",
            "access_levels",
            "escalation",
            "schedule",
            "on_failure",
            "on_stuck",
            "failure_context",
            "tasks",
            "depends_on",
            "status",
            "attempts",
            "budget_used",
            "verification_results",
            "created_at",
            // Silas additions after the spec's fields: the creating scope,
            // the workspace the plan names (issue #15).
            "scope_id",
            "workspace",
            "skill_hashes",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|k| v.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{v}");
        let obj: Value = serde_json::from_str(&v).unwrap();
        assert_eq!(obj.as_object().unwrap().len(), order.len());
    }

    #[test]
    fn work_item_agent_defaulting() {
        let cases = [
            (json!({"type": "task"}), AgentLane::Ephemeral),
            (json!({"type": "project"}), AgentLane::Ephemeral),
            (json!({"type": "goal"}), AgentLane::Ephemeral),
            (
                json!({"type": "goal", "schedule": "*/30 * * * *"}),
                AgentLane::Ephemeral,
            ),
            (
                json!({"type": "goal", "schedule": "always_on"}),
                AgentLane::Stream,
            ),
            (
                json!({"type": "goal", "schedule": "always_on", "agent": null}),
                AgentLane::Stream,
            ),
            // explicit override wins for goals
            (
                json!({"type": "goal", "schedule": "always_on", "agent": "ephemeral"}),
                AgentLane::Ephemeral,
            ),
            (
                json!({"type": "goal", "agent": "stream"}),
                AgentLane::Stream,
            ),
            (
                json!({"type": "task", "agent": "ephemeral"}),
                AgentLane::Ephemeral,
            ),
        ];
        for (mut j, lane) in cases {
            j["id"] = json!("w");
            j["title"] = json!("t");
            assert_eq!(parse(j.clone()).unwrap().agent, lane, "{j}");
        }
    }

    #[test]
    fn work_item_task_or_project_on_stream_is_refused() {
        for kind in ["task", "project"] {
            assert_refused::<WorkItem>(
                json!({"id": "w", "type": kind, "title": "t", "agent": "stream"}),
                &ModelError::WorkItemAgentMustBeEphemeral {
                    id: "w".into(),
                    kind,
                },
            );
        }
        let mut w = WorkItem::new("w", WorkItemType::Task, "t");
        assert_eq!(w.validate(), Ok(()));
        w.agent = AgentLane::Stream;
        assert_eq!(
            w.validate(),
            Err(ModelError::WorkItemAgentMustBeEphemeral {
                id: "w".into(),
                kind: "task"
            })
        );
        w.kind = WorkItemType::Goal;
        assert_eq!(w.validate(), Ok(()));
    }

    #[test]
    fn work_item_validate_checks_nested_models() {
        let mut w = WorkItem::new("w", WorkItemType::Task, "t");
        w.verify
            .push(VerificationCheck::new("c", "true", Expectation::default()));
        assert_eq!(w.validate(), Err(ModelError::ExpectationNoPredicate));
        let mut j = serde_json::to_value(WorkItem::new("w", WorkItemType::Task, "t")).unwrap();
        j["gates"] = json!([{"name": "g", "on": "on_tool_call", "type": "custom_check",
                              "check_expect": {"exit_code": 0, "equals": "x"}}]);
        assert_refused::<WorkItem>(
            j,
            &ModelError::ExpectationMultiplePredicates {
                fields: vec!["exit_code", "equals"],
            },
        );
    }

    #[test]
    fn work_item_with_approval_token_round_trips_losslessly() {
        let token = ApprovalToken {
            token_id: "tok".into(),
            plan_hash: "0f".repeat(32),
            work_item_id: "goal-1".into(),
            scope: ApprovalScope::Standing,
            verdict: ApprovalVerdict::Approved,
            signature: Base64Bytes(vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]),
            issued_at: Timestamp::parse("2026-01-15T10:00:00.25Z").unwrap(),
            expires_at: Timestamp::parse("2026-02-15T10:00:00Z").unwrap(),
            nonce: "tn".into(),
            approval_strength: ApprovalStrength::Tap,
            conditions: json!({"spawn_policy_hash": "ab".repeat(32)})
                .as_object()
                .unwrap()
                .clone(),
            executions_used: 3,
            max_executions: 10,
            execution_nonces: vec!["e1".into(), "e2".into(), "e3".into()],
        };
        let mut w = WorkItem::new("goal-1", WorkItemType::Goal, "Keep CI green");
        w.schedule = Some("*/30 * * * *".into());
        w.parent = Some("p".into());
        w.domain = Some("business:acme".into());
        w.body = "Fix whatever broke: $failed_checks".into();
        w.input_artifacts_from = vec!["*".into()];
        w.verify.push(VerificationCheck::new(
            "ci",
            "make test",
            Expectation::exit_code(0),
        ));
        let mut gate = Gate::new("pii", GateTrigger::EveryAgentResponse);
        gate.provider = GateProvider::Llm;
        gate.kind = GateType::CustomCheck;
        w.gates.push(gate);
        w.skills = vec!["github".into()];
        w.access_levels.insert(
            "verified".into(),
            AccessLevel {
                description: "after OTP".into(),
                tools: vec!["lookup_order".into()],
                requires: vec!["otp".into()],
                expires_after: Some(3600),
            },
        );
        w.escalation.insert(
            "report".into(),
            EscalationAction::new(EscalationKind::Report),
        );
        w.failure_context = Some("Failed: $failed_checks".into());
        w.approval_token = Some(token);
        w.status = WorkItemStatus::Healthy;
        w.attempts = 4;
        w.budget_used.executor_runs = 7;
        w.budget_used.cost_usd = 0.1 + 0.2; // a float that needs all 17 digits
        w.verification_results.push(
            json!({"check": "ci", "passed": true, "at": "2026-01-15T10:00:00Z"})
                .as_object()
                .unwrap()
                .clone(),
        );

        let v = round_trip(&w);
        let t = &v["approval_token"];
        assert_eq!(t["executions_used"], 3);
        assert_eq!(t["execution_nonces"], json!(["e1", "e2", "e3"]));
        assert_eq!(t["signature"], "3q2+7wD/");
        assert_eq!(t["issued_at"], "2026-01-15T10:00:00.250000Z");
        let back: WorkItem = serde_json::from_value(v).unwrap();
        assert_eq!(
            back.approval_token.unwrap().signature.as_slice(),
            &[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]
        );
    }

    #[test]
    fn work_item_refuses_naive_created_at() {
        let r = parse(json!({"id": "w", "type": "task", "title": "t",
                             "created_at": "2026-01-15T10:00:00"}));
        assert!(r.is_err());
        let ok = parse(json!({"id": "w", "type": "task", "title": "t",
                              "created_at": "2026-01-15T10:00:00+02:00"}))
        .unwrap();
        assert_eq!(ok.created_at.to_string(), "2026-01-15T08:00:00Z");
    }

    #[test]
    fn work_item_result_round_trips() {
        let r: WorkItemResult = serde_json::from_value(
            json!({"work_item_id": "w", "status": "failed", "summary": "tests failed"}),
        )
        .unwrap();
        assert_eq!(r.budget_used, BudgetUsed::default());
        let mut r = r;
        r.last_error = Some("exit 1".into());
        r.artifacts.insert("report".into(), "out/report.md".into());
        r.next_steps.push("retry with verbose logs".into());
        r.verification_results.push(JsonObject::new());
        let v = round_trip(&r);
        assert_eq!(v["status"], "failed");
    }
}
