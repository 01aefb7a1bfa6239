//! The skill install flow and skill use (spec §10.4, issue #17 items 3–4):
//!
//! * [`SkillHost::offer`] — a folder under `skills_dir` (discovered,
//!   installed from a path, imported, or written by the skill-maker) is
//!   validated; only a report without errors becomes a `skill_install` card
//!   showing the report and the content hash.
//! * [`SkillHost::decide`] — the owner's answer: approval mints a
//!   `skill_install` token bound to the skill's name and that hash through
//!   the ApprovalEngine (the only way an answer becomes a token), verifies
//!   it, dry-runs each script in the sandbox from the approved bytes (and,
//!   for a skill declaring an MCP server, starts it once to list its tools:
//!   [`crate::skills_mcp`]), and only when every dry run passes records the
//!   skill as installed — with the MCP tool list and its hash bound.
//! * [`SkillHost::check_use`] / [`SkillHost::run_script`] — a skill is used
//!   only while its folder still hashes to the approved hash; every run is
//!   audited with that hash.
//!
//! Audit data names skills, hashes, scripts and rules — never a script's
//! output or a credential value.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use silas_core::cards::{CardPayload, SkillInstallCard};
use silas_core::config::{Config, SkillValidationConfig};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalVerdict};
use silas_core::model::skills::{
    DeclinedSkill, InstalledSkill, SkillInstallApproval, SkillSource, SkillUseRefusal, check_use,
};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_netguard::{EgressLimits, EgressProxy, NetworkGuard, NetworkGuardConfig, SystemResolver};
use silas_skill::run::{Invocation, RunError, RunRequest, ScriptOutcome, SkillRunner};
use silas_skill::{Skill, SkillError, SkillLoader};
use silas_storage::{CardAudience, PendingCard, Store, StoreError};
use zeroize::Zeroizing;

use crate::approval::{AnswerOrigin, ApprovalError, ApprovalHandle, OwnedSubject};

mod made;
pub mod remove;
mod scan;
pub use made::{PRODUCED_DIR, Produced, ProducedOffer, SKILL_MAKER};
pub use scan::ScanSummary;

/// Resolves a credential ref from the secret store at spawn.
pub type Credentials = Arc<dyn Fn(&str) -> Result<Zeroizing<Vec<u8>>, String> + Send + Sync>;

/// How long one dry run or script run may take.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum SkillFlowError {
    #[error(transparent)]
    Skill(#[from] SkillError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Use(#[from] SkillUseRefusal),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("skill {skill} was not installed: the dry run of {script} failed ({why})")]
    DryRunFailed {
        skill: String,
        script: String,
        why: String,
    },
    #[error("no sandbox is available to run skill scripts")]
    NoSandbox,
}

/// Why a dry run failed, with what the owner needs to fix it: the command
/// line it ran (`--help`, or the declared defaults) and the end of its
/// stderr, on one line, credentials taken out. "exited with code 1" alone
/// left the skill's author guessing.
fn dry_run_failure(out: &silas_skill::run::ScriptOutcome) -> String {
    const TAIL: usize = 400;
    let mut why = format!(
        "{}; it ran `{}`",
        out.termination,
        silas_core::terminal::one_line(&out.argv.join(" "))
    );
    let (stderr, _) = silas_core::secrets::redact(out.stderr.trim());
    if !stderr.is_empty() {
        let flat = silas_core::terminal::one_line(&stderr).into_owned();
        let count = flat.chars().count();
        let tail: String = flat.chars().skip(count.saturating_sub(TAIL)).collect();
        let cut = if count > TAIL { "…" } else { "" };
        why.push_str(&format!("; stderr: {cut}{tail}"));
    }
    why
}

impl Coded for SkillFlowError {
    fn code(&self) -> ErrorCode {
        match self {
            SkillFlowError::Skill(e) => e.code(),
            SkillFlowError::Store(e) => e.code(),
            SkillFlowError::Approval(e) => e.code(),
            SkillFlowError::Refused(_) => ErrorCode::ECfgInvalid,
            SkillFlowError::Use(e) => e.code(),
            SkillFlowError::Run(e) => e.code(),
            SkillFlowError::DryRunFailed { .. } => ErrorCode::ESandboxFailed,
            SkillFlowError::NoSandbox => ErrorCode::ESandboxUnavailable,
        }
    }
}

