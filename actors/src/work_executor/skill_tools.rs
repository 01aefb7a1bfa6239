//! Skills in background work (§10.3, §10.5, §4.21, issue #17):
//!
//! * [`WorkEngine::resolve_skills`] — before an item runs: its skills (or,
//!   naming none, its parent's with the parent's bound hashes — inheritance),
//!   each installed at its current content *and* at the hash the approved
//!   plan bound (`WorkItem.skill_hashes`, covered by the plan hash the owner
//!   signed). A skill whose content changed since the approval, or one the
//!   plan never bound, stops the item `blocked` with `E_APPROVAL_HASH`
//!   (audited `skill_bound_refused`).
//! * [`ItemSkills`] — what the executor is given: the full SKILL.md
//!   instructions of exactly those skills (the §10.3 execution view) and the
//!   `run_skill_script` tool, offered only when one of them has scripts.
//! * [`run_call`] — one `run_skill_script` call, after the same schema check
//!   and `on_tool_call` gates as every tool ([`super::tools`]): the skill must
//!   be one of the item's, its arguments go to [`SkillHost::run_script_bound`]
//!   (checked against `script_args`, argv only, credentials injected at spawn
//!   and redacted, the skill's declared hosts behind its own egress proxy).
//!   The result is `external` taint: a script's output is data, never
//!   instructions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::execution::ExecutionResult;
use silas_core::model::messages::TaintLevel;
use silas_core::model::work::WorkItem;
use silas_core::{Coded, ErrorCode};
use silas_gates::AuditEvent;
use silas_llm::tool_loop::ToolOutput;
use silas_llm::toolset::{SkillToolset, ToolDef};
use silas_skill::Skill;
use silas_skill::resolver::{AgentLayer, check_bound, inherit, view};

use super::engine::{WorkEngine, WorkError};
use crate::approval::ApprovalService;
use crate::connection::permission_gate::{
    self, PermissionEscalator, PermissionVerdict, ScriptCall,
};
use crate::skills::SkillHost;

/// The skills one work item runs with, checked against its approval.
#[derive(Clone, Default)]
pub struct ItemSkills {
    /// Name → the content hash the approved plan bound (= the installed one).
    pub bound: BTreeMap<String, String>,
    /// The §10.3 execution views, rendered for the executor's prompt.
    pub prompt: Vec<String>,
    /// Skills with scripts (`run_skill_script` is offered for these).
    pub runnable: BTreeSet<String>,
    /// Skills that declare network hosts (their output is fetched data).
    pub networked: BTreeSet<String>,
    pub host: Option<Arc<SkillHost>>,
    /// Connection skills: script → the permissions it declares
    /// (`script_permissions`), checked by the `connection_permission` gate
    /// before it runs (§5.10.2).
    pub script_permissions: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// The connection layer the gate asks (`None`: a script that needs
    /// permissions is refused).
    pub escalator: Option<Arc<dyn PermissionEscalator>>,
    /// Mints and consumes the gate's single-use `[Just this once]` tokens.
    pub approvals: Option<ApprovalService>,
}

impl ItemSkills {
    /// The item's skills, for toolset preparation.
    pub fn names(&self) -> BTreeSet<String> {
        self.bound.keys().cloned().collect()
    }

    /// `core` plus `run_skill_script` for the skills with scripts.
    pub fn toolset(&self, core: Vec<ToolDef>) -> SkillToolset {
        self.runnable
            .iter()
            .fold(SkillToolset::new(core), |t, s| t.with_skill(s, ""))
    }

    fn add(&mut self, skill: &Skill, hash: String) {
        if let Some(v) = view(skill, AgentLayer::Executor) {
            if let silas_skill::resolver::SkillView::Execution { scripts, .. } = &v
                && !scripts.is_empty()
            {
                self.runnable.insert(skill.name.clone());
            }
            self.prompt.push(v.render());
        }
        if !skill.manifest.requirements.network.is_empty() {
            self.networked.insert(skill.name.clone());
        }
        if skill.manifest.kind == Some(silas_skill::manifest::SkillType::Connection)
            && !skill.manifest.script_permissions.is_empty()
        {
            self.script_permissions.insert(
                skill.name.clone(),
                skill.manifest.script_permissions.clone(),
            );
        }
        self.bound.insert(skill.name.clone(), hash);
    }
}

impl WorkEngine {
    /// See the module docs. `Ok(Err(reason))`: the item must not run.
    pub(super) fn resolve_skills(
        &self,
        item: &WorkItem,
    ) -> Result<Result<ItemSkills, String>, WorkError> {
        let mut effective = item.clone();
        if effective.skills.is_empty()
            && let Some(parent) = &item.parent
            && let Some(p) = self.store.work_items().get(parent)?
        {
            inherit(&mut effective, &p);
        }
        if effective.skills.is_empty() {
            return Ok(Ok(ItemSkills::default()));
        }
        let Some(host) = self.skills.clone() else {
            return Ok(Err(format!(
                "{}: the work item names skills but no skill host is available",
                ErrorCode::ESandboxUnavailable
            )));
        };
        let mut out = ItemSkills {
            host: Some(host.clone()),
            escalator: self.connections.clone(),
            approvals: Some(self.approvals.clone()),
            ..ItemSkills::default()
        };
        for name in &effective.skills {
            // Installed at its current content (audited when not).
            let skill = match host.check_use(name) {
                Ok(s) => s,
                Err(e) => return Ok(Err(format!("{}: skill {name}: {e}", e.code()))),
            };
            if let Err(e) = check_bound(&effective, name, &skill) {
                self.audit(
                    "skill_bound_refused",
                    json!({"work_item_id": item.id, "skill": name,
                           "approved": effective.skill_hashes.as_ref().and_then(|m| m.get(name)),
                           "current": skill.content_hash, "code": e.code().as_str()}),
                )?;
                return Ok(Err(format!(
                    "{}: {e}; approve the plan again to use the skill as it is now",
                    e.code()
                )));
            }
            out.add(&skill, skill.content_hash.clone());
        }
        Ok(Ok(out))
    }
}

