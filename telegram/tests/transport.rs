//! The Telegram transport end to end against a fake Bot API on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use silas_core::{Coded, ErrorCode};
use silas_storage::Store;
use silas_telegram::types::InlineKeyboardMarkup;
use silas_telegram::{
    Action, BotClient, BotToken, ChannelState, Delivery, HandleError, Handler, Outbox, Poller,
    PollerConfig, RetryPolicy, TelegramError, Text,
};
use silas_testkit::telegram::{BotReply, FakeBotApi};
use tokio::sync::{Mutex, watch};

const CANARY: &str = "987654:CANARY_tok-en";

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 5,
        base: Duration::from_millis(10),
        max: Duration::from_millis(50),
    }
}

fn client(fake: &FakeBotApi) -> BotClient {
    BotClient::new(&fake.api_url(), BotToken::new(CANARY).unwrap()).unwrap()
}

fn text_update(id: u64, chat: i64, text: &str) -> Value {
    json!({
        "update_id": id,
        "message": {
            "message_id": id as i64 + 500,
            "from": {"id": chat, "is_bot": false, "first_name": "O"},
            "chat": {"id": chat, "type": "private"},
            "date": 1_700_000_000,
            "text": text
        }
    })
}

/// Replies "echo: <text>" to every message and records what it saw.
#[derive(Default)]
struct Echo {
    seen: Mutex<Vec<(u64, u32)>>,
}

impl Handler for Echo {
    async fn handle(&self, d: &Delivery) -> Result<Vec<Action>, HandleError> {
        self.seen.lock().await.push((d.update.update_id, d.attempt));
        let Some(m) = &d.update.message else {
            return Ok(vec![]);
        };
        Ok(vec![Action::Send {
            chat_id: m.chat.id,
            text: Text::Plain(format!("echo: {}", m.text.clone().unwrap_or_default())),
            keyboard: None,
        }])
    }
}

fn poller<H: Handler>(fake: &FakeBotApi, store: &Store, handler: H) -> Poller<H> {
    let c = client(fake);
    Poller::new(
        c.clone(),
        store.telegram_updates(),
        Outbox::new(c, fast_retry()),
        handler,
        PollerConfig {
            long_poll_secs: 0,
            backoff: fast_retry(),
            max_attempts: 5,
            rejected_wait: Duration::from_millis(50),
        },
    )
}

#[tokio::test]
async fn updates_are_handled_in_order_and_the_offset_follows() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.push_update(text_update(100, 7, "one"))
        .push_update(text_update(101, 7, "two"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());

    p.step().await.unwrap();
    assert_eq!(*echo.seen.lock().await, vec![(100, 1), (101, 1)]);
    let sent: Vec<_> = fake
        .calls_to("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["echo: one", "echo: two"]);
    assert_eq!(store.telegram_updates().offset().unwrap(), 102);

    // The next poll confirms them; nothing is handled twice.
    p.step().await.unwrap();
    let polls = fake.calls_to("getUpdates");
    assert_eq!(polls.first().unwrap().body["offset"], 0);
    assert_eq!(polls.last().unwrap().body["offset"], 102);
    assert_eq!(echo.seen.lock().await.len(), 2);
    // Every request carried the token in its path (and only there).
    assert!(fake.calls().iter().all(|c| c.token == CANARY));
}

/// Signals when it starts handling, then never finishes: a crash mid-handling.
struct Hang {
    entered: Arc<AtomicUsize>,
}

impl Handler for Hang {
    async fn handle(&self, _: &Delivery) -> Result<Vec<Action>, HandleError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_crash_before_the_handled_mark_loses_nothing_and_redelivers_once() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.push_update(text_update(200, 7, "important"));
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open_in(dir.path()).unwrap();
        let entered = Arc::new(AtomicUsize::new(0));
        let p = poller(
            &fake,
            &store,
            Hang {
                entered: entered.clone(),
            },
        );
        let (_tx, rx) = watch::channel(false);
        let run = tokio::time::timeout(Duration::from_millis(500), p.run(rx)).await;
        assert!(run.is_err(), "the hanging handler cannot finish");
        assert_eq!(entered.load(Ordering::SeqCst), 1);
        // The "crash": the poller and the store are dropped mid-handling.
    }
    let store = Store::open_in(dir.path()).unwrap();
    assert_eq!(store.telegram_updates().offset().unwrap(), 0);
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());
    p.step().await.unwrap();
    p.step().await.unwrap();
    // Telegram re-sent it (offset never confirmed), the store had it pending:
    // still handled exactly once more, flagged as a redelivery.
    assert_eq!(*echo.seen.lock().await, vec![(200, 2)]);
    assert_eq!(fake.calls_to("sendMessage").len(), 1);
    assert_eq!(store.telegram_updates().offset().unwrap(), 201);
}

