//! MCP servers as skills (issue #17 item 7, beyond the spec): a skill's
//! stdio Model Context Protocol server runs as a long-lived sandbox process
//! ([`silas_sandbox::SandboxProcess`]) with the skill folder read-only, its
//! own fresh work dir, and only the network and environment the caller
//! grants (the skill's declarations). The client side is the official SDK
//! (`rmcp`) over the process's stdin/stdout.
//!
//! The server's tool list and descriptions are hashed
//! ([`tools_hash`]) and must equal the hash bound to the approved skill: a
//! server that changes what it offers — whatever made it change — is
//! refused (`E_APPROVAL_HASH`) and killed until the owner approves again.
//! Every result comes back as [`McpToolOutput`], tainted `external`.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use silas_core::model::messages::TaintLevel;
use silas_core::{Coded, ErrorCode};
use silas_sandbox::{SandboxError, SandboxProcess, SandboxSpec, SubprocessSandbox};

/// How long the server may take to answer `initialize` and `tools/list`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest message (one JSON-RPC line) a server may send. rmcp discards
/// a line over its own 16 MiB limit and reads on, so the request it
/// answered waited for its whole timeout; past this limit the server's
/// output ends instead, and every waiting request fails at once.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// The server's stdout, ended with an error at the first line longer than
/// `cap` bytes (`over` records why, for the caller's error message).
struct LineCap<R> {
    inner: R,
    line: usize,
    cap: usize,
    over: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        for segment in buf.filled()[before..].split_inclusive(|b| *b == b'\n') {
            let ended = segment.last() == Some(&b'\n');
            this.line += segment.len() - usize::from(ended);
            if this.line > this.cap {
                this.over.store(true, Ordering::SeqCst);
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a message over {} bytes", this.cap),
                )));
            }
            if ended {
                this.line = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The longest function name model APIs take (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME: usize = 64;

/// The prefix executors see MCP tools under, `mcp__<skill>__<tool>`
/// (`silas_llm::toolset::MCP_TOOL_PREFIX`, a layer above; a test keeps
/// them equal).
pub const TOOL_PREFIX: &str = "mcp__";

/// Whether `tool` of `skill` makes a function name model APIs accept once
/// namespaced: `../../escape` or a 100-character name would have every
/// request naming the skill refused by a real provider.
pub fn valid_tool_name(skill: &str, tool: &str) -> bool {
    let full = TOOL_PREFIX.len() + skill.len() + 2 + tool.len();
    !tool.is_empty()
        && full <= MAX_TOOL_NAME
        && tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why an MCP server cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("E_SANDBOX_FAILED: MCP server of skill {skill}: {detail}")]
    Protocol { skill: String, detail: String },
    /// The server offers other tools (or other words for them) than the
    /// owner approved.
    #[error(
        "E_APPROVAL_HASH: the MCP server of skill {skill} changed its tools since approval (approved {approved}, now {offered}); approve the skill again"
    )]
    ToolsChanged {
        skill: String,
        approved: String,
        offered: String,
    },
    #[error("E_SANDBOX_FAILED: skill {skill} has no MCP tool {tool:?}")]
    UnknownTool { skill: String, tool: String },
    /// Refused before the server saw it.
    #[error("E_CFG_INVALID: invalid arguments for MCP tool {tool} of skill {skill}: {why}")]
    InvalidArguments {
        skill: String,
        tool: String,
        why: String,
    },
    /// The server failed (crashed, broke the protocol, or did not start)
    /// more often than it may be restarted.
    #[error(
        "E_SANDBOX_FAILED: the MCP server of skill {skill} failed {failures} time(s); it is not restarted again before the daemon restarts or the skill is approved again"
    )]
    GaveUp { skill: String, failures: u32 },
    /// What the caller had to prepare for the start failed (staging the
    /// approved files, a credential, the skill's declarations).
    #[error("{code}: MCP server of skill {skill}: {detail}")]
    Prepare {
        skill: String,
        code: ErrorCode,
        detail: String,
    },
    #[error("E_SANDBOX_UNAVAILABLE: the MCP servers are shut down")]
    ShutDown,
}

