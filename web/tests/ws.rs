//! The WebSocket channel and secure-input endpoint over real connections:
//! auth (subprotocol, first frame, timeout → 4001), cross-site and rebinding
//! refusal, typed error frames that keep the connection, shutdown with 1001.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use silas_web::protocol::{ClientFrame, ProtocolError, ServerFrame};
use silas_web::ws::{BoxFuture, ConnectionInfo, SecretSink, SecretStoreError, WebBackend};
use silas_web::{HealthState, WebSettings, bind};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Echoes messages back and records what it saw.
#[derive(Default)]
struct Echo {
    outbound: Mutex<Vec<mpsc::Sender<ServerFrame>>>,
    frames: Mutex<Vec<ClientFrame>>,
}

impl WebBackend for Echo {
    fn connected(
        &self,
        _c: ConnectionInfo,
        tx: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        self.outbound.lock().unwrap().push(tx);
        Box::pin(async { Ok("owner".to_string()) })
    }
    fn frame(&self, _id: &str, frame: ClientFrame) -> BoxFuture<'_, Result<(), ProtocolError>> {
        self.frames.lock().unwrap().push(frame.clone());
        let tx = self.outbound.lock().unwrap().last().cloned();
        Box::pin(async move {
            if let (ClientFrame::Message { text, .. }, Some(tx)) = (frame, tx) {
                let _ = tx
                    .send(ServerFrame::Message {
                        text: format!("echo: {text}"),
                        sender: "silas".into(),
                        timestamp: "t".into(),
                        id: None,
                    })
                    .await;
            }
            Ok(())
        })
    }
    fn disconnected(&self, _id: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[derive(Default)]
struct Vault {
    pending: Mutex<Vec<String>>,
    stored: Mutex<Vec<(String, usize)>>,
}

impl SecretSink for Vault {
    fn store(
        &self,
        ref_id: &str,
        value: zeroize::Zeroizing<String>,
    ) -> Result<(), SecretStoreError> {
        if self.stored.lock().unwrap().iter().any(|(r, _)| r == ref_id) {
            return Err(SecretStoreError::AlreadyFulfilled);
        }
        let mut p = self.pending.lock().unwrap();
        let Some(i) = p.iter().position(|r| r == ref_id) else {
            return Err(SecretStoreError::UnknownRef);
        };
        p.remove(i);
        self.stored
            .lock()
            .unwrap()
            .push((ref_id.to_string(), value.len()));
        Ok(())
    }
}

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<()>,
    echo: Arc<Echo>,
    vault: Arc<Vault>,
    health: Arc<HealthState>,
}

async fn start(token: Option<&str>) -> Server {
    let health = Arc::new(HealthState::default());
    let settings = WebSettings {
        host: "127.0.0.1".into(),
        port: 0,
        auth_token: token.map(str::to_string),
    };
    let echo = Arc::new(Echo::default());
    let vault = Arc::new(Vault::default());
    let bound = bind(&settings, health.clone())
        .await
        .unwrap()
        .attach(echo.clone(), vault.clone());
    let addr = bound.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let handle = bound.serve(async {
        let _ = rx.await;
    });
    Server {
        addr,
        stop: Some(tx),
        handle,
        echo,
        vault,
        health,
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    for (k, v) in headers {
        let name =
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req).await.map(|(s, _)| s)
}

/// The configured owner token of the servers below.
const TOKEN: &str = "s3cret";
const OWNER_PROTOCOL: &str = "silas.v1, bearer.s3cret";

/// A socket that presented the owner token in the subprotocol header.
async fn connect_owner(addr: std::net::SocketAddr) -> Ws {
    connect(addr, "/ws", &[("sec-websocket-protocol", OWNER_PROTOCOL)])
        .await
        .unwrap()
}

async fn next_json(ws: &mut Ws) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap();
        }
    }
}

