//! Long-lived sandboxed processes: line streaming over stdin/stdout, every
//! descendant killed when the handle is dropped or killed (and a one-shot
//! run's command when its future is dropped), the same network
//! and filesystem refusals as one-shot runs, and fail-closed start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{HOST_PID, alive};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use silas_sandbox::{Launcher, SandboxError, SandboxSpec, SubprocessSandbox, Termination};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn sandbox() -> SubprocessSandbox {
    SubprocessSandbox::new(Launcher {
        program: PathBuf::from(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
        args: Vec::new(),
    })
}

fn workdir() -> (tempfile::TempDir, PathBuf) {
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "proc-1").unwrap();
    (base, work)
}

fn sh(script: &str, work: &Path) -> SandboxSpec {
    SandboxSpec::new(
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        work.to_path_buf(),
    )
}

async fn line(lines: &mut tokio::io::Lines<BufReader<tokio::io::DuplexStream>>) -> String {
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("a line within 20 s")
        .unwrap()
        .expect("a line before end of stream")
}

async fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Every pid is gone within 10 s ("pid N {what}" otherwise).
async fn assert_gone(pids: &[u32], what: &str) {
    for &pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(10)).await,
            "pid {pid} {what}"
        );
    }
}

#[tokio::test]
async fn lines_stream_both_ways_and_closing_stdin_ends_the_command() {
    let (_base, work) = workdir();
    let spec = sh(
        "echo ready; while read l; do echo \"got $l\"; done; echo bye; exit 7",
        &work,
    );
    let mut p = sandbox().spawn(&spec).await.unwrap();
    let mut stdin = p.take_stdin().unwrap();
    let mut lines = BufReader::new(p.take_stdout().unwrap()).lines();
    assert_eq!(line(&mut lines).await, "ready");
    stdin.write_all(b"one\n").await.unwrap();
    assert_eq!(line(&mut lines).await, "got one");
    // Interleaved, not buffered to the end: a second exchange after the first.
    stdin.write_all(b"two\nthree\n").await.unwrap();
    assert_eq!(line(&mut lines).await, "got two");
    assert_eq!(line(&mut lines).await, "got three");
    drop(stdin);
    assert_eq!(line(&mut lines).await, "bye");
    let exit = tokio::time::timeout(Duration::from_secs(20), p.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.termination, Termination::Exited { code: 7 });
    assert!(lines.next_line().await.unwrap().is_none());
}

#[tokio::test]
async fn dropping_the_handle_kills_the_command_and_its_escaped_grandchildren() {
    let (_base, work) = workdir();
    // The grandchild leaves the session (setsid) — out of any process group kill.
    let spec = sh(
        &format!(
            "setsid sh -c '{HOST_PID} > g; exec sleep 300' & until [ -s g ]; do sleep 0.01; done; cat g; {HOST_PID}; sleep 300"
        ),
        &work,
    );
    let mut p = sandbox().spawn(&spec).await.unwrap();
    let mut lines = BufReader::new(p.take_stdout().unwrap()).lines();
    let grandchild: u32 = line(&mut lines).await.parse().unwrap();
    let child: u32 = line(&mut lines).await.parse().unwrap();
    let launcher = p.launcher_pid().unwrap();
    assert!(alive(grandchild) && alive(child) && alive(launcher));
    drop(p);
    assert_gone(&[grandchild, child, launcher], "survived the drop").await;
}

/// A one-shot run whose caller stops waiting (a cancelled work item drops
/// the future): the command dies with it instead of running to its end, and
/// so does what it started in a session of its own (`setsid`), which the
/// group kill of the launcher does not reach.
#[tokio::test]
async fn dropping_a_one_shot_run_kills_the_command_and_its_escaped_grandchildren() {
    let (_base, work) = workdir();
    let spec = sh(
        &format!("setsid sh -c '{HOST_PID} > g; exec sleep 300' & {HOST_PID} > pid; sleep 300"),
        &work,
    );
    let pids = dropped_run(&spec, &work, &["pid", "g"]).await;
    assert_gone(&pids, "outlived the dropped run").await;
}

/// A command that leaves the launcher's session itself is out of the
/// group kill too: it dies with its launcher.
#[tokio::test]
async fn a_command_in_a_session_of_its_own_dies_with_a_dropped_run() {
    let (_base, work) = workdir();
    let mut spec = sh(&format!("sleep 300 & {HOST_PID} > pid; sleep 300"), &work);
    spec.argv.insert(0, "/usr/bin/setsid".into());
    let pids = dropped_run(&spec, &work, &["pid"]).await;
    assert_gone(&pids, "outlived the dropped run").await;
}

