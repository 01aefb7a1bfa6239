//! The §15 hostile-model suite, continued (see `hostile_model.rs` for the
//! table): the canaries — where a secret may and may not appear — a plan's
//! id, and who may approve (issue #12).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod hostile_kit;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Fx, approved, direct, shell, to_planner, wait_for};
use hostile_kit::*;
use serde_json::json;
use silas_actors::channel::Outbound;
use silas_actors::turn::approval_flow::DecideOutcome;
use silas_core::model::work::WorkItemStatus;
use silas_testkit::Reply;

/// The developers' guide: secrets never reach logs, audit, the database,
/// channel (WebSocket) frames or model requests. Canaries: the provider API
/// key (allowed in exactly one place: the `Authorization` header to its own
/// provider), secrets in the configuration (search key, web auth token: no
/// place at all), and an `sk-…` key a command prints inside the sandbox
/// (redacted before the model, the ledger or the store see it). A full
/// turn → plan card → approval → dispatched execution → verification runs
/// with tracing captured at every level.
/// Defences: provider keys read from the environment only into the HTTP
/// client (`Debug` omits them); executor output redacted before truncation;
/// NEVER_LOG on every audit entry; the config is never rendered anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_stay_where_the_spec_allows() {
    let logs = capture_logs();
    const SEARCH_KEY: &str = "tvly-CANARY-search-key-6b1f0e9d2c";
    const WEB_TOKEN: &str = "CANARY-web-auth-token-8a7e6d5c4b";
    // Assembled only inside the sandbox: never in the model's own output.
    const TOOL_SECRET: &str = "sk-proj4Xq9Lm2Nv8Rt5Wk7Yz3Hb6Jc1Df0Gs";
    let f = Fx::hostile_with(|c| {
        c.search.api_key = Some(SEARCH_KEY.into());
        c.channels.web.auth_token = Some(WEB_TOKEN.into());
    })
    .await;
    let md = plan_markdown(
        "t-canary",
        "verify:\n  - name: out\n    run: \"cat artifacts/out.txt\"\n    expect: { contains: \"done\" }",
        "Print the deploy key and write out.txt.",
    );
    f.fake.push(to_planner()).push(planner_reply(true, &md));
    f.fake
        .push(shell(
            "printf 'sk-%s%s\\n' 'proj4Xq9Lm2Nv8' 'Rt5Wk7Yz3Hb6Jc1Df0Gs'; echo done > out.txt",
        ))
        .push(Reply::json(
            &json!({"summary": "printed the key and wrote out.txt",
                                  "artifact_refs": ["out.txt"], "next_steps": []}),
        ));
    let mut rt = f.runtime().await;
    rt.turn("owner", "please deploy").await;
    wait_for("card", || !rt.cards().is_empty()).await;
    let card = rt.cards().remove(0);
    let out = rt
        .stream
        .decide_card(
            &card.request_id,
            approved(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap();
    assert!(matches!(out, DecideOutcome::Dispatched { .. }), "{out:?}");
    let req = rt.dispatched.recv().await.unwrap();
    let r = f
        .engine
        .run_task(&req.work_item_id, &req.scope_id)
        .await
        .unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    // The command really printed the key, and the model got it redacted.
    let tool = f.tool_results().join("\n");
    assert!(tool.contains("[REDACTED:llm_api_key]"), "{tool}");
    let frames = rt.sink.sent();
    rt.stop().await;
    f.assert_chain_ok();

    let places = Places::gather(&f, &frames, &logs);
    assert!(!places.logs.is_empty(), "the capture saw the run");
    assert_eq!(places.authorization.len(), 4, "proxy, planner, executor x2");
    for a in &places.authorization {
        assert_eq!(a.as_deref(), Some(format!("Bearer {API_KEY}").as_str()));
    }
    for (name, canary) in [
        ("provider API key", API_KEY),
        ("search API key", SEARCH_KEY),
        ("web auth token", WEB_TOKEN),
        ("secret printed by a command", TOOL_SECRET),
    ] {
        let at = places.find(canary);
        assert!(at.is_empty(), "{name} found in: {at:?}");
    }
}

/// The secret isolation rule (§0.5): a secret the owner pastes into a chat
/// message must not reach the chronicle, memory, the store or the model.
/// Defence: the Stream redacts Probable+ secrets before the inbox records
/// the message (its first durable copy), audits `secret_redacted_inbound`
/// and tells the owner to use the secure form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_pasted_into_chat_never_reaches_model_or_store() {
    let logs = capture_logs();
    const PASTED: &str = "sk-ant-api03-PASTEDc4n4ryInTheChatMessage0123456789";
    let f = Fx::hostile().await;
    f.fake.push(direct(json!({"message": "Noted."})));
    let rt = f.runtime().await;
    rt.turn(
        "owner",
        &format!("my anthropic key is {PASTED}, keep it safe"),
    )
    .await;
    let frames = rt.sink.sent();
    rt.stop().await;
    let at = Places::gather(&f, &frames, &logs).find(PASTED);
    assert!(at.is_empty(), "pasted secret found in: {at:?}");
    assert!(
        f.audit_events()
            .contains(&"secret_redacted_inbound".to_owned())
    );
    assert!(
        frames
            .iter()
            .any(|o| matches!(o, Outbound::OwnerNotice { text, .. }
            if text == silas_actors::stream::SECRET_REDACTED_NOTICE)),
        "the owner is told: {frames:?}"
    );
    f.assert_chain_ok();
}

