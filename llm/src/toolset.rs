//! The toolset wrapper chain of §4.24, as our own types:
//!
//! ```text
//! SkillToolset → PreparedToolset → FilteredToolset → ApprovalRequiredToolset [→ RevocableToolset]
//! ```
//!
//! * [`SkillToolset`] registers the core harness tools and the work item's
//!   skill tools.
//! * [`PreparedToolset`] applies role/work-item preparation: which tools a
//!   role may see at all and how they are described to it.
//! * [`FilteredToolset`] applies the access level's allowed-tool list
//!   (`AccessController.get_allowed_tools()`) **before** the model sees any
//!   definition.
//! * [`ApprovalRequiredToolset`] decides, per requested call, execute-now or
//!   pause-for-approval.
//! * [`RevocableToolset`] is the optional runtime-only outer wrapper: once
//!   revoked it offers nothing and refuses everything.
//!
//! Every stage wraps the previous one and only narrows it: a call is checked
//! against the definitions the inner stages produced, so a tool the model was
//! never offered (filtered out, wrong role, hallucinated) is refused even if
//! the model names it — no stage can be bypassed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use serde_json::{Value, json};

use crate::provider::{ToolCall, ToolSpec};

/// Core tool names (§7: tools are cognition primitives).
pub const SHELL_EXEC: &str = "shell_exec";
pub const PYTHON_EXEC: &str = "python_exec";
pub const WEB_SEARCH: &str = "web_search";
pub const MEMORY_SEARCH: &str = "memory_search";
/// Spec name (§4.24, §5.7): the Proxy's read-only view of its own context.
pub const CONTEXT_INSPECTION: &str = "context_inspection";
/// Skill scripts run through this tool (§7.3 `run_python`).
pub const RUN_SKILL_SCRIPT: &str = "run_skill_script";

/// Prefix of the tools a skill's MCP server offers.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The model-facing name of an MCP tool. Skill names never contain `__`, so
/// [`parse_mcp_tool_name`] splits it back unambiguously.
pub fn mcp_tool_name(skill: &str, tool: &str) -> String {
    format!("{MCP_TOOL_PREFIX}{skill}__{tool}")
}

/// `(skill, tool)` of an MCP tool name.
pub fn parse_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(MCP_TOOL_PREFIX)?
        .split_once("__")
        .filter(|(skill, tool)| !skill.is_empty() && !tool.is_empty())
}

/// Which agent a toolset is prepared for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgentRole {
    Proxy,
    Planner,
    Executor,
}

/// Where a tool comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolSource {
    Core,
    Skill(String),
    /// `run_skill_script`: one tool for every registered skill with scripts.
    /// Preparation offers it only to an Executor whose work item names at
    /// least one of them, and narrows its `skill` argument to those.
    Skills(BTreeSet<String>),
}

/// A registered tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    pub spec: ToolSpec,
    pub source: ToolSource,
    /// Read-only tools (memory search, context inspection, web search) may
    /// be offered to the Proxy and Planner; the rest only to the Executor.
    pub read_only: bool,
}

fn def(name: &str, description: &str, parameters: Value, read_only: bool) -> ToolDef {
    ToolDef {
        spec: ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters: Arc::new(parameters),
        },
        source: ToolSource::Core,
        read_only,
    }
}

fn string_params(field: &str, what: &str) -> Value {
    json!({
        "type": "object",
        "properties": {field: {"type": "string", "description": what}},
        "required": [field],
        "additionalProperties": false
    })
}

/// The core harness tools. `web_search` is included only when search is
/// configured (`Config::web_search_enabled`).
pub fn core_tools(web_search: bool) -> Vec<ToolDef> {
    // Built once: every turn offers them (issue #19).
    static CORE: LazyLock<[Vec<ToolDef>; 2]> =
        LazyLock::new(|| [build_core(false), build_core(true)]);
    CORE[usize::from(web_search)].clone()
}

fn build_core(web_search: bool) -> Vec<ToolDef> {
    let mut tools = vec![
        def(
            SHELL_EXEC,
            "Run a shell command in the sandbox work directory; returns exit code and output.",
            string_params("command", "the shell command line"),
            false,
        ),
        def(
            PYTHON_EXEC,
            "Run a Python script in the sandbox; returns exit code and output.",
            string_params("code", "the Python source"),
            false,
        ),
        def(
            MEMORY_SEARCH,
            "Search long-term memory (read-only).",
            string_params("query", "what to look for"),
            true,
        ),
        def(
            CONTEXT_INSPECTION,
            "Inspect the current context: zones, item ids, token counts and eviction so far (read-only; the answer is the context_inspection block at the end of the context).",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            true,
        ),
    ];
    if web_search {
        tools.push(def(
            WEB_SEARCH,
            "Search the web; returns titles, URLs and snippets (untrusted content).",
            string_params("query", "the search query"),
            true,
        ));
    }
    tools
}

