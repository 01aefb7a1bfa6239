//! End-to-end tests of the `silas` binary: every test runs the real
//! executable as a subprocess in a fresh temporary directory (so the built-in
//! default configuration applies, never the repository's `config/silas.yaml`)
//! with an explicit `--data-dir`, a scrubbed environment and bounded waits.
//! The daemon always binds port 0; its address is read from the line it
//! prints on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_silas");
/// Upper bound for any one-shot command (init, audit, config check, a
/// failing start).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound for the daemon to print its "running" line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a signalled daemon may take to exit (the configured shutdown
/// grace is 30 s; an idle daemon must be far quicker than that).
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);
const RUNNING_PREFIX: &str = "Silas is running: web app and API at http://";

static RUN_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A finished invocation.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "expected success\n{}",
            self.describe()
        );
        self
    }

    fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// A user error: non-zero exit, exactly one line on stderr, no panic or
    /// backtrace text anywhere. Returns that line.
    fn assert_one_line_error(&self) -> String {
        assert!(
            !self.status.success(),
            "expected failure\n{}",
            self.describe()
        );
        assert!(
            self.status.code().is_some(),
            "expected an exit code, not death by signal\n{}",
            self.describe()
        );
        let lines = self.stderr_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one stderr line\n{}",
            self.describe()
        );
        for out in [&self.stdout, &self.stderr] {
            for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "E_INTERNAL"] {
                assert!(
                    !out.contains(bad),
                    "output mentions {bad:?}\n{}",
                    self.describe()
                );
            }
        }
        lines[0].to_string()
    }
}

/// A fresh working directory with `data/` as the data dir.
struct Sandbox {
    dir: TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        // A root daemon's sandbox user (`nobody`) must traverse down to
        // `data/sandbox`; `silas start` refuses a layout it cannot reach.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
        Sandbox { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn data(&self) -> PathBuf {
        self.root().join("data")
    }

    fn key_path(&self) -> PathBuf {
        self.data().join("keys").join("owner.key")
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root().join(name);
        fs::write(&p, text).expect("write file");
        p
    }

    /// Fresh log files for one invocation's stdout/stderr (files rather than
    /// pipes: nothing can block on a full pipe, and a daemon's output can be
    /// read while it runs).
    fn log_files(&self) -> (PathBuf, PathBuf) {
        let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let logs = self.root().join("logs");
        fs::create_dir_all(&logs).expect("logs dir");
        (
            logs.join(format!("{n}.stdout")),
            logs.join(format!("{n}.stderr")),
        )
    }

    /// `silas --data-dir <tmp>/data <args..>` with a scrubbed environment
    /// plus `envs`, in the sandbox as the working directory.
    fn command(&self, envs: &[(&str, &str)], args: &[&str]) -> (Command, PathBuf, PathBuf) {
        let (out, err) = self.log_files();
        let mut cmd = Command::new(BIN);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root())
            .current_dir(self.root())
            .arg("--data-dir")
            .arg(self.data())
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).expect("stdout file"))
            .stderr(fs::File::create(&err).expect("stderr file"));
        for (k, v) in envs {
            cmd.env(k, v);
        }
        (cmd, out, err)
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_env(&[], args)
    }

    fn run_env(&self, envs: &[(&str, &str)], args: &[&str]) -> Run {
        let (mut cmd, out, err) = self.command(envs, args);
        let mut child = cmd.spawn().expect("spawn silas");
        let status = wait_with_deadline(&mut child, COMMAND_TIMEOUT, &out, &err, args);
        Run {
            status,
            stdout: read_lossy(&out),
            stderr: read_lossy(&err),
        }
    }

    /// `silas start` on port 0; returns once the daemon printed its address.
    fn start_daemon(&self, envs: &[(&str, &str)]) -> Daemon {
        let mut all: Vec<(&str, &str)> = vec![("SILAS__CHANNELS__WEB__PORT", "0")];
        all.extend_from_slice(envs);
        let (mut cmd, out, err) = self.command(&all, &["start"]);
        let child = cmd.spawn().expect("spawn silas start");
        let mut daemon = Daemon {
            child,
            stdout: out,
            stderr: err,
            addr: None,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let stdout = read_lossy(&daemon.stdout);
            if let Some(addr) = parse_running_line(&stdout) {
                daemon.addr = Some(addr);
                return daemon;
            }
            if let Some(status) = daemon.child.try_wait().expect("try_wait") {
                panic!(
                    "daemon exited before it was ready: {status:?}\n{}",
                    daemon.logs()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "daemon not ready within {READY_TIMEOUT:?}\n{}",
                    daemon.logs()
                );
            }
            sleep(POLL);
        }
    }

    fn audit_events(&self) -> Vec<Value> {
        let run = self.run(&["audit", "tail", "--json", "-n", "1000"]);
        run.assert_success();
        run.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
            .collect()
    }
}