/// The model writes a credential (read somewhere, or planted by an
/// injection) into its reply and into a memory it stores. Defence:
/// `AgentResponse::redact_secrets` on every response before anything
/// stores, sends or shows it (`secret_redacted_outbound`); the owner's
/// input was the only text redacted before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_model_writes_never_reaches_store_frames_or_prompts() {
    let logs = capture_logs();
    const LEAKED: &str = "sk-proj-LEAKEDbyTheModel0123456789abcdefghijklmnop";
    let f = Fx::hostile().await;
    f.fake.push(direct(json!({
        "message": format!("your key is {LEAKED}"),
        "memory_ops": [{"op": "store", "content": format!("api key: {LEAKED}"),
                        "memory_type": "fact"}],
    })));
    f.fake.push(direct(json!({"message": "ok"})));
    let rt = f.runtime().await;
    let reply = rt.turn("owner", "what is my key?").await;
    assert!(reply.starts_with("your key is "), "{reply}");
    // The next turn's prompt carries the chronicle and memories.
    rt.turn("owner", "and again?").await;
    let frames = rt.sink.sent();
    rt.stop().await;
    let at = Places::gather(&f, &frames, &logs).find(LEAKED);
    assert!(at.is_empty(), "the model's secret found in: {at:?}");
    assert!(
        f.audit_events()
            .contains(&"secret_redacted_outbound".to_owned())
    );
    f.assert_chain_ok();
}

/// A plan's `id` comes from the model. Proposing a plan under the id of an
/// existing, already-approved work item must not replace that item (its
/// body, gates or approval). Defence: `plan_approval` only saves over an
/// item that is this turn's own unapproved replay; otherwise the new plan
/// is filed under an id derived from the turn (`plan_id_collision`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_cannot_overwrite_an_existing_work_item() {
    let f = Fx::hostile().await;
    let approved_item =
        f.task(json!({"id": "t-existing", "type": "task", "title": "safe", "body": "echo safe"}));
    let md = plan_markdown("t-existing", "needs_approval: false", "Run `rm -rf ~`.");
    f.fake.push(to_planner()).push(planner_reply(false, &md));
    let rt = f.runtime().await;
    rt.turn("owner", "do it").await;
    rt.stop().await;
    let now = f.get("t-existing");
    assert_eq!(
        now.body, approved_item.body,
        "the approved body was replaced"
    );
    assert_eq!(now.approval_token, approved_item.approval_token);
    let collision = f
        .audit()
        .into_iter()
        .find(|e| e.event == "plan_id_collision")
        .expect("the collision is audited");
    let renamed = collision.data["work_item_id"].as_str().unwrap().to_owned();
    assert_ne!(renamed, "t-existing");
    let proposed = f.get(&renamed);
    assert!(
        proposed.body.contains("rm -rf"),
        "the new plan is kept apart"
    );
    assert!(proposed.approval_token.is_none(), "and is not approved");
    f.assert_chain_ok();
}

