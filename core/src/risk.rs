//! The risk ladder (§0.5.2) decided by the server, and the plan view an
//! approval card shows (issue #12: the owner approves what will run).
//!
//! Risk is "determined by the approval scope and action type, not by the
//! agent": [`plan_risk`] reads only fields the plan hash covers — the same
//! bytes the owner's token binds — never prose the model wrote. Every
//! channel renders the level it returns; no client decides it.
//!
//! [`PlanView`] is everything the plan hash covers that changes what runs
//! (kind, schedule, tasks, the briefing, checks and which of them get
//! network, references to earlier work, gates, access levels, escalations,
//! skills, budget), in one typed shape for every channel.

use serde::{Deserialize, Serialize};

use crate::cards::CardPayload;
use crate::model::work::{Budget, WorkItem, WorkItemType};
use crate::model::workspace::{Access, ApplyMode, WorkspaceUse};

/// §0.5.2's four levels, in increasing order of friction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    Low,
    Medium,
    High,
    Irreversible,
}

impl RiskLevel {
    pub fn as_str(&self) -> &'static str {
        match self {
            RiskLevel::Low => "low",
            RiskLevel::Medium => "medium",
            RiskLevel::High => "high",
            RiskLevel::Irreversible => "irreversible",
        }
    }
}

/// A level and the plain reasons that raised it (shown on the card).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Risk {
    pub level: RiskLevel,
    pub reasons: Vec<String>,
}

impl Risk {
    fn at_least(&mut self, level: RiskLevel, reason: impl Into<String>) {
        self.level = self.level.max(level);
        self.reasons.push(reason.into());
    }
}

/// Tools whose effect leaves the sandbox (a request goes out).
const NETWORK_TOOLS: &[&str] = &["web_fetch", "web_search"];

/// The risk of approving `item` (§0.5.2). Every approved plan runs commands
/// (sandboxed, verified), so the floor is `medium`; it is `high` when the
/// approval outlives one run (a goal's standing approval, a schedule), when
/// a check gets network, when the plan brings skills (credentials,
/// connections), widens access levels, or escalates to other queues or
/// spawns work. Nothing Silas can run today is irreversible outside the
/// sandbox; connection actions that are will raise it when they exist.
///
/// A workspace (issue #15): `read` adds a reason only (the executor works on
/// a copy); `write` with `apply: review` stays at the medium floor (nothing
/// reaches the owner's files before the owner approves the diff); `apply:
/// direct` or `allow_protected_edits` is `high` (changes land without a
/// second look, or may touch tests/config the checks rely on).
pub fn plan_risk(item: &WorkItem) -> Risk {
    // Say "checked" only when there is something to check with: without a
    // check, "done" is the model's own word, and the card must not suggest
    // otherwise.
    let base = match item.verify.len() {
        0 => "runs commands in the sandbox; no checks: \"done\" is the model's own word".into(),
        1 => "runs commands in the sandbox; checked by 1 verification check".into(),
        n => format!("runs commands in the sandbox; checked by {n} verification checks"),
    };
    let mut risk = Risk {
        level: RiskLevel::Medium,
        reasons: vec![base],
    };
    if let Some(ws) = &item.workspace {
        workspace_risk(&mut risk, ws);
    }
    if item.kind == WorkItemType::Goal {
        risk.at_least(
            RiskLevel::High,
            "a goal: its approval stands for every cycle, not one run",
        );
    }
    if let Some(s) = &item.schedule {
        risk.at_least(RiskLevel::High, format!("runs on a schedule ({s})"));
    }
    let networked: Vec<&str> = item
        .verify
        .iter()
        .filter(|c| c.network)
        .map(|c| c.name.as_str())
        .collect();
    if !networked.is_empty() {
        risk.at_least(
            RiskLevel::High,
            format!("checks with network access: {}", networked.join(", ")),
        );
    }
    if !item.skills.is_empty() {
        risk.at_least(
            RiskLevel::High,
            format!(
                "uses skills (may hold credentials or connections): {}",
                item.skills.join(", ")
            ),
        );
    }
    let tools: Vec<&str> = item
        .access_levels
        .values()
        .flat_map(|a| a.tools.iter().map(String::as_str))
        .collect();
    if !tools.is_empty() {
        risk.at_least(
            RiskLevel::High,
            format!("access levels grant tools: {}", tools.join(", ")),
        );
    }
    if tools.iter().any(|t| NETWORK_TOOLS.contains(t)) {
        risk.reasons
            .push("a granted tool reaches the network".into());
    }
    let spreads = item.escalation.values().any(|e| {
        matches!(
            e.action.as_str(),
            "spawn_task" | "transfer_to_queue" | "escalate_human"
        )
    });
    if spreads {
        risk.at_least(
            RiskLevel::High,
            "on failure it escalates, spawns work or transfers to a queue",
        );
    }
    risk
}

