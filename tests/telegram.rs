//! The Telegram channel through the real daemon binary (issue #14 "Shown
//! by"): `silas start` long-polls a fake Bot API on loopback
//! ([`FakeBotApi`]: queued updates, scripted failures, every call recorded)
//! and, where a test needs to script the model or read what it was sent,
//! talks to the fake OpenAI-compatible model ([`FakeLlm`]); otherwise the
//! offline rule-based responder plans "create a file NAME containing TEXT".
//!
//! Covered: an owner's message → plan card → Approve button → the work runs
//! (one status message, edited), the card edited to its outcome; strangers
//! refused once and never reaching the model; a replayed press; the owner's
//! private chat not read while a group is the owner chat; another member's
//! press in the owner's group (a stranger, or a chatbot customer); a high-risk card with no approving button; a pasted API key
//! deleted from the chat and absent from the model, the store and the log;
//! 502/429 on `getUpdates` losing nothing; a SIGKILL mid-turn handled
//! exactly once after restart; the bot token absent from the debug log and
//! the audit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

#[path = "telegram_kit/mod.rs"]
mod kit;

use std::time::{Duration, Instant};

use kit::*;
use serde_json::Value;
use silas_testkit::telegram::{BotReply, FakeBotApi};
use support::audit_events;

// ----------------------------------------------------------------- tests

/// 1. Owner message → plan card with Approve → press → the work runs; the
///    card is edited to its outcome without buttons; the press is answered;
///    the token records that the owner approved in Telegram.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_approves_a_plan_card_and_the_work_runs() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.push_update(message(1, OWNER, OWNER, 10, PLAN_REQUEST));
    let card = card(&bot, OWNER, Duration::from_secs(30)).await;
    let card_id = card.message_id.unwrap();
    assert!(text_of(&card).contains("notes"), "{}", card.body);
    let approve = button_data(&card, "Approve");
    button_data(&card, "Decline");

    owner_approves(&bot, 2, "cb-approve", OWNER, card_id, &approve).await;
    let edited = wait_for(&bot, "the card edited", Duration::from_secs(10), |_| {
        edits_of(&bot, card_id).into_iter().next()
    })
    .await;
    assert_eq!(edited.method, "editMessageText");
    assert!(edited.body["reply_markup"].is_null(), "{}", edited.body);
    assert!(text_of(&edited).contains("Approved"), "{}", edited.body);
    let status = work_ran(&bot, OWNER).await;
    assert_ne!(status, card_id);
    // Every edit of the card says what happened here (the sweeper must not
    // take this answer's removal of the card for an answer elsewhere).
    for e in edits_of(&bot, card_id) {
        assert!(text_of(&e).contains("Approved"), "{}", e.body);
        assert!(e.body["reply_markup"].is_null(), "{}", e.body);
    }
    // One status message for the work item, edited rather than reposted.
    let posted = sent_to(&bot, OWNER)
        .into_iter()
        .filter(|c| text_of(c).starts_with("⏳") || text_of(c).starts_with("✅ Done"))
        .count();
    assert_eq!(posted, 1, "{}", dump(&bot.calls()));

    daemon.stop().await;
    let events = audit_events(dir.path());
    let issued = with_event(&events, "approval.issued");
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert_eq!(issued[0]["data"]["channel"], "telegram", "{}", issued[0]);
    assert_eq!(count(&events, "work_dispatched"), 1);
    support::assert_audit_verifies(dir.path());
}

/// 1b. A press that arrives before `sendMessage` has returned the card's
///     message id (a slow Bot API, a quick owner) is not refused as a stale
///     button: it waits for the render to be recorded and approves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_before_the_card_is_recorded_still_approves() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.delay("sendMessage", Duration::from_millis(1500));
    bot.push_update(message(1, OWNER, OWNER, 10, PLAN_REQUEST));
    // The card is seen as soon as it is sent; its reply is still held.
    let card = card(&bot, OWNER, Duration::from_secs(30)).await;
    let approve = button_data(&card, "Approve");
    owner_approves(
        &bot,
        2,
        "cb-early",
        OWNER,
        card.message_id.unwrap(),
        &approve,
    )
    .await;
    work_ran(&bot, OWNER).await;

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(count(&events, "work_dispatched"), 1);
    assert!(
        with_event(&events, "telegram.callback_refused").is_empty(),
        "{:?}",
        with_event(&events, "telegram.callback_refused")
    );
}