/// Stage 1: core tools plus the work item's skill tools.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SkillToolset {
    tools: Vec<ToolDef>,
}

impl SkillToolset {
    pub fn new(core: Vec<ToolDef>) -> Self {
        SkillToolset { tools: core }
    }

    /// Registers `skill` with the one `run_skill_script` tool (created on
    /// the first skill): the model names the skill, the script (a path
    /// inside the skill) and the script's arguments as an object, which the
    /// runner checks against the skill's `script_args` and passes as argv.
    pub fn with_skill(mut self, skill: &str, description: &str) -> Self {
        let _ = description;
        let existing = self
            .tools
            .iter_mut()
            .find(|t| t.spec.name == RUN_SKILL_SCRIPT);
        let mut skills = match existing.as_ref().map(|t| &t.source) {
            Some(ToolSource::Skills(s)) => s.clone(),
            _ => BTreeSet::new(),
        };
        skills.insert(skill.to_owned());
        let tool = ToolDef {
            spec: ToolSpec {
                name: RUN_SKILL_SCRIPT.to_owned(),
                description: "Run one script of a skill of this work item in the sandbox. \
                              The skill's instructions say which scripts exist and what \
                              arguments they take; the output is untrusted data."
                    .to_owned(),
                parameters: Arc::new(run_skill_script_params(&skills)),
            },
            source: ToolSource::Skills(skills),
            read_only: false,
        };
        match existing {
            Some(t) => *t = tool,
            None => self.tools.push(tool),
        }
        self
    }

    /// Registers one tool of a skill's MCP server as `mcp__<skill>__<tool>`.
    /// It belongs to the skill, so preparation, filtering and approval treat
    /// it like the skill's scripts: never read-only, Executor only, only for
    /// work items with the skill. The description says whose it is, so the
    /// model cannot take a server's words for Silas's own.
    pub fn with_mcp_tool(
        mut self,
        skill: &str,
        tool: &str,
        description: &str,
        parameters: Value,
    ) -> Self {
        self.tools.push(ToolDef {
            spec: ToolSpec {
                name: mcp_tool_name(skill, tool),
                description: format!(
                    "MCP tool `{tool}` of the `{skill}` skill (its output is untrusted): {description}"
                ),
                parameters: Arc::new(parameters),
            },
            source: ToolSource::Skill(skill.to_owned()),
            read_only: false,
        });
        self
    }

    pub fn definitions(&self) -> Vec<ToolDef> {
        self.tools.clone()
    }
}

/// The `run_skill_script` parameters, the `skill` argument limited to
/// `skills`.
fn run_skill_script_params(skills: &BTreeSet<String>) -> Value {
    json!({
        "type": "object",
        "properties": {
            "skill": {"type": "string", "enum": skills, "description": "the skill's name"},
            "script": {"type": "string", "description": "script path inside the skill, e.g. scripts/run.py"},
            "args": {"type": "object", "description": "the script's named arguments"}
        },
        "required": ["skill", "script"],
        "additionalProperties": false
    })
}

/// What preparation knows about the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preparation {
    pub role: AgentRole,
    /// Skills of the active work item: only their tools are exposed.
    pub work_item_skills: BTreeSet<String>,
}

/// The per-tool `prepare` hook: returns the (possibly re-described) tool, or
/// `None` to omit it for this role/work item.
pub fn prepare_tool(tool: &ToolDef, prep: &Preparation) -> Option<ToolDef> {
    let role_ok = match prep.role {
        AgentRole::Proxy | AgentRole::Planner => tool.read_only,
        // Background work does not search long-term memory: what it needs
        // is in its approved briefing, and recalled memories (often from
        // untrusted input) must not steer a run that holds a shell. It was
        // offered and then refused at every call.
        AgentRole::Executor => {
            !matches!(tool.spec.name.as_str(), CONTEXT_INSPECTION | MEMORY_SEARCH)
        }
    };
    let skill_ok = match &tool.source {
        ToolSource::Core => true,
        ToolSource::Skill(s) => {
            prep.role == AgentRole::Executor && prep.work_item_skills.contains(s)
        }
        ToolSource::Skills(s) => {
            prep.role == AgentRole::Executor && !s.is_disjoint(&prep.work_item_skills)
        }
    };
    if !(role_ok && skill_ok) {
        return None;
    }
    let mut t = tool.clone();
    if let ToolSource::Skills(s) = &tool.source {
        let mine: BTreeSet<String> = s.intersection(&prep.work_item_skills).cloned().collect();
        t.spec.parameters = Arc::new(run_skill_script_params(&mine));
        t.source = ToolSource::Skills(mine);
    }
    if prep.role == AgentRole::Executor && !t.read_only {
        t.spec.description = format!(
            "{} Runs inside the sandbox only; side effects outside the work directory are refused.",
            t.spec.description
        );
    }
    Some(t)
}