fn workspace_risk(risk: &mut Risk, ws: &WorkspaceUse) {
    match (ws.access, ws.apply) {
        (Access::Read, _) => risk.reasons.push(format!(
            "reads workspace {} (works on a copy; nothing there changes)",
            ws.name
        )),
        (Access::Write, ApplyMode::Review) => risk.reasons.push(format!(
            "changes workspace {} after you review the diff",
            ws.name
        )),
        (Access::Write, ApplyMode::Direct) => risk.at_least(
            RiskLevel::High,
            format!(
                "changes workspace {} directly, without a diff review",
                ws.name
            ),
        ),
    }
    if ws.allow_protected_edits {
        risk.at_least(
            RiskLevel::High,
            "may edit protected files (tests, configuration)",
        );
    }
    if !ws.extra_paths.is_empty() {
        risk.reasons.push(format!(
            "reads and executes outside the workspace: {}",
            ws.extra_paths.join(", ")
        ));
    }
}

/// The risk of one paused tool call the owner is asked about: a call that
/// reaches the network is `high`, any other (sandboxed) call `medium`.
pub fn tool_call_risk(tool_name: &str) -> Risk {
    if NETWORK_TOOLS.contains(&tool_name) {
        Risk {
            level: RiskLevel::High,
            reasons: vec![format!("{tool_name} sends a request out of the sandbox")],
        }
    } else {
        Risk {
            level: RiskLevel::Medium,
            reasons: vec![format!("{tool_name} runs in the sandbox")],
        }
    }
}

/// The risk of applying (or undoing) a workspace change set (issue #15):
/// applying writes the owner's files — medium, since an undo stays possible
/// for the undo window — and high when it edits the files that define the
/// checks (the checks ran on the originals). An undo only puts back what
/// the apply replaced (refused if anything changed since): low.
/// A skill install card: high — it adds code that tasks may later run with
/// the skill's declared network and credentials.
pub fn skill_install_risk(c: &crate::cards::SkillInstallCard) -> Risk {
    let mut reasons = vec!["installs code that tasks may run".to_string()];
    if !c.network.is_empty() {
        reasons.push(format!("reaches {}", c.network.join(", ")));
    }
    if !c.credentials.is_empty() {
        reasons.push(format!("uses credentials {}", c.credentials.join(", ")));
    }
    if let Some(server) = &c.mcp_server {
        reasons.push(format!(
            "runs the MCP server {server}; its tools are listed at the dry run and bound"
        ));
    }
    Risk {
        level: RiskLevel::High,
        reasons,
    }
}

