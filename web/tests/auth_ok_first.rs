//! `auth_ok` is the first frame a client reads (the race chaos found): a
//! backend may queue frames for a connection as soon as it is registered —
//! a redelivered reply in `connected`, a work status broadcast to the scope
//! meanwhile, the Activity timeline in `ready` — and none may overtake the
//! handshake's answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use silas_web::protocol::{ClientFrame, ProtocolError, ServerFrame};
use silas_web::ws::{BoxFuture, ConnectionInfo, SecretSink, SecretStoreError, WebBackend};
use silas_web::{HealthState, WebSettings, bind};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const OWNER_PROTOCOL: &str = "silas.v1, bearer.s3cret";
const ROUNDS: usize = 40;

fn work_status() -> ServerFrame {
    ServerFrame::WorkStatus {
        work_item_id: "w1".into(),
        status: "running".into(),
        summary: "busy".into(),
        verification: json!([]),
    }
}

/// Sends frames to every connection of the scope the moment it can: in
/// `connected` (before the session could have written anything), from a
/// broadcaster running throughout, and in `ready`.
#[derive(Default)]
struct Eager {
    scope: Mutex<Vec<mpsc::Sender<ServerFrame>>>,
    by_id: Mutex<Vec<(String, mpsc::Sender<ServerFrame>)>>,
}

impl WebBackend for Eager {
    fn connected(
        &self,
        c: ConnectionInfo,
        tx: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        // A reply the scope has not acknowledged yet, sent again at once.
        let _ = tx.try_send(ServerFrame::Message {
            text: "Hello!".into(),
            sender: "silas".into(),
            timestamp: "t".into(),
            id: Some(format!("{:020}", 0)),
        });
        let _ = tx.try_send(work_status());
        self.scope.lock().unwrap().push(tx.clone());
        self.by_id.lock().unwrap().push((c.connection_id, tx));
        Box::pin(async { Ok("owner".to_string()) })
    }
    fn frame(&self, _id: &str, _frame: ClientFrame) -> BoxFuture<'_, Result<(), ProtocolError>> {
        Box::pin(async { Ok(()) })
    }
    fn disconnected(&self, id: &str) -> BoxFuture<'_, ()> {
        let mut by_id = self.by_id.lock().unwrap();
        if let Some(i) = by_id.iter().position(|(c, _)| c == id) {
            let (_, tx) = by_id.remove(i);
            self.scope.lock().unwrap().retain(|t| !t.same_channel(&tx));
        }
        Box::pin(async {})
    }
    fn ready(&self, id: &str) -> BoxFuture<'_, ()> {
        let tx = self
            .by_id
            .lock()
            .unwrap()
            .iter()
            .find(|(c, _)| c == id)
            .map(|(_, t)| t.clone());
        Box::pin(async move {
            if let Some(tx) = tx {
                let _ = tx
                    .send(ServerFrame::Activity {
                        items: Vec::new(),
                        initial: true,
                    })
                    .await;
            }
        })
    }
}

struct NoSecrets;

impl SecretSink for NoSecrets {
    fn store(&self, _: &str, _: zeroize::Zeroizing<String>) -> Result<(), SecretStoreError> {
        Err(SecretStoreError::UnknownRef)
    }
}

async fn first_frame(addr: std::net::SocketAddr) -> Value {
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", OWNER_PROTOCOL.parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_ok_is_the_first_frame_even_with_frames_queued_for_the_scope() {
    let settings = WebSettings {
        host: "127.0.0.1".into(),
        port: 0,
        auth_token: Some("s3cret".into()),
    };
    let backend = Arc::new(Eager::default());
    let bound = bind(&settings, Arc::new(HealthState::default()))
        .await
        .unwrap()
        .attach(backend.clone(), Arc::new(NoSecrets));
    let addr = bound.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = bound.serve(async {
        let _ = stopped.await;
    });
    // A work status for the scope, again and again, while connections come.
    let broadcaster = {
        let backend = backend.clone();
        tokio::spawn(async move {
            loop {
                let targets = backend.scope.lock().unwrap().clone();
                for t in targets {
                    let _ = t.try_send(work_status());
                }
                tokio::task::yield_now().await;
            }
        })
    };

    for round in 0..ROUNDS {
        let first = first_frame(addr).await;
        assert_eq!(first["type"], "auth_ok", "round {round}: {first}");
        assert_eq!(first["scope_id"], "owner");
    }

    broadcaster.abort();
    let _ = stop.send(());
    let _ = server.await;
}