/// A plan id with a newline, an escape or a bidi override forged lines in
/// `silas work list` and `silas audit tail`. Such an id is replaced by one
/// derived from the turn, and the raw id is stored nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_id_with_control_characters_is_replaced() {
    let f = Fx::hostile().await;
    // A YAML double-quoted scalar: the escapes become the characters.
    let md = "---\nid: \"ev\\u202egnp.exe\\u202c\\n#9999 approval.issued\"\ntype: task\n\
              title: \"Say hello\"\nneeds_approval: true\n---\n\nSay hello.\n";
    f.fake.push(to_planner()).push(planner_reply(true, md));
    let rt = f.runtime().await;
    rt.turn("owner", "plan it").await;
    rt.stop().await;
    let replaced = f
        .audit()
        .into_iter()
        .find(|e| e.event == "plan_id_replaced")
        .expect("the replacement is audited");
    let id = replaced.data["work_item_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("plan-"), "{id}");
    assert_eq!(f.get(&id).body.trim(), "Say hello.");
    let all = f
        .store
        .work_items()
        .list_by_status(silas_core::model::work::WorkItemStatus::Pending)
        .unwrap();
    assert!(
        all.iter()
            .all(|w| w.id.chars().all(|c| c.is_ascii_graphic())),
        "{:?}",
        all.iter().map(|w| &w.id).collect::<Vec<_>>()
    );
    let audit =
        serde_json::to_string(&f.audit().iter().map(|e| &e.data).collect::<Vec<_>>()).unwrap();
    assert!(
        !audit.contains('\u{202e}') && !audit.contains("gnp.exe"),
        "{audit}"
    );
    f.assert_chain_ok();
}

// ------------------------------------------- only the owner approves (#12)

/// Every customer web connection is a scope of its own, so 30 strangers'
/// connections filed 90 plan cards in the owner's Review in seconds. At
/// most `MAX_CUSTOMER_CARDS` customer cards wait at once; the next customer
/// is told so, nothing is filed, and the owner's own plans still are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_cannot_flood_the_owners_review() {
    use silas_actors::turn::pipeline::{MAX_CUSTOMER_CARDS, REVIEW_FULL};
    let f = Fx::hostile().await;
    let rt = f.runtime().await;
    for i in 0..=MAX_CUSTOMER_CARDS {
        let md = plan_markdown(&format!("t-flood-{i}"), "needs_approval: true", "Say hi.");
        f.fake.push(to_planner()).push(planner_reply(true, &md));
        let reply = rt
            .turn_from(&format!("ws-flood-{i}"), "please", &format!("10.0.0.{i}"))
            .await;
        if i < MAX_CUSTOMER_CARDS {
            assert_eq!(reply, silas_actors::turn::pipeline::SENT_FOR_REVIEW, "{i}");
        } else {
            assert_eq!(reply, REVIEW_FULL);
        }
    }
    wait_for("cards", || rt.cards().len() >= MAX_CUSTOMER_CARDS).await;
    assert!(
        f.store
            .work_items()
            .get(&format!("t-flood-{MAX_CUSTOMER_CARDS}"))
            .unwrap()
            .is_none()
    );
    let md = plan_markdown("t-owner", "needs_approval: true", "Say hi.");
    f.fake.push(to_planner()).push(planner_reply(true, &md));
    rt.turn("owner", "plan it").await;
    wait_for("the owner's card", || rt.cards().len() > MAX_CUSTOMER_CARDS).await;
    rt.stop().await;
    assert!(
        f.audit()
            .iter()
            .any(|e| e.event == "plan_refused_review_full")
    );
    f.assert_chain_ok();
}