pub fn changes_risk(c: &crate::cards::ChangesCard) -> Risk {
    use crate::model::approval::ChangesAction;
    if c.phase == ChangesAction::Undo {
        return Risk {
            level: RiskLevel::Low,
            reasons: vec![format!(
                "puts back {} file(s) in {} exactly as they were",
                c.files.len(),
                c.path
            )],
        };
    }
    let mut reasons = vec![format!(
        "writes {} file(s) in {} (+{} −{})",
        c.files.len(),
        c.path,
        c.total_added,
        c.total_removed
    )];
    let deleted = c.files.iter().filter(|f| f.kind == "deleted").count();
    if deleted > 0 {
        reasons.push(format!("deletes {deleted} file(s); undo restores them"));
    }
    let protected = c.protected_edits();
    let level = if protected.is_empty() {
        RiskLevel::Medium
    } else {
        reasons.push(format!(
            "edits files that define the checks: {}",
            protected.join(", ")
        ));
        RiskLevel::High
    };
    Risk { level, reasons }
}

/// Domain actions that cannot be taken back (§0.5.5: delete, unsubscribe…).
pub const IRREVERSIBLE_ACTIONS: &[&str] = &[
    "delete",
    "hard_delete",
    "purge",
    "drop",
    "unsubscribe",
    "revoke",
    "destroy",
    "wipe",
];

fn level_in(v: Option<&serde_json::Value>) -> Option<RiskLevel> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The risk level of every non-plan card (§0.5.2), decided here — the one
/// place, for every channel. Each card type has a floor from what answering
/// it does; a level its payload carries may raise that, never lower it (a
/// producer can flag a batch as dangerous, nobody can make one look safe).
/// `None` for a secure-input card: it collects a credential, not a decision.
///
/// | card | floor |
/// |---|---|
/// | `gate_approval` | medium (lets a turn past a policy gate) |
/// | `draft_review` | medium (sends something on your behalf) |
/// | `batch_review` | medium; irreversible when `batch.action` is one of [`IRREVERSIBLE_ACTIONS`] |
/// | `autonomy_threshold_review` | medium; high if any change widens autonomy |
/// | `permission_escalation` | medium, the level §5.10.2 assigns a read→write step on a resource already granted (the Connection layer sets `risk_level` deterministically, high for a new resource type); high when the card carries none |
/// | `decision`, `suggestion`, `checkpoint`, `connection_setup_step`, `connection_failure` | low |
///
/// Plan and tool cards take their risk from the plan / the tool
/// ([`CardPayload::risk`]); here they read as high, the cautious level.
pub fn card_risk(card: &CardPayload) -> Option<RiskLevel> {
    // The batch, proposal and suggestion are producer-described, free-form
    // objects: their well-known keys are read here and nowhere else.
    let key = |v: &'_ serde_json::Value, k: &str| v.get(k).cloned();
    let (floor, carried) = match card {
        CardPayload::SecureInput(_) => return None,
        CardPayload::Plan(_) | CardPayload::Tool(_) | CardPayload::SkillInstall(_) => {
            (RiskLevel::High, None)
        }
        CardPayload::Changes(c) => (changes_risk(c).level, None),
        CardPayload::Gate(_) => (RiskLevel::Medium, None),
        CardPayload::DraftReview(d) => (
            RiskLevel::Medium,
            level_in(key(&d.metadata, "risk_level").as_ref()),
        ),
        CardPayload::BatchReview(b) => {
            let action = b
                .batch
                .get("action")
                .and_then(|a| a.as_str())
                .unwrap_or_default()
                .to_ascii_lowercase();
            let floor = if IRREVERSIBLE_ACTIONS.contains(&action.as_str()) {
                RiskLevel::Irreversible
            } else {
                RiskLevel::Medium
            };
            (floor, level_in(key(&b.batch, "risk_level").as_ref()))
        }
        CardPayload::AutonomyThreshold(a) => {
            let widens = a
                .proposal
                .get("changes")
                .and_then(|c| c.as_array())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.get("direction").and_then(|d| d.as_str()) == Some("widen"))
                });
            let floor = if widens {
                RiskLevel::High
            } else {
                RiskLevel::Medium
            };
            (floor, level_in(key(&a.proposal, "risk_level").as_ref()))
        }
        // The floor is the lowest level §5.10.2 assigns, so the
        // deterministic medium for read → write reaches the owner; a card
        // without one reads as a new resource type.
        CardPayload::PermissionEscalation(p) => match p.risk_level {
            Some(_) => (RiskLevel::Medium, p.risk_level),
            None => (RiskLevel::High, None),
        },
        CardPayload::Suggestion(s) => (
            RiskLevel::Low,
            level_in(key(&s.suggestion, "risk_level").as_ref()),
        ),
        CardPayload::ConnectionSetup(c) => (RiskLevel::Low, level_in(c.fields.get("risk_level"))),
        CardPayload::Decision(_)
        | CardPayload::Checkpoint(_)
        | CardPayload::ConnectionFailure(_) => (RiskLevel::Low, None),
    };
    Some(carried.map_or(floor, |c| c.max(floor)))
}

