//! Helpers of `tests/telegram.rs` (kept apart to keep that file readable):
//! the daemon's config and start over a [`FakeBotApi`], Telegram update
//! builders, waiting on and reading the fake's recorded calls, and the audit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use silas_testkit::telegram::{BotCall, FakeBotApi};
use silas_testkit::{FakeLlm, Reply};

use crate::support::{Daemon, silas, start_daemon};

pub const TOKEN: &str = "123456:TEST-canary-token-value";
pub const TOKEN_SECRET: &str = "TEST-canary-token-value";
pub const OWNER: i64 = 1001;
pub const GROUP: i64 = -100500;
pub const STRANGER: i64 = 777;
pub const MEMBER: i64 = 2002;
pub const PLAN_REQUEST: &str = "create a file notes.txt containing hello";
/// What the bridge tells the owner after deleting a secret (inbound.rs).
pub const SECRET_NOTICE_PREFIX: &str = "I deleted your last message from this chat";

// ---------------------------------------------------------------- daemon

/// Where the owner is: their private chat, or a group with their user id.
#[derive(Clone, Copy)]
pub enum OwnerAt {
    Private,
    Group,
}

/// `{dir}/silas.yaml`: Telegram on the fake Bot API, and every agent on
/// `llm` when given (otherwise the offline responder).
pub fn write_config(dir: &Path, bot: &FakeBotApi, llm: Option<&FakeLlm>, at: OwnerAt) {
    let owner = match at {
        OwnerAt::Private => format!("owner_chat_id: \"{OWNER}\""),
        OwnerAt::Group => format!("owner_chat_id: \"{GROUP}\"\n      owner_user_id: \"{OWNER}\""),
    };
    let mut yaml = format!(
        "silas:\n  channels:\n    telegram:\n      enabled: true\n      token: \"{TOKEN}\"\n      {owner}\n      api_url: \"{}\"\n      max_approval_risk: medium\n    web:\n      port: 0\n",
        bot.api_url()
    );
    if let Some(llm) = llm {
        yaml.push_str(&format!(
            "  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
            llm.base_url()
        ));
    }
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
}

/// `silas start` with `{dir}/silas.yaml`; stderr to `{dir}/daemon.stderr`
/// (`SILAS_LOG=debug` when `debug`).
pub fn start(dir: &Path, debug: bool) -> (Daemon, String) {
    let mut cmd = silas(dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    if debug {
        cmd.env("SILAS_LOG", "debug");
    }
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr_path(dir))
        .unwrap();
    let (daemon, addr, _) = start_daemon(cmd, Stdio::from(stderr));
    (daemon, addr)
}

pub fn stderr_path(dir: &Path) -> PathBuf {
    dir.join("daemon.stderr")
}

pub fn read_stderr(dir: &Path) -> String {
    let mut s = String::new();
    std::fs::File::open(stderr_path(dir))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// A fake model whose every answer is the proxy replying `text` directly.
pub async fn direct_llm(text: &str, delay: Duration) -> FakeLlm {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_fallback(
        Reply::json(&json!({"route": "direct", "reason": "chat",
            "response": {"message": text}, "interaction_register": "status",
            "interaction_mode": "default_and_offer", "context_profile": "conversation"}))
        .delayed(delay),
    );
    llm
}

pub use crate::support::plan_replies;

// --------------------------------------------------------------- updates

pub fn chat(id: i64) -> Value {
    json!({"id": id, "type": if id > 0 { "private" } else { "group" }})
}

pub fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": format!("u{id}")})
}

/// A text message `message_id` from user `from` in chat `chat_id`.
pub fn message(update_id: u64, chat_id: i64, from: i64, message_id: i64, text: &str) -> Value {
    json!({"update_id": update_id, "message": {"message_id": message_id, "from": user(from),
        "chat": chat(chat_id), "date": 1_700_000_000, "text": text}})
}

/// A press of a button carrying `data` on message `message_id` in `chat_id`.
pub fn press(
    update_id: u64,
    query_id: &str,
    from: i64,
    chat_id: i64,
    message_id: i64,
    data: &str,
) -> Value {
    json!({"update_id": update_id, "callback_query": {"id": query_id, "from": user(from),
        "message": {"message_id": message_id, "chat": chat(chat_id), "date": 1_700_000_000},
        "chat_instance": "ci", "data": data}})
}

// ----------------------------------------------------------- bot calls