#[tokio::test]
async fn the_loop_backs_off_on_5xx_and_waits_retry_after_on_429() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.script(
        "getUpdates",
        BotReply::Raw {
            status: 502,
            body: "<html>Bad Gateway</html>".into(),
        },
    )
    .script("getUpdates", BotReply::RateLimited { retry_after: 1 })
    .push_update(text_update(300, 7, "after the storm"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());
    let health = p.health();
    assert_eq!(health.state(), ChannelState::Connecting);
    let (tx, rx) = watch::channel(false);
    let run = tokio::spawn(async move { p.run(rx).await });
    let mut states = Vec::new();
    for _ in 0..100 {
        states.push(health.state());
        if !echo.seen.lock().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tx.send(true).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(*echo.seen.lock().await, vec![(300, 1)]);
    // While it waited out the 429 (a second failure in a row), the channel
    // said so; once a poll worked, it is ok again.
    assert!(
        states.contains(&ChannelState::Failing {
            failures: 2,
            code: ErrorCode::EChannelRateLimited
        }),
        "{states:?}"
    );
    assert_eq!(health.state(), ChannelState::Ok);
    let polls = fake.calls_to("getUpdates");
    assert!(polls.len() >= 3, "{}", polls.len());
    // 502 → a short backoff; 429 → at least retry_after (1 s).
    let after_502 = polls[1].at - polls[0].at;
    let after_429 = polls[2].at - polls[1].at;
    assert!(after_502 < Duration::from_millis(900), "{after_502:?}");
    assert!(after_429 >= Duration::from_millis(1000), "{after_429:?}");
}

/// A rejected token (or a proxy's passing 404) pauses the channel rather
/// than ending it: once the Bot API accepts it again, messages flow without
/// a restart. The error never carries the token.
#[tokio::test]
async fn a_rejected_token_pauses_the_loop_and_it_recovers() {
    let fake = FakeBotApi::start().await.unwrap();
    for status in [401, 404] {
        fake.script(
            "getUpdates",
            BotReply::Error {
                status,
                description: format!("Unauthorized for {CANARY}"),
            },
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());
    let err = p.poll_once().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::EChannelAuth);
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("CANARY"), "{shown}");
    // Two more refusals: the loop stays paused for 50 + 100 + 200 ms.
    for _ in 0..2 {
        fake.script(
            "getUpdates",
            BotReply::Error {
                status: 401,
                description: "Unauthorized".into(),
            },
        );
    }
    fake.push_update(text_update(700, 7, "still there?"));
    let health = p.health();
    let (tx, rx) = watch::channel(false);
    let run = tokio::spawn(async move { p.run(rx).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut paused_seen = false;
    while echo.seen.lock().await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never recovered");
        paused_seen |= health.state() == ChannelState::TokenRejected;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.send(true).unwrap();
    assert!(run.await.unwrap().is_ok());
    // The pause was visible, and its description names the setting.
    assert!(paused_seen, "the rejected token never showed");
    assert!(
        ChannelState::TokenRejected
            .describe()
            .contains("channels.telegram.token")
    );
    assert_eq!(health.state(), ChannelState::Ok);
    // The 404 and the 401s were waited out too (50, 100, 200 ms).
    assert!(fake.calls_to("getUpdates").len() >= 5);
}

#[tokio::test]
async fn errors_never_carry_the_token() {
    let fake = FakeBotApi::start().await.unwrap();
    let c = client(&fake);
    fake.script(
        "getMe",
        BotReply::Raw {
            status: 502,
            body: format!("<html>upstream /bot{CANARY}/getMe failed</html>"),
        },
    )
    .script(
        "getMe",
        BotReply::Error {
            status: 400,
            description: format!("Bad Request: bot{CANARY}"),
        },
    )
    .script(
        "getMe",
        BotReply::Raw {
            status: 200,
            body: "not json".into(),
        },
    );
    let mut errs = Vec::new();
    for _ in 0..3 {
        errs.push(c.get_me().await.unwrap_err());
    }
    // A server that is not there: reqwest's error would name the URL.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gone = BotClient::new(&format!("http://{dead}"), BotToken::new(CANARY).unwrap()).unwrap();
    errs.push(gone.get_me().await.unwrap_err());
    assert!(matches!(errs[0], TelegramError::Server { status: 502, .. }));
    assert!(matches!(
        errs[1],
        TelegramError::Refused { status: 400, .. }
    ));
    assert!(matches!(errs[2], TelegramError::Decode { .. }));
    assert!(matches!(errs[3], TelegramError::Transport(_)));
    for e in &errs {
        let shown = format!("{e} | {e:?}");
        assert!(!shown.contains("CANARY"), "{shown}");
    }
    assert!(!format!("{c:?}").contains("CANARY"));
    // The good path works and sent the real token.
    assert_eq!(
        c.get_me().await.unwrap().username.as_deref(),
        Some("silas_bot")
    );
}

#[tokio::test]
async fn long_text_is_split_with_the_keyboard_on_the_last_piece() {
    let fake = FakeBotApi::start().await.unwrap();
    let out = Outbox::new(client(&fake), fast_retry());
    let line = "x".repeat(99);
    let text = vec![line; 100].join("\n"); // 9,999 units
    let kb: InlineKeyboardMarkup = serde_json::from_value(json!({
        "inline_keyboard": [[{"text": "OK", "callback_data": "a:b:c:d"}]]
    }))
    .unwrap();
    let sent = out.send(-42, &Text::Plain(text.clone()), Some(&kb)).await;
    let sent = sent.unwrap();
    assert_eq!(sent.len(), 3);
    let calls = fake.calls_to("sendMessage");
    let texts: Vec<&str> = calls
        .iter()
        .map(|c| c.body["text"].as_str().unwrap())
        .collect();
    assert!(texts.iter().all(|t| t.chars().count() <= 4096));
    assert_eq!(texts.join("\n"), text);
    assert!(
        calls[..2]
            .iter()
            .all(|c| c.body.get("reply_markup").is_none())
    );
    assert_eq!(
        calls[2].body["reply_markup"]["inline_keyboard"][0][0]["text"],
        "OK"
    );
    assert_eq!(calls[0].body["link_preview_options"]["is_disabled"], true);
    // One message per second in one chat.
    assert!(calls[1].at - calls[0].at >= Duration::from_millis(990));
}

#[tokio::test]
async fn edits_are_throttled_and_coalesced_to_the_latest_text() {
    let fake = FakeBotApi::start().await.unwrap();
    let out = Outbox::new(client(&fake), fast_retry());
    for step in ["working 1/3", "working 2/3", "working 3/3"] {
        out.edit(7, 55, &Text::Plain(step.into()), None)
            .await
            .unwrap();
    }
    assert_eq!(fake.calls_to("editMessageText").len(), 1);
    assert_eq!(out.flush_due().await.unwrap(), 0);
    let due = out.next_due().await.unwrap();
    tokio::time::sleep_until(due.into()).await;
    assert_eq!(out.flush_due().await.unwrap(), 1);
    let edits = fake.calls_to("editMessageText");
    let texts: Vec<_> = edits.iter().map(|c| c.body["text"].clone()).collect();
    assert_eq!(texts, [json!("working 1/3"), json!("working 3/3")]);
    assert!(edits[1].at - edits[0].at >= Duration::from_millis(490));
}

#[tokio::test]
async fn the_flusher_sends_the_coalesced_status_edit_by_itself() {
    let fake = FakeBotApi::start().await.unwrap();
    let out = Outbox::new(client(&fake), fast_retry());
    let (tx, rx) = watch::channel(false);
    let flusher = tokio::spawn(out.clone().run_flusher(rx));
    for i in 1..=10 {
        out.edit(7, 56, &Text::Plain(format!("step {i}")), None)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(900)).await;
    tx.send(true).unwrap();
    flusher.await.unwrap();
    let texts: Vec<_> = fake
        .calls_to("editMessageText")
        .iter()
        .map(|c| c.body["text"].clone())
        .collect();
    assert_eq!(texts, [json!("step 1"), json!("step 10")]);
}

#[tokio::test]
async fn a_work_status_updates_one_message() {
    let fake = FakeBotApi::start().await.unwrap();
    let out = Outbox::new(client(&fake), fast_retry());
    let mut ids = Vec::new();
    for i in 1..=5 {
        ids.push(
            out.status(7, "work-1", &format!("step {i}/5"))
                .await
                .unwrap(),
        );
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    assert_eq!(fake.calls_to("sendMessage").len(), 1);
    // The post counts as the first edit: the rest coalesce.
    assert!(fake.calls_to("editMessageText").is_empty());
    tokio::time::sleep_until(out.next_due().await.unwrap().into()).await;
    out.flush_due().await.unwrap();
    let edits = fake.calls_to("editMessageText");
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0].body["text"], "step 5/5");
    assert_eq!(edits[0].body["message_id"], ids[0]);
    // Once ended, the next status is a new message.
    assert_eq!(out.end_status(7, "work-1").await, Some(ids[0]));
    let next = out.status(7, "work-1", "again").await.unwrap();
    assert_ne!(next, ids[0]);
}

#[tokio::test]
async fn sends_retry_in_place_on_429_and_a_refused_reply_does_not_block_the_update() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.script("sendMessage", BotReply::RateLimited { retry_after: 1 });
    let out = Outbox::new(client(&fake), fast_retry());
    out.send(9, &Text::Plain("hi".into()), None).await.unwrap();
    let calls = fake.calls_to("sendMessage");
    assert_eq!(calls.len(), 2);
    assert!(calls[1].at - calls[0].at >= Duration::from_millis(1000));

    // 403 (the user blocked the bot): logged, the update still counts handled.
    fake.script(
        "sendMessage",
        BotReply::Error {
            status: 403,
            description: "Forbidden: bot was blocked by the user".into(),
        },
    )
    .push_update(text_update(400, 9, "x"))
    .push_update(json!({"update_id": 401, "message": "not a message"}));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());
    p.step().await.unwrap();
    // The undecodable 401 is stored as its id alone (nothing Silas cannot
    // read is kept), handed over empty, and not stuck.
    assert_eq!(*echo.seen.lock().await, vec![(400, 1), (401, 1)]);
    assert_eq!(store.telegram_updates().offset().unwrap(), 402);
}

