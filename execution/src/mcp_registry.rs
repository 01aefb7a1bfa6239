//! The daemon's MCP servers (issue #17 item 7): one [`McpSession`] per
//! skill, started lazily by the first call that needs it, reused by later
//! calls, stopped when idle for [`McpRegistryConfig::idle_timeout`]
//! ([`McpRegistry::reap_idle`], run by [`McpRegistry::spawn_reaper`]) and at
//! shutdown ([`McpRegistry::shutdown`]), and restarted after a failure at
//! most [`McpRegistryConfig::max_restarts`] times.
//!
//! Every start verifies the server's tool list against the hash bound at
//! install ([`McpApproval::tools_hash`]); a server that offers anything else
//! is refused and stays refused (without being started again) until the
//! skill is approved again — a new [`McpApproval`].
//!
//! Network: a skill that declares hosts gets its own egress proxy for the
//! session's lifetime, reaching only those hosts
//! ([`EgressProxy::start_for_hosts`]); without declared hosts the server
//! has no network at all.
//!
//! What to start comes from the caller, who stages the approved files and
//! resolves credentials into a fresh work dir ([`McpPlan`]): this crate
//! knows neither skills nor the secret store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use silas_netguard::{EgressLimits, EgressProxy, NetworkGuard};
use silas_sandbox::SubprocessSandbox;

use crate::mcp::{McpError, McpLaunch, McpSession, McpTool, McpToolOutput};

/// Lifecycle bounds.
#[derive(Clone, Debug)]
pub struct McpRegistryConfig {
    /// Per-session work dirs are created here.
    pub work_base: PathBuf,
    /// A server unused this long is stopped (the next call starts it again).
    pub idle_timeout: Duration,
    /// Restarts after failures (crash, protocol error, failed start) per
    /// skill and approval; past them the skill's server stays down.
    pub max_restarts: u32,
    /// One server's whole lifetime (the sandbox kills it after).
    pub lifetime: Duration,
    /// One tool call.
    pub call_timeout: Duration,
}

impl McpRegistryConfig {
    pub fn new(work_base: PathBuf) -> Self {
        McpRegistryConfig {
            work_base,
            idle_timeout: Duration::from_secs(600),
            max_restarts: 3,
            lifetime: Duration::from_secs(24 * 3600),
            call_timeout: Duration::from_secs(120),
        }
    }
}

/// What the owner approved for one skill's server: a session started for
/// another approval is stopped and the failure count starts afresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpApproval {
    pub content_hash: String,
    pub tools_hash: String,
}

/// One start, as the caller prepared it inside the fresh work dir.
#[derive(Clone, Debug)]
pub struct McpPlan {
    /// The staged (approved) skill files.
    pub skill_dir: PathBuf,
    /// `mcp_server.command`, relative inside the skill.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Declared environment, credential values resolved.
    pub env: Vec<(String, String)>,
    /// Declared network hosts (empty: no network).
    pub hosts: Vec<String>,
}

