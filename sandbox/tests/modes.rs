//! The escape tests in every isolation mode: a root daemon (network
//! namespace + `nobody`), an unprivileged daemon (user + network namespace),
//! and an unprivileged daemon forced onto the seccomp fallback. The
//! unprivileged launcher is started through `setpriv` as a uid that is
//! neither root nor `nobody`. Plus fail-closed when the kernel refuses both
//! namespaces and seccomp, and the probe.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{HOST_PID, alive};

use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use silas_sandbox::{
    Isolation, Launcher, NetworkIsolation, SandboxError, SandboxOutput, SandboxSpec,
    SubprocessSandbox, Termination,
};

/// The unprivileged daemon user of these tests.
const UID: u32 = 4242;
const GID: u32 = 4242;
const NOBODY: u32 = 65534;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Root,
    User,
    UserSeccomp,
}

impl Mode {
    fn isolation(self) -> Isolation {
        match self {
            Mode::Root => Isolation::RootNamespaces,
            Mode::User => Isolation::UserNamespace,
            Mode::UserSeccomp => Isolation::Seccomp,
        }
    }
    /// Who owns what the command creates.
    fn owner(self) -> u32 {
        match self {
            Mode::Root => NOBODY,
            Mode::User | Mode::UserSeccomp => UID,
        }
    }
}

fn launcher_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_silas-sandbox-exec"))
}

/// A copy of a test binary that the unprivileged uid can execute (the
/// target directory may not be reachable for it).
fn public_copy(src: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), PermissionsExt::from_mode(0o755)).unwrap();
        d
    });
    let name = Path::new(src).file_name().unwrap();
    let dst = dir.path().join(name);
    if !dst.exists() {
        std::fs::copy(src, &dst).unwrap();
        std::fs::set_permissions(&dst, PermissionsExt::from_mode(0o755)).unwrap();
    }
    dst
}

fn setpriv(program: Vec<PathBuf>) -> Launcher {
    let mut args = vec![
        format!("--reuid={UID}"),
        format!("--regid={GID}"),
        "--clear-groups".to_string(),
        "--inh-caps=-all".to_string(),
        "--bounding-set=-all".to_string(),
    ];
    args.extend(program.iter().map(|p| p.display().to_string()));
    Launcher {
        program: PathBuf::from("/usr/bin/setpriv"),
        args,
    }
}

fn sandbox(mode: Mode) -> SubprocessSandbox {
    match mode {
        Mode::Root => SubprocessSandbox::new(Launcher {
            program: launcher_path(),
            args: Vec::new(),
        }),
        Mode::User | Mode::UserSeccomp => SubprocessSandbox::new(setpriv(vec![public_copy(env!(
            "CARGO_BIN_EXE_silas-sandbox-exec"
        ))])),
    }
}

struct Run {
    _base: tempfile::TempDir,
    work: PathBuf,
}

/// A work dir owned by the mode's daemon user (root mode: the sandbox's).
fn workdir(mode: Mode) -> Run {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o711)).unwrap();
    let work = match mode {
        Mode::Root => sandbox(mode).fresh_work_dir(base.path(), "exec-1").unwrap(),
        Mode::User | Mode::UserSeccomp => {
            let w = base.path().join("exec-1");
            std::fs::create_dir(&w).unwrap();
            std::fs::set_permissions(&w, PermissionsExt::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&w, Some(UID), Some(GID)).unwrap();
            w
        }
    };
    Run { _base: base, work }
}

fn spec(mode: Mode, argv: &[&str], work: &Path) -> SandboxSpec {
    let mut s = SandboxSpec::new(argv.iter().map(|a| a.to_string()).collect(), work.into());
    if mode == Mode::UserSeccomp {
        s.network_isolation = NetworkIsolation::Seccomp;
    }
    s
}

fn sh(mode: Mode, script: &str, work: &Path) -> SandboxSpec {
    spec(mode, &["/bin/sh", "-c", script], work)
}

fn py(mode: Mode, script: &str, work: &Path) -> SandboxSpec {
    spec(mode, &["/usr/bin/python3", "-c", script], work)
}

