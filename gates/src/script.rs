//! The script provider (§5.5.4), built so context values can never become
//! code (spec option A, plus C):
//!
//! * the command (`check_command`, else `check`) comes from config or an
//!   approved plan and is split into argv by [`split_command`] — quotes
//!   group, nothing expands, and no shell ever runs it;
//! * context values reach the script **only** as environment variables,
//!   `SILAS_CTX_<KEY>` (key upper-cased, anything but `[A-Z0-9_]` → `_`;
//!   strings verbatim, other values as JSON; each `tool_args` entry also as
//!   `SILAS_CTX_TOOL_ARGS_<ARG>`), in an otherwise empty environment (`PATH`
//!   only, plus `SILAS_GATE_NAME`);
//! * the process runs in its own process group in the gates working
//!   directory with stdin closed; on timeout (30 s by default) the whole
//!   group is SIGKILLed; stdout/stderr are capped.
//!
//! Stdout lines `key: value` become extracted values; the reserved line
//! `modified_context: {json}` becomes `GateResult.modified_context` (the
//! runner's allowlist still applies). Then: `check_expect` → the §3.3
//! predicate; else `extract` → delegate the value to the predicate provider;
//! else exit status 0 → continue, non-zero → block (fail closed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateAction, GateResult};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::expect::{Observed, evaluate};
use crate::predicate::PredicateProvider;
use crate::provider::{BoxFuture, GateCheckProvider, block, fail_closed, result};

/// Spec default: 30 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Stdout beyond this is read and discarded (so the script never blocks on a
/// full pipe) but not kept.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;
const MAX_STDERR: usize = 4 * 1024;
/// The `PATH` a script runs with unless [`ScriptProvider::with_path_env`]
/// says otherwise.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Prefix of context environment variables.
pub const ENV_PREFIX: &str = "SILAS_CTX_";
/// The reserved stdout key carrying a context mutation.
pub const MODIFIED_CONTEXT: &str = "modified_context";

/// Splits a configured command into argv: whitespace separates, `'…'` and
/// `"…"` group (no escapes inside single quotes; `\"` and `\\` inside double
/// quotes), a backslash outside quotes escapes the next character. Nothing is
/// expanded: `$`, backticks, `;`, `|` are ordinary characters, because no
/// shell interprets the result.
pub fn split_command(cmd: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut in_arg = false;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(x) => cur.push(x),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_arg = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => return Err("trailing backslash".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_arg {
                    args.push(std::mem::take(&mut cur));
                    in_arg = false;
                }
            }
            c => {
                in_arg = true;
                cur.push(c);
            }
        }
    }
    if in_arg {
        args.push(cur);
    }
    if args.is_empty() {
        return Err("empty command".into());
    }
    Ok(args)
}

/// `SILAS_CTX_` + the key upper-cased with every character outside
/// `[A-Z0-9_]` replaced by `_`.
pub fn env_name(key: &str) -> String {
    let mut s = String::from(ENV_PREFIX);
    s.extend(key.chars().map(|c| {
        let u = c.to_ascii_uppercase();
        if u.is_ascii_uppercase() || u.is_ascii_digit() || u == '_' {
            u
        } else {
            '_'
        }
    }));
    s
}

fn env_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The context as environment variables, in key order. When two keys
/// sanitise to the same name the first wins (deterministic, and a later key
/// cannot shadow an earlier one). A value with a NUL byte cannot be passed
/// and is an error (the gate blocks rather than alter the data).
pub fn context_env(ctx: &JsonObject) -> Result<Vec<(String, String)>, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |k: String, v: String| -> Result<(), String> {
        if v.contains('\0') {
            return Err(format!("context value {k} contains a NUL byte"));
        }
        out.entry(k).or_insert(v);
        Ok(())
    };
    for (k, v) in ctx {
        add(env_name(k), env_value(v))?;
    }
    if let Some(Value::Object(args)) = ctx.get(crate::context::TOOL_ARGS) {
        for (k, v) in args {
            add(env_name(&format!("tool_args_{k}")), env_value(v))?;
        }
    }
    Ok(out.into_iter().collect())
}

/// Parsed stdout: `key: value` pairs (first occurrence wins) and the
/// reserved mutation line, if any.
#[derive(Debug, Default, PartialEq)]
pub struct ScriptOutput {
    pub values: BTreeMap<String, String>,
    pub modified_context: Option<Result<JsonObject, String>>,
}