/// 2. A stranger gets one refusal, however often they write; each message
///    is audited as refused and none of their text reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_refused_once_and_never_reaches_the_model() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Hi owner.", Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.push_update(message(
        1,
        STRANGER,
        STRANGER,
        5,
        "stranger-words-one please run rm",
    ));
    let refusal = sent_text(
        &bot,
        STRANGER,
        "only answers its owner",
        Duration::from_secs(30),
    )
    .await;
    assert!(refusal.body["reply_markup"].is_null());
    bot.push_update(message(
        2,
        STRANGER,
        STRANGER,
        6,
        "stranger-words-two hello?",
    ));
    // Updates are handled in order: once the owner's reply is out, the
    // stranger's second message was handled too.
    bot.push_update(message(3, OWNER, OWNER, 7, "owner-words hello"));
    sent_text(&bot, OWNER, "Hi owner.", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sent_to(&bot, STRANGER).len(), 1, "{}", dump(&bot.calls()));

    daemon.stop().await;
    let bodies: Vec<String> = llm.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(
        bodies.iter().any(|b| b.contains("owner-words")),
        "the owner's turn ran"
    );
    assert!(
        !bodies.iter().any(|b| b.contains("stranger-words")),
        "a stranger's text reached the model"
    );
    let events = audit_events(dir.path());
    let refused = with_event(&events, "telegram.refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    for r in &refused {
        assert_eq!(r["data"]["chat_id"], STRANGER, "{r}");
        assert_eq!(r["data"]["what"], "message", "{r}");
    }
    let audit = support::audit_json(dir.path());
    assert!(
        !audit.contains("stranger-words"),
        "a stranger's text was audited"
    );
}

/// 3. The same button pressed twice (two updates, the same data): one
///    approval, one dispatch; the second press is answered as a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_press_runs_the_work_once() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.push_update(message(1, OWNER, OWNER, 10, PLAN_REQUEST));
    let card = card(&bot, OWNER, Duration::from_secs(30)).await;
    let card_id = card.message_id.unwrap();
    let approve = button_data(&card, "Approve");
    bot.push_update(press(2, "cb-first", OWNER, OWNER, card_id, &approve));
    bot.push_update(press(3, "cb-again", OWNER, OWNER, card_id, &approve));
    let again = answered(&bot, "cb-again", Duration::from_secs(30)).await;
    assert_eq!(again.body["text"], "Already answered.", "{}", again.body);
    work_ran(&bot, OWNER).await;
    // Nothing else starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let statuses = sent_to(&bot, OWNER)
        .into_iter()
        .filter(|c| text_of(c).starts_with("⏳"))
        .count();
    assert_eq!(statuses, 1, "{}", dump(&bot.calls()));

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(count(&events, "approval.issued"), 1);
    assert_eq!(count(&events, "work_dispatched"), 1);
    let refused = with_event(&events, "telegram.callback_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["data"]["reason"], "replayed", "{}", refused[0]);
}

/// 4. With a group as `owner_chat_id`, every owner reply goes to the group,
///    so the owner's private chat with the bot is not read: a message there
///    is told where the conversation is (once) and reaches no model, and the
///    group card's button pressed there approves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_group_configured_the_owners_private_chat_is_not_read() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Group);
    let (daemon, _) = start(dir.path(), false);

    let (card_id, approve) = group_plan_card(&bot).await;
    bot.push_update(message(
        2,
        OWNER,
        OWNER,
        11,
        "privately: my bank PIN reminder",
    ));
    sent_text(&bot, OWNER, "owner_chat_id", Duration::from_secs(30)).await;
    bot.push_update(press(3, "cb-private", OWNER, OWNER, card_id, &approve));
    answered(&bot, "cb-private", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(edits_of(&bot, card_id).is_empty(), "the card was answered");
    assert!(
        !bot.calls().iter().any(|c| text_of(c).starts_with("⏳")),
        "work started"
    );
    // Nothing of the private message was posted to the group.
    assert!(
        !bot.calls()
            .iter()
            .any(|c| is(c, "sendMessage", GROUP) && text_of(c).contains("PIN")),
        "{}",
        dump(&bot.calls())
    );

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(count(&events, "approval.issued"), 0);
    assert_eq!(count(&events, "work_dispatched"), 0);
    // Only the group message became a turn.
    assert_eq!(count(&events, "turn_completed"), 1, "{events:?}");
}

