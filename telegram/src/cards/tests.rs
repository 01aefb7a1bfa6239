use serde_json::{Value, json};
use silas_core::cards::{
    self as core_cards, CardKind, CardPayload, CardResponse, ToolCall, gate_card,
    proposed_plan_card, secure_input_card,
};
use silas_core::model::approval::ApprovalVerdict;
use silas_core::model::work::{WorkItem, WorkItemType};
use silas_core::risk::RiskLevel;

use super::*;
use crate::outbox::Text;
use crate::policy::callback::{CallbackSigner, MAX_CALLBACK_DATA};
use crate::policy::text::{MAX_MESSAGE_UTF16, utf16_len};
use crate::types::InlineKeyboardButton;

const CHAT: i64 = -100_123;
const HANDLE: &str = "Ab3_x9Kq2Zt"; // 11 chars, the daemon's handle size
const NONCE: &str = "n0Nc3x";
const WEB: &str = "https://silas.home.example/";

fn signer() -> CallbackSigner {
    CallbackSigner::new([9u8; 32])
}

fn ctx<'a>(
    signer: &'a CallbackSigner,
    max: RiskLevel,
    web_url: Option<&'a str>,
) -> RenderContext<'a> {
    RenderContext {
        chat_id: CHAT,
        handle: HANDLE,
        nonce: NONCE,
        signer,
        max_approval_risk: max,
        web_url,
    }
}

fn item(kind: WorkItemType, title: &str, body: &str) -> WorkItem {
    let mut t = WorkItem::new("w1", kind, title);
    t.body = body.into();
    t
}

fn plan(kind: WorkItemType, title: &str, body: &str) -> CardPayload {
    proposed_plan_card(&item(kind, title, body), "h1", "in-1", "owner", "owner")
}

fn card(card_type: &str, payload: Value) -> CardPayload {
    CardPayload::from_parts(card_type, payload).unwrap()
}

fn text_of(r: &RenderedCard) -> &str {
    match &r.text {
        Text::MarkdownV2(t) => t,
        Text::Plain(_) => panic!("cards are MarkdownV2"),
    }
}

fn buttons(r: &RenderedCard) -> Vec<&InlineKeyboardButton> {
    r.keyboard
        .iter()
        .flat_map(|k| k.inline_keyboard.iter().flatten())
        .collect()
}

/// The decoded actions of a render's callback buttons, checking each
/// button's binding on the way.
fn actions(s: &CallbackSigner, r: &RenderedCard) -> Vec<String> {
    buttons(r)
        .iter()
        .filter_map(|b| b.callback_data.as_deref())
        .map(|data| {
            assert!(data.len() <= MAX_CALLBACK_DATA, "{data}");
            let p = s.decode(CHAT, data).unwrap();
            assert_eq!((p.card_id.as_str(), p.nonce.as_str()), (HANDLE, NONCE));
            assert!(p.action.len() <= 7, "{}", p.action);
            assert!(s.decode(CHAT + 1, data).is_err(), "bound to its chat");
            p.action
        })
        .collect()
}

fn verdict(kind: CardKind, v: &str) -> CardAnswer {
    CardAnswer::Card {
        kind,
        response: CardResponse::Verdict { verdict: v.into() },
    }
}

fn choice(kind: CardKind, v: &str) -> CardAnswer {
    CardAnswer::Card {
        kind,
        response: CardResponse::Choice {
            selected_value: Some(v.into()),
            freetext: None,
        },
    }
}

fn setup(step: &str, action: &str) -> CardAnswer {
    CardAnswer::Card {
        kind: CardKind::ConnectionSetup,
        response: CardResponse::SetupAction {
            step_type: step.into(),
            action: action.into(),
        },
    }
}

fn recovery(v: &str) -> CardAnswer {
    CardAnswer::Card {
        kind: CardKind::ConnectionFailure,
        response: CardResponse::Recovery {
            selected_action: v.into(),
        },
    }
}

