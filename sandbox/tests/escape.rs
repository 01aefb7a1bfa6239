//! Escape attempts from inside the sandbox, from the attacker's side: each
//! must fail. Plus the fail-closed path: when the kernel refuses an isolation
//! step, the command does not run at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{HOST_PID, alive};

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use silas_sandbox::{
    Isolation, Launcher, SandboxError, SandboxSpec, SubprocessSandbox, Termination,
};

fn sandbox() -> SubprocessSandbox {
    SubprocessSandbox::new(Launcher {
        program: PathBuf::from(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
        args: Vec::new(),
    })
}

struct Run {
    _base: tempfile::TempDir,
    work: PathBuf,
}

fn workdir() -> Run {
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "exec-1").unwrap();
    Run { _base: base, work }
}

fn sh(script: &str, work: &Path) -> SandboxSpec {
    SandboxSpec::new(
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        work.to_path_buf(),
    )
}

async fn run(spec: &SandboxSpec) -> silas_sandbox::SandboxOutput {
    sandbox().run(spec).await.unwrap()
}

/// With network granted the command is in the host's network namespace;
/// named unix sockets (the daemon user's agents and buses) stay closed.
#[tokio::test]
async fn with_network_granted_named_unix_sockets_stay_closed() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let path = dir.path().join("bus.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o777)).unwrap();
    let w = workdir();
    let mut spec = SandboxSpec::new(
        vec![
            "/usr/bin/python3".into(),
            "-c".into(),
            format!(
                "import socket\ntry:\n  s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)\n",
                path.display()
            ),
        ],
        w.work.clone(),
    );
    spec.network = true;
    let out = run(&spec).await;
    assert_eq!(out.confinement.isolation, Isolation::HostNetwork, "{out:?}");
    assert_eq!(out.stdout, "refused 1\n", "{out:?}");
    assert!(listener.accept().is_err());
}

#[tokio::test]
async fn a_plain_command_runs_with_only_the_given_environment() {
    let w = workdir();
    let mut spec = sh("echo hello; echo err >&2; env | sort; pwd; exit 3", &w.work);
    spec.env.push(("GREETING".into(), "hi".into()));
    let out = run(&spec).await;
    assert_eq!(out.termination, Termination::Exited { code: 3 });
    assert!(out.stdout.starts_with("hello\n"), "{}", out.stdout);
    assert!(out.stdout.contains("GREETING=hi"));
    assert!(
        !out.stdout.contains("HOME="),
        "inherited environment leaked: {}",
        out.stdout
    );
    assert!(out.stdout.contains(w.work.to_str().unwrap()));
    assert_eq!(out.stderr, "err\n");
}

#[tokio::test]
async fn connecting_to_a_host_loopback_listener_fails_without_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let w = workdir();
    let probe = format!(
        "python3 -c 'import socket,sys\ntry:\n socket.create_connection((\"127.0.0.1\",{port}),timeout=2); print(\"CONNECTED\")\nexcept Exception as e: print(\"refused\", e)'"
    );
    let out = run(&sh(&probe, &w.work)).await;
    assert!(out.stdout.contains("refused"), "{out:?}");
    assert!(!out.stdout.contains("CONNECTED"));
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host listener"
    );

    // Control: with network requested, the same probe connects.
    let mut allowed = sh(&probe, &w.work);
    allowed.network = true;
    let out = run(&allowed).await;
    assert!(out.stdout.contains("CONNECTED"), "{out:?}");
}