/// After a quiet week Telegram restarts its ids at a random, lower number
/// and delivers them although the offset is above: the bot follows the new
/// sequence instead of going deaf (and confirms what it handled).
#[tokio::test]
async fn a_new_update_sequence_below_the_offset_is_heard() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.push_update(text_update(1_000_000_000, 7, "before the quiet week"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());
    p.step().await.unwrap();
    assert_eq!(store.telegram_updates().offset().unwrap(), 1_000_000_001);
    fake.restart_sequence(1_000_000_001)
        .push_update(text_update(500, 7, "after it"));
    p.step().await.unwrap();
    p.step().await.unwrap();
    assert_eq!(
        *echo.seen.lock().await,
        vec![(1_000_000_000, 1), (500, 1)],
        "the new sequence's first update was handled once"
    );
    assert_eq!(store.telegram_updates().offset().unwrap(), 501);
    assert_eq!(
        fake.calls_to("getUpdates").last().unwrap().body["offset"],
        501
    );
}

/// Answers "busy" (the queue is full) a number of times, then succeeds.
struct Busy {
    left: AtomicUsize,
    abandoned: std::sync::Mutex<Vec<(u64, u32)>>,
}

impl Handler for Busy {
    async fn handle(&self, _: &Delivery) -> Result<Vec<Action>, HandleError> {
        if self.left.load(Ordering::SeqCst) > 0 {
            self.left.fetch_sub(1, Ordering::SeqCst);
            return Err(HandleError {
                code: silas_telegram::poller::BUSY,
                message: "busy".into(),
                retry: true,
            });
        }
        Ok(vec![])
    }