/// Start `spec` as a one-shot run, wait until every file in `files` holds a
/// pid, drop the run and return the pids.
async fn dropped_run(spec: &SandboxSpec, work: &Path, files: &[&str]) -> Vec<u32> {
    let sb = sandbox();
    let run = sb.run(spec);
    let written = async {
        while !files
            .iter()
            .all(|f| std::fs::read_to_string(work.join(f)).is_ok_and(|s| s.ends_with('\n')))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        out = run => panic!("the command ended by itself: {out:?}"),
        () = written => {}
        () = tokio::time::sleep(Duration::from_secs(20)) => panic!("no pid files"),
    }
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(work.join(f))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

/// The daemon dies (SIGKILL; the launcher follows through its parent-death
/// signal): the command and everything it started die with the launcher.
#[tokio::test]
async fn the_command_and_its_escaped_grandchildren_die_with_the_launcher() {
    let (_base, work) = workdir();
    let spec = sh(
        &format!(
            "setsid sh -c '{HOST_PID} > g; exec sleep 300' & until [ -s g ]; do sleep 0.01; done; cat g; {HOST_PID}; sleep 300"
        ),
        &work,
    );
    let mut p = sandbox().spawn(&spec).await.unwrap();
    assert!(p.confinement().pid_namespace, "{:?}", p.confinement());
    let mut lines = BufReader::new(p.take_stdout().unwrap()).lines();
    let grandchild: u32 = line(&mut lines).await.parse().unwrap();
    let child: u32 = line(&mut lines).await.parse().unwrap();
    let launcher = p.launcher_pid().unwrap();
    let launcher_pid = rustix::process::Pid::from_raw(launcher as i32).unwrap();
    rustix::process::kill_process(launcher_pid, rustix::process::Signal::KILL).unwrap();
    assert_gone(&[child, grandchild], "outlived its launcher").await;
}

#[tokio::test]
async fn kill_ends_the_process_and_wait_reports_it() {
    let (_base, work) = workdir();
    let spec = sh(
        &format!("setsid sh -c '{HOST_PID}; exec sleep 300' & sleep 300"),
        &work,
    );
    let mut p = sandbox().spawn(&spec).await.unwrap();
    let mut lines = BufReader::new(p.take_stdout().unwrap()).lines();
    let grandchild: u32 = line(&mut lines).await.parse().unwrap();
    p.kill();
    let exit = tokio::time::timeout(Duration::from_secs(20), p.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.termination, Termination::Signaled { signal: 9 });
    assert!(gone_within(grandchild, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn the_lifetime_is_bounded_by_the_timeout() {
    let (_base, work) = workdir();
    let mut spec = sh("echo up; sleep 300", &work);
    spec.timeout = Duration::from_secs(1);
    let mut p = sandbox().spawn(&spec).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(20), p.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.termination, Termination::TimedOut);
}

#[tokio::test]
async fn a_long_lived_process_has_no_network_and_no_files_outside_its_grants() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        outside.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let target = outside.path().join("pwned");
    let (_base, work) = workdir();
    // A tiny server: each request line is one attempt, answered on stdout.
    let script = format!(
        "import socket,sys\n\
         for l in sys.stdin:\n\
         \x20 l=l.strip()\n\
         \x20 try:\n\
         \x20\x20 if l=='net': socket.create_connection(('127.0.0.1',{port}),timeout=2); print('CONNECTED')\n\
         \x20\x20 elif l=='write': open('{t}','w').write('x'); print('WROTE')\n\
         \x20\x20 elif l=='inside': open('inside.txt','w').write('ok'); print('INSIDE')\n\
         \x20 except Exception as e: print('refused', l)\n\
         \x20 sys.stdout.flush()\n",
        t = target.display()
    );
    let spec = SandboxSpec::new(vec!["python3".into(), "-c".into(), script], work.clone());
    let mut p = sandbox().spawn(&spec).await.unwrap();
    let mut stdin = p.take_stdin().unwrap();
    let mut lines = BufReader::new(p.take_stdout().unwrap()).lines();
    stdin.write_all(b"net\nwrite\ninside\n").await.unwrap();
    assert_eq!(line(&mut lines).await, "refused net");
    assert_eq!(line(&mut lines).await, "refused write");
    assert_eq!(line(&mut lines).await, "INSIDE");
    assert!(listener.accept().is_err(), "the sandbox reached the host");
    assert!(!target.exists());
    assert_eq!(
        std::fs::read_to_string(work.join("inside.txt")).unwrap(),
        "ok"
    );
}

#[tokio::test]
async fn a_kernel_refusing_isolation_means_nothing_starts() {
    let (_base, work) = workdir();
    let marker = work.join("ran");
    let sandbox = SubprocessSandbox::new(Launcher {
        program: PathBuf::from(env!("CARGO_BIN_EXE_silas-sandbox-refuse-isolation")),
        args: vec![env!("CARGO_BIN_EXE_silas-sandbox-exec").to_string()],
    });
    let spec = sh(&format!("touch {}; sleep 300", marker.display()), &work);
    let err = sandbox.spawn(&spec).await.unwrap_err();
    assert!(
        matches!(err, SandboxError::Unavailable { .. }),
        "expected E_SANDBOX_UNAVAILABLE, got {err:?}"
    );
    assert!(err.to_string().starts_with("E_SANDBOX_UNAVAILABLE"));
    assert!(!marker.exists(), "the command ran without isolation");
}