/// What an answer to a `skill_install` card did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallOutcome {
    Installed {
        skill: String,
        content_hash: String,
        token_id: String,
    },
    Declined {
        skill: String,
    },
}

pub struct SkillHost {
    store: Store,
    loader: SkillLoader,
    validation: SkillValidationConfig,
    card_ttl_minutes: u32,
    runner: Option<SkillRunner>,
    credentials: Credentials,
    /// Decides every destination of a skill's per-run egress proxy; `None`:
    /// skills that declare hosts do not run.
    egress_guard: Option<NetworkGuard>,
    /// Test-only dial redirect (see `EgressProxy`); no configuration sets it.
    egress_redirect: Option<(SocketAddr, SocketAddr)>,
    mcp: Option<Arc<crate::skills_mcp::McpSkills>>,
    /// `{data_dir}/skill-staging`: skills a work item produced wait here
    /// for their install card (see [`made`]).
    staging_root: PathBuf,
    /// (name, content hash) of the skills shipped inside the binary: at
    /// exactly those bytes the start-up scan does not offer them unasked
    /// (see [`scan`]); the owner asks with `silas skill install NAME`.
    shipped: Vec<(String, String)>,
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(o) => o,
        _ => Map::new(),
    }
}

impl SkillHost {
    /// A host over `skills_dir`; without a runner nothing can be installed
    /// (the dry run is part of installing) and no script runs.
    pub fn new(store: Store, config: &Config) -> Self {
        SkillHost {
            store,
            loader: SkillLoader::new(&config.skills_dir),
            validation: config.skills.validation.clone(),
            card_ttl_minutes: config.approval.default_ttl_minutes,
            runner: None,
            credentials: Arc::new(|r: &str| Err(format!("no secret store holds {r}"))),
            // Default guard: no trusted private ranges, the always-blocked
            // ports. Building it cannot fail with defaults; if it ever did,
            // skills that declare hosts fail closed.
            egress_guard: NetworkGuard::new(
                &NetworkGuardConfig::default(),
                Arc::new(SystemResolver),
            )
            .ok(),
            egress_redirect: None,
            mcp: None,
            staging_root: config.data_dir.join("skill-staging"),
            shipped: Vec::new(),
        }
    }

    /// The skills shipped inside the binary, as (name, content hash).
    pub fn with_shipped(mut self, shipped: Vec<(String, String)>) -> Self {
        self.shipped = shipped;
        self
    }

    pub fn with_runner(mut self, runner: SkillRunner) -> Self {
        self.runner = Some(runner);
        self
    }

    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// Skills declaring an MCP server are installed only with this: their
    /// dry run lists the server's tools through it.
    pub fn with_mcp(mut self, mcp: Arc<crate::skills_mcp::McpSkills>) -> Self {
        self.mcp = Some(mcp);
        self
    }

    /// The install dry run of a skill's MCP server: its tools, bound.
    async fn bind_mcp(
        &self,
        dir: &std::path::Path,
        approved_hash: &str,
    ) -> Result<Option<silas_core::model::skills::McpBinding>, String> {
        let skill = Skill::load(dir).map_err(|e| e.to_string())?;
        if skill.manifest.mcp_server.is_none() {
            return Ok(None);
        }
        let Some(mcp) = &self.mcp else {
            return Err("no MCP server registry is configured".into());
        };
        mcp.bind_at_install(&skill, approved_hash)
            .await
            .map_err(|e| e.to_string())
    }

    /// The guard of skills' egress proxies (the daemon's, or a test
    /// resolver's).
    pub fn with_egress_guard(mut self, guard: NetworkGuard) -> Self {
        self.egress_guard = Some(guard);
        self
    }

    /// For tests only: a proxy dial to the validated `from` goes to `to`
    /// (a loopback server), as in the egress proxy's own tests.
    #[doc(hidden)]
    pub fn with_egress_redirect_for_tests(mut self, from: SocketAddr, to: SocketAddr) -> Self {
        self.egress_redirect = Some((from, to));
        self
    }

