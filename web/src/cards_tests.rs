use super::*;
use serde_json::json;
use silas_core::cards::{self as model, ToolCall};
use silas_core::model::work::{WorkItem, WorkItemType};
use silas_core::risk::PlanView;

fn part(card_type: &str, payload: Value) -> CardPayload {
    CardPayload::from_parts(card_type, payload).unwrap()
}

/// The frame as the PWA receives it.
fn wire(card: &CardPayload) -> Value {
    serde_json::to_value(card_frame("r1", card)).unwrap()
}

#[test]
fn plan_card_shows_the_plan_view_and_its_risk() {
    let mut t = WorkItem::new("t1", WorkItemType::Task, "Fix the build");
    t.body = "make it green".into();
    let f = card_frame(
        "r1",
        &model::proposed_plan_card(&t, "h", "i", "ws-2", "owner"),
    );
    let ServerFrame::ApprovalRequest {
        title,
        body,
        plan,
        risk_level,
        from_scope,
        budget,
        ..
    } = f
    else {
        panic!("not an approval_request")
    };
    assert_eq!(
        (title.as_str(), body.as_str()),
        ("Fix the build", "make it green")
    );
    assert_eq!(*plan.unwrap(), PlanView::of(&t));
    assert_eq!(risk_level, PlanView::of(&t).risk.level);
    assert_eq!(from_scope.as_deref(), Some("ws-2"));
    assert_eq!(budget, serde_json::to_value(&t.budget).unwrap());
}

#[test]
fn tool_card_is_a_plan_style_approval_without_a_plan() {
    let t = WorkItem::new("t1", WorkItemType::Task, "Fetch");
    let card = model::tool_card(
        &t,
        ToolCall {
            tool_name: "web_fetch",
            arguments: &json!({"url": "https://x"}),
            reason: "outside the allowlist",
            attempt: 1,
        },
        json!({"secret_resume_state": 1}),
    );
    let v = wire(&card);
    assert_eq!(v["type"], "approval_request");
    assert_eq!(v["title"], "Allow web_fetch for 'Fetch'?");
    assert!(v["body"].as_str().unwrap().contains("https://x"));
    assert_eq!(v["risk_level"], "high");
    assert_eq!(v["plan"], Value::Null);
    // The executor's resume state is not shown.
    assert!(!v.to_string().contains("secret_resume_state"));
}

#[test]
fn decision_cards_render_their_fields_and_server_risk() {
    let cases = [
        (
            "gate_approval",
            json!({"gate_name": "spend", "value": 5, "context": {"a": 1}}),
            json!({"type": "gate_approval", "request_id": "r1", "gate_name": "spend",
                   "value": 5, "context": {"a": 1}, "risk_level": "medium"}),
        ),
        (
            "checkpoint",
            json!({"message": "Go on?", "options": ["continue", "stop"]}),
            json!({"type": "checkpoint", "request_id": "r1", "message": "Go on?",
                   "options": ["continue", "stop"], "risk_level": "low"}),
        ),
        (
            "batch_review",
            json!({"batch": {"action": "delete", "items": [{"id": "a"}]}}),
            json!({"type": "batch_review", "request_id": "r1",
                   "batch": {"action": "delete", "items": [{"id": "a"}]},
                   "risk_level": "irreversible"}),
        ),
        (
            "draft_review",
            json!({"context": "reply to Bob", "draft": "Hi", "metadata": {}}),
            json!({"type": "draft_review", "request_id": "r1", "context": "reply to Bob",
                   "draft": "Hi", "metadata": {}, "risk_level": "medium"}),
        ),
        (
            "decision",
            json!({"question": "Which?", "options": ["a"], "allow_freetext": true}),
            json!({"type": "decision", "request_id": "r1", "question": "Which?",
                   "options": ["a"], "allow_freetext": true, "risk_level": "low"}),
        ),
        (
            "suggestion",
            json!({"suggestion": {"text": "tidy up", "risk_level": "medium"}}),
            json!({"type": "suggestion", "request_id": "r1",
                   "suggestion": {"text": "tidy up", "risk_level": "medium"},
                   "risk_level": "medium"}),
        ),
        (
            "autonomy_threshold_review",
            json!({"proposal": {"changes": [{"direction": "widen"}]}}),
            json!({"type": "autonomy_threshold_review", "request_id": "r1",
                   "proposal": {"changes": [{"direction": "widen"}]}, "risk_level": "high"}),
        ),
        (
            "permission_escalation",
            json!({"connection_name": "gh", "current_permissions": ["read"],
                   "requested_permissions": ["write"], "reason": "push",
                   "risk_level": "low"}),
            json!({"type": "permission_escalation", "request_id": "r1",
                   "connection_name": "gh", "current_permissions": ["read"],
                   "requested_permissions": ["write"], "reason": "push",
                   "risk_level": "medium"}),
        ),
        (
            "connection_failure",
            json!({"failure_type": "auth", "service": "gh", "message": "expired",
                   "recovery_options": [{"action": "reauth"}]}),
            json!({"type": "connection_failure", "request_id": "r1", "failure_type": "auth",
                   "service": "gh", "message": "expired",
                   "recovery_options": [{"action": "reauth"}], "risk_level": "low"}),
        ),
    ];
    for (card_type, payload, want) in cases {
        assert_eq!(wire(&part(card_type, payload)), want, "{card_type}");
    }
}

#[test]
fn setup_step_keeps_its_fields_but_the_server_sets_the_risk() {
    let card = part(
        "connection_setup_step",
        json!({"step_type": "device_code", "code": "AB-12", "risk_level": "irreversible"}),
    );
    let v = wire(&card);
    assert_eq!(v["type"], "connection_setup_step");
    assert_eq!(v["step_type"], "device_code");
    assert_eq!(v["code"], "AB-12");
    // A carried level may raise the floor (low), so it stays irreversible.
    assert_eq!(v["risk_level"], "irreversible");
    let low = part(
        "connection_setup_step",
        json!({"step_type": "device_code", "risk_level": "bogus"}),
    );
    assert_eq!(wire(&low)["risk_level"], "low");
}