/// 4b. A chatbot goal makes each other member of the owner's group a
///    customer: their press on the owner's card and their typed "no" are
///    theirs, not answers — the card keeps its buttons and the owner's own
///    press then approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_in_the_owners_group_cannot_close_the_owners_card() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Group);
    let goal = dir.path().join("goal.md");
    std::fs::write(&goal, "answer questions about opening hours\n").unwrap();
    let mut yaml = std::fs::read_to_string(dir.path().join("silas.yaml")).unwrap();
    yaml.push_str(&format!("  active_goal: \"{}\"\n", goal.display()));
    std::fs::write(dir.path().join("silas.yaml"), yaml).unwrap();
    let (daemon, _) = start(dir.path(), false);

    let (card_id, approve) = group_plan_card(&bot).await;
    bot.push_update(press(2, "cb-member", MEMBER, GROUP, card_id, &approve));
    let ack = answered(&bot, "cb-member", Duration::from_secs(30)).await;
    assert_eq!(
        ack.body["text"], "This button is not for you.",
        "{}",
        ack.body
    );
    bot.push_update(message(3, GROUP, MEMBER, 12, "no"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        edits_of(&bot, card_id).is_empty(),
        "a customer closed the owner's card: {}",
        dump(&bot.calls())
    );

    owner_approves(&bot, 4, "cb-owner", GROUP, card_id, &approve).await;
    work_ran(&bot, GROUP).await;

    daemon.stop().await;
    let events = audit_events(dir.path());
    let refused = with_event(&events, "telegram.callback_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["data"]["reason"], "other_scope");
    assert_eq!(count(&events, "approval.issued"), 1);
}

/// 5. In the owner's group another member's press is refused and changes
///    nothing; the owner's own press on the same button then works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_owners_group_only_the_owner_can_press() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Group);
    let (daemon, _) = start(dir.path(), false);

    let (card_id, approve) = group_plan_card(&bot).await;
    bot.push_update(press(2, "cb-member", MEMBER, GROUP, card_id, &approve));
    let ack = answered(&bot, "cb-member", Duration::from_secs(30)).await;
    assert!(
        !ack.body["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Approved"),
        "{}",
        ack.body
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        edits_of(&bot, card_id).is_empty(),
        "a member answered the card"
    );
    assert!(!bot.calls().iter().any(|c| text_of(c).starts_with("⏳")));

    owner_approves(&bot, 3, "cb-owner", GROUP, card_id, &approve).await;
    work_ran(&bot, GROUP).await;

    daemon.stop().await;
    let events = audit_events(dir.path());
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| {
            (e["event"] == "telegram.refused" || e["event"] == "telegram.callback_refused")
                && e["data"]["user_id"] == MEMBER
        })
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let issued = with_event(&events, "approval.issued");
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert_eq!(issued[0]["data"]["channel"], "telegram");
}

