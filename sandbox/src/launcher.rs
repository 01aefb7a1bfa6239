//! The in-sandbox half: a small supervisor process that isolates itself and
//! then runs the command as its child.
//!
//! Started by [`crate::SubprocessSandbox`] (as `silas __sandbox-exec` or the
//! `silas-sandbox-exec` binary), it reads the [`SandboxSpec`] as JSON on stdin
//! and, while still single-threaded (`isolate.rs`):
//!
//! 1. starts a new session (its own process group) and becomes a *child
//!    subreaper*, so every descendant — even one that calls `setsid` — is
//!    re-parented to it and can be found and killed;
//! 2. without network, cuts itself off: as root a new, empty network
//!    namespace; unprivileged a new user + network namespace (its uid/gid
//!    mapped to themselves); where the kernel refuses those, the seccomp
//!    socket filter ([`crate::seccomp`]) in the host namespace. With network
//!    through an egress proxy (`egress_proxy_port`): the host namespace, but
//!    step 5 lets TCP connect only to that port (and bind nowhere) and the
//!    proxy variables name it;
//! 3. sets rlimits (address space, CPU, processes, file size, no core dumps);
//! 4. when running as root, drops to the unprivileged `nobody` user (so the
//!    process limit applies and no capability survives), then asks for
//!    SIGKILL if the daemon dies (a credential change would clear that);
//! 5. sets `no_new_privs` and confines the filesystem with landlock: read +
//!    execute on system directories, read on the granted paths, read + write
//!    on the work dir and granted write paths, nothing else; with an egress
//!    port, the same ruleset handles TCP connect/bind (landlock ABI 4); in
//!    the host namespace (egress, seccomp) it also scopes abstract unix
//!    sockets to the sandbox (ABI 6: they would otherwise reach host
//!    services); then the seccomp filter, when that is the network isolation.
//!
//! Limits of the egress confinement: landlock port rules match the port on
//! *any* address, so another host listening on the proxy's (random,
//! ephemeral) port number is reachable too. Landlock has no UDP control,
//! so seccomp refuses every IPv4/IPv6 socket but a TCP stream (no UDP, no
//! DNS to a resolver: the proxy resolves names itself). TCP, which carries
//! HTTP(S), goes only to the proxy.
//!
//! Any step the kernel refuses aborts **before** the command runs, with
//! `E_SANDBOX_UNAVAILABLE` naming what is missing — there is no fallback to an
//! unconfined run. Then it spawns the command (argv, explicit environment,
//! stdin `/dev/null`) and supervises it **on this one thread**: a `poll(2)`
//! loop over both output pipes and a pidfd, with the timeout as deadline. (A
//! command may exhaust the process limit, which counts threads, so the
//! launcher must not need a new task after the spawn.) It forwards at most
//! `max_output_bytes` of each output stream (counting the rest), enforces the
//! timeout by killing every descendant, and finally reports how the command
//! ended and how it was confined ([`Report::confinement`]).
//!
//! Launcher → parent protocol on stdout (the command never sees this fd):
//! frames of `tag: u8, len: u32 big-endian, payload`; tag `O`/`E` carry
//! stdout/stderr bytes, tag `S` the final JSON [`Report`], always last — even
//! after a panic.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::panic::AssertUnwindSafe;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{PidfdFlags, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

use crate::isolate::{egress_port, isolate};
use crate::spec::{Confinement, SandboxError, SandboxSpec, Termination};

/// The final frame.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub result: Result<Termination, SandboxError>,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    /// How the command was confined; `None` when it never ran.
    #[serde(default)]
    pub confinement: Option<Confinement>,
}

pub const TAG_STDOUT: u8 = b'O';
pub const TAG_STDERR: u8 = b'E';
pub const TAG_REPORT: u8 = b'S';
/// Stream mode: the command started; payload = its JSON [`Confinement`].
pub const TAG_STARTED: u8 = b'R';
/// Stream mode, daemon → launcher: bytes for the command's stdin.
pub const TAG_INPUT: u8 = b'I';
/// Stream mode, daemon → launcher: close the command's stdin.
pub const TAG_CLOSE_INPUT: u8 = b'C';

