//! Running one script of an installed skill in the sandbox (§10.4 dry run,
//! `run_skill_script`). What runs is exactly the bytes whose hash the owner
//! approved: the folder is read once, its hash compared with the approved
//! one, and those bytes — not the folder — are staged into a fresh work dir.
//! Arguments are argv elements (see [`crate::args`]); the environment is
//! `PATH`, `HOME` and the skill's credential refs resolved at spawn; the
//! network is off unless the skill declares hosts and an egress proxy is
//! given. Output has every injected credential value and every detected
//! secret redacted before anyone sees it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use silas_core::{Coded, ErrorCode, secrets};
use silas_sandbox::{SandboxSpec, SubprocessSandbox, Termination};
use zeroize::Zeroizing;

use crate::args::{self, ArgError};
use crate::loader::Skill;
use crate::snapshot;

const EXEC_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Where the skill's files are staged inside the work dir.
const STAGED: &str = "skill";
/// What an injected credential value becomes in any output.
pub const REDACTED: &str = "[REDACTED]";

/// What to run.
#[derive(Clone, Debug)]
pub enum Invocation {
    /// A `run_skill_script` call: arguments checked against `script_args`.
    Call(Map<String, Value>),
    /// The install dry run: defaults or `--help`.
    DryRun,
}

/// Resolves one credential ref to its secret value (the secret store).
pub type CredentialSource<'a> = &'a (dyn Fn(&str) -> Result<Zeroizing<Vec<u8>>, String> + Sync);

pub struct RunRequest<'a> {
    pub dir: &'a Path,
    /// The content hash the owner approved (`InstalledSkill`, or the
    /// install card being approved).
    pub approved_hash: &'a str,
    pub script: &'a str,
    pub invocation: Invocation,
    pub credentials: CredentialSource<'a>,
    /// The NetworkGuard egress proxy port for a skill that declares hosts.
    pub egress_proxy_port: Option<u16>,
    /// A plain directory name, unique per run.
    pub execution_id: &'a str,
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Skill(#[from] crate::SkillError),
    #[error(
        "skill {name} changed since it was approved (approved {approved}, now {current}); it needs a new skill_install approval"
    )]
    Changed {
        name: String,
        approved: String,
        current: String,
    },
    #[error("{0}")]
    Args(#[from] ArgError),
    #[error(
        "skill {skill} declares network hosts ({hosts}) but no egress proxy is configured; it does not run"
    )]
    NoEgress { skill: String, hosts: String },
    /// Names the ref, never the value.
    #[error("credential ref {0:?} could not be read from the secret store: {1}")]
    Credential(String, String),
    #[error("{0}")]
    Sandbox(String),
}

impl Coded for RunError {
    fn code(&self) -> ErrorCode {
        match self {
            RunError::Skill(e) => e.code(),
            RunError::Changed { .. } => ErrorCode::EApprovalHash,
            RunError::Args(e) => e.code(),
            RunError::NoEgress { .. } | RunError::Sandbox(_) => ErrorCode::ESandboxUnavailable,
            RunError::Credential(..) => ErrorCode::ECfgKeystore,
        }
    }
}

/// What one run did, with its output already redacted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptOutcome {
    pub skill: String,
    pub script: String,
    /// The hash of what ran (= the approved hash).
    pub content_hash: String,
    pub argv: Vec<String>,
    pub termination: Termination,
    pub stdout: String,
    pub stderr: String,
}

impl ScriptOutcome {
    pub fn success(&self) -> bool {
        self.termination == Termination::Exited { code: 0 }
    }
}

/// Runs skill scripts in one sandbox.
pub struct SkillRunner {
    sandbox: SubprocessSandbox,
    work_base: PathBuf,
    python: String,
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o755)
        .open(path)?;
    f.write_all(bytes)
}

/// Every injected value, then every detected secret, out of `text`.
fn redact(text: &str, injected: &[Zeroizing<String>]) -> String {
    let mut out = text.to_string();
    for v in injected {
        if !v.is_empty() {
            out = out.replace(v.as_str(), REDACTED);
        }
    }
    secrets::redact(&out).0
}

