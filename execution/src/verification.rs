//! The VerificationRunner (spec §5.3): external, deterministic checks the
//! agent cannot touch. Each check runs in its own fresh, empty sandbox work
//! dir under `verify_dir` (its working directory and `HOME`), network only if
//! the check sets `network: true`, and the check's timeout. A sandbox that
//! cannot enforce the request fails the check (fail closed), and a timeout
//! fails it with "Timeout after Ns".
//!
//! The executor's artifacts are staged as plain read-only copies in
//! `./artifacts/` (also `$SILAS_ARTIFACTS`, absolute) — never the working
//! directory, `HOME` or an import path, so a planted `json.py`, `conftest.py`
//! or `.bashrc` cannot run inside the verifier and steer its verdict (issue
//! #12 item 7). Python additionally gets `PYTHONSAFEPATH=1` (no cwd/script dir
//! on `sys.path`), `PYTHONDONTWRITEBYTECODE=1` and `PYTHONNOUSERSITE=1`, and a
//! bare `pytest` does not recurse into the artifacts.
//!
//! A `network: true` check (approved in the plan, shown on the card) gets no
//! direct network: it runs with its own [`EgressProxy`] for the length of the
//! check, and the sandbox lets TCP reach only that proxy's port (landlock ABI
//! 4; kernels without it fail the check closed). The proxy refuses loopback,
//! private, link-local, CGNAT, multicast and metadata destinations; its
//! refusals land in [`VerificationResult::egress_refusals`] for the daemon to
//! audit. UDP is not filtered by landlock (see `silas_sandbox::launcher`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;
use silas_core::model::work::VerificationCheck;
use silas_gates::expect::{Observed, evaluate};
use silas_netguard::{
    EgressLimits, EgressProxy, EgressRefusal, NetworkGuard, NetworkGuardConfig, SystemResolver,
};
use silas_sandbox::{Limits, SandboxSpec, SubprocessSandbox, Termination};

/// Output kept in a result (§5.3 step 4).
pub const MAX_RESULT_OUTPUT_CHARS: usize = 1000;
const VERIFY_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerificationResult {
    pub name: String,
    pub passed: bool,
    pub reason: String,
    /// At most 1000 characters of stdout.
    pub output: String,
    /// A failed check's last 1000 characters of stderr, secrets redacted:
    /// why it failed, when the tool says so there (unittest, pytest's
    /// errors, a traceback).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub errors: String,
    pub exit_code: Option<i64>,
    /// Destinations the check's egress proxy refused (network checks only),
    /// for the audit log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_refusals: Vec<EgressRefusal>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerificationReport {
    pub all_passed: bool,
    pub results: Vec<VerificationResult>,
    /// Names of the failed checks.
    pub failed: Vec<String>,
    pub timestamp: Timestamp,
}

pub struct VerificationRunner {
    sandbox: SubprocessSandbox,
    verify_dir: PathBuf,
    /// Project directories `file_exists` may also look into.
    project_dirs: Vec<PathBuf>,
    limits: Limits,
    /// Decides every destination of a network check's egress proxy.
    egress_guard: Option<NetworkGuard>,
}

/// Name of the staging directory inside a check's work dir.
pub const ARTIFACTS_SUBDIR: &str = "artifacts";
/// The variable naming the staged artifacts (absolute path).
pub const ARTIFACTS_ENV: &str = "SILAS_ARTIFACTS";

/// Stage the plain files of `from` (top level) read-only in `to`. Symlinks
/// and other special files are skipped ([`crate::artifacts`]): the copy runs
/// outside the sandbox. The files are 0444 in a 0555 dir owned by the daemon,
/// so a check run as the sandbox user cannot change them; a non-root daemon's
/// check runs as the same user and is only kept from *accidental* writes.
fn stage_artifacts(from: Option<&Path>, to: &Path) -> Result<(), crate::artifacts::ArtifactError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(|source| crate::artifacts::ArtifactError::Io {
            path: to.display().to_string(),
            source,
        })?;
    if let Some(from) = from {
        crate::artifacts::copy_plain_files(from, to, 0o444)?;
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o555)).map_err(|source| {
        crate::artifacts::ArtifactError::Io {
            path: to.display().to_string(),
            source,
        }
    })
}

/// The whole environment of a check: nothing from the daemon.
fn check_env(work: &Path, staged: &Path) -> Vec<(String, String)> {
    let s = |v: &str| v.to_string();
    vec![
        (s("PATH"), s(VERIFY_PATH)),
        (s("HOME"), work.display().to_string()),
        (s(ARTIFACTS_ENV), staged.display().to_string()),
        (s("PYTHONSAFEPATH"), s("1")),
        (s("PYTHONDONTWRITEBYTECODE"), s("1")),
        (s("PYTHONNOUSERSITE"), s("1")),
        // A bare `pytest` in the work dir would otherwise collect (and
        // import the conftest.py of) the artifacts; naming them explicitly
        // still works.
        (
            s("PYTEST_ADDOPTS"),
            format!("--ignore={}", staged.display()),
        ),
    ]
}

