//! Connections are skills, in the daemon (§5.10, §10.6): the connection
//! skill's scripts run in the sandbox, and setup conversations reach the
//! owner as cards.
//!
//! Every run starts the same way: the skill must be installed at exactly
//! its approved hash ([`SkillHost::check_use`], refusals audited), its
//! approved bytes are staged into a fresh sandbox work dir (never the
//! folder, which could change after the check), and it gets the network
//! only to the hosts it declares, through a per-run egress proxy
//! ([`ConnectionEgress`]). Secrets are injected at spawn from the secret
//! store (`CONNECTION_TOKEN` = the connection's `access` token); a `token`
//! line on a script's stdout goes straight into the secret store under the
//! connection's namespace. No secret value is logged, audited or framed.
//!
//! * [`SkillScripts`] — [`ConnectionScripts`] over `scripts/health_check.py`,
//!   `scripts/refresh_token.py`, `scripts/recover.py` (replaces the old
//!   "skills not installed" stand-in).
//! * [`ConnectionRuntime::start_setup`] — a setup conversation: the
//!   `scripts/setup.py` long-lived process; device-code / browser-redirect
//!   steps become `connection_setup_step` cards, secure input a
//!   `secure_input_request` card (the value goes `POST /secrets/{ref_id}` →
//!   secret store → the script's stdin); `done` registers the connection
//!   active (the Scheduler then runs its health check); a cancel on a card,
//!   a card timing out, the setup timeout or the daemon stopping kills the
//!   script and removes what it stored. The conversation lives in
//!   `runtime/setup_flow.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use silas_core::model::connections::{Connection, ConnectionFailure, HealthCheckResult};
use silas_core::secrets::Confidence;
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_execution::connection_setup::{
    self as setup, ConnectionEgress, SecretSink, SetupError, SetupLaunch, connection_secret_ref,
};
use silas_sandbox::SubprocessSandbox;
use silas_skill::Skill;
use silas_skill::manifest::SkillType;
use silas_storage::Store;
use tokio::sync::watch;
use zeroize::Zeroizing;

use super::{CONNECTIONS_NAME, ConnectionScripts, RefreshResult, ScriptError, ScriptFuture};
use crate::cards::CardTimeouts;
use crate::skills::{SkillFlowError, SkillHost};
use crate::stream::StreamHandle;

mod setup_flow;

/// The secret store as connections use it.
pub trait ConnectionSecrets: SecretSink {
    fn get(&self, ref_id: &str) -> Result<Zeroizing<Vec<u8>>, String>;
}

/// Environment names a connection's settings may never set.
const RESERVED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "CONNECTION_ID",
    "CONNECTION_TOKEN",
    "CONNECTION_INCREMENTAL_SCOPES",
    "PYTHONDONTWRITEBYTECODE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];
/// The secret ref (under the connection's namespace) injected as
/// `CONNECTION_TOKEN`.
const TOKEN_REF: &str = "access";
/// Where the approved bytes are staged inside a run's work dir.
const STAGED: &str = "skill";
/// How long a one-shot script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
const SETUP_SCRIPT: &str = "scripts/setup.py";

/// Why a connection cannot be set up or its script not run.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionSetupError {
    #[error(transparent)]
    Skill(#[from] SkillFlowError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    /// The setup ran and did not complete: its kind, and the daemon's own
    /// account of a protocol or sandbox failure (which line, what is wrong
    /// with it), which is audited. `said` is the script's own error
    /// message, for the owner's notice only (like its progress lines; it
    /// may quote service text, so it stays out of the audit log).
    #[error("connection setup did not complete: {kind}{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NotCompleted {
        kind: &'static str,
        detail: Option<String>,
        said: Option<String>,
    },
}

impl Coded for ConnectionSetupError {
    fn code(&self) -> ErrorCode {
        match self {
            ConnectionSetupError::Skill(e) => e.code(),
            ConnectionSetupError::Invalid(_) => ErrorCode::ECfgInvalid,
            ConnectionSetupError::Unavailable(_) => ErrorCode::ESandboxUnavailable,
            ConnectionSetupError::NotCompleted { .. } => ErrorCode::ESandboxFailed,
        }
    }
}

/// The most of a script's own error message the owner's notice repeats.
const SAID_MAX: usize = 300;