/// Largest frame either side accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// What the daemon sends first, as one length-prefixed frame (`u32` big
/// endian length, then JSON), so that in stream mode the bytes after it are
/// the command's input frames.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    pub spec: SandboxSpec,
    /// Keep the command running with piped stdin (see [`crate::process`]).
    #[serde(default)]
    pub stream: bool,
}

/// The request frame as the daemon writes it.
pub fn encode_request(request: &Request) -> Result<Vec<u8>, SandboxError> {
    let mut request = request.clone();
    for p in crate::hidden::process_wide() {
        if !request.spec.hidden_paths.contains(&p) {
            request.spec.hidden_paths.push(p);
        }
    }
    let json = serde_json::to_vec(&request).map_err(|e| SandboxError::Invalid(e.to_string()))?;
    let len = u32::try_from(json.len())
        .ok()
        .filter(|l| (*l as usize) <= MAX_FRAME)
        .ok_or_else(|| SandboxError::Invalid("request too large".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&json);
    Ok(out)
}

/// The unprivileged user a root-started sandbox runs as.
pub const SANDBOX_UID: u32 = 65534;
pub const SANDBOX_GID: u32 = 65534;

/// How long the final drain waits for output once every descendant is dead.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

pub(crate) fn write_frame(out: &mut impl Write, tag: u8, payload: &[u8]) {
    // A frame never exceeds u32; chunks are at most 64 KiB and the report is small.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut header = [0u8; 5];
    header[0] = tag;
    header[1..].copy_from_slice(&len.to_be_bytes());
    // The parent gone means nobody listens; nothing useful to do with the error.
    let _ = out
        .write_all(&header)
        .and_then(|_| out.write_all(payload))
        .and_then(|_| out.flush());
}

/// Entry point of the launcher process. It always ends with a report frame:
/// even a panic (which must not happen) becomes a `Launcher` error after
/// every descendant is killed.
pub fn main() -> ExitCode {
    // The parent never shows our stderr; the report carries the message.
    std::panic::set_hook(Box::new(|_| {}));
    let mut out = std::io::stdout().lock();
    let report =
        std::panic::catch_unwind(AssertUnwindSafe(|| run(&mut out))).unwrap_or_else(|panic| {
            kill_descendants();
            let msg = silas_core::error::panic_text(&*panic).unwrap_or_default();
            failure(SandboxError::Launcher(format!("launcher panicked: {msg}")))
        });
    // Every Report variant serialises (a test covers each); the fallback is a
    // valid report rather than an empty frame.
    let json = serde_json::to_vec(&report).unwrap_or_else(|e| {
        format!(r#"{{"result":{{"Err":{{"launcher":"cannot encode report: {e}"}}}},"stdout_dropped":0,"stderr_dropped":0}}"#)
            .into_bytes()
    });
    write_frame(&mut out, TAG_REPORT, &json);
    ExitCode::SUCCESS
}

fn run(out: &mut impl Write) -> Report {
    let request = read_request().and_then(|bytes| {
        serde_json::from_slice::<Request>(&bytes)
            .map_err(|e| SandboxError::Invalid(format!("malformed spec: {e}")))
    });
    match request {
        Err(e) => failure(e),
        Ok(Request { spec, stream: true }) => crate::stream::supervise(&spec, out),
        Ok(Request {
            spec,
            stream: false,
        }) => supervise(&spec, out),
    }
}

/// Read exactly the request frame from fd 0, unbuffered: in stream mode
/// every byte after it belongs to the command's input.
fn read_request() -> Result<Vec<u8>, SandboxError> {
    let stdin = std::io::stdin();
    let mut header = [0u8; 4];
    read_exact_fd(stdin.as_fd(), &mut header)?;
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(SandboxError::Invalid(format!(
            "oversized request ({len} bytes)"
        )));
    }
    let mut body = vec![0u8; len];
    read_exact_fd(stdin.as_fd(), &mut body)?;
    Ok(body)
}

fn read_exact_fd(fd: BorrowedFd<'_>, mut buf: &mut [u8]) -> Result<(), SandboxError> {
    while !buf.is_empty() {
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => {
                return Err(SandboxError::Invalid(
                    "malformed spec: the request ended early".into(),
                ));
            }
            Ok(n) => buf = &mut buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(SandboxError::Launcher(format!("cannot read the spec: {e}")));
            }
        }
    }
    Ok(())
}