/// 6. A plan above `max_approval_risk` (a scheduled goal: high): the card
///    has no approving button, a url button to the web app's Review (at
///    `channels.web.public_url`), and a typed "approve" is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_risk_card_links_to_the_web_app_instead_of_approving() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::ZERO).await;
    plan_replies(
        &llm,
        "g-watch",
        "goal",
        "schedule: \"@every 15s\"\nverify:\n  - name: ok\n    run: \"true\"\n    expect: {exit_code: 0}",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    // Where the owner's phone reaches the web app (Telegram refuses URL
    // buttons to a loopback address; without this the address is text).
    let config = dir.path().join("silas.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap().replace(
        "    web:\n      port: 0\n",
        "    web:\n      port: 0\n      public_url: \"https://silas.home.example/\"\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let (daemon, _addr) = start(dir.path(), false);

    bot.push_update(message(1, OWNER, OWNER, 10, "keep an eye on it"));
    let card = card(&bot, OWNER, Duration::from_secs(30)).await;
    let card_id = card.message_id.unwrap();
    assert!(text_of(&card).contains("high"), "{}", card.body);
    let all = buttons(&card);
    let url_buttons: Vec<&Value> = all.iter().filter(|b| b["url"].is_string()).collect();
    assert_eq!(url_buttons.len(), 1, "{}", card.body);
    let url = url_buttons[0]["url"].as_str().unwrap();
    assert_eq!(url, "https://silas.home.example/");
    for b in all.iter().filter(|b| b["callback_data"].is_string()) {
        let label = b["text"].as_str().unwrap();
        assert!(!label.contains("Approve"), "an approving button: {b}");
        // The action is the data's first field ("ok" approves).
        assert!(
            !b["callback_data"].as_str().unwrap().starts_with("ok:"),
            "an approving button: {b}"
        );
    }
    let decline = button_data(&card, "Decline");

    // The declining button's data turned into an approval fails its MAC.
    let forged = decline.replacen("no:", "ok:", 1);
    bot.push_update(press(2, "cb-forged", OWNER, OWNER, card_id, &forged));
    answered(&bot, "cb-forged", Duration::from_secs(30)).await;
    // Typing the answer cannot approve it either.
    bot.push_update(message(3, OWNER, OWNER, 11, "approve"));
    sent_text(&bot, OWNER, "web app's Review", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(edits_of(&bot, card_id).is_empty(), "the card was answered");

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(count(&events, "approval.issued"), 0);
    assert_eq!(count(&events, "telegram.approval_refused_risk"), 1);
    let refused = with_event(&events, "telegram.callback_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["data"]["reason"], "bad_mac");
}

/// 7. A pasted API key: the message is deleted from the chat, the owner is
///    told, and the key reaches no model request, no file under the data
///    dir (the redb store included) and no line of the debug log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_api_key_is_deleted_and_stored_nowhere() {
    const KEY: &str = "sk-ant-api03-Qw7Er4Ty1Ui8Op5As2Df9Gh6Jk3Lz0Xc7Vb4Nm1Qa8Ws5Ed2Rf9Tg6";
    const KEY_TAIL: &str = "Qw7Er4Ty1Ui8Op5As2Df9Gh6Jk3Lz0Xc7Vb4Nm1Qa8Ws5Ed2Rf9Tg6";
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (daemon, _) = start(dir.path(), true);

    let text = format!("here is my key {KEY} remember-this-marker");
    bot.push_update(message(1, OWNER, OWNER, 42, &text));
    let deleted = wait_for(&bot, "deleteMessage", Duration::from_secs(30), |calls| {
        calls.iter().find(|c| c.method == "deleteMessage").cloned()
    })
    .await;
    assert_eq!(deleted.body["chat_id"], OWNER);
    assert_eq!(deleted.body["message_id"], 42);
    sent_text(&bot, OWNER, SECRET_NOTICE_PREFIX, Duration::from_secs(10)).await;
    // The rest of the message still makes a turn.
    sent_text(&bot, OWNER, "Noted.", Duration::from_secs(30)).await;

    daemon.stop().await;
    let bodies: Vec<String> = llm.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(
        bodies.iter().any(|b| b.contains("remember-this-marker")),
        "no turn"
    );
    assert!(
        !bodies.iter().any(|b| b.contains(KEY_TAIL)),
        "the key reached the model"
    );
    for c in bot.calls().iter().filter(|c| c.method != "getUpdates") {
        assert!(
            !c.body.to_string().contains(KEY_TAIL),
            "echoed to the chat: {}",
            c.body
        );
    }
    let log = read_stderr(dir.path());
    assert!(!log.is_empty(), "no daemon log captured");
    assert!(!log.contains(KEY_TAIL), "the key is in the daemon log");
    let mut redb = 0;
    for file in walk(&dir.path().join("data")) {
        let bytes = std::fs::read(&file).unwrap();
        redb += usize::from(file.extension().is_some_and(|e| e == "redb"));
        assert!(
            !contains_bytes(&bytes, KEY_TAIL),
            "the key is in {}",
            file.display()
        );
    }
    assert!(redb >= 1, "no redb file scanned");
    let audit = support::audit_json(dir.path());
    assert!(!audit.contains(KEY_TAIL), "the key is in the audit");
    assert!(audit.contains("secret_redacted_inbound"), "not audited");
    // The turn's durable copy is the redacted text; the update record keeps
    // only its id and state once handled.
    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    let inbox = store
        .inbox()
        .get(&format!("{:020}", 0))
        .unwrap()
        .expect("accepted");
    assert_eq!(
        inbox.message.dedup_key.as_deref(),
        Some("telegram:update:1")
    );
    assert!(
        inbox.message.text.contains("remember-this-marker"),
        "{inbox:?}"
    );
    assert!(!inbox.message.text.contains(KEY_TAIL), "{inbox:?}");
    let rec = store
        .telegram_updates()
        .get(1)
        .unwrap()
        .expect("update recorded");
    assert_eq!(rec.state, silas_storage::UpdateState::Handled);
    assert!(!rec.payload.contains(KEY_TAIL), "{}", rec.payload);
}

/// 8. `getUpdates` answered 502 (a proxy's HTML page) and then 429
///    (retry_after 1): the owner's queued message is still handled, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bot_api_502_and_429_lose_no_update() {
    let bot = FakeBotApi::start().await.unwrap();
    bot.script(
        "getUpdates",
        BotReply::Raw {
            status: 502,
            body: "<html><body>502 Bad Gateway</body></html>".into(),
        },
    )
    .script("getUpdates", BotReply::RateLimited { retry_after: 1 });
    bot.push_update(message(1, OWNER, OWNER, 10, "hello"));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    sent_text(&bot, OWNER, "offline", Duration::from_secs(60)).await;
    let polls = bot.calls_to("getUpdates");
    assert!(polls.len() >= 3, "{}", dump(&polls));
    // After the 429 the poller waited its retry_after.
    assert!(
        polls[2].at.duration_since(polls[1].at) >= Duration::from_millis(950),
        "retry_after not honoured: {:?}",
        polls[2].at.duration_since(polls[1].at)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sent_to(&bot, OWNER).len(), 1, "{}", dump(&bot.calls()));

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(count(&events, "turn_completed"), 1);
}

/// A card stored while the daemon was stopped (`silas skill install`) is
/// shown in the owner's chat when the daemon starts, as the web app shows
/// it on connect — once, even across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_waiting_from_before_the_start_is_shown_in_the_owners_chat() {
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let cli = |args: &[&str]| {
        support::silas(dir.path())
            .arg("--config")
            .arg(dir.path().join("silas.yaml"))
            .args(args)
            .output()
            .unwrap()
    };
    assert!(cli(&["init"]).status.success());
    let out = cli(&["skill", "install", "coding"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = |calls: &[silas_testkit::telegram::BotCall]| {
        calls
            .iter()
            .filter(|c| is(c, "sendMessage", OWNER) && text_of(c).contains("coding"))
            .count()
    };
    let (daemon, _) = start(dir.path(), false);
    wait_for(&bot, "the install card", Duration::from_secs(30), |calls| {
        (shown(calls) > 0).then_some(())
    })
    .await;
    daemon.stop().await;
    // Restarted: the message already in the chat still stands.
    let (daemon, _) = start(dir.path(), false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    daemon.stop().await;
    assert_eq!(shown(&bot.calls()), 1, "{}", dump(&bot.calls()));
}

/// A reply the Bot API refuses for longer than the outbox's in-place
/// retries (five 429s) is not lost: it is sent again in the background
/// once Telegram takes messages again, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_refused_during_a_bot_api_outage_arrives_afterwards() {
    let bot = FakeBotApi::start().await.unwrap();
    for _ in 0..5 {
        bot.script("sendMessage", BotReply::RateLimited { retry_after: 1 });
    }
    bot.push_update(message(1, OWNER, OWNER, 10, "hello"));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    // The fake records every call, the five refused ones too.
    wait_for(&bot, "the sixth send", Duration::from_secs(60), |calls| {
        let n = calls
            .iter()
            .filter(|c| is(c, "sendMessage", OWNER) && text_of(c).contains("offline"))
            .count();
        (n >= 6).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sends = bot.calls_to("sendMessage");
    assert_eq!(
        sends.len(),
        6,
        "five refused, then delivered: {}",
        dump(&sends)
    );

    daemon.stop().await;
    let events = audit_events(dir.path());
    assert_eq!(
        count(&events, "telegram.reply_redelivered"),
        1,
        "{events:?}"
    );
    assert_eq!(count(&events, "turn_completed"), 1);
}

/// 9. SIGKILL while the owner's turn is in flight (a slow model), then a
///    restart over the same data dir: the update is handled exactly once —
///    one inbox record, one reply, one `turn_completed`, and polling moves
///    past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_turn_then_restart_handles_the_update_once() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Slow hello.", Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (mut daemon, _) = start(dir.path(), false);

    bot.push_update(message(7, OWNER, OWNER, 70, "crash-test message"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while llm.requests().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the turn never reached the model"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.child.kill().unwrap(); // SIGKILL, mid model call
    daemon.child.wait().unwrap();
    drop(daemon);
    assert!(sent_to(&bot, OWNER).is_empty(), "answered before the kill");

    let (daemon, _) = start(dir.path(), false);
    sent_text(&bot, OWNER, "Slow hello.", Duration::from_secs(60)).await;
    // A second reply (a double replay) would come within a turn's time.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sent = sent_to(&bot, OWNER);
    // The scope's session was rehydrated (its message was chronicled before
    // the kill): its notice comes once, before the one reply (§5.1.3).
    let (notices, replies): (Vec<_>, Vec<_>) = sent
        .iter()
        .partition(|r| r.body["text"] == silas_actors::turn::rehydrate::REHYDRATED_NOTICE);
    assert_eq!(replies.len(), 1, "{}", dump(&sent));
    assert!(notices.len() <= 1, "{}", dump(&sent));
    let confirmed = wait_for(
        &bot,
        "a poll past update 7",
        Duration::from_secs(30),
        |calls| {
            calls
                .iter()
                .find(|c| c.method == "getUpdates" && c.body["offset"].as_u64() > Some(7))
                .cloned()
        },
    )
    .await;
    assert_eq!(confirmed.body["offset"], 8);
    daemon.stop().await;

    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    let mut records = Vec::new();
    for seq in 0u64.. {
        match store.inbox().get(&format!("{seq:020}")).unwrap() {
            Some(r) => records.push(r),
            None => break,
        }
    }
    let ours: Vec<_> = records
        .iter()
        .filter(|r| r.message.dedup_key.as_deref() == Some("telegram:update:7"))
        .collect();
    assert_eq!(ours.len(), 1, "{records:?}");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(ours[0].stage, silas_storage::InboxStage::Delivered);
    assert_eq!(ours[0].reply.as_deref(), Some("Slow hello."));
    let audit = store.audit().tail(100_000).unwrap();
    let completed = audit
        .iter()
        .filter(|e| e.event == "turn_completed" && e.data["inbox_id"] == ours[0].inbox_id.as_str())
        .count();
    assert_eq!(completed, 1);
    let update = store.telegram_updates().get(7).unwrap().expect("recorded");
    assert_eq!(update.state, silas_storage::UpdateState::Handled);
}

/// A "Still working…" line posted before a SIGKILL is deleted when the
/// daemon starts again (the answer, replayed, comes without it); before,
/// it stayed in the chat for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_line_left_by_a_sigkill_is_deleted_at_the_next_start() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Slow hello.", Duration::from_secs(7)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (mut daemon, _) = start(dir.path(), false);

    bot.push_update(message(7, OWNER, OWNER, 70, "slow one"));
    let progress = sent_text(&bot, OWNER, "Still working", Duration::from_secs(30)).await;
    let orphan = progress.message_id.expect("a message id");
    daemon.child.kill().unwrap(); // SIGKILL, mid model call
    daemon.child.wait().unwrap();
    drop(daemon);

    // The replay's model answers at once.
    llm.set_fallback(silas_testkit::Reply::json(&serde_json::json!({
        "route": "direct", "reason": "chat", "response": {"message": "Fast hello."},
        "interaction_register": "status", "interaction_mode": "default_and_offer",
        "context_profile": "conversation"})));
    let (daemon, _) = start(dir.path(), false);
    sent_text(&bot, OWNER, "Fast hello.", Duration::from_secs(60)).await;
    wait_for(
        &bot,
        "the orphaned progress line deleted",
        Duration::from_secs(30),
        |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "deleteMessage" && c.body["message_id"].as_i64() == Some(orphan)
                })
                .cloned()
        },
    )
    .await;
    daemon.stop().await;
    let store = silas_storage::Store::open(dir.path().join("data").join(silas_storage::STORE_FILE))
        .unwrap();
    assert!(
        store
            .records::<silas_storage::TelegramProgressMessage>()
            .is_empty()
            .unwrap(),
        "a progress record outlived its line"
    );
}

/// 10. The bot token appears in no line of the daemon's debug log and no
///     audit entry — including when the Bot API's error descriptions echo
///     it back and calls fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_token_is_never_logged_or_audited() {
    let bot = FakeBotApi::start().await.unwrap();
    let echo = format!("Bad Gateway at /bot{TOKEN}/getUpdates");
    bot.script(
        "getUpdates",
        BotReply::Error {
            status: 502,
            description: echo.clone(),
        },
    )
    .script(
        "sendMessage",
        BotReply::Error {
            status: 400,
            description: format!("Bad Request: chat not found for {TOKEN}"),
        },
    );
    bot.push_update(message(1, STRANGER, STRANGER, 5, "hi"));
    bot.push_update(message(2, OWNER, OWNER, 6, "hello"));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, _) = start(dir.path(), true);

    sent_text(&bot, OWNER, "offline", Duration::from_secs(60)).await;
    daemon.stop().await;
    // The canary was really in use.
    assert!(bot.calls().iter().all(|c| c.token == TOKEN));
    let log = read_stderr(dir.path());
    assert!(log.lines().count() > 10, "no debug log captured:\n{log}");
    for line in log.lines() {
        assert!(!line.contains(TOKEN_SECRET), "the token is logged: {line}");
    }
    assert!(
        log.contains("telegram poll step failed"),
        "the scripted failure was not logged"
    );
    let audit = support::audit_json(dir.path());
    assert!(!audit.contains(TOKEN_SECRET), "the token is in the audit");
}

