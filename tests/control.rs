//! The control socket over the real binary: the CLI reads and changes live
//! state while `silas start` holds the store, every connection needs an
//! owner credential, and without a daemon the read commands fall back to
//! the store while the live ones say they need it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::{audit_events, owner_token, silas, start};

fn run(dir: &Path, args: &[&str]) -> Output {
    silas(dir).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(
        o.status.success(),
        "silas {args:?}: {:?}\n{}{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// `silas init`, then one pending work item written while no daemon runs.
fn init_with_work(dir: &Path) {
    ok(dir, &["init"]);
    let store = silas_storage::Store::open_in(dir.join("data")).unwrap();
    let item: silas_core::model::work::WorkItem = serde_json::from_value(json!({
        "id": "w-ctl-1", "type": "task", "title": "Tidy the notes", "body": "b",
    }))
    .unwrap();
    store.work_items().save(&item).unwrap();
    let goal: silas_core::model::work::WorkItem = serde_json::from_value(json!({
        "id": "g-ctl-1", "type": "goal", "title": "Keep the notes tidy", "body": "b",
        "agent": "stream",
    }))
    .unwrap();
    store.work_items().save(&goal).unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_cli_reads_and_changes_live_state_over_the_socket_while_the_daemon_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init_with_work(dir);
    let (daemon, addr) = start(dir);
    let data = dir.join("data");
    assert_eq!(mode(&data.join("control.sock")), 0o660);
    assert_eq!(mode(&data.join("cli.token")), 0o640);
    assert_eq!(mode(&data.join("keys")), 0o700);

    let status = ok(dir, &["status"]);
    assert!(status.contains("silas: running (pid"), "{status}");
    assert!(status.contains(&format!("http://{addr}/")), "{status}");
    // The daemon's own model state, whatever the CLI's environment holds.
    assert!(
        status.contains("\n  model:         offline (no OPENROUTER_API_KEY set)"),
        "{status}"
    );
    let report: Value = serde_json::from_str(ok(dir, &["status", "--json"]).trim()).unwrap();
    assert_eq!(report["web_url"], format!("http://{addr}"));
    assert_eq!(report["queue"]["pressure"], "ok");
    assert!(
        report["next_jobs"]
            .as_array()
            .is_some_and(|j| !j.is_empty())
    );

    // The store is the daemon's; these go over the socket.
    let tail = ok(dir, &["audit", "tail", "-n", "50", "--json"]);
    let events: Vec<Value> = tail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events.iter().any(|e| e["event"] == "daemon.started"),
        "{tail}"
    );
    let verified = ok(dir, &["audit", "verify"]);
    assert!(verified.starts_with("audit chain ok:"), "{verified}");

    let list = ok(dir, &["work", "list"]);
    assert!(
        list.contains("w-ctl-1") && list.contains("pending"),
        "{list}"
    );
    let shown: Value =
        serde_json::from_str(ok(dir, &["work", "show", "w-ctl-1", "--json"]).trim()).unwrap();
    assert_eq!(shown["title"], "Tidy the notes");
    // Without --json: one field a line, for a person.
    let text = ok(dir, &["work", "show", "w-ctl-1"]);
    for line in [
        "title       Tidy the notes",
        "status      pending",
        "type        task",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in {text}");
    }
    assert!(!text.trim_start().starts_with('{'), "{text}");
    let missing = run(dir, &["work", "show", "w-nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).starts_with("error[E_DB_NOT_FOUND]"),
        "{}",
        stderr(&missing)
    );

    let cancelled = ok(dir, &["work", "cancel", "w-ctl-1"]);
    assert!(
        cancelled.contains("cancelled w-ctl-1 (was pending"),
        "{cancelled}"
    );
    let shown: Value =
        serde_json::from_str(ok(dir, &["work", "show", "w-ctl-1", "--json"]).trim()).unwrap();
    assert_eq!(shown["status"], "failed");
    // A goal that stops ends `done` (it has no failure to report), and
    // the CLI says so rather than "failed".
    let goal = ok(dir, &["work", "cancel", "g-ctl-1"]);
    assert!(goal.contains("it is now done"), "{goal}");
    let shown: Value =
        serde_json::from_str(ok(dir, &["work", "show", "g-ctl-1", "--json"]).trim()).unwrap();
    assert_eq!(shown["status"], "done");
    // Again: it has already ended, which is what was asked — exit 0, said.
    let again = ok(dir, &["work", "cancel", "w-ctl-1"]);
    assert!(
        again.contains("w-ctl-1 had already ended (failed): nothing to cancel"),
        "{again}"
    );

    let devices = ok(dir, &["devices", "list", "--json"]);
    let cli_device: Value = serde_json::from_str(devices.lines().next().unwrap()).unwrap();
    assert_eq!(cli_device["label"], "local CLI");
    assert!(cli_device.get("token_sha256").is_none(), "{devices}");
    // Revoking the CLI's own device (a leaked cli.token) rotates it: the
    // old token is refused, the next command already works with a new one.
    let old_token = std::fs::read_to_string(dir.join("data/cli.token")).unwrap();
    let cli_id = cli_device["device_id"].as_str().unwrap();
    let revoked = ok(dir, &["devices", "revoke", cli_id]);
    assert!(revoked.contains(&format!("revoked {cli_id}")), "{revoked}");
    let new_token = std::fs::read_to_string(dir.join("data/cli.token")).unwrap();
    assert_ne!(old_token, new_token, "cli.token not rotated");
    let devices = ok(dir, &["devices", "list", "--json"]);
    let active: Vec<Value> = devices
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|d| d["label"] == "local CLI" && d["revoked"] == false)
        .collect();
    assert_eq!(active.len(), 1, "{devices}");
    assert_ne!(active[0]["device_id"], cli_device["device_id"]);
    // Revoking it again changes nothing (no second rotation), and says so.
    let again = ok(dir, &["devices", "revoke", cli_id]);
    assert!(
        again.contains(&format!("{cli_id} was already revoked")),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("data/cli.token")).unwrap(),
        new_token
    );
    let pair = ok(dir, &["pair"]);
    assert!(pair.contains(&format!("http://{addr}/#pair=")), "{pair}");
    // A command that works on the store itself says the daemon holds it.
    let held = run(dir, &["skill", "install", "coding"]);
    assert_eq!(held.status.code(), Some(1));
    assert!(
        stderr(&held).contains("the running daemon holds the store")
            && stderr(&held).contains("silas stop"),
        "{}",
        stderr(&held)
    );
    let cfg = ok(dir, &["config", "check"]);
    assert!(cfg.contains("config in force (running daemon)"), "{cfg}");
    assert!(cfg.contains("config on disk: same"), "{cfg}");
    // It started from the built-in defaults and an override; a config file
    // written since is what a restart would read, not what runs now.
    assert!(
        cfg.contains(
            "config in force (running daemon): built-in defaults + environment \
             (SILAS__CHANNELS__WEB__PORT)"
        ),
        "{cfg}"
    );
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(
        dir.join("config/silas.yaml"),
        "silas:\n  chronicle:\n    retention_days: 31\n",
    )
    .unwrap();
    let cfg = ok(dir, &["config", "check"]);
    assert!(
        cfg.contains("config in force (running daemon): built-in defaults")
            && cfg.contains("differs in chronicle"),
        "{cfg}"
    );
    std::fs::remove_dir_all(dir.join("config")).unwrap();

    daemon.stop_blocking();
    let events = audit_events(dir);
    let cancel = events
        .iter()
        .find(|e| e["event"] == "work_item.cancelled")
        .expect("cancellation audited");
    assert_eq!(cancel["data"]["work_item_id"], "w-ctl-1");
    assert_eq!(cancel["data"]["by"], cli_device["device_id"]);
    assert!(
        !data.join("control.sock").exists(),
        "socket removed at stop"
    );
}