/// A running `silas start`; killed on drop so a failing test leaks nothing.
struct Daemon {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    addr: Option<SocketAddr>,
}

impl Daemon {
    fn addr(&self) -> SocketAddr {
        self.addr.expect("daemon address")
    }

    fn logs(&self) -> String {
        format!(
            "--- daemon stdout ---\n{}\n--- daemon stderr ---\n{}",
            read_lossy(&self.stdout),
            read_lossy(&self.stderr)
        )
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} failed: {status:?}");
    }

    /// Send `sig` and wait (bounded) for the exit; returns the status and how
    /// long the daemon took.
    fn stop_with(&mut self, sig: &str) -> (ExitStatus, Duration) {
        self.signal(sig);
        let t0 = Instant::now();
        let deadline = t0 + SHUTDOWN_LIMIT * 4;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, t0.elapsed());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "daemon did not exit within {:?} of {sig}\n{}",
                    deadline - t0,
                    self.logs()
                );
            }
            sleep(POLL);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_lossy(p: &Path) -> String {
    fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn wait_with_deadline(
    child: &mut Child,
    limit: Duration,
    out: &Path,
    err: &Path,
    args: &[&str],
) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`silas {}` did not finish within {limit:?}; killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                args.join(" "),
                read_lossy(out),
                read_lossy(err)
            );
        }
        sleep(POLL);
    }
}

/// The address from "Silas is running: web app and API at http://ADDR/ ...".
fn parse_running_line(stdout: &str) -> Option<SocketAddr> {
    let line = stdout.lines().find(|l| l.starts_with(RUNNING_PREFIX))?;
    let rest = &line[RUNNING_PREFIX.len()..];
    let addr = rest.split('/').next()?;
    Some(addr.parse().unwrap_or_else(|e| {
        panic!("unparsable address {addr:?} in {line:?}: {e}");
    }))
}

fn public_key_from(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("owner public key:"))
        .unwrap_or_else(|| panic!("no public key line in:\n{stdout}"));
    let key = line.rsplit(' ').next().unwrap_or_default().to_string();
    assert_eq!(key.len(), 64, "public key {key:?} is not 32 bytes of hex");
    assert!(key.chars().all(|c| c.is_ascii_hexdigit()), "{key:?}");
    key
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A parsed HTTP/1.1 response.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Send `GET path` on `stream` and read one response (Content-Length body).
fn get_on(stream: &mut TcpStream, addr: SocketAddr, path: &str, close: bool) -> Response {
    let conn = if close { "close" } else { "keep-alive" };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\nConnection: {conn}\r\n\r\n"
    )
    .expect("write request");
    stream.flush().expect("flush");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let mut parts = status_line.split_whitespace();
    assert_eq!(
        parts.next(),
        Some("HTTP/1.1"),
        "status line {status_line:?}"
    );
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').expect("header colon");
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let mut resp = Response {
        status,
        headers,
        body: String::new(),
    };
    let len: usize = resp
        .header("content-length")
        .expect("content-length header")
        .parse()
        .expect("numeric content-length");
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).expect("body");
    resp.body = String::from_utf8(body).expect("utf-8 body");
    resp
}

fn http_get(addr: SocketAddr, path: &str) -> Response {
    let mut s = connect(addr);
    get_on(&mut s, addr, path, true)
}