async fn run(mode: Mode, spec: &SandboxSpec) -> SandboxOutput {
    let out = sandbox(mode).run(spec).await.unwrap();
    assert_eq!(out.confinement.isolation, mode.isolation(), "{out:?}");
    assert!(out.confinement.pid_namespace, "{out:?}");
    out
}

fn root_with_setpriv() -> bool {
    let ok = rustix::process::geteuid().is_root() && Path::new("/usr/bin/setpriv").exists();
    if !ok {
        eprintln!("needs root and setpriv to start the launcher unprivileged; skipped");
    }
    ok
}

/// Generate one test per mode from `async fn NAME(mode: Mode)`.
macro_rules! in_every_mode {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[tokio::test]
            async fn root() {
                if root_with_setpriv() { super::$name(Mode::Root).await }
            }
            #[tokio::test]
            async fn user_namespace() {
                if root_with_setpriv() { super::$name(Mode::User).await }
            }
            #[tokio::test]
            async fn seccomp() {
                if root_with_setpriv() { super::$name(Mode::UserSeccomp).await }
            }
        }
    )*};
}

in_every_mode!(
    network_is_refused,
    filesystem_outside_the_grants_is_refused,
    a_fork_bomb_is_bounded,
    a_timeout_kills_every_descendant,
    processes_outside_cannot_be_signalled,
    named_unix_sockets_outside_are_refused,
    a_data_dir_inside_a_system_directory_stays_hidden,
);

/// A daemon installed as `/opt/<app>` keeps its data dir there: `/opt` is
/// a system directory every command may read, and an unprivileged daemon's
/// command runs as the daemon's own uid, for which the 0600 owner key is
/// readable. Hidden, it is granted around: the app's other files stay
/// readable, the data dir is not (landlock: EACCES).
async fn a_data_dir_inside_a_system_directory_stays_hidden(mode: Mode) {
    let Ok(app) = tempfile::Builder::new()
        .prefix("silas-hidden-test-")
        .tempdir_in("/opt")
    else {
        eprintln!("/opt is not writable here; skipped");
        return;
    };
    std::fs::set_permissions(app.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let keys = app.path().join("data/keys");
    std::fs::create_dir_all(&keys).unwrap();
    for d in [app.path().join("data"), keys.clone()] {
        std::fs::set_permissions(&d, PermissionsExt::from_mode(0o755)).unwrap();
    }
    let key = keys.join("owner.key");
    let tool = app.path().join("README");
    std::fs::write(&key, "OWNER-KEY-CANARY").unwrap();
    std::fs::write(&tool, "readable").unwrap();
    // Readable for whoever the command runs as: only landlock stands between.
    std::fs::set_permissions(&key, PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&tool, PermissionsExt::from_mode(0o644)).unwrap();
    let w = workdir(mode);
    let script = format!(
        "cat {tool} && echo; cat {key} 2>/dev/null || echo refused",
        tool = tool.display(),
        key = key.display()
    );
    // Not hidden: the grant of /opt covers it (what the fix is for).
    let open = run(mode, &sh(mode, &script, &w.work)).await;
    assert_eq!(
        open.stdout, "readable\nOWNER-KEY-CANARY",
        "{mode:?}: {open:?}"
    );
    let mut spec = sh(mode, &script, &w.work);
    spec.hidden_paths = vec![app.path().join("data")];
    let hidden = run(mode, &spec).await;
    assert!(hidden.success(), "{mode:?}: {hidden:?}");
    assert_eq!(hidden.stdout, "readable\nrefused\n", "{mode:?}: {hidden:?}");
}

/// Host loopback and an outside address (TEST-NET-1: documentation-only,
/// never routed) are unreachable. Prints, per target, the errno of the
/// failing step, which tells the mechanism: a namespace has no route
/// (ENETUNREACH at connect), seccomp refuses the socket itself (EPERM).
async fn network_is_refused(mode: Mode) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let w = workdir(mode);
    let script = format!(
        "import socket\nfor host, port in [('127.0.0.1', {port}), ('192.0.2.1', 80)]:\n  try:\n    socket.create_connection((host, port), timeout=2); print('CONNECTED', host)\n  except OSError as e: print('refused', host, e.errno)\n"
    );
    let out = run(mode, &py(mode, &script, &w.work)).await;
    assert!(out.success(), "{out:?}");
    assert!(!out.stdout.contains("CONNECTED"), "{out:?}");
    let errno = match mode {
        Mode::Root | Mode::User => libc_errno::ENETUNREACH,
        Mode::UserSeccomp => libc_errno::EPERM,
    };
    for host in ["127.0.0.1", "192.0.2.1"] {
        assert!(
            out.stdout.contains(&format!("refused {host} {errno}\n")),
            "{mode:?} {host}: {}",
            out.stdout
        );
    }
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host listener"
    );
}

mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENETUNREACH: i32 = 101;
}

async fn filesystem_outside_the_grants_is_refused(mode: Mode) {
    let w = workdir(mode);
    // World-writable and world-readable: only landlock stands in the way.
    let outside = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outside.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let secret = outside.path().join("owner.key");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    std::fs::set_permissions(&secret, PermissionsExt::from_mode(0o644)).unwrap();
    let target = outside.path().join("pwned");
    let script = format!(
        "echo x > {t} || echo DENIED1; cat {s} || echo DENIED2; echo ok > inside.txt && echo WROTE",
        t = target.display(),
        s = secret.display()
    );
    let out = run(mode, &sh(mode, &script, &w.work)).await;
    assert!(
        out.stdout.contains("DENIED1") && out.stdout.contains("DENIED2"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("TOP-SECRET"));
    assert!(out.stdout.contains("WROTE"), "{out:?}");
    assert!(!target.exists());
    let inside = w.work.join("inside.txt");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "ok\n");
    let meta = std::fs::metadata(&inside).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (mode.owner(), mode.owner()),
        "files the command creates belong to the daemon's (or sandbox) user"
    );
}

/// Forks until refused: the tree never exceeds `max_processes` tasks
/// (exactly, in a user namespace; elsewhere other tasks of the same user
/// that exit meanwhile can free slots, so only bounded).
async fn a_fork_bomb_is_bounded(mode: Mode) {
    let w = workdir(mode);
    let script = "import os,time\nn=0\ntry:\n  for i in range(500):\n    if os.fork()==0:\n      time.sleep(30); os._exit(0)\n    n+=1\nexcept OSError as e: print('fork-refused', e.errno)\nprint('forked', n)\n";
    let mut spec = py(mode, script, &w.work);
    spec.limits.max_processes = 16;
    spec.timeout = Duration::from_secs(20);
    let out = run(mode, &spec).await;
    assert!(out.stdout.contains("fork-refused 11"), "{out:?}");
    let forked: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .unwrap()
        .parse()
        .unwrap();
    // python itself is one of the 16.
    match mode {
        // Both namespace modes count per user namespace: exact.
        Mode::User | Mode::Root => assert_eq!(forked, 15, "{out:?}"),
        Mode::UserSeccomp => assert!(forked < 64, "{forked} forks: {out:?}"),
    }
}

