//! The pure half of the WorkExecutor (§5.2): budget and attempt decisions,
//! briefing sections, topological order, `$failed_checks` substitution,
//! fix-task construction, tool-argument schema checks and batch selection.
//! No I/O, no clock: everything here is a plain function over data.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use silas_core::model::review::{BatchActionItem, BatchProposal};
use silas_core::model::work::{Budget, BudgetUsed, WorkItem, WorkItemStatus, WorkItemType};
use silas_execution::verification::VerificationReport;

/// Attempt number from which a failed verification consults the planner (§5.2.1 e).
pub const PLANNER_AFTER_ATTEMPTS: u64 = 3;
/// `on_stuck` value that enables planner consultation.
pub const CONSULT_PLANNER: &str = "consult_planner";
/// `on_failure` value that makes a goal spawn a fix task (§5.2.3).
pub const SPAWN_TASK: &str = "spawn_task";
/// Placeholder in a goal's `failure_context` template.
pub const FAILED_CHECKS: &str = "$failed_checks";

/// Whether the consumable resources (tokens, cost, wall time) are spent.
/// Inclusive (`>=`): reaching a limit counts as exhausted (§5.2.1 step 1).
///
/// Attempts and planner calls are *not* part of this check: attempts bound
/// the retry loop ([`next_attempt`]) and planner calls bound consultation
/// ([`should_consult_planner`]); running out of planner calls stops asking the
/// planner, it does not end the task.
pub fn resources_exhausted(used: &BudgetUsed, budget: &Budget) -> bool {
    used.tokens >= budget.max_tokens
        || used.cost_usd >= budget.max_cost_usd
        // u64 → f64 is exact for any realistic wall-time limit (< 2^53 s).
        || used.wall_time_seconds >= budget.max_wall_time_seconds as f64
}

/// The budget handed to the executor's tool loop: the item's resource
/// limits, with attempts and planner calls unbounded (the loop is one
/// attempt; those counters are this module's business).
pub fn loop_budget(budget: &Budget) -> Budget {
    Budget {
        max_attempts: u64::MAX,
        max_planner_calls: u64::MAX,
        ..budget.clone()
    }
}

/// Why the retry loop stops before another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `attempts >= max_attempts`.
    AttemptsExhausted,
    /// Tokens, cost or wall time at or past its limit.
    BudgetExhausted,
}

impl StopReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::AttemptsExhausted => "max attempts reached",
            StopReason::BudgetExhausted => "budget exhausted",
        }
    }
}

/// May another attempt start? (`while attempts < max_attempts and budget
/// not exhausted`, §5.2.1 step 2.)
pub fn next_attempt(attempts: u64, used: &BudgetUsed, budget: &Budget) -> Result<(), StopReason> {
    if resources_exhausted(used, budget) {
        return Err(StopReason::BudgetExhausted);
    }
    if attempts >= budget.max_attempts {
        return Err(StopReason::AttemptsExhausted);
    }
    Ok(())
}

/// §5.2.1 e: after a failed verification, ask the planner when this was the
/// third attempt or later, the item says `consult_planner`, and the planner
/// allowance and resources are not spent.
pub fn should_consult_planner(item: &WorkItem) -> bool {
    item.attempts >= PLANNER_AFTER_ATTEMPTS
        && item.on_stuck == CONSULT_PLANNER
        && item.budget_used.planner_calls < item.budget.max_planner_calls
        && !resources_exhausted(&item.budget_used, &item.budget)
}

/// The prose briefing for one attempt (§5.2.1 b): the body, then the
/// previous failure under `Previous attempt N failed`, then the planner's
/// guidance under `Planner guidance`.
pub fn build_briefing(
    body: &str,
    artifacts: &[String],
    previous_failure: Option<(u64, &str)>,
    planner_guidance: Option<&str>,
) -> String {
    let mut s = body.trim_end().to_owned();
    if !artifacts.is_empty() {
        s.push_str("\n\n## Input artifacts\n");
        s.push_str("These files are staged in the work directory of every tool run: ");
        s.push_str(&artifacts.join(", "));
    }
    if let Some((n, failure)) = previous_failure {
        s.push_str(&format!(
            "\n\n## Previous attempt {n} failed\n{}",
            failure.trim_end()
        ));
    }
    if let Some(g) = planner_guidance {
        s.push_str(&format!("\n\n## Planner guidance\n{}", g.trim_end()));
    }
    s
}