    fn abandoned(&self, update_id: u64, attempts: u32) {
        self.abandoned.lock().unwrap().push((update_id, attempts));
    }
}

/// A full queue is waited out however long it lasts: the owner's message
/// is never given up as poisoned because the queue was busy.
#[tokio::test]
async fn a_busy_queue_never_makes_an_update_abandoned() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.push_update(text_update(600, 7, "a"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let busy = Arc::new(Busy {
        left: AtomicUsize::new(12),
        abandoned: Default::default(),
    });
    let p = poller(&fake, &store, busy.clone());
    for _ in 0..12 {
        assert!(p.step().await.is_err());
    }
    p.step().await.unwrap();
    assert!(busy.abandoned.lock().unwrap().is_empty());
    assert_eq!(store.telegram_updates().offset().unwrap(), 601);
}

/// Fails with "retry" a fixed number of times, then succeeds.
struct Flaky {
    failures_left: AtomicUsize,
    calls: AtomicUsize,
    abandoned: std::sync::Mutex<Vec<(u64, u32)>>,
}

impl Handler for Flaky {
    async fn handle(&self, _: &Delivery) -> Result<Vec<Action>, HandleError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failures_left.load(Ordering::SeqCst) > 0 {
            self.failures_left.fetch_sub(1, Ordering::SeqCst);
            return Err(HandleError {
                code: ErrorCode::EDbIo,
                message: "store busy".into(),
                retry: true,
            });
        }
        Ok(vec![])
    }

    fn abandoned(&self, update_id: u64, attempts: u32) {
        self.abandoned.lock().unwrap().push((update_id, attempts));
    }
}

