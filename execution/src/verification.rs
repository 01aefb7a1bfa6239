//! The VerificationRunner (spec §5.3): external, deterministic checks the
//! agent cannot touch. Each check runs in its own fresh sandbox work dir under
//! `verify_dir`, with the task's artifacts exposed read-only, environment
//! exactly `PATH` and `HOME` (= the check's work dir), network only if the
//! check sets `network: true`, and the check's timeout. A sandbox that cannot
//! enforce the request fails the check (fail closed), and a timeout fails it
//! with "Timeout after Ns".

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;
use silas_core::model::work::VerificationCheck;
use silas_gates::expect::{Observed, evaluate};
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
    pub exit_code: Option<i64>,
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
}

/// Copy the regular files of `from` (top level) into `to`. Symlinks and other
/// special files are skipped: a task could plant a link to a host file, and
/// the copy runs outside the sandbox.
fn copy_artifacts(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let meta = std::fs::symlink_metadata(entry.path())?;
        if meta.file_type().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

impl VerificationRunner {
    pub fn new(
        sandbox: SubprocessSandbox,
        verify_dir: PathBuf,
        project_dirs: Vec<PathBuf>,
        limits: Limits,
    ) -> Self {
        VerificationRunner {
            sandbox,
            verify_dir,
            project_dirs,
            limits,
        }
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

    fn fail(check: &VerificationCheck, reason: String) -> VerificationResult {
        VerificationResult {
            name: check.name.clone(),
            passed: false,
            reason,
            output: String::new(),
            exit_code: None,
        }
    }

    pub async fn run_check(
        &self,
        check: &VerificationCheck,
        artifacts_dir: Option<&Path>,
    ) -> VerificationResult {
        let work = match self
            .sandbox
            .fresh_work_dir(&self.verify_dir, &format!("verify-{}", crate::random_id()))
        {
            Ok(w) => w,
            Err(e) => return Self::fail(check, e.to_string()),
        };
        // The check is owner-approved configuration, not model text; it is a
        // shell command by definition (§3.3 `run`), passed as one argv element.
        let mut spec = SandboxSpec::new(
            vec!["/bin/sh".into(), "-c".into(), check.run.clone()],
            work.clone(),
        );
        spec.env = vec![
            ("PATH".into(), VERIFY_PATH.into()),
            ("HOME".into(), work.display().to_string()),
        ];
        spec.network = check.network;
        spec.timeout = Duration::from_secs(check.timeout.max(1));
        spec.limits = self.limits.clone();
        spec.max_output_bytes = 64 * 1024;
        if let Some(a) = artifacts_dir {
            // Each check gets its own copy of the task's outputs, so relative
            // paths (`test -f notes.txt`) work and the originals stay untouched.
            if let Err(e) = copy_artifacts(a, &work) {
                return Self::fail(check, format!("cannot stage artifacts: {e}"));
            }
            spec.read_paths.push(a.to_path_buf());
        }
        let out = match self.sandbox.run(&spec).await {
            Ok(o) => o,
            Err(e) => return Self::fail(check, e.to_string()),
        };
        let exit_code = match out.termination {
            Termination::TimedOut => {
                let mut r = Self::fail(check, format!("Timeout after {}s", check.timeout));
                r.output = truncate(&out.stdout, MAX_RESULT_OUTPUT_CHARS);
                return r;
            }
            Termination::Exited { code } => Some(i64::from(code)),
            Termination::Signaled { .. } => None,
        };
        let mut allowed = vec![work.clone()];
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
            exit_code,
        }
    }
}