/// Stage 2: role/work-item preparation over stage 1.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedToolset {
    inner: SkillToolset,
    prep: Preparation,
}

impl PreparedToolset {
    pub fn new(inner: SkillToolset, prep: Preparation) -> Self {
        PreparedToolset { inner, prep }
    }

    pub fn definitions(&self) -> Vec<ToolDef> {
        self.inner
            .definitions()
            .iter()
            .filter_map(|t| prepare_tool(t, &self.prep))
            .collect()
    }
}

/// The access level's tool allowance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedTools {
    /// No restriction (owner mode).
    All,
    /// Only these names (`AccessController.get_allowed_tools()`).
    Only(BTreeSet<String>),
}

impl AllowedTools {
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        AllowedTools::Only(names.into_iter().map(Into::into).collect())
    }

    pub fn allows(&self, name: &str) -> bool {
        match self {
            AllowedTools::All => true,
            AllowedTools::Only(set) => set.contains(name),
        }
    }
}

/// Stage 3: access filtering over stage 2, before the model sees anything.
#[derive(Clone, Debug, PartialEq)]
pub struct FilteredToolset {
    inner: PreparedToolset,
    allowed: AllowedTools,
}

impl FilteredToolset {
    pub fn new(inner: PreparedToolset, allowed: AllowedTools) -> Self {
        FilteredToolset { inner, allowed }
    }

    pub fn definitions(&self) -> Vec<ToolDef> {
        self.inner
            .definitions()
            .into_iter()
            .filter(|t| self.allowed.allows(&t.spec.name))
            .collect()
    }
}

/// Decides whether a call needs approval before running.
pub trait ApprovalPolicy: Send + Sync {
    fn needs_approval(&self, call: &ToolCall, tool: &ToolDef) -> bool;
}

/// Approval required for a fixed set of tool names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalByName(pub BTreeSet<String>);

impl ApprovalByName {
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        ApprovalByName(names.into_iter().map(Into::into).collect())
    }
}

impl ApprovalPolicy for ApprovalByName {
    fn needs_approval(&self, call: &ToolCall, _: &ToolDef) -> bool {
        self.0.contains(&call.name)
    }
}

/// What to do with one requested call.
#[derive(Clone, Debug, PartialEq)]
pub enum CallDecision {
    /// Run it now.
    Execute(ToolDef),
    /// Pause: the runtime must get an explicit approval first.
    ApprovalRequired(ToolDef),
    /// Not offered to this model (filtered, wrong role, unknown, revoked).
    Refused { reason: String },
}

/// Stage 4: per-call approval over stage 3.
#[derive(Clone)]
pub struct ApprovalRequiredToolset {
    inner: FilteredToolset,
    policy: Arc<dyn ApprovalPolicy>,
}

impl std::fmt::Debug for ApprovalRequiredToolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalRequiredToolset")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ApprovalRequiredToolset {
    pub fn new(inner: FilteredToolset, policy: Arc<dyn ApprovalPolicy>) -> Self {
        ApprovalRequiredToolset { inner, policy }
    }

    pub fn definitions(&self) -> Vec<ToolDef> {
        self.inner.definitions()
    }

    pub fn decide(&self, call: &ToolCall) -> CallDecision {
        match self
            .inner
            .definitions()
            .into_iter()
            .find(|t| t.spec.name == call.name)
        {
            None => CallDecision::Refused {
                reason: format!("tool {:?} is not available to this agent", call.name),
            },
            Some(t) if self.policy.needs_approval(call, &t) => CallDecision::ApprovalRequired(t),
            Some(t) => CallDecision::Execute(t),
        }
    }
}

/// A revocation switch shared with the runtime.
#[derive(Clone, Debug, Default)]
pub struct Revocation(Arc<AtomicBool>);