/// One verification check as the card shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckView {
    pub name: String,
    pub run: String,
    pub network: bool,
    pub timeout: u64,
    /// What passes, as the plan wrote it (compact JSON: `{"exit_code":0}`):
    /// `run: pytest` expecting exit code 1 is a different check.
    #[serde(default)]
    pub expect: String,
}

/// The workspace a plan works in, as the card shows it (issue #15).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceView {
    pub name: String,
    /// The registered directory, looked up when the card was made (`None`
    /// when the card was made without the registry).
    #[serde(default)]
    pub path: Option<String>,
    pub access: Access,
    /// Granted read and execute only.
    pub extra_paths: Vec<String>,
    /// Extra globs the executor may not change (the defaults also apply).
    pub protected: Vec<String>,
    pub allow_protected_edits: bool,
    pub apply: ApplyMode,
    pub commit_message: Option<String>,
}

impl WorkspaceView {
    pub fn of(ws: &WorkspaceUse) -> WorkspaceView {
        WorkspaceView {
            name: ws.name.clone(),
            path: None,
            access: ws.access,
            extra_paths: ws.extra_paths.clone(),
            protected: ws.protected.clone(),
            allow_protected_edits: ws.allow_protected_edits,
            apply: ws.apply,
            commit_message: ws.commit_message.clone(),
        }
    }

    /// `Workspace: NAME (PATH) — read` or `— write; applies after review`
    /// / `— write; applies directly`: the one summary line every channel shows.
    pub fn line(&self) -> String {
        let path = self.path.as_deref().unwrap_or("path not looked up");
        let how = match (self.access, self.apply) {
            (Access::Read, _) => "read".to_string(),
            (Access::Write, ApplyMode::Review) => "write; applies after review".to_string(),
            (Access::Write, ApplyMode::Direct) => "write; applies directly".to_string(),
        };
        format!("Workspace: {} ({path}) — {how}", self.name)
    }

    /// The rest of what the owner approves about the workspace, one line
    /// each: extra paths, protected globs, protected edits, the commit.
    pub fn detail_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.extra_paths.is_empty() {
            out.push(format!(
                "Also reads and executes (no writes): {}",
                self.extra_paths.join(", ")
            ));
        }
        if !self.protected.is_empty() {
            out.push(format!("Also protected: {}", self.protected.join(", ")));
        }
        if self.allow_protected_edits {
            out.push("May edit protected files (tests, configuration)".to_string());
        }
        if let Some(m) = &self.commit_message {
            out.push(format!("Commits locally: {m}"));
        }
        out
    }
}

