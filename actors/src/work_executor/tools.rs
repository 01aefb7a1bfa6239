//! The executor agent's [`ToolExecutor`] for background work (§5.2.1 c1–c2):
//! every call is validated against its declared argument schema, then passed
//! through the `on_tool_call` gates, and only then run in the sandbox via the
//! [`ExecutorRegistry`]. Every executed call lands in the tool ledger, which
//! is the only source of the attempt's artifacts. Gate audit events are
//! collected here as data and persisted by the engine. A `require_approval`
//! gate does not answer the model: [`ToolExecutor::screen`] defers the call,
//! so the tool loop pauses and the engine asks the owner (§5.2.1 c2, §4.24);
//! on approval the resumed run executes exactly that call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::execution::{ExecutionEnvelope, ExecutionResult};
use silas_core::model::gates::{Gate, GateAction, GateTrigger};
use silas_execution::executors::ExecutorRegistry;
use silas_gates::{AuditEvent, TurnBudget};
use silas_llm::provider::{BoxFuture, ToolCall};
use silas_llm::tool_loop::{Screening, ToolExecutor, ToolOutput};
use silas_llm::toolset::{PYTHON_EXEC, RUN_SKILL_SCRIPT, SHELL_EXEC, ToolDef, WEB_SEARCH};

use super::policy::validate_args;
use super::skill_tools::{self, ItemSkills};
use crate::gate_runner::GateHandle;

/// Per-tool-run limits.
#[derive(Clone, Debug)]
pub struct ToolLimits {
    pub timeout_seconds: u64,
    pub max_output_bytes: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            timeout_seconds: 120,
            max_output_bytes: 16_000,
        }
    }
}

/// What one attempt's tool calls did. Serialisable (audit events aside,
/// which are persisted as they happen) so a paused attempt's ledger survives
/// until the run is resumed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Executed calls, in call order.
    pub executed: Vec<ExecutionResult>,
    /// Calls refused before the sandbox (schema, gate block, unavailable,
    /// declined by the owner).
    pub refused: Vec<String>,
    #[serde(skip)]
    pub audit: Vec<AuditEvent>,
}

impl Ledger {
    /// Artifacts of successful executions, later calls overriding earlier
    /// ones (deterministic merge by call sequence, §5.2.1 c3): name → path.
    pub fn artifacts(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for r in self.executed.iter().filter(|r| r.success) {
            for (k, v) in &r.artifacts {
                out.insert(k.clone(), v.clone());
            }
        }
        out
    }
}

/// What the schema check and the `on_tool_call` gates said about a call.
#[derive(Clone, Debug)]
enum Screen {
    /// Not run; the text goes back to the model.
    Refused(String),
    /// A policy gate said `require_approval` (gate-rewritten arguments kept).
    NeedsApproval { why: String, args: JsonObject },
    /// Run with these (possibly gate-rewritten) arguments.
    Ready(JsonObject),
}

/// The background executor's tools.
pub struct WorkTools {
    pub registry: Arc<ExecutorRegistry>,
    pub gate_runner: GateHandle,
    pub gates: Vec<Gate>,
    pub item_id: String,
    pub attempt: u64,
    pub input_artifacts: BTreeMap<String, String>,
    pub limits: ToolLimits,
    pub gate_budget: Mutex<TurnBudget>,
    pub ledger: Mutex<Ledger>,
    /// The call the owner approved (a resumed pause). It satisfies its own
    /// `require_approval` gate exactly once; every other call is screened
    /// as usual, so an approval never leaks to a later call.
    pub approved: Mutex<Option<ToolCall>>,
    /// The screen of the call the loop is about to execute, so the gates
    /// run (and are audited and charged) once per call.
    screened: Mutex<Option<(ToolCall, Screen)>>,
    /// The item's originating scope and the shared §18.5 limits
    /// (`web_search` calls per scope per minute); none: not limited.
    rate: Option<(String, Arc<crate::limits::RuntimeLimits>)>,
    /// A workspace task's copy: every call runs there (issue #15).
    project: Option<silas_execution::executors::ProjectDir>,
    /// The item's skills: `run_skill_script` runs these only.
    skills: Arc<ItemSkills>,
    /// Skills' MCP servers (issue #17): `mcp__<skill>__<tool>` calls.
    pub(super) mcp: Option<Arc<crate::skills_mcp::McpSkills>>,
}

/// Audit event for one sandboxed tool run.
pub const TOOL_EXECUTED: &str = "tool_executed";