/// What the owner is told of a failed setup: its kind, and the detail the
/// daemon itself wrote (a protocol breach names its line; the sandbox says
/// why it could not run the script). `timed_out`: the cancel was the setup
/// timeout's, not the owner's or the daemon's stop.
fn not_completed(e: &SetupError, timed_out: bool) -> ConnectionSetupError {
    let detail = match e {
        SetupError::Protocol(d) => Some(d.clone()),
        SetupError::Sandbox(s) => Some(s.to_string()),
        _ => None,
    };
    let said = match e {
        SetupError::Failed(m) => Some(m.chars().take(SAID_MAX).collect()),
        _ => None,
    };
    let kind = match e {
        SetupError::Cancelled if timed_out => "timed_out",
        _ => setup_failure_kind(e),
    };
    ConnectionSetupError::NotCompleted { kind, detail, said }
}

fn setup_failure_kind(e: &SetupError) -> &'static str {
    match e {
        SetupError::Cancelled => "cancelled",
        SetupError::Failed(_) => "failed",
        SetupError::Protocol(_) => "protocol",
        SetupError::Sandbox(_) => "sandbox",
        SetupError::Store(_) => "secret_store",
    }
}

/// The connection id of a skill's connection (one per skill; its own
/// namespace, never a channel session id).
pub fn connection_id_for(skill: &str) -> String {
    format!("conn-{skill}")
}

/// What the daemon gives the runtime.
pub struct ConnectionRuntimeArgs {
    pub store: Store,
    pub skills: Arc<SkillHost>,
    pub sandbox: SubprocessSandbox,
    pub work_base: PathBuf,
    pub secrets: Arc<dyn ConnectionSecrets>,
    /// `None`: skills that declare hosts cannot run (fail closed).
    pub egress: Option<ConnectionEgress>,
    pub timeouts: CardTimeouts,
    pub setup_timeout: Duration,
    /// Set to `true` when the daemon stops: running setups are cancelled.
    pub stop: watch::Receiver<bool>,
    /// The Stream, looked up per use (follows its restarts).
    pub stream: Arc<dyn Fn() -> Option<StreamHandle> + Send + Sync>,
    /// Registered name of the ConnectionManager.
    pub manager: String,
}

pub struct ConnectionRuntime {
    args: ConnectionRuntimeArgs,
    /// Connection ids with a setup running.
    running: Mutex<BTreeSet<String>>,
}

/// A staged run: removed when dropped.
struct Staged {
    skill: Skill,
    work: PathBuf,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// `refresh_token.py`'s answer (§10.6).
#[derive(Deserialize)]
struct RefreshOutput {
    success: bool,
    #[serde(default)]
    new_expires_at: Option<Timestamp>,
}

/// `recover.py`'s answer: success, or a structured failure (§10.6).
#[derive(Deserialize)]
#[serde(untagged)]
enum RecoverOutput {
    Failure(ConnectionFailure),
    Done { success: bool },
}

fn obj(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(o) => o,
        _ => Default::default(),
    }
}

impl ConnectionRuntime {
    pub fn new(args: ConnectionRuntimeArgs) -> Arc<Self> {
        Arc::new(ConnectionRuntime {
            args,
            running: Mutex::new(BTreeSet::new()),
        })
    }

    fn audit(&self, event: &str, data: Value) {
        if let Err(e) = self.args.store.audit().log(event, obj(data)) {
            tracing::error!(code = %e.code(), "audit write failed: {e}");
        }
    }

    /// The installed, hash-checked connection skill `name`.
    fn connection_skill(&self, name: &str) -> Result<Skill, ConnectionSetupError> {
        let skill = self.args.skills.check_use(name)?;
        if skill.manifest.kind != Some(SkillType::Connection) {
            return Err(ConnectionSetupError::Invalid(format!(
                "skill {name} is not a connection skill (type: connection)"
            )));
        }
        Ok(skill)
    }

    /// Check the skill again and stage its approved bytes for one run.
    fn stage(&self, name: &str, label: &str) -> Result<Staged, ConnectionSetupError> {
        let checked = self.connection_skill(name)?;
        let id = crate::approval::random_id()
            .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
        let work = self
            .args
            .sandbox
            .fresh_work_dir(&self.args.work_base, &format!("conn-{label}-{id}"))
            .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
        // Removed on any error below (and after the run).
        let mut staged = Staged {
            skill: checked,
            work,
        };
        staged.skill = silas_skill::run::stage_approved(
            &staged.skill.dir,
            &staged.skill.content_hash,
            &staged.work.join(STAGED),
        )
        .map_err(SkillFlowError::from)?;
        self.args
            .sandbox
            .hand_over_tree(&staged.work)
            .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
        Ok(staged)
    }