fn assert_healthy(addr: SocketAddr) {
    let r = http_get(addr, "/health");
    assert_eq!(r.status, 200, "GET /health: {}", r.body);
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "content-type {:?}",
        r.header("content-type")
    );
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("health is JSON");
    assert_eq!(v["status"], "ok", "{}", r.body);
    assert_eq!(v["connections"], 0, "{}", r.body);
    // Queue pressure (§18.6): an idle daemon accepts with empty queues.
    assert_eq!(v["queue"]["accepting"], true, "{}", r.body);
    assert_eq!(v["queue"]["pending_total"], 0, "{}", r.body);
    assert_eq!(v["queue"]["pressure"], "ok", "{}", r.body);
}

/// N from "audit chain ok: N entries verified".
fn verified_count(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("audit chain ok: "))
        .unwrap_or_else(|| panic!("no verification line in {stdout:?}"));
    line.trim_start_matches("audit chain ok: ")
        .trim_end_matches(" entries verified")
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

fn events_named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == name).collect()
}

// ---------------------------------------------------------------------------
// init
// ---------------------------------------------------------------------------

/// An older data dir (world-readable store, artifacts and data dir, checks'
/// `verify/` traversable) is narrowed by `init`: nothing but `sandbox/` stays
/// reachable by another user.
#[test]
fn init_narrows_an_older_wider_layout() {
    let sb = Sandbox::new();
    let data = sb.data();
    // A real store (an empty file is refused as corrupt), then the older,
    // wider modes over it.
    sb.run(&["init"]).assert_success();
    for d in ["", "artifacts/t-1", "verify/verify-1", "keys"] {
        fs::create_dir_all(data.join(d)).unwrap();
    }
    for (d, m) in [
        ("", 0o755),
        ("artifacts", 0o755),
        ("verify", 0o711),
        ("keys", 0o755),
    ] {
        fs::set_permissions(data.join(d), fs::Permissions::from_mode(m)).unwrap();
    }
    fs::set_permissions(data.join("silas.redb"), fs::Permissions::from_mode(0o644)).unwrap();
    sb.run(&["init"]).assert_success();
    assert_eq!(mode(&data.join("silas.redb")), 0o600);
    for d in ["artifacts", "verify", "keys"] {
        assert_eq!(mode(&data.join(d)), 0o700, "{d}");
    }
    assert_eq!(
        mode(&data) & 0o077 & !0o011,
        0,
        "data dir listable by others"
    );
    assert_eq!(mode(&data.join("sandbox/verify")), 0o711);
}