async fn close_code(ws: &mut Ws, within: Duration) -> Option<CloseCode> {
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Ok(Message::Close(frame)) => return frame.map(|f| f.code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test]
async fn loopback_owner_must_authenticate_and_errors_keep_the_connection() {
    // Issue #12: no unauthenticated owner, loopback included.
    let bare = start(None).await;
    let mut ws = connect(bare.addr, "/ws", &[]).await.unwrap();
    ws.send(Message::text(r#"{"type":"message","text":"hi"}"#))
        .await
        .unwrap();
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(2)).await,
        Some(CloseCode::Library(4001))
    );
    assert!(bare.echo.frames.lock().unwrap().is_empty());

    let s = start(Some(TOKEN)).await;
    let mut ws = connect_owner(s.addr).await;
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type": "auth_ok", "scope_id": "owner"})
    );
    assert_eq!(s.health.connections(), 1);
    let body: Value = http_client()
        .get(format!("http://{}/health", s.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["connections"], 1);

    ws.send(Message::text(
        r#"{"type":"batch_review_response","request_id":"r9","verdict":"edit_selection"}"#,
    ))
    .await
    .unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["code"], "E_CHANNEL_PROTOCOL");
    assert_eq!(e["request_id"], "r9");
    ws.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "error");
    // Two `text`s: which one would the runtime see? Neither.
    ws.send(Message::text(r#"{"type":"message","text":"a","text":"b"}"#))
        .await
        .unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["code"], "E_CHANNEL_PROTOCOL", "{e}");
    ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "error");

    // Still open: a valid message goes through.
    ws.send(Message::text(r#"{"type":"message","text":"hello"}"#))
        .await
        .unwrap();
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type": "message", "text": "echo: hello", "sender": "silas", "timestamp": "t"})
    );
    assert_eq!(
        s.echo.frames.lock().unwrap().len(),
        1,
        "invalid frames never reach the runtime"
    );
}

#[tokio::test]
async fn cross_site_and_rebinding_handshakes_are_refused() {
    let s = start(Some(TOKEN)).await;
    let evil_origin = connect(s.addr, "/ws", &[("origin", "https://evil.example")]).await;
    assert!(evil_origin.is_err(), "cross-site socket accepted");
    let rebinding = connect(
        s.addr,
        "/ws",
        &[
            ("host", "evil.example:80"),
            ("origin", "http://evil.example:80"),
        ],
    )
    .await;
    assert!(rebinding.is_err(), "DNS-rebinding socket accepted");
    let own = format!("http://localhost:{}", s.addr.port());
    assert!(
        connect(
            s.addr,
            "/ws",
            &[
                ("origin", own.as_str()),
                ("sec-websocket-protocol", OWNER_PROTOCOL)
            ]
        )
        .await
        .is_ok()
    );
}