fn batch(v: &str) -> CardAnswer {
    CardAnswer::Card {
        kind: CardKind::BatchReview,
        response: CardResponse::Batch {
            verdict: v.into(),
            selected_item_ids: vec![],
        },
    }
}

fn draft(v: &str) -> CardAnswer {
    CardAnswer::Card {
        kind: CardKind::DraftReview,
        response: CardResponse::Draft {
            verdict: v.into(),
            edited_text: None,
        },
    }
}

const APPROVED: CardAnswer = CardAnswer::Approval(ApprovalVerdict::Approved);
const DECLINED: CardAnswer = CardAnswer::Approval(ApprovalVerdict::Declined);

/// Every card type with the exact answers its buttons must give — the
/// values `silas_actors::cards::validate_response` accepts (and the web app
/// sends), in button order.
/// A change card (issue #15) in `phase`, one file, `protected` flagged.
fn changes(phase: &str, protected: bool) -> CardPayload {
    card(
        "apply_changes",
        json!({"work_item_id": "w1", "title": "Fix the timezone bug", "phase": phase,
               "workspace": "clock", "path": "/home/me/clock", "plan_hash": "h",
               "changes_sha256": "s",
               "files": [{"path": "clock.py", "kind": "modified", "added": 1, "removed": 1},
                         {"path": "tests/test_clock.py", "kind": "modified", "added": 1,
                          "removed": 1, "protected": protected}],
               "total_added": 2, "total_removed": 2,
               "diff": "--- a/clock.py\n+++ b/clock.py\n",
               "undo_until": if phase == "undo" { json!("2026-11-24T16:00:00Z") } else { Value::Null }}),
    )
}