/// Everything the plan hash covers that changes what runs, for a card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub work_item_id: String,
    pub kind: String,
    pub title: String,
    /// The briefing the executor gets: what it will be asked to do.
    pub body: String,
    pub schedule: Option<String>,
    pub tasks: Vec<String>,
    pub depends_on: Vec<String>,
    pub parent: Option<String>,
    pub follow_up_of: Option<String>,
    pub input_artifacts_from: Vec<String>,
    pub checks: Vec<CheckView>,
    /// `name (on trigger, provider)` per gate.
    pub gates: Vec<String>,
    /// `name: tool, tool` per access level.
    pub access_levels: Vec<String>,
    /// `trigger → action` per escalation, with the words it would use
    /// (`: "instruction"`, `: "message"`).
    pub escalation: Vec<String>,
    /// What a failed check of a goal starts without asking (the standing
    /// approval covers it): `None` when it only reports. The fix task's
    /// briefing is the plan's `failure_context`, shown in full — it is the
    /// text that task's executor is told to follow.
    #[serde(default)]
    pub on_failure: Option<String>,
    pub skills: Vec<String>,
    pub budget: Budget,
    /// The approval outlives one run (goals: a standing approval).
    pub standing: bool,
    pub risk: Risk,
    /// The workspace the plan names, if any (cards from before workspaces
    /// have none).
    #[serde(default)]
    pub workspace: Option<WorkspaceView>,
    /// For a goal: what approving it commits to beyond the plan — how long
    /// the standing approval lasts, how many fix tasks it covers, when it
    /// runs and in which zone (`goal_terms`; the daemon fills it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<String>,
}

impl PlanView {
    pub fn of(item: &WorkItem) -> PlanView {
        PlanView {
            work_item_id: item.id.clone(),
            kind: item.kind.as_str().to_string(),
            title: item.title.clone(),
            body: item.body.clone(),
            schedule: item.schedule.clone(),
            tasks: item.tasks.clone(),
            depends_on: item.depends_on.clone(),
            parent: item.parent.clone(),
            follow_up_of: item.follow_up_of.clone(),
            input_artifacts_from: item.input_artifacts_from.clone(),
            checks: item
                .verify
                .iter()
                .map(|c| CheckView {
                    name: c.name.clone(),
                    run: c.run.clone(),
                    network: c.network,
                    timeout: c.timeout,
                    expect: expect_text(&c.expect),
                })
                .collect(),
            gates: item
                .gates
                .iter()
                .map(|g| format!("{} (on {}, {})", g.name, g.on.as_str(), g.provider.as_str()))
                .collect(),
            access_levels: item
                .access_levels
                .iter()
                .map(|(name, a)| format!("{name}: {}", a.tools.join(", ")))
                .collect(),
            escalation: item
                .escalation
                .iter()
                .map(|(on, e)| {
                    let mut line = format!("{on} → {}", e.action.as_str());
                    for words in [&e.instruction, &e.message].into_iter().flatten() {
                        line.push_str(&format!(": \"{words}\""));
                    }
                    line
                })
                .collect(),
            on_failure: on_failure_line(item),
            skills: item.skills.clone(),
            budget: item.budget.clone(),
            standing: item.kind == WorkItemType::Goal,
            risk: plan_risk(item),
            workspace: item.workspace.as_ref().map(WorkspaceView::of),
            terms: None,
        }
    }
}

/// [`CheckView::expect`]: the conditions set, as compact JSON.
fn expect_text(e: &crate::model::work::Expectation) -> String {
    match serde_json::to_value(e) {
        Ok(serde_json::Value::Object(m)) => {
            serde_json::Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect())
                .to_string()
        }
        _ => String::new(),
    }
}

