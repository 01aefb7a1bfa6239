//! Messages in from Telegram through the real daemon binary and a fake Bot
//! API (see `tests/telegram.rs` for the channel's other behaviours): with
//! several cards open, "approve" answers none of them — it took the newest,
//! which a chatbot customer can time to be their own request's card — and a
//! reply to one card answers that card; a text longer than Telegram allows
//! (only another server at `api_url` sends one) is not read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

// Shared with `tests/telegram.rs`, which uses the rest of it.
#[allow(dead_code, unused_imports)]
#[path = "telegram_kit/mod.rs"]
mod kit;

use std::time::Duration;

use kit::*;
use serde_json::json;
use silas_testkit::telegram::FakeBotApi;
use support::audit_events;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_cards_open_a_typed_answer_must_reply_to_one() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.push_update(message(1, OWNER, OWNER, 10, PLAN_REQUEST));
    let first = card(&bot, OWNER, Duration::from_secs(30))
        .await
        .message_id
        .unwrap();
    bot.push_update(message(
        2,
        OWNER,
        OWNER,
        11,
        "create a file later.txt containing bye",
    ));
    let second_card = wait_for(&bot, "a second card", Duration::from_secs(30), |calls| {
        calls
            .iter()
            .filter(|c| is(c, "sendMessage", OWNER) && !buttons(c).is_empty())
            .nth(1)
            .cloned()
    })
    .await;
    assert!(
        text_of(&second_card).contains("later"),
        "{}",
        second_card.body
    );
    let second = second_card.message_id.unwrap();

    // Plain "approve": neither card is answered; the owner is told how.
    bot.push_update(message(3, OWNER, OWNER, 12, "approve"));
    sent_text(
        &bot,
        OWNER,
        "2 cards are waiting here",
        Duration::from_secs(30),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(edits_of(&bot, first).is_empty(), "{}", dump(&bot.calls()));
    assert!(edits_of(&bot, second).is_empty(), "{}", dump(&bot.calls()));

    // "approve" as a reply to the first (older) card answers that card.
    bot.push_update(
        json!({"update_id": 4, "message": {"message_id": 13, "from": user(OWNER),
        "chat": chat(OWNER), "date": 1_700_000_000, "text": "approve",
        "reply_to_message": {"message_id": first, "chat": chat(OWNER), "date": 1_700_000_000}}}),
    );
    wait_for(
        &bot,
        "the first card edited",
        Duration::from_secs(30),
        |_| {
            edits_of(&bot, first)
                .into_iter()
                .find(|e| text_of(e).contains("Approved"))
        },
    )
    .await;
    work_ran(&bot, OWNER).await;
    assert!(edits_of(&bot, second).is_empty(), "{}", dump(&bot.calls()));

    // One card left: a plain typed answer goes to it.
    bot.push_update(message(5, OWNER, OWNER, 14, "no"));
    wait_for(
        &bot,
        "the second card edited",
        Duration::from_secs(30),
        |_| edits_of(&bot, second).into_iter().next(),
    )
    .await;

    daemon.stop().await;
    let events = audit_events(dir.path());
    let issued = with_event(&events, "approval.issued");
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert_eq!(count(&events, "work_dispatched"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_longer_than_telegram_allows_is_not_read() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    let long = format!("{}long-marker", "x".repeat(20_000));
    bot.push_update(message(1, OWNER, OWNER, 10, &long));
    sent_text(
        &bot,
        OWNER,
        "longer than Telegram allows",
        Duration::from_secs(30),
    )
    .await;
    // The next message is read as usual.
    bot.push_update(message(2, OWNER, OWNER, 11, "short-marker"));
    sent_text(&bot, OWNER, "Noted.", Duration::from_secs(30)).await;

    daemon.stop().await;
    let bodies: Vec<String> = llm.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(bodies.iter().any(|b| b.contains("short-marker")), "no turn");
    assert!(
        !bodies.iter().any(|b| b.contains("long-marker")),
        "the long text reached the model"
    );
    let events = audit_events(dir.path());
    let ignored = with_event(&events, "telegram.ignored");
    assert!(
        ignored.iter().any(|e| e["data"]["reason"] == "too_long"),
        "{ignored:?}"
    );
}

/// The daemon's own bot token pasted into the chat (a shape no secret
/// pattern knows: a test token, a self-hosted Bot API's) is redacted before
/// it is stored, deleted from the chat and never sent to the model: Silas
/// registers its configured secrets with the detector at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_own_token_pasted_in_a_chat_is_redacted() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    let text = format!("here is the bot token {TOKEN} remember-this-marker");
    bot.push_update(message(1, OWNER, OWNER, 42, &text));
    wait_for(&bot, "deleteMessage", Duration::from_secs(30), |calls| {
        calls.iter().find(|c| c.method == "deleteMessage").cloned()
    })
    .await;
    sent_text(&bot, OWNER, SECRET_NOTICE_PREFIX, Duration::from_secs(10)).await;
    sent_text(&bot, OWNER, "Noted.", Duration::from_secs(30)).await;

    daemon.stop().await;
    let bodies: Vec<String> = llm.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(
        bodies.iter().any(|b| b.contains("remember-this-marker")),
        "no turn"
    );
    assert!(
        !bodies.iter().any(|b| b.contains(TOKEN_SECRET)),
        "the token reached the model"
    );
    for file in walk(&dir.path().join("data")) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !contains_bytes(&bytes, TOKEN_SECRET),
            "the token is in {}",
            file.display()
        );
    }
}
