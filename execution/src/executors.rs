//! The executor registry (spec §9.2–9.3): `shell_exec` and `python_exec`,
//! each turning an `ExecutionEnvelope` into one sandboxed run, plus the
//! network executors served only when configured: `web_fetch` (through the
//! NetworkGuard) and `web_search` ([`crate::web_search`]).
//!
//! Per execution: a fresh work dir `<base>/<execution_id>`, the input
//! artifacts written into it as files, the environment exactly the envelope's
//! `sandbox_config.env` plus `PATH` and `HOME`, network only when
//! `network_access` is set, the envelope's timeout and limits. Output is
//! `external` taint; it passes the secret detector *before* it is truncated to
//! `max_output_bytes` (the sandbox keeps a margin beyond the cap so a secret
//! straddling the cut is still whole when redacted). Exit codes, durations and
//! byte counts go to `metadata`, which never reaches model context.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use silas_core::model::execution::{ExecutionEnvelope, ExecutionResult, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_core::secrets;
use silas_sandbox::{Limits, SandboxOutput, SandboxSpec, SubprocessSandbox, Termination};

/// Bytes captured beyond the cap so redaction sees whole secrets at the edge.
const REDACTION_MARGIN: usize = 4096;
const EXEC_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A workspace copy an execution works in (issue #15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectDir {
    /// The copy: the command's working directory, read-write.
    pub dir: PathBuf,
    /// The plan's extra paths (a virtualenv, a toolchain): read and execute.
    pub read_paths: Vec<PathBuf>,
}

/// The core executors.
pub const SHELL_EXEC: &str = "shell_exec";
pub const PYTHON_EXEC: &str = "python_exec";

pub struct ExecutorRegistry {
    sandbox: SubprocessSandbox,
    work_base: PathBuf,
    python: String,
    max_processes: u64,
    /// `web_fetch` exists only when the operator configured a guard (§9.2:
    /// network tools are registered only with valid configuration).
    web_fetch: Option<silas_netguard::GuardedFetcher>,
    /// `web_search` exists only when `search.provider` and `search.api_key`
    /// are configured (§9.2 loading rule).
    web_search: Option<std::sync::Arc<crate::web_search::WebSearch>>,
}

/// Cut at a character boundary at or below `max` bytes.
fn cut_bytes(s: &str, max: usize) -> (&str, usize) {
    if s.len() <= max {
        return (s, 0);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], s.len() - end)
}

/// Redact, then truncate (never the other way round).
pub fn model_facing_output(raw: &str, max_bytes: usize) -> (String, usize, usize) {
    let (redacted, findings) = secrets::redact(raw);
    let (kept, cut) = cut_bytes(&redacted, max_bytes);
    let mut text = kept.to_string();
    if cut > 0 {
        text.push_str(&format!("\n[output truncated: {cut} more bytes]"));
    }
    (text, findings.len(), cut)
}

fn safe_artifact_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn failed(env: &ExecutionEnvelope, error: String) -> ExecutionResult {
    ExecutionResult::failure(env, error, BTreeMap::new(), 0.0)
}

fn arg_str<'a>(env: &'a ExecutionEnvelope, key: &str) -> Option<&'a str> {
    env.args.get(key).and_then(Value::as_str)
}

impl ExecutorRegistry {
    /// Deletes one finished execution's work dir. Called once its results
    /// (and artifacts) were taken; an id that is not a plain directory name
    /// is ignored, so nothing outside `work_base` can be named.
    pub fn discard_work_dir(&self, execution_id: &str) {
        if silas_sandbox::manager::is_plain_dir_name(execution_id) {
            crate::cleanup::remove_tree(&self.work_base.join(execution_id));
        }
    }

    /// One execution's work dir (what it wrote, until
    /// [`Self::discard_work_dir`]); `None` for an id that is not a plain
    /// directory name.
    pub fn work_dir_of(&self, execution_id: &str) -> Option<PathBuf> {
        silas_sandbox::manager::is_plain_dir_name(execution_id)
            .then(|| self.work_base.join(execution_id))
    }

    pub fn new(sandbox: SubprocessSandbox, work_base: PathBuf) -> Self {
        ExecutorRegistry {
            sandbox,
            work_base,
            python: "python3".into(),
            max_processes: Limits::default().max_processes,
            web_fetch: None,
            web_search: None,
        }
    }

    /// Serve `web_fetch` through this guarded fetcher.
    pub fn with_web_fetch(mut self, fetcher: silas_netguard::GuardedFetcher) -> Self {
        self.web_fetch = Some(fetcher);
        self
    }

    /// Serve `web_search` through this provider client. Call only when
    /// `Config::web_search_enabled()` (see [`crate::web_search::WebSearch::from_config`]).
    pub fn with_web_search(mut self, search: crate::web_search::WebSearch) -> Self {
        self.web_search = Some(std::sync::Arc::new(search));
        self
    }