/// What one `run_skill_script` call produced, for the tool ledger.
pub struct SkillCall {
    pub output: ToolOutput,
    /// `Some` when the script ran (it goes into `Ledger.executed`).
    pub executed: Option<ExecutionResult>,
    pub audit: AuditEvent,
}

fn refused(item_id: &str, skill: &str, reason: String) -> SkillCall {
    let mut data = JsonObject::new();
    data.insert("work_item_id".into(), Value::from(item_id));
    data.insert("skill".into(), Value::from(skill));
    data.insert("reason".into(), Value::from(reason.as_str()));
    SkillCall {
        output: ToolOutput {
            success: false,
            content: reason,
        },
        executed: None,
        audit: AuditEvent {
            event: "skill_tool_refused".into(),
            data,
        },
    }
}

/// Runs one screened `run_skill_script` call (see the module docs).
pub async fn run_call(
    skills: &ItemSkills,
    item_id: &str,
    execution_id: &str,
    step_index: u64,
    args: &JsonObject,
) -> SkillCall {
    let name = args.get("skill").and_then(Value::as_str).unwrap_or("");
    let script = args.get("script").and_then(Value::as_str).unwrap_or("");
    let (Some(hash), Some(host)) = (skills.bound.get(name), skills.host.as_ref()) else {
        return refused(
            item_id,
            name,
            format!(
                "{}: {name:?} is not a skill of this work item",
                ErrorCode::EGateBlocked
            ),
        );
    };
    let call_args = match args.get("args") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return refused(item_id, name, "`args` must be an object".into());
        }
    };
    // §5.10.2: the connection_permission gate, before anything runs.
    let required = skills
        .script_permissions
        .get(name)
        .and_then(|m| {
            m.get(script)
                .or_else(|| m.get(&format!("scripts/{script}")))
        })
        .cloned()
        .unwrap_or_default();
    let call = ScriptCall {
        work_item_id: item_id,
        execution_id,
        skill: name,
        script,
        arguments: &call_args,
    };
    let once = match permission_gate::check(
        skills.escalator.as_deref(),
        skills.approvals.as_ref(),
        &call,
        &required,
    )
    .await
    {
        PermissionVerdict::Granted => None,
        PermissionVerdict::GrantedOnce {
            permissions,
            token_id,
        } => Some((permissions, token_id)),
        PermissionVerdict::Refused(why) => return refused(item_id, name, why),
    };
    let run = host
        .run_script_bound(name, script, &call_args, execution_id, Some(hash))
        .await;
    let out = match run {
        Ok(o) => o,
        // Audited by the host (`skill_use_refused`, with the code).
        Err(e) => return refused(item_id, name, format!("{}: {e}", e.code())),
    };
    let success = out.success();
    let mut content = out.stdout.clone();
    if !success {
        content = format!(
            "{content}\nerror: {:?}\n{}",
            out.termination,
            out.stderr.trim()
        );
    }
    let mut data = JsonObject::new();
    data.insert("work_item_id".into(), Value::from(item_id));
    data.insert(
        "tool_name".into(),
        Value::from(silas_llm::toolset::RUN_SKILL_SCRIPT),
    );
    data.insert("skill".into(), Value::from(name));
    data.insert("script".into(), Value::from(script));
    data.insert(
        "content_hash".into(),
        Value::from(out.content_hash.as_str()),
    );
    data.insert("execution_id".into(), Value::from(execution_id));
    data.insert("success".into(), Value::from(success));
    data.insert(
        "network".into(),
        Value::from(skills.networked.contains(name)),
    );
    data.insert("taint".into(), Value::from(TaintLevel::External.as_str()));
    if let Some((p, token_id)) = once {
        // A single-use grant (`just_this_once`): recorded with the run and
        // its consumed token, not on the connection.
        data.insert("permissions_once".into(), json!(p));
        data.insert("permissions_once_token".into(), Value::from(token_id));
    }
    let executed = serde_json::from_value::<ExecutionResult>(json!({
        "execution_id": execution_id,
        "step_index": step_index,
        "success": success,
        "return_value": content,
        "taint": TaintLevel::External.as_str(),
    }))
    .ok();
    SkillCall {
        output: ToolOutput { success, content },
        executed,
        audit: AuditEvent {
            event: super::tools::TOOL_EXECUTED.into(),
            data,
        },
    }
}
