//! `silas doctor` and `silas service install` over the real binary: a
//! healthy scratch dir exits 0; a keys dir open to others fails with the
//! chmod that fixes it; a foreign listener on the web port fails while our
//! own running daemon passes (port and store lock); a model endpoint on a
//! closed loopback port fails; `silas start` stops on a foreign port holder
//! with the same line, and (as root) when the sandbox user cannot reach its
//! dirs; the generated unit passes `systemd-analyze verify`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};

use support::{silas, start};

/// A scratch dir the sandbox user can traverse (a root daemon's sandbox runs
/// as `nobody`; tempdirs are 0700), initialised.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let out = silas(dir.path()).arg("init").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn doctor(dir: &Path, port: u16, extra_env: &[(&str, &str)]) -> (Output, Vec<String>) {
    let mut cmd = silas(dir);
    cmd.env("SILAS__CHANNELS__WEB__PORT", port.to_string());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.arg("doctor").stdin(Stdio::null()).output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (out, lines)
}

fn line<'a>(lines: &'a [String], name: &str) -> &'a str {
    let prefix = format!(" {name}: ");
    lines
        .iter()
        .find(|l| l.contains(&prefix))
        .unwrap_or_else(|| panic!("no {name} line in {lines:#?}"))
}

#[test]
fn a_healthy_scratch_dir_passes() {
    let dir = scratch();
    let (out, lines) = doctor(dir.path(), free_port(), &[]);
    assert_eq!(out.status.code(), Some(0), "{lines:#?}\n{out:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("PASS ") || l.starts_with("WARN ")),
        "{lines:#?}"
    );
    for name in [
        "config",
        "user",
        "disk",
        "data-dir",
        "keys-dir",
        "key-file",
        "store-file",
        "sandbox",
        "sandbox-confinement",
        "sandbox-dirs",
        "port",
        "owner-key",
        "store",
        "clock",
    ] {
        let l = line(&lines, name);
        assert!(l.starts_with("PASS "), "{l}");
    }
    // No API key: offline mode, said so.
    assert!(line(&lines, "model").starts_with("WARN model: offline mode"));
    // One kernel, one landlock version: the probe and the trial command's
    // confinement name the same (they said 6 and 7 on a 6.15 kernel).
    let abi = |l: &str| {
        l.split_once("landlock ABI ").map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
    };
    let probed = abi(line(&lines, "landlock"));
    let confined = abi(line(&lines, "sandbox"));
    if confined.is_some() {
        assert_eq!(probed, confined, "{lines:#?}");
    }
}

/// glibc reads a POSIX rule in `TZ`; Silas's zone database does not, so
/// the schedules would follow UTC while the host's clock follows CET.
#[test]
fn a_tz_silas_cannot_read_is_a_warning() {
    let dir = scratch();
    let (out, lines) = doctor(dir.path(), free_port(), &[("TZ", "CET-1CEST")]);
    assert_eq!(out.status.code(), Some(0), "{lines:#?}");
    let tz = line(&lines, "timezone");
    assert!(tz.starts_with("WARN "), "{tz}");
    assert!(
        tz.contains("TZ=\"CET-1CEST\" is not a time zone name"),
        "{tz}"
    );
    assert!(tz.contains("fix: set scheduler.timezone"), "{tz}");
    let (_, lines) = doctor(dir.path(), free_port(), &[("TZ", "Asia/Tokyo")]);
    assert_eq!(
        line(&lines, "timezone"),
        "PASS timezone: cron times are in Asia/Tokyo (scheduler.timezone: local)"
    );
}

#[test]
fn a_keys_dir_open_to_others_fails_with_the_chmod_fix() {
    let dir = scratch();
    let keys = dir.path().join("data/keys");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, lines) = doctor(dir.path(), free_port(), &[]);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let l = line(&lines, "keys-dir");
    assert!(l.starts_with("FAIL keys-dir:"), "{l}");
    assert!(
        l.ends_with(&format!("fix: chmod 700 {}", keys.display())),
        "{l}"
    );
    // Only that check failed.
    let fails: Vec<&String> = lines.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 1, "{fails:#?}");
}