pub(crate) fn failure(e: SandboxError) -> Report {
    Report {
        result: Err(e),
        stdout_dropped: 0,
        stderr_dropped: 0,
        confinement: None,
    }
}

fn supervise(spec: &SandboxSpec, out: &mut impl Write) -> Report {
    let confinement = match validate(spec).and_then(|_| isolate(spec)) {
        Ok(c) => c,
        Err(e) => return failure(e),
    };
    let mut child = match spawn(spec, Stdio::null()) {
        Ok(c) => c,
        Err(e) => return failure(e),
    };
    let mut streams = [
        Stream::new(
            child.stdout.take().map(OwnedFd::from),
            TAG_STDOUT,
            spec.max_output_bytes,
        ),
        Stream::new(
            child.stderr.take().map(OwnedFd::from),
            TAG_STDERR,
            spec.max_output_bytes,
        ),
    ];
    let result = watch(&mut child, &mut streams, spec, out);
    // Whatever the command left behind (background jobs, escaped sessions)
    // dies with it; then the pipes reach end-of-file.
    kill_descendants();
    drain(&mut streams, out);
    let [so, se] = streams.map(|s| s.dropped);
    Report {
        result,
        stdout_dropped: so,
        stderr_dropped: se,
        confinement: Some(confinement),
    }
}

/// Forward what is left in the pipes once every descendant is dead.
pub(crate) fn drain(streams: &mut [Stream; 2], out: &mut impl Write) {
    let deadline = Instant::now() + DRAIN_GRACE;
    while streams.iter().any(|s| s.fd.is_some())
        && poll_once(streams, None, deadline, out).is_some()
    {}
}

/// One output pipe of the command.
pub(crate) struct Stream {
    pub(crate) fd: Option<OwnedFd>,
    tag: u8,
    /// Bytes forwarded at most; the rest is counted and dropped.
    cap: usize,
    forwarded: usize,
    pub(crate) dropped: u64,
}

impl Stream {
    pub(crate) fn new(fd: Option<OwnedFd>, tag: u8, cap: usize) -> Self {
        Stream {
            fd,
            tag,
            cap,
            forwarded: 0,
            dropped: 0,
        }
    }

    /// Forward what one read returns (up to the cap; count the rest); close
    /// at end-of-file or error.
    pub(crate) fn read_once(&mut self, out: &mut impl Write) {
        let cap = self.cap;
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 64 * 1024];
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => self.fd = None,
            Ok(n) => {
                let keep = n.min(cap.saturating_sub(self.forwarded));
                if keep > 0 {
                    write_frame(out, self.tag, &buf[..keep]);
                    self.forwarded += keep;
                }
                self.dropped += (n - keep) as u64;
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(_) => self.fd = None,
        }
    }
}

