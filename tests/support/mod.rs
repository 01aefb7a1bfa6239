//! The shared harness of the binary-level integration tests (`tests/*.rs`
//! that drive the real `silas` binary). It owns:
//!
//! * the `silas` command over a test's temp dir (clean environment, `HOME`
//!   and `--data-dir` inside the dir) — [`silas`];
//! * spawning `silas start` on port 0 and waiting for its "Silas is running"
//!   banner — [`start`], [`start_daemon`] — and the [`Daemon`] guard that
//!   kills it on drop or stops it with SIGTERM and asserts a clean exit;
//! * the owner's credential: [`owner_token`] reads the CLI credential the
//!   daemon writes to `{data}/cli.token` (issue #12: the owner always
//!   authenticates), and [`connect`] presents it for the daemon at `addr`;
//! * the WebSocket client side: [`connect`] (asserting `auth_ok`),
//!   [`next_frame`], [`frame_of_type`], [`send`], [`request_plan`];
//! * reading the audit log the daemon left behind: [`audit_json`],
//!   [`audit_events`], [`assert_audit_verifies`].
//!
//! Each test crate compiles this module on its own and uses a subset of it,
//! so items not used by every one of them carry `#[allow(dead_code)]`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

/// A running `silas start`; killed (SIGKILL) and reaped when dropped.
pub struct Daemon {
    pub child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// SIGTERM and wait (without blocking the runtime) for a clean exit.
    #[allow(dead_code)]
    pub async fn stop(mut self) {
        self.sigterm();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "daemon exit {status:?}");
    }

    /// SIGTERM and wait for a clean exit, from a synchronous test.
    #[allow(dead_code)]
    pub fn stop_blocking(mut self) {
        self.sigterm();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "daemon exit {status:?}");
    }
}

/// `silas` run in `dir` with a clean environment (only `PATH`), `HOME=dir`
/// and `--data-dir dir/data`.
pub fn silas(dir: &Path) -> Command {
    traversable(dir);
    let mut c = Command::new(env!("CARGO_BIN_EXE_silas"));
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .arg("--data-dir")
        .arg(dir.join("data"));
    c
}

/// A root daemon's sandbox runs as `nobody`, which must traverse every
/// directory above `{data_dir}/sandbox`; tempdirs are created 0700, and
/// `silas start` refuses a layout its sandbox cannot reach.
pub fn traversable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(dir)
        && m.permissions().mode() & 0o001 == 0
    {
        let _ = std::fs::set_permissions(
            dir,
            std::fs::Permissions::from_mode(m.permissions().mode() | 0o011),
        );
    }
}

/// `silas start` over `dir` on a free port, stderr discarded: the daemon and
/// its `host:port`, once it announces readiness.
#[allow(dead_code)]
pub fn start(dir: &Path) -> (Daemon, String) {
    let (daemon, addr, _) = start_daemon(silas(dir), Stdio::null());
    (daemon, addr)
}