    /// Names of the executors this registry serves.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = vec![SHELL_EXEC, PYTHON_EXEC];
        if self.web_fetch.is_some() {
            names.push(silas_netguard::executor::WEB_FETCH);
        }
        if self.web_search.is_some() {
            names.push(crate::web_search::WEB_SEARCH);
        }
        names
    }

    /// The directory executions get their work dirs in.
    pub fn work_base(&self) -> &Path {
        &self.work_base
    }

    /// The sandbox the executors run in.
    pub fn sandbox(&self) -> &SubprocessSandbox {
        &self.sandbox
    }

    pub async fn execute(&self, env: &ExecutionEnvelope) -> ExecutionResult {
        self.execute_in(env, None).await
    }

    /// Runs `env` in `project` (a workspace copy handed to the sandbox user)
    /// instead of a fresh dir: the command's working directory is the copy,
    /// the plan's extra paths are readable (and executable), nothing else of
    /// the host is. A `python_exec` script is staged in a scratch dir of its
    /// own, never in the project; the project's files are not artifacts.
    pub async fn execute_in(
        &self,
        env: &ExecutionEnvelope,
        project: Option<&ProjectDir>,
    ) -> ExecutionResult {
        if env.action == silas_netguard::executor::WEB_FETCH {
            return match &self.web_fetch {
                Some(f) => silas_netguard::executor::web_fetch(f, env).await,
                None => failed(
                    env,
                    "web_fetch is not configured (no host allowlist)".into(),
                ),
            };
        }
        if env.action == crate::web_search::WEB_SEARCH {
            return match &self.web_search {
                Some(s) => s.execute(env).await,
                None => failed(
                    env,
                    "web_search is not configured (search.provider and search.api_key are required)"
                        .into(),
                ),
            };
        }
        let argv = match env.action.as_str() {
            SHELL_EXEC => match arg_str(env, "command") {
                // The tool *is* a shell: the model's text is one argv element.
                Some(cmd) => vec!["/bin/sh".to_string(), "-c".to_string(), cmd.to_string()],
                None => return failed(env, "shell_exec needs a string argument `command`".into()),
            },
            PYTHON_EXEC => match (arg_str(env, "script"), arg_str(env, "path")) {
                (Some(_), _) => vec![self.python.clone(), "main.py".to_string()],
                (None, Some(p)) => {
                    let mut v = vec![self.python.clone(), p.to_string()];
                    if let Some(extra) = env.args.get("args").and_then(Value::as_array) {
                        v.extend(extra.iter().map(|a| {
                            a.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| a.to_string())
                        }));
                    }
                    v
                }
                (None, None) => return failed(env, "python_exec needs `script` or `path`".into()),
            },
            other => return failed(env, format!("unknown executor {other:?}")),
        };
        let scratch = match self
            .sandbox
            .fresh_work_dir(&self.work_base, &env.execution_id)
        {
            Ok(w) => w,
            Err(e) => return failed(env, e.to_string()),
        };
        if let Err(e) = self.prepare(env, &scratch, project.is_some()) {
            return failed(env, e);
        }
        let Some(project) = project else {
            let spec = self.spec(env, argv, scratch.clone());
            return match self.sandbox.run(&spec).await {
                Ok(out) => self.result(env, &scratch, out),
                Err(e) => failed(env, e.to_string()),
            };
        };
        let mut argv = argv;
        if env.action == PYTHON_EXEC && arg_str(env, "script").is_some() {
            argv[1] = scratch.join("main.py").display().to_string();
        }
        let mut spec = self.spec(env, argv, project.dir.clone());
        // HOME (caches, dotfiles) stays out of the project and its diff.
        spec.env.retain(|(k, _)| k != "HOME");
        spec.env
            .push(("HOME".into(), scratch.display().to_string()));
        spec.write_paths.push(scratch.clone());
        spec.read_paths.extend(project.read_paths.iter().cloned());
        match self.sandbox.run(&spec).await {
            Ok(out) => {
                let mut r = self.result(env, &scratch, out);
                r.artifacts.clear();
                r
            }
            Err(e) => failed(env, e.to_string()),
        }
    }

    fn prepare(&self, env: &ExecutionEnvelope, work: &Path, project: bool) -> Result<(), String> {
        // In a project the inputs are the project itself.
        let inputs = if project {
            BTreeMap::new()
        } else {
            env.input_artifacts.clone()
        };
        for (name, content) in &inputs {
            if !safe_artifact_name(name) {
                return Err(format!("refusing artifact name {name:?}"));
            }
            std::fs::write(work.join(name), content)
                .map_err(|e| format!("cannot stage artifact {name}: {e}"))?;
        }
        if env.action == PYTHON_EXEC
            && let Some(script) = arg_str(env, "script")
        {
            std::fs::write(work.join("main.py"), script)
                .map_err(|e| format!("cannot stage script: {e}"))?;
        }
        Ok(())
    }

    fn spec(&self, env: &ExecutionEnvelope, argv: Vec<String>, work: PathBuf) -> SandboxSpec {
        let cfg = &env.sandbox_config;
        let mut spec = SandboxSpec::new(argv, work.clone());
        spec.env = cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        spec.env.retain(|(k, _)| k != "PATH" && k != "HOME");
        spec.env.push(("PATH".into(), EXEC_PATH.into()));
        spec.env.push(("HOME".into(), work.display().to_string()));
        // Byte-compiled files a run leaves in a project copy would be
        // offered as changes to apply (`__pycache__/…pyc`); checks already
        // run without them.
        if !spec.env.iter().any(|(k, _)| k == "PYTHONDONTWRITEBYTECODE") {
            spec.env
                .push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        }
        spec.network = cfg.network_access;
        spec.read_paths = cfg.filesystem_read.iter().map(PathBuf::from).collect();
        spec.write_paths = cfg.filesystem_write.iter().map(PathBuf::from).collect();
        spec.limits = Limits {
            memory_mb: cfg.max_memory_mb,
            cpu_seconds: cfg.max_cpu_seconds,
            max_processes: self.max_processes,
            ..Limits::default()
        };
        spec.timeout = Duration::from_secs(env.timeout_seconds.max(1));
        spec.max_output_bytes = usize::try_from(env.max_output_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(REDACTION_MARGIN);
        spec
    }

    fn result(&self, env: &ExecutionEnvelope, work: &Path, out: SandboxOutput) -> ExecutionResult {
        let cap = usize::try_from(env.max_output_bytes).unwrap_or(usize::MAX);
        let (return_value, stdout_secrets, stdout_cut) = model_facing_output(&out.stdout, cap);
        let (stderr, stderr_secrets, _) = model_facing_output(&out.stderr, 2000);
        let success = out.success();
        // A command that succeeds may still have said something on stderr
        // (`a && b; c` hides a's refusal behind c's exit code).
        let return_value = match &out.termination {
            Termination::Exited { code: 0 } if !stderr.trim().is_empty() => {
                format!("{return_value}\nstderr: {stderr}")
            }
            _ => return_value,
        };
        let error = match &out.termination {
            Termination::Exited { code: 0 } => None,
            Termination::Exited { code } => Some(format!("exit code {code}: {stderr}")),
            Termination::Signaled { signal } => {
                Some(format!("killed by signal {signal}: {stderr}"))
            }
            Termination::TimedOut => Some(format!(
                "E_SANDBOX_TIMEOUT: timeout after {}s",
                env.timeout_seconds
            )),
        };
        let mut metadata = BTreeMap::new();
        let num = |n: u64| MetadataValue::Number(serde_json::Number::from(n));
        metadata.insert(
            "termination".into(),
            MetadataValue::Text(serde_json::to_string(&out.termination).unwrap_or_default()),
        );
        metadata.insert(
            "stdout_dropped".into(),
            num(out.stdout_dropped + stdout_cut as u64),
        );
        metadata.insert("stderr_dropped".into(), num(out.stderr_dropped));
        metadata.insert(
            "secrets_redacted".into(),
            num((stdout_secrets + stderr_secrets) as u64),
        );
        ExecutionResult {
            execution_id: env.execution_id.clone(),
            step_index: env.step_index,
            success,
            return_value,
            content: Vec::new(),
            metadata,
            artifacts: artifacts(work, env),
            taint: TaintLevel::External,
            error,
            duration_seconds: out.duration.as_secs_f64(),
            tokens_used: 0,
            cost_usd: 0.0,
        }
    }
}

