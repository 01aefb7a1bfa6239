//! MCP servers of installed skills in the daemon (issue #17 item 7):
//!
//! * [`McpSkills::bind_at_install`] — part of the install dry run: the
//!   server starts once from the approved files, lists its tools, and the
//!   list (names, descriptions, input schemas) and its hash are bound to the
//!   installed skill ([`McpBinding`]).
//! * [`McpSkills::offered`] — the bound tools of a work item's usable
//!   skills, offered on the chain's skill stage as `mcp__<skill>__<tool>`.
//! * [`McpSkills::call`] — one call: the skill must still be installed at
//!   its approved content hash; the [`McpRegistry`] starts (or reuses) the
//!   server from the approved bytes with the skill's declared network and
//!   credentials, refuses a server whose tool list no longer hashes to the
//!   bound one, and checks the arguments against the bound schema. The
//!   output is redacted (injected credentials, detected secrets), bounded
//!   and tainted `external`.
//!
//! Audit data names the skill, its content hash, the tools hash and the
//! tool — never arguments, output or a credential value.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use silas_core::config::Config;
use silas_core::model::messages::TaintLevel;
use silas_core::model::skills::{McpBinding, McpToolDecl, check_use};
use silas_core::{Coded, ErrorCode, secrets};
use silas_execution::mcp::{McpError, tools_hash};
use silas_execution::mcp_registry::{McpApproval, McpPlan, McpRegistry};
use silas_skill::{Skill, SkillLoader};
use silas_storage::Store;
use zeroize::Zeroizing;

use crate::skills::Credentials;

/// Where the approved files are staged inside a server's work dir.
const STAGED: &str = "skill";

/// What one MCP tool call returned, ready for the model.
#[derive(Clone, Debug, PartialEq)]
pub struct McpCallOutput {
    /// Redacted and cut to the byte bound.
    pub text: String,
    pub is_error: bool,
    /// Always `external`.
    pub taint: TaintLevel,
    /// Bytes cut off the end.
    pub truncated_bytes: usize,
    pub content_hash: String,
    pub tools_hash: String,
}

/// Why a call did not happen (or failed).
#[derive(Debug, thiserror::Error)]
pub enum McpCallError {
    #[error("{0}")]
    Refused(String, ErrorCode),
    #[error(transparent)]
    Mcp(#[from] McpError),
}

impl Coded for McpCallError {
    fn code(&self) -> ErrorCode {
        match self {
            McpCallError::Refused(_, code) => *code,
            McpCallError::Mcp(e) => e.code(),
        }
    }
}

pub struct McpSkills {
    store: Store,
    loader: SkillLoader,
    registry: Arc<McpRegistry>,
    credentials: Credentials,
    max_output_bytes: usize,
}

fn prepare_error(skill: &str, code: ErrorCode, detail: impl Into<String>) -> McpError {
    McpError::Prepare {
        skill: skill.to_string(),
        code,
        detail: detail.into(),
    }
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o755)
        .open(path)?
        .write_all(bytes)
}

impl McpSkills {
    pub fn new(
        store: Store,
        config: &Config,
        registry: Arc<McpRegistry>,
        credentials: Credentials,
    ) -> Self {
        McpSkills {
            store,
            loader: SkillLoader::new(&config.skills_dir),
            registry,
            credentials,
            max_output_bytes: 16_000,
        }
    }

    /// Output above this many bytes is cut (default 16,000).
    pub fn with_max_output_bytes(mut self, n: usize) -> Self {
        self.max_output_bytes = n;
        self
    }

    pub fn registry(&self) -> &Arc<McpRegistry> {
        &self.registry
    }

    fn audit(&self, event: &str, data: Value) {
        let Value::Object(data) = data else { return };
        if let Err(e) = self.store.audit().log(event, data) {
            tracing::warn!(error = %e, event, "cannot audit an MCP event");
        }
    }