    /// A skill that declares hosts gets its own proxy for one run, whose
    /// allowlist is exactly those hosts; dropping it closes every tunnel.
    /// `None` for a skill without network (the sandbox has none).
    async fn egress_for(&self, skill: &Skill) -> Result<Option<EgressProxy>, SkillFlowError> {
        let hosts = skill.manifest.requirements.network.clone();
        if hosts.is_empty() {
            return Ok(None);
        }
        let Some(guard) = self.egress_guard.clone() else {
            return Err(SkillFlowError::NoSandbox);
        };
        let limits = EgressLimits::default();
        let proxy = match self.egress_redirect {
            Some((from, to)) => {
                EgressProxy::start_for_hosts_redirecting_dials_for_tests(
                    guard, limits, hosts, from, to,
                )
                .await
            }
            None => EgressProxy::start_for_hosts(guard, limits, hosts).await,
        };
        proxy
            .map(Some)
            .map_err(|e| SkillFlowError::Refused(format!("cannot start the egress proxy: {e}")))
    }

    /// Audits what a run's proxy refused (target and reason only).
    fn audit_egress(&self, name: &str, proxy: Option<EgressProxy>) -> Result<(), StoreError> {
        let Some(proxy) = proxy else {
            return Ok(());
        };
        let (refused, dropped) = proxy.take_refusals();
        if refused.is_empty() && dropped == 0 {
            return Ok(());
        }
        let targets: Vec<Value> = refused
            .iter()
            .map(|r| json!({"target": r.target, "status": r.status, "reason": r.reason}))
            .collect();
        self.audit(
            "skill_egress_refused",
            json!({"skill": name, "refused": targets, "dropped": dropped}),
        )
    }

    pub fn loader(&self) -> &SkillLoader {
        &self.loader
    }

    fn audit(&self, event: &str, data: Value) -> Result<(), StoreError> {
        self.store.audit().log(event, obj(data))?;
        Ok(())
    }

    pub fn installed(&self, name: &str) -> Result<Option<InstalledSkill>, StoreError> {
        self.store.records::<InstalledSkill>().get(name)
    }

    /// Validate `name` under `skills_dir` and, when its report has no
    /// error, store its `skill_install` card for the owner.
    pub fn offer(
        &self,
        name: &str,
        source: SkillSource,
        transformation: Vec<String>,
    ) -> Result<PendingCard, SkillFlowError> {
        let dir = self.loader.path_of(name)?;
        self.offer_at(name, &dir, source, transformation, None)
    }

    /// [`Self::offer`] for the folder at `dir` (under `skills_dir`, or a
    /// work item's staging area when `made_by` names the item).
    fn offer_at(
        &self,
        name: &str,
        dir: &std::path::Path,
        source: SkillSource,
        transformation: Vec<String>,
        made_by: Option<&str>,
    ) -> Result<PendingCard, SkillFlowError> {
        let report = silas_skill::validate(dir, &self.validation)?;
        let refuse = |reason: String| -> Result<PendingCard, SkillFlowError> {
            self.audit(
                "skill_install_refused",
                json!({"skill": name, "content_hash": report.content_hash,
                       "reason": reason, "source": source.as_str(), "made_by": made_by}),
            )?;
            Err(SkillFlowError::Refused(reason))
        };
        let skill = match Skill::load(dir) {
            Ok(s) => s,
            Err(e) => return refuse(e.to_string()),
        };
        let mut card =
            match silas_skill::install::install_card(&skill, &report, source, transformation) {
                Ok(c) => c,
                Err(e) => return refuse(e.to_string()),
            };
        card.made_by = made_by.map(str::to_string);
        let now = Timestamp::now();
        let ttl = chrono::Duration::minutes(i64::from(self.card_ttl_minutes));
        let pending = PendingCard {
            request_id: crate::approval::random_id()?,
            scope_id: crate::turn::OWNER_SCOPE.to_string(),
            card: CardPayload::SkillInstall(Box::new(card)),
            created_at: now,
            expires_at: now.plus(ttl),
            audience: CardAudience::Owner,
        };
        self.store.records::<PendingCard>().put(&pending)?;
        self.audit(
            "skill_install_offered",
            json!({"skill": name, "content_hash": skill.content_hash,
                   "request_id": pending.request_id, "source": source.as_str(),
                   "made_by": made_by}),
        )?;
        Ok(pending)
    }

