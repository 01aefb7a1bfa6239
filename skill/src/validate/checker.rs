//! Script syntax and facts from the real parsers: Python's own `ast` and
//! `sh -n` / `bash -n`. The script's bytes go in on stdin — the interpreter
//! never opens a file in the skill, runs with `/` as its working directory,
//! a cleared environment, `-I -S -B` and `PYTHONDONTWRITEBYTECODE=1`, so no
//! `__pycache__` (or anything else) is written and the skill's hash cannot
//! change. Parsing executes nothing of the script; a wall-clock limit bounds
//! a pathological input. [`ScriptChecker`] is a trait so a caller can run
//! the same checks inside the sandbox instead.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

const ANALYZE_PY: &str = include_str!("analyze.py");
/// The fixed search path for the interpreters (never the caller's `PATH`).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SyntaxError {
    /// 0 when the parser gave no line.
    pub line: u32,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct EnvRead {
    /// `None`: the name is computed (`os.environ[key]`).
    pub name: Option<String>,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CallSite {
    pub line: u32,
    pub what: String,
}

/// What `analyze.py` reports about one Python script.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PyFacts {
    pub syntax_error: Option<SyntaxError>,
    pub env: Vec<EnvRead>,
    pub shell: Vec<CallSite>,
    pub dynamic: Vec<CallSite>,
}

/// Parses scripts. `Err` is "could not check" (the interpreter is missing,
/// timed out or answered nonsense), which the report names as such.
pub trait ScriptChecker {
    fn python(&self, source: &[u8]) -> Result<PyFacts, String>;
    /// `Ok(None)`: parses. `bash`: the script asks for bash.
    fn shell(&self, source: &[u8], bash: bool) -> Result<Option<SyntaxError>, String>;
}

/// The host's `python3` and `sh`/`bash`, hardened as the module says.
#[derive(Clone, Debug)]
pub struct HostInterpreters {
    pub timeout: Duration,
}

impl Default for HostInterpreters {
    fn default() -> Self {
        HostInterpreters {
            timeout: Duration::from_secs(20),
        }
    }
}

struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(program: &str, args: &[&str], input: &[u8], timeout: Duration) -> Result<Ran, String> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LC_ALL", "C.UTF-8")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    // Feed and drain on threads so a large script or chatty parser cannot
    // deadlock on a full pipe.
    let mut stdin = child.stdin.take();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&data);
        }
    });
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let _ = r.take(1 << 20).read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} took longer than {timeout:?}"));
            }
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    let _ = writer.join();
    Ok(Ran {
        ok: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The line number in a shell's `-n` complaint: dash says `sh: 3: …`,
/// bash `bash: line 3: …`.
fn shell_error_line(msg: &str) -> u32 {
    let after = msg
        .find("line ")
        .map(|i| &msg[i + 5..])
        .or_else(|| msg.find(": ").map(|i| &msg[i + 2..]))
        .unwrap_or_default();
    after
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(0)
}

impl ScriptChecker for HostInterpreters {
    fn python(&self, source: &[u8]) -> Result<PyFacts, String> {
        let ran = run(
            "python3",
            &["-I", "-S", "-B", "-c", ANALYZE_PY],
            source,
            self.timeout,
        )?;
        if !ran.ok {
            let first = ran.stderr.lines().last().unwrap_or("no output");
            return Err(format!("python3 failed: {first}"));
        }
        serde_json::from_str(ran.stdout.trim()).map_err(|e| format!("python3 answered: {e}"))
    }

    fn shell(&self, source: &[u8], bash: bool) -> Result<Option<SyntaxError>, String> {
        let program = if bash { "bash" } else { "sh" };
        let ran = run(program, &["-n"], source, self.timeout)?;
        if ran.ok {
            return Ok(None);
        }
        let first = ran.stderr.lines().next().unwrap_or("syntax error").trim();
        Ok(Some(SyntaxError {
            line: shell_error_line(first),
            message: first.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_facts_come_from_the_ast() {
        let src = b"import os, subprocess\nx = os.environ['API_HOST']\ny = os.getenv('B')\nk = 'C'\nz = os.environ[k]\nsubprocess.run('ls ' + x, shell=True)\nos.system(x)\neval(x)\nsubprocess.run(['ls'], shell=False)\n";
        let f = HostInterpreters::default().python(src).unwrap();
        assert_eq!(f.syntax_error, None);
        let env: Vec<(Option<&str>, u32)> =
            f.env.iter().map(|e| (e.name.as_deref(), e.line)).collect();
        assert!(env.contains(&(Some("API_HOST"), 2)), "{env:?}");
        assert!(env.contains(&(Some("B"), 3)));
        assert!(env.contains(&(None, 5)));
        let shell: Vec<(u32, &str)> = f.shell.iter().map(|c| (c.line, c.what.as_str())).collect();
        assert!(shell.contains(&(6, "shell=True")));
        assert!(shell.contains(&(7, "os.system()")));
        assert_eq!(shell.len(), 2, "shell=False is fine: {shell:?}");
        assert_eq!(f.dynamic[0].line, 8);
        let bad = HostInterpreters::default()
            .python(b"def f(:\n  pass\n")
            .unwrap();
        assert_eq!(bad.syntax_error.unwrap().line, 1);
    }

    #[test]
    fn shell_syntax_names_the_line() {
        let h = HostInterpreters::default();
        assert_eq!(h.shell(b"echo ok\n", false).unwrap(), None);
        let e = h.shell(b"echo ok\nif then\nfi\n", false).unwrap().unwrap();
        assert!(e.line >= 2, "{e:?}");
        assert_eq!(shell_error_line("sh: 3: Syntax error: end of file"), 3);
        assert_eq!(shell_error_line("bash: line 7: syntax error"), 7);
    }
}