#[test]
fn a_memory_index_open_to_others_fails_with_the_chmod_fix() {
    let dir = scratch();
    // What builds before the index was made private left behind.
    let index = dir.path().join("data/memory-index");
    std::fs::create_dir(&index).unwrap();
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, lines) = doctor(dir.path(), free_port(), &[]);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let l = line(&lines, "memory-index-dir");
    assert!(l.starts_with("FAIL memory-index-dir:"), "{l}");
    assert!(
        l.ends_with(&format!("fix: chmod 700 {}", index.display())),
        "{l}"
    );
}

/// `silas start` over `dir` on `port`, which must refuse: its stderr.
fn refused_start(dir: &std::path::Path, port: u16) -> String {
    let out = silas(dir)
        .env("SILAS__CHANNELS__WEB__PORT", port.to_string())
        .arg("start")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_foreign_port_holder_fails_and_our_own_daemon_passes() {
    let dir = scratch();
    // Something that is not Silas: accepts, never answers HTTP.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let (out, lines) = doctor(dir.path(), port, &[]);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let l = line(&lines, "port");
    assert!(l.starts_with("FAIL port:"), "{l}");
    assert!(
        l.contains(&format!("127.0.0.1:{port}")) && l.contains("fix:"),
        "{l}"
    );

    // `silas start` runs the same check first and stops with that line.
    let err = refused_start(dir.path(), port);
    assert!(err.contains("FAIL port:") && err.contains("fix:"), "{err}");
    // A start-up refusal (§18.1: `E_CFG_*`, refuse start), not a protocol error.
    assert!(err.starts_with("error[E_CFG_INVALID]"), "{err}");
    drop(holder);

    // Our own daemon on its port: the port and the store lock are its.
    let (daemon, addr) = start(dir.path());
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let (out, lines) = doctor(dir.path(), port, &[]);
    assert_eq!(out.status.code(), Some(0), "{lines:#?}");
    assert!(
        line(&lines, "port").contains("held by the running Silas daemon"),
        "{lines:#?}"
    );
    assert!(
        line(&lines, "store").starts_with("PASS store: held by the running Silas daemon"),
        "{lines:#?}"
    );
    assert!(line(&lines, "cli-credential").starts_with("PASS"));
    // A second `silas start` beside it is refused the same way, naming it.
    let err = refused_start(dir.path(), port);
    assert!(
        err.starts_with("error[E_CFG_INVALID]: FAIL port: a Silas daemon is already running"),
        "{err}"
    );
    // Asked without the port the daemon was started with (another port is
    // free): the daemon still answers on its control socket, so the lock
    // is its own, not a foreign process's.
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free = elsewhere.local_addr().unwrap().port();
    drop(elsewhere);
    let (out, lines) = doctor(dir.path(), free, &[]);
    assert_eq!(out.status.code(), Some(0), "{lines:#?}");
    assert!(
        line(&lines, "store").starts_with("PASS store: held by the running Silas daemon"),
        "{lines:#?}"
    );

    // A second `silas start` from another directory stops at the port
    // before it creates a data dir and owner key of its own there.
    let other = tempfile::tempdir().unwrap();
    let second = silas(other.path())
        .env("SILAS__CHANNELS__WEB__PORT", port.to_string())
        .arg("start")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("a Silas daemon is already running"), "{err}");
    assert!(
        !other.path().join("data").exists(),
        "the refused start created a data dir"
    );
    daemon.stop_blocking();
}

#[test]
fn an_unreachable_model_endpoint_fails() {
    let dir = scratch();
    let closed = free_port();
    let config = dir.path().join("silas.yaml");
    std::fs::write(
        &config,
        format!(
            "silas:\n  models:\n    proxy: \"local:m\"\n    planner: \"local:m\"\n    executor: \"local:m\"\n    scorer: \"local:m\"\n  providers:\n    local:\n      base_url: \"http://127.0.0.1:{closed}/v1\"\n      api_key_env: null\n"
        ),
    )
    .unwrap();
    let mut cmd = silas(dir.path());
    let out = cmd
        .env("SILAS__CHANNELS__WEB__PORT", free_port().to_string())
        .arg("--config")
        .arg(&config)
        .arg("doctor")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = stdout.lines().map(str::to_string).collect();
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let l = line(&lines, "model");
    assert!(l.starts_with("FAIL model: cannot reach"), "{l}");
    assert!(l.contains(&format!("127.0.0.1:{closed}")), "{l}");
}