#[tokio::test]
async fn a_retrying_handler_keeps_the_update_pending_and_poison_is_bounded() {
    let fake = FakeBotApi::start().await.unwrap();
    fake.push_update(text_update(500, 7, "a"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let flaky = Arc::new(Flaky {
        failures_left: AtomicUsize::new(100),
        calls: AtomicUsize::new(0),
        abandoned: Default::default(),
    });
    let p = poller(&fake, &store, flaky.clone());
    let err = p.step().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::EDbIo);
    assert_eq!(store.telegram_updates().offset().unwrap(), 0);
    // After max_attempts the update is abandoned rather than wedging the chat.
    for _ in 0..4 {
        assert!(p.step().await.is_err());
    }
    assert!(flaky.abandoned.lock().unwrap().is_empty());
    p.step().await.unwrap();
    assert_eq!(store.telegram_updates().offset().unwrap(), 501);
    // The handler hears of it (the daemon audits `telegram.update_abandoned`).
    assert_eq!(*flaky.abandoned.lock().unwrap(), vec![(500, 6)]);
}

#[tokio::test]
async fn an_oversized_answer_is_refused_unread_and_edits_are_asked_for() {
    let fake = FakeBotApi::start().await.unwrap();
    let c = client(&fake);
    // 9 MiB of body: past the bound, refused rather than read whole.
    fake.script(
        "getMe",
        BotReply::Raw {
            status: 200,
            body: "x".repeat(9 * 1024 * 1024),
        },
    );
    match c.get_me().await {
        Err(TelegramError::Decode { detail, .. }) => {
            assert!(detail.contains("larger than"), "{detail}");
            assert!(!detail.contains(CANARY));
        }
        other => panic!("{other:?}"),
    }
    // An edited message reaches the bridge (a secret pasted by an edit is
    // deleted from the chat like a new one), so getUpdates asks for it.
    c.get_updates(0, 0).await.unwrap();
    let polls = fake.calls_to("getUpdates");
    let allowed = polls[0].body["allowed_updates"].as_array().unwrap();
    assert!(allowed.contains(&json!("edited_message")), "{allowed:?}");
}

/// One message with a lone UTF-16 surrogate (valid JSON, but no Rust
/// string) used to fail the whole `getUpdates` answer on every poll, so no
/// chat was heard again.
#[tokio::test]
async fn a_lone_surrogate_in_one_update_does_not_stop_the_batch() {
    let fake = FakeBotApi::start().await.unwrap();
    let body = r#"{"ok":true,"result":[
        {"update_id":100,"message":{"message_id":600,"from":{"id":7,"is_bot":false,"first_name":"O"},
         "chat":{"id":7,"type":"private"},"date":1700000000,"text":"broken \ud83d here"}},
        {"update_id":101,"message":{"message_id":601,"from":{"id":7,"is_bot":false,"first_name":"O"},
         "chat":{"id":7,"type":"private"},"date":1700000000,"text":"fine \ud83d\ude00"}}]}"#;
    fake.script(
        "getUpdates",
        BotReply::Raw {
            status: 200,
            body: body.into(),
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let echo = Arc::new(Echo::default());
    let p = poller(&fake, &store, echo.clone());

    p.step().await.unwrap();
    assert_eq!(*echo.seen.lock().await, vec![(100, 1), (101, 1)]);
    let sent: Vec<_> = fake
        .calls_to("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["echo: broken \u{fffd} here", "echo: fine 😀"]);
    assert_eq!(store.telegram_updates().offset().unwrap(), 101 + 1);
}
