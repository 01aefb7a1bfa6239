use super::*;
use crate::model::work::WorkItemType;
use serde_json::json;

fn task() -> WorkItem {
    let mut t = WorkItem::new("t1", WorkItemType::Task, "Fix the build");
    t.body = "make it green".into();
    t
}

#[test]
fn card_types_round_trip_and_match_the_spec_tables() {
    for k in CardKind::ALL {
        assert_eq!(CardKind::from_card_type(k.card_type()), Some(k));
    }
    assert_eq!(CardKind::from_card_type(TOOL_CARD), None);
    let tool = tool_card(
        &task(),
        ToolCall {
            tool_name: "shell_exec",
            arguments: &json!({"cmd": "ls"}),
            reason: "needs approval",
            attempt: 2,
        },
        json!({"opaque": true}),
    );
    assert_eq!(tool.card_type(), TOOL_CARD);
    assert_eq!(tool.kind(), None);
    assert!(tool.is_approval());
}

#[test]
fn the_stored_layout_is_card_type_plus_payload() {
    let card = gate_card("spend", json!(12), json!({"why": "x"}));
    let v = serde_json::to_value(&card).unwrap();
    assert_eq!(v["card_type"], "gate_approval");
    assert_eq!(v["payload"]["gate_name"], "spend");
    // A record written before the payload was typed decodes unchanged.
    let old = json!({"card_type": "decision",
                     "payload": {"question": "Which?", "options": ["a", "b"]}});
    let d: CardPayload = serde_json::from_value(old).unwrap();
    assert_eq!(d.kind(), Some(CardKind::Decision));
    let CardPayload::Decision(d) = d else {
        panic!("not a decision")
    };
    assert_eq!(d.question, "Which?");
    assert!(!d.allow_freetext);
}

#[test]
fn plan_builders_carry_the_view_the_hash_covers() {
    let t = task();
    let CardPayload::Plan(p) = proposed_plan_card(&t, "h1", "in-1", "owner", "owner") else {
        panic!("not a plan card")
    };
    assert_eq!(p.plan_hash, "h1");
    assert_eq!(p.plan.body, "make it green");
    assert_eq!(p.from_scope, None, "the owner's own plan names no scope");
    assert_eq!(p.origin, CardOrigin::Turn);
    let CardPayload::Plan(c) = proposed_plan_card(&t, "h1", "in-1", "ws-7", "owner") else {
        panic!("not a plan card")
    };
    assert_eq!(c.from_scope.as_deref(), Some("ws-7"));
    let CardPayload::Plan(f) = fix_task_card(&t, "h2", "g1", "check failed") else {
        panic!("not a plan card")
    };
    assert_eq!(
        (f.goal_id.as_deref(), f.origin, f.renewal),
        (Some("g1"), CardOrigin::WorkExecutor, false)
    );
    let CardPayload::Plan(r) = renewal_card(&t, "h3", "expired") else {
        panic!("not a plan card")
    };
    assert!(r.renewal);
    assert_eq!(r.goal_id.as_deref(), Some("t1"));
    // Round trip through the stored form.
    let card = renewal_card(&t, "h3", "expired");
    let back: CardPayload = serde_json::from_value(serde_json::to_value(&card).unwrap()).unwrap();
    assert_eq!(back, card);
    let stored = serde_json::to_value(&card).unwrap();
    assert_eq!(stored["card_type"], PLAN_CARD);
    let payload = stored["payload"].clone();
    assert_eq!(payload["plan_hash"], "h3");
    assert_eq!(payload["work_item_id"], "t1");
    assert_eq!(CardPayload::from_parts(PLAN_CARD, payload).unwrap(), card);
}

#[test]
fn risk_is_decided_per_card_type() {
    let t = task();
    let plan = fix_task_card(&t, "h", "g", "r");
    assert_eq!(plan.risk().unwrap(), PlanView::of(&t).risk);
    let fetch = tool_card(
        &t,
        ToolCall {
            tool_name: "web_fetch",
            arguments: &json!({}),
            reason: "",
            attempt: 1,
        },
        Value::Null,
    );
    assert_eq!(fetch.risk().unwrap().level, RiskLevel::High);
    assert_eq!(secure_input_card("token", None, Value::Null).risk(), None);
    assert_eq!(
        gate_card("g", Value::Null, Value::Null)
            .risk()
            .unwrap()
            .level,
        RiskLevel::Medium
    );
    // A carried level nobody can parse is ignored, never an error.
    let p = CardPayload::from_parts(
        "permission_escalation",
        json!({"connection_name": "gh", "risk_level": "bogus"}),
    )
    .unwrap();
    assert_eq!(p.risk().unwrap().level, RiskLevel::High);
}

#[test]
fn the_protected_note_says_whether_the_checks_saw_the_edits() {
    assert_eq!(protected_note(&[], false), None);
    assert_eq!(protected_note(&[], true), None);
    let without = protected_note(&["tests/t.py", "pytest.ini"], false).unwrap();
    assert!(without.contains("tests/t.py, pytest.ini"), "{without}");
    assert!(without.contains("ran without these edits"), "{without}");
    let with = protected_note(&["tests/new.py"], true).unwrap();
    assert!(with.contains("ran on these edits"), "{with}");
    assert!(!with.contains("without"), "{with}");
}