/// Files the run produced (not the staged inputs), by name → path.
fn artifacts(work: &Path, env: &ExecutionEnvelope) -> BTreeMap<String, String> {
    let Ok(dir) = std::fs::read_dir(work) else {
        return BTreeMap::new();
    };
    dir.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let staged = env.input_artifacts.contains_key(&name)
                || (env.action == PYTHON_EXEC && name == "main.py");
            (!staged).then(|| (name, e.path().display().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_happens_before_truncation() {
        let secret = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
        let raw = format!("{}{secret} tail", "x".repeat(20));
        // Cap in the middle of the secret: the secret is still fully redacted.
        let (out, found, cut) = model_facing_output(&raw, 30);
        assert_eq!(found, 1);
        assert!(!out.contains("ghp_"), "{out}");
        assert!(!out.contains("aBcDeF"), "{out}");
        assert!(cut > 0 && out.contains("[output truncated"));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let (out, _, cut) = model_facing_output("日本語テキスト", 7);
        assert!(out.starts_with("日本"));
        assert_eq!(cut, "日本語テキスト".len() - 6);
    }

    #[test]
    fn artifact_names_are_plain_file_names() {
        for ok in ["data.csv", "a-b_c.txt", "x"] {
            assert!(safe_artifact_name(ok));
        }
        for bad in ["", ".", "..", "../x", "a/b", "/etc/passwd", "a b"] {
            assert!(!safe_artifact_name(bad), "{bad}");
        }
    }
}