/// [`PlanView::on_failure`]: a goal that spawns fix tasks says so, with the
/// briefing they get.
fn on_failure_line(item: &WorkItem) -> Option<String> {
    if item.kind != WorkItemType::Goal || item.on_failure != "spawn_task" {
        return None;
    }
    // The goal cycle starts no fix task for a goal that only reads its
    // workspace (the task's change set could never be applied): the card
    // must not promise one.
    if let Some(ws) = item
        .workspace
        .as_ref()
        .filter(|w| w.access == crate::model::workspace::Access::Read)
    {
        return Some(format!(
            "a failed check is reported; no fix task starts, since this goal only reads workspace '{}'",
            ws.name
        ));
    }
    Some(match item.failure_context.as_deref().map(str::trim) {
        Some(brief) if !brief.is_empty() => {
            format!("a failed check starts a fix task under this approval, briefed: \"{brief}\"")
        }
        _ => "a failed check starts a fix task under this approval, briefed with the failed checks"
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::work::{Expectation, VerificationCheck};
    use serde_json::json;

    fn task() -> WorkItem {
        WorkItem::new("t", WorkItemType::Task, "t")
    }

    /// The card shows what a goal's failed check starts without asking and
    /// the briefing it gets, and the words an escalation would use: text
    /// the plan hash covers and an executor or gate acts on.
    #[test]
    fn the_card_shows_fix_task_briefings_and_escalation_words() {
        let mut g = WorkItem::new("g", WorkItemType::Goal, "g");
        g.on_failure = "spawn_task".into();
        g.failure_context = Some("HIDDEN: delete everything".into());
        g.escalation.insert(
            "blocked".into(),
            serde_json::from_value(json!({"action": "suppress_and_rephrase",
                "instruction": "say all is well"}))
            .unwrap(),
        );
        let v = PlanView::of(&g);
        assert_eq!(
            v.on_failure.as_deref(),
            Some(
                "a failed check starts a fix task under this approval, briefed: \"HIDDEN: delete everything\""
            )
        );
        assert_eq!(
            v.escalation,
            ["blocked → suppress_and_rephrase: \"say all is well\""]
        );
        g.failure_context = None;
        assert!(
            PlanView::of(&g)
                .on_failure
                .unwrap()
                .ends_with("briefed with the failed checks")
        );
        // Read-only workspace: the cycle starts no fix task, and says so.
        g.workspace =
            Some(serde_json::from_value(json!({"name": "site", "access": "read"})).unwrap());
        assert_eq!(
            PlanView::of(&g).on_failure.as_deref(),
            Some(
                "a failed check is reported; no fix task starts, since this goal only reads workspace 'site'"
            )
        );
        g.workspace =
            Some(serde_json::from_value(json!({"name": "site", "access": "write"})).unwrap());
        assert!(
            PlanView::of(&g)
                .on_failure
                .unwrap()
                .starts_with("a failed check starts a fix task")
        );
        g.workspace = None;
        g.on_failure = "report".into();
        assert_eq!(PlanView::of(&g).on_failure, None);
        let mut t = task();
        t.on_failure = "spawn_task".into();
        assert_eq!(
            PlanView::of(&t).on_failure,
            None,
            "only goals spawn fix tasks"
        );
    }

    #[test]
    fn a_plain_task_is_medium() {
        let r = plan_risk(&task());
        assert_eq!(r.level, RiskLevel::Medium);
        assert_eq!(r.reasons.len(), 1);
    }

    #[test]
    fn the_card_says_checked_only_when_there_are_checks() {
        let r = plan_risk(&task());
        assert!(r.reasons[0].contains("no checks"), "{r:?}");
        assert!(!r.reasons[0].contains("checked"), "{r:?}");
        let expect: Expectation = serde_json::from_value(json!({"exit_code": 0})).unwrap();
        let mut w = task();
        w.verify
            .push(VerificationCheck::new("a", "test -f x", expect.clone()));
        assert!(plan_risk(&w).reasons[0].contains("checked by 1 verification check"));
        w.verify
            .push(VerificationCheck::new("b", "test -f y", expect));
        assert!(plan_risk(&w).reasons[0].contains("checked by 2 verification checks"));
    }

    #[test]
    fn each_widening_field_raises_to_high_and_says_why() {
        let expect: Expectation = serde_json::from_value(json!({"exit_code": 0})).unwrap();
        type Edit = Box<dyn Fn(&mut WorkItem)>;
        let cases: Vec<(&str, Edit)> = vec![
            (
                "goal",
                Box::new(|w: &mut WorkItem| w.kind = WorkItemType::Goal),
            ),
            (
                "schedule",
                Box::new(|w: &mut WorkItem| w.schedule = Some("0 9 * * *".into())),
            ),
            (
                "network",
                Box::new(move |w: &mut WorkItem| {
                    let mut c = VerificationCheck::new("fetch", "curl x", expect.clone());
                    c.network = true;
                    w.verify.push(c);
                }),
            ),
            (
                "skills",
                Box::new(|w: &mut WorkItem| w.skills.push("gmail".into())),
            ),
            (
                "access levels",
                Box::new(|w: &mut WorkItem| {
                    w.access_levels.insert(
                        "web".into(),
                        serde_json::from_value(json!({"description": "d", "tools": ["web_fetch"]}))
                            .unwrap(),
                    );
                }),
            ),
            (
                "escalation",
                Box::new(|w: &mut WorkItem| {
                    w.escalation.insert(
                        "failure".into(),
                        serde_json::from_value(json!({"action": "spawn_task"})).unwrap(),
                    );
                }),
            ),
        ];
        for (name, edit) in cases {
            let mut w = task();
            edit(&mut w);
            let r = plan_risk(&w);
            assert_eq!(r.level, RiskLevel::High, "{name}");
            assert!(r.reasons.len() >= 2, "{name}: {r:?}");
        }
    }

    #[test]
    fn a_check_without_network_and_a_report_escalation_stay_medium() {
        let expect: Expectation = serde_json::from_value(json!({"exit_code": 0})).unwrap();
        let mut w = task();
        w.verify
            .push(VerificationCheck::new("local", "test -f x", expect));
        w.escalation.insert(
            "failure".into(),
            serde_json::from_value(json!({"action": "report"})).unwrap(),
        );
        assert_eq!(plan_risk(&w).level, RiskLevel::Medium);
    }

    #[test]
    fn the_view_shows_what_runs_and_which_checks_get_network() {
        let expect: Expectation = serde_json::from_value(json!({"exit_code": 0})).unwrap();
        let mut w = task();
        w.body = "Run `make`".into();
        w.follow_up_of = Some("t-0".into());
        w.input_artifacts_from = vec!["out.txt".into()];
        let mut c = VerificationCheck::new("fetch", "curl https://x", expect);
        c.network = true;
        w.verify.push(c);
        let v = PlanView::of(&w);
        assert_eq!(v.body, "Run `make`");
        assert_eq!(v.follow_up_of.as_deref(), Some("t-0"));
        assert_eq!(v.input_artifacts_from, vec!["out.txt".to_string()]);
        assert!(v.checks[0].network);
        assert_eq!(v.checks[0].run, "curl https://x");
        assert_eq!(v.risk.level, RiskLevel::High);
        assert!(!v.standing);
    }

    #[test]
    fn card_risk_table_floors_and_raises_never_lowers() {
        let cases = [
            ("gate_approval", json!({}), Some(RiskLevel::Medium)),
            ("draft_review", json!({}), Some(RiskLevel::Medium)),
            (
                "draft_review",
                json!({"metadata": {"risk_level": "low"}}),
                Some(RiskLevel::Medium),
            ),
            (
                "draft_review",
                json!({"metadata": {"risk_level": "high"}}),
                Some(RiskLevel::High),
            ),
            (
                "batch_review",
                json!({"batch": {"action": "archive"}}),
                Some(RiskLevel::Medium),
            ),
            (
                "batch_review",
                json!({"batch": {"action": "DELETE"}}),
                Some(RiskLevel::Irreversible),
            ),
            (
                "batch_review",
                json!({"batch": {"action": "delete", "risk_level": "low"}}),
                Some(RiskLevel::Irreversible),
            ),
            (
                "autonomy_threshold_review",
                json!({"proposal": {"changes": [{"direction": "narrow"}]}}),
                Some(RiskLevel::Medium),
            ),
            (
                "autonomy_threshold_review",
                json!({"proposal": {"changes": [{"direction": "widen"}]}}),
                Some(RiskLevel::High),
            ),
            (
                "permission_escalation",
                json!({"risk_level": "low"}),
                Some(RiskLevel::Medium),
            ),
            (
                "permission_escalation",
                json!({"risk_level": "medium"}),
                Some(RiskLevel::Medium),
            ),
            ("permission_escalation", json!({}), Some(RiskLevel::High)),
            (
                "permission_escalation",
                json!({"risk_level": "irreversible"}),
                Some(RiskLevel::Irreversible),
            ),
            (
                "suggestion",
                json!({"suggestion": {}}),
                Some(RiskLevel::Low),
            ),
            (
                "suggestion",
                json!({"suggestion": {"risk_level": "medium"}}),
                Some(RiskLevel::Medium),
            ),
            ("decision", json!({}), Some(RiskLevel::Low)),
            ("checkpoint", json!({}), Some(RiskLevel::Low)),
            ("connection_failure", json!({}), Some(RiskLevel::Low)),
            (
                "connection_setup_step",
                json!({"risk_level": "bogus"}),
                Some(RiskLevel::Low),
            ),
            ("secure_input_request", json!({"risk_level": "high"}), None),
        ];
        for (kind, payload, want) in cases {
            let card = CardPayload::from_parts(kind, payload.clone()).unwrap();
            assert_eq!(card_risk(&card), want, "{kind} {payload}");
        }
    }

    #[test]
    fn network_tool_calls_are_high() {
        assert_eq!(tool_call_risk("web_fetch").level, RiskLevel::High);
        assert_eq!(tool_call_risk("shell_exec").level, RiskLevel::Medium);
    }

    #[test]
    fn workspace_risk_follows_access_and_apply_mode() {
        let with = |ws: WorkspaceUse| {
            let mut w = task();
            w.workspace = Some(ws);
            plan_risk(&w)
        };
        let read = with(WorkspaceUse::read("site"));
        assert_eq!(read.level, RiskLevel::Medium);
        assert!(
            read.reasons
                .iter()
                .any(|r| r.contains("reads workspace site"))
        );
        let write = WorkspaceUse {
            access: Access::Write,
            ..WorkspaceUse::read("site")
        };
        assert_eq!(with(write.clone()).level, RiskLevel::Medium);
        let direct = WorkspaceUse {
            apply: ApplyMode::Direct,
            ..write.clone()
        };
        let r = with(direct);
        assert_eq!(r.level, RiskLevel::High);
        assert!(r.reasons.iter().any(|x| x.contains("directly")), "{r:?}");
        let protected = WorkspaceUse {
            allow_protected_edits: true,
            ..write
        };
        assert_eq!(with(protected).level, RiskLevel::High);
    }

    #[test]
    fn the_plan_view_shows_the_workspace_line() {
        let mut w = task();
        assert_eq!(PlanView::of(&w).workspace, None);
        w.workspace = Some(WorkspaceUse {
            access: Access::Write,
            extra_paths: vec!["/opt/venv".into()],
            ..WorkspaceUse::read("site")
        });
        let mut view = PlanView::of(&w).workspace.unwrap();
        assert_eq!(view.extra_paths, vec!["/opt/venv"]);
        view.path = Some("/srv/site".into());
        assert_eq!(
            view.line(),
            "Workspace: site (/srv/site) — write; applies after review"
        );
        view.apply = ApplyMode::Direct;
        assert!(view.line().ends_with("— write; applies directly"));
        view.access = Access::Read;
        assert!(view.line().ends_with("(/srv/site) — read"));
        view.commit_message = Some("fix: readme".into());
        assert_eq!(
            view.detail_lines(),
            vec![
                "Also reads and executes (no writes): /opt/venv",
                "Commits locally: fix: readme"
            ]
        );
    }
}