fn every_card() -> Vec<(CardPayload, Vec<(&'static str, CardAnswer)>)> {
    use CardKind as K;
    let task = item(WorkItemType::Task, "Fix the build", "make it green");
    vec![
        (
            changes("apply", false),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            changes("undo", false),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            plan(WorkItemType::Task, "Fix the build", "make it green"),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            core_cards::fix_task_card(&task, "h", "g1", "tests fail"),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            core_cards::renewal_card(&task, "h", "token expired"),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            core_cards::tool_card(
                &task,
                ToolCall {
                    tool_name: "web_fetch",
                    arguments: &json!({"url": "https://example.org"}),
                    reason: "needs the docs",
                    attempt: 1,
                },
                json!({}),
            ),
            vec![("ok", APPROVED), ("no", DECLINED)],
        ),
        (
            gate_card("spend", json!(12.5), json!({"why": "over budget"})),
            vec![
                ("ok", verdict(K::Gate, "approve")),
                ("no", verdict(K::Gate, "block")),
            ],
        ),
        (
            card(
                "checkpoint",
                json!({"message": "Halfway", "options": ["continue", "decline", "stop_here"]}),
            ),
            vec![
                ("o0", verdict(K::Checkpoint, "continue")),
                ("o1", verdict(K::Checkpoint, "stop_here")),
                ("no", verdict(K::Checkpoint, "decline")),
            ],
        ),
        (
            card(
                "batch_review",
                json!({"batch": {"action": "archive", "items": [{"id": "a"}, {"id": "b"}]}}),
            ),
            vec![("ok", batch("approve")), ("no", batch("decline"))],
        ),
        (
            card(
                "draft_review",
                json!({"context": "reply to Ann", "draft": "Hi Ann", "metadata": {}}),
            ),
            vec![
                ("ok", draft("approve")),
                ("re", draft("rephrase")),
                ("no", draft("reject")),
            ],
        ),
        (
            card(
                "decision",
                json!({"question": "Which?", "options": ["red", {"value": "b", "label": "Blue"}, {"action": "g"}]}),
            ),
            vec![
                ("o0", choice(K::Decision, "red")),
                ("o1", choice(K::Decision, "b")),
                ("o2", choice(K::Decision, "g")),
            ],
        ),
        (
            card(
                "suggestion",
                json!({"suggestion": {"title": "Tidy logs"}, "options": [{"value": "weekly", "label": "Weekly"}]}),
            ),
            vec![
                ("ok", choice(K::Suggestion, "do_it")),
                ("o0", choice(K::Suggestion, "weekly")),
                ("no", choice(K::Suggestion, "not_now")),
            ],
        ),
        (
            card(
                "autonomy_threshold_review",
                json!({"proposal": {"changes": [{"direction": "tighten"}]}}),
            ),
            vec![
                ("ok", verdict(K::AutonomyThreshold, "approve")),
                ("tight", verdict(K::AutonomyThreshold, "tighten_now")),
                ("no", verdict(K::AutonomyThreshold, "decline")),
            ],
        ),
        (
            card("secure_input_request", json!({"label": "the GitHub token"})),
            vec![],
        ),
        (
            card(
                "connection_setup_step",
                json!({"step_type": "device_code", "user_code": "WXYZ-1234", "verification_url": "https://github.com/login/device"}),
            ),
            vec![
                ("done", setup("device_code", "done")),
                ("help", setup("device_code", "trouble")),
                ("cancel", setup("device_code", "cancel")),
            ],
        ),
        (
            card("connection_setup_step", json!({"step_type": "failure"})),
            vec![
                ("retry", setup("failure", "retry")),
                ("help", setup("failure", "trouble")),
                ("cancel", setup("failure", "cancel")),
            ],
        ),
        (
            card(
                "permission_escalation",
                json!({"connection_name": "gmail", "current_permissions": ["read"], "requested_permissions": ["read", "send"], "reason": "to reply"}),
            ),
            vec![
                ("ok", verdict(K::PermissionEscalation, "approve")),
                ("once", verdict(K::PermissionEscalation, "just_this_once")),
                ("no", verdict(K::PermissionEscalation, "deny")),
            ],
        ),
        (
            card(
                "connection_failure",
                json!({"failure_type": "auth_expired", "service": "GitHub", "message": "token expired", "recovery_options": [{"action": "reauth", "label": "Sign in again"}, "wait"]}),
            ),
            vec![
                ("o0", recovery("reauth")),
                ("o1", recovery("wait")),
                ("skip", recovery("skip")),
            ],
        ),
    ]
}

#[test]
fn every_card_type_renders_and_every_button_maps_to_an_accepted_answer() {
    let s = signer();
    let cards = every_card();
    let mut kinds: Vec<&str> = cards.iter().map(|(c, _)| c.card_type()).collect();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        CardKind::ALL.len() + 2,
        "every kind, the tool card and the change card"
    );
    for (c, expected) in &cards {
        let r = render("req-1", c, &ctx(&s, RiskLevel::Irreversible, Some(WEB))).unwrap();
        assert!(!text_of(&r).is_empty());
        let got = actions(&s, &r);
        let want: Vec<&str> = expected.iter().map(|(a, _)| *a).collect();
        assert_eq!(got, want, "{}", c.card_type());
        for (action, answer) in expected {
            assert_eq!(
                answer_for_button(c, action).as_ref(),
                Some(answer),
                "{action}"
            );
        }
        assert_eq!(answer_for_button(c, "bogus"), None);
        for b in buttons(&r) {
            assert!(b.text.chars().count() <= MAX_BUTTON_LABEL);
            assert!(
                b.callback_data.is_some() != b.url.is_some(),
                "one kind per button"
            );
        }
    }
}