    /// The owner asks again (`silas skill install NAME`): the declines of
    /// `name` are forgotten and its folder under `skills_dir` is offered.
    pub fn reoffer(&self, name: &str) -> Result<PendingCard, SkillFlowError> {
        let declined = self.store.records::<DeclinedSkill>();
        if declined.get(name)?.is_some() {
            declined.delete(name)?;
            self.audit("skill_decline_cleared", json!({"skill": name}))?;
        }
        let source = self
            .installed(name)?
            .map(|r| r.source)
            .unwrap_or(SkillSource::Installed);
        self.offer(name, source, Vec::new())
    }

    /// The declined hashes of `name`, if any.
    pub fn declined(&self, name: &str) -> Result<Option<DeclinedSkill>, StoreError> {
        self.store.records::<DeclinedSkill>().get(name)
    }

    /// The owner's answer to a `skill_install` card (see the module docs).
    /// The card is answered once, whatever the outcome.
    pub async fn decide(
        &self,
        engine: &ApprovalHandle,
        card: &PendingCard,
        decision: ApprovalDecision,
        origin: &AnswerOrigin,
    ) -> Result<InstallOutcome, SkillFlowError> {
        let CardPayload::SkillInstall(asked) = &card.card else {
            return Err(SkillFlowError::Refused("not a skill_install card".into()));
        };
        let name = asked.skill.clone();
        let cards = self.store.records::<PendingCard>();
        // A made skill waits in its item's staging area until approved.
        let dir = match &asked.made_by {
            Some(item) => self.staged_skill_dir(item, &name)?,
            None => self.loader.path_of(&name)?,
        };
        if decision.verdict != ApprovalVerdict::Approved {
            cards.delete(&card.request_id)?;
            // Remembered, so the next start does not ask again for the
            // same bytes (a changed folder has a new hash and is asked).
            let declined = self.store.records::<DeclinedSkill>();
            let rec = DeclinedSkill::with(
                declined.get(&name)?,
                &name,
                &asked.content_hash,
                Timestamp::now(),
            );
            declined.put(&rec)?;
            if asked.made_by.is_some() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            self.audit(
                "skill_install_declined",
                json!({"skill": name, "content_hash": asked.content_hash,
                       "verdict": decision.verdict.as_str(), "made_by": asked.made_by}),
            )?;
            return Ok(InstallOutcome::Declined { skill: name });
        }
        let Some(runner) = &self.runner else {
            return Err(SkillFlowError::NoSandbox);
        };
        if asked.made_by.is_some()
            && let Some(why) = self.name_taken(&name)?
        {
            cards.delete(&card.request_id)?;
            self.audit(
                "skill_install_refused",
                json!({"skill": name, "content_hash": asked.content_hash, "reason": why,
                       "made_by": asked.made_by}),
            )?;
            return Err(SkillFlowError::Refused(why));
        }
        // The approval is for the files the card showed: a folder changed
        // since is refused (it gets a new card with its new hash).
        let current = Skill::load(&dir).map(|s| s.content_hash);
        if current.as_ref().ok() != Some(&asked.content_hash) {
            cards.delete(&card.request_id)?;
            let reason = "the skill's files changed after the card was shown";
            self.audit(
                "skill_install_refused",
                json!({"skill": name, "content_hash": asked.content_hash, "reason": reason}),
            )?;
            return Err(SkillFlowError::Use(SkillUseRefusal::Changed {
                name,
                approved: asked.content_hash.clone(),
                current: current.unwrap_or_default(),
            }));
        }
        let subject = OwnedSubject::SkillInstall(SkillInstallApproval {
            skill: name.clone(),
            content_hash: asked.content_hash.clone(),
        });
        let token = engine
            .issue_token(
                subject.clone(),
                decision,
                ApprovalScope::SkillInstall,
                origin.clone(),
            )
            .await?;
        let token = engine.verify_subject(token, subject).await?;
        cards.delete(&card.request_id)?;
        let skill = Skill::load(&dir)?;
        let proxy = self.egress_for(&skill).await?;
        let port = proxy.as_ref().map(EgressProxy::port);
        let dry = self
            .dry_run(runner, &dir, asked, &token.token_id, port)
            .await;
        self.audit_egress(&name, proxy)?;
        dry?;
        let mcp = match self.bind_mcp(&dir, &asked.content_hash).await {
            Ok(b) => b,
            Err(why) => {
                self.audit(
                    "skill_dry_run_failed",
                    json!({"skill": name, "content_hash": asked.content_hash,
                           "script": "mcp_server", "token_id": token.token_id}),
                )?;
                return Err(SkillFlowError::DryRunFailed {
                    skill: name,
                    script: "mcp_server".into(),
                    why,
                });
            }
        };
        if let Some(item) = &asked.made_by {
            self.place_made(&name, &dir, item, &asked.content_hash, &token.token_id)?;
        }
        let approved_via = token
            .conditions
            .get(silas_core::model::approval::APPROVED_VIA_KEY)
            .and_then(Value::as_str)
            .unwrap_or(origin.channel.as_str())
            .to_string();
        let rec = InstalledSkill {
            name: name.clone(),
            content_hash: asked.content_hash.clone(),
            token_id: token.token_id.clone(),
            approved_via,
            source: asked.source,
            installed_at: Timestamp::now(),
            mcp,
        };
        self.store.records::<InstalledSkill>().put(&rec)?;
        self.audit(
            "skill_installed",
            json!({"skill": name, "content_hash": rec.content_hash, "token_id": rec.token_id,
                   "channel": rec.approved_via, "source": rec.source.as_str(),
                   "scripts": asked.scripts.len(),
                   "mcp_tools_hash": rec.mcp.as_ref().map(|m| m.tools_hash.clone()),
                   "mcp_tools": rec.mcp.as_ref().map(|m| m.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>())}),
        )?;
        Ok(InstallOutcome::Installed {
            skill: name,
            content_hash: rec.content_hash,
            token_id: rec.token_id,
        })
    }