#[tokio::test]
async fn writing_outside_the_work_dir_fails() {
    let w = workdir();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("pwned");
    // World-writable target dir: only landlock stands in the way.
    std::fs::set_permissions(
        outside.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = format!(
        "echo x > {t} || echo DENIED1; echo y > /tmp/silas-escape-$$ || echo DENIED2; echo ok > inside.txt && echo WROTE",
        t = target.display()
    );
    let out = run(&sh(&script, &w.work)).await;
    assert!(
        out.stdout.contains("DENIED1") && out.stdout.contains("DENIED2"),
        "{out:?}"
    );
    assert!(out.stdout.contains("WROTE"));
    assert!(!target.exists());
    assert_eq!(
        std::fs::read_to_string(w.work.join("inside.txt")).unwrap(),
        "ok\n"
    );
}

#[tokio::test]
async fn reading_a_file_in_a_directory_not_granted_fails() {
    let w = workdir();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("owner.key");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    // World-readable: only landlock stands in the way.
    std::fs::set_permissions(
        secret_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = run(&sh(
        &format!("cat {} || echo DENIED", secret.display()),
        &w.work,
    ))
    .await;
    assert!(out.stdout.contains("DENIED"), "{out:?}");
    assert!(!out.stdout.contains("TOP-SECRET"));

    // Granting the directory read-only makes it readable, still not writable.
    let mut granted = sh(
        &format!("cat {s}; echo x >> {s} || echo RO", s = secret.display()),
        &w.work,
    );
    granted.read_paths.push(secret_dir.path().to_path_buf());
    let out = run(&granted).await;
    assert!(
        out.stdout.contains("TOP-SECRET") && out.stdout.contains("RO"),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_and_cleaned_up() {
    let w = workdir();
    let mut spec = sh(
        "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived",
        &w.work,
    );
    spec.limits.max_processes = 32;
    spec.timeout = Duration::from_secs(5);
    let t0 = Instant::now();
    let out = run(&spec).await;
    assert!(t0.elapsed() < Duration::from_secs(12));
    assert!(
        out.stderr.contains("fork")
            || out.stderr.contains("Resource temporarily unavailable")
            || out.termination == Termination::TimedOut,
        "{out:?}"
    );
}

/// Regression (CI flake): the launcher used to start threads after the
/// command, and a fork bomb that had already used up the process limit
/// (threads count against it) made that panic — the run ended "without a
/// report". Several bombs writing output at once, a few rounds: each run
/// still reports how it ended, with the output it produced.
#[tokio::test]
async fn a_fork_bomb_writing_output_always_gets_a_report() {
    for _ in 0..3 {
        let runs: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async {
                    let w = workdir();
                    let mut spec = sh(
                        "echo started; bomb() { echo x; bomb | bomb & }; bomb; sleep 1; echo done",
                        &w.work,
                    );
                    spec.limits.max_processes = 16;
                    spec.timeout = Duration::from_secs(5);
                    sandbox().run(&spec).await
                })
            })
            .collect();
        for run in runs {
            match run.await.unwrap() {
                Ok(out) => assert!(out.stdout.starts_with("started\n"), "{out:?}"),
                // As root every sandbox is `nobody`: a neighbour's bomb can
                // take the slots this one counted on — a reported refusal.
                Err(SandboxError::Spawn { .. }) => {}
                Err(e) => panic!("no proper report: {e:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_gigabyte_of_output_is_capped() {
    let w = workdir();
    let mut spec = sh("head -c 1000000000 /dev/zero | tr '\\0' a", &w.work);
    spec.max_output_bytes = 4096;
    spec.timeout = Duration::from_secs(30);
    let out = run(&spec).await;
    assert!(out.stdout.starts_with(&"a".repeat(4096)));
    assert!(
        out.stdout.contains("[output truncated: "),
        "{}",
        &out.stdout[4096..]
    );
    assert_eq!(out.stdout_dropped, 1_000_000_000 - 4096);
}

#[tokio::test]
async fn a_grandchild_ignoring_sigterm_is_killed_at_the_timeout() {
    let w = workdir();
    let mut spec = sh(
        &format!(
            "(trap '' TERM; {HOST_PID}; exec sleep 300) & setsid sh -c '{HOST_PID}; exec sleep 300' & sleep 300"
        ),
        &w.work,
    );
    spec.timeout = Duration::from_millis(800);
    let t0 = Instant::now();
    let out = run(&spec).await;
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

#[tokio::test]
async fn background_jobs_do_not_outlive_a_finished_command() {
    let w = workdir();
    let out = run(&sh(
        &format!(
            "setsid sh -c '{HOST_PID} > g; exec sleep 300' & until [ -s g ]; do sleep 0.01; done; cat g"
        ),
        &w.work,
    ))
    .await;
    assert!(out.success());
    let pid: u32 = out.stdout.trim().parse().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!alive(pid), "escaped background job {pid} survived");
}

#[tokio::test]
async fn malformed_requests_are_refused() {
    let w = workdir();
    let mut empty = sh("true", &w.work);
    empty.argv.clear();
    assert!(matches!(
        sandbox().run(&empty).await,
        Err(SandboxError::Invalid(_))
    ));
    let mut missing = sh("true", &w.work);
    missing.read_paths.push("/definitely/not/here".into());
    assert!(matches!(
        sandbox().run(&missing).await,
        Err(SandboxError::Invalid(_))
    ));
    let nope = SandboxSpec::new(vec!["/no/such/program".into()], w.work.clone());
    assert!(matches!(
        sandbox().run(&nope).await,
        Err(SandboxError::Spawn { .. })
    ));
    assert!(
        sandbox()
            .fresh_work_dir(w.work.as_path(), "../escape")
            .is_err()
    );
}

#[test]
fn launcher_reads_spec_from_stdin_only() {
    // Sanity: the launcher binary with garbage input reports, never panics.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_silas-sandbox-exec"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(out[0], b'S');
    assert!(String::from_utf8_lossy(&out[5..]).contains("malformed spec"));
}

/// Issue #15: a workspace copy handed to the sandbox is writable inside it,
/// while a symlink in the copy pointing outside gives nothing away — the
/// link itself changes owner, its target does not, and writing through it
/// from inside is refused.
#[tokio::test]
async fn a_handed_over_copy_is_writable_and_its_outward_symlink_gives_nothing_away() {
    use std::os::unix::fs::MetadataExt;
    let base = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("owner-file");
    std::fs::write(&target, "owner's").unwrap();
    let copy = base.path().join("copy");
    std::fs::create_dir_all(copy.join("src")).unwrap();
    std::fs::write(copy.join("src/app.py"), "x = 1\n").unwrap();
    std::os::unix::fs::symlink(&target, copy.join("escape")).unwrap();
    let owner_before = std::fs::metadata(&target).unwrap().uid();
    sandbox().hand_over_tree(&copy).unwrap();
    assert_eq!(
        std::fs::metadata(&target).unwrap().uid(),
        owner_before,
        "the link's target kept its owner"
    );
    // The sandbox user must reach the copy: open the temp base like the
    // real work base (0711).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut spec = sh(
        "echo y >> src/app.py && cat src/app.py; echo pwned > escape 2>/dev/null && echo WROTE-THROUGH",
        &copy,
    );
    spec.timeout = Duration::from_secs(20);
    let out = run(&spec).await;
    assert!(out.stdout.contains("x = 1\ny"), "{out:?}");
    assert!(!out.stdout.contains("WROTE-THROUGH"), "{out:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "owner's");
    // A root that is a symlink is refused.
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&copy, &link).unwrap();
    assert!(sandbox().hand_over_tree(&link).is_err());
}

/// Command lines in the host's `/proc` are world-readable: a key passed as
/// an argument, the daemon's own. A root daemon's command gets a `/proc` of
/// its own that lists only what it may trace; its own processes (and
/// `/proc/self`, system files like `cpuinfo`) still read.
#[tokio::test]
async fn the_hosts_command_lines_are_out_of_sight() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: a private /proc needs a root launcher");
        return;
    }
    let marker = format!("HOSTSECRET{}", std::process::id());
    let mut host = std::process::Command::new("python3")
        .args(["-c", "import time; time.sleep(30)", &marker])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The marker is on the host's process table (the same read, unconfined).
    let seen = |pid: u32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    while !String::from_utf8_lossy(&seen(host.id())).contains(&marker) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let w = workdir();
    let out = run(&sh(
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; \
         echo PROCS $(ls -d /proc/[0-9]* | wc -l); \
         grep -c '^Name:' /proc/self/status; grep -c processor /proc/cpuinfo",
        &w.work,
    ))
    .await;
    let _ = host.kill();
    let _ = host.wait();
    assert!(out.success(), "{out:?}");
    assert!(out.confinement.private_proc, "{out:?}");
    assert!(!out.stdout.contains(&marker), "{}", out.stdout);
    assert!(!out.stdout.contains("silas-sandbox-exec"), "{}", out.stdout);
    let procs: usize = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("PROCS "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(procs <= 5, "{procs} processes visible:\n{}", out.stdout);
    assert!(
        out.stdout.lines().any(|l| l.trim() == "1"),
        "{}",
        out.stdout
    );
}