#[test]
fn init_creates_layout_and_is_idempotent_and_force_replaces_key() {
    let sb = Sandbox::new();
    let first = sb.run(&["init"]);
    first.assert_success();
    assert!(first.stderr_lines().is_empty(), "{}", first.describe());
    let pk1 = public_key_from(&first.stdout);

    let data = sb.data();
    assert!(data.join("silas.redb").is_file(), "store file missing");
    assert!(data.join("sandbox/verify").is_dir(), "verify dir missing");
    assert!(
        data.join("customer_context").is_dir(),
        "customer_context missing"
    );
    let key = sb.key_path();
    assert!(key.is_file(), "owner key missing");
    assert_eq!(mode(&key), 0o600, "owner key mode");
    for dir in [
        data.join("keys"),
        data.join("customer_context"),
        data.join("artifacts"),
    ] {
        assert_eq!(mode(&dir), 0o700, "{} mode", dir.display());
    }
    // Only `sandbox/` is for the unprivileged sandbox user (a root daemon's
    // sandboxes run as `nobody`): traverse-only, like the data dir then.
    let is_root = std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").unwrap()) == 0;
    let data_mode = if is_root { 0o711 } else { 0o710 };
    assert_eq!(mode(&data), data_mode, "data dir mode");
    for dir in [
        data.join("sandbox"),
        data.join("sandbox/verify"),
        data.join("sandbox/work"),
    ] {
        assert_eq!(mode(&dir), 0o711, "{} mode", dir.display());
    }
    assert_eq!(mode(&data.join("silas.redb")), 0o600, "store file mode");
    let key_bytes = fs::read(&key).unwrap();
    assert!(
        String::from_utf8_lossy(&key_bytes).contains(&pk1),
        "key file does not carry the printed public key"
    );

    // Second init: kept, byte-for-byte.
    let second = sb.run(&["init"]);
    second.assert_success();
    assert!(
        second.stdout.contains("kept"),
        "second init should say the key was kept\n{}",
        second.describe()
    );
    assert_eq!(public_key_from(&second.stdout), pk1);
    assert_eq!(fs::read(&key).unwrap(), key_bytes, "key file changed");
    assert_eq!(mode(&key), 0o600);

    // --force replaces it.
    let forced = sb.run(&["init", "--force"]);
    forced.assert_success();
    let pk2 = public_key_from(&forced.stdout);
    assert_ne!(pk2, pk1, "--force kept the old key");
    assert_ne!(fs::read(&key).unwrap(), key_bytes);
    assert_eq!(mode(&key), 0o600, "replaced key mode");
    let leftovers: Vec<_> = fs::read_dir(sb.data().join("keys"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "owner.key")
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary key files left behind: {leftovers:?}"
    );

    // Each init is audited, and the chain verifies.
    let events = sb.audit_events();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "init.owner_key_created",
            "init.checked",
            "init.owner_key_replaced"
        ]
    );
    let verify = sb.run(&["audit", "verify"]);
    verify.assert_success();
    assert!(
        verify.stdout.contains("audit chain ok: 3 entries verified"),
        "{}",
        verify.describe()
    );

    // The key file lost under a store its key sealed: not silently
    // replaced by a new owner key (every old signature would then read as
    // tampering); `--force` still does it when asked.
    fs::remove_file(&key).unwrap();
    for args in [&["init"][..], &["start"][..]] {
        let lost = sb.run(args);
        assert!(!lost.status.success(), "{args:?}: {}", lost.describe());
        assert!(
            lost.stderr.contains("E_CFG_KEYSTORE")
                && lost
                    .stderr
                    .contains("is missing, but this data dir's audit log is signed by it"),
            "{}",
            lost.describe()
        );
        assert!(!key.exists(), "{args:?} made a new key");
    }
    sb.run(&["init", "--force"]).assert_success();
    assert!(key.is_file());
}

// ---------------------------------------------------------------------------
// start / stop
// ---------------------------------------------------------------------------

/// `start` on an empty dir, GET /health, stop with `sig`, then check the
/// exit status and the audit trail. Returns the public key start printed.
fn start_serve_stop(sb: &Sandbox, sig: &str, sig_name: &str) -> String {
    let mut daemon = sb.start_daemon(&[]);
    let addr = daemon.addr();
    assert!(
        addr.ip().is_loopback(),
        "default bind is not loopback: {addr}"
    );
    assert_healthy(addr);

    // Connections the shutdown must not wait for: one idle after a
    // keep-alive request, one that never sent anything.
    let mut keep_alive = connect(addr);
    let r = get_on(&mut keep_alive, addr, "/health", false);
    assert_eq!(r.status, 200);
    let _idle = connect(addr);
    // The readiness line is printed just before the signal handlers are
    // installed; give the daemon a moment so the test exercises the
    // graceful path rather than that window.
    sleep(Duration::from_millis(100));

    let (status, took) = daemon.stop_with(sig);
    assert_eq!(
        status.code(),
        Some(0),
        "daemon did not exit 0 on {sig_name} (signal: {:?})\n{}",
        status.signal(),
        daemon.logs()
    );
    assert!(
        took < SHUTDOWN_LIMIT,
        "shutdown on {sig_name} took {took:?}\n{}",
        daemon.logs()
    );
    // The listener is gone.
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "{addr} still accepts connections after shutdown"
    );

    let stdout = read_lossy(&daemon.stdout);
    let pk = public_key_from(&stdout);

    let verify = sb.run(&["audit", "verify"]);
    verify.assert_success();
    let line = verify
        .stdout
        .lines()
        .find(|l| l.starts_with("audit chain ok: "))
        .unwrap_or_else(|| panic!("{}", verify.describe()));
    assert!(line.ends_with(" entries verified"), "{line:?}");

    let full = verified_count(&verify.stdout);

    // The shutdown checkpoint sits at the head, so verifying from it covers
    // fewer entries than the whole chain (without a checkpoint this would
    // silently be a full verification).
    let from_cp = sb.run(&["audit", "verify", "--from-checkpoint"]);
    from_cp.assert_success();
    let partial = verified_count(&from_cp.stdout);
    assert!(
        partial < full,
        "no checkpoint at the head: {partial} of {full} entries verified from it"
    );

    let events = sb.audit_events();
    let started = events_named(&events, "daemon.started");
    let stopped = events_named(&events, "daemon.stopped");
    assert_eq!(started.len(), 1, "{events:#?}");
    assert_eq!(stopped.len(), 1, "{events:#?}");
    assert_eq!(started[0]["data"]["owner_public_key"], pk.as_str());
    assert_eq!(started[0]["data"]["web"], addr.to_string());
    assert_eq!(
        started[0]["data"]["pid"].as_u64(),
        Some(u64::from(daemon.child.id()))
    );
    assert!(
        stopped[0]["data"].to_string().contains(sig_name),
        "daemon.stopped does not name {sig_name}: {}",
        stopped[0]
    );
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&Value::from("daemon.stopped")),
        "daemon.stopped is not the last entry"
    );
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    pk
}