/// Poll the open streams (and `pidfd`, if given) once, until `deadline`, and
/// forward what is readable. Returns whether the child exited (`pidfd`
/// readable), or `None` at the deadline or when poll itself fails.
fn poll_once(
    streams: &mut [Stream; 2],
    pidfd: Option<&OwnedFd>,
    deadline: Instant,
    out: &mut impl Write,
) -> Option<bool> {
    let remaining = deadline.checked_duration_since(Instant::now())?;
    if remaining.is_zero() {
        return None;
    }
    let timeout = Timespec::try_from(remaining).ok();
    // Slots: 0, 1 = the streams (when open), 2 = the pidfd.
    let mut slots = Vec::with_capacity(3);
    let mut fds = Vec::with_capacity(3);
    for (i, s) in streams.iter().enumerate() {
        if let Some(fd) = &s.fd {
            slots.push(i);
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
    }
    if let Some(p) = pidfd {
        slots.push(2);
        fds.push(PollFd::new(p, PollFlags::IN));
    }
    match rustix::event::poll(&mut fds, timeout.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(_) => return None,
    }
    let readable = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
    let ready: Vec<usize> = slots
        .into_iter()
        .zip(&fds)
        .filter(|(_, p)| p.revents().intersects(readable))
        .map(|(slot, _)| slot)
        .collect();
    drop(fds);
    let mut exited = false;
    for slot in ready {
        match streams.get_mut(slot) {
            Some(s) => s.read_once(out),
            None => exited = true,
        }
    }
    Some(exited)
}

/// Forward output until the command exits or the timeout passes — on this
/// one thread: by now the command may have used up the process limit, which
/// counts threads too, so nothing here may need a new task.
fn watch(
    child: &mut Child,
    streams: &mut [Stream; 2],
    spec: &SandboxSpec,
    out: &mut impl Write,
) -> Result<Termination, SandboxError> {
    let deadline = Instant::now() + spec.timeout;
    let pidfd = open_pidfd(child)?;
    loop {
        match poll_once(streams, Some(&pidfd), deadline, out) {
            None => {
                kill_descendants();
                return Ok(Termination::TimedOut);
            }
            Some(true) => break,
            Some(false) => {}
        }
    }
    wait_child(child)
}

/// A pidfd that polls readable when the command exits (killing everything
/// when there is none: an unwatched command must not run).
pub(crate) fn open_pidfd(child: &Child) -> Result<OwnedFd, SandboxError> {
    let opened = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or(rustix::io::Errno::SRCH)
        .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()));
    opened.map_err(|e| {
        kill_descendants();
        SandboxError::Launcher(format!("cannot watch the command (pidfd_open: {e})"))
    })
}

/// Reap the command and say how it ended.
pub(crate) fn wait_child(child: &mut Child) -> Result<Termination, SandboxError> {
    match child.wait() {
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

pub(crate) fn validate(spec: &SandboxSpec) -> Result<(), SandboxError> {
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

pub(crate) fn spawn(spec: &SandboxSpec, stdin: Stdio) -> Result<Child, SandboxError> {
    let env = match egress_port(spec) {
        Some(port) => egress_env(&spec.env, port),
        None => spec.env.clone(),
    };
    let mut command = Command::new(&spec.argv[0]);
    command
        .args(&spec.argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.work_dir)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_launcher(&mut command);
    command.spawn().map_err(|e| SandboxError::Spawn {
        program: spec.argv[0].clone(),
        detail: e.to_string(),
    })
}

/// The command is SIGKILLed when the launcher dies, however it dies: the
/// daemon kills the launcher's process group on cancel and at its own
/// timeout, which misses a command that left the group (`setsid`), and the
/// launcher itself dies with the daemon. As the first process of its PID
/// namespace the command takes every process it started with it.
#[allow(unsafe_code)]
fn die_with_launcher(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the child between fork and exec and makes a
    // single prctl call, which is async-signal-safe and allocates nothing.
    // (A launcher killed inside that window is not noticed: in its own PID
    // namespace the command's parent is invisible, getppid says 0.)
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                .map_err(std::io::Error::from)
        });
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
pub(crate) fn kill_descendants() {
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
                confinement: Some(Confinement {
                    isolation: crate::spec::Isolation::Seccomp,
                    landlock_abi: 6,
                    pid_namespace: true,
                    private_proc: true,
                }),
            };
            let back: Report = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
            assert_eq!(back.result, result);
            assert_eq!(back.confinement, r.confinement);
        }
    }
}
