//! The in-sandbox half: a small supervisor process that isolates itself and
//! then runs the command as its child.
//!
//! Started by [`crate::SubprocessSandbox`] (as `silas __sandbox-exec` or the
//! `silas-sandbox-exec` binary), it reads the [`SandboxSpec`] as JSON on stdin
//! and, while still single-threaded:
//!
//! 1. starts a new session (its own process group) and becomes a *child
//!    subreaper*, so every descendant — even one that calls `setsid` — is
//!    re-parented to it and can be found and killed;
//! 2. asks for SIGKILL if the daemon dies;
//! 3. without network: enters a new, empty network namespace; with network
//!    through an egress proxy (`egress_proxy_port`): stays in the host
//!    namespace, but step 6 lets TCP connect only to that port (and bind
//!    nowhere) and the proxy variables name it;
//! 4. sets rlimits (address space, CPU, processes, file size, no core dumps);
//! 5. when running as root, drops to the unprivileged `nobody` user (so the
//!    process limit applies and no capability survives);
//! 6. sets `no_new_privs` and confines the filesystem with landlock: read +
//!    execute on system directories, read on the granted paths, read + write
//!    on the work dir and granted write paths, nothing else; with an egress
//!    port, the same ruleset handles TCP connect/bind (landlock ABI 4) and
//!    scopes abstract unix sockets to the sandbox (ABI 6: in the host
//!    network namespace they would otherwise reach host services).
//!
//! Limits of the egress confinement: landlock port rules match the port on
//! *any* address, so another host listening on the proxy's (random,
//! ephemeral) port number is reachable too; and landlock has no UDP
//! control, so UDP (including DNS to a resolver) is not filtered. TCP, which
//! carries HTTP(S), goes only to the proxy, which resolves names itself.
//!
//! Any step the kernel refuses aborts **before** the command runs, with
//! `E_SANDBOX_UNAVAILABLE` naming what is missing — there is no fallback to an
//! unconfined run. Then it spawns the command (argv, explicit environment,
//! stdin `/dev/null`), forwards at most `max_output_bytes` of each output
//! stream (counting the rest), enforces the timeout by killing every
//! descendant, and finally reports how the command ended.
//!
//! Launcher → parent protocol on stdout (the command never sees this fd):
//! frames of `tag: u8, len: u32 big-endian, payload`; tag `O`/`E` carry
//! stdout/stderr bytes, tag `S` the final JSON [`Report`], always last.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use rustix::process::{Resource, Rlimit, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

use crate::spec::{SandboxError, SandboxSpec, Termination};

/// The final frame.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub result: Result<Termination, SandboxError>,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

pub const TAG_STDOUT: u8 = b'O';
pub const TAG_STDERR: u8 = b'E';
pub const TAG_REPORT: u8 = b'S';

/// The unprivileged user a root-started sandbox runs as.
pub const SANDBOX_UID: u32 = 65534;
pub const SANDBOX_GID: u32 = 65534;

/// System directories every command may read and execute from.
const SYSTEM_READ_EXEC: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];
/// Pseudo-filesystems and devices commands commonly need.
const SYSTEM_READ: &[&str] = &["/proc", "/dev/urandom", "/dev/random", "/dev/zero"];
const SYSTEM_READ_WRITE: &[&str] = &["/dev/null"];

type Out = Arc<Mutex<std::io::Stdout>>;

fn write_frame(out: &Out, tag: u8, payload: &[u8]) {
    // A frame never exceeds u32; chunks are at most 64 KiB and the report is small.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    if let Ok(mut w) = out.lock() {
        let mut header = [0u8; 5];
        header[0] = tag;
        header[1..].copy_from_slice(&len.to_be_bytes());
        // The parent gone means nobody listens; nothing useful to do with the error.
        let _ = w
            .write_all(&header)
            .and_then(|_| w.write_all(payload))
            .and_then(|_| w.flush());
    }
}