#[test]
fn start_on_empty_dir_serves_health_and_stops_cleanly_on_sigterm() {
    let sb = Sandbox::new();
    start_serve_stop(&sb, "-TERM", "SIGTERM");
    assert_eq!(mode(&sb.key_path()), 0o600);
}

#[test]
fn start_on_empty_dir_serves_health_and_stops_cleanly_on_sigint() {
    let sb = Sandbox::new();
    start_serve_stop(&sb, "-INT", "SIGINT");
}

/// A closed terminal (SIGHUP) used to kill the daemon on the spot, with no
/// drain and no audit checkpoint.
#[test]
fn a_hangup_stops_the_daemon_cleanly() {
    let sb = Sandbox::new();
    start_serve_stop(&sb, "-HUP", "SIGHUP");
}

#[test]
fn init_after_start_keeps_the_key_and_restart_reuses_it() {
    let sb = Sandbox::new();
    let pk = start_serve_stop(&sb, "-TERM", "SIGTERM");
    let key_bytes = fs::read(sb.key_path()).unwrap();

    let init = sb.run(&["init"]);
    init.assert_success();
    assert!(init.stdout.contains("kept"), "{}", init.describe());
    assert_eq!(public_key_from(&init.stdout), pk);
    assert_eq!(fs::read(sb.key_path()).unwrap(), key_bytes);

    // A second start on the initialised dir uses the same key and does not
    // print the init report again.
    let mut daemon = sb.start_daemon(&[]);
    assert_healthy(daemon.addr());
    sleep(Duration::from_millis(100));
    let (status, _) = daemon.stop_with("-TERM");
    assert_eq!(status.code(), Some(0), "{}", daemon.logs());
    assert!(
        !read_lossy(&daemon.stdout).contains("initialised"),
        "restart printed the init report\n{}",
        daemon.logs()
    );
    assert_eq!(fs::read(sb.key_path()).unwrap(), key_bytes);

    let events = sb.audit_events();
    let started = events_named(&events, "daemon.started");
    assert_eq!(started.len(), 2);
    assert!(
        started
            .iter()
            .all(|e| e["data"]["owner_public_key"] == pk.as_str())
    );
    assert_eq!(events_named(&events, "daemon.stopped").len(), 2);
    sb.run(&["audit", "verify"]).assert_success();
    sb.run(&["audit", "verify", "--from-checkpoint"])
        .assert_success();
}

