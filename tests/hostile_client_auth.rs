//! Hostile clients against the real daemon over real sockets (issue #12
//! item 2: the owner is always authenticated, loopback included): tokenless
//! and wrong-token clients are closed with 4001 and audited; a pairing code
//! works once; a revoked device is disconnected and refused; the 51st failed
//! attempt in a minute from one address is refused unseen while another
//! address, and the owner's device credential from the same one, still get
//! in (a socket without a credential from there is refused before the
//! upgrade); an oversized pre-auth frame closes the socket with 1009;
//! unauthenticated sockets are capped per address and in all while the
//! owner still gets in, and so are a chatbot's customer connections (per address and in all); a
//! short `auth_token` is a config error naming the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{Value, json};
use support::{
    Ws, audit_events, connect, connect_with_token, next_frame, owner_token, silas, start_daemon,
    ws_request,
};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const WITHIN: Duration = Duration::from_secs(10);

/// The close code the server ends `ws` with (None if it just drops).
async fn close_code(ws: &mut Ws, within: Duration) -> Option<u16> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(e) => {
                eprintln!("socket error instead of a close frame: {e}");
                return None;
            }
        }
    }
    None
}

/// A plain-HTTP loopback client (optionally from a given source address).
fn http(from: Option<&str>) -> reqwest::Client {
    silas_llm::ensure_crypto_provider();
    let mut b = reqwest::Client::builder().no_proxy();
    if let Some(ip) = from {
        b = b.local_address(Some(ip.parse().unwrap()));
    }
    b.build().unwrap()
}

/// The pairing link `silas start` printed.
fn pairing_link(banner: &[String]) -> String {
    banner
        .iter()
        .find_map(|l| {
            l.split_once("http://")
                .filter(|(_, r)| r.contains("#pair="))
        })
        .map(|(_, rest)| format!("http://{}", rest.trim()))
        .unwrap_or_else(|| panic!("no pairing link in {banner:?}"))
}

fn code_of(link: &str) -> String {
    link.split_once("#pair=").unwrap().1.to_string()
}

async fn pair(addr: &str, code: &str) -> reqwest::Response {
    http(None)
        .post(format!("http://{addr}/pair"))
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap()
}

/// The WebSocket handshake to `ws://{addr}/ws` from source address
/// `from`, offering `token`.
async fn handshake_from(
    from: &str,
    addr: &str,
    token: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let target: SocketAddr = addr.parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let stream = sock.connect(target).await.unwrap();
    let req = match token {
        Some(t) => ws_request(addr, t),
        None => format!("ws://{addr}/ws").into_client_request().unwrap(),
    };
    tokio_tungstenite::client_async(req, tokio_tungstenite::MaybeTlsStream::Plain(stream))
        .await
        .map(|(ws, _)| ws)
}

/// The HTTP status a handshake was refused with.
fn http_status(r: Result<Ws, tokio_tungstenite::tungstenite::Error>) -> u16 {
    match r {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("handshake failed otherwise: {e}"),
        Ok(_) => panic!("handshake not refused"),
    }
}

/// [`handshake_from`], which must succeed.
async fn connect_from(from: &str, addr: &str, token: Option<&str>) -> Ws {
    handshake_from(from, addr, token).await.unwrap()
}

/// Pairs a browser with the link `silas start` printed: its device token.
async fn paired_browser(addr: &str, banner: &[String]) -> String {
    pair(addr, &code_of(&pairing_link(banner)))
        .await
        .json::<Value>()
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string()
}