    /// Stages exactly the approved bytes (one snapshot, hash checked) and
    /// resolves the declared credentials, inside the session's work dir.
    fn prepare(
        &self,
        skill: &Skill,
        approved_hash: &str,
    ) -> impl FnOnce(&Path) -> Result<McpPlan, McpError> + use<> {
        let name = skill.name.clone();
        let dir = skill.dir.clone();
        let approved = approved_hash.to_string();
        let server = skill.manifest.mcp_server.clone();
        let req = skill.manifest.requirements.clone();
        let credentials = self.credentials.clone();
        move |work: &Path| {
            let Some(server) = server else {
                return Err(prepare_error(
                    &name,
                    ErrorCode::ECfgInvalid,
                    "the skill declares no mcp_server",
                ));
            };
            let Some(command) = server.relative_command().map(Path::to_path_buf) else {
                return Err(prepare_error(
                    &name,
                    ErrorCode::ECfgInvalid,
                    "the server command must be a file inside the skill",
                ));
            };
            let snap = silas_skill::snapshot::take(&dir)
                .map_err(|e| prepare_error(&name, ErrorCode::ECfgIo, e.to_string()))?;
            let current = snap.content_hash().unwrap_or_default();
            if current != approved {
                return Err(prepare_error(
                    &name,
                    ErrorCode::EApprovalHash,
                    format!(
                        "the skill changed since it was approved (approved {approved}, now {current}); approve it again"
                    ),
                ));
            }
            let staged = work.join(STAGED);
            for f in &snap.files {
                write_new(&staged.join(&f.path), &f.bytes, f.mode).map_err(|e| {
                    prepare_error(
                        &name,
                        ErrorCode::ESandboxUnavailable,
                        format!("cannot stage {}: {e}", f.path),
                    )
                })?;
            }
            let mut env = vec![
                (
                    "PATH".to_string(),
                    "/usr/local/bin:/usr/bin:/bin".to_string(),
                ),
                ("HOME".to_string(), work.display().to_string()),
            ];
            for r in &req.credentials {
                let bytes = (*credentials)(r).map_err(|_| {
                    // The store's message may say more than the ref; the ref is enough.
                    prepare_error(
                        &name,
                        ErrorCode::ECfgKeystore,
                        format!("credential ref {r:?} could not be read from the secret store"),
                    )
                })?;
                env.push((r.clone(), String::from_utf8_lossy(&bytes).into_owned()));
            }
            Ok(McpPlan {
                skill_dir: staged,
                command,
                args: server.args,
                env,
                hosts: req.network,
            })
        }
    }

    /// The install dry run's part for a skill declaring an MCP server
    /// (`None` when it declares none): start it from the approved files,
    /// list and hash its tools, stop it.
    pub async fn bind_at_install(
        &self,
        skill: &Skill,
        approved_hash: &str,
    ) -> Result<Option<McpBinding>, McpError> {
        if skill.manifest.mcp_server.is_none() {
            return Ok(None);
        }
        let tools = self
            .registry
            .list_for_install(&skill.name, self.prepare(skill, approved_hash))
            .await?;
        Ok(Some(McpBinding {
            tools_hash: tools_hash(&tools),
            tools: tools
                .into_iter()
                .map(|t| McpToolDecl {
                    name: t.name,
                    description: t.description,
                    input_schema: t.input_schema,
                })
                .collect(),
        }))
    }

    /// The bound MCP tools of those of `skills` that are installed, at
    /// their approved content hash, with a binding: `(skill, tool)`.
    pub fn offered(&self, skills: &BTreeSet<String>) -> Vec<(String, McpToolDecl)> {
        let records = self
            .store
            .records::<silas_core::model::skills::InstalledSkill>();
        let mut out = Vec::new();
        for name in skills {
            let Ok(Some(rec)) = records.get(name) else {
                continue;
            };
            let Some(binding) = &rec.mcp else { continue };
            let usable = self
                .loader
                .load(name)
                .is_ok_and(|s| check_use(name, Some(&rec), &s.content_hash).is_ok());
            if !usable {
                continue;
            }
            out.extend(binding.tools.iter().map(|t| (name.clone(), t.clone())));
        }
        out
    }