impl Coded for McpError {
    fn code(&self) -> ErrorCode {
        match self {
            McpError::Sandbox(e) => e.code(),
            McpError::ToolsChanged { .. } => ErrorCode::EApprovalHash,
            McpError::Protocol { .. } | McpError::UnknownTool { .. } | McpError::GaveUp { .. } => {
                ErrorCode::ESandboxFailed
            }
            McpError::Prepare { code, .. } => *code,
            McpError::InvalidArguments { .. } => ErrorCode::ECfgInvalid,
            McpError::ShutDown => ErrorCode::ESandboxUnavailable,
        }
    }
}

/// What to start: the skill's declared server and what it is granted.
#[derive(Clone, Debug)]
pub struct McpLaunch {
    pub skill: String,
    /// The installed skill folder (granted read-only).
    pub skill_dir: PathBuf,
    /// `mcp_server.command`, relative inside the skill folder.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// A fresh work dir for this server (`SubprocessSandbox::fresh_work_dir`).
    pub work_dir: PathBuf,
    /// The skill's declared environment (credential values injected here
    /// from the secret store, never seen by the model).
    pub env: Vec<(String, String)>,
    /// The skill's declared network: `Some(port)` = through the egress proxy.
    pub egress_proxy_port: Option<u16>,
    /// The server's whole lifetime.
    pub lifetime: Duration,
}

impl McpLaunch {
    /// The sandbox spec: argv by interpreter, never through a shell.
    pub fn spec(&self) -> Result<SandboxSpec, McpError> {
        let inside = self
            .command
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || self.command.as_os_str().is_empty() {
            return Err(self.protocol("the server command must be a file inside the skill"));
        }
        let path = self.skill_dir.join(&self.command).display().to_string();
        let mut argv = match self.command.extension().and_then(|e| e.to_str()) {
            Some("py") => vec!["python3".to_string(), "-u".into(), path],
            Some("sh") => vec!["/bin/sh".to_string(), path],
            _ => vec![path],
        };
        argv.extend(self.args.iter().cloned());
        let mut spec = SandboxSpec::new(argv, self.work_dir.clone());
        // Python must not write __pycache__ into the skill (its hash would change).
        spec.env
            .push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        spec.env.extend(self.env.iter().cloned());
        spec.read_paths.push(self.skill_dir.clone());
        spec.network = self.egress_proxy_port.is_some();
        spec.egress_proxy_port = self.egress_proxy_port;
        spec.timeout = self.lifetime;
        Ok(spec)
    }

    fn protocol(&self, detail: impl std::fmt::Display) -> McpError {
        McpError::Protocol {
            skill: self.skill.clone(),
            detail: detail.to_string(),
        }
    }
}

/// One tool as the server describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct McpTool {
    pub name: String,
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

/// One tool result: the text the server returned, tainted `external`.
#[derive(Clone, Debug, PartialEq)]
pub struct McpToolOutput {
    pub text: String,
    /// The server said the call failed.
    pub is_error: bool,
    /// Always [`TaintLevel::External`]: a server's output is untrusted data.
    pub taint: TaintLevel,
}