    /// A made skill, approved and dry-run from its staging area, copied
    /// into `skills_dir` — kept only if the copy hashes to the approved
    /// hash; the staged folder is removed either way.
    fn place_made(
        &self,
        name: &str,
        staged: &std::path::Path,
        item: &str,
        approved: &str,
        token_id: &str,
    ) -> Result<(), SkillFlowError> {
        let copied = silas_skill::install::copy_into(staged, self.loader.dir());
        let _ = std::fs::remove_dir_all(staged);
        copied?;
        let placed = self.loader.path_of(name)?;
        let hash = Skill::load(&placed).map(|s| s.content_hash).ok();
        if hash.as_deref() != Some(approved) {
            let _ = std::fs::remove_dir_all(&placed);
            self.audit(
                "skill_install_refused",
                json!({"skill": name, "content_hash": approved, "made_by": item,
                       "token_id": token_id,
                       "reason": "the copy in the skills directory differs from the approved files"}),
            )?;
            return Err(SkillFlowError::Use(SkillUseRefusal::Changed {
                name: name.to_string(),
                approved: approved.to_string(),
                current: hash.unwrap_or_default(),
            }));
        }
        Ok(())
    }

    /// Each script of the card once, from the approved bytes.
    async fn dry_run(
        &self,
        runner: &SkillRunner,
        dir: &std::path::Path,
        asked: &SkillInstallCard,
        token_id: &str,
        egress_proxy_port: Option<u16>,
    ) -> Result<(), SkillFlowError> {
        for (i, script) in asked.scripts.iter().enumerate() {
            let execution_id = format!("skill-dry-{token_id}-{i}");
            let run = runner
                .run(RunRequest {
                    dir,
                    approved_hash: &asked.content_hash,
                    script,
                    invocation: Invocation::DryRun,
                    credentials: &*self.credentials,
                    egress_proxy_port,
                    execution_id: &execution_id,
                    timeout: SCRIPT_TIMEOUT,
                })
                .await;
            let why = match run {
                Ok(out) if out.success() => continue,
                Ok(out) => dry_run_failure(&out),
                Err(e) => e.to_string(),
            };
            self.audit(
                "skill_dry_run_failed",
                json!({"skill": asked.skill, "content_hash": asked.content_hash,
                       "script": script, "token_id": token_id}),
            )?;
            return Err(SkillFlowError::DryRunFailed {
                skill: asked.skill.clone(),
                script: script.clone(),
                why,
            });
        }
        Ok(())
    }