pub fn dump(calls: &[BotCall]) -> String {
    calls
        .iter()
        .map(|c| format!("{} {}", c.method, c.body))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls the fake's calls until `found` returns something (panics after
/// `within`, listing every call).
pub async fn wait_for<T>(
    bot: &FakeBotApi,
    what: &str,
    within: Duration,
    found: impl Fn(&[BotCall]) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let calls = bot.calls();
        if let Some(v) = found(&calls) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; calls:\n{}",
            dump(&calls)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn is(c: &BotCall, method: &str, chat_id: i64) -> bool {
    c.method == method && c.body["chat_id"] == chat_id
}

pub fn text_of(c: &BotCall) -> &str {
    c.body["text"].as_str().unwrap_or_default()
}

/// The messages sent to `chat_id` so far.
pub fn sent_to(bot: &FakeBotApi, chat_id: i64) -> Vec<BotCall> {
    bot.calls()
        .into_iter()
        .filter(|c| is(c, "sendMessage", chat_id))
        .collect()
}

/// The first message sent to `chat_id` whose text contains `needle`.
pub async fn sent_text(bot: &FakeBotApi, chat_id: i64, needle: &str, within: Duration) -> BotCall {
    wait_for(
        bot,
        &format!("a message to {chat_id} with {needle:?}"),
        within,
        |calls| {
            calls
                .iter()
                .find(|c| is(c, "sendMessage", chat_id) && text_of(c).contains(needle))
                .cloned()
        },
    )
    .await
}

pub fn buttons(c: &BotCall) -> Vec<Value> {
    c.body["reply_markup"]["inline_keyboard"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .flat_map(|r| r.as_array().cloned().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The first card (a message with an inline keyboard) sent to `chat_id`.
pub async fn card(bot: &FakeBotApi, chat_id: i64, within: Duration) -> BotCall {
    wait_for(bot, &format!("a card in {chat_id}"), within, |calls| {
        calls
            .iter()
            .find(|c| is(c, "sendMessage", chat_id) && !buttons(c).is_empty())
            .cloned()
    })
    .await
}

/// The callback data of the card's button labelled with `label`.
pub fn button_data(card: &BotCall, label: &str) -> String {
    buttons(card)
        .iter()
        .find(|b| b["text"].as_str().unwrap_or_default().contains(label))
        .and_then(|b| b["callback_data"].as_str())
        .unwrap_or_else(|| panic!("no {label:?} button: {}", card.body))
        .to_string()
}

/// The answer to the press `query_id`.
pub async fn answered(bot: &FakeBotApi, query_id: &str, within: Duration) -> BotCall {
    wait_for(
        bot,
        &format!("answerCallbackQuery {query_id}"),
        within,
        |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "answerCallbackQuery" && c.body["callback_query_id"] == query_id
                })
                .cloned()
        },
    )
    .await
}

/// The owner asks for a plan in the group; returns its card's message id
/// and the Approve button's data.
pub async fn group_plan_card(bot: &FakeBotApi) -> (i64, String) {
    bot.push_update(message(1, GROUP, OWNER, 10, PLAN_REQUEST));
    let card = card(bot, GROUP, Duration::from_secs(30)).await;
    (card.message_id.unwrap(), button_data(&card, "Approve"))
}

/// The owner presses Approve (`data`) on the card `card_id` in `chat_id`
/// (callback `query_id`): the press is answered "Approved".
pub async fn owner_approves(
    bot: &FakeBotApi,
    update_id: u64,
    query_id: &str,
    chat_id: i64,
    card_id: i64,
    data: &str,
) {
    bot.push_update(press(update_id, query_id, OWNER, chat_id, card_id, data));
    let ack = answered(bot, query_id, Duration::from_secs(30)).await;
    assert!(
        ack.body["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Approved"),
        "{}",
        ack.body
    );
}

/// Edits of message `message_id`.
pub fn edits_of(bot: &FakeBotApi, message_id: i64) -> Vec<BotCall> {
    bot.calls()
        .into_iter()
        .filter(|c| {
            c.method.starts_with("editMessage") && c.body["message_id"].as_i64() == Some(message_id)
        })
        .collect()
}

/// The work runs: its status message (`⏳ Running…`) appears in `chat_id`
/// and is edited to `✅ Done` with every check passed. Returns its id.
pub async fn work_ran(bot: &FakeBotApi, chat_id: i64) -> i64 {
    let status = sent_text(bot, chat_id, "⏳ Running", Duration::from_secs(60)).await;
    let id = status.message_id.unwrap();
    let done = wait_for(
        bot,
        "the status edited to done",
        Duration::from_secs(90),
        |_| {
            edits_of(bot, id).into_iter().find(|c| {
                let t = text_of(c);
                !t.starts_with("⏳")
            })
        },
    )
    .await;
    let text = text_of(&done);
    assert!(
        text.starts_with("✅ Done") && text.contains("passed") && !text.contains('✘'),
        "{text}"
    );
    id
}

// ----------------------------------------------------------------- audit

pub fn count(events: &[Value], event: &str) -> usize {
    events.iter().filter(|e| e["event"] == event).count()
}

pub fn with_event<'a>(events: &'a [Value], event: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == event).collect()
}

pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

pub fn contains_bytes(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}