/// The data dir of each daemon started by this test binary, by `host:port`,
/// so [`connect`] finds the owner credential of the daemon it talks to.
static DATA_DIRS: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// The local CLI's owner credential the daemon over `data_dir` keeps in
/// `{data_dir}/cli.token` (present once the daemon announced readiness).
#[allow(dead_code)]
pub fn owner_token(data_dir: &Path) -> String {
    let path = data_dir.join("cli.token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no owner credential at {}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The owner credential of the daemon at `addr` (started by [`start_daemon`]).
#[allow(dead_code)]
pub fn owner_token_for(addr: &str) -> String {
    let dir = DATA_DIRS
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|m| m.get(addr).cloned())
        .unwrap_or_else(|| panic!("no daemon started at {addr} by this test"));
    owner_token(&dir)
}

/// The `--data-dir` argument of a [`silas`] command.
fn data_dir_of(cmd: &Command) -> Option<PathBuf> {
    let mut args = cmd.get_args();
    while let Some(a) = args.next() {
        if a == "--data-dir" {
            return args.next().map(PathBuf::from);
        }
    }
    None
}

/// `cmd` (a [`silas`] command, maybe with more env or args) run as `silas
/// start` on a free port: the daemon, its `host:port` and the stdout lines up
/// to and including the readiness banner. Panics if it exits first.
pub fn start_daemon(mut cmd: Command, stderr: Stdio) -> (Daemon, String, Vec<String>) {
    let mut child = cmd
        .env("SILAS__CHANNELS__WEB__PORT", "0")
        .arg("start")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.starts_with("Silas is running")
            && let Some((_, rest)) = line.split_once("http://")
        {
            let addr = rest.split('/').next().unwrap().to_string();
            if let Some(dir) = data_dir_of(&cmd) {
                DATA_DIRS
                    .lock()
                    .unwrap()
                    .get_or_insert_with(HashMap::new)
                    .insert(addr.clone(), dir);
            }
            // Keep draining stdout so the daemon never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return (Daemon { child }, addr, seen);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("daemon never announced readiness: {seen:?}");
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `ws://{addr}/ws` as the owner (the daemon's CLI credential in
/// `Sec-WebSocket-Protocol`) and waits up to `within` for the first frame,
/// which must be `auth_ok`: the socket and that frame.
#[allow(dead_code)]
pub async fn connect(addr: &str, within: Duration) -> (Ws, Value) {
    connect_with_token(addr, &owner_token_for(addr), within).await
}

/// Opens `ws://{addr}/ws` with no credential (a chatbot deployment's
/// customer) and waits for `auth_ok`.
#[allow(dead_code)]
pub async fn connect_anonymous(addr: &str, within: Duration) -> (Ws, Value) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let auth = next_frame(&mut ws, within)
        .await
        .expect("no auth frame in time");
    assert_eq!(auth["type"], "auth_ok", "{auth}");
    (ws, auth)
}

/// A `ws://{addr}/ws` request offering `token` as `bearer.<token>`.
#[allow(dead_code)]
pub fn ws_request(
    addr: &str,
    token: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("silas.v1, bearer.{token}").parse().unwrap(),
    );
    req
}

/// [`connect`] with an explicit credential.
#[allow(dead_code)]
pub async fn connect_with_token(addr: &str, token: &str, within: Duration) -> (Ws, Value) {
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(addr, token))
        .await
        .unwrap();
    let auth = next_frame(&mut ws, within)
        .await
        .expect("no auth frame in time");
    assert_eq!(auth["type"], "auth_ok", "{auth}");
    (ws, auth)
}

/// The next text frame within `within`, or `None` on timeout or when the
/// socket ends. A reply (a `message` with an `id`) is acknowledged as it
/// is read, as the real clients do, so a later connection of the same
/// scope is not sent it again; [`next_frame_no_ack`] reads without.
#[allow(dead_code)]
pub async fn next_frame(ws: &mut Ws, within: Duration) -> Option<Value> {
    let f = next_frame_no_ack(ws, within).await?;
    if f["type"] == "message"
        && let Some(id) = f["id"].as_str()
    {
        send(ws, serde_json::json!({"type": "ack", "id": id})).await;
    }
    Some(f)
}

/// [`next_frame`] without acknowledging replies: an old client's view.
#[allow(dead_code)]
pub async fn next_frame_no_ack(ws: &mut Ws, within: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(serde_json::from_str(&t).unwrap()),
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// The next frame of type `ty` within `within` (panics otherwise); every
/// frame seen, that one included, is appended to `log`.
#[allow(dead_code)]
pub async fn frame_of_type(ws: &mut Ws, ty: &str, within: Duration, log: &mut Vec<Value>) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame(ws, left)
            .await
            .unwrap_or_else(|| panic!("no {ty} frame in time; saw {log:?}"));
        log.push(f.clone());
        if f["type"] == ty {
            return f;
        }
    }
}

/// Sends `v` as one text frame.
#[allow(dead_code)]
pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// Sends `text` as a chat message and waits up to `within` for the plan
/// card it leads to: the `approval_request` frame.
#[allow(dead_code)]
pub async fn request_plan(
    ws: &mut Ws,
    text: &str,
    within: Duration,
    log: &mut Vec<Value>,
) -> Value {
    send(ws, serde_json::json!({"type": "message", "text": text})).await;
    frame_of_type(ws, "approval_request", within, log).await
}