    /// The owner's settings as environment: only names the skill declares.
    fn settings_env(
        skill: &Skill,
        settings: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, String)>, ConnectionSetupError> {
        let declared = &skill.manifest.requirements.env;
        settings
            .iter()
            .map(|(k, v)| {
                if RESERVED_ENV.contains(&k.as_str()) || !declared.contains(k) {
                    return Err(ConnectionSetupError::Invalid(format!(
                        "setting {k} is not an environment variable skill {} declares",
                        skill.name
                    )));
                }
                // Settings are kept in the connection's record as they are:
                // a key typed here would sit in the store in plain text.
                if let Some(found) = silas_core::secrets::scan(&format!("{k}={v}"))
                    .into_iter()
                    .find(|f| f.confidence >= Confidence::Probable)
                {
                    return Err(ConnectionSetupError::Invalid(format!(
                        "setting {k} looks like a secret ({}): settings are stored in plain text, so a connection's keys and passwords are entered through its setup's secure input (or sign-in), never with --set",
                        found.kind
                    )));
                }
                Ok((k.clone(), v.clone()))
            })
            .collect()
    }

    /// The launch of `script` from a staged run, with its egress proxy
    /// (kept alive by the caller for the run).
    async fn launch(
        &self,
        staged: &Staged,
        script: &str,
        env: Vec<(String, String)>,
        lifetime: Duration,
    ) -> Result<(SetupLaunch, Option<silas_netguard::EgressProxy>), ConnectionSetupError> {
        if !staged.skill.files.iter().any(|f| f.path == script) {
            return Err(ConnectionSetupError::Unavailable(format!(
                "connection skill {} has no {script}",
                staged.skill.name
            )));
        }
        let hosts = &staged.skill.manifest.requirements.network;
        let proxy = match (&self.args.egress, hosts.is_empty()) {
            (_, true) => None,
            (Some(egress), false) => egress
                .proxy_for(hosts)
                .await
                .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?,
            (None, false) => {
                return Err(ConnectionSetupError::Unavailable(format!(
                    "skill {} declares network hosts but no egress proxy is available",
                    staged.skill.name
                )));
            }
        };
        let launch = SetupLaunch {
            skill: staged.skill.name.clone(),
            skill_dir: staged.work.join(STAGED),
            script: script.into(),
            work_dir: staged.work.clone(),
            env,
            network: proxy.is_some(),
            egress_proxy_port: proxy.as_ref().map(|p| p.port()),
            lifetime,
        };
        Ok((launch, proxy))
    }

    /// `conn`'s access token, as its setup stored it.
    fn access_token(&self, conn: &Connection) -> Option<Zeroizing<Vec<u8>>> {
        let r = connection_secret_ref(&conn.skill_name, TOKEN_REF)?;
        self.args.secrets.get(&r).ok()
    }

    /// One run of a one-shot script of `conn`'s skill; its last line.
    async fn one_shot(
        &self,
        conn: &Connection,
        script: &str,
    ) -> Result<setup::OneShot, ScriptError> {
        let unavailable = |e: ConnectionSetupError| ScriptError::Unavailable(e.to_string());
        let staged = self.stage(&conn.skill_name, "run").map_err(unavailable)?;
        let mut env = Self::settings_env(&staged.skill, &conn.settings).map_err(unavailable)?;
        env.push(("CONNECTION_ID".into(), conn.connection_id.clone()));
        let (launch, proxy) = self
            .launch(&staged, script, env, SCRIPT_TIMEOUT)
            .await
            .map_err(unavailable)?;
        let mut secret_env = Vec::new();
        if let Some(v) = self.access_token(conn) {
            secret_env.push((
                "CONNECTION_TOKEN".to_string(),
                Zeroizing::new(String::from_utf8_lossy(&v).into_owned()),
            ));
        }
        let secrets: &dyn SecretSink = &*self.args.secrets;
        let out = setup::run_one_shot(&self.args.sandbox, &launch, secret_env, secrets).await;
        self.audit_refused_egress(conn, script, proxy.as_ref());
        let out = out.map_err(|e| ScriptError::Unavailable(e.to_string()))?;
        self.audit(
            "connection.script_run",
            json!({"connection_id": conn.connection_id, "skill": conn.skill_name,
                   "script": script, "content_hash": staged.skill.content_hash,
                   "success": out.exit_ok, "secrets_replaced": out.stored.len()}),
        );
        Ok(out)
    }

    /// What a connection script's egress proxy refused (an undeclared
    /// host, a private address), on the record like a check's.
    fn audit_refused_egress(
        &self,
        conn: &Connection,
        script: &str,
        proxy: Option<&silas_netguard::EgressProxy>,
    ) {
        let Some((refused, dropped)) = proxy.map(|p| p.take_refusals()) else {
            return;
        };
        if !refused.is_empty() || dropped > 0 {
            self.audit(
                "connection.egress_refused",
                json!({"connection_id": conn.connection_id, "skill": conn.skill_name,
                       "script": script, "refused": refused, "not_listed": dropped}),
            );
        }
    }