/// Copies exactly the approved bytes of the skill at `dir` into `dest`
/// (which must not exist yet) and returns the skill as loaded from that one
/// read: a long-lived process (a connection's setup script) then runs the
/// staged copy, never the folder, which could change after the check.
pub fn stage_approved(dir: &Path, approved_hash: &str, dest: &Path) -> Result<Skill, RunError> {
    let skill = Skill::load(dir)?;
    let snap = snapshot::take(dir).map_err(|source| crate::SkillError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let current = snap.content_hash().unwrap_or_default();
    if current != approved_hash || skill.content_hash != approved_hash {
        return Err(RunError::Changed {
            name: skill.name.clone(),
            approved: approved_hash.to_string(),
            current,
        });
    }
    for f in &snap.files {
        write_file(&dest.join(&f.path), &f.bytes, f.mode)
            .map_err(|e| RunError::Sandbox(format!("cannot stage {}: {e}", f.path)))?;
    }
    Ok(skill)
}

impl SkillRunner {
    pub fn new(sandbox: SubprocessSandbox, work_base: PathBuf) -> Self {
        SkillRunner {
            sandbox,
            work_base,
            python: "python3".into(),
        }
    }

    pub async fn run(&self, req: RunRequest<'_>) -> Result<ScriptOutcome, RunError> {
        let skill = Skill::load(req.dir)?;
        // The bytes that will run, read once; their hash must be the approved one.
        let snap = snapshot::take(req.dir).map_err(|source| crate::SkillError::Io {
            path: req.dir.to_path_buf(),
            source,
        })?;
        let current = snap.content_hash().unwrap_or_default();
        if current != req.approved_hash || skill.content_hash != req.approved_hash {
            return Err(RunError::Changed {
                name: skill.name.clone(),
                approved: req.approved_hash.to_string(),
                current,
            });
        }
        let interpreter =
            args::interpreter(req.script, &self.python).ok_or_else(|| ArgError::Unsupported {
                script: req.script.to_string(),
            })?;
        let script_args = match &req.invocation {
            Invocation::Call(a) => args::script_args(&skill, req.script, a)?,
            Invocation::DryRun => {
                // Checks the script exists and may run at all.
                args::script_args(&skill, req.script, &Map::new()).or_else(|e| match e {
                    ArgError::Missing { .. } => Ok(Vec::new()),
                    other => Err(other),
                })?;
                args::dry_run_args(&skill, req.script)
            }
        };
        // The install dry run (`--help` or defaults) never gets the network:
        // it happens before the skill is trusted with any host it declares.
        let no_hosts: Vec<String> = Vec::new();
        let hosts = match req.invocation {
            Invocation::DryRun => &no_hosts,
            Invocation::Call(_) => &skill.manifest.requirements.network,
        };
        if !hosts.is_empty() && req.egress_proxy_port.is_none() {
            return Err(RunError::NoEgress {
                skill: skill.name.clone(),
                hosts: hosts.join(", "),
            });
        }
        let mut injected: Vec<Zeroizing<String>> = Vec::new();
        let mut env: Vec<(String, String)> = Vec::new();
        for r in &skill.manifest.requirements.credentials {
            let bytes = (req.credentials)(r).map_err(|e| RunError::Credential(r.clone(), e))?;
            let value = Zeroizing::new(String::from_utf8_lossy(&bytes).into_owned());
            env.push((r.clone(), value.to_string()));
            injected.push(value);
        }
        let work = self
            .sandbox
            .fresh_work_dir(&self.work_base, req.execution_id)
            .map_err(|e| RunError::Sandbox(e.to_string()))?;
        let result = self
            .run_staged(&req, &snap, &work, interpreter, script_args, env, hosts)
            .await;
        // Nothing of a run is kept: the next run stages the approved bytes again.
        let _ = std::fs::remove_dir_all(&work);
        let (argv, out) = result?;
        Ok(ScriptOutcome {
            skill: skill.name,
            script: req.script.to_string(),
            content_hash: current,
            argv,
            termination: out.termination,
            stdout: redact(&out.stdout, &injected),
            stderr: redact(&out.stderr, &injected),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_staged(
        &self,
        req: &RunRequest<'_>,
        snap: &snapshot::Snapshot,
        work: &Path,
        interpreter: String,
        script_args: Vec<String>,
        env: Vec<(String, String)>,
        hosts: &[String],
    ) -> Result<(Vec<String>, silas_sandbox::SandboxOutput), RunError> {
        let staged = work.join(STAGED);
        for f in &snap.files {
            write_file(&staged.join(&f.path), &f.bytes, f.mode)
                .map_err(|e| RunError::Sandbox(format!("cannot stage {}: {e}", f.path)))?;
        }
        self.sandbox
            .hand_over_tree(work)
            .map_err(|e| RunError::Sandbox(e.to_string()))?;
        let mut argv = vec![interpreter, format!("{STAGED}/{}", req.script)];
        argv.extend(script_args);
        let mut spec = SandboxSpec::new(argv.clone(), work.to_path_buf());
        spec.env = vec![
            ("PATH".into(), EXEC_PATH.into()),
            ("HOME".into(), work.display().to_string()),
            // The staged copy is thrown away, but no cache belongs in it.
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ];
        spec.env.extend(env);
        spec.network = !hosts.is_empty();
        spec.egress_proxy_port = req.egress_proxy_port.filter(|_| spec.network);
        spec.timeout = req.timeout;
        let out = self
            .sandbox
            .run(&spec)
            .await
            .map_err(|e| RunError::Sandbox(e.to_string()))?;
        Ok((argv, out))
    }
}