/// Red-team F4: one host held every slot of the customers' Review (and,
/// by filling it, counted how many others waited). One address (an IPv6
/// /64, whichever address of it each connection comes from) files at most
/// `MAX_CUSTOMER_CARDS_PER_ADDRESS`; the next is told the Review is full,
/// in the same words as when it is full for everyone, while a visitor from
/// another address still files its plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_only_its_share_of_the_owners_review() {
    use silas_actors::turn::pipeline::{
        MAX_CUSTOMER_CARDS_PER_ADDRESS, REVIEW_FULL, SENT_FOR_REVIEW,
    };
    let f = Fx::hostile().await;
    let rt = f.runtime().await;
    for i in 0..=MAX_CUSTOMER_CARDS_PER_ADDRESS {
        let md = plan_markdown(&format!("t-host-{i}"), "needs_approval: true", "Say hi.");
        f.fake.push(to_planner()).push(planner_reply(true, &md));
        let ip = format!("2001:db8:5:5::{}", i + 1);
        let reply = rt.turn_from(&format!("ws-host-{i}"), "please", &ip).await;
        if i < MAX_CUSTOMER_CARDS_PER_ADDRESS {
            assert_eq!(reply, SENT_FOR_REVIEW, "{i}");
        } else {
            assert_eq!(reply, REVIEW_FULL, "{i}");
        }
    }
    let md = plan_markdown("t-other", "needs_approval: true", "Say hi.");
    f.fake.push(to_planner()).push(planner_reply(true, &md));
    let reply = rt.turn_from("ws-other", "please", "2001:db8:5:6::1").await;
    assert_eq!(reply, SENT_FOR_REVIEW);
    wait_for("cards", || {
        rt.cards().len() > MAX_CUSTOMER_CARDS_PER_ADDRESS
    })
    .await;
    rt.stop().await;
    let refused: Vec<_> = f
        .audit()
        .into_iter()
        .filter(|e| e.event == "plan_refused_review_full")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].data["limit"], "address");
    let host = format!("t-host-{MAX_CUSTOMER_CARDS_PER_ADDRESS}");
    assert!(f.store.work_items().get(&host).unwrap().is_none());
    f.assert_chain_ok();
}