/// A running server with what it needs for its lifetime.
struct Running {
    session: McpSession,
    // Dropped with the session: the server's only way out.
    _proxy: Option<EgressProxy>,
    work_dir: PathBuf,
    last_used: Mutex<Instant>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.session.kill();
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

impl Running {
    fn touch(&self) {
        *self
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }
}

#[derive(Default)]
struct Slot {
    live: Option<Arc<Running>>,
    approval: Option<McpApproval>,
    failures: u32,
    /// The offered hash of a server refused for this approval.
    refused: Option<String>,
}

/// See the module docs.
pub struct McpRegistry {
    sandbox: SubprocessSandbox,
    config: McpRegistryConfig,
    /// Decides the proxy's destinations for skills that declare hosts;
    /// `None`: such skills' servers do not start.
    guard: Option<NetworkGuard>,
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    seq: AtomicU64,
    closed: AtomicBool,
}

impl McpRegistry {
    pub fn new(sandbox: SubprocessSandbox, config: McpRegistryConfig) -> Self {
        McpRegistry {
            sandbox,
            config,
            guard: None,
            slots: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Lets skills that declare hosts reach them through a per-session
    /// egress proxy checked by `guard`.
    pub fn with_egress_guard(mut self, guard: NetworkGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// [`Self::with_egress_guard`] with the default guard over the system
    /// resolver (no trusted private ranges, the always-blocked ports) — what
    /// network verification checks use. If it cannot be built, skills that
    /// declare hosts fail closed.
    pub fn with_system_egress_guard(mut self) -> Self {
        self.guard = NetworkGuard::new(
            &silas_netguard::NetworkGuardConfig::default(),
            Arc::new(silas_netguard::SystemResolver),
        )
        .ok();
        self
    }

    pub fn config(&self) -> &McpRegistryConfig {
        &self.config
    }

    fn slot(&self, skill: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(skill.to_string())
            .or_default()
            .clone()
    }

    fn all_slots(&self) -> Vec<Arc<tokio::sync::Mutex<Slot>>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Start the server confined, verify it (with `approved_tools_hash`),
    /// and keep what it needs. Nothing is left behind on failure.
    async fn start(
        &self,
        skill: &str,
        approved_tools_hash: Option<&str>,
        prepare: impl FnOnce(&Path) -> Result<McpPlan, McpError>,
    ) -> Result<Running, McpError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(McpError::ShutDown);
        }
        // Unique across daemon runs too: a dir a crash left behind must not
        // make the next start fail.
        let n = self.seq.fetch_add(1, Ordering::SeqCst);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let id = format!("mcp-{skill}-{}-{nanos}-{n}", std::process::id());
        let work = self.sandbox.fresh_work_dir(&self.config.work_base, &id)?;
        let started = self
            .start_in(skill, &work, approved_tools_hash, prepare)
            .await;
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&work);
        }
        started
    }