/// Parses stdout lines. The mutation may be written `modified_context:
/// {json}` or as a JSON object line `{"modified_context": {…}}`.
pub fn parse_stdout(out: &str) -> ScriptOutput {
    let mut s = ScriptOutput::default();
    for line in out.lines() {
        let t = line.trim();
        if t.starts_with('{') {
            if let Ok(Value::Object(mut o)) = serde_json::from_str::<Value>(t)
                && let Some(m) = o.remove(MODIFIED_CONTEXT)
            {
                s.modified_context.get_or_insert(match m {
                    Value::Object(m) => Ok(m),
                    _ => Err("modified_context is not an object".into()),
                });
            }
            continue;
        }
        let Some((k, v)) = t.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == MODIFIED_CONTEXT {
            s.modified_context
                .get_or_insert(match serde_json::from_str::<Value>(v) {
                    Ok(Value::Object(m)) => Ok(m),
                    Ok(_) => Err("modified_context is not an object".into()),
                    Err(e) => Err(format!("modified_context is not JSON: {e}")),
                });
        } else if !k.is_empty() {
            s.values.entry(k.to_owned()).or_insert_with(|| v.to_owned());
        }
    }
    s
}

/// Runs gate scripts. See the module doc for the isolation rules.
pub struct ScriptProvider {
    workdir: PathBuf,
    timeout: Duration,
    max_output: usize,
    path_env: String,
    predicate: Arc<PredicateProvider>,
    allowed_dirs: Vec<PathBuf>,
}

impl ScriptProvider {
    /// A provider running in `workdir` (the gates working directory, also
    /// the `file_exists` root), delegating extracted values to `predicate`.
    pub fn new(workdir: PathBuf, predicate: Arc<PredicateProvider>) -> Self {
        ScriptProvider {
            allowed_dirs: vec![workdir.clone()],
            workdir,
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            path_env: DEFAULT_PATH.to_owned(),
            predicate,
        }
    }

    /// Overrides the 30 s timeout (tests, tighter deployments).
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn with_max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    pub fn with_path_env(mut self, path: impl Into<String>) -> Self {
        self.path_env = path.into();
        self
    }

    pub async fn evaluate(&self, gate: &Gate, ctx: &JsonObject) -> GateResult {
        let Some(cmd) = script_command(gate) else {
            return fail_closed(gate, "script gate has no check_command");
        };
        let argv = match split_command(cmd) {
            Ok(a) => a,
            Err(e) => return fail_closed(gate, format!("invalid check_command: {e}")),
        };
        let env = match context_env(ctx) {
            Ok(e) => e,
            Err(e) => return fail_closed(gate, e),
        };
        let run = match self.run(&argv, &gate.name, env).await {
            Ok(r) => r,
            Err(e) => return fail_closed(gate, e),
        };
        let parsed = parse_stdout(&run.stdout);
        let mutation = match parsed.modified_context {
            None => None,
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => return fail_closed(gate, format!("script output: {e}")),
        };
        let mut r = if let Some(expect) = &gate.check_expect {
            let (pass, why) = evaluate(
                expect,
                &Observed {
                    exit_code: run.exit_code,
                    output: &run.stdout,
                    allowed_dirs: &self.allowed_dirs,
                },
            );
            if pass {
                result(
                    gate,
                    GateAction::Continue,
                    format!("check_expect passed: {why}"),
                )
            } else {
                block(gate, format!("check_expect failed: {why}"))
            }
        } else if let Some(name) = &gate.extract {
            let v = parsed.values.get(name).map(|s| Value::String(s.clone()));
            self.predicate.evaluate_value(gate, v.as_ref())
        } else if run.exit_code == Some(0) {
            // The output itself stays out of the reason: reasons are audited.
            let out = run.stdout.trim();
            result(
                gate,
                GateAction::Continue,
                format!("script ok ({} bytes of output)", out.len()),
            )
        } else {
            match run.exit_code {
                Some(code) => block(gate, format!("script exited with code {code}")),
                // Killed by a signal (the OOM killer, a crash): no verdict.
                None => fail_closed(gate, "script was killed by a signal"),
            }
        };
        if r.modified_context.is_none() {
            r.modified_context = mutation;
        }
        r
    }

    async fn run(
        &self,
        argv: &[String],
        gate_name: &str,
        env: Vec<(String, String)>,
    ) -> Result<RunOutput, String> {
        let (program, args) = argv.split_first().ok_or("empty command")?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("PATH", &self.path_env)
            .env("SILAS_GATE_NAME", gate_name)
            .envs(env)
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group so a timeout can kill everything it forked.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("script failed to start: {e}"))?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let max = self.max_output;
        let outcome = {
            let work = async {
                let (o, e) =
                    tokio::join!(read_capped(stdout, max), read_capped(stderr, MAX_STDERR));
                (o, e, child.wait().await)
            };
            tokio::time::timeout(self.timeout, work).await
        };
        // Always reap the group: a finished script may have left background
        // children behind, and a timed-out one must not outlive the gate.
        kill_group(pgid);
        match outcome {
            Ok((stdout, _stderr, status)) => {
                let status = status.map_err(|e| format!("script wait failed: {e}"))?;
                Ok(RunOutput {
                    exit_code: status.code().map(i64::from),
                    stdout,
                })
            }
            Err(_) => {
                let _ = child.kill().await;
                Err(format!("script timed out after {:?}", self.timeout))
            }
        }
    }
}