#[test]
fn second_daemon_on_same_data_dir_is_refused_and_first_keeps_serving() {
    let sb = Sandbox::new();
    let mut first = sb.start_daemon(&[]);
    let addr = first.addr();
    assert_healthy(addr);
    let key_bytes = fs::read(sb.key_path()).unwrap();

    let second = sb.run_env(&[("SILAS__CHANNELS__WEB__PORT", "0")], &["start"]);
    let line = second.assert_one_line_error();
    assert!(line.starts_with("error[E_"), "{line:?}");
    assert!(line.contains("in use"), "{line:?}");
    assert!(
        !second.stdout.contains(RUNNING_PREFIX),
        "second daemon claims to run\n{}",
        second.describe()
    );

    assert_healthy(addr);
    assert_eq!(fs::read(sb.key_path()).unwrap(), key_bytes);
    // Read-only commands are refused too while the daemon holds the store.
    // A read-only command while the daemon holds the store either works or
    // is refused in one line (redb locks the file).
    let audit = sb.run(&["audit", "verify"]);
    if !audit.status.success() {
        let line = audit.assert_one_line_error();
        assert!(line.contains("in use"), "{line:?}");
    }

    sleep(Duration::from_millis(100));
    let (status, _) = first.stop_with("-TERM");
    assert_eq!(status.code(), Some(0), "{}", first.logs());
    let events = sb.audit_events();
    assert_eq!(events_named(&events, "daemon.started").len(), 1);
    sb.run(&["audit", "verify"]).assert_success();
}

// ---------------------------------------------------------------------------
// user errors
// ---------------------------------------------------------------------------

/// Environment that makes any backtrace machinery as loud as it can be, so
/// the one-line checks would catch it.
const LOUD: &[(&str, &str)] = &[("RUST_BACKTRACE", "full"), ("RUST_LIB_BACKTRACE", "1")];

#[test]
fn unknown_subcommand_is_one_line() {
    let sb = Sandbox::new();
    let run = sb.run_env(LOUD, &["bogus"]);
    let line = run.assert_one_line_error();
    assert_eq!(run.status.code(), Some(2));
    assert!(line.contains("bogus"), "{line:?}");
    assert!(!sb.data().exists(), "a usage error touched the data dir");
}

#[test]
fn missing_config_file_is_one_coded_line() {
    let sb = Sandbox::new();
    let run = sb.run_env(LOUD, &["--config", "/nonexistent.yaml", "start"]);
    let line = run.assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_"), "{line:?}");
    assert!(line.contains("/nonexistent.yaml"), "{line:?}");
    assert!(!sb.data().exists(), "a config error touched the data dir");
}

#[test]
fn unknown_config_key_names_the_key_path() {
    let sb = Sandbox::new();
    let cfg = sb.write("bad.yaml", "silas: {channels: {web: {prot: 1}}}\n");
    let run = sb.run_env(LOUD, &["--config", cfg.to_str().unwrap(), "start"]);
    let line = run.assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_UNKNOWN_KEY]"), "{line:?}");
    assert!(line.contains("channels.web.prot"), "{line:?}");
    assert!(!sb.data().exists());

    // The same key through an environment override names the variable.
    let run = sb.run_env(&[("SILAS__CHANNELS__WEB__PROT", "1"), LOUD[0]], &["start"]);
    let line = run.assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_UNKNOWN_KEY]"), "{line:?}");
    assert!(line.contains("channels.web.prot"), "{line:?}");
    assert!(line.contains("SILAS__CHANNELS__WEB__PROT"), "{line:?}");
}

#[test]
fn malformed_yaml_and_wrong_type_are_one_line() {
    let sb = Sandbox::new();
    let cfg = sb.write("broken.yaml", "silas: [\n  : :\n");
    let line = sb
        .run_env(LOUD, &["--config", cfg.to_str().unwrap(), "start"])
        .assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_"), "{line:?}");

    let cfg = sb.write("type.yaml", "silas: {channels: {web: {port: abc}}}\n");
    let line = sb
        .run_env(LOUD, &["--config", cfg.to_str().unwrap(), "init"])
        .assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_"), "{line:?}");
    assert!(line.contains("channels.web.port"), "{line:?}");
    assert!(!sb.data().exists());
}