fn start(dir: &std::path::Path) -> (support::Daemon, String, Vec<String>) {
    start_daemon(silas(dir), Stdio::null())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenless_and_wrong_token_clients_get_4001_and_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, _) = start(dir.path());

    // A local process with no credential, speaking first.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    ws.send(Message::text(
        json!({"type": "message", "text": "I am the owner"}).to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(close_code(&mut ws, WITHIN).await, Some(4001));

    // A wrong credential, in the header and in a first auth frame.
    let wrong = "f".repeat(64);
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(&addr, &wrong))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws, WITHIN).await, Some(4001));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    ws.send(Message::text(
        json!({"type": "auth", "token": wrong}).to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(close_code(&mut ws, WITHIN).await, Some(4001));

    // The owner's credential still works.
    let (_ws, auth) = connect(&addr, WITHIN).await;
    assert_eq!(auth["scope_id"], "owner");

    daemon.stop().await;
    let audit = audit_events(dir.path());
    let failed: Vec<&Value> = audit
        .iter()
        .filter(|e| e["event"] == "web.auth_failed")
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed
            .iter()
            .all(|e| e["data"]["remote"] == "127.0.0.1" && e["data"]["channel"] == "ws"),
        "{failed:?}"
    );
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains(&wrong), "token material in the audit");
    assert!(!text.contains(&owner_token(&dir.path().join("data"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_code_works_once_and_wrong_codes_get_401() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start(dir.path());
    let link = pairing_link(&banner);
    assert!(link.starts_with(&format!("http://{addr}/#pair=")), "{link}");
    let code = code_of(&link);
    assert!(code.len() >= 32, "code too short for 128 bits: {code}");

    let wrong = pair(&addr, &"0".repeat(64)).await;
    assert_eq!(wrong.status(), 401);
    // A body that is not a pairing request is the client's error (it was
    // answered 405 Method Not Allowed), and is no failed attempt.
    for body in ["{}", "not json", r#"{"code": 7}"#] {
        let r = http(None)
            .post(format!("http://{addr}/pair"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
    }
    // The web app's label, printed later by `silas devices list`, cannot
    // carry terminal escapes.
    let first = http(None)
        .post(format!("http://{addr}/pair"))
        .json(&json!({"code": code, "label": "phone\u{1b}[2J\nfake line"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let body: Value = first.json().await.unwrap();
    let token = body["token"].as_str().unwrap().to_string();
    assert!(token.len() >= 32);
    let (_ws, auth) = connect_with_token(&addr, &token, WITHIN).await;
    assert_eq!(auth["type"], "auth_ok");
    // Used: refused, and it created no second device.
    assert_eq!(pair(&addr, &code).await.status(), 401);
    let listed = silas(dir.path())
        .args(["devices", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("phone [2J fake line"), "{listed}");
    assert!(!listed.contains('\u{1b}'), "{listed}");

    // Another device: `silas pair` asks the running daemon for a new link.
    let out = silas(dir.path())
        .args(["pair", "--url", &format!("http://{addr}")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let second = code_of(&pairing_link(&printed));
    assert_ne!(second, code);
    assert_eq!(pair(&addr, &second).await.status(), 200);

    daemon.stop().await;
    let audit = audit_events(dir.path());
    let reasons: Vec<&str> = audit
        .iter()
        .filter(|e| e["event"] == "web.auth_failed" && e["data"]["channel"] == "pair")
        .map(|e| e["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["unknown_or_used_code", "unknown_or_used_code"]);
    let added = audit
        .iter()
        .filter(|e| e["event"] == "web.device_added")
        .count();
    // The CLI's device and the two paired browsers.
    assert_eq!(added, 3);
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains(&code) && !text.contains(&token));

    // A restart with browsers paired prints no credential (its output goes
    // to a journal): more devices come from `silas pair`.
    let (daemon, _, banner) = start(dir.path());
    daemon.stop().await;
    assert!(!banner.iter().any(|l| l.contains("#pair=")), "{banner:?}");
    assert!(
        banner.iter().any(|l| l.contains("silas pair")),
        "{banner:?}"
    );
}

/// Red-team F6: a paired browser's credential revoked the local CLI's
/// device over the web API, and `silas status`, `devices` and `stop` failed
/// until a restart — with a stolen browser token, the administrator lost
/// the CLI. The web API refuses it; the browser's own device it revokes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_cannot_revoke_the_local_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start(dir.path());
    let token = paired_browser(&addr, &banner).await;
    let client = http(None);
    let devices: Value = client
        .get(format!("http://{addr}/devices"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id_of = |local: bool| {
        devices["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| (d["label"] == "local CLI") == local)
            .unwrap()["device_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let revoke = |id: String| {
        client
            .post(format!("http://{addr}/devices/{id}/revoke"))
            .bearer_auth(&token)
            .send()
    };
    assert_eq!(revoke(id_of(true)).await.unwrap().status(), 403);
    let status = silas(dir.path()).arg("status").output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(revoke(id_of(false)).await.unwrap().status(), 200);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_device_is_disconnected_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start(dir.path());
    let token = paired_browser(&addr, &banner).await;
    let (mut ws, _) = connect_with_token(&addr, &token, WITHIN).await;

    let url = format!("http://{addr}");
    let list = silas(dir.path())
        .args(["devices", "list", "--json", "--url", &url])
        .output()
        .unwrap();
    assert!(list.status.success());
    let devices: Vec<Value> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(devices.len(), 2, "{devices:?}");
    let browser = devices.iter().find(|d| d["label"] != "local CLI").unwrap()["device_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&token),
        "a credential in the device list"
    );

    let revoke = silas(dir.path())
        .args(["devices", "revoke", &browser, "--url", &url])
        .output()
        .unwrap();
    assert!(
        revoke.status.success(),
        "{}",
        String::from_utf8_lossy(&revoke.stderr)
    );
    // Its open socket is closed, and the token is refused from now on.
    assert_eq!(close_code(&mut ws, WITHIN).await, Some(4001));
    let (mut again, _) = tokio_tungstenite::connect_async(ws_request(&addr, &token))
        .await
        .unwrap();
    assert_eq!(close_code(&mut again, WITHIN).await, Some(4001));
    // The CLI's own credential is unaffected.
    let (_ws, auth) = connect(&addr, WITHIN).await;
    assert_eq!(auth["type"], "auth_ok");
    // Revocation survives a restart (it is in the store).
    daemon.stop().await;
    let (daemon, addr, _) = start(dir.path());
    let (mut again, _) = tokio_tungstenite::connect_async(ws_request(&addr, &token))
        .await
        .unwrap();
    assert_eq!(close_code(&mut again, WITHIN).await, Some(4001));
    daemon.stop().await;
    let audit = audit_events(dir.path());
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "web.device_revoked"
                && e["data"]["device_id"] == browser.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_51st_failed_attempt_in_a_minute_is_refused_before_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, banner) = start(dir.path());
    let owner = owner_token(&dir.path().join("data"));
    for i in 0..50 {
        let mut ws = connect_from("127.0.0.1", &addr, Some(&format!("{i:064x}"))).await;
        assert_eq!(close_code(&mut ws, WITHIN).await, Some(4001), "attempt {i}");
    }
    // The 51st guess: refused before comparison, and before the upgrade.
    let guess = handshake_from("127.0.0.1", &addr, Some(&format!("{:064x}", 51))).await;
    assert_eq!(http_status(guess), 429);
    // The owner's device credential in the header still gets in from the
    // locked-out address: any local process could otherwise lock the owner
    // out of loopback for a minute. A socket without one (to authenticate
    // in-band) is refused before the upgrade: it would hold one of the few
    // unauthenticated slots (the owner's clients send the header).
    let mut ws = connect_from("127.0.0.1", &addr, Some(&owner)).await;
    let auth = next_frame(&mut ws, WITHIN).await.unwrap();
    assert_eq!(auth["type"], "auth_ok", "{auth}");
    drop(ws);
    assert_eq!(
        http_status(handshake_from("127.0.0.1", &addr, None).await),
        429
    );
    // The pairing endpoint shares the budget: 429 before looking at the code.
    let code = code_of(&pairing_link(&banner));
    let r = http(Some("127.0.0.1"))
        .post(format!("http://{addr}/pair"))
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    // Every loopback address is this one local host: a local process
    // rotating through 127/8 gets the same 50 guesses in all (red-team F5:
    // one address each let it write 10,000 failures to the audit log in
    // 9 s). The owner's device credential still gets in from any of them.
    assert_eq!(
        http_status(handshake_from("127.0.0.2", &addr, Some(&format!("{:064x}", 52))).await),
        429
    );
    let r = http(Some("127.9.3.4"))
        .post(format!("http://{addr}/pair"))
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let mut ws = connect_from("127.0.0.2", &addr, Some(&owner)).await;
    let auth = next_frame(&mut ws, WITHIN).await.unwrap();
    assert_eq!(auth["type"], "auth_ok", "{auth}");
    drop(ws);

    daemon.stop().await;
    let audit = audit_events(dir.path());
    let failed = audit
        .iter()
        .filter(|e| e["event"] == "web.auth_failed")
        .count();
    assert_eq!(failed, 50);
    let throttled = audit
        .iter()
        .filter(|e| e["event"] == "web.auth_throttled" && e["data"]["remote"] == "127.0.0.1")
        .collect::<Vec<_>>();
    // Every refusal came within the minute: the first is written, the
    // others only counted (one entry per request let a locked-out client
    // grow the audit log at will).
    assert_eq!(throttled.len(), 1, "{throttled:?}");
    assert_eq!(throttled[0]["data"]["refused_since_last_entry"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_pre_auth_frame_is_closed_with_1009() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, _) = start(dir.path());
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let huge = format!(r#"{{"type":"auth","token":"{}"}}"#, "a".repeat(1024 * 1024));
    // The server may close before the whole frame is written.
    let _ = ws.send(Message::text(huge)).await;
    assert_eq!(
        close_code(&mut ws, WITHIN).await,
        Some(u16::from(CloseCode::Size))
    );
    // After authentication too.
    let (mut ws, _) = connect(&addr, WITHIN).await;
    let _ = ws.send(Message::text("x".repeat(70 * 1024))).await;
    assert_eq!(close_code(&mut ws, WITHIN).await, Some(1009));
    daemon.stop().await;
}

/// Sockets waiting to authenticate in-band are capped per address and in
/// all; the owner, whose credential rides in the header, needs none of
/// them (a flood of silent upgrades locked the owner out with 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_sockets_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr, _) = start(dir.path());
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(connect_from("127.0.0.1", &addr, None).await);
    }
    // The 9th from one address is refused at the handshake.
    assert_eq!(
        http_status(handshake_from("127.0.0.1", &addr, None).await),
        429
    );
    for i in 8..64 {
        idle.push(connect_from(&format!("127.0.1.{}", i / 8), &addr, None).await);
    }
    // The 65th waiting socket, from a fresh address: refused too.
    assert_eq!(
        http_status(handshake_from("127.0.2.1", &addr, None).await),
        503
    );
    // The owner still gets in.
    let (_ws, auth) = connect(&addr, WITHIN).await;
    assert_eq!(auth["scope_id"], "owner", "{auth}");
    drop(idle);
    daemon.stop().await;
}

/// A customer handshake from source address `from`: its HTTP status when
/// refused, or the open socket.
async fn customer_from(from: &str, addr: &str) -> Result<Ws, u16> {
    match handshake_from(from, addr, None).await {
        Ok(mut ws) => {
            let auth = next_frame(&mut ws, WITHIN).await.unwrap();
            assert_eq!(auth["type"], "auth_ok", "{auth}");
            Ok(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("handshake failed otherwise: {e}"),
    }
}

/// In a chatbot deployment anyone who reaches the port is a customer: their
/// connections are capped per address and in all (they were not, and one
/// client held every descriptor while the owner's socket timed out). The
/// owner still gets in, and a closed connection frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customer_connections_are_capped_per_address_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let goal = dir.path().join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let mut cmd = silas(dir.path());
    cmd.env("SILAS__ACTIVE_GOAL", &goal)
        .env("SILAS__LIMITS__CUSTOMER_CONNECTIONS_PER_IP", "3")
        .env("SILAS__LIMITS__CUSTOMER_CONNECTIONS_TOTAL", "5");
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(customer_from("127.0.0.2", &addr).await.unwrap());
    }
    assert_eq!(customer_from("127.0.0.2", &addr).await.err(), Some(429));
    for _ in 0..2 {
        open.push(customer_from("127.0.0.3", &addr).await.unwrap());
    }
    assert_eq!(
        customer_from("127.0.0.4", &addr).await.err(),
        Some(429),
        "the sixth customer in all"
    );
    // The owner is not a customer: never counted, never refused here.
    let (_owner, auth) = connect(&addr, WITHIN).await;
    assert_eq!(auth["scope_id"], "owner", "{auth}");
    // A visitor leaving frees a slot.
    drop(open.remove(0));
    let mut again = None;
    for _ in 0..40 {
        if let Ok(ws) = customer_from("127.0.0.4", &addr).await {
            again = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(again.is_some(), "the freed slot was never given back");
    drop(open);
    daemon.stop().await;
}

#[test]
fn a_short_auth_token_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = silas(dir.path())
        .env(
            "SILAS__CHANNELS__WEB__AUTH_TOKEN",
            "only-31-characters-long-secret!",
        )
        .args(["config", "check"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("channels.web.auth_token") && err.contains("at least 32"),
        "{err}"
    );
    assert!(
        !err.contains("only-31-characters"),
        "the token was echoed: {err}"
    );
    let start = silas(dir.path())
        .env("SILAS__CHANNELS__WEB__AUTH_TOKEN", "short")
        .arg("start")
        .output()
        .unwrap();
    assert!(!start.status.success());
    assert!(String::from_utf8_lossy(&start.stderr).contains("channels.web.auth_token"));
}