struct RunOutput {
    exit_code: Option<i64>,
    stdout: String,
}

fn kill_group(pgid: Option<i32>) {
    if let Some(pid) = pgid.and_then(rustix::process::Pid::from_raw) {
        // ESRCH (already gone) is the normal case after a clean exit.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

async fn read_capped<R: AsyncRead + Unpin>(r: Option<R>, max: usize) -> String {
    let Some(mut r) = r else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

impl GateCheckProvider for ScriptProvider {
    fn check<'a>(&'a self, gate: &'a Gate, ctx: &'a JsonObject) -> BoxFuture<'a, GateResult> {
        Box::pin(self.evaluate(gate, ctx))
    }
}

/// The command a script gate runs: `check_command`, or `check`.
pub fn script_command(gate: &Gate) -> Option<&str> {
    gate.check_command.as_deref().or(gate.check.as_deref())
}

/// Why a script gate cannot run as configured — its command does not
/// parse, or names no executable file (relative to `workdir`, or on
/// `path_env` for a bare name) — or `None`. Such a gate blocks every check
/// it makes; the daemon says so at start.
pub fn script_gate_problem(gate: &Gate, workdir: &Path, path_env: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let Some(cmd) = script_command(gate) else {
        return Some("it has no check_command".into());
    };
    let argv = match split_command(cmd) {
        Ok(a) => a,
        Err(e) => return Some(format!("its check_command does not parse ({e})")),
    };
    let program = argv.first()?;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        executable(&workdir.join(program))
    } else {
        path_env
            .split(':')
            .any(|dir| executable(&Path::new(dir).join(program)))
    };
    (!found).then(|| format!("{program:?} is not an executable file"))
}

/// The script provider as the daemon registers it: a script gate runs only
/// as the owner wrote it in `gates.system` (the whole definition must
/// match). A plan's script gate is written by a model and would run a host
/// command outside the sandbox while the plan card shows only its name, so
/// it is blocked here (plans carrying one are refused when parsed, too).
pub struct ConfiguredScripts {
    inner: ScriptProvider,
    configured: Vec<Gate>,
}

impl ConfiguredScripts {
    /// `configured`: the owner's gates; those of other providers are ignored.
    pub fn new(inner: ScriptProvider, configured: &[Gate]) -> Self {
        ConfiguredScripts {
            inner,
            configured: configured
                .iter()
                .filter(|g| g.provider == silas_core::model::gates::GateProvider::Script)
                .cloned()
                .collect(),
        }
    }

    pub async fn evaluate(&self, gate: &Gate, ctx: &JsonObject) -> GateResult {
        if !self.configured.contains(gate) {
            return fail_closed(
                gate,
                "a script gate runs only as configured by the owner (gates.system)",
            );
        }
        self.inner.evaluate(gate, ctx).await
    }
}