#[test]
fn remote_bind_without_token_refuses_to_start() {
    let sb = Sandbox::new();
    let mut envs = vec![
        ("SILAS__CHANNELS__WEB__HOST", "0.0.0.0"),
        ("SILAS__CHANNELS__WEB__PORT", "0"),
    ];
    envs.extend_from_slice(LOUD);
    let run = sb.run_env(&envs, &["start"]);
    let line = run.assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_"), "{line:?}");
    assert!(line.contains("channels.web.auth_token"), "{line:?}");
    assert!(
        !run.stdout.contains(RUNNING_PREFIX) && !run.stdout.contains("http://"),
        "daemon reported an address\n{}",
        run.describe()
    );
    // Validation fails before anything is started: if a store was created at
    // all, it records no daemon start.
    if sb.data().join("silas.redb").exists() {
        let events = sb.audit_events();
        assert!(events_named(&events, "daemon.started").is_empty());
    }

    // Any non-loopback host, not only 0.0.0.0.
    let line = sb
        .run_env(
            &[
                ("SILAS__CHANNELS__WEB__HOST", "192.0.2.1"),
                ("SILAS__CHANNELS__WEB__PORT", "0"),
            ],
            &["start"],
        )
        .assert_one_line_error();
    assert!(line.contains("channels.web.auth_token"), "{line:?}");
}

#[test]
fn bad_context_profile_sum_names_the_profile() {
    let sb = Sandbox::new();
    let cfg = sb.write(
        "ctx.yaml",
        "silas:\n  context:\n    profiles:\n      conversation: { chronicle_pct: 0.45, memory_pct: 0.20, workspace_pct: 0.15 }\n      greedy: { chronicle_pct: 0.50, memory_pct: 0.30, workspace_pct: 0.10 }\n",
    );
    let line = sb
        .run_env(LOUD, &["--config", cfg.to_str().unwrap(), "start"])
        .assert_one_line_error();
    assert!(line.starts_with("error[E_CFG_"), "{line:?}");
    assert!(line.contains("context.profiles.greedy"), "{line:?}");
    assert!(!sb.data().exists());
}

#[test]
fn audit_without_a_store_is_one_line_and_creates_nothing() {
    let sb = Sandbox::new();
    for args in [
        &["audit", "verify"][..],
        &["audit", "verify", "--from-checkpoint"][..],
        &["audit", "tail"][..],
    ] {
        let run = sb.run_env(LOUD, args);
        let line = run.assert_one_line_error();
        assert!(line.starts_with("error[E_DB_"), "{args:?}: {line:?}");
        assert!(line.contains("silas init"), "{args:?}: {line:?}");
        assert!(
            !sb.data().exists(),
            "`silas {}` created the data dir",
            args.join(" ")
        );
    }
}

#[test]
fn occupied_port_is_one_line_and_nothing_is_served() {
    let sb = Sandbox::new();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind holder");
    let port = holder.local_addr().unwrap().port().to_string();
    let mut envs = vec![("SILAS__CHANNELS__WEB__PORT", port.as_str())];
    envs.extend_from_slice(LOUD);
    let run = sb.run_env(&envs, &["start"]);
    let line = run.assert_one_line_error();
    assert!(line.starts_with("error[E_"), "{line:?}");
    assert!(line.contains(&port), "{line:?}");
    assert!(!run.stdout.contains(RUNNING_PREFIX), "{}", run.describe());
    // The port is checked before anything is initialised: no data dir, no
    // key, no store left behind by a start that could not serve.
    assert!(!sb.data().exists(), "{}", run.describe());
    drop(holder);
}

#[test]
fn key_readable_by_others_is_refused_in_one_line() {
    let sb = Sandbox::new();
    sb.run(&["init"]).assert_success();
    let key = sb.key_path();
    let before = fs::read(&key).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    for args in [&["init"][..], &["start"][..]] {
        let mut envs = vec![("SILAS__CHANNELS__WEB__PORT", "0")];
        envs.extend_from_slice(LOUD);
        let run = sb.run_env(&envs, args);
        let line = run.assert_one_line_error();
        assert!(line.starts_with("error[E_"), "{args:?}: {line:?}");
        assert!(line.contains("owner.key"), "{args:?}: {line:?}");
        assert!(!run.stdout.contains(RUNNING_PREFIX), "{}", run.describe());
        assert_eq!(fs::read(&key).unwrap(), before, "{args:?} rewrote the key");
        assert_eq!(mode(&key), 0o644, "{args:?} silently changed the mode");
    }
}