impl Revocation {
    pub fn revoke(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_revoked(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Optional outermost runtime wrapper (§4.24 step 5): revocation. It can
/// only narrow what the inner chain allows.
#[derive(Clone, Debug)]
pub struct RevocableToolset {
    inner: ApprovalRequiredToolset,
    revocation: Revocation,
}

impl RevocableToolset {
    pub fn new(inner: ApprovalRequiredToolset, revocation: Revocation) -> Self {
        RevocableToolset { inner, revocation }
    }
}

/// The chain as the tool loop uses it.
pub trait Toolset: Send + Sync {
    /// What the model is offered this step.
    fn definitions(&self) -> Vec<ToolDef>;
    /// What happens to one requested call.
    fn decide(&self, call: &ToolCall) -> CallDecision;
    /// The offered tool specs.
    fn specs(&self) -> Vec<ToolSpec> {
        self.definitions().into_iter().map(|t| t.spec).collect()
    }
}

impl Toolset for ApprovalRequiredToolset {
    fn definitions(&self) -> Vec<ToolDef> {
        ApprovalRequiredToolset::definitions(self)
    }
    fn decide(&self, call: &ToolCall) -> CallDecision {
        ApprovalRequiredToolset::decide(self, call)
    }
}

impl Toolset for RevocableToolset {
    fn definitions(&self) -> Vec<ToolDef> {
        if self.revocation.is_revoked() {
            Vec::new()
        } else {
            self.inner.definitions()
        }
    }
    fn decide(&self, call: &ToolCall) -> CallDecision {
        if self.revocation.is_revoked() {
            CallDecision::Refused {
                reason: "tool access was revoked".to_owned(),
            }
        } else {
            self.inner.decide(call)
        }
    }
}

/// Assembles the chain in the normative order (§4.24 "Pipeline assembly").
pub fn build_chain(
    skills: SkillToolset,
    prep: Preparation,
    allowed: AllowedTools,
    approval: Arc<dyn ApprovalPolicy>,
) -> ApprovalRequiredToolset {
    ApprovalRequiredToolset::new(
        FilteredToolset::new(PreparedToolset::new(skills, prep), allowed),
        approval,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(defs: &[ToolDef]) -> Vec<String> {
        defs.iter().map(|d| d.spec.name.clone()).collect()
    }

    fn skills() -> SkillToolset {
        SkillToolset::new(core_tools(true))
            .with_skill("coding", "lint and test")
            .with_skill("mail", "send mail")
    }

    fn prep(role: AgentRole, skills: &[&str]) -> Preparation {
        Preparation {
            role,
            work_item_skills: skills.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn preparation_by_role_table() {
        // (role, work item skills, expected tool names)
        let table: &[(AgentRole, &[&str], &[&str])] = &[
            (
                AgentRole::Proxy,
                &["coding"],
                &[MEMORY_SEARCH, CONTEXT_INSPECTION, WEB_SEARCH],
            ),
            (
                AgentRole::Planner,
                &[],
                &[MEMORY_SEARCH, CONTEXT_INSPECTION, WEB_SEARCH],
            ),
            (
                AgentRole::Executor,
                &[],
                &[SHELL_EXEC, PYTHON_EXEC, WEB_SEARCH],
            ),
            (
                AgentRole::Executor,
                &["coding"],
                &[SHELL_EXEC, PYTHON_EXEC, WEB_SEARCH, RUN_SKILL_SCRIPT],
            ),
        ];
        for (role, sk, want) in table {
            let p = PreparedToolset::new(skills(), prep(*role, sk));
            assert_eq!(names(&p.definitions()), *want, "{role:?} {sk:?}");
        }
    }

    #[test]
    fn web_search_only_when_configured() {
        assert!(!names(&core_tools(false)).contains(&WEB_SEARCH.to_owned()));
        assert!(names(&core_tools(true)).contains(&WEB_SEARCH.to_owned()));
    }

    #[test]
    fn executor_descriptions_are_prepared() {
        let p = PreparedToolset::new(skills(), prep(AgentRole::Executor, &[]));
        let shell = p
            .definitions()
            .into_iter()
            .find(|d| d.spec.name == SHELL_EXEC)
            .unwrap();
        assert!(shell.spec.description.contains("sandbox only"));
    }

    #[test]
    fn run_skill_script_is_one_tool_narrowed_to_the_work_item_skills() {
        let p = PreparedToolset::new(skills(), prep(AgentRole::Executor, &["mail", "other"]));
        let tool = p
            .definitions()
            .into_iter()
            .find(|d| d.spec.name == RUN_SKILL_SCRIPT)
            .unwrap();
        // Registered for coding and mail; this item names mail only.
        assert_eq!(
            tool.spec.parameters["properties"]["skill"]["enum"],
            json!(["mail"])
        );
        assert_eq!(tool.source, ToolSource::Skills(["mail".to_owned()].into()));
        assert_eq!(tool.spec.parameters["required"], json!(["skill", "script"]));
        assert_eq!(
            tool.spec.parameters["properties"]["args"]["type"],
            json!("object")
        );
        // Registered once, however many skills.
        let all = skills().definitions();
        assert_eq!(
            all.iter()
                .filter(|d| d.spec.name == RUN_SKILL_SCRIPT)
                .count(),
            1
        );
    }

    #[test]
    fn filtering_and_approval_table() {
        let chain = build_chain(
            skills(),
            prep(AgentRole::Executor, &["coding"]),
            AllowedTools::only([
                SHELL_EXEC,
                PYTHON_EXEC,
                RUN_SKILL_SCRIPT,
                CONTEXT_INSPECTION,
            ]),
            Arc::new(ApprovalByName::new([SHELL_EXEC])),
        );
        assert_eq!(
            names(&chain.definitions()),
            [SHELL_EXEC, PYTHON_EXEC, RUN_SKILL_SCRIPT],
            "web_search is filtered; context_inspection is allowed but not prepared for the executor"
        );
        let call = |name: &str| ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        // (tool requested, expected decision kind)
        let table = [
            (SHELL_EXEC, "approval"),
            (PYTHON_EXEC, "execute"),
            (RUN_SKILL_SCRIPT, "execute"),
            (WEB_SEARCH, "refused"),               // filtered by access level
            (CONTEXT_INSPECTION, "refused"),       // not prepared for the role
            ("run_skill_script__mail", "refused"), // never a tool name
            ("rm_rf", "refused"),                  // hallucinated
        ];
        for (name, want) in table {
            let got = match chain.decide(&call(name)) {
                CallDecision::Execute(_) => "execute",
                CallDecision::ApprovalRequired(_) => "approval",
                CallDecision::Refused { .. } => "refused",
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn mcp_tools_pass_the_same_chain_as_skill_scripts() {
        let params = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let set = skills().with_mcp_tool("notes", "search", "find notes", params.clone());
        let name = mcp_tool_name("notes", "search");
        assert_eq!(parse_mcp_tool_name(&name), Some(("notes", "search")));
        assert_eq!(parse_mcp_tool_name("mcp__notes"), None);
        let call = |n: &str| ToolCall {
            id: "c1".into(),
            name: n.into(),
            arguments: r#"{"q":"x"}"#.into(),
        };
        let chain = |role, skills: &[&str], allowed| {
            build_chain(
                set.clone(),
                prep(role, skills),
                allowed,
                Arc::new(ApprovalByName::new([name.clone()])),
            )
        };
        // Offered to the Executor of a work item with the skill, paused for approval.
        let exec = chain(AgentRole::Executor, &["notes"], AllowedTools::All);
        assert!(names(&exec.definitions()).contains(&name));
        assert!(matches!(
            exec.decide(&call(&name)),
            CallDecision::ApprovalRequired(_)
        ));
        // Not to the Planner, not without the skill, not when filtered out.
        for refused in [
            chain(AgentRole::Planner, &["notes"], AllowedTools::All),
            chain(AgentRole::Executor, &[], AllowedTools::All),
            chain(
                AgentRole::Executor,
                &["notes"],
                AllowedTools::only([SHELL_EXEC]),
            ),
        ] {
            assert!(!names(&refused.definitions()).contains(&name));
            assert!(matches!(
                refused.decide(&call(&name)),
                CallDecision::Refused { .. }
            ));
        }
    }

    #[test]
    fn revocation_narrows_and_cannot_widen() {
        let chain = build_chain(
            skills(),
            prep(AgentRole::Executor, &[]),
            AllowedTools::only([PYTHON_EXEC]),
            Arc::new(ApprovalByName::default()),
        );
        let r = Revocation::default();
        let outer = RevocableToolset::new(chain, r.clone());
        let call = |name: &str| ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        assert_eq!(names(&outer.definitions()), [PYTHON_EXEC]);
        assert!(matches!(
            outer.decide(&call(PYTHON_EXEC)),
            CallDecision::Execute(_)
        ));
        assert!(matches!(
            outer.decide(&call(SHELL_EXEC)),
            CallDecision::Refused { .. }
        ));
        r.revoke();
        assert!(outer.definitions().is_empty());
        assert!(matches!(
            outer.decide(&call(PYTHON_EXEC)),
            CallDecision::Refused { .. }
        ));
    }
}