    /// The skill, if it is installed at exactly its current content;
    /// otherwise the refusal, audited.
    pub fn check_use(&self, name: &str) -> Result<Skill, SkillFlowError> {
        let refuse = |e: SkillFlowError| -> Result<Skill, SkillFlowError> {
            self.audit(
                "skill_use_refused",
                json!({"skill": name, "reason": e.to_string(), "code": e.code().as_str()}),
            )?;
            Err(e)
        };
        let skill = match self.loader.load(name) {
            Ok(s) => s,
            Err(e) => return refuse(e.into()),
        };
        let rec = self.installed(name)?;
        match check_use(name, rec.as_ref(), &skill.content_hash) {
            Ok(()) => Ok(skill),
            Err(e) => refuse(e.into()),
        }
    }

    /// Installed skills usable now (current hash = approved hash), by name.
    pub fn usable(&self) -> Result<Vec<Skill>, SkillFlowError> {
        let installed = self.store.records::<InstalledSkill>().list()?;
        let catalog = self.loader.scan()?;
        Ok(catalog
            .skills
            .into_iter()
            .filter(|s| {
                installed
                    .iter()
                    .any(|r| check_use(&s.name, Some(r), &s.content_hash).is_ok())
            })
            .collect())
    }

    /// `run_skill_script`: one script of an installed skill, its arguments
    /// checked against `script_args`, in the sandbox. Audited with the
    /// content hash that ran.
    pub async fn run_script(
        &self,
        name: &str,
        script: &str,
        args: &Map<String, Value>,
        execution_id: &str,
    ) -> Result<ScriptOutcome, SkillFlowError> {
        self.run_script_bound(name, script, args, execution_id, None)
            .await
    }

    /// [`Self::run_script`] for a work item: `bound` is the content hash its
    /// approved plan bound for the skill (`WorkItem.skill_hashes`); a skill
    /// installed at any other hash — even one approved since — is refused
    /// (`E_APPROVAL_HASH`): the owner approved the plan with that content.
    pub async fn run_script_bound(
        &self,
        name: &str,
        script: &str,
        args: &Map<String, Value>,
        execution_id: &str,
        bound: Option<&str>,
    ) -> Result<ScriptOutcome, SkillFlowError> {
        let skill = self.check_use(name)?;
        if let Some(bound) = bound
            && bound != skill.content_hash
        {
            let e = SkillFlowError::Skill(SkillError::HashMismatch {
                name: name.to_string(),
                approved: bound.to_string(),
                current: skill.content_hash.clone(),
            });
            self.audit(
                "skill_use_refused",
                json!({"skill": name, "script": script, "reason": e.to_string(),
                       "code": e.code().as_str()}),
            )?;
            return Err(e);
        }
        let Some(runner) = &self.runner else {
            return Err(SkillFlowError::NoSandbox);
        };
        let proxy = self.egress_for(&skill).await?;
        let run = runner
            .run(RunRequest {
                dir: &skill.dir,
                approved_hash: &skill.content_hash,
                script,
                invocation: Invocation::Call(args.clone()),
                credentials: &*self.credentials,
                egress_proxy_port: proxy.as_ref().map(EgressProxy::port),
                execution_id,
                timeout: SCRIPT_TIMEOUT,
            })
            .await;
        self.audit_egress(name, proxy)?;
        match run {
            Ok(out) => {
                self.audit(
                    "skill_script_run",
                    json!({"skill": name, "script": script, "content_hash": out.content_hash,
                           "success": out.success(), "execution_id": execution_id,
                           "network": !skill.manifest.requirements.network.is_empty()}),
                )?;
                Ok(out)
            }
            Err(e) => {
                self.audit(
                    "skill_use_refused",
                    json!({"skill": name, "script": script, "reason": e.to_string(),
                           "code": e.code().as_str()}),
                )?;
                Err(e.into())
            }
        }
    }
}

/// A skill's folder, for callers that hold a name.
pub fn skill_dir(host: &SkillHost, name: &str) -> Result<PathBuf, SkillFlowError> {
    Ok(host.loader.path_of(name)?)
}
