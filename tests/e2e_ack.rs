//! Reply acknowledgement (issue #19 item 6), over the real binary: a reply
//! carries its id (the inbox id it answers); one the client has not
//! acknowledged is sent again — same id — to the scope's next connection,
//! never twice on one connection, and not after its `ack`. An `ack` for
//! another conversation's reply, or for no reply at all, is refused with an
//! `E_CHANNEL_AUTH` error frame and changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{Daemon, Ws, next_frame_no_ack, send, silas, start_daemon};

const WITHIN: Duration = Duration::from_secs(15);
/// How long a connection is watched for a frame that must not come.
const QUIET: Duration = Duration::from_millis(1500);

async fn fake_model() -> FakeLlm {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(
        &json!({"route": "direct", "reason": "greeting",
            "response": {"message": "Hello!"}, "interaction_register": "status",
            "interaction_mode": "default_and_offer", "context_profile": "conversation"}),
    ));
    fake
}

/// `silas start` over `dir`, every agent on `fake`; `goal` makes it a
/// chatbot deployment (connections without a credential are customers).
fn start(dir: &std::path::Path, fake: &FakeLlm, goal: bool) -> (Daemon, String) {
    let yaml = format!(
        "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
    let mut cmd = silas(dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    if goal {
        let path = dir.join("goal.md");
        std::fs::write(&path, "customer support goal\n").unwrap();
        cmd.env("SILAS__ACTIVE_GOAL", &path);
    }
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    (daemon, addr)
}

/// The next reply (a `message` with an id) within `within`, read without
/// acknowledging it; other frames (activity, …) are skipped.
async fn next_reply(ws: &mut Ws, within: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame_no_ack(ws, left).await?;
        if f["type"] == "message" && f["id"].is_string() {
            return Some(f);
        }
    }
}

/// The next frame of type `kind` within `within` (other frames skipped;
/// an `error` while waiting for anything else fails the test).
async fn next_of(ws: &mut Ws, kind: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame_no_ack(ws, left)
            .await
            .unwrap_or_else(|| panic!("no {kind} frame"));
        if f["type"] == kind {
            return f;
        }
        assert_ne!(f["type"], "error", "{f}");
    }
}

/// The next `error` frame within `within` (other frames skipped).
async fn next_error(ws: &mut Ws, within: Duration) -> Value {
    next_of(ws, "error", within).await
}

/// Sends `ack` for `id`, then a probe the session refuses: the session
/// answers frames in order, so the next error frame is the ack's if it was
/// refused, and the probe's otherwise. Returns the ack's error, if any.
async fn ack(ws: &mut Ws, id: &str) -> Option<Value> {
    send(ws, json!({"type": "ack", "id": id})).await;
    send(
        ws,
        json!({"type": "approval_response", "request_id": "probe", "verdict": "declined"}),
    )
    .await;
    let e = next_error(ws, WITHIN).await;
    if e["request_id"] == "probe" {
        return None;
    }
    let probe = next_error(ws, WITHIN).await;
    assert_eq!(probe["request_id"], "probe", "{probe}");
    Some(e)
}

async fn connect(addr: &str) -> Ws {
    support::connect(addr, WITHIN).await.0
}

