//! The README's first command, as a newcomer runs it: `silas start` from a
//! scratch working directory — no `--data-dir`, no config file, no API key,
//! the defaults (only the port is 0, so tests can run side by side) — then
//! "create a file" through the offline plan, approved by the owner, to
//! `done` with every check passed. Before issue #13 every attempt failed
//! verification with `work dir ./data/verify/… must be an existing absolute
//! directory`; and from a checkout under a private directory (a root user's
//! `/root`, mode 0700) every command failed with "cannot start /bin/sh:
//! Permission denied".
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{connect_with_token, frame_of_type, owner_token, request_plan, send, start_daemon};

/// `silas` as the README runs it: in `cwd`, with nothing but `PATH` and a
/// `HOME` of its own.
fn readme_silas(cwd: &Path, home: &Path) -> Command {
    with_env(Command::new(env!("CARGO_BIN_EXE_silas")), cwd, home)
}

fn with_env(mut c: Command, cwd: &Path, home: &Path) -> Command {
    c.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home);
    c
}

/// Ask for a file, approve the plan card, and return every `work_status`
/// seen and the final one.
async fn approve_file_task(
    ws: &mut support::Ws,
    log: &mut Vec<serde_json::Value>,
) -> (Vec<String>, serde_json::Value) {
    let card = request_plan(
        ws,
        "create a file notes.txt containing hi",
        Duration::from_secs(30),
        log,
    )
    .await;
    let request_id = card["request_id"].as_str().unwrap().to_string();
    send(
        ws,
        json!({"type": "approval_response", "request_id": request_id, "verdict": "approved"}),
    )
    .await;
    let mut statuses = Vec::new();
    loop {
        let f = frame_of_type(ws, "work_status", Duration::from_secs(90), log).await;
        let status = f["status"].as_str().unwrap().to_string();
        statuses.push(status.clone());
        if ["done", "failed", "stuck", "blocked"].contains(&status.as_str()) {
            return (statuses, f);
        }
    }
}