fn out(success: bool, content: impl Into<String>) -> ToolOutput {
    ToolOutput {
        success,
        content: content.into(),
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorkTools {
    /// Tools for one attempt; `ledger` carries a paused attempt's calls on
    /// resume, `approved` the owner-approved call.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        registry: Arc<ExecutorRegistry>,
        gate_runner: GateHandle,
        gates: Vec<Gate>,
        item_id: String,
        attempt: u64,
        input_artifacts: BTreeMap<String, String>,
        limits: ToolLimits,
        max_gate_evals: u32,
        ledger: Ledger,
        approved: Option<ToolCall>,
    ) -> Self {
        WorkTools {
            registry,
            gate_runner,
            gates,
            item_id,
            attempt,
            input_artifacts,
            limits,
            gate_budget: Mutex::new(TurnBudget::new(max_gate_evals)),
            ledger: Mutex::new(ledger),
            approved: Mutex::new(approved),
            screened: Mutex::new(None),
            rate: None,
            project: None,
            skills: Arc::default(),
            mcp: None,
        }
    }

    /// Serves `run_skill_script` for `skills` (issue #17).
    pub fn with_skills(mut self, skills: Arc<ItemSkills>) -> Self {
        self.skills = skills;
        self
    }

    /// Serves `mcp__<skill>__<tool>` calls through `mcp` (see `mcp_tools`).
    pub fn with_mcp(mut self, mcp: Option<Arc<crate::skills_mcp::McpSkills>>) -> Self {
        self.mcp = mcp;
        self
    }

    /// Runs every call in `project` (a workspace copy) instead of a fresh dir.
    pub fn with_project(mut self, project: Option<silas_execution::executors::ProjectDir>) -> Self {
        self.project = project;
        self
    }

    /// Applies the §18.5 per-scope `web_search` limit for `scope_id`.
    pub fn with_rate_limits(
        mut self,
        scope_id: &str,
        limits: Arc<crate::limits::RuntimeLimits>,
    ) -> Self {
        self.rate = Some((scope_id.to_owned(), limits));
        self
    }

    /// §18.5: a `web_search` over the scope's per-minute limit is refused
    /// before the provider is contacted — a deterministic tool result for
    /// the model, a `security_rate_limited` audit entry, a refused call in
    /// the ledger.
    fn web_search_refused(&self) -> Option<ToolOutput> {
        let (scope, limits) = self.rate.as_ref()?;
        let kind = limits.web_search(scope, std::time::Instant::now()).err()?;
        let mut data = JsonObject::new();
        data.insert("scope_id".into(), Value::from(scope.as_str()));
        data.insert("limit".into(), Value::from(kind.as_str()));
        data.insert("work_item_id".into(), Value::from(self.item_id.as_str()));
        data.insert("tool_name".into(), Value::from(WEB_SEARCH));
        self.with_ledger(|l| {
            l.refused.push(WEB_SEARCH.to_owned());
            l.audit.push(AuditEvent {
                event: "security_rate_limited".into(),
                data,
            });
        });
        Some(out(false, crate::limits::WEB_SEARCH_RATE_LIMITED_MESSAGE))
    }

    fn with_ledger<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        f(&mut locked(&self.ledger))
    }

    /// Takes the ledger out (end of the attempt).
    pub fn take_ledger(&self) -> Ledger {
        self.with_ledger(std::mem::take)
    }

    /// Schema check, then the `on_tool_call` gates (§5.2.1 c2).
    async fn screen_call(&self, call: &ToolCall, tool: &ToolDef) -> Screen {
        let name = tool.spec.name.as_str();
        let args = call.arguments_json();
        // 1. Schema before anything else.
        if let Err(e) = validate_args(&tool.spec.parameters, &args) {
            return Screen::Refused(format!("invalid arguments for {name}: {e}"));
        }
        let Value::Object(args) = args else {
            return Screen::Refused("arguments must be a JSON object".into());
        };
        // 2. on_tool_call gates (policy lane may rewrite tool_args).
        let mut ctx = JsonObject::new();
        ctx.insert("tool_name".into(), Value::from(name));
        ctx.insert("tool_args".into(), Value::Object(args));
        ctx.insert("work_item_id".into(), Value::from(self.item_id.as_str()));
        let mut budget = *locked(&self.gate_budget);
        let outcome = self
            .gate_runner
            .check_gates(&self.gates, GateTrigger::OnToolCall, None, ctx, &mut budget)
            .await;
        *locked(&self.gate_budget) = budget;
        self.with_ledger(|l| l.audit.extend(outcome.audit.iter().cloned()));
        if let Some(b) = outcome.blocked() {
            let reason = format!("blocked by gate {}: {}", b.gate_name, b.reason);
            return Screen::Refused(format!("E_GATE_BLOCKED: {reason}"));
        }
        let args = match outcome.merged_context.get("tool_args") {
            Some(Value::Object(a)) => a.clone(),
            _ => JsonObject::new(),
        };
        match outcome
            .policy_results
            .iter()
            .find(|r| r.action == GateAction::RequireApproval)
        {
            Some(r) => Screen::NeedsApproval {
                why: format!("{name} needs the owner's approval (gate {})", r.gate_name),
                args,
            },
            None => Screen::Ready(args),
        }
    }

    async fn run(&self, call: &ToolCall, tool: &ToolDef) -> ToolOutput {
        let name = tool.spec.name.as_str();
        let memo = locked(&self.screened)
            .take()
            .filter(|(c, _)| c == call)
            .map(|(_, s)| s);
        let screen = match memo {
            Some(s) => s,
            None => self.screen_call(call, tool).await,
        };
        let args = match screen {
            Screen::Refused(text) => {
                self.with_ledger(|l| l.refused.push(name.to_owned()));
                return out(false, text);
            }
            Screen::Ready(args) => args,
            Screen::NeedsApproval { why, args } => {
                // Only the owner-approved call itself gets past its gate.
                let approved = {
                    let mut a = locked(&self.approved);
                    if a.as_ref() == Some(call) {
                        a.take()
                    } else {
                        None
                    }
                };
                if approved.is_none() {
                    self.with_ledger(|l| l.refused.push(name.to_owned()));
                    return out(false, format!("{why}; the call was not executed"));
                }
                args
            }
        };
        // 3. The sandbox (a skill script: its skill's own runner).
        if name == RUN_SKILL_SCRIPT {
            let (id, seq) = self.next_id(call);
            let r = skill_tools::run_call(&self.skills, &self.item_id, &id, seq, &args).await;
            self.with_ledger(|l| {
                match r.executed {
                    Some(e) => l.executed.push(e),
                    None => l.refused.push(name.to_owned()),
                }
                l.audit.push(r.audit);
            });
            return r.output;
        }
        // 4. A skill's MCP server, or the sandbox.
        if let Some(out) = self.run_mcp(call, name, &args).await {
            return out;
        }
        let Some(env) = self.envelope(call, name, args) else {
            self.with_ledger(|l| l.refused.push(name.to_owned()));
            return out(
                false,
                format!("{name} is not available in background execution"),
            );
        };
        if env.action == WEB_SEARCH
            && let Some(refused) = self.web_search_refused()
        {
            return refused;
        }
        let result = self.registry.execute_in(&env, self.project.as_ref()).await;
        let content = match &result.error {
            None => result.return_value.clone(),
            Some(e) => format!("{}\nerror: {e}", result.return_value),
        };
        let success = result.success;
        // Every sandboxed run is an action the audit log records (ids and
        // outcome only: output is model-influenced and may hold secrets).
        let mut data = JsonObject::new();
        data.insert("work_item_id".into(), Value::from(self.item_id.as_str()));
        data.insert("tool_name".into(), Value::from(name));
        data.insert(
            "execution_id".into(),
            Value::from(result.execution_id.as_str()),
        );
        data.insert("success".into(), Value::from(success));
        self.with_ledger(|l| {
            l.executed.push(result);
            l.audit.push(AuditEvent {
                event: TOOL_EXECUTED.into(),
                data,
            });
        });
        out(success, content)
    }

    /// The next execution id (a plain directory name) and step index.
    fn next_id(&self, call: &ToolCall) -> (String, u64) {
        let seq = self.with_ledger(|l| l.executed.len() + l.refused.len());
        let id = format!("{}-a{}-{}", self.item_id, self.attempt, seq);
        (safe_id(&id, &call.id), seq as u64)
    }

    fn envelope(&self, call: &ToolCall, name: &str, args: JsonObject) -> Option<ExecutionEnvelope> {
        let mut args = args;
        let action = match name {
            SHELL_EXEC => SHELL_EXEC,
            PYTHON_EXEC => {
                // The model-facing parameter is `code`; the executor reads `script`.
                if let Some(code) = args.remove("code") {
                    args.insert("script".into(), code);
                }
                PYTHON_EXEC
            }
            // Offered only when the registry serves it (engine), which
            // reads `query` (and optionally `max_results`).
            WEB_SEARCH => WEB_SEARCH,
            _ => return None,
        };
        let (id, seq) = self.next_id(call);
        let v = json!({
            "execution_id": id,
            "step_index": seq,
            "task_description": self.item_id,
            "action": action,
            "args": Value::Object(args),
            "input_artifacts": self.input_artifacts,
            "timeout_seconds": self.limits.timeout_seconds,
            "max_output_bytes": self.limits.max_output_bytes,
        });
        serde_json::from_value(v).ok()
    }
}

