//! One WebSocket client of the daemon: connect (as the owner or as a
//! chatbot customer), send a chat message, read the chat frames that answer,
//! acknowledge each reply by id as the web app does (issue #19 item 6).

use std::collections::HashSet;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::BenchError;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The server frames the bench reads; every other kind (activity, progress,
/// work status, cards) is `Other`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    AuthOk {
        #[serde(default)]
        scope_id: String,
    },
    Message {
        /// The reply's id (absent on notices, which are not acknowledged).
        #[serde(default)]
        id: Option<String>,
    },
    Error {
        #[serde(default)]
        code: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// The client frames the bench sends.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame<'a> {
    Message { text: &'a str },
    Ack { id: &'a str },
}

impl ClientFrame<'_> {
    pub fn to_message(&self) -> Result<Message, BenchError> {
        serde_json::to_string(self)
            .map(Message::text)
            .map_err(|e| BenchError::new(format!("encode: {e}")))
    }
}

/// A frame that answers a chat message.
#[derive(Clone, Debug, PartialEq)]
pub enum Chat {
    /// The assistant's reply, with its id when it has one.
    Reply { id: Option<String> },
    /// A typed refusal (backpressure, rate limit, …) with its code.
    Refused(String),
}

/// What one server frame is, for the bench.
pub fn classify(frame: ServerFrame) -> Option<Chat> {
    match frame {
        ServerFrame::Message { id } => Some(Chat::Reply { id }),
        ServerFrame::Error { code } => {
            Some(Chat::Refused(code.unwrap_or_else(|| "unknown".to_string())))
        }
        ServerFrame::AuthOk { .. } | ServerFrame::Other => None,
    }
}

/// A text frame's chat meaning; `None` for anything else (or not JSON).
pub fn classify_text(text: &str) -> Option<Chat> {
    serde_json::from_str(text).ok().and_then(classify)
}

/// Reply ids one connection has seen. A reply sent again under an id
/// already seen (a redelivery) is a duplicate: not counted as an answer and
/// not acknowledged twice.
#[derive(Debug, Default)]
pub struct Seen(HashSet<String>);

impl Seen {
    /// Whether this reply is new here: `true` the first time an id is seen,
    /// and for a reply without an id (nothing to tell it apart by).
    pub fn first(&mut self, id: Option<&str>) -> bool {
        match id {
            Some(id) => self.0.insert(id.to_string()),
            None => true,
        }
    }
}

/// Opens `ws://{addr}/ws`, presenting `token` as `bearer.<token>` when given
/// (the owner), and waits ≤ `within` for `auth_ok`: the socket and its scope.
pub async fn connect(
    addr: &str,
    token: Option<&str>,
    within: Duration,
) -> Result<(Ws, String), BenchError> {
    let mut req = format!("ws://{addr}/ws")
        .into_client_request()
        .map_err(|e| BenchError::new(format!("request: {e}")))?;
    if let Some(t) = token {
        let v = HeaderValue::from_str(&format!("silas.v1, bearer.{t}"))
            .map_err(|e| BenchError::new(format!("credential header: {e}")))?;
        req.headers_mut().insert("sec-websocket-protocol", v);
    }
    // No Nagle: the ack and the next submit are two small frames written
    // back to back, and Nagle would hold the second until the daemon's
    // delayed ACK (40 ms), timing the TCP stack instead of the turn.
    let connect = tokio_tungstenite::connect_async_with_config(req, None, true);
    let (mut ws, _) = tokio::time::timeout(within, connect)
        .await
        .map_err(|_| BenchError::new("connect timed out"))?
        .map_err(|e| BenchError::new(format!("connect: {e}")))?;
    match next_frame(&mut ws, within).await {
        Some(ServerFrame::AuthOk { scope_id }) => Ok((ws, scope_id)),
        Some(other) => Err(BenchError::new(format!("not authenticated: {other:?}"))),
        None => Err(BenchError::new("no auth frame")),
    }
}

/// The next JSON text frame within `within`; `None` on timeout or close.
pub async fn next_frame(ws: &mut Ws, within: Duration) -> Option<ServerFrame> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                if let Ok(v) = serde_json::from_str(&t) {
                    return Some(v);
                }
            }
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// The next chat frame within `within`, skipping the rest.
pub async fn next_chat(ws: &mut Ws, within: Duration) -> Option<Chat> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame(ws, left).await?;
        if let Some(c) = classify(f) {
            return Some(c);
        }
    }
}

pub async fn send_message(ws: &mut Ws, text: &str) -> Result<(), BenchError> {
    send(ws, &ClientFrame::Message { text }).await
}

/// Acknowledges the reply `id`: the daemon does not send it again.
pub async fn send_ack(ws: &mut Ws, id: &str) -> Result<(), BenchError> {
    send(ws, &ClientFrame::Ack { id }).await
}

async fn send(ws: &mut Ws, frame: &ClientFrame<'_>) -> Result<(), BenchError> {
    ws.send(frame.to_message()?)
        .await
        .map_err(|e| BenchError::new(format!("send: {e}")))
}

/// Chat frames that still arrive within `within` (replies nobody asked
/// for are duplicates).
pub async fn drain_chat(ws: &mut Ws, within: Duration) -> Vec<Chat> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_chat(ws, left).await {
            Some(c) => out.push(c),
            None => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_and_refusals_are_told_apart_from_other_frames() {
        assert_eq!(
            classify_text(r#"{"type":"message","text":"Hello!","id":"00000000000000000003"}"#),
            Some(Chat::Reply {
                id: Some("00000000000000000003".into())
            })
        );
        assert_eq!(
            classify_text(r#"{"type":"message","text":"a notice"}"#),
            Some(Chat::Reply { id: None })
        );
        assert_eq!(
            classify_text(r#"{"type":"error","code":"E_CHANNEL_BACKPRESSURE"}"#),
            Some(Chat::Refused("E_CHANNEL_BACKPRESSURE".into()))
        );
        assert_eq!(classify_text(r#"{"type":"activity","items":[]}"#), None);
        assert_eq!(classify_text(r#"{"type":"progress"}"#), None);
        assert_eq!(classify_text(r#"{"no":"type"}"#), None);
    }

    #[test]
    fn an_id_is_new_once_and_a_reply_without_one_always() {
        let mut seen = Seen::default();
        assert!(seen.first(Some("1")));
        assert!(!seen.first(Some("1")));
        assert!(seen.first(Some("2")));
        assert!(seen.first(None));
        assert!(seen.first(None));
    }

    #[test]
    fn an_ack_is_the_frame_the_daemon_reads() {
        let Message::Text(t) = (ClientFrame::Ack { id: "7" }).to_message().unwrap() else {
            panic!("a text frame");
        };
        assert_eq!(t.as_str(), r#"{"type":"ack","id":"7"}"#);
    }
}