/// Entry point of the launcher process.
pub fn main() -> ExitCode {
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let mut input = String::new();
    let report = match std::io::stdin().read_to_string(&mut input) {
        Err(e) => failure(SandboxError::Launcher(format!("cannot read the spec: {e}"))),
        Ok(_) => match serde_json::from_str::<SandboxSpec>(&input) {
            Err(e) => failure(SandboxError::Invalid(format!("malformed spec: {e}"))),
            Ok(spec) => supervise(&spec, &out),
        },
    };
    // Every Report variant serialises (a test covers each); the fallback is a
    // valid report rather than an empty frame.
    let json = serde_json::to_vec(&report).unwrap_or_else(|e| {
        format!(r#"{{"result":{{"Err":{{"launcher":"cannot encode report: {e}"}}}},"stdout_dropped":0,"stderr_dropped":0}}"#)
            .into_bytes()
    });
    write_frame(&out, TAG_REPORT, &json);
    ExitCode::SUCCESS
}

fn failure(e: SandboxError) -> Report {
    Report {
        result: Err(e),
        stdout_dropped: 0,
        stderr_dropped: 0,
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Unavailable {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

fn supervise(spec: &SandboxSpec, out: &Out) -> Report {
    if let Err(e) = validate(spec).and_then(|_| isolate(spec)) {
        return failure(e);
    }
    let mut child = match spawn(spec) {
        Ok(c) => c,
        Err(e) => return failure(e),
    };
    let readers = [
        child
            .stdout
            .take()
            .map(|s| pump(s, TAG_STDOUT, spec.max_output_bytes, out.clone())),
        child
            .stderr
            .take()
            .map(|s| pump(s, TAG_STDERR, spec.max_output_bytes, out.clone())),
    ];
    let result = wait(child, spec.timeout);
    // Whatever the command left behind (background jobs, escaped sessions) dies with it.
    kill_descendants();
    let [so, se] = readers.map(|r| r.and_then(|h| h.join().ok()).unwrap_or(0));
    Report {
        result,
        stdout_dropped: so,
        stderr_dropped: se,
    }
}

fn validate(spec: &SandboxSpec) -> Result<(), SandboxError> {
    if spec.egress_proxy_port == Some(0) {
        // Port 0 in a landlock port rule means "any ephemeral port".
        return Err(SandboxError::Invalid("egress proxy port 0".into()));
    }
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return Err(SandboxError::Invalid("argv is empty".into()));
    }
    if !spec.work_dir.is_absolute() || !spec.work_dir.is_dir() {
        return Err(SandboxError::Invalid(format!(
            "work dir {} must be an existing absolute directory",
            spec.work_dir.display()
        )));
    }
    for p in spec.read_paths.iter().chain(&spec.write_paths) {
        if !p.is_absolute() || !p.exists() {
            return Err(SandboxError::Invalid(format!(
                "granted path {} must exist and be absolute",
                p.display()
            )));
        }
    }
    Ok(())
}

fn isolate(spec: &SandboxSpec) -> Result<(), SandboxError> {
    rustix::process::setsid().map_err(|e| unavailable("new session", e))?;
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))
        .map_err(|e| unavailable("child subreaper", e))?;
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| unavailable("parent death signal", e))?;
    if !spec.network {
        new_network_namespace()?;
    }

    set_limits(spec)?;
    if rustix::process::geteuid().is_root() {
        drop_root()?;
    }
    confine_filesystem(spec)
}

#[allow(unsafe_code)]
fn new_network_namespace() -> Result<(), SandboxError> {
    // SAFETY: `unshare_unsafe` is unsafe only because `CLONE_FILES` can split
    // the fd table between threads. We pass `CLONE_NEWNET` alone, and the
    // launcher is still single-threaded here (no thread has been spawned).
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
        .map_err(|e| unavailable("network namespace (network_access=false)", e))
}

fn set_limit(resource: Resource, what: &str, value: u64) -> Result<(), SandboxError> {
    let limit = Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    rustix::process::setrlimit(resource, limit).map_err(|e| unavailable(what, e))
}