impl GateCheckProvider for ConfiguredScripts {
    fn check<'a>(&'a self, gate: &'a Gate, ctx: &'a JsonObject) -> BoxFuture<'a, GateResult> {
        Box::pin(self.evaluate(gate, ctx))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn split_command_table() {
        let ok: &[(&str, &[&str])] = &[
            ("./check.sh", &["./check.sh"]),
            (
                "  python3  check.py --x 1 ",
                &["python3", "check.py", "--x", "1"],
            ),
            ("sh -c 'echo hi; exit 1'", &["sh", "-c", "echo hi; exit 1"]),
            (r#"a "b c" d"#, &["a", "b c", "d"]),
            (r#"a "q\"x\\" "#, &["a", "q\"x\\"]),
            (r"a b\ c", &["a", "b c"]),
            ("a ''", &["a", ""]),
            (
                "echo $(touch x) `id` ; | &",
                &["echo", "$(touch", "x)", "`id`", ";", "|", "&"],
            ),
        ];
        for (cmd, want) in ok {
            assert_eq!(split_command(cmd).unwrap(), *want, "{cmd}");
        }
        for bad in ["", "   ", "a 'b", "a \"b", "a \\"] {
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_name_table() {
        let cases = [
            ("message", "SILAS_CTX_MESSAGE"),
            ("tool_args", "SILAS_CTX_TOOL_ARGS"),
            ("position-usd", "SILAS_CTX_POSITION_USD"),
            ("a b=c;$(x)", "SILAS_CTX_A_B_C___X_"),
            ("ünï", "SILAS_CTX__N_"),
            ("", "SILAS_CTX_"),
        ];
        for (k, want) in cases {
            assert_eq!(env_name(k), want, "{k}");
        }
    }

    #[test]
    fn context_env_values_and_collisions() {
        let ctx = json!({"a-b": "first", "a_b": "second", "n": 2.5, "tool_args": {"size": 10}, "z": null});
        let env = context_env(ctx.as_object().unwrap()).unwrap();
        let m: BTreeMap<_, _> = env.into_iter().collect();
        assert_eq!(m["SILAS_CTX_A_B"], "first");
        assert_eq!(m["SILAS_CTX_N"], "2.5");
        assert_eq!(m["SILAS_CTX_TOOL_ARGS"], r#"{"size":10}"#);
        assert_eq!(m["SILAS_CTX_TOOL_ARGS_SIZE"], "10");
        assert_eq!(m["SILAS_CTX_Z"], "null");
        let bad = json!({"m": "a\0b"});
        assert!(context_env(bad.as_object().unwrap()).is_err());
    }

    #[test]
    fn parse_stdout_table() {
        let s = parse_stdout(
            "position: 25\nnote: a: b\nnoise line\nposition: 99\nmodified_context: {\"tool_args\": {\"x\": 1}}\n",
        );
        assert_eq!(s.values["position"], "25");
        assert_eq!(s.values["note"], "a: b");
        assert_eq!(s.values.len(), 2);
        assert_eq!(
            s.modified_context,
            Some(Ok(json!({"tool_args": {"x": 1}})
                .as_object()
                .unwrap()
                .clone()))
        );
        let s = parse_stdout("{\"modified_context\": {\"response\": \"r\"}}\n");
        assert_eq!(s.modified_context.unwrap().unwrap()["response"], "r");
        assert!(
            parse_stdout("modified_context: nope")
                .modified_context
                .unwrap()
                .is_err()
        );
        assert!(
            parse_stdout("modified_context: [1]")
                .modified_context
                .unwrap()
                .is_err()
        );
        assert_eq!(parse_stdout("").values.len(), 0);
    }

    #[tokio::test]
    async fn only_the_owners_script_gates_run() {
        use silas_core::model::gates::{GateProvider, GateTrigger};
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let cmd = format!("touch {}", marker.display());
        let mut owners = Gate::new("mine", GateTrigger::OnToolCall);
        owners.provider = GateProvider::Script;
        owners.check_command = Some(cmd.clone());
        let mut other = Gate::new("guard", GateTrigger::OnToolCall);
        other.check = Some("pii".into());
        let p = ConfiguredScripts::new(
            ScriptProvider::new(
                dir.path().to_path_buf(),
                Arc::new(PredicateProvider::new(vec![dir.path().to_path_buf()])),
            ),
            &[owners.clone(), other],
        );
        let ctx = JsonObject::new();
        // A plan's gate: another name, the same command; the same name with
        // another command; the owner's gate with a check added.
        let mut renamed = owners.clone();
        renamed.name = "plan-gate".into();
        let mut rewritten = owners.clone();
        rewritten.check_command = Some(format!("{cmd} --and-more"));
        let mut loosened = owners.clone();
        loosened.extract = Some("x".into());
        for g in [renamed, rewritten, loosened] {
            let r = p.evaluate(&g, &ctx).await;
            assert_eq!(r.action, GateAction::Block, "{g:?}");
            assert!(r.reason.contains("gates.system"), "{}", r.reason);
            assert!(!marker.exists(), "{g:?} ran");
        }
        let r = p.evaluate(&owners, &ctx).await;
        assert_eq!(r.action, GateAction::Continue, "{}", r.reason);
        assert!(marker.exists());
    }

    #[test]
    fn a_script_gate_that_cannot_run_is_named() {
        use silas_core::model::gates::GateTrigger;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("check.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        let gate = |cmd: Option<&str>| {
            let mut g = Gate::new("g", GateTrigger::EveryUserMessage);
            g.check_command = cmd.map(str::to_owned);
            g
        };
        let problem = |cmd| script_gate_problem(&gate(cmd), dir.path(), "/usr/bin:/bin");
        assert!(
            problem(Some("./check.sh"))
                .unwrap()
                .contains("not an executable")
        );
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(problem(Some("./check.sh --strict")), None);
        assert_eq!(problem(Some(script.to_str().unwrap())), None);
        assert_eq!(problem(Some("sh -c 'exit 0'")), None);
        assert!(problem(Some("/usr/local/bin/check-message")).is_some());
        assert!(problem(Some("no-such-program-here")).is_some());
        assert!(problem(Some("a 'b")).unwrap().contains("does not parse"));
        assert!(problem(None).unwrap().contains("no check_command"));
    }
}