    pub fn store(&self) -> &Store {
        &self.args.store
    }

    pub fn timeouts(&self) -> CardTimeouts {
        self.args.timeouts
    }

    pub fn stream(&self) -> Option<StreamHandle> {
        (self.args.stream)()
    }
}

/// The daemon's [`ConnectionScripts`]: the connection skill's own scripts.
pub struct SkillScripts(pub Arc<ConnectionRuntime>);

impl ConnectionScripts for SkillScripts {
    fn health_check(
        &self,
        conn: &Connection,
    ) -> ScriptFuture<Result<HealthCheckResult, ScriptError>> {
        let (rt, conn) = (self.0.clone(), conn.clone());
        Box::pin(async move {
            let out = rt.one_shot(&conn, "scripts/health_check.py").await?;
            let parsed = out
                .result
                .as_deref()
                .and_then(|l| serde_json::from_str::<HealthCheckResult>(l).ok());
            Ok(match parsed {
                Some(mut h) => {
                    h.healthy &= out.exit_ok;
                    h
                }
                None => HealthCheckResult {
                    healthy: out.exit_ok,
                    token_expires_at: conn.token_expires_at,
                    refresh_token_expires_at: conn.refresh_token_expires_at,
                    latency_ms: 0,
                    error: (!out.exit_ok).then(|| "the health check script failed".to_string()),
                    warnings: Vec::new(),
                },
            })
        })
    }

    fn refresh_token(&self, conn: &Connection) -> ScriptFuture<Result<RefreshResult, ScriptError>> {
        let (rt, conn) = (self.0.clone(), conn.clone());
        Box::pin(async move {
            let out = rt.one_shot(&conn, "scripts/refresh_token.py").await?;
            let line = out.result.as_deref().unwrap_or("");
            if let Ok(f) = serde_json::from_str::<ConnectionFailure>(line) {
                return Err(ScriptError::Failed(f));
            }
            match serde_json::from_str::<RefreshOutput>(line) {
                Ok(r) if r.success && out.exit_ok => Ok(RefreshResult {
                    new_expires_at: r.new_expires_at,
                }),
                _ => Err(ScriptError::Unavailable("the refresh script failed".into())),
            }
        })
    }

    fn recover(&self, conn: &Connection) -> ScriptFuture<Result<(), ScriptError>> {
        let (rt, conn) = (self.0.clone(), conn.clone());
        Box::pin(async move {
            let out = rt.one_shot(&conn, "scripts/recover.py").await?;
            match out
                .result
                .as_deref()
                .and_then(|l| serde_json::from_str::<RecoverOutput>(l).ok())
            {
                Some(RecoverOutput::Failure(f)) => Err(ScriptError::Failed(f)),
                Some(RecoverOutput::Done { success: true }) if out.exit_ok => Ok(()),
                _ => Err(ScriptError::Unavailable(
                    "the recovery script failed".into(),
                )),
            }
        })
    }
}

/// The daemon's default manager name, for [`ConnectionRuntimeArgs::manager`].
pub fn default_manager() -> String {
    CONNECTIONS_NAME.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn recover_output_reads_success_or_a_structured_failure() {
        let ok: RecoverOutput = serde_json::from_str(r#"{"success": true}"#).unwrap();
        assert!(matches!(ok, RecoverOutput::Done { success: true }));
        let f: RecoverOutput = serde_json::from_str(
            r#"{"failure_type":"token_revoked","service":"X","message":"revoked"}"#,
        )
        .unwrap();
        assert!(matches!(f, RecoverOutput::Failure(_)));
    }

    #[test]
    fn setup_failures_are_named_by_kind_only() {
        assert_eq!(
            setup_failure_kind(&SetupError::Failed("token=CANARY".into())),
            "failed"
        );
        assert_eq!(setup_failure_kind(&SetupError::Cancelled), "cancelled");
        // The script's own message stays out; the daemon's account of a
        // protocol breach is the owner's to read.
        let failed = not_completed(&SetupError::Failed("token=CANARY".into()), false);
        assert_eq!(
            failed.to_string(),
            "connection setup did not complete: failed"
        );
        let ConnectionSetupError::NotCompleted { said, detail, .. } = failed else {
            unreachable!()
        };
        assert_eq!((said.as_deref(), detail), (Some("token=CANARY"), None));
        let protocol = not_completed(
            &SetupError::Protocol("line 2: missing field `user_code`".into()),
            false,
        );
        assert_eq!(
            protocol.to_string(),
            "connection setup did not complete: protocol (line 2: missing field `user_code`)"
        );
    }
}