fn set_limits(spec: &SandboxSpec) -> Result<(), SandboxError> {
    let l = &spec.limits;
    set_limit(
        Resource::As,
        "address space limit",
        l.memory_mb.saturating_mul(1 << 20),
    )?;
    set_limit(Resource::Cpu, "CPU time limit", l.cpu_seconds)?;
    set_limit(
        Resource::Fsize,
        "file size limit",
        l.file_size_mb.saturating_mul(1 << 20),
    )?;
    set_limit(Resource::Core, "core dump limit", 0)?;
    // RLIMIT_NPROC counts every task of the real user; the sandbox gets its
    // allowance on top of what that user already runs. (As root the launcher
    // switches to `nobody`, whose count is what matters.)
    let uid = if rustix::process::geteuid().is_root() {
        SANDBOX_UID
    } else {
        rustix::process::getuid().as_raw()
    };
    let existing = tasks_of_user(uid);
    set_limit(Resource::Nproc, "process limit", existing + l.max_processes)
}

fn drop_root() -> Result<(), SandboxError> {
    // Order matters: groups and gid need privilege, so uid goes last.
    rustix::thread::set_thread_groups(&[])
        .map_err(|e| unavailable("dropping supplementary groups", e))?;
    rustix::thread::set_thread_gid(rustix::process::Gid::from_raw(SANDBOX_GID))
        .map_err(|e| unavailable("dropping to the sandbox group", e))?;
    rustix::thread::set_thread_uid(rustix::process::Uid::from_raw(SANDBOX_UID))
        .map_err(|e| unavailable("dropping to the sandbox user", e))
}

/// The egress port landlock must enforce: only with network granted (without
/// network the empty namespace already has no route anywhere).
fn egress_port(spec: &SandboxSpec) -> Option<u16> {
    spec.egress_proxy_port.filter(|_| spec.network)
}

/// The proxy variables a command through the egress proxy gets; they
/// override anything the caller set, and no `NO_PROXY` survives (a bypass
/// would only meet landlock's refusal, but clients should not try).
pub fn egress_env(env: &[(String, String)], port: u16) -> Vec<(String, String)> {
    const PROXY_VARS: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"];
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !PROXY_VARS.iter().any(|v| k.eq_ignore_ascii_case(v)))
        .cloned()
        .collect();
    let url = format!("http://127.0.0.1:{port}");
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        out.push((k.to_string(), url.clone()));
    }
    out
}

fn confine_filesystem(spec: &SandboxSpec) -> Result<(), SandboxError> {
    rustix::thread::set_no_new_privs(true).map_err(|e| unavailable("no_new_privs", e))?;
    let abi = ABI::V3;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let what = if egress_port(spec).is_some() {
        "landlock filesystem, network and abstract-socket confinement (ABI 6)"
    } else {
        "landlock filesystem confinement"
    };
    let err = |e: landlock::RulesetError| unavailable(what, e);
    let mut rw: Vec<PathBuf> = vec![spec.work_dir.clone()];
    rw.extend(spec.write_paths.iter().cloned());
    rw.extend(SYSTEM_READ_WRITE.iter().map(PathBuf::from));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(err)?;
    if egress_port(spec).is_some() {
        // Handling both rights and granting only connect to one port: every
        // other TCP connect and every TCP bind is refused. HardRequirement
        // makes a kernel without landlock network support an error here.
        // The host namespace also exposes the host's abstract unix sockets
        // (namespaced by netns, invisible to filesystem rules — the
        // containerd-shim escape, CVE-2020-15257): scoping them needs ABI 6.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(err)?
            .scope(Scope::AbstractUnixSocket)
            .map_err(err)?;
    }
    let mut created = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(SYSTEM_READ_EXEC, read))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            SYSTEM_READ,
            AccessFs::ReadFile | AccessFs::ReadDir,
        ))
        .map_err(err)?
        .add_rules(path_beneath_rules(&spec.read_paths, read))
        .map_err(err)?
        .add_rules(path_beneath_rules(&rw, all))
        .map_err(err)?;
    if let Some(port) = egress_port(spec) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(unavailable(
            what,
            format!("kernel enforces it only {:?}", status.ruleset),
        ));
    }
    Ok(())
}