    /// One call of `tool` on `skill`'s server for `work_item_id` (see the
    /// module docs). Every outcome is audited.
    pub async fn call(
        &self,
        skill: &str,
        tool: &str,
        args: Map<String, Value>,
        work_item_id: &str,
    ) -> Result<McpCallOutput, McpCallError> {
        let result = self.call_inner(skill, tool, args).await;
        match &result {
            Ok(out) => self.audit(
                "mcp_tool_called",
                json!({"skill": skill, "tool": tool, "content_hash": out.content_hash,
                       "tools_hash": out.tools_hash, "work_item_id": work_item_id,
                       "is_error": out.is_error, "truncated_bytes": out.truncated_bytes}),
            ),
            Err(McpCallError::Mcp(McpError::ToolsChanged {
                approved, offered, ..
            })) => self.audit(
                "mcp_server_refused",
                json!({"skill": skill, "tool": tool, "work_item_id": work_item_id,
                       "approved_tools_hash": approved, "offered_tools_hash": offered,
                       "code": ErrorCode::EApprovalHash.as_str(),
                       "reason": "the server's tools changed since approval"}),
            ),
            Err(e) => self.audit(
                "mcp_tool_refused",
                json!({"skill": skill, "tool": tool, "work_item_id": work_item_id,
                       "code": e.code().as_str()}),
            ),
        }
        result
    }

    async fn call_inner(
        &self,
        name: &str,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<McpCallOutput, McpCallError> {
        let refused = |why: String, code| McpCallError::Refused(why, code);
        let skill = self
            .loader
            .load(name)
            .map_err(|e| refused(e.to_string(), e.code()))?;
        let rec = self
            .store
            .records::<silas_core::model::skills::InstalledSkill>()
            .get(name)
            .map_err(|e| refused(e.to_string(), e.code()))?;
        check_use(name, rec.as_ref(), &skill.content_hash)
            .map_err(|e| refused(e.to_string(), e.code()))?;
        let Some((rec, binding)) = rec.as_ref().and_then(|r| Some((r, r.mcp.as_ref()?))) else {
            return Err(refused(
                format!("skill {name} has no MCP server bound at install; approve it again"),
                ErrorCode::EApprovalScope,
            ));
        };
        let approval = McpApproval {
            content_hash: rec.content_hash.clone(),
            tools_hash: binding.tools_hash.clone(),
        };
        let prepare = self.prepare(&skill, &rec.content_hash);
        let out = self
            .registry
            .call(name, &approval, prepare, tool, args)
            .await?;
        // Injected credential values never reach the model, whatever the
        // server echoes; then every detected secret.
        let mut text = out.text;
        for r in &skill.manifest.requirements.credentials {
            if let Ok(v) = (*self.credentials)(r) {
                let v = Zeroizing::new(String::from_utf8_lossy(&v).into_owned());
                if !v.is_empty() {
                    text = text.replace(v.as_str(), silas_skill::run::REDACTED);
                }
            }
        }
        let text = secrets::redact(&text).0;
        let (text, truncated_bytes) = cut(text, self.max_output_bytes);
        Ok(McpCallOutput {
            text,
            is_error: out.is_error,
            taint: out.taint,
            truncated_bytes,
            content_hash: approval.content_hash,
            tools_hash: approval.tools_hash,
        })
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(mut text: String, max: usize) -> (String, usize) {
    if text.len() <= max {
        return (text, 0);
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let cut = text.len() - at;
    text.truncate(at);
    (text, cut)
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn output_is_cut_on_a_character_boundary() {
        assert_eq!(cut("abc".into(), 5), ("abc".into(), 0));
        assert_eq!(cut("abcdef".into(), 4), ("abcd".into(), 2));
        // "é" is two bytes: never split.
        assert_eq!(cut("aé".into(), 2), ("a".into(), 2));
    }
}