#[test]
fn unknown_checkpoint_is_one_line() {
    let sb = Sandbox::new();
    sb.run(&["init"]).assert_success();
    let line = sb
        .run_env(LOUD, &["audit", "verify", "--from-checkpoint", "cp-nope"])
        .assert_one_line_error();
    assert!(line.starts_with("error[E_"), "{line:?}");
    assert!(line.contains("cp-nope"), "{line:?}");
}

// ---------------------------------------------------------------------------
// config check
// ---------------------------------------------------------------------------

#[test]
fn config_check_default_is_ok() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "check"]);
    run.assert_success();
    assert!(run.stdout.starts_with("config ok"), "{}", run.describe());
    assert!(
        run.stdout.contains("built-in defaults"),
        "{}",
        run.describe()
    );
    assert!(run.stderr_lines().is_empty(), "{}", run.describe());
    assert!(!sb.data().exists(), "config check created the data dir");
}

#[test]
fn config_check_reports_every_problem_one_per_line() {
    let sb = Sandbox::new();
    let cfg = sb.write(
        "multi.yaml",
        "silas:\n  context:\n    default_profile: nope\n    profiles:\n      conversation: { chronicle_pct: 0.45, memory_pct: 0.20, workspace_pct: 0.15 }\n      greedy: { chronicle_pct: 0.50, memory_pct: 0.30, workspace_pct: 0.10 }\n",
    );
    let mut envs = vec![
        ("SILAS__CHANNELS__WEB__HOST", "0.0.0.0"),
        // Only the scheduler's parsers know these two; `start` used to find
        // the first only after creating the data dir, and let the second by
        // with a warning and no heartbeat.
        ("SILAS__SCHEDULER__TIMEZONE", "Mars/Olympus"),
        ("SILAS__SUGGESTIONS__HEARTBEAT_CRON", "every quarter hour"),
    ];
    envs.extend_from_slice(LOUD);
    let run = sb.run_env(
        &envs,
        &["--config", cfg.to_str().unwrap(), "config", "check"],
    );
    assert_eq!(run.status.code(), Some(2), "{}", run.describe());
    assert!(!run.stdout.contains("config ok"), "{}", run.describe());
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 5, "{}", run.describe());
    for key in [
        "channels.web.auth_token",
        "context.profiles.greedy",
        "context.default_profile",
        "scheduler.timezone",
        "suggestions.heartbeat_cron",
    ] {
        let hits = lines.iter().filter(|l| l.contains(key)).count();
        assert_eq!(
            hits,
            1,
            "{key} not reported exactly once\n{}",
            run.describe()
        );
    }
    for l in &lines {
        assert!(l.starts_with("error[E_CFG_"), "{l:?}");
    }
    assert!(!run.stderr.contains("panicked"));
}

#[test]
fn start_refuses_an_unknown_time_zone_before_creating_anything() {
    let sb = Sandbox::new();
    let run = sb.run_env(
        &[("SILAS__SCHEDULER__TIMEZONE", "Mars/Olympus")],
        &["start"],
    );
    assert_eq!(run.status.code(), Some(2), "{}", run.describe());
    assert!(
        run.stderr
            .contains("error[E_CFG_INVALID]: scheduler.timezone: unknown time zone"),
        "{}",
        run.describe()
    );
    assert!(!sb.data().exists(), "start created the data dir first");
}

/// The executable needs no `libm.so` (src/libm_shim.rs defines the four C
/// math functions it calls): the dynamic loader, asked to list what it would
/// load, lists the C library and no libm. Fails if a dependency starts
/// calling another libm function (the linker then needs libm again): add
/// that function to the shim.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn the_binary_loads_no_libm() {
    let out = Command::new(BIN)
        .env_clear()
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .unwrap();
    let libs = String::from_utf8_lossy(&out.stdout);
    assert!(libs.contains("libc.so"), "{libs}");
    assert!(!libs.contains("libm.so"), "{libs}");
}