/// `silas stop` shuts the daemon down as SIGTERM does (drain, checkpoint,
/// exit 0), waits for it, and the audit says who asked; with no daemon it
/// says so and succeeds (stopped is what was asked for).
#[test]
fn silas_stop_shuts_the_daemon_down_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut daemon, _addr) = start(dir);
    let out = ok(dir, &["stop"]);
    assert!(
        out.contains("silas: stopping (pid") && out.trim_end().ends_with("silas: stopped"),
        "{out}"
    );
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let events = audit_events(dir);
    let stopped = events
        .iter()
        .rfind(|e| e["event"] == "daemon.stopped")
        .expect("daemon.stopped audited");
    assert!(
        stopped["data"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("silas stop by dev-"),
        "{stopped}"
    );
    let again = run(dir, &["stop"]);
    assert!(again.status.success());
    assert!(
        stdout(&again).starts_with("silas: not running"),
        "{}",
        stdout(&again)
    );
}

fn send(conn: &mut UnixStream, reader: &mut BufReader<UnixStream>, line: &[u8]) -> Value {
    conn.write_all(line).unwrap();
    conn.write_all(b"\n").unwrap();
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

#[test]
fn the_socket_refuses_missing_and_wrong_credentials_and_survives_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (daemon, _addr) = start(dir);
    let data = dir.join("data");
    let mut conn = UnixStream::connect(data.join("control.sock")).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());

    let r = send(&mut conn, &mut reader, br#"{"op":"work_list"}"#);
    assert_eq!(r["code"], "E_CHANNEL_AUTH", "{r}");
    let r = send(&mut conn, &mut reader, b"\x01\x02 not json {{{");
    assert_eq!(r["code"], "E_CHANNEL_PROTOCOL", "{r}");
    let r = send(
        &mut conn,
        &mut reader,
        br#"{"op":"hello","version":1,"token":"0000"}"#,
    );
    assert_eq!(r["code"], "E_CHANNEL_AUTH", "{r}");
    let r = send(&mut conn, &mut reader, br#"{"op":"status"}"#);
    assert_eq!(r["code"], "E_CHANNEL_AUTH", "still refused: {r}");
    // The same connection, still open, with the owner's credential.
    let hello = json!({"op": "hello", "version": 1, "token": owner_token(&data)});
    let r = send(&mut conn, &mut reader, hello.to_string().as_bytes());
    assert_eq!(r, json!({"kind": "welcome", "version": 1}));
    let r = send(&mut conn, &mut reader, br#"{"op":"work_list"}"#);
    assert_eq!(r, json!({"kind": "work_items", "items": []}));
    let r = send(&mut conn, &mut reader, b"garbage after auth");
    assert_eq!(r["code"], "E_CHANNEL_PROTOCOL", "{r}");
    let r = send(&mut conn, &mut reader, br#"{"op":"status"}"#);
    assert_eq!(r["kind"], "status", "{r}");
    drop(conn);

    daemon.stop_blocking();
    let failed: Vec<Value> = audit_events(dir)
        .into_iter()
        .filter(|e| e["event"] == "web.auth_failed" && e["data"]["channel"] == "control")
        .collect();
    let reasons: Vec<&str> = failed
        .iter()
        .map(|e| e["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "missing_credential",
            "invalid_credential",
            "missing_credential"
        ],
        "{failed:?}"
    );
    assert!(
        failed[0]["data"]["remote"]
            .as_str()
            .unwrap()
            .starts_with("local uid ")
    );
}

#[test]
fn without_a_daemon_reads_use_the_store_and_live_commands_say_they_need_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init_with_work(dir);

    let status = run(dir, &["status"]);
    assert_eq!(status.status.code(), Some(3), "{}", stderr(&status));
    assert!(
        stdout(&status).starts_with("silas: not running")
            && !stdout(&status).contains("no data directory"),
        "{}",
        stdout(&status)
    );
    // Asked from a directory with no `./data`: the likely reason is said.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let status = run(&elsewhere, &["status"]);
    assert_eq!(status.status.code(), Some(3), "{}", stderr(&status));
    assert!(
        stdout(&status).contains("there is no data directory at")
            && stdout(&status).contains("--data-dir"),
        "{}",
        stdout(&status)
    );
    let list = run(&elsewhere, &["work", "list"]);
    assert_eq!(list.status.code(), Some(1));
    assert!(
        stderr(&list).contains("no data directory at") && stderr(&list).contains("--data-dir"),
        "{}",
        stderr(&list)
    );
    assert!(
        !elsewhere.join("data").exists(),
        "a read created a data dir"
    );
    assert!(ok(dir, &["work", "list"]).contains("w-ctl-1"));
    // An item the stopped daemon was running is marked, and a line says
    // it is not running now.
    {
        let store = silas_storage::Store::open_in(dir.join("data")).unwrap();
        let mut item = store.work_items().get("w-ctl-1").unwrap().unwrap();
        item.status = silas_core::model::work::WorkItemStatus::Running;
        store.work_items().save(&item).unwrap();
    }
    let list = ok(dir, &["work", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("w-ctl-1") && l.contains("running*")),
        "{list}"
    );
    assert!(list.contains("the daemon is stopped"), "{list}");
    {
        let store = silas_storage::Store::open_in(dir.join("data")).unwrap();
        let mut item = store.work_items().get("w-ctl-1").unwrap().unwrap();
        item.status = silas_core::model::work::WorkItemStatus::Pending;
        store.work_items().save(&item).unwrap();
    }
    let shown: Value =
        serde_json::from_str(ok(dir, &["work", "show", "w-ctl-1", "--json"]).trim()).unwrap();
    assert_eq!(shown["status"], "pending");
    assert!(ok(dir, &["audit", "tail"]).contains("init.owner_key_created"));
    assert!(ok(dir, &["audit", "verify"]).starts_with("audit chain ok:"));
    for args in [&["work", "cancel", "w-ctl-1"][..], &["pair"][..]] {
        let o = run(dir, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.starts_with("error[E_CHANNEL_DISCONNECTED]")
                && err.contains("needs the running daemon"),
            "{args:?}: {err}"
        );
    }
}

/// A typo in the file while the daemon runs must not lock the owner out of
/// it: `status`, `work` and `audit` still reach the daemon, with a warning,
/// and `config check` shows the configuration in force next to the file's
/// error. Without a daemon the error stands.
#[test]
fn a_broken_config_file_does_not_lock_the_owner_out_of_the_running_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    init_with_work(dir);
    let (daemon, _addr) = start(dir);
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/silas.yaml"), "silas:\n  chanels: {}\n").unwrap();

    let o = run(dir, &["status"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("silas: running"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("warning: error[E_CFG_UNKNOWN_KEY]") && stderr(&o).contains("chanels"),
        "{}",
        stderr(&o)
    );
    assert!(ok(dir, &["work", "list"]).contains("w-ctl-1"));
    let done = ok(dir, &["work", "cancel", "w-ctl-1"]);
    assert!(done.contains("cancelled w-ctl-1"), "{done}");

    let o = run(dir, &["config", "check"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("config in force (running daemon)"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("config on disk is invalid"),
        "{}",
        stderr(&o)
    );
    daemon.stop_blocking();

    let o = run(dir, &["status"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).starts_with("error[E_CFG_UNKNOWN_KEY]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_stale_socket_file_does_not_stop_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["init"]);
    let sock = dir.join("data").join("control.sock");
    // What a killed daemon leaves behind: a socket nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    // The CLI sees no daemon there.
    assert_eq!(run(dir, &["status"]).status.code(), Some(3));

    let (daemon, _addr) = start(dir);
    assert!(ok(dir, &["status"]).contains("silas: running"));
    daemon.stop_blocking();
}

/// `silas` as another local user (through `setpriv`), from a copy of the
/// binary that user can execute.
fn as_user(uid: u32, groups: &str, dir: &Path, args: &[&str]) -> Output {
    let bin = dir.join("silas-bin");
    if !bin.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_silas"), &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let group_arg = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!("--groups={groups}")
    };
    std::process::Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            group_arg,
            "--inh-caps=-all".into(),
            "--bounding-set=-all".into(),
        ])
        .arg(&bin)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .output()
        .unwrap()
}

/// The service's group is how an administrator reaches a daemon running as
/// another user: a member can ask it, anyone else cannot even connect.
#[test]
fn a_member_of_the_daemons_group_can_ask_it_and_other_users_cannot() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root to act as two other users");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (daemon, _addr) = start(dir);
    let gid = std::os::unix::fs::MetadataExt::gid(
        &std::fs::metadata(dir.join("data/control.sock")).unwrap(),
    );
    let member = as_user(4545, &gid.to_string(), dir, &["status"]);
    assert!(
        member.status.success() && stdout(&member).contains("silas: running (pid"),
        "{:?}\n{}{}",
        member.status,
        stdout(&member),
        stderr(&member)
    );
    let stranger = as_user(4546, "", dir, &["status"]);
    assert!(!stranger.status.success(), "{}", stdout(&stranger));
    assert!(!stdout(&stranger).contains("running (pid"));
    assert!(
        stderr(&stranger).contains("Permission denied"),
        "{}",
        stderr(&stranger)
    );
    drop(daemon);
}