/// A chatbot customer who floods the bot while their queue is full is told
/// to send again, and holds up no one: updates are handled in order, and a
/// customer's "busy" used to be retried with a growing backoff while every
/// later update — the owner's too — waited behind it (minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_flood_does_not_hold_up_the_owner() {
    const CUSTOMER: i64 = 888;
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let goal = dir.path().join("goal.md");
    std::fs::write(&goal, "answer questions about opening hours\n").unwrap();
    let mut yaml = std::fs::read_to_string(dir.path().join("silas.yaml")).unwrap();
    yaml.push_str(&format!(
        "  active_goal: \"{}\"\n  backpressure:\n    max_pending_turns_per_scope: 1\n",
        goal.display()
    ));
    std::fs::write(dir.path().join("silas.yaml"), yaml).unwrap();
    let (daemon, _) = start(dir.path(), false);

    for i in 0..8u64 {
        bot.push_update(message(
            10 + i,
            CUSTOMER,
            CUSTOMER,
            100 + i as i64,
            "hours?",
        ));
    }
    bot.push_update(message(30, OWNER, OWNER, 300, "are you there?"));
    let asked = Instant::now();
    sent_text(&bot, OWNER, "Noted.", Duration::from_secs(60)).await;
    let waited = asked.elapsed();
    // The owner's own turn takes the model's 3 s, behind at most the
    // customer's turn in flight; the backoff made it 30 s and more.
    assert!(
        waited < Duration::from_secs(15),
        "the owner waited {waited:?}: {}",
        dump(&bot.calls())
    );
    let told = sent_to(&bot, CUSTOMER)
        .iter()
        .filter(|c| text_of(c).starts_with("I'm still working on your earlier messages"))
        .count();
    assert!(told >= 1, "{}", dump(&bot.calls()));
    daemon.stop().await;
}