/// The failure details of a verification report, one line per failed check.
pub fn format_failures(report: &VerificationReport) -> String {
    report
        .results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| {
            let mut line = format!("- {}: {}", r.name, r.reason);
            let out = r.output.trim();
            if !out.is_empty() {
                line.push_str(&format!(" (output: {out})"));
            }
            let errors = r.errors.trim();
            if !errors.is_empty() {
                line.push_str(&format!(" (errors: {errors})"));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Verification results as persisted on the work item (`verification_results`).
pub fn results_as_json(report: &VerificationReport) -> Vec<silas_core::model::JsonObject> {
    report
        .results
        .iter()
        .filter_map(|r| match serde_json::to_value(r) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        .collect()
}

/// A verification audit payload plus, when a network check's egress proxy
/// refused anything, `egress_refused`: one entry per refusal (check name,
/// requested host:port, status, reason, code). Absent otherwise, so
/// offline checks audit exactly as before.
pub fn with_egress_refusals(mut data: Value, report: &VerificationReport) -> Value {
    let refused: Vec<Value> = report
        .results
        .iter()
        .flat_map(|r| {
            r.egress_refusals.iter().map(move |e| {
                serde_json::json!({"check": r.name, "target": e.target, "status": e.status,
                                   "reason": e.reason, "code": e.code})
            })
        })
        .collect();
    if let (false, Value::Object(o)) = (refused.is_empty(), &mut data) {
        o.insert("egress_refused".into(), Value::Array(refused));
    }
    data
}

/// Why a project's task order cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("dependency cycle among tasks: {0:?}")]
    Cycle(Vec<String>),
}

/// What the owner is told about calls refused before the sandbox (a gate,
/// the argument schema, an unavailable tool, a declined approval): each tool
/// once, with its count, in first-refused order. `None` when none was.
pub fn refused_calls_note(refused: &[String]) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in refused {
        match counts.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    if counts.is_empty() {
        return None;
    }
    let names: Vec<String> = counts
        .iter()
        .map(|(n, c)| {
            if *c > 1 {
                format!("{n} ×{c}")
            } else {
                (*n).to_owned()
            }
        })
        .collect();
    let (what, verb) = match refused.len() {
        1 => ("1 tool call was".to_owned(), "it"),
        n => (format!("{n} tool calls were"), "they"),
    };
    Some(format!(
        "{what} refused before the sandbox and {verb} did not run: {}.",
        names.join(", ")
    ))
}

/// A tool name as the owner is shown it: the model wrote it, so only a
/// plain name of at most 64 characters (`[A-Za-z0-9_.-]`) is shown as is.
pub fn shown_tool_name(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        name.to_owned()
    } else {
        "(an unknown tool)".to_owned()
    }
}

/// A task without checks whose every tool call was refused did nothing the
/// owner asked for: only the executor's word says otherwise, and that is not
/// `done` (with checks, they decide).
pub fn nothing_ran(executed: usize, refused: usize, has_checks: bool) -> bool {
    !has_checks && executed == 0 && refused > 0
}

/// Topological order of `listed` (id → `depends_on`), §5.2.2 step 1. Ties
/// are broken by the project's listed order, so the order is deterministic.
/// Dependencies outside the project do not constrain the order; the project
/// loop requires them to be `done` before the dependent task starts.
pub fn topological_order(
    listed: &[String],
    depends_on: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, OrderError> {
    let known: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut order = Vec::with_capacity(listed.len());
    while order.len() < listed.len() {
        let next = listed.iter().find(|t| {
            !done.contains(t.as_str())
                && depends_on
                    .get(*t)
                    .into_iter()
                    .flatten()
                    .all(|d| done.contains(d.as_str()) || !known.contains(d.as_str()))
        });
        match next {
            Some(t) => {
                done.insert(t.as_str());
                order.push(t.clone());
            }
            None => {
                let rest = listed
                    .iter()
                    .filter(|t| !done.contains(t.as_str()))
                    .cloned()
                    .collect();
                return Err(OrderError::Cycle(rest));
            }
        }
    }
    Ok(order)
}

/// The first dependency of a task that is not `done` (§5.2.2 step 3).
pub fn unmet_dependency(
    deps: &[String],
    status_of: impl Fn(&str) -> Option<WorkItemStatus>,
) -> Option<&String> {
    deps.iter()
        .find(|d| status_of(d) != Some(WorkItemStatus::Done))
}

/// `$failed_checks` substitution in a goal's `failure_context` template.
pub fn substitute_failed_checks(template: &str, failures: &str) -> String {
    template.replace(FAILED_CHECKS, failures)
}

/// The fix task a failing goal spawns (§5.2.3 step 4), built from the goal's
/// spawn template so its spawn-policy projection (failure-context template,
/// skills, gates, verify, escalations) equals the goal's and the standing
/// token's `spawn_policy_hash` binds it. Runtime state starts fresh; the
/// token is attached only after verification.
pub fn build_fix_task(goal: &WorkItem, id: &str, failures: &str) -> WorkItem {
    let mut t = goal.clone();
    t.id = id.to_owned();
    t.kind = WorkItemType::Task;
    t.agent = silas_core::model::work::AgentLane::Ephemeral;
    t.parent = Some(goal.id.clone());
    t.spawned_by = Some(goal.id.clone());
    t.schedule = None;
    // Without a template the card promises a briefing "with the failed
    // checks": an empty one left the executor nothing to work from.
    t.body = match goal.failure_context.as_deref().map(str::trim) {
        Some(template) if !template.is_empty() => substitute_failed_checks(template, failures),
        _ => format!(
            "Make the failing checks of goal \"{}\" pass.\n\nThe goal: {}\n\nFailed checks: {failures}",
            goal.title,
            goal.body.trim()
        ),
    };
    t.approval_token = None;
    t.needs_approval = true;
    t.tasks = Vec::new();
    t.depends_on = Vec::new();
    t.status = WorkItemStatus::Pending;
    t.attempts = 0;
    t.budget_used = BudgetUsed::default();
    t.verification_results = Vec::new();
    t
}

/// What a goal's fix tasks have spent under its current approval: the
/// budget on the goal's card is the total its fix tasks may spend, not a
/// fresh allowance for each cycle's task (a failing check every minute
/// made a "$1" card cost $1 a minute). A new approval starts afresh.
pub fn goal_fix_spend(goal: &WorkItem, children: &[WorkItem]) -> BudgetUsed {
    let token = goal.approval_token.as_ref().map(|t| &t.token_id);
    let mut spent = BudgetUsed::default();
    for c in children {
        let same_approval = token.is_some()
            && c.approval_token.as_ref().map(|t| &t.token_id) == token
            && c.spawned_by.as_deref() == Some(goal.id.as_str());
        if same_approval {
            spent.merge(&c.budget_used);
        }
    }
    spent
}

/// The budget the next fix task gets: the goal's, less what its fix tasks
/// have spent (tokens and cost; time and attempts stay per task). `None`
/// when either is used up.
pub fn remaining_fix_budget(goal: &WorkItem, spent: &BudgetUsed) -> Option<Budget> {
    let b = &goal.budget;
    let tokens = b.max_tokens.saturating_sub(spent.tokens);
    let cost = b.max_cost_usd - spent.cost_usd;
    if tokens == 0 || cost <= 0.0 {
        return None;
    }
    Some(Budget {
        max_tokens: tokens,
        max_cost_usd: cost,
        ..b.clone()
    })
}

/// Why an edit-selection is refused (§5.2.4 step 5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("selection is empty")]
    Empty,
    #[error("selection must be a strict subset of the batch")]
    NotStrictSubset,
    #[error("item {0:?} is not in the batch")]
    UnknownItem(String),
    #[error("item {0:?} selected twice")]
    Duplicate(String),
}

/// The edited batch: exactly `selected` (a strict subset, no duplicates), in
/// the selected order, under a fresh batch id — its hash differs from the
/// proposed batch, so it needs a fresh approval.
pub fn apply_edit_selection(
    proposal: &BatchProposal,
    selected: &[String],
    new_batch_id: &str,
) -> Result<BatchProposal, SelectionError> {
    if selected.is_empty() {
        return Err(SelectionError::Empty);
    }
    let by_id: BTreeMap<&str, &BatchActionItem> = proposal
        .items
        .iter()
        .map(|i| (i.item_id.as_str(), i))
        .collect();
    let mut seen = BTreeSet::new();
    let mut items = Vec::with_capacity(selected.len());
    for id in selected {
        if !seen.insert(id.as_str()) {
            return Err(SelectionError::Duplicate(id.clone()));
        }
        match by_id.get(id.as_str()) {
            Some(i) => items.push((*i).clone()),
            None => return Err(SelectionError::UnknownItem(id.clone())),
        }
    }
    if items.len() >= proposal.items.len() {
        return Err(SelectionError::NotStrictSubset);
    }
    let mut out = proposal.clone();
    out.batch_id = new_batch_id.to_owned();
    out.items = items;
    Ok(out)
}

/// Splits candidate actions into proposals of `size` (§5.2.4 step 2).
pub fn chunk_candidates(items: &[BatchActionItem], size: usize) -> Vec<Vec<BatchActionItem>> {
    items.chunks(size.max(1)).map(<[_]>::to_vec).collect()
}

/// A minimal JSON-Schema check of tool arguments against the declared
/// parameters (`script_args` / the tool spec): `type: object`, `required`,
/// property `type`s and `additionalProperties: false`. Deterministic message
/// on failure; runs before anything reaches the sandbox.
pub fn validate_args(schema: &Value, args: &Value) -> Result<(), String> {
    let Some(obj) = args.as_object() else {
        return Err("arguments must be a JSON object".into());
    };
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                return Err(format!("missing required argument `{r}`"));
            }
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            Some(p) => {
                if let Some(t) = p.get("type").and_then(Value::as_str)
                    && !type_matches(t, v)
                {
                    return Err(format!("argument `{k}` must be of type {t}"));
                }
            }
            None if closed => return Err(format!("unexpected argument `{k}`")),
            None => {}
        }
    }
    Ok(())
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// Keys to import from a prior item's artifacts (`["*"]` = all).
pub fn wanted_artifacts(
    requested: &[String],
    available: &BTreeSet<String>,
) -> Result<Vec<String>, String> {
    if requested.iter().any(|r| r == "*") {
        return Ok(available.iter().cloned().collect());
    }
    let missing: Vec<&String> = requested
        .iter()
        .filter(|r| !available.contains(*r))
        .collect();
    if missing.is_empty() {
        Ok(requested.to_vec())
    } else {
        Err(format!("required artifacts missing: {missing:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(id: &str) -> serde_json::Value {
        json!({"token_id": id, "plan_hash": "h", "work_item_id": "g1", "scope": "standing",
               "verdict": "approved", "signature": "", "issued_at": "2026-01-01T00:00:00Z",
               "expires_at": "2027-01-01T00:00:00Z", "nonce": "n",
               "conditions": {"spawn_policy_hash": "p"},
               "executions_used": 1, "max_executions": 100, "execution_nonces": []})
    }

    #[test]
    fn refused_calls_are_named_once_with_their_count() {
        let v = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(refused_calls_note(&[]), None);
        assert_eq!(
            refused_calls_note(&v(&["shell_exec"])).as_deref(),
            Some("1 tool call was refused before the sandbox and it did not run: shell_exec.")
        );
        assert_eq!(
            refused_calls_note(&v(&["web_fetch", "shell_exec", "web_fetch"])).as_deref(),
            Some(
                "3 tool calls were refused before the sandbox and they did not run: \
                 web_fetch ×2, shell_exec."
            )
        );
    }

    #[test]
    fn a_tool_name_the_model_wrote_is_shown_only_when_plain() {
        assert_eq!(shown_tool_name("web_fetch"), "web_fetch");
        assert_eq!(shown_tool_name("files.read-v2"), "files.read-v2");
        for odd in ["", "a b", "x\u{202e}y", "run; rm -rf /", &"n".repeat(65)] {
            assert_eq!(shown_tool_name(odd), "(an unknown tool)", "{odd:?}");
        }
    }

    #[test]
    fn nothing_ran_only_without_checks_and_without_any_executed_call() {
        let cases = [
            // (executed, refused, has_checks) → nothing ran
            ((0, 1, false), true),
            ((0, 3, false), true),
            ((1, 1, false), false),
            ((0, 0, false), false), // no tool call at all: a text-only task
            ((0, 1, true), false),  // the checks decide
        ];
        for ((e, r, c), want) in cases {
            assert_eq!(nothing_ran(e, r, c), want, "{e} {r} {c}");
        }
    }

    /// The goal's card budget is what all its fix tasks under one approval
    /// may spend together; each next task gets what is left.
    #[test]
    fn fix_tasks_share_the_goals_budget() {
        let goal: WorkItem = serde_json::from_value(json!({
            "id": "g1", "type": "goal", "title": "t", "body": "b", "schedule": "* * * * *",
            "on_failure": "spawn_task",
            "budget": {"max_tokens": 100000, "max_cost_usd": 1.0},
            "approval_token": token("tok-now"),
        }))
        .unwrap();
        let fix = |id: &str, tok: &str, cost: f64| -> WorkItem {
            let mut t = build_fix_task(&goal, id, "- c: failed");
            t.approval_token = serde_json::from_value(token(tok)).unwrap();
            t.budget_used.cost_usd = cost;
            t.budget_used.tokens = 30_000;
            t
        };
        let children = vec![
            fix("g1-fix-1", "tok-now", 0.4),
            fix("g1-fix-2", "tok-now", 0.35),
            // Spent under an earlier approval: not this one's.
            fix("g1-fix-0", "tok-old", 5.0),
        ];
        let spent = goal_fix_spend(&goal, &children);
        assert_eq!(spent.tokens, 60_000);
        assert!((spent.cost_usd - 0.75).abs() < 1e-9);
        let next = remaining_fix_budget(&goal, &spent).unwrap();
        assert_eq!(next.max_tokens, 40_000);
        assert!((next.max_cost_usd - 0.25).abs() < 1e-9);
        assert_eq!(next.max_attempts, goal.budget.max_attempts);
        let mut all = children.clone();
        all.push(fix("g1-fix-3", "tok-now", 0.25));
        assert_eq!(
            remaining_fix_budget(&goal, &goal_fix_spend(&goal, &all)),
            None
        );
    }

    /// A goal's fix task works on the goal's workspace, with the same
    /// access (and it needs its own approval, which shows it).
    #[test]
    fn a_fix_task_keeps_its_goals_workspace() {
        let goal: WorkItem = serde_json::from_value(json!({
            "id": "g1", "type": "goal", "title": "Keep CI green", "body": "watch",
            "schedule": "@every 1h", "failure_context": "Fix: $failed_checks",
            "workspace": {"name": "site", "access": "write", "extra_paths": ["/opt/venv"]},
        }))
        .unwrap();
        let task = build_fix_task(&goal, "g1-fix-1", "- ci: red");
        assert_eq!(task.workspace, goal.workspace);
        assert!(task.needs_approval && task.approval_token.is_none());
    }

    /// A goal without a `failure_context` template: its card says the fix
    /// task is "briefed with the failed checks", and it is (it was briefed
    /// with nothing).
    #[test]
    fn a_fix_task_without_a_template_is_briefed_with_the_failed_checks() {
        let mut goal: WorkItem = serde_json::from_value(json!({
            "id": "g1", "type": "goal", "title": "Keep CI green", "body": "Watch the build.",
            "schedule": "@every 1h",
        }))
        .unwrap();
        let task = build_fix_task(&goal, "g1-fix-1", "- ci: red");
        assert!(task.body.contains("Keep CI green"), "{}", task.body);
        assert!(task.body.contains("Watch the build."), "{}", task.body);
        assert!(
            task.body.ends_with("Failed checks: - ci: red"),
            "{}",
            task.body
        );
        goal.failure_context = Some("  ".into());
        assert!(
            build_fix_task(&goal, "g1-fix-1", "- ci: red")
                .body
                .contains("- ci: red")
        );
        goal.failure_context = Some("Fix: $failed_checks".into());
        assert_eq!(
            build_fix_task(&goal, "g1-fix-1", "- ci: red").body,
            "Fix: - ci: red"
        );
    }

    /// The next attempt's briefing (and a goal's fix task) quotes what a
    /// failed check said on stdout and on stderr.
    #[test]
    fn failures_quote_the_checks_own_words() {
        use silas_execution::verification::VerificationResult;
        let r = |name: &str, passed: bool, output: &str, errors: &str| VerificationResult {
            name: name.into(),
            passed,
            reason: "exit code 1, expected 0".into(),
            output: output.into(),
            errors: errors.into(),
            exit_code: Some(1),
            egress_refusals: Vec::new(),
        };
        let report = VerificationReport {
            all_passed: false,
            results: vec![
                r(
                    "unit",
                    false,
                    "",
                    "AssertionError: sum is off\nFAILED (failures=1)",
                ),
                r("lint", false, "x.py:1: E501", ""),
                r("ok", true, "fine", ""),
            ],
            failed: vec!["unit".into(), "lint".into()],
            timestamp: silas_core::Timestamp::now(),
        };
        assert_eq!(
            format_failures(&report),
            "- unit: exit code 1, expected 0 (errors: AssertionError: sum is off\nFAILED (failures=1))\n\
             - lint: exit code 1, expected 0 (output: x.py:1: E501)"
        );
    }

    #[test]
    fn egress_refusals_join_the_verification_audit_only_when_present() {
        use silas_execution::verification::VerificationResult;
        use silas_netguard::EgressRefusal;
        let result = |name: &str, refusals: Vec<EgressRefusal>| VerificationResult {
            name: name.into(),
            passed: true,
            reason: String::new(),
            output: String::new(),
            errors: String::new(),
            exit_code: Some(0),
            egress_refusals: refusals,
        };
        let mut report = VerificationReport {
            all_passed: true,
            results: vec![result("offline", Vec::new())],
            failed: Vec::new(),
            timestamp: silas_core::Timestamp::now(),
        };
        let base = json!({"work_item_id": "w1"});
        assert_eq!(with_egress_refusals(base.clone(), &report), base);
        report.results.push(result(
            "fetch",
            vec![EgressRefusal {
                target: "169.254.169.254:80".into(),
                status: 403,
                reason: "metadata".into(),
                code: silas_core::ErrorCode::EGateBlocked,
            }],
        ));
        let data = with_egress_refusals(base, &report);
        assert_eq!(
            data["egress_refused"],
            json!([{"check": "fetch", "target": "169.254.169.254:80", "status": 403,
                    "reason": "metadata", "code": "E_GATE_BLOCKED"}])
        );
        assert_eq!(data["work_item_id"], "w1");
    }

    fn budget() -> Budget {
        Budget {
            max_tokens: 100,
            max_cost_usd: 1.0,
            max_wall_time_seconds: 60,
            max_attempts: 3,
            max_planner_calls: 1,
        }
    }

    #[test]
    fn budget_is_inclusive_and_attempts_bound_the_loop() {
        let b = budget();
        let mut u = BudgetUsed::default();
        assert_eq!(next_attempt(0, &u, &b), Ok(()));
        u.tokens = 99;
        assert_eq!(next_attempt(2, &u, &b), Ok(()));
        u.tokens = 100;
        assert_eq!(next_attempt(0, &u, &b), Err(StopReason::BudgetExhausted));
        u.tokens = 0;
        assert_eq!(next_attempt(3, &u, &b), Err(StopReason::AttemptsExhausted));
        u.planner_calls = 5; // planner allowance does not end the task
        assert_eq!(next_attempt(1, &u, &b), Ok(()));
        assert_eq!(loop_budget(&b).max_attempts, u64::MAX);
    }

    #[test]
    fn planner_is_consulted_from_the_third_attempt_within_allowance() {
        let mut t = WorkItem::new("t", WorkItemType::Task, "t");
        t.budget = budget();
        t.budget.max_attempts = 5;
        t.attempts = 2;
        assert!(!should_consult_planner(&t));
        t.attempts = 3;
        assert!(should_consult_planner(&t));
        t.budget_used.planner_calls = 1;
        assert!(!should_consult_planner(&t));
        t.budget_used.planner_calls = 0;
        t.on_stuck = "report".into();
        assert!(!should_consult_planner(&t));
    }

    #[test]
    fn briefing_sections() {
        let b = build_briefing("Do it.", &[], Some((2, "- tests: exit 1")), Some("Try X"));
        assert_eq!(
            b,
            "Do it.\n\n## Previous attempt 2 failed\n- tests: exit 1\n\n## Planner guidance\nTry X"
        );
        assert_eq!(build_briefing("Do it.\n", &[], None, None), "Do it.");
    }

    #[test]
    fn topological_order_table() {
        let l = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let deps: BTreeMap<String, Vec<String>> = [
            ("c".to_owned(), l(&["a", "b"])),
            ("b".to_owned(), l(&["a"])),
        ]
        .into();
        assert_eq!(
            topological_order(&l(&["c", "b", "a"]), &deps),
            Ok(l(&["a", "b", "c"]))
        );
        let cyc: BTreeMap<String, Vec<String>> =
            [("a".to_owned(), l(&["b"])), ("b".to_owned(), l(&["a"]))].into();
        assert!(matches!(
            topological_order(&l(&["a", "b"]), &cyc),
            Err(OrderError::Cycle(_))
        ));
        // External dependencies do not constrain the order.
        let external: BTreeMap<String, Vec<String>> = [("a".to_owned(), l(&["z"]))].into();
        assert_eq!(topological_order(&l(&["a"]), &external), Ok(l(&["a"])));
    }

    #[test]
    fn args_schema_table() {
        let s = json!({"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"], "additionalProperties": false});
        assert!(validate_args(&s, &json!({"command": "ls"})).is_ok());
        assert!(validate_args(&s, &json!({})).is_err());
        assert!(validate_args(&s, &json!({"command": 3})).is_err());
        assert!(validate_args(&s, &json!({"command": "ls", "x": 1})).is_err());
        assert!(validate_args(&s, &json!("ls")).is_err());
    }

    #[test]
    fn wanted_artifacts_table() {
        let avail: BTreeSet<String> = ["a.txt".to_owned(), "b.txt".to_owned()].into();
        assert_eq!(wanted_artifacts(&["*".into()], &avail).unwrap().len(), 2);
        assert!(wanted_artifacts(&["c.txt".into()], &avail).is_err());
    }
}

/// What a batch verdict leads to (§5.2.4 steps 4–6).
#[derive(Clone, Debug, PartialEq)]
pub enum BatchStep {
    /// `approve`: execute this exact payload under its batch-bound token.
    Execute(BatchProposal),
    /// `edit_selection`: this rebuilt payload needs a fresh approval; the
    /// original token does not bind it.
    Reapprove(BatchProposal),
    /// `decline`: skip the batch.
    Skip,
}

/// The step for a reviewed batch's decision.
pub fn batch_step(
    proposal: &BatchProposal,
    decision: &silas_core::model::review::BatchActionDecision,
    new_batch_id: &str,
) -> Result<BatchStep, SelectionError> {
    use silas_core::model::review::BatchActionVerdict as V;
    Ok(match decision.verdict {
        V::Approve => BatchStep::Execute(proposal.clone()),
        V::Decline => BatchStep::Skip,
        V::EditSelection => BatchStep::Reapprove(apply_edit_selection(
            proposal,
            &decision.selected_item_ids,
            new_batch_id,
        )?),
    })
}