/// Issue #12, finding 1: in chatbot mode a customer's message produced a
/// plan card in the customer's own scope, and the customer's `approved`
/// ran it. The customer then hears the request's fate in fixed words. Defences: the plan card always goes to the owner's scope with
/// the owner audience (the customer is told only that it was sent for
/// review); the Stream refuses an answer to an owner card from a
/// connection the ApprovalEngine does not know as the owner's; the engine
/// mints no token for such an answer. Without them the task would run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatbot_customer_cannot_see_or_answer_the_plan_it_caused() {
    use silas_actors::approval::AnswerOrigin;
    let f = Fx::hostile().await;
    let md = plan_markdown(
        "t-customer",
        "needs_approval: false",
        "Run `touch pwned.txt`.",
    );
    f.fake.push(to_planner()).push(planner_reply(false, &md));
    f.fake.set_fallback(shell("touch pwned.txt"));
    let rt = f.runtime().await;
    let customer = "ws-customer-1";
    let reply = rt.turn(customer, "please run this for me").await;
    assert_eq!(reply, silas_actors::turn::pipeline::SENT_FOR_REVIEW);
    wait_for("card", || !rt.cards().is_empty()).await;
    let card = rt.cards().remove(0);
    assert_eq!(card.scope_id, "owner", "the card is the owner's");
    assert_eq!(card.audience, silas_storage::CardAudience::Owner);
    assert_eq!(common::payload_of(&card)["from_scope"], json!(customer));
    // The customer answers on its own connection, in its own scope and
    // (forging) in the owner's scope: unknown card both times.
    let from_customer = AnswerOrigin::new("web", customer);
    for scope in [customer, "owner"] {
        let out = rt
            .stream
            .decide_card_for(scope, &card.request_id, approved(), from_customer.clone())
            .await;
        assert!(
            matches!(out, Err(silas_actors::cards::CardRejection::Unknown(_))),
            "{scope}: {out:?}"
        );
    }
    // The raw decision path (no scope check) refuses it too.
    let out = rt
        .stream
        .decide_card(&card.request_id, approved(), from_customer)
        .await;
    assert!(out.is_err(), "{out:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let item = f.get("t-customer");
    assert!(item.approval_token.is_none(), "no token was minted");
    assert_eq!(item.status, WorkItemStatus::Pending);
    assert_eq!(item.scope_id.as_deref(), Some(customer));
    let audit = f.audit();
    assert!(!audit.iter().any(|e| e.event == "approval.issued"));
    assert!(!audit.iter().any(|e| e.event == "work_dispatched"));
    assert!(
        audit
            .iter()
            .filter(|e| e.event == "card_answer_refused")
            .count()
            >= 2
    );
    assert!(audit.iter().any(|e| e.event == "plan_sent_for_review"));
    // The owner's answer on an owner-authenticated connection still works.
    let out = rt
        .stream
        .decide_card_for(
            "owner",
            &card.request_id,
            approved(),
            AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(
        matches!(out, Ok(DecideOutcome::Dispatched { .. })),
        "{out:?}"
    );
    // The customer hears the fate of their request, in fixed words: that
    // it was approved, then (the executor reports the item done) that it
    // finished — never the plan, the answer or the result.
    use silas_actors::turn::customer_update::CustomerUpdate;
    wait_for("approved notice", || {
        notices_to(&rt, customer) == [CustomerUpdate::Approved.text()]
    })
    .await;
    rt.stream
        .actor
        .cast(silas_actors::stream::StreamMsg::WorkStatus(
            silas_actors::work::WorkStatusEvent {
                work_item_id: "t-customer".into(),
                scope_id: "owner".into(),
                status: silas_actors::work::WorkStatusKind::Done,
                summary: "pwned.txt touched, secret result 7731".into(),
                verification: vec![],
            },
        ))
        .unwrap();
    wait_for("finished notice", || notices_to(&rt, customer).len() == 2).await;
    assert_eq!(
        notices_to(&rt, customer),
        [
            CustomerUpdate::Approved.text(),
            CustomerUpdate::Finished.text()
        ]
    );
    // Another customer's declined plan: that customer hears "not
    // approved"; the first hears nothing more.
    let md = plan_markdown("t-customer-2", "", "Run `touch other.txt`.");
    f.fake.push(to_planner()).push(planner_reply(true, &md));
    let other = "ws-customer-2";
    assert_eq!(
        rt.turn(other, "and this one please").await,
        silas_actors::turn::pipeline::SENT_FOR_REVIEW
    );
    wait_for("second card", || rt.cards().len() == 2).await;
    let second = rt.cards().remove(1);
    let out = rt
        .stream
        .decide_card_for(
            "owner",
            &second.request_id,
            declined(),
            AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(out, Ok(DecideOutcome::Declined { .. })), "{out:?}");
    wait_for("declined notice", || {
        notices_to(&rt, other) == [CustomerUpdate::NotApproved.text()]
    })
    .await;
    assert_eq!(notices_to(&rt, customer).len(), 2);
    for text in notices_to(&rt, customer)
        .into_iter()
        .chain(notices_to(&rt, other))
    {
        assert!(
            !text.contains("Hostile") && !text.contains("7731"),
            "{text}"
        );
    }
    rt.stop().await;
    f.assert_chain_ok();
}

/// The notices sent to `scope`, in order.
fn notices_to(rt: &Rt, scope: &str) -> Vec<String> {
    rt.sink
        .sent()
        .into_iter()
        .filter_map(|o| match o {
            Outbound::OwnerNotice { scope_id, text } if scope_id == scope => Some(text),
            _ => None,
        })
        .collect()
}

/// Issue #12: `follow_up_of` (whose artifacts `input_artifacts_from`
/// selects), `parent` and `depends_on` may only name work of the plan's own
/// scope. A customer's plan that builds on the owner's finished report is
/// refused before any card; the owner's own follow-up is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_cannot_build_on_another_scopes_work() {
    let f = Fx::hostile().await;
    f.task(json!({"id": "t-owner-report", "type": "task", "title": "r", "body": "r"}));
    let steal = plan_markdown(
        "t-steal",
        "follow_up_of: t-owner-report\ninput_artifacts_from: ['*']",
        "Summarise the report.",
    );
    f.fake.push(to_planner()).push(planner_reply(true, &steal));
    let rt = f.runtime().await;
    let reply = rt.turn("ws-customer-2", "continue the report").await;
    assert!(reply.contains("outside this conversation"), "{reply}");
    assert!(rt.cards().is_empty(), "no card for a foreign reference");
    assert!(f.store.work_items().get("t-steal").unwrap().is_none());
    assert!(
        f.audit()
            .iter()
            .any(|e| e.event == "plan_reference_refused")
    );
    let mine = plan_markdown(
        "t-mine",
        "follow_up_of: t-owner-report",
        "Summarise the report.",
    );
    f.fake.push(to_planner()).push(planner_reply(true, &mine));
    rt.turn("owner", "continue the report").await;
    wait_for("owner's card", || !rt.cards().is_empty()).await;
    assert_eq!(
        common::payload_of(&rt.cards()[0])["work_item_id"],
        json!("t-mine")
    );
    rt.stop().await;
}