    async fn start_in(
        &self,
        skill: &str,
        work: &Path,
        approved_tools_hash: Option<&str>,
        prepare: impl FnOnce(&Path) -> Result<McpPlan, McpError>,
    ) -> Result<Running, McpError> {
        let plan = prepare(work)?;
        self.sandbox.hand_over_tree(work)?;
        let proxy = if plan.hosts.is_empty() {
            None
        } else {
            let Some(guard) = self.guard.clone() else {
                return Err(McpError::Prepare {
                    skill: skill.to_string(),
                    code: silas_core::ErrorCode::ESandboxUnavailable,
                    detail: format!(
                        "it declares network hosts ({}) but no egress guard is configured",
                        plan.hosts.join(", ")
                    ),
                });
            };
            let rules = plan.hosts.clone();
            let proxy = EgressProxy::start_for_hosts(guard, EgressLimits::default(), rules)
                .await
                .map_err(|e| McpError::Prepare {
                    skill: skill.to_string(),
                    code: silas_core::ErrorCode::ESandboxUnavailable,
                    detail: format!("cannot start its egress proxy: {e}"),
                })?;
            Some(proxy)
        };
        let launch = McpLaunch {
            skill: skill.to_string(),
            skill_dir: plan.skill_dir,
            command: plan.command,
            args: plan.args,
            work_dir: work.to_path_buf(),
            env: plan.env,
            egress_proxy_port: proxy.as_ref().map(EgressProxy::port),
            lifetime: self.config.lifetime,
        };
        let session = McpSession::start(&self.sandbox, &launch, approved_tools_hash).await?;
        Ok(Running {
            session,
            _proxy: proxy,
            work_dir: work.to_path_buf(),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// The install dry run: start the server from the approved files once,
    /// list its tools, stop it. The caller hashes and binds the list.
    pub async fn list_for_install(
        &self,
        skill: &str,
        prepare: impl FnOnce(&Path) -> Result<McpPlan, McpError>,
    ) -> Result<Vec<McpTool>, McpError> {
        let running = self.start(skill, None, prepare).await?;
        Ok(running.session.tools().to_vec())
        // `running` drops here: the server is killed, its work dir removed.
    }

    /// The live session for `approval`, started when there is none.
    async fn running(
        &self,
        skill: &str,
        approval: &McpApproval,
        prepare: impl FnOnce(&Path) -> Result<McpPlan, McpError>,
    ) -> Result<Arc<Running>, McpError> {
        let slot = self.slot(skill);
        let mut s = slot.lock().await;
        if s.approval.as_ref() != Some(approval) {
            // Approved again (or first use): whatever ran under the old
            // approval stops; failures and refusals start afresh.
            *s = Slot {
                approval: Some(approval.clone()),
                ..Slot::default()
            };
        }
        if let Some(offered) = &s.refused {
            return Err(McpError::ToolsChanged {
                skill: skill.to_string(),
                approved: approval.tools_hash.clone(),
                offered: offered.clone(),
            });
        }
        if let Some(r) = &s.live {
            r.touch();
            return Ok(r.clone());
        }
        if s.failures > self.config.max_restarts {
            return Err(McpError::GaveUp {
                skill: skill.to_string(),
                failures: s.failures,
            });
        }
        match self.start(skill, Some(&approval.tools_hash), prepare).await {
            Ok(r) => {
                let r = Arc::new(r);
                s.live = Some(r.clone());
                Ok(r)
            }
            Err(e) => {
                match &e {
                    McpError::ToolsChanged { offered, .. } => s.refused = Some(offered.clone()),
                    McpError::ShutDown => {}
                    // A server that cannot start counts like one that crashed,
                    // so a broken one is not started for every call forever.
                    _ => s.failures += 1,
                }
                Err(e)
            }
        }
    }

    /// Call `tool` of `skill`'s server (started if needed). A protocol
    /// failure (crash, broken pipe, timeout) stops the session and counts
    /// towards the restart limit; the next call starts it again.
    pub async fn call(
        &self,
        skill: &str,
        approval: &McpApproval,
        prepare: impl FnOnce(&Path) -> Result<McpPlan, McpError>,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<McpToolOutput, McpError> {
        let running = self.running(skill, approval, prepare).await?;
        // A call abandoned mid-way (its work item cancelled, its run
        // killed) leaves the server busy with it: a hung call then held up
        // every later one for the whole timeout. The server goes with it.
        let mut abandoned = KillUnlessDone(Some(running.clone()));
        let result = running
            .session
            .call(tool, arguments, self.config.call_timeout)
            .await;
        abandoned.0 = None;
        running.touch();
        if let Err(McpError::Protocol { .. }) = &result {
            let slot = self.slot(skill);
            let mut s = slot.lock().await;
            if s.live.as_ref().is_some_and(|l| Arc::ptr_eq(l, &running)) {
                s.live = None;
                s.failures += 1;
            }
            // Killed now, not when the last holder lets go: a server that
            // hung one call would otherwise keep every other call already
            // waiting on it (another work item's) for its whole timeout.
            running.session.kill();
        }
        result
    }

    /// Stop every server idle for longer than the idle timeout; returns how
    /// many were stopped. A server busy starting is left alone.
    pub fn reap_idle(&self) -> usize {
        let mut stopped = 0;
        for slot in self.all_slots() {
            let Ok(mut s) = slot.try_lock() else { continue };
            if s.live
                .as_ref()
                .is_some_and(|r| r.idle_for() >= self.config.idle_timeout)
            {
                s.live = None;
                stopped += 1;
            }
        }
        stopped
    }

    /// Reaps idle servers every half idle timeout until the registry is
    /// shut down (or dropped).
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = (self.config.idle_timeout / 2).max(Duration::from_millis(50));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(reg) = weak.upgrade() else { return };
                if reg.closed.load(Ordering::SeqCst) {
                    return;
                }
                reg.reap_idle();
            }
        })
    }

    /// Stop every server now and start none after.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for slot in self.all_slots() {
            let mut s = slot.lock().await;
            if let Some(r) = s.live.take() {
                // Killed even if a call still holds the session.
                r.session.kill();
            }
        }
    }

    /// Skills whose server is running now, by name.
    pub fn running_skills(&self) -> Vec<String> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<String> = slots
            .iter()
            .filter(|(_, s)| s.try_lock().map(|s| s.live.is_some()).unwrap_or(true))
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }
}

/// Kills the server it holds when dropped still holding it: the call it
/// guards was dropped before it finished.
struct KillUnlessDone(Option<Arc<Running>>);

impl Drop for KillUnlessDone {
    fn drop(&mut self) {
        if let Some(running) = self.0.take() {
            running.session.kill();
        }
    }
}