/// Start in `cwd`, ask for a file, approve, and return the banner once the
/// work item is `done` with its checks passed.
async fn first_task_completes(cwd: &Path, home: &Path) -> Vec<String> {
    let (daemon, addr, banner) = start_daemon(readme_silas(cwd, home), Stdio::null());
    let data = cwd.join("data");
    let shown = banner
        .iter()
        .find_map(|l| l.strip_prefix("Data dir: "))
        .unwrap_or_else(|| panic!("no data dir line: {banner:?}"));
    // The absolute path of ./data, not "./data".
    let canonical = std::fs::canonicalize(&data).unwrap();
    assert!(
        shown.starts_with(&canonical.display().to_string()),
        "{shown} vs {}",
        canonical.display()
    );
    let sandbox_line = banner
        .iter()
        .find(|l| l.starts_with("Sandbox dirs: "))
        .unwrap_or_else(|| panic!("no sandbox line: {banner:?}"));
    assert!(!sandbox_line.contains("./"), "{sandbox_line}");

    let (mut ws, _) = connect_with_token(&addr, &owner_token(&data), Duration::from_secs(10)).await;
    let mut log = Vec::new();
    let (statuses, last) = approve_file_task(&mut ws, &mut log).await;
    assert_eq!(
        last["status"], "done",
        "statuses {statuses:?}, last {last}\nframes {log:?}"
    );
    let checks = last["verification"].as_array().unwrap();
    assert!(
        checks.len() >= 2 && checks.iter().all(|c| c["passed"] == true),
        "both checks must pass: {last}"
    );
    daemon.stop().await;
    banner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_start_from_a_scratch_directory_finishes_a_task() {
    let base = tempfile::tempdir().unwrap();
    // Searchable like a normal home directory; the next test covers a private one.
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cwd = base.path().join("silas");
    std::fs::create_dir(&cwd).unwrap();
    let banner = first_task_completes(&cwd, base.path()).await;
    assert!(
        banner
            .iter()
            .any(|l| l.starts_with("model: offline") && l.contains("not an LLM")),
        "no API key means the labelled offline responder: {banner:?}"
    );
    // Nothing was created outside the working directory's ./data but
    // ./skills, holding the binary's bundled skills (issue #17), which
    // wait for the owner's approval on their cards.
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&cwd), ["data", "skills"]);
    assert_eq!(names(&cwd.join("skills")), ["coding", "skill-maker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_under_a_private_directory_still_finishes_a_task() {
    // Like a root user's /root (0700): the sandbox user cannot search it.
    let base = tempfile::tempdir().unwrap();
    let private = base.path().join("root");
    let cwd = private.join("silas");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let banner = first_task_completes(&cwd, &private).await;
    if rustix::process::geteuid().is_root() {
        // Commands run as `nobody`, which cannot reach ./data/sandbox here:
        // the sandbox dirs moved to a directory it can reach, and the
        // daemon said where.
        let line = banner
            .iter()
            .find(|l| l.starts_with("Sandbox dirs: "))
            .unwrap();
        assert!(line.contains("/var/lib/silas/sandbox/"), "{line}");
        // The private directory was not opened up to make that work.
        let mode = std::fs::metadata(&private).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

/// The careful owner's deployment: the daemon as a dedicated unprivileged
/// user. Before issue #13 it could not run a single command (the network
/// namespace needs CAP_SYS_ADMIN); now its sandboxes use a user namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_running_as_an_unprivileged_user_finishes_a_task() {
    if !rustix::process::geteuid().is_root() {
        // Already unprivileged: the other tests of this file are this test.
        return;
    }
    const UID: u32 = 4343;
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The binary where that user can execute it (the target dir may be private).
    let bin = base.path().join("silas");
    std::fs::copy(env!("CARGO_BIN_EXE_silas"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cwd = base.path().join("home");
    std::fs::create_dir(&cwd).unwrap();
    rustix::fs::chown(
        &cwd,
        Some(rustix::fs::Uid::from_raw(UID)),
        Some(rustix::fs::Gid::from_raw(UID)),
    )
    .unwrap();
    let mut setpriv = Command::new("setpriv");
    setpriv.args([
        &format!("--reuid={UID}"),
        &format!("--regid={UID}"),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]);
    setpriv.arg(&bin);
    let cmd = with_env(setpriv, &cwd, &cwd);
    let (daemon, addr, banner) = start_daemon(cmd, Stdio::null());
    let data = cwd.join("data");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&data).unwrap().uid(), UID);
    let (mut ws, _) = connect_with_token(&addr, &owner_token(&data), Duration::from_secs(10)).await;
    let mut log = Vec::new();
    let (_, last) = approve_file_task(&mut ws, &mut log).await;
    assert_eq!(last["status"], "done", "{last}\nbanner {banner:?}");
    let checks = last["verification"].as_array().unwrap();
    assert!(
        checks.len() >= 2 && checks.iter().all(|c| c["passed"] == true),
        "{last}"
    );
    daemon.stop().await;
}

/// `silas … | head`: a reader that goes away early ends the command the way
/// a pipeline expects (SIGPIPE's status 141, nothing on stderr), not with
/// `error[E_INTERNAL] … Broken pipe`.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = readme_silas(dir.path(), dir.path())
        .arg("init")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the command prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    // The work itself was done.
    assert!(dir.path().join("data").is_dir());
}

/// With no `scheduler.timezone`, cron times are in the host's own zone (as
/// `TZ` names it here), and `silas start` says which; a configured zone
/// wins. The default used to be Europe/Vienna wherever the host was.
#[test]
fn cron_times_are_in_the_hosts_zone_unless_one_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = readme_silas(dir.path(), dir.path());
    cmd.env("TZ", ":Asia/Tokyo");
    let (daemon, _, banner) = start_daemon(cmd, Stdio::null());
    daemon.stop_blocking();
    assert!(
        banner
            .iter()
            .any(|l| l == "Scheduler: cron times are in Asia/Tokyo (scheduler.timezone: local)."),
        "{banner:?}"
    );

    let mut cmd = readme_silas(dir.path(), dir.path());
    cmd.env("TZ", "Asia/Tokyo")
        .env("SILAS__SCHEDULER__TIMEZONE", "America/New_York");
    let (daemon, _, banner) = start_daemon(cmd, Stdio::null());
    daemon.stop_blocking();
    assert!(
        banner.iter().any(|l| l
            == "Scheduler: cron times are in America/New_York (scheduler.timezone: America/New_York)."),
        "{banner:?}"
    );
}

/// `silas start --port N` serves on N for that run, as a newcomer whose
/// 8420 is taken would try first (before: "unexpected argument '--port'"),
/// and `silas stop` finds it there.
#[test]
fn start_takes_a_port_for_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = readme_silas(dir.path(), dir.path())
        .args(["start", "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut seen = Vec::new();
    for line in lines {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.starts_with("Silas is running") {
            break;
        }
    }
    let running = seen.last().cloned().unwrap_or_default();
    assert!(
        running.contains(&format!("http://127.0.0.1:{port}/")),
        "{seen:?}"
    );
    let stop = readme_silas(dir.path(), dir.path())
        .arg("stop")
        .output()
        .unwrap();
    assert!(stop.status.success(), "{stop:?}");
    assert!(child.wait().unwrap().success());
}