async fn say(ws: &mut Ws, text: &str) -> Value {
    send(ws, json!({"type": "message", "text": text})).await;
    next_reply(ws, WITHIN).await.expect("a reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_reply_is_sent_again_on_reconnect_and_not_after_its_ack() {
    let fake = fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path(), &fake, false);

    let mut ws = connect(&addr).await;
    let reply = say(&mut ws, "hello").await;
    let id = reply["id"].as_str().unwrap().to_string();
    assert_eq!(id, format!("{:020}", 0), "the inbox id it answers");
    assert_eq!(reply["text"], "Hello!");
    // An old client that never acks: once per connection, no loop.
    assert!(next_reply(&mut ws, QUIET).await.is_none());
    drop(ws);

    // Not acknowledged: the next connection gets it again, same id, once.
    for _ in 0..2 {
        let mut ws = connect(&addr).await;
        let again = next_reply(&mut ws, WITHIN).await.expect("sent again");
        assert_eq!(again["id"], id.as_str());
        assert_eq!(again["text"], "Hello!");
        assert!(next_reply(&mut ws, QUIET).await.is_none());
    }

    // Acknowledged: not sent again, on this connection or the next.
    let mut ws = connect(&addr).await;
    let again = next_reply(&mut ws, WITHIN).await.expect("sent again");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(ack(&mut ws, &id).await, None, "its own scope's ack");
    // Acknowledging it again (a client that lost track) is harmless.
    assert_eq!(ack(&mut ws, &id).await, None);
    drop(ws);
    let mut ws = connect(&addr).await;
    assert!(
        next_reply(&mut ws, QUIET).await.is_none(),
        "sent after its ack"
    );
    // A new reply gets its own id.
    let second = say(&mut ws, "hello again").await;
    assert_eq!(second["id"], format!("{:020}", 1));
    assert_eq!(ack(&mut ws, &format!("{:020}", 1)).await, None);
    drop(ws);
    daemon.stop().await;

    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    assert!(store.inbox().unacked_for_scope("owner").unwrap().is_empty());
    let r = store.inbox().get(&id).unwrap().unwrap();
    assert_eq!(r.stage, silas_storage::InboxStage::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_for_another_conversations_reply_or_none_is_refused_and_changes_nothing() {
    let fake = fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path(), &fake, true);

    let mut owner = connect(&addr).await;
    let owners = say(&mut owner, "hello").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    drop(owner);
    let (mut customer, auth) = support::connect_anonymous(&addr, WITHIN).await;
    assert_ne!(auth["scope_id"], "owner");
    // The owner's model setup is not a visitor's business.
    assert!(auth.get("model").is_none(), "{auth}");
    let customers = say(&mut customer, "hi there").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(customers, owners);

    // A customer (no owner credential) forging the owner's ack, or acking
    // an id that answers nothing: refused alike, typed.
    for forged in [owners.as_str(), "99999999999999999999", "../owner"] {
        let e = ack(&mut customer, forged).await.expect("refused");
        assert_eq!(e["code"], "E_CHANNEL_AUTH", "{e}");
        assert!(!e.to_string().contains("Hello"), "no content leaks: {e}");
    }
    // Its own reply: accepted (nothing waits: its scope cannot reconnect).
    assert_eq!(ack(&mut customer, &customers).await, None);
    // Another customer replaying that ack: refused.
    let (mut other, _) = support::connect_anonymous(&addr, WITHIN).await;
    let e = ack(&mut other, &customers).await.expect("refused");
    assert_eq!(e["code"], "E_CHANNEL_AUTH", "{e}");
    drop((customer, other));

    // Nothing changed: the owner's reply is still waiting and is sent again.
    let mut owner = connect(&addr).await;
    let again = next_reply(&mut owner, WITHIN).await.expect("still unacked");
    assert_eq!(again["id"], owners.as_str());
    // The owner cannot acknowledge a customer's reply either.
    let e = ack(&mut owner, &customers).await.expect("refused");
    assert_eq!(e["code"], "E_CHANNEL_AUTH", "{e}");
    drop(owner);
    daemon.stop().await;

    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    let waiting: Vec<String> = store
        .inbox()
        .unacked_for_scope("owner")
        .unwrap()
        .into_iter()
        .map(|r| r.inbox_id)
        .collect();
    assert_eq!(waiting, vec![owners]);
}

/// The `accepted` frame for the next message, within `within`.
async fn next_accepted(ws: &mut Ws, within: Duration) -> Value {
    next_of(ws, "accepted", within).await
}

/// A message sent again under its `client_id` — a web app resending what
/// it never saw `accepted` for, on the same or a new connection — is
/// recorded once and answered once; `accepted` echoes the id. In a chatbot
/// deployment the id is the visitor's own: another visitor (or a hostile
/// one guessing it) sending the same `client_id` gets a message of its own,
/// not the first visitor's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_resent_under_its_client_id_is_recorded_and_answered_once() {
    let fake = fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path(), &fake, true);

    let mut ws = connect(&addr).await;
    let frame = json!({"type": "message", "text": "hello", "client_id": "m-1"});
    send(&mut ws, frame.clone()).await;
    let first = next_accepted(&mut ws, WITHIN).await;
    assert_eq!(first["client_id"], "m-1", "{first}");
    let reply = next_reply(&mut ws, WITHIN).await.expect("a reply");
    assert_eq!(reply["id"], first["id"]);
    // Again on this connection, and again on a new one (the reconnect).
    send(&mut ws, frame.clone()).await;
    assert_eq!(next_accepted(&mut ws, WITHIN).await["id"], first["id"]);
    assert_eq!(ack(&mut ws, first["id"].as_str().unwrap()).await, None);
    drop(ws);
    let mut ws = connect(&addr).await;
    send(&mut ws, frame.clone()).await;
    assert_eq!(next_accepted(&mut ws, WITHIN).await["id"], first["id"]);
    assert!(next_reply(&mut ws, QUIET).await.is_none(), "answered twice");
    // Customers: the same client_id is theirs alone.
    let (mut a, _) = support::connect_anonymous(&addr, WITHIN).await;
    let (mut b, _) = support::connect_anonymous(&addr, WITHIN).await;
    send(&mut a, frame.clone()).await;
    let a_id = next_accepted(&mut a, WITHIN).await["id"].clone();
    send(&mut b, frame.clone()).await;
    let b_id = next_accepted(&mut b, WITHIN).await["id"].clone();
    assert_ne!(a_id, first["id"]);
    assert_ne!(a_id, b_id);
    assert_eq!(
        next_reply(&mut b, WITHIN).await.expect("b's reply")["id"],
        b_id
    );
    // A malformed id: a typed error, the connection kept.
    send(
        &mut ws,
        json!({"type": "message", "text": "x", "client_id": "a b"}),
    )
    .await;
    let e = next_error(&mut ws, WITHIN).await;
    assert_eq!(e["code"], "E_CHANNEL_PROTOCOL", "{e}");
    drop((ws, a, b));
    daemon.stop().await;

    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    let owners: Vec<_> = store.inbox().of_scope("owner").unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
}

