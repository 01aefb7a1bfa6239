//! One WebSocket client of the daemon: connect (as the owner or as a
//! chatbot customer), send a chat message, read the chat frames that answer.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::BenchError;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A frame that answers a chat message.
#[derive(Clone, Debug, PartialEq)]
pub enum Chat {
    /// The assistant's reply.
    Reply,
    /// A typed refusal (backpressure, rate limit, …) with its code.
    Refused(String),
}

/// What one server frame is, for the bench.
pub fn classify(frame: &Value) -> Option<Chat> {
    match frame["type"].as_str()? {
        "message" => Some(Chat::Reply),
        "error" => Some(Chat::Refused(
            frame["code"].as_str().unwrap_or("unknown").to_string(),
        )),
        // activity, progress, work status, cards: not an answer.
        _ => None,
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
    let (mut ws, _) = tokio::time::timeout(within, tokio_tungstenite::connect_async(req))
        .await
        .map_err(|_| BenchError::new("connect timed out"))?
        .map_err(|e| BenchError::new(format!("connect: {e}")))?;
    let auth = next_frame(&mut ws, within)
        .await
        .ok_or_else(|| BenchError::new("no auth frame"))?;
    if auth["type"] != "auth_ok" {
        return Err(BenchError::new(format!("not authenticated: {auth}")));
    }
    let scope = auth["scope_id"].as_str().unwrap_or_default().to_string();
    Ok((ws, scope))
}

/// The next JSON text frame within `within`; `None` on timeout or close.
pub async fn next_frame(ws: &mut Ws, within: Duration) -> Option<Value> {
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
        if let Some(c) = classify(&f) {
            return Some(c);
        }
    }
}

pub async fn send_message(ws: &mut Ws, text: &str) -> Result<(), BenchError> {
    let frame = json!({"type": "message", "text": text}).to_string();
    ws.send(Message::text(frame))
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
            classify(&json!({"type": "message", "text": "Hello!"})),
            Some(Chat::Reply)
        );
        assert_eq!(
            classify(&json!({"type": "error", "code": "E_CHANNEL_BACKPRESSURE"})),
            Some(Chat::Refused("E_CHANNEL_BACKPRESSURE".into()))
        );
        assert_eq!(classify(&json!({"type": "activity", "items": []})), None);
        assert_eq!(classify(&json!({"type": "progress"})), None);
        assert_eq!(classify(&json!({"no": "type"})), None);
    }
}