/// `silas audit tail -n 2000 --json` over `dir` (run after the daemon has
/// stopped): one JSON entry per line.
#[allow(dead_code)]
pub fn audit_json(dir: &Path) -> String {
    let tail = silas(dir)
        .args(["audit", "tail", "-n", "2000", "--json"])
        .output()
        .unwrap();
    assert!(tail.status.success());
    String::from_utf8_lossy(&tail.stdout).into_owned()
}

/// [`audit_json`], parsed: every line must be one JSON entry.
#[allow(dead_code)]
pub fn audit_events(dir: &Path) -> Vec<Value> {
    audit_json(dir)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `silas audit verify` over `dir` succeeds: the hash chain is intact.
#[allow(dead_code)]
pub fn assert_audit_verifies(dir: &Path) {
    let out = silas(dir).args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fake model's two answers for one planned message: the proxy routes
/// to the planner, which proposes a plan of `kind` with `extra` front-matter
/// lines (YAML) and the body "Summarise the report.".
#[allow(dead_code)]
pub fn plan_replies(fake: &silas_testkit::FakeLlm, id: &str, kind: &str, extra: &str) {
    use silas_testkit::Reply;
    let markdown = format!(
        "---\nid: {id}\ntype: {kind}\ntitle: \"{id}\"\n{extra}\n---\n\nSummarise the report.\n"
    );
    fake.push(Reply::json(&serde_json::json!({
        "route": "planner", "reason": "needs a plan",
        "interaction_register": "execution", "interaction_mode": "act_and_report",
        "context_profile": "conversation"})));
    fake.push(Reply::json(
        &serde_json::json!({"message": "Here is a plan.",
        "plan_action": {"action": "propose", "plan_markdown": markdown},
        "needs_approval": true}),
    ));
}

/// Every agent on `fake` (no key needed, no retries), written to
/// `dir/silas.yaml`; the path is returned.
#[allow(dead_code)]
pub fn fake_config(dir: &Path, fake: &silas_testkit::FakeLlm) -> PathBuf {
    let path = dir.join("silas.yaml");
    std::fs::write(
        &path,
        format!(
            "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
            fake.base_url()
        ),
    )
    .unwrap();
    path
}

/// A chatbot deployment on `fake` (a connection without a credential is a
/// customer), plan cards kept open for 5 minutes; the owner connected.
#[allow(dead_code)]
pub async fn start_chatbot_on_fake(
    dir: &Path,
    fake: &silas_testkit::FakeLlm,
) -> (Daemon, String, Ws) {
    let config = fake_config(dir, fake);
    let goal = dir.join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let mut cmd = silas(dir);
    cmd.arg("--config")
        .arg(config)
        .env("SILAS__ACTIVE_GOAL", &goal)
        .env("SILAS__APPROVAL__PLAN_CARD_TIMEOUT_SECONDS", "300");
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let (ws, _) = connect(&addr, Duration::from_secs(10)).await;
    (daemon, addr, ws)
}

/// The `skill_install` card for `skill`: one already in `log`, else the
/// next one read.
#[allow(dead_code)]
pub async fn install_card(
    ws: &mut Ws,
    skill: &str,
    within: Duration,
    log: &mut Vec<Value>,
) -> Value {
    if let Some(c) = log
        .iter()
        .find(|f| f["type"] == "skill_install" && f["skill"] == skill)
    {
        return c.clone();
    }
    loop {
        let c = frame_of_type(ws, "skill_install", within, log).await;
        if c["skill"] == skill {
            return c;
        }
    }
}

/// Waits (≤ 60 s) until the audit log has `skill_installed` for `skill`.
#[allow(dead_code)]
pub async fn wait_installed(dir: &Path, skill: &str) {
    for _ in 0..240 {
        if audit_events(dir)
            .iter()
            .any(|e| e["event"] == "skill_installed" && e["data"]["skill"] == skill)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{skill} was not installed");
}