/// Where a check runs: a fresh dir with the artifacts staged read-only, or
/// a prepared project copy.
#[derive(Clone, Copy)]
enum Where<'a> {
    Artifacts(Option<&'a Path>),
    Project(&'a Path),
}

/// The environment of a check over a project copy: the project's own files
/// are the owner's (the checks' files restored from the untouched copy), so
/// Python may import from the working directory; `HOME` is a fresh dir.
fn project_env(home: &Path) -> Vec<(String, String)> {
    let s = |v: &str| v.to_string();
    vec![
        (s("PATH"), s(VERIFY_PATH)),
        (s("HOME"), home.display().to_string()),
        (s("PYTHONDONTWRITEBYTECODE"), s("1")),
        (s("PYTHONNOUSERSITE"), s("1")),
    ]
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// The last `max` characters of a failed check's stderr, secrets redacted
/// (the executor's next briefing quotes it).
fn error_tail(stderr: &str, max: usize) -> String {
    let (redacted, _) = silas_core::secrets::redact(stderr.trim_end());
    let count = redacted.chars().count();
    if count <= max {
        return redacted;
    }
    let tail: String = redacted.chars().skip(count - max).collect();
    format!("…{tail}")
}

impl VerificationRunner {
    pub fn new(
        sandbox: SubprocessSandbox,
        verify_dir: PathBuf,
        project_dirs: Vec<PathBuf>,
        limits: Limits,
    ) -> Self {
        // Default guard config: no trusted private ranges, the always-blocked
        // ports; the allowlist is not consulted by the proxy (see
        // `silas_netguard::proxy`). Building it cannot fail with defaults;
        // if it ever did, network checks fail closed.
        let egress_guard =
            NetworkGuard::new(&NetworkGuardConfig::default(), Arc::new(SystemResolver)).ok();
        VerificationRunner {
            sandbox,
            verify_dir,
            project_dirs,
            limits,
            egress_guard,
        }
    }

    /// Use `guard` (the daemon's, with the operator's trusted CIDRs and
    /// blocked ports, or a test resolver) for network checks' egress.
    pub fn with_egress_guard(mut self, guard: NetworkGuard) -> Self {
        self.egress_guard = Some(guard);
        self
    }

    /// Run every check (in order, each in its own sandbox) and aggregate.
    pub async fn run_checks(
        &self,
        checks: &[VerificationCheck],
        artifacts_dir: Option<&Path>,
    ) -> VerificationReport {
        let mut results = Vec::with_capacity(checks.len());
        for check in checks {
            results.push(self.run_check(check, artifacts_dir).await);
        }
        Self::report(results)
    }

    fn fail(check: &VerificationCheck, reason: String) -> VerificationResult {
        VerificationResult {
            name: check.name.clone(),
            passed: false,
            reason,
            output: String::new(),
            errors: String::new(),
            exit_code: None,
            egress_refusals: Vec::new(),
        }
    }

    /// Run every check against a project: `project` is a prepared copy of
    /// the executor's result (the checks' own files already restored from the
    /// untouched copy by the caller), handed to the sandbox user. Each check
    /// runs with the project as its working directory — so `pytest` and
    /// `ruff check .` see the project and can import it — and `HOME` in a
    /// fresh empty dir of its own; nothing of the executor's process or
    /// directory is involved.
    pub async fn run_checks_on_project(
        &self,
        checks: &[VerificationCheck],
        project: &Path,
    ) -> VerificationReport {
        let mut results = Vec::with_capacity(checks.len());
        for check in checks {
            results.push(self.run_in(check, Where::Project(project)).await);
        }
        Self::report(results)
    }

    /// A report of `checks` that were not run because their verdict could
    /// not be trusted: each failed with `reason`.
    pub fn refused(checks: &[VerificationCheck], reason: &str) -> VerificationReport {
        Self::report(
            checks
                .iter()
                .map(|c| Self::fail(c, reason.to_owned()))
                .collect(),
        )
    }

    fn report(results: Vec<VerificationResult>) -> VerificationReport {
        let failed: Vec<String> = results
            .iter()
            .filter(|r| !r.passed)
            .map(|r| r.name.clone())
            .collect();
        VerificationReport {
            all_passed: failed.is_empty(),
            results,
            failed,
            timestamp: Timestamp::now(),
        }
    }

    pub async fn run_check(
        &self,
        check: &VerificationCheck,
        artifacts_dir: Option<&Path>,
    ) -> VerificationResult {
        self.run_in(check, Where::Artifacts(artifacts_dir)).await
    }

    async fn run_in(&self, check: &VerificationCheck, place: Where<'_>) -> VerificationResult {
        let artifacts_dir = match place {
            Where::Artifacts(a) => a,
            Where::Project(_) => None,
        };
        let work = match self
            .sandbox
            .fresh_work_dir(&self.verify_dir, &format!("verify-{}", crate::random_id()))
        {
            Ok(w) => w,
            Err(e) => return Self::fail(check, e.to_string()),
        };
        // Removed when this check is done, whatever the outcome: a home
        // server runs checks for years, and each one stages artifact copies.
        let _cleanup = RemoveOnDrop(work.clone());
        // The check is owner-approved configuration, not model text; it is a
        // shell command by definition (§3.3 `run`), passed as one argv element.
        let argv = vec!["/bin/sh".into(), "-c".into(), check.run.clone()];
        let mut spec = match place {
            Where::Artifacts(_) => {
                let mut spec = SandboxSpec::new(argv, work.clone());
                let staged = work.join(ARTIFACTS_SUBDIR);
                if let Err(e) = stage_artifacts(artifacts_dir, &staged) {
                    return Self::fail(check, format!("cannot stage artifacts: {e}"));
                }
                spec.env = check_env(&work, &staged);
                spec
            }
            Where::Project(project) => {
                let mut spec = SandboxSpec::new(argv, project.to_path_buf());
                // `work` is only the check's HOME here.
                spec.write_paths.push(work.clone());
                spec.env = project_env(&work);
                spec
            }
        };
        spec.network = check.network;
        spec.timeout = Duration::from_secs(check.timeout.max(1));
        spec.limits = self.limits.clone();
        spec.max_output_bytes = 64 * 1024;
        // Held until the check ends; dropping it closes every tunnel.
        let proxy = if check.network {
            let Some(guard) = self.egress_guard.clone() else {
                return Self::fail(check, "E_SANDBOX_UNAVAILABLE: no egress guard".into());
            };
            match EgressProxy::start(guard, EgressLimits::default()).await {
                Ok(p) => {
                    spec.egress_proxy_port = Some(p.port());
                    Some(p)
                }
                Err(e) => {
                    return Self::fail(
                        check,
                        format!("E_SANDBOX_UNAVAILABLE: cannot start the egress proxy: {e}"),
                    );
                }
            }
        } else {
            None
        };
        let run = self.sandbox.run(&spec).await;
        let egress_refusals = proxy.map(|p| p.take_refusals().0).unwrap_or_default();
        let out = match run {
            Ok(o) => o,
            Err(e) => {
                let mut r = Self::fail(check, e.to_string());
                r.egress_refusals = egress_refusals;
                return r;
            }
        };
        let exit_code = match out.termination {
            Termination::TimedOut => {
                let mut r = Self::fail(check, format!("Timeout after {}s", check.timeout));
                r.output = truncate(&out.stdout, MAX_RESULT_OUTPUT_CHARS);
                r.errors = error_tail(&out.stderr, MAX_RESULT_OUTPUT_CHARS);
                r.egress_refusals = egress_refusals;
                return r;
            }
            Termination::Exited { code } => Some(i64::from(code)),
            Termination::Signaled { .. } => None,
        };
        // Relative `file_exists` paths resolve in the work dir
        // (`artifacts/x`); absolute ones may name the stored originals. The
        // daemon evaluates this, never following a path out of these roots.
        let mut allowed = vec![work.clone()];
        if let Where::Project(p) = place {
            allowed.push(p.to_path_buf());
        }
        allowed.extend(artifacts_dir.map(Path::to_path_buf));
        allowed.extend(self.project_dirs.iter().cloned());
        let (passed, reason) = evaluate(
            &check.expect,
            &Observed {
                exit_code,
                output: &out.stdout,
                allowed_dirs: &allowed,
            },
        );
        VerificationResult {
            name: check.name.clone(),
            passed,
            reason,
            output: truncate(&out.stdout, MAX_RESULT_OUTPUT_CHARS),
            errors: if passed {
                String::new()
            } else {
                error_tail(&out.stderr, MAX_RESULT_OUTPUT_CHARS)
            },
            exit_code,
            egress_refusals,
        }
    }
}

/// Deletes a finished check's directory ([`crate::cleanup::remove_tree`]).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        crate::cleanup::remove_tree(&self.0);
    }
}

/// Removes what checks cut off by the daemon's end (`kill -9`) left in
/// `verify_dir`: their `verify-*` working directories, which a finished
/// check removes itself and nothing else ever would. Called once at start,
/// before any check runs; returns how many went.
pub fn sweep_leftovers(verify_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(verify_dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("verify-"))
            && entry.file_type().is_ok_and(|t| t.is_dir());
        if stale {
            crate::cleanup::remove_tree(&entry.path());
            removed += usize::from(!entry.path().exists());
        }
    }
    removed
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn only_check_dirs_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["verify-1a2b/sub", "verify-ff", "keep-me"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("verify-1a2b/sub/out.txt"), "x").unwrap();
        std::fs::write(dir.path().join("verify-file"), "not a dir").unwrap();
        assert_eq!(sweep_leftovers(dir.path()), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["keep-me", "verify-file"]);
        assert_eq!(sweep_leftovers(&dir.path().join("absent")), 0);
    }
}