/// An execution id usable as a directory name.
pub(super) fn safe_id(base: &str, call_id: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    format!("{}-{}", clean(base), clean(call_id))
}

impl ToolExecutor for WorkTools {
    fn execute<'a>(&'a self, call: &'a ToolCall, tool: &'a ToolDef) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.run(call, tool))
    }

    /// A `require_approval` gate defers the call: the run pauses (§4.24)
    /// instead of telling the model "no".
    fn screen<'a>(&'a self, call: &'a ToolCall, tool: &'a ToolDef) -> BoxFuture<'a, Screening> {
        Box::pin(async move {
            let screen = self.screen_call(call, tool).await;
            if let Screen::NeedsApproval { why, args } = &screen {
                *locked(&self.screened) = None;
                // The card shows what would run: a gate may have rewritten
                // (redacted) an argument the model wrote.
                let screened = Value::Object(args.clone());
                return Screening::Defer {
                    reason: why.clone(),
                    arguments: (screened != call.arguments_json()).then_some(screened),
                };
            }
            *locked(&self.screened) = Some((call.clone(), screen));
            Screening::Run
        })
    }

    /// A call to a tool that is not offered still counts as refused: the
    /// result names it with the others.
    fn refused(&self, call: &ToolCall, _reason: &str) {
        let name = super::policy::shown_tool_name(&call.name);
        self.with_ledger(|l| l.refused.push(name));
    }
}