/// A message sent again on a new connection while its turn is still
/// running (the first connection may be a dead socket not yet noticed — a
/// phone that changed networks) is answered there, not on the first; and a
/// resend is never refused: rate limits and queues are for new messages,
/// so a burst of resends is accepted, under the first id, and costs the
/// scope no allowance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_message_is_answered_where_it_was_sent_last_and_never_refused() {
    let fake = fake_model().await;
    fake.push(
        Reply::json(&json!({"route": "direct", "reason": "greeting",
            "response": {"message": "Slow hello."}, "interaction_register": "status",
            "interaction_mode": "default_and_offer", "context_profile": "conversation"}))
        .delayed(Duration::from_secs(3)),
    );
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path(), &fake, false);

    let frame = json!({"type": "message", "text": "take your time", "client_id": "slow-1"});
    let mut first = connect(&addr).await;
    send(&mut first, frame.clone()).await;
    let id = next_accepted(&mut first, WITHIN).await["id"].clone();
    // `first` stays open but never hears of it again (a half-open socket).
    let mut again = connect(&addr).await;
    send(&mut again, frame.clone()).await;
    assert_eq!(next_accepted(&mut again, WITHIN).await["id"], id);
    // A burst of resends, past the scope's 60 messages a minute: each
    // accepted as the same message, none refused.
    for _ in 0..70 {
        send(&mut again, frame.clone()).await;
    }
    for n in 0..70 {
        let f = next_of(&mut again, "accepted", WITHIN).await;
        assert_eq!(f["id"], id, "resend {n}: {f}");
    }
    let reply = next_reply(&mut again, WITHIN).await.expect("the reply");
    assert_eq!((&reply["id"], &reply["text"]), (&id, &json!("Slow hello.")));
    assert!(
        next_reply(&mut first, QUIET).await.is_none(),
        "answered on the connection it was sent from first"
    );
    // The resends used none of the scope's allowance.
    send(
        &mut again,
        json!({"type": "message", "text": "and now", "client_id": "fresh-1"}),
    )
    .await;
    let fresh = next_accepted(&mut again, WITHIN).await;
    assert_ne!(fresh["id"], id, "{fresh}");
    drop((first, again));
    daemon.stop().await;
    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    assert_eq!(store.inbox().of_scope("owner").unwrap().len(), 2);
}