/// The owner's edit gets a word back (it used to vanish: no reply, no
/// notice), and a photo's caption is read, with the model told of the
/// attachment it cannot see (it used to get "I can only read text").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_answered_and_a_caption_is_read() {
    let bot = FakeBotApi::start().await.unwrap();
    let llm = direct_llm("Noted.", Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, Some(&llm), OwnerAt::Private);
    let (daemon, _) = start(dir.path(), false);

    bot.push_update(serde_json::json!({"update_id": 1, "edited_message": {
        "message_id": 50, "from": user(OWNER), "chat": chat(OWNER),
        "date": 1_700_000_000, "edit_date": 1_700_000_100,
        "text": "actually, make that tomorrow"}}));
    sent_text(&bot, OWNER, "I saw your edit", Duration::from_secs(30)).await;

    bot.push_update(serde_json::json!({"update_id": 2, "message": {
        "message_id": 51, "from": user(OWNER), "chat": chat(OWNER),
        "date": 1_700_000_000, "caption": "what is on this receipt?",
        "photo": [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}]}}));
    sent_text(&bot, OWNER, "Noted.", Duration::from_secs(30)).await;
    let asked = llm.requests().iter().any(|r| {
        let body = r.body.to_string();
        body.contains("what is on this receipt?") && body.contains("cannot open here")
    });
    assert!(asked, "the caption did not reach the model");
    assert!(
        !sent_to(&bot, OWNER)
            .iter()
            .any(|c| text_of(c).contains("I can only read text")),
        "{}",
        dump(&bot.calls())
    );
    daemon.stop().await;
}

