//! The bench's clients acknowledge replies (issue #19 item 6), against a
//! fake daemon on loopback that records every frame it is sent.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

use super::{converse, pipeline};
use crate::client;

/// How the fake daemon answers the `n`-th message (0-based).
#[derive(Clone, Copy)]
enum Answer {
    /// A reply with id `n`.
    Reply,
    /// The reply, then the same reply again (a redelivery: same id).
    ReplyTwice,
    /// A backpressure refusal.
    Refuse,
}

fn reply(n: usize) -> Message {
    Message::text(
        json!({"type": "message", "text": "Hello!", "sender": "silas",
        "timestamp": "t", "id": format!("{n:020}")})
        .to_string(),
    )
}

/// A one-connection fake daemon: `auth_ok`, then each message answered per
/// `script`; returns every frame the client sent, in order, once it leaves.
async fn fake_daemon(script: fn(usize) -> Answer) -> (String, tokio::task::JoinHandle<Vec<Value>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        ws.send(Message::text(
            json!({"type": "auth_ok", "scope_id": "owner"}).to_string(),
        ))
        .await
        .unwrap();
        let mut got = Vec::new();
        let mut messages = 0;
        while let Some(Ok(m)) = ws.next().await {
            let Message::Text(t) = m else { continue };
            let frame: Value = serde_json::from_str(&t).unwrap();
            if frame["type"] == "message" {
                let n = messages;
                messages += 1;
                // Something that is no answer first: skipped, never acked.
                let _ = ws
                    .send(Message::text(
                        json!({"type": "activity", "items": []}).to_string(),
                    ))
                    .await;
                match script(n) {
                    Answer::Reply => {
                        let _ = ws.send(reply(n)).await;
                    }
                    Answer::ReplyTwice => {
                        let _ = ws.send(reply(n)).await;
                        let _ = ws.send(reply(n)).await;
                    }
                    Answer::Refuse => {
                        let _ = ws
                            .send(Message::text(
                                json!({"type": "error", "code": "E_CHANNEL_BACKPRESSURE"})
                                    .to_string(),
                            ))
                            .await;
                    }
                }
            }
            got.push(frame);
        }
        got
    });
    (addr, task)
}

fn acked(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["type"] == "ack")
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_conversation_acks_each_reply_once_after_it_and_counts_the_resend() {
    let (addr, server) = fake_daemon(|n| {
        if n == 0 {
            Answer::ReplyTwice
        } else {
            Answer::Reply
        }
    })
    .await;
    let (mut ws, _) = client::connect(&addr, None, Duration::from_secs(10))
        .await
        .unwrap();
    let t = converse(&mut ws, "test", 3).await;
    drop(ws);
    assert_eq!((t.sent, t.replies, t.lost), (3, 3, 0));
    assert_eq!(t.duplicated, 1, "the resend of reply 0");
    assert_eq!(t.latencies.len(), 3);

    let frames = server.await.unwrap();
    let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    // Each turn's reply acknowledged before the next turn: the ack follows
    // the reply it names, and the resend is not acknowledged again.
    assert_eq!(
        kinds,
        ["message", "ack", "message", "ack", "message", "ack"],
        "{frames:?}"
    );
    assert_eq!(acked(&frames), [0, 1, 2].map(|n| format!("{n:020}")));
}

#[tokio::test]
async fn a_pipelined_scope_acks_every_reply_it_counts_and_no_refusal() {
    let (addr, server) = fake_daemon(|n| match n % 4 {
        1 => Answer::ReplyTwice,
        3 => Answer::Refuse,
        _ => Answer::Reply,
    })
    .await;
    let (ws, _) = client::connect(&addr, None, Duration::from_secs(10))
        .await
        .unwrap();
    let p = pipeline(ws, 12, 4).await.unwrap();
    let t = p.tally;
    assert_eq!(
        (t.sent, t.replies, t.refused_total(), t.lost),
        (12, 9, 3, 0)
    );
    assert_eq!(t.duplicated, 3, "the resends of replies 1, 5 and 9");

    let frames = server.await.unwrap();
    let mut ids = acked(&frames);
    ids.sort();
    let expected: Vec<String> = (0..12)
        .filter(|n| n % 4 != 3)
        .map(|n| format!("{n:020}"))
        .collect();
    assert_eq!(ids, expected, "each counted reply acked once: {frames:?}");
}