#[test]
fn the_service_unit_is_written_absolute_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let out = silas(dir.path())
        .args(["service", "install", "--output", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let unit = String::from_utf8_lossy(&out.stdout).to_string();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_silas")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let data = dir.path().join("data");
    assert_eq!(
        exec,
        format!("{} --data-dir {} start", exe.display(), data.display()),
        "{unit}"
    );
    assert!(unit.contains(&format!("ReadWritePaths={}", data.display())));
    assert!(unit.contains("\nUser=silas\n"));
    // The default `./skills` is resolved where the command ran, as it was
    // for `silas start` there: systemd would otherwise start in `/`.
    let cwd = dir.path();
    assert!(
        unit.contains(&format!("\nWorkingDirectory={}\n", cwd.display())),
        "{unit}"
    );
    assert!(
        unit.contains(&format!(
            "\nReadWritePaths={}\n",
            cwd.join("skills").display()
        )),
        "{unit}"
    );

    // --user: written under $HOME, with how to enable it. An override set
    // in this shell is named: the service will not see it.
    let out = silas(dir.path())
        .env("SILAS__CHANNELS__WEB__PORT", "9999")
        .args(["service", "install", "--user"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = dir.path().join(".config/systemd/user/silas.service");
    let user_unit = std::fs::read_to_string(&path).unwrap();
    assert!(!user_unit.contains("\nUser="), "{user_unit}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("systemctl --user daemon-reload && systemctl --user enable --now silas"),
        "{said}"
    );
    assert!(
        said.contains(
            "note: this shell sets SILAS__CHANNELS__WEB__PORT, which the service will not see"
        ),
        "{said}"
    );

    // Run from a directory whose name needs care (a space, a `%`): the
    // whole-value paths are written as they are, specifiers escaped.
    let spaced = dir.path().join("my 100% project");
    std::fs::create_dir(&spaced).unwrap();
    let out = silas(&spaced)
        .args(["service", "install", "--output", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let spaced_unit = String::from_utf8_lossy(&out.stdout).to_string();
    let escaped = spaced.display().to_string().replace('%', "%%");
    assert!(
        spaced_unit.contains(&format!("\nWorkingDirectory={escaped}\n")),
        "{spaced_unit}"
    );
    assert!(
        unit.contains("\nEnvironmentFile=-/etc/silas/env\n"),
        "{unit}"
    );

    // systemd's own checker, when installed.
    let Ok(analyze) = which("systemd-analyze") else {
        println!("skipped systemd-analyze verify: systemd-analyze is not installed");
        return;
    };
    for (name, text) in [
        ("system", &unit),
        ("user", &user_unit),
        ("spaced", &spaced_unit),
    ] {
        let unit_dir = dir.path().join(format!("verify-{name}"));
        std::fs::create_dir_all(&unit_dir).unwrap();
        let file = unit_dir.join("silas.service");
        std::fs::write(&file, text).unwrap();
        // Both checked by the system manager's parser: `--user` needs a
        // running user manager, and the directives are the same.
        let v = std::process::Command::new(&analyze)
            .args(["verify", "--man=no"])
            .arg(&file)
            .env("SYSTEMD_LOG_LEVEL", "warning")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&v.stderr);
        // Only lines about our unit count (the host's own units may warn).
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("silas.service"))
            .collect();
        assert!(v.status.success() && ours.is_empty(), "{name}: {err}");
    }
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}

/// As root the sandbox runs as `nobody`: `silas start` over a data dir
/// below a private (0700) directory stops before serving, with the fix.
#[test]
fn start_stops_when_the_sandbox_user_cannot_reach_its_dirs() {
    if !is_root() {
        println!("skipped: only a root daemon's sandbox runs as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A data dir under a private directory alone is arranged for (the
    // sandbox dirs move under /var/lib/silas, tests/first_run.rs); a
    // sandbox root the owner *configured* there cannot be, and stops the start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_silas"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("SILAS__CHANNELS__WEB__PORT", "0")
        .env(
            "SILAS__SANDBOX__ROOT_DIR",
            private.join("sandbox").display().to_string(),
        )
        .args(["--data-dir"])
        .arg(dir.path().join("data"))
        .arg("start")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.starts_with("error[E_SANDBOX_UNAVAILABLE]: FAIL sandbox-dirs:"),
        "{err}"
    );
    assert!(
        err.contains(&format!("fix: chmod o+x {}", private.display())),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Silas is running"));
}

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

/// Issue #14: with Telegram enabled, doctor asks the configured Bot API
/// (here a fake on loopback) who the token belongs to; a rejected token is a
/// FAIL naming the fix, and the token never appears in the output.
#[test]
fn doctor_checks_the_telegram_token_against_the_bot_api() {
    const TOKEN: &str = "4242:DOCTOR-canary-token";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt
        .block_on(silas_testkit::telegram::FakeBotApi::start())
        .unwrap();
    let dir = scratch();
    let api_url = fake.api_url();
    let env = [
        ("SILAS__CHANNELS__TELEGRAM__ENABLED", "true"),
        ("SILAS__CHANNELS__TELEGRAM__API_URL", api_url.as_str()),
        ("SILAS_TELEGRAM_TOKEN", TOKEN),
        ("SILAS__CHANNELS__TELEGRAM__TOKEN", TOKEN),
        ("SILAS__CHANNELS__TELEGRAM__OWNER_CHAT_ID", "1001"),
    ];
    let (out, lines) = doctor(dir.path(), free_port(), &env);
    let l = line(&lines, "telegram");
    assert!(l.starts_with("PASS telegram:"), "{l}");
    assert!(l.contains("@silas_bot"), "{l}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("canary"));
    assert_eq!(fake.calls_to("getMe").len(), 1);
    assert_eq!(fake.calls_to("getMe")[0].token, TOKEN);

    fake.script(
        "getMe",
        silas_testkit::telegram::BotReply::Error {
            status: 401,
            description: "Unauthorized".into(),
        },
    );
    let (out, lines) = doctor(dir.path(), free_port(), &env);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let l = line(&lines, "telegram");
    assert!(l.starts_with("FAIL telegram:"), "{l}");
    assert!(l.contains("SILAS_TELEGRAM_TOKEN"), "{l}");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("canary"), "{all}");
}

/// Issue #19 item 2: started with a soft open-file limit of 1,024, the
/// daemon raises it toward the hard limit (every WebSocket is a descriptor),
/// and `silas doctor` reports what it will do.
#[test]
fn the_daemon_raises_its_open_file_limit_and_doctor_says_so() {
    use rustix::process::{Resource, getrlimit};
    let hard = getrlimit(Resource::Nofile).maximum;
    if hard.is_some_and(|h| h <= 1024) {
        eprintln!("SKIPPED: the hard open-file limit here is {hard:?}; nothing to raise to");
        return;
    }
    let dir = scratch();
    support::traversable(dir.path());
    // The shell lowers the soft limit, then becomes the daemon (same pid).
    let mut cmd = std::process::Command::new("sh");
    cmd.current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .arg("-c")
        .arg("ulimit -Sn 1024 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_silas"))
        .arg("--data-dir")
        .arg(dir.path().join("data"));
    let (daemon, _, _) = support::start_daemon(cmd, Stdio::null());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.child.id())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap();
    let want = hard.map_or(65_536, |h| h.min(65_536));
    assert_eq!(soft, want, "{limits}");
    drop(daemon);
    let (_, lines) = doctor(dir.path(), free_port(), &[]);
    let l = line(&lines, "open files");
    assert!(l.contains("the daemon raises the soft limit to"), "{l}");
}