/// The hash bound to the approved skill: a version tag, then per tool (by
/// name) its name, description and argument schema, keys sorted.
pub fn tools_hash(tools: &[McpTool]) -> String {
    let mut sorted: Vec<&McpTool> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = Sha256::new();
    h.update(b"silas-mcp-tools-v1\n");
    for t in sorted {
        for part in [
            t.name.as_bytes(),
            t.description.as_bytes(),
            canonical(&t.input_schema).as_bytes(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON text with object keys sorted at every level, whatever order the
/// server (or `serde_json`'s map) keeps.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// A running, verified MCP server of one skill. Dropping it kills the
/// server and everything it started.
pub struct McpSession {
    skill: String,
    tools: Vec<McpTool>,
    tools_hash: String,
    client: RunningService<RoleClient, ()>,
    /// The server sent a message over [`MAX_MESSAGE_BYTES`] (its output was
    /// ended there).
    oversized: Arc<AtomicBool>,
    // Last: the client's transport must close before the process is killed.
    process: SandboxProcess,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("skill", &self.skill)
            .field("tools", &self.tools.len())
            .field("tools_hash", &self.tools_hash)
            .finish()
    }
}

impl McpSession {
    /// Start the server confined, initialize, list its tools and hash them.
    /// With `approved_hash`, a different list is refused and the server
    /// killed; `None` is for the install flow, which shows the hash on the
    /// skill's approval card and binds it.
    pub async fn start(
        sandbox: &SubprocessSandbox,
        launch: &McpLaunch,
        approved_hash: Option<&str>,
    ) -> Result<McpSession, McpError> {
        let spec = launch.spec()?;
        let mut process = sandbox.spawn(&spec).await?;
        let (Some(stdin), Some(stdout)) = (process.take_stdin(), process.take_stdout()) else {
            return Err(launch.protocol("the server process has no pipes"));
        };
        let oversized = Arc::new(AtomicBool::new(false));
        let stdout = LineCap {
            inner: stdout,
            line: 0,
            cap: MAX_MESSAGE_BYTES,
            over: oversized.clone(),
        };
        let handshake = async {
            let client = ()
                .serve((stdout, stdin))
                .await
                .map_err(|e| launch.protocol(format!("initialize: {e}")))?;
            let listed = client
                .list_all_tools()
                .await
                .map_err(|e| launch.protocol(format!("tools/list: {e}")))?;
            Ok::<_, McpError>((client, listed))
        };
        let (client, listed) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| launch.protocol("no answer to initialize/tools/list"))??;
        let tools: Vec<McpTool> = listed
            .into_iter()
            .map(|t| McpTool {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        // Before the hash: a server with one unusable name is refused at
        // the install dry run, not bound and offered to every executor.
        if let Some(bad) = tools
            .iter()
            .find(|t| !valid_tool_name(&launch.skill, &t.name))
        {
            return Err(launch.protocol(format!(
                "tool name {:?} is refused: model APIs take letters, digits, '_' and '-', and {}{}__<tool> at most {MAX_TOOL_NAME} characters",
                silas_core::terminal::one_line(&bad.name.chars().take(80).collect::<String>()),
                TOOL_PREFIX,
                launch.skill
            )));
        }
        let hash = tools_hash(&tools);
        if let Some(approved) = approved_hash
            && approved != hash
        {
            // `process` drops here: the server and its descendants die.
            return Err(McpError::ToolsChanged {
                skill: launch.skill.clone(),
                approved: approved.to_string(),
                offered: hash,
            });
        }
        Ok(McpSession {
            skill: launch.skill.clone(),
            tools,
            tools_hash: hash,
            client,
            oversized,
            process,
        })
    }

    pub fn skill(&self) -> &str {
        &self.skill
    }

    /// The tools, as verified at start (register them with
    /// `SkillToolset::with_mcp_tool`).
    pub fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    pub fn tools_hash(&self) -> &str {
        &self.tools_hash
    }

    /// Kill the server and everything it started now (also on drop), even
    /// while a call still holds the session.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Call one tool. Only tools of the verified list may be called, only
    /// with arguments its (verified) input schema accepts; the approval
    /// decision is the toolset chain's, before this is reached.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        timeout: Duration,
    ) -> Result<McpToolOutput, McpError> {
        let Some(listed) = self.tools.iter().find(|t| t.name == tool) else {
            return Err(McpError::UnknownTool {
                skill: self.skill.clone(),
                tool: tool.to_string(),
            });
        };
        let arguments = Value::Object(arguments);
        if let Err(why) = crate::mcp_schema::check(&listed.input_schema, &arguments) {
            return Err(McpError::InvalidArguments {
                skill: self.skill.clone(),
                tool: tool.to_string(),
                why,
            });
        }
        let Value::Object(arguments) = arguments else {
            return Err(McpError::InvalidArguments {
                skill: self.skill.clone(),
                tool: tool.to_string(),
                why: "arguments must be an object".into(),
            });
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let protocol = |detail: String| McpError::Protocol {
            skill: self.skill.clone(),
            detail: if self.oversized.load(Ordering::SeqCst) {
                format!("{detail} (the server sent a message over {MAX_MESSAGE_BYTES} bytes)")
            } else {
                detail
            },
        };
        let result = tokio::time::timeout(timeout, self.client.call_tool(params))
            .await
            .map_err(|_| protocol(format!("tools/call {tool} timed out")))?
            .map_err(|e| protocol(format!("tools/call {tool}: {e}")))?;
        let text = result
            .content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(McpToolOutput {
            text,
            is_error: result.is_error.unwrap_or(false),
            taint: TaintLevel::External,
        })
    }
}