/// A token the Bot API rejects (revoked at BotFather, mistyped) shows where
/// the owner looks: `/health` and `silas status` name it and the setting,
/// while the web app keeps working. Once a poll works, both say "ok".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_token_shows_on_health_and_in_status() {
    let bot = FakeBotApi::start().await.unwrap();
    bot.script(
        "getUpdates",
        BotReply::Error {
            status: 401,
            description: "Unauthorized".into(),
        },
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, addr) = start(dir.path(), false);

    let health = |addr: &str| -> Value {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut s, &mut out).unwrap();
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        let json = match (body.find('{'), body.rfind('}')) {
            (Some(a), Some(b)) => &body[a..=b],
            _ => body,
        };
        serde_json::from_str(json).unwrap_or(Value::Null)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let paused = loop {
        let h = health(&addr);
        if h["channels"]["telegram"]
            .as_str()
            .is_some_and(|s| s.starts_with("paused"))
        {
            break h;
        }
        assert!(Instant::now() < deadline, "never paused: {h}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let line = paused["channels"]["telegram"].as_str().unwrap();
    assert!(line.contains("channels.telegram.token"), "{paused}");
    assert!(!line.contains(TOKEN_SECRET), "{paused}");

    let status = support::silas(dir.path())
        .arg("--config")
        .arg(dir.path().join("silas.yaml"))
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    assert!(
        text.contains("  telegram:      paused: the Bot API rejects the token"),
        "{text}"
    );
    daemon.stop().await;

    // A working token: "ok" once the first poll came back.
    let bot = FakeBotApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &bot, None, OwnerAt::Private);
    let (daemon, addr) = start(dir.path(), false);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = health(&addr);
        if h["channels"]["telegram"] == "ok" {
            break;
        }
        assert!(Instant::now() < deadline, "never ok: {h}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop().await;
}