fn spawn(spec: &SandboxSpec) -> Result<Child, SandboxError> {
    let env = match egress_port(spec) {
        Some(port) => egress_env(&spec.env, port),
        None => spec.env.clone(),
    };
    Command::new(&spec.argv[0])
        .args(&spec.argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.work_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| SandboxError::Spawn {
            program: spec.argv[0].clone(),
            detail: e.to_string(),
        })
}

/// Forward up to `cap` bytes of a stream as frames; count and drop the rest.
fn pump(mut src: impl Read + Send + 'static, tag: u8, cap: usize, out: Out) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut forwarded = 0usize;
        let mut dropped = 0u64;
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let keep = n.min(cap.saturating_sub(forwarded));
            if keep > 0 {
                write_frame(&out, tag, &buf[..keep]);
                forwarded += keep;
            }
            dropped += (n - keep) as u64;
        }
        dropped
    })
}

fn wait(child: Child, timeout: Duration) -> Result<Termination, SandboxError> {
    // A blocking wait on its own thread: the exit is seen the moment it
    // happens, and the deadline is a plain receive timeout (no polling).
    let mut child = child;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(timeout) {
        Ok(s) => s,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            kill_descendants();
            let _ = rx.recv();
            return Ok(Termination::TimedOut);
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            return Err(SandboxError::Launcher("lost the command's waiter".into()));
        }
    };
    match status {
        Ok(status) => Ok(match (status.code(), status.signal()) {
            (Some(code), _) => Termination::Exited { code },
            (None, Some(signal)) => Termination::Signaled { signal },
            (None, None) => Termination::Exited { code: -1 },
        }),
        Err(e) => Err(SandboxError::Launcher(format!(
            "waiting for the command: {e}"
        ))),
    }
}

/// (pid, ppid, state) of every process, from /proc.
fn processes() -> Vec<(u32, u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may contain spaces and parentheses: parse after the last ')'.
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let ppid: u32 = fields.next()?.parse().ok()?;
        Some((pid, ppid, state))
    })
    .collect()
}

/// Live descendants of this process.
fn descendants() -> Vec<u32> {
    let me = rustix::process::getpid().as_raw_nonzero().get() as u32;
    let procs = processes();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, ppid, state) in &procs {
        if *state != 'Z' {
            children.entry(*ppid).or_default().push(*pid);
        }
    }
    let mut seen = HashSet::new();
    let mut stack = vec![me];
    while let Some(p) = stack.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if seen.insert(*c) {
                stack.push(*c);
            }
        }
    }
    seen.into_iter().collect()
}

/// SIGKILL every descendant until none is left (forks racing the kill are
/// bounded by the process limit), reaping the orphans re-parented to us.
fn kill_descendants() {
    for _ in 0..100 {
        let pids = descendants();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
        while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
        std::thread::sleep(Duration::from_millis(2));
    }
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

/// Tasks (threads count) currently run by `uid`.
fn tasks_of_user(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in dir.flatten() {
        let path = e.path();
        let owned = std::fs::read_to_string(path.join("status"))
            .ok()
            .is_some_and(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u32>().ok())
                    == Some(uid)
            });
        if owned {
            n += std::fs::read_dir(path.join("task"))
                .map(|t| t.count() as u64)
                .unwrap_or(1);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_shape_round_trips() {
        let errors = [
            SandboxError::Unavailable {
                what: "w".into(),
                detail: "d".into(),
            },
            SandboxError::Spawn {
                program: "p".into(),
                detail: "d".into(),
            },
            SandboxError::Invalid("i".into()),
            SandboxError::Launcher("l".into()),
            SandboxError::Timeout(3),
        ];
        let mut results: Vec<Result<Termination, SandboxError>> =
            errors.into_iter().map(Err).collect();
        results.push(Ok(Termination::Exited { code: 2 }));
        results.push(Ok(Termination::Signaled { signal: 9 }));
        results.push(Ok(Termination::TimedOut));
        for result in results {
            let r = Report {
                result: result.clone(),
                stdout_dropped: 1,
                stderr_dropped: 2,
            };
            let back: Report = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
            assert_eq!(back.result, result);
        }
    }
}