/// A chatbot visitor learns nothing of anyone else's traffic from the ids it
/// is shown (red-team F7): inbox ids come from one counter over every
/// conversation, and a customer scope is named after its connection. So a
/// customer sees opaque aliases (`m-` + 16 hex digits) for its messages and
/// replies, a random scope id, and cannot probe the counter by acknowledging
/// raw ids — not even its own message's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatbot_customer_sees_no_counter_of_anyones_messages_or_visits() {
    let fake = fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path(), &fake, true);

    // The owner's message: the owner sees real ids (its audit log names them).
    let mut owner = connect(&addr).await;
    let owners = say(&mut owner, "hello").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(owners.bytes().all(|b| b.is_ascii_digit()), "{owners}");
    let first: u64 = owners.parse().unwrap();

    let is_alias = |s: &str| {
        s.len() == 18 && s.starts_with("m-") && s[2..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    let (mut a, auth_a) = support::connect_anonymous(&addr, WITHIN).await;
    let (b, auth_b) = support::connect_anonymous(&addr, WITHIN).await;
    // Scope ids: no visit counter in them, and no part shared by one run's
    // visitors (a per-start part told a visitor when the daemon restarted).
    let random_part = |auth: &serde_json::Value| {
        let scope = auth["scope_id"].as_str().unwrap().to_string();
        let tail = scope.strip_prefix("ws-").unwrap().to_string();
        assert!(
            tail.len() == 32 && tail.bytes().all(|c| c.is_ascii_hexdigit()),
            "{scope}"
        );
        tail
    };
    let (part_a, part_b) = (random_part(&auth_a), random_part(&auth_b));
    assert_ne!(part_a[..16], part_b[..16], "a per-start part");
    assert_ne!(part_a[16..], part_b[16..]);

    let mut seen = Vec::new();
    let mut aliases = Vec::new();
    for text in ["first question", "second question"] {
        send(
            &mut a,
            json!({"type": "message", "text": text, "client_id": format!("c-{}", text.len())}),
        )
        .await;
        let accepted = next_accepted(&mut a, WITHIN).await;
        let reply = next_reply(&mut a, WITHIN).await.expect("a reply");
        let id = accepted["id"].as_str().unwrap().to_string();
        assert!(is_alias(&id), "{accepted}");
        assert_eq!(
            reply["id"],
            id.as_str(),
            "a reply carries its message's alias"
        );
        seen.push(accepted.to_string());
        seen.push(reply.to_string());
        aliases.push(id);
    }
    assert_ne!(aliases[0], aliases[1]);
    // The visitor's own messages are the next two on the counter; it may
    // guess them, but an ack under a raw id — its own or the owner's — is
    // refused alike, so the guess is never confirmed.
    let own_raw = [first + 1, first + 2].map(|n| format!("{n:020}"));
    for raw in own_raw.iter().chain([&owners]) {
        for frame in &seen {
            assert!(!frame.contains(raw.as_str()), "{raw} shown: {frame}");
        }
        let e = ack(&mut a, raw).await.expect("refused");
        assert_eq!(e["code"], "E_CHANNEL_AUTH", "{e}");
        assert!(!e.to_string().contains(raw.as_str()), "{e}");
    }
    // Its aliases acknowledge its replies; another visitor's connection
    // does not know them.
    assert_eq!(ack(&mut a, &aliases[0]).await, None);
    let mut b = b;
    let e = ack(&mut b, &aliases[1]).await.expect("refused");
    assert_eq!(e["code"], "E_CHANNEL_AUTH", "{e}");
    // `/health` is public in a chatbot deployment: liveness only, unless
    // the owner's credential comes with it (the counts told a visitor when
    // the owner connected, how long the review queue is, which provider).
    let anonymous = health(&addr, None);
    assert_eq!(anonymous, json!({"status": "ok", "service": "silas"}));
    let wrong = health(&addr, Some("not-the-owner"));
    assert_eq!(wrong, anonymous);
    let owners_view = health(&addr, Some(&support::owner_token_for(&addr)));
    assert_eq!(owners_view["connections"], 3, "{owners_view}");
    assert!(owners_view["queue"].is_object(), "{owners_view}");
    let scope_a = auth_a["scope_id"].as_str().unwrap().to_string();
    drop((a, b, owner));
    daemon.stop().await;

    // The guesses were right: those raw ids are the visitor's messages.
    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    for raw in &own_raw {
        let r = store.inbox().get(raw).unwrap().expect("recorded");
        assert_eq!(r.message.scope_id, scope_a);
    }
    let acked = store.inbox().get(&own_raw[0]).unwrap().unwrap();
    assert_eq!(acked.stage, silas_storage::InboxStage::Delivered);
}

/// `GET /health` with the right `Host`, and `token` as the bearer.
fn health(addr: &str, token: Option<&str>) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let (a, b) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    serde_json::from_str(&body[a..=b]).unwrap()
}