/// Every root-started sandbox runs as `nobody`; with one process count per
/// user, a fork bomb in one sandbox would starve its neighbours (their
/// forks refused, or their launcher unable to start the command). Each
/// sandbox now counts in a user namespace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbours_fork_bomb_does_not_starve_another_sandbox() {
    let mode = Mode::Root;
    let (wa, wb) = (workdir(mode), workdir(mode));
    // B starts first, then needs ten processes one after another while A
    // holds every process it may have.
    let mut b = sh(
        mode,
        "sleep 1.5; n=0; for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true && n=$((n+1)); done; echo ran $n",
        &wb.work,
    );
    b.limits.max_processes = 8;
    b.timeout = Duration::from_secs(20);
    let hold = "import os,time\nn=0\ntry:\n  for i in range(500):\n    if os.fork()==0:\n      time.sleep(30); os._exit(0)\n    n+=1\nexcept OSError: pass\nprint('holding', n, flush=True)\ntime.sleep(30)\n";
    let mut a = py(mode, hold, &wa.work);
    a.limits.max_processes = 64;
    a.timeout = Duration::from_secs(5);
    let neighbour = tokio::spawn(async move { run(mode, &b).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bomb = run(mode, &a).await;
    let out = neighbour.await.unwrap();
    assert!(bomb.stdout.contains("holding 63"), "{bomb:?}");
    assert_eq!(out.confinement.isolation, Isolation::RootNamespaces);
    assert!(
        out.success() && out.stdout.contains("ran 10"),
        "the neighbour was starved: {out:?}\nbomb: {bomb:?}"
    );
}

async fn a_timeout_kills_every_descendant(mode: Mode) {
    let w = workdir(mode);
    let mut spec = sh(
        mode,
        &format!(
            "(trap '' TERM; {HOST_PID}; exec sleep 300) & setsid sh -c '{HOST_PID}; exec sleep 300' & sleep 300"
        ),
        &w.work,
    );
    spec.timeout = Duration::from_millis(800);
    let t0 = Instant::now();
    let out = run(mode, &spec).await;
    assert_eq!(out.termination, Termination::TimedOut);
    assert!(t0.elapsed() < Duration::from_secs(5));
    let pids: Vec<u32> = out
        .stdout
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{out:?}");
    std::thread::sleep(Duration::from_millis(100));
    for pid in pids {
        assert!(!alive(pid), "descendant {pid} survived the timeout");
    }
}

/// A process of the command's own uid outside the sandbox (the daemon, for
/// an unprivileged daemon) cannot be signalled: its own PID namespace has no
/// number for it.
async fn processes_outside_cannot_be_signalled(mode: Mode) {
    let w = workdir(mode);
    let (out, survived) = try_to_kill_a_neighbour(mode, sandbox(mode), &w.work).await;
    assert_eq!(out.confinement.isolation, mode.isolation(), "{out:?}");
    assert!(out.confinement.pid_namespace, "{out:?}");
    assert!(out.stdout.starts_with("refused"), "{mode:?}: {out:?}");
    assert!(survived, "{mode:?}: the sandbox killed an outside process");
}

/// A named unix socket outside the sandbox that the command's uid may
/// connect to (the daemon user's tmux, ssh-agent, session bus, a
/// `docker.sock`): landlock does not govern `connect`, and no network
/// namespace hides a path — the command gets no unix socket to connect
/// with. Its own socket pairs keep working.
async fn named_unix_sockets_outside_are_refused(mode: Mode) {
    use std::os::unix::net::{UnixDatagram, UnixListener};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let path = dir.path().join("owner-agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o777)).unwrap();
    // A datagram service (the journal's, syslog's): a datagram socket pair
    // could `sendto` it by path.
    let dg_path = dir.path().join("journal.sock");
    let dg = UnixDatagram::bind(&dg_path).unwrap();
    dg.set_nonblocking(true).unwrap();
    std::fs::set_permissions(&dg_path, PermissionsExt::from_mode(0o777)).unwrap();
    let w = workdir(mode);
    let script = format!(
        "import socket\ntry:\n  s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)\ntry:\n  a,b=socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'x', '{}'); print('SENT')\nexcept OSError as e: print('dgram refused', e.errno)\na,b=socket.socketpair(); a.send(b'ping'); print('pair', b.recv(4).decode())\n\
         for fam in (socket.AF_VSOCK, socket.AF_NETLINK, socket.AF_PACKET):\n  try:\n    socket.socket(fam, socket.SOCK_RAW if fam==socket.AF_PACKET else socket.SOCK_DGRAM); print('OPENED', fam)\n  except OSError as e: print('family refused', e.errno)\n",
        path.display(),
        dg_path.display()
    );
    let out = run(mode, &py(mode, &script, &w.work)).await;
    assert!(out.success(), "{out:?}");
    // vsock reaches a hypervisor's services from any network namespace.
    assert_eq!(
        out.stdout,
        "refused 1\ndgram refused 1\npair ping\nfamily refused 1\nfamily refused 1\nfamily refused 1\n",
        "{mode:?}: {out:?}"
    );
    assert!(
        listener.accept().is_err(),
        "{mode:?}: the sandbox reached a host unix socket"
    );
    assert!(
        dg.recv(&mut [0u8; 16]).is_err(),
        "{mode:?}: the sandbox sent to a host datagram socket"
    );
}

/// Where the kernel refuses namespaces (the seccomp fallback, no PID
/// namespace) landlock's signal scope still refuses the signal: the
/// command and the daemon share a uid and see each other's pids.
#[tokio::test]
async fn without_namespaces_landlock_still_refuses_signals_outside() {
    if !root_with_setpriv() {
        return;
    }
    let mode = Mode::User;
    let w = workdir(mode);
    let sb = SubprocessSandbox::new(setpriv(vec![
        public_copy(env!("CARGO_BIN_EXE_silas-sandbox-refuse-isolation")),
        PathBuf::from("--namespaces-only"),
        public_copy(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
    ]));
    let (out, survived) = try_to_kill_a_neighbour(mode, sb, &w.work).await;
    assert_eq!(out.confinement.isolation, Isolation::Seccomp, "{out:?}");
    assert!(!out.confinement.pid_namespace, "{out:?}");
    assert!(out.confinement.landlock_abi >= 6, "{out:?}");
    // EPERM: the pid exists for the command, the signal is refused.
    assert_eq!(out.stdout, "refused 1\n", "{out:?}");
    assert!(survived, "the sandbox killed an outside process");
}

/// Start `sleep` outside the sandbox as the uid the command runs as, and run
/// a command that sends it SIGKILL; the command prints `killed` or `refused
/// ERRNO`. Returns the run and whether the target survived it.
async fn try_to_kill_a_neighbour(
    mode: Mode,
    sb: SubprocessSandbox,
    work: &Path,
) -> (SandboxOutput, bool) {
    use std::os::unix::process::CommandExt;
    let owner = mode.owner();
    let mut neighbour = std::process::Command::new("/bin/sleep")
        .arg("300")
        .uid(owner)
        .gid(owner)
        .spawn()
        .unwrap();
    let target = neighbour.id();
    let script = format!(
        "import os,signal\ntry:\n  os.kill({target}, signal.SIGKILL); print('killed')\nexcept OSError as e: print('refused', e.errno)\n"
    );
    let out = sb.run(&py(mode, &script, work)).await;
    let survived = alive(target);
    let _ = neighbour.kill();
    let _ = neighbour.wait();
    let out = out.unwrap();
    assert!(out.success(), "{out:?}");
    (out, survived)
}

/// What only the seccomp filter and landlock's scope stop in the host
/// network namespace: host abstract unix sockets, io_uring, new namespaces;
/// local unix IPC keeps working.
#[tokio::test]
async fn the_seccomp_fallback_closes_the_host_namespace_side_doors() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    if !root_with_setpriv() {
        return;
    }
    let mode = Mode::UserSeccomp;
    let name = format!("silas-seccomp-test-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    let w = workdir(mode);
    let script = format!(
        "import ctypes,os,socket\n\
         try:\n  s=socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('ABSTRACT-CONNECTED')\nexcept OSError as e: print('abstract-refused', e.errno)\n\
         a,b=socket.socketpair(); a.send(b'ping'); print('pair', b.recv(4).decode())\n\
         for fam in (socket.AF_NETLINK, socket.AF_PACKET, socket.AF_INET6):\n  try:\n    socket.socket(fam, socket.SOCK_RAW if fam==socket.AF_PACKET else socket.SOCK_DGRAM); print('OPENED', fam)\n  except OSError as e: print('family-refused', fam, e.errno)\n\
         libc=ctypes.CDLL(None, use_errno=True)\n\
         params=ctypes.create_string_buffer(120)\n\
         print('io_uring', libc.syscall(425, 1, params), ctypes.get_errno())\n\
         print('unshare', libc.unshare(0x10000000 | 0x40000000), ctypes.get_errno())\n"
    );
    let out = run(mode, &py(mode, &script, &w.work)).await;
    assert!(out.success(), "{out:?}");
    assert!(!out.stdout.contains("CONNECTED"), "{out:?}");
    assert!(!out.stdout.contains("OPENED"), "{out:?}");
    assert!(out.stdout.contains("abstract-refused"), "{out:?}");
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host abstract socket"
    );
    assert!(out.stdout.contains("pair ping\n"), "{out:?}");
    assert_eq!(out.stdout.matches("family-refused").count(), 3, "{out:?}");
    assert!(out.stdout.contains("io_uring -1 1\n"), "{out:?}");
    assert!(out.stdout.contains("unshare -1 1\n"), "{out:?}");
}

/// A kernel refusing namespaces and seccomp alike (simulated with real
/// seccomp filters around the launcher): nothing runs, and the error names
/// both missing features — for a root and for an unprivileged daemon.
#[tokio::test]
async fn when_neither_namespaces_nor_seccomp_work_nothing_runs() {
    if !root_with_setpriv() {
        return;
    }
    let refuser = env!("CARGO_BIN_EXE_silas-sandbox-refuse-isolation");
    let cases = [
        (
            Mode::Root,
            SubprocessSandbox::new(Launcher {
                program: PathBuf::from(refuser),
                args: vec![launcher_path().display().to_string()],
            }),
            "network namespace refused",
        ),
        (
            Mode::User,
            SubprocessSandbox::new(setpriv(vec![
                public_copy(refuser),
                public_copy(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
            ])),
            "user namespaces refused",
        ),
    ];
    for (mode, sb, refused) in cases {
        let w = workdir(mode);
        let marker = w.work.join("ran");
        let spec = sh(mode, &format!("touch {}", marker.display()), &w.work);
        let err = sb.run(&spec).await.unwrap_err();
        match &err {
            SandboxError::Unavailable { what, detail } => {
                assert!(what.contains("network isolation"), "{err}");
                assert!(detail.contains(refused), "{mode:?}: {err}");
                assert!(detail.contains("seccomp unavailable"), "{mode:?}: {err}");
            }
            other => panic!("expected fail-closed, got {other:?}"),
        }
        assert!(err.to_string().starts_with("E_SANDBOX_UNAVAILABLE"));
        assert!(
            !marker.exists(),
            "the command ran although isolation failed"
        );
    }
}

/// Forcing the user namespace where the kernel refuses it fails closed
/// instead of falling back.
#[tokio::test]
async fn a_forced_user_namespace_never_falls_back() {
    if !root_with_setpriv() {
        return;
    }
    let sb = SubprocessSandbox::new(setpriv(vec![
        public_copy(env!("CARGO_BIN_EXE_silas-sandbox-refuse-isolation")),
        public_copy(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
    ]));
    let w = workdir(Mode::User);
    let marker = w.work.join("ran");
    let mut spec = sh(Mode::User, &format!("touch {}", marker.display()), &w.work);
    spec.network_isolation = NetworkIsolation::UserNamespace;
    let err = sb.run(&spec).await.unwrap_err();
    assert!(
        matches!(&err, SandboxError::Unavailable { detail, .. } if detail.contains("user namespaces refused")),
        "{err}"
    );
    assert!(!marker.exists());
}

/// Root forcing a user namespace still runs the command as `nobody`.
#[tokio::test]
async fn root_forcing_a_user_namespace_runs_as_nobody() {
    if !root_with_setpriv() {
        return;
    }
    let w = workdir(Mode::Root);
    let mut spec = sh(Mode::Root, "id -u; touch made", &w.work);
    spec.network_isolation = NetworkIsolation::UserNamespace;
    let out = sandbox(Mode::Root).run(&spec).await.unwrap();
    assert_eq!(out.confinement.isolation, Isolation::UserNamespace);
    assert_eq!(out.stdout, format!("{NOBODY}\n"), "{out:?}");
    assert_eq!(
        std::fs::metadata(w.work.join("made")).unwrap().uid(),
        NOBODY
    );
}

/// The probe (as `silas doctor` calls it) from a root daemon. (The
/// unprivileged mode's reported isolation is asserted by every run above.)
#[tokio::test]
async fn the_probe_reports_the_isolation_in_effect() {
    if !root_with_setpriv() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o711)).unwrap();
    let probes = base.path().join("probes");
    let c = sandbox(Mode::Root).probe(&probes).await.unwrap();
    assert_eq!(c.isolation, Isolation::RootNamespaces);
    // The kernel here is >= 6.12.
    assert!(c.landlock_abi >= 6, "{c:?}");
    assert_eq!(std::fs::read_dir(&probes).unwrap().count(), 0);
}
