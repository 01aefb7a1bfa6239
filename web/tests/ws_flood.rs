//! A flood of sockets that upgrade and say nothing must not lock the owner
//! out (red-team finding): a header credential is checked before the
//! upgrade and needs none of the unauthenticated slots, which are capped per
//! address as well as in all; a throttled address is refused before the
//! upgrade; error frames quote a client's values only as a bounded prefix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use silas_web::auth::{
    FAILED_AUTH_LIMIT, MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_ADDRESS, OwnerAuth,
};
use silas_web::protocol::{ClientFrame, ProtocolError, ServerFrame};
use silas_web::ws::{BoxFuture, ConnectionInfo, WebBackend};
use silas_web::{HealthState, WebSettings, bind};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Echoes messages; answers every gate card as the daemon answers one it
/// does not know: `no pending card "<id>"`, carrying the id.
#[derive(Default)]
struct Owner {
    outbound: Mutex<Vec<mpsc::Sender<ServerFrame>>>,
}

impl WebBackend for Owner {
    fn connected(
        &self,
        _c: ConnectionInfo,
        tx: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        self.outbound.lock().unwrap().push(tx);
        Box::pin(async { Ok("owner".to_string()) })
    }
    fn frame(&self, _id: &str, frame: ClientFrame) -> BoxFuture<'_, Result<(), ProtocolError>> {
        let tx = self.outbound.lock().unwrap().last().cloned();
        Box::pin(async move {
            match frame {
                ClientFrame::GateResponse { request_id, .. } => Err(ProtocolError::new(
                    "E_CARD_UNKNOWN",
                    format!("no pending card {request_id:?}"),
                    Some(request_id),
                )),
                ClientFrame::Message { text, .. } => {
                    if let Some(tx) = tx {
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
                }
                _ => Ok(()),
            }
        })
    }
    fn disconnected(&self, _id: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

struct Server {
    addr: SocketAddr,
    auth: Arc<OwnerAuth>,
    /// A device credential, as `silas chat` and the web app present.
    device: String,
    _stop: oneshot::Sender<()>,
}

async fn start() -> Server {
    let auth = Arc::new(OwnerAuth::ephemeral(None));
    let (_, device) = auth.create_device("cli").unwrap();
    let settings = WebSettings {
        host: "127.0.0.1".into(),
        port: 0,
        auth_token: None,
    };
    let bound = bind(&settings, Arc::new(HealthState::default()))
        .await
        .unwrap()
        .attach(
            Arc::new(Owner::default()),
            Arc::new(silas_web::ws::NoSecrets),
        )
        .with_auth(auth.clone());
    let addr = bound.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    // Serves until `_stop` is dropped with the test.
    drop(bound.serve(async {
        let _ = rx.await;
    }));
    Server {
        addr,
        auth,
        device,
        _stop: tx,
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// The `/ws` handshake from loopback source address `from`, offering
/// `token` in the subprotocol header: the socket, or the refusal's status.
async fn handshake(from: &str, addr: SocketAddr, token: Option<&str>) -> Result<Ws, u16> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let stream = sock.connect(addr).await.unwrap();
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    if let Some(t) = token {
        req.headers_mut().insert(
            "sec-websocket-protocol",
            format!("silas.v1, bearer.{t}").parse().unwrap(),
        );
    }
    match tokio_tungstenite::client_async(req, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("handshake from {from} failed otherwise: {e}"),
    }
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

async fn close_code(ws: &mut Ws) -> Option<CloseCode> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Ok(Message::Close(frame)) => return frame.map(|f| f.code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// The owner's socket: `auth_ok`, then an answer to a message.
async fn owner_is_answered(ws: &mut Ws) {
    assert_eq!(next_json(ws).await["type"], "auth_ok");
    ws.send(Message::text(r#"{"type":"message","text":"hello"}"#))
        .await
        .unwrap();
    assert_eq!(next_json(ws).await["text"], "echo: hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_gets_in_while_silent_upgrades_hold_every_unauthenticated_slot() {
    let s = start().await;
    // Silent upgrades from as many addresses as it takes to hold them all
    // (each address may hold only its share).
    let mut silent = Vec::new();
    let per = MAX_UNAUTHENTICATED_PER_ADDRESS;
    for i in 0..MAX_UNAUTHENTICATED {
        let from = format!("127.0.1.{}", i / per + 1);
        silent.push(handshake(&from, s.addr, None).await.unwrap());
    }
    assert_eq!(s.auth.unauthenticated_open(), MAX_UNAUTHENTICATED);
    assert_eq!(
        handshake("127.0.2.1", s.addr, None).await.err(),
        Some(503),
        "one more waiting socket, from a fresh address"
    );

    // The owner's header credential needs no slot: answered, from loopback
    // and from an address whose share is full alike.
    for from in ["127.0.0.1", "127.0.1.1"] {
        let mut owner = handshake(from, s.addr, Some(&s.device)).await.unwrap();
        owner_is_answered(&mut owner).await;
    }
    // A wrong header credential takes none either: closed 4001 at once.
    let mut wrong = handshake("127.0.0.1", s.addr, Some(&"f".repeat(64)))
        .await
        .unwrap();
    assert_eq!(close_code(&mut wrong).await, Some(CloseCode::Library(4001)));
    assert_eq!(s.auth.unauthenticated_open(), MAX_UNAUTHENTICATED);

    drop(silent);
    for _ in 0..100 {
        if s.auth.unauthenticated_open() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        s.auth.unauthenticated_open(),
        0,
        "closed sockets keep slots"
    );

    // One address cannot take them all: its share, then 429. A fresh
    // server: the silent sockets that closed unauthenticated were failed
    // sign-ins, and every loopback address is one host to the throttle.
    let s = start().await;
    let mut mine = Vec::new();
    for _ in 0..per {
        mine.push(handshake("127.0.3.1", s.addr, None).await.unwrap());
    }
    assert_eq!(handshake("127.0.3.1", s.addr, None).await.err(), Some(429));
    // In-band authentication still works, and frees its slot.
    let mut inband = handshake("127.0.3.2", s.addr, None).await.unwrap();
    let auth = json!({"type": "auth", "token": s.device}).to_string();
    inband.send(Message::text(auth)).await.unwrap();
    owner_is_answered(&mut inband).await;
    assert_eq!(s.auth.unauthenticated_open(), per);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_address_is_refused_before_the_upgrade_and_takes_no_slot() {
    let s = start().await;
    let from = "127.0.4.1";
    for i in 0..FAILED_AUTH_LIMIT {
        let mut ws = handshake(from, s.addr, Some(&format!("{i:064x}")))
            .await
            .unwrap();
        assert_eq!(close_code(&mut ws).await, Some(CloseCode::Library(4001)));
    }
    // Locked out: no upgrade, with or without a (wrong) credential.
    assert_eq!(handshake(from, s.addr, None).await.err(), Some(429));
    assert_eq!(
        handshake(from, s.addr, Some(&"e".repeat(64))).await.err(),
        Some(429)
    );
    assert_eq!(s.auth.unauthenticated_open(), 0);
    // The owner's device credential still passes from there. Every
    // loopback address is this one local host to the throttle (red-team
    // F5: rotating through 127/8 made each guess budget one of millions).
    let mut owner = handshake(from, s.addr, Some(&s.device)).await.unwrap();
    owner_is_answered(&mut owner).await;
    assert_eq!(handshake("127.0.4.2", s.addr, None).await.err(), Some(429));
    assert_eq!(s.auth.unauthenticated_open(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_frames_quote_client_values_only_as_a_bounded_prefix() {
    let s = start().await;
    let mut ws = handshake("127.0.0.1", s.addr, Some(&s.device))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "auth_ok");
    let long = "x".repeat(60 * 1024);
    let prefix = &long[..64];

    // Refused by the runtime: the card id comes back cut, in the message
    // and in `request_id`.
    let gate = json!({"type": "gate_response", "request_id": long, "verdict": "approve"});
    ws.send(Message::text(gate.to_string())).await.unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["message"], format!("no pending card \"{prefix}…\""));
    assert_eq!(e["request_id"], format!("{prefix}…"));

    // Refused by validation, and by the parser (an unknown type).
    let verdict =
        json!({"type": "autonomy_threshold_response", "request_id": "r1", "verdict": long});
    ws.send(Message::text(verdict.to_string())).await.unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["request_id"], "r1");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("got \"{prefix}…\"")),
        "{e}"
    );
    ws.send(Message::text(json!({"type": long}).to_string()))
        .await
        .unwrap();
    let e = next_json(&mut ws).await;
    let message = e["message"].as_str().unwrap();
    assert!(message.len() < 1024 && message.contains(prefix), "{e}");
}