#[test]
fn the_safe_side_of_each_card_is_its_lifecycle_safe_default() {
    // "decline"/"no" answers each card with what a timeout resolves it to
    // (silas_actors::cards::safe_default), and that is never affirmative.
    for (c, expected) in every_card() {
        let Some(no) = answer_for_text(&c, "decline") else {
            // A decision has no safe button; a secure input no answer here.
            assert!(matches!(
                c,
                CardPayload::Decision(_) | CardPayload::SecureInput(_)
            ));
            continue;
        };
        assert!(!is_affirmative(&no), "{}", c.card_type());
        assert!(expected.iter().any(|(_, a)| *a == no));
        let safe = match c.kind() {
            None | Some(CardKind::Plan) => DECLINED,
            Some(CardKind::Gate) => verdict(CardKind::Gate, "block"),
            Some(CardKind::Checkpoint) => verdict(CardKind::Checkpoint, "decline"),
            Some(CardKind::BatchReview) => batch("decline"),
            Some(CardKind::DraftReview) => draft("reject"),
            Some(CardKind::Suggestion) => choice(CardKind::Suggestion, "not_now"),
            Some(CardKind::AutonomyThreshold) => verdict(CardKind::AutonomyThreshold, "decline"),
            Some(CardKind::PermissionEscalation) => verdict(CardKind::PermissionEscalation, "deny"),
            Some(CardKind::ConnectionSetup) => {
                let CardPayload::ConnectionSetup(s) = &c else {
                    unreachable!()
                };
                setup(&s.step_type, "cancel")
            }
            Some(CardKind::ConnectionFailure) => recovery("skip"),
            Some(k @ (CardKind::Decision | CardKind::SecureInput)) => panic!("{k:?}"),
        };
        assert_eq!(no, safe, "{}", c.card_type());
    }
}