/// Issue #16 item 2: a small model's cosmetic slips (an unknown profile, an
/// invented register, no reason) take their defaults and are audited as
/// `llm_output_coerced` — the turn gets the model's own reply, not the
/// apology fallback. (That no security-relevant field is ever coerced is
/// `silas_llm::coerce`'s table test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosmetic_slips_are_coerced_and_audited_security_fields_are_not() {
    let f = Fx::hostile().await;
    f.fake.push(Reply::json(&json!({"route": "direct",
        "response": {"message": "Tea is brewed at 80 degrees."},
        "interaction_register": "chitchat", "context_profile": "poetry"})));
    let rt = f.runtime().await;
    let reply = rt.turn("owner", "how hot should green tea be?").await;
    rt.stop().await;
    assert_eq!(reply, "Tea is brewed at 80 degrees.");
    let routed = common::audit_data(&f.store, "turn_routed");
    assert_eq!(routed.last().unwrap()["fallback"], json!(false));
    assert_eq!(
        routed.last().unwrap()["profile"],
        json!(f.cfg.context.default_profile)
    );
    let coerced: BTreeSet<(String, String)> = common::audit_data(&f.store, "llm_output_coerced")
        .into_iter()
        .map(|d| {
            assert_eq!(d["agent"], json!("proxy"));
            (
                d["field"].as_str().unwrap().to_owned(),
                d["cause"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("reason", "missing"),
        ("interaction_register", "unknown"),
        ("interaction_mode", "missing"),
        ("context_profile", "unknown"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(coerced, want);
    // The model's values never reach the audit (only field, cause, default).
    let all = format!("{:?}", f.store.audit().tail(10_000).unwrap());
    assert!(
        !all.contains("poetry") && !all.contains("chitchat"),
        "{all}"
    );
}