#[test]
fn secure_input_card_carries_only_metadata() {
    let card = model::secure_input_card("GitHub token", Some("ghp_…"), json!({"help_url": null}));
    let v = wire(&card);
    assert_eq!(
        v,
        json!({"type": "secure_input_request", "ref_id": "r1", "label": "GitHub token",
               "input_hint": "ghp_…", "guidance": {"help_url": null}})
    );
}

fn client(v: Value) -> ClientFrame {
    serde_json::from_value(v).unwrap()
}

#[test]
fn every_answer_frame_maps_to_its_card_kind() {
    let cases = [
        (
            json!({"type": "gate_response", "request_id": "r", "verdict": "approve"}),
            CardKind::Gate,
        ),
        (
            json!({"type": "checkpoint", "request_id": "r", "verdict": "go"}),
            CardKind::Checkpoint,
        ),
        (
            json!({"type": "batch_review_response", "request_id": "r", "verdict": "approve"}),
            CardKind::BatchReview,
        ),
        (
            json!({"type": "draft_review_response", "request_id": "r", "verdict": "reject"}),
            CardKind::DraftReview,
        ),
        (
            json!({"type": "decision_response", "request_id": "r", "selected_value": "a"}),
            CardKind::Decision,
        ),
        (
            json!({"type": "suggestion_response", "request_id": "r", "selected_value": "do_it"}),
            CardKind::Suggestion,
        ),
        (
            json!({"type": "autonomy_threshold_response", "request_id": "r", "verdict": "decline"}),
            CardKind::AutonomyThreshold,
        ),
        (
            json!({"type": "secure_input_completed", "ref_id": "r", "success": true}),
            CardKind::SecureInput,
        ),
        (
            json!({"type": "connection_setup_response", "request_id": "r",
                   "step_type": "device_code", "action": "done"}),
            CardKind::ConnectionSetup,
        ),
        (
            json!({"type": "permission_escalation_response", "request_id": "r", "verdict": "deny"}),
            CardKind::PermissionEscalation,
        ),
        (
            json!({"type": "connection_failure_response", "request_id": "r",
                   "selected_action": "skip"}),
            CardKind::ConnectionFailure,
        ),
    ];
    for (frame, want) in cases {
        let text = frame.to_string();
        match answer(client(frame)).unwrap() {
            Some(CardAnswerFrame::Card {
                request_id, kind, ..
            }) => {
                assert_eq!((request_id.as_str(), kind), ("r", want), "{text}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    // The typed shape of a batch answer: absent ids read as none.
    assert_eq!(
        answer(client(
            json!({"type": "batch_review_response", "request_id": "r",
                             "verdict": "approve"})
        ))
        .unwrap(),
        Some(CardAnswerFrame::Card {
            request_id: "r".into(),
            kind: CardKind::BatchReview,
            response: CardResponse::Batch {
                verdict: "approve".into(),
                selected_item_ids: vec![],
            },
        })
    );
}

#[test]
fn approval_answers_go_to_the_approval_engine_and_unknown_verdicts_fail() {
    let ok = answer(client(
        json!({"type": "approval_response", "request_id": "p", "verdict": "approve"}),
    ))
    .unwrap();
    assert_eq!(
        ok,
        Some(CardAnswerFrame::Approval {
            request_id: "p".into(),
            verdict: ApprovalVerdict::Approved,
        })
    );
    let bad = answer(client(
        json!({"type": "approval_response", "request_id": "p", "verdict": "sure"}),
    ))
    .unwrap_err();
    assert_eq!(bad.request_id.as_deref(), Some("p"));
    assert_eq!(
        answer(client(json!({"type": "message", "text": "hi"}))).unwrap(),
        None
    );
}

#[test]
fn change_card_shows_files_diff_and_flags_without_the_token() {
    let card = part(
        "apply_changes",
        json!({"work_item_id": "w1", "title": "Fix", "phase": "apply",
               "workspace": "clock", "path": "/home/me/clock", "plan_hash": "h",
               "changes_sha256": "s",
               "files": [{"path": "tests/t.py", "kind": "modified", "added": 1, "removed": 1,
                          "protected": true}],
               "total_added": 1, "total_removed": 1, "diff": "--- a/tests/t.py\n",
               "decision": {"verdict": "declined", "reason": "x"}}),
    );
    let v = wire(&card);
    assert_eq!(v["type"], "apply_changes");
    assert_eq!(v["phase"], "apply");
    assert_eq!(v["files"][0]["path"], "tests/t.py");
    assert_eq!(v["protected_edits"], json!(["tests/t.py"]));
    assert!(
        v["protected_note"]
            .as_str()
            .unwrap()
            .contains("the checks ran without these edits"),
        "{v}"
    );
    assert_eq!(v["risk_level"], "high");
    assert_eq!(v["diff"], "--- a/tests/t.py\n");
    // What the owner's answer recorded (and the hashes it binds) stays on
    // the server.
    let text = v.to_string();
    for hidden in ["decision", "changes_sha256", "plan_hash"] {
        assert!(!text.contains(hidden), "{hidden} reached the frame: {text}");
    }
    // Answered like a plan: approval_response.
    let a = answer(
        serde_json::from_value(json!({"type": "approval_response", "request_id": "r1",
                                      "verdict": "approved"}))
        .unwrap(),
    )
    .unwrap()
    .unwrap();
    assert!(format!("{a:?}").contains("Approved"), "{a:?}");
}