#[tokio::test]
async fn token_auth_by_subprotocol_or_first_frame_and_4001_otherwise() {
    let s = start(Some("s3cret")).await;
    // Subprotocol bearer token.
    let mut req = format!("ws://{}/ws", s.addr).into_client_request().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "silas.v1, bearer.s3cret".parse().unwrap(),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "silas.v1");
    assert_eq!(next_json(&mut ws).await["type"], "auth_ok");

    // First-frame auth.
    let mut ws = connect(s.addr, "/ws", &[]).await.unwrap();
    ws.send(Message::text(r#"{"type":"auth","token":"s3cret"}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "auth_ok");

    // Wrong token, or a message before auth, or a query-string token: 4001.
    for (path, first) in [
        ("/ws", r#"{"type":"auth","token":"guess"}"#),
        ("/ws", r#"{"type":"message","text":"let me in"}"#),
        (
            "/ws?token=s3cret",
            r#"{"type":"message","text":"query token"}"#,
        ),
    ] {
        let mut ws = connect(s.addr, path, &[]).await.unwrap();
        ws.send(Message::text(first)).await.unwrap();
        assert_eq!(
            close_code(&mut ws, Duration::from_secs(2)).await,
            Some(CloseCode::Library(4001)),
            "{path} {first}"
        );
    }
    assert!(
        s.echo.frames.lock().unwrap().is_empty(),
        "an unauthenticated frame reached the runtime"
    );
}

#[tokio::test]
async fn silence_after_connect_is_closed_with_4001_after_five_seconds() {
    let s = start(Some("s3cret")).await;
    let mut ws = connect(s.addr, "/ws", &[]).await.unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(8)).await,
        Some(CloseCode::Library(4001))
    );
    assert!(t0.elapsed() >= Duration::from_millis(4900));
}

#[tokio::test]
async fn shutdown_closes_sessions_with_1001() {
    let mut s = start(Some(TOKEN)).await;
    let mut ws = connect_owner(s.addr).await;
    assert_eq!(next_json(&mut ws).await["type"], "auth_ok");
    s.stop.take().unwrap().send(()).unwrap();
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(3)).await,
        Some(CloseCode::Away)
    );
    tokio::time::timeout(Duration::from_secs(5), s.handle)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn secure_input_endpoint_stores_once_and_never_echoes() {
    let s = start(Some(TOKEN)).await;
    s.vault.pending.lock().unwrap().push("ref_abc".into());
    let c = http_client();
    let url = |r: &str| format!("http://{}/secrets/{r}", s.addr);
    let canary = "ntn_CANARY_SECRET_VALUE";
    let r = c
        .post(url("ref_abc"))
        .bearer_auth(TOKEN)
        .json(&json!({"value": canary}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"stored": true})
    );
    assert!(!text.contains("CANARY"));
    assert_eq!(
        s.vault.stored.lock().unwrap()[0],
        ("ref_abc".to_string(), canary.len())
    );
    assert_eq!(
        c.post(url("ref_abc"))
            .bearer_auth(TOKEN)
            .json(&json!({"value": "x"}))
            .send()
            .await
            .unwrap()
            .status(),
        409
    );
    assert_eq!(
        c.post(url("ref_nope"))
            .bearer_auth(TOKEN)
            .json(&json!({"value": "x"}))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let cross = c
        .post(url("ref_abc"))
        .header("origin", "https://evil.example")
        .bearer_auth(TOKEN)
        .json(&json!({"value": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);
}

#[tokio::test]
async fn secure_input_requires_the_token_when_one_is_configured() {
    let s = start(Some("s3cret")).await;
    s.vault.pending.lock().unwrap().push("ref_1".into());
    let c = http_client();
    let url = format!("http://{}/secrets/ref_1", s.addr);
    assert_eq!(
        c.post(&url)
            .json(&json!({"value": "v"}))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let ok = c
        .post(&url)
        .bearer_auth("s3cret")
        .json(&json!({"value": "v"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

/// A plain-HTTP loopback client. When reqwest is built together with
/// netguard/llm it carries `rustls-no-provider`, whose `Client::new()`
/// panics unless a process crypto provider is installed: install ring first.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The session stream reads with a 4 KiB buffer (issue #19, lean
/// connections): a message many times that size still arrives whole, one
/// over the 64 KiB frame bound is still refused with 1009, and a request
/// that is not a WebSocket upgrade gets a 400 naming what is missing.
#[tokio::test]
async fn frames_larger_than_the_read_buffer_arrive_whole_and_the_bound_holds() {
    let s = start(Some(TOKEN)).await;
    let mut ws = connect_owner(s.addr).await;
    assert_eq!(next_json(&mut ws).await["type"], "auth_ok");
    let long = "x".repeat(60 * 1024);
    let frame = json!({"type": "message", "text": long}).to_string();
    assert!(frame.len() < silas_web::protocol::MAX_FRAME_BYTES);
    ws.send(Message::text(frame)).await.unwrap();
    let echo = next_json(&mut ws).await;
    assert_eq!(echo["text"], format!("echo: {long}"));

    let over = "y".repeat(silas_web::protocol::MAX_FRAME_BYTES + 1);
    ws.send(Message::text(over)).await.unwrap();
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(5)).await,
        Some(CloseCode::Size)
    );

    let plain = http_client()
        .get(format!("http://{}/ws", s.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 400);
    let body = plain.text().await.unwrap();
    assert!(body.contains("Connection: upgrade"), "{body}");
}

/// Sends `head` (a request whose body never comes whole) and reads what
/// the server answers, waiting at most `within`.
async fn stalled_body(addr: std::net::SocketAddr, head: String, within: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(within, s.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// A raw WebSocket as the owner (handshake by hand, so a test can write
/// frames no client library would): the stream past the 101.
async fn raw_owner_socket(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {OWNER_PROTOCOL}\r\n\r\n",
        addr.port()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.unwrap();
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s
}

/// The close code of the first close frame the server sends within 5 s,
/// skipping its other frames (`auth_ok`…); `None` for a close without one.
async fn raw_close_code(s: &mut tokio::net::TcpStream) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    let read = async {
        loop {
            let mut h = [0u8; 2];
            s.read_exact(&mut h).await.ok()?;
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from_be_bytes(b);
            }
            let mut payload = vec![0u8; usize::try_from(len).ok()?];
            s.read_exact(&mut payload).await.ok()?;
            if h[0] & 0x0f == 0x8 {
                return Some(payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]])));
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
        .flatten()
}

/// Frames that break the protocol end the session with the RFC 6455 code
/// that says why — 1002 for an unmasked client frame or reserved bits,
/// 1007 for a text frame that is not UTF-8 — not a close without a code.
#[tokio::test]
async fn protocol_violations_are_closed_with_their_code() {
    use tokio::io::AsyncWriteExt;
    let s = start(Some(TOKEN)).await;
    // (frame bytes, expected code): unmasked text "hi"; masked text with
    // RSV1 set; masked text of the bytes FF FE (zero mask).
    let cases: [(&[u8], u16); 3] = [
        (&[0x81, 0x02, b'h', b'i'], 1002),
        (&[0xC1, 0x82, 0, 0, 0, 0, b'h', b'i'], 1002),
        (&[0x81, 0x82, 0, 0, 0, 0, 0xFF, 0xFE], 1007),
    ];
    for (frame, want) in cases {
        let mut ws = raw_owner_socket(s.addr).await;
        ws.write_all(frame).await.unwrap();
        assert_eq!(raw_close_code(&mut ws).await, Some(want), "{frame:02x?}");
    }
}

/// A request head past 16 KB is refused with 431 before any route runs (it
/// was buffered up to hyper's ~400 KB default); an ordinary large head —
/// a browser's cookies — still gets through.
#[tokio::test]
async fn an_oversized_request_head_is_refused() {
    let s = start(Some(TOKEN)).await;
    let host = format!("127.0.0.1:{}", s.addr.port());
    let huge = stalled_body(
        s.addr,
        format!(
            "GET /health HTTP/1.1\r\nHost: {host}\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(100 * 1024)
        ),
        Duration::from_secs(5),
    )
    .await;
    assert!(huge.starts_with("HTTP/1.1 431"), "{huge:.200}");
    let ok = stalled_body(
        s.addr,
        format!(
            "GET /health HTTP/1.1\r\nHost: {host}\r\nCookie: {}\r\nConnection: close\r\n\r\n",
            "c".repeat(8 * 1024)
        ),
        Duration::from_secs(5),
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok:.200}");
    // The bound is on the head: a body near its own cap still arrives.
    s.vault.pending.lock().unwrap().push("ref_big".into());
    let big = "k".repeat(15 * 1024);
    let r = http_client()
        .post(format!("http://{}/secrets/ref_big", s.addr))
        .bearer_auth(TOKEN)
        .json(&json!({"value": big}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.vault.stored.lock().unwrap()[0],
        ("ref_big".to_string(), big.len())
    );
}

/// A request body that never comes whole is cut off like a slow header
/// (408 within about 10 s), and a stranger's secure-input request is
/// refused before its body is read at all. Held forever, 20,000 of these
/// used up the daemon's descriptors and locked the owner out. A body that
/// is not JSON, or too large, gets 400 / 413 (not 405).
#[tokio::test]
async fn a_request_body_that_never_comes_is_cut_off() {
    let s = start(Some(TOKEN)).await;
    let host = format!("127.0.0.1:{}", s.addr.port());
    let started = std::time::Instant::now();
    let pair = stalled_body(
        s.addr,
        format!(
            "POST /pair HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{{"
        ),
        Duration::from_secs(20),
    )
    .await;
    assert!(pair.starts_with("HTTP/1.1 408"), "{pair}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // No credential: refused at once, the body never waited for.
    let started = std::time::Instant::now();
    let secrets = stalled_body(
        s.addr,
        format!(
            "POST /secrets/ref_x HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{{"
        ),
        Duration::from_secs(5),
    )
    .await;
    assert!(secrets.starts_with("HTTP/1.1 401"), "{secrets}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let c = http_client();
    let url = format!("http://{}/pair", s.addr);
    let form = c.post(&url).body("code=x").send().await.unwrap();
    assert_eq!(form.status(), 400);
    let big = c
        .post(&url)
        .json(&json!({"code": "x".repeat(8 * 1024)}))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
}