#[test]
fn a_plan_above_the_limit_gets_no_approve_button_and_a_review_link() {
    let s = signer();
    let goal = plan(WorkItemType::Goal, "Watch the backups", "check nightly");
    assert_eq!(goal.risk().unwrap().level, RiskLevel::High);
    assert!(!approvable_here(&goal, RiskLevel::Medium));
    let r = render("req-1", &goal, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
    assert_eq!(actions(&s, &r), vec!["no"], "only the safe side");
    let urls: Vec<&str> = buttons(&r)
        .iter()
        .filter_map(|b| b.url.as_deref())
        .collect();
    assert_eq!(urls, vec![WEB]);
    let text = text_of(&r);
    assert!(text.contains("This is high risk"), "{text}");
    assert!(text.contains("Review"), "{text}");
    // Without a web URL: no link button, and the text says where to go.
    let r = render("req-1", &goal, &ctx(&s, RiskLevel::Medium, None)).unwrap();
    assert!(buttons(&r).iter().all(|b| b.url.is_none()));
    assert!(text_of(&r).contains("open the web app"));
    // A loopback web app (no public_url): Telegram refuses URL buttons to
    // it, so the address is in the text and there is no link button.
    for local in [
        "http://127.0.0.1:8420/",
        "http://localhost:8420/",
        "http://[::1]:8420/",
    ] {
        let r = render("req-1", &goal, &ctx(&s, RiskLevel::Medium, Some(local))).unwrap();
        assert!(buttons(&r).iter().all(|b| b.url.is_none()), "{local}");
        assert_eq!(actions(&s, &r), vec!["no"]);
        let text = text_of(&r);
        assert!(
            text.contains("open the web app at") && text.contains("8420"),
            "{local}: {text}"
        );
    }
    // A typed "approve" still maps, so the daemon's check is what refuses it.
    let yes = answer_for_text(&goal, "approve").unwrap();
    assert!(is_affirmative(&yes) && !approvable_here(&goal, RiskLevel::Medium));
    // Raising the limit brings the button back.
    let r = render("req-1", &goal, &ctx(&s, RiskLevel::High, Some(WEB))).unwrap();
    assert_eq!(actions(&s, &r), vec!["ok", "no"]);
    // A goal's terms (how long, how many fix tasks, which zone) are shown.
    let terms = silas_core::cards::with_goal_terms(
        goal,
        "Europe/Vienna",
        silas_core::goal_terms::StandingLimits {
            ttl_minutes: 1440,
            max_executions: 3,
        },
    );
    let r = render("req-1", &terms, &ctx(&s, RiskLevel::High, Some(WEB))).unwrap();
    let text = text_of(&r);
    assert!(
        text.contains(
            "Approval: standing for 1 day from your answer, covering at most 3 fix tasks"
        ),
        "{text}"
    );
}

#[test]
fn a_medium_plan_is_approvable_with_a_button() {
    let s = signer();
    let p = plan(WorkItemType::Task, "Fix the build", "make it green");
    assert_eq!(p.risk().unwrap().level, RiskLevel::Medium);
    assert!(approvable_here(&p, RiskLevel::Medium));
    assert!(!approvable_here(&p, RiskLevel::Low));
    let r = render("req-1", &p, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
    assert_eq!(actions(&s, &r), vec!["ok", "no"]);
    assert!(
        buttons(&r).iter().all(|b| b.url.is_none()),
        "no review link"
    );
    let text = text_of(&r);
    assert!(text.contains("Risk: medium"), "{text}");
    assert!(
        text.contains("make it green") && text.contains("Budget"),
        "{text}"
    );
}

#[test]
fn other_cards_above_the_limit_keep_only_their_safe_side() {
    let s = signer();
    let esc = card(
        "permission_escalation",
        json!({"connection_name": "gmail", "requested_permissions": ["send"]}),
    );
    let r = render("r", &esc, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
    assert_eq!(actions(&s, &r), vec!["no"]);
    assert!(buttons(&r).iter().any(|b| b.url.as_deref() == Some(WEB)));
    // A non-http(s) web URL makes no button (Telegram would refuse the message).
    let r = render(
        "r",
        &esc,
        &ctx(&s, RiskLevel::Medium, Some("javascript:alert(1)")),
    )
    .unwrap();
    assert!(buttons(&r).iter().all(|b| b.url.is_none()));
}

/// Every MarkdownV2-reserved character is escaped except the renderer's own
/// bold markers, which pair up; returns the text as Telegram shows it.
fn check_markdown(text: &str) -> String {
    const RESERVED: &str = "_*[]()~`>#+-=|{}.!\\";
    let mut shown = String::new();
    let mut stars = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let next = chars.next().expect("dangling backslash");
            assert!(RESERVED.contains(next), "needless escape of {next:?}");
            shown.push(next);
        } else if c == '*' {
            stars += 1;
        } else {
            assert!(!RESERVED.contains(c), "unescaped {c:?} in {text}");
            shown.push(c);
        }
    }
    assert_eq!(stars % 2, 0, "unbalanced bold");
    shown
}

#[test]
fn hostile_card_text_is_escaped() {
    let s = signer();
    let hostile = "_*[]()~>#+-=|{}.! [link](http://evil) `code` \\";
    let cards = [
        plan(WorkItemType::Task, hostile, hostile),
        card(
            "decision",
            json!({"question": hostile, "options": [hostile]}),
        ),
        card(
            "connection_failure",
            json!({"service": hostile, "message": hostile, "recovery_options": [{"action": "x", "label": hostile}]}),
        ),
        card(
            "secure_input_request",
            json!({"label": hostile, "input_hint": hostile}),
        ),
    ];
    for c in &cards {
        let r = render("r", c, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
        let shown = check_markdown(text_of(&r));
        assert!(shown.contains(hostile), "{shown}");
    }
    for (c, _) in every_card() {
        let r = render("r", &c, &ctx(&s, RiskLevel::Low, Some(WEB))).unwrap();
        check_markdown(text_of(&r));
    }
}

#[test]
fn a_huge_body_is_cut_to_fit_one_message() {
    let s = signer();
    for body in ["x".repeat(10_000), ".".repeat(10_000), "😀".repeat(10_000)] {
        let mut w = item(WorkItemType::Goal, &"T".repeat(1000), &body);
        w.tasks = vec!["t".repeat(500); 40];
        let p = proposed_plan_card(&w, "h", "i", "o", "o");
        let r = render("r", &p, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
        let text = text_of(&r);
        assert!(utf16_len(text) <= MAX_MESSAGE_UTF16, "{}", utf16_len(text));
        check_markdown(text);
        // What the owner needs to answer survives the cut.
        assert!(text.contains('…'));
        assert!(text.contains("This is high risk"), "{text}");
        assert!(text.contains("Budget"));
    }
}

#[test]
fn secure_input_is_a_link_and_never_an_answer() {
    let s = signer();
    let c = secure_input_card("the OpenAI key", Some("starts with sk-"), Value::Null);
    let r = render("ref-1", &c, &ctx(&s, RiskLevel::Irreversible, Some(WEB))).unwrap();
    let b = buttons(&r);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].url.as_deref(), Some(WEB));
    assert!(b[0].callback_data.is_none());
    let shown = check_markdown(text_of(&r));
    assert!(
        shown.contains("Silas needs the OpenAI key.")
            && shown
                .contains("Enter it in the web app's secure form — never paste it into this chat."),
        "{shown}"
    );
    for said in ["approve", "1", "sk-abc", "the OpenAI key"] {
        assert_eq!(answer_for_text(&c, said), None, "{said}");
    }
    assert_eq!(answer_for_button(&c, "ok"), None);
    assert!(!approvable_here(&c, RiskLevel::Irreversible));
    let r = render("ref-1", &c, &ctx(&s, RiskLevel::Irreversible, None)).unwrap();
    assert_eq!(r.keyboard, None);
    assert!(check_markdown(text_of(&r)).contains("Open the web app"));
    // A setup step that collects a secret is the same: a link, and Cancel.
    let step = card(
        "connection_setup_step",
        json!({"step_type": "secure_input", "request": {"label": "PAT"}}),
    );
    let r = render("r", &step, &ctx(&s, RiskLevel::Irreversible, Some(WEB))).unwrap();
    assert_eq!(actions(&s, &r), vec!["cancel"]);
    assert!(buttons(&r).iter().any(|b| b.url.as_deref() == Some(WEB)));
}

#[test]
fn text_fallback_table() {
    let p = plan(WorkItemType::Task, "t", "b");
    let dec = card(
        "decision",
        json!({"question": "Which?", "options": ["red", {"value": "b", "label": "Blue"}]}),
    );
    let sug = card("suggestion", json!({"suggestion": "tidy"}));
    let gate = gate_card("g", json!(1), Value::Null);
    let table: Vec<(&CardPayload, &str, Option<CardAnswer>)> = vec![
        (&p, "approve", Some(APPROVED)),
        (&p, " Yes ", Some(APPROVED)),
        (&p, "OK!", Some(APPROVED)),
        (&p, "✅", Some(APPROVED)),
        (&p, "✔️", Some(APPROVED)),
        (&p, "DECLINE", Some(DECLINED)),
        (&p, "no.", Some(DECLINED)),
        (&p, "1", None),
        (&p, "maybe", None),
        (&p, "", None),
        (&gate, "approve", Some(verdict(CardKind::Gate, "approve"))),
        (&gate, "block", Some(verdict(CardKind::Gate, "block"))),
        (&dec, "1", Some(choice(CardKind::Decision, "red"))),
        (&dec, " 2 ", Some(choice(CardKind::Decision, "b"))),
        (&dec, "3", None),
        (&dec, "0", None),
        (&dec, "blue", Some(choice(CardKind::Decision, "b"))),
        (&dec, "approve", None),
        (&dec, "maybe", None),
        (&sug, "yes", Some(choice(CardKind::Suggestion, "do_it"))),
        (&sug, "1", Some(choice(CardKind::Suggestion, "do_it"))),
        (&sug, "2", Some(choice(CardKind::Suggestion, "not_now"))),
        (
            &sug,
            "not now",
            Some(choice(CardKind::Suggestion, "not_now")),
        ),
        (&sug, "3", None),
    ];
    for (c, said, want) in table {
        assert_eq!(answer_for_text(c, said), want, "{} {said:?}", c.card_type());
    }
}

#[test]
fn options_beyond_the_buttons_go_to_the_web_app() {
    let s = signer();
    let opts: Vec<String> = (0..12).map(|i| format!("option {i}")).collect();
    let dec = card("decision", json!({"question": "Pick", "options": opts}));
    let r = render("r", &dec, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
    let acts = actions(&s, &r);
    assert_eq!(acts, (0..8).map(|i| format!("o{i}")).collect::<Vec<_>>());
    assert!(check_markdown(text_of(&r)).contains("4 more choices in the web app"));
    assert_eq!(buttons(&r)[7].text, "8. Option 7");
    assert_eq!(answer_for_text(&dec, "9"), None);
    // A label longer than a button allows is cut.
    let long = card(
        "decision",
        json!({"question": "Pick", "options": ["y".repeat(200)]}),
    );
    let r = render("r", &long, &ctx(&s, RiskLevel::Medium, None)).unwrap();
    assert_eq!(buttons(&r)[0].text.chars().count(), MAX_BUTTON_LABEL);
}

#[test]
fn affirmative_answers_are_the_ones_that_approve_or_widen() {
    use CardKind as K;
    for yes in [
        APPROVED,
        verdict(K::Gate, "approve"),
        verdict(K::PermissionEscalation, "just_this_once"),
        batch("approve"),
        draft("approve"),
        choice(K::Suggestion, "do_it"),
        setup("device_code", "done"),
        recovery("reauth"),
    ] {
        assert!(is_affirmative(&yes), "{yes:?}");
    }
    for no in [
        DECLINED,
        verdict(K::Gate, "block"),
        verdict(K::AutonomyThreshold, "tighten_now"),
        verdict(K::PermissionEscalation, "deny"),
        batch("decline"),
        draft("reject"),
        draft("rephrase"),
        choice(K::Suggestion, "not_now"),
        setup("device_code", "cancel"),
        setup("device_code", "trouble"),
        recovery("skip"),
    ] {
        assert!(!is_affirmative(&no), "{no:?}");
    }
}

#[test]
fn outcome_lines() {
    let p = plan(WorkItemType::Task, "t", "b");
    assert_eq!(outcome_line(&p, &APPROVED), "✅ Approved");
    assert_eq!(outcome_line(&p, &DECLINED), "❌ Declined");
    let gate = gate_card("g", json!(1), Value::Null);
    assert_eq!(
        outcome_line(&gate, &verdict(CardKind::Gate, "block")),
        "⛔ Blocked"
    );
    let dec = card(
        "decision",
        json!({"question": "Which?", "options": [{"value": "b", "label": "Blue"}]}),
    );
    assert_eq!(
        outcome_line(&dec, &choice(CardKind::Decision, "b")),
        "Chosen: Blue"
    );
    // Free text and edited drafts (answered in the web app) are never echoed.
    let free = CardAnswer::Card {
        kind: CardKind::Decision,
        response: CardResponse::Choice {
            selected_value: None,
            freetext: Some("secret plans".into()),
        },
    };
    assert_eq!(outcome_line(&dec, &free), "Answered in your own words");
    let d = card("draft_review", json!({"draft": "x"}));
    let edited = CardAnswer::Card {
        kind: CardKind::DraftReview,
        response: CardResponse::Draft {
            verdict: "edit".into(),
            edited_text: Some("my words".into()),
        },
    };
    assert_eq!(outcome_line(&d, &edited), "✅ Sent with your edits");
    assert_eq!(timed_out_line(&p), "⏱ Timed out — declined (safe default)");
    assert_eq!(
        timed_out_line(&card("suggestion", json!({}))),
        "⏱ Timed out — not now (safe default)"
    );
    for (c, expected) in every_card() {
        for (_, a) in expected {
            assert!(!outcome_line(&c, &a).is_empty());
        }
    }
}

proptest::proptest! {
    /// Any title, body and option text: the message parses as the
    /// renderer's own markup only, fits, and every button stays in bounds.
    #[test]
    fn any_card_text_renders_escaped_and_fits(
        title in "[a-z_*\\[\\]()~`>#+\\-=|{}.!\\\\ 😀é\n]{0,80}",
        body in "[a-z_*\\[\\]()~`>#+\\-=|{}.!\\\\ 😀é\n]{0,300}",
        repeat in 1usize..60,
    ) {
        let s = signer();
        let body = body.repeat(repeat);
        let cards = [
            plan(WorkItemType::Task, &title, &body),
            card("decision", json!({"question": title, "options": [body.clone(), title.clone()]})),
            card("draft_review", json!({"context": title, "draft": body})),
        ];
        for c in &cards {
            let r = render("r", c, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
            let text = text_of(&r);
            proptest::prop_assert!(utf16_len(text) <= MAX_MESSAGE_UTF16);
            check_markdown(text);
            for b in buttons(&r) {
                proptest::prop_assert!(b.text.chars().count() <= MAX_BUTTON_LABEL);
                if let Some(d) = &b.callback_data {
                    proptest::prop_assert!(d.len() <= MAX_CALLBACK_DATA);
                }
            }
        }
    }
}

#[test]
fn a_workspace_plan_shows_the_workspace_its_path_and_access() {
    let s = signer();
    let mut w = item(WorkItemType::Task, "Tidy the readme", "tidy it");
    w.workspace = Some(silas_core::model::workspace::WorkspaceUse {
        access: silas_core::model::workspace::Access::Write,
        extra_paths: vec!["/opt/venv".into()],
        ..silas_core::model::workspace::WorkspaceUse::read("site")
    });
    let mut p = proposed_plan_card(&w, "h1", "in-1", "owner", "owner");
    if let CardPayload::Plan(pc) = &mut p {
        pc.plan.workspace.as_mut().unwrap().path = Some("/srv/site".into());
    }
    let r = render("req-1", &p, &ctx(&s, RiskLevel::Medium, Some(WEB))).unwrap();
    let text = text_of(&r);
    // MarkdownV2 escapes '(' ')' '-' '.' and '_'.
    assert!(
        text.contains("Workspace: site \\(/srv/site\\) — write; applies after review"),
        "{text}"
    );
    assert!(text.contains("/opt/venv"), "{text}");
}

#[test]
fn a_change_card_lists_the_files_flags_check_edits_and_links_the_diff() {
    let s = signer();
    let r = render(
        "req-1",
        &changes("apply", true),
        &ctx(&s, RiskLevel::High, Some(WEB)),
    )
    .unwrap();
    let text = text_of(&r);
    for needle in [
        "Apply changes for",
        "clock",
        "modified clock\\.py \\(\\+1 −1\\)",
        "check file",
        "define the checks",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let b = buttons(&r);
    assert!(
        b.iter()
            .any(|b| b.url.as_deref() == Some(WEB) && b.text.contains("diff")),
        "no diff link: {b:?}"
    );
    assert_eq!(actions(&s, &r), vec!["ok", "no"]);
    // Above the chat's approval limit (high: it edits the tests), only the
    // safe side is a button.
    let r = render(
        "req-1",
        &changes("apply", true),
        &ctx(&s, RiskLevel::Medium, Some(WEB)),
    )
    .unwrap();
    assert_eq!(actions(&s, &r), vec!["no"]);
    // A loopback web app is named in the text, never a button.
    let r = render(
        "req-1",
        &changes("apply", false),
        &ctx(&s, RiskLevel::High, Some("http://127.0.0.1:8420/")),
    )
    .unwrap();
    assert!(buttons(&r).iter().all(|b| b.url.is_none()));
    assert!(text_of(&r).contains("127\\.0\\.0\\.1"), "{}", text_of(&r));
    // The undo card: undo / keep, the window named.
    let r = render(
        "req-2",
        &changes("undo", false),
        &ctx(&s, RiskLevel::Medium, Some(WEB)),
    )
    .unwrap();
    let labels: Vec<&str> = buttons(&r).iter().map(|b| b.text.as_str()).collect();
    assert_eq!(labels, vec!["✅ Undo", "❌ Keep"]);
    assert!(
        text_of(&r).contains("Undo is possible until"),
        "{}",
        text_of(&r)
    );
}
