//! Unit tests of the card lifecycle policy.
use super::*;

/// A card of `kind` decoded from a payload as a producer would write it; a
/// plan card is built from a work item (its payload holds the plan view).
fn card(kind: CardKind, payload: Value) -> PendingCard {
    let now = Timestamp::now();
    let card = if kind == CardKind::Plan {
        let item = serde_json::from_value(json!({
            "id": "w1", "type": "task", "title": "t", "body": "b",
        }))
        .unwrap();
        CardPayload::Plan(silas_core::cards::plan_card(&item, "ab"))
    } else {
        CardPayload::from_parts(kind.card_type(), payload).unwrap()
    };
    PendingCard {
        request_id: "r1".into(),
        scope_id: "owner".into(),
        card,
        created_at: now,
        expires_at: now.plus(chrono::Duration::minutes(30)),
        audience: silas_storage::CardAudience::Owner,
    }
}

#[test]
fn kinds_round_trip_and_names_match_the_spec_tables() {
    for k in CardKind::ALL {
        assert_eq!(CardKind::from_card_type(k.card_type()), Some(k));
    }
    assert_eq!(CardKind::from_card_type("fix_task"), None);
    assert_eq!(CardKind::Plan.card_type(), crate::turn::pipeline::PLAN_CARD);
}

#[test]
fn deadlines_are_300_s_for_plans_and_120_s_for_gates() {
    let t = CardTimeouts::default();
    let plan = card(CardKind::Plan, json!({}));
    assert_eq!(
        deadline(&plan, &t),
        plan.created_at.plus(chrono::Duration::seconds(300))
    );
    for k in [CardKind::Gate, CardKind::Checkpoint] {
        let c = card(k, json!({}));
        assert_eq!(
            deadline(&c, &t),
            c.created_at.plus(chrono::Duration::seconds(120))
        );
    }
    // An earlier expires_at wins; unknown card types get the plan timeout.
    let mut short = card(CardKind::Decision, json!({}));
    short.expires_at = short.created_at.plus(chrono::Duration::seconds(5));
    assert_eq!(deadline(&short, &t), short.expires_at);
    assert_eq!(t.for_card_type("fix_task"), DEFAULT_PLAN_TIMEOUT);
    assert!(!is_expired(&plan, &t, plan.created_at));
    assert!(is_expired(
        &plan,
        &t,
        plan.created_at.plus(chrono::Duration::seconds(300))
    ));
}

#[test]
fn every_safe_default_is_a_decline_and_passes_validation() {
    for k in CardKind::ALL {
        let c = card(k, json!({"step_type": "device_code"}));
        let d = safe_default(k, &c);
        match (&k, &d) {
            (CardKind::Gate, CardResponse::Verdict { verdict }) => assert_eq!(verdict, "block"),
            (CardKind::Suggestion, CardResponse::Choice { selected_value, .. }) => {
                assert_eq!(selected_value.as_deref(), Some("not_now"))
            }
            (CardKind::AutonomyThreshold, CardResponse::Verdict { verdict }) => {
                assert_eq!(verdict, "decline")
            }
            (CardKind::SecureInput, CardResponse::SecureInput { success }) => assert!(!success),
            _ => {}
        }
        // A decision card's default is "nothing chosen": valid as an
        // outcome, not as an owner answer.
        if k != CardKind::Decision {
            assert!(validate_response(k, &c, d).is_ok(), "{k:?}");
        }
    }
}

#[test]
fn answers_are_checked_against_card_scope_type_and_deadline() {
    let t = CardTimeouts::default();
    let c = card(CardKind::Gate, json!({}));
    let now = c.created_at;
    let ok = |r| check_answer(Some(&c), "r1", "owner", CardKind::Gate, r, false, &t, now);
    assert_eq!(ok(verdict("continue")), Ok(verdict("approve")));
    assert!(matches!(
        ok(verdict("maybe")),
        Err(CardRejection::Invalid { .. })
    ));
    // Another scope's card is unknown to it.
    assert_eq!(
        check_answer(
            Some(&c),
            "r1",
            "ws-9",
            CardKind::Gate,
            verdict("approve"),
            false,
            &t,
            now
        ),
        Err(CardRejection::Unknown("r1".into()))
    );
    assert!(matches!(
        check_answer(
            Some(&c),
            "r1",
            "owner",
            CardKind::Decision,
            verdict("x"),
            false,
            &t,
            now
        ),
        Err(CardRejection::WrongType { .. })
    ));
    let late = now.plus(chrono::Duration::seconds(121));
    assert_eq!(
        check_answer(
            Some(&c),
            "r1",
            "owner",
            CardKind::Gate,
            verdict("approve"),
            false,
            &t,
            late
        ),
        Err(CardRejection::Expired("r1".into()))
    );
    assert_eq!(
        check_answer(
            None,
            "r1",
            "owner",
            CardKind::Gate,
            verdict("approve"),
            true,
            &t,
            now
        ),
        Err(CardRejection::AlreadyAnswered("r1".into()))
    );
    assert_eq!(
        check_answer(
            None,
            "r1",
            "owner",
            CardKind::Gate,
            verdict("approve"),
            false,
            &t,
            now
        ),
        Err(CardRejection::Unknown("r1".into()))
    );
}

#[test]
fn response_validation_per_card_type() {
    let batch = card(
        CardKind::BatchReview,
        json!({"batch": {"items": [{"id": "a"}, {"id": "b"}]}}),
    );
    let sel = |v: &str, ids: &[&str]| CardResponse::Batch {
        verdict: v.into(),
        selected_item_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    assert!(
        validate_response(CardKind::BatchReview, &batch, sel("edit_selection", &["a"])).is_ok()
    );
    assert!(
        validate_response(CardKind::BatchReview, &batch, sel("edit_selection", &["z"])).is_err()
    );
    assert!(validate_response(CardKind::BatchReview, &batch, sel("approve", &["a"])).is_err());
    let decision = card(
        CardKind::Decision,
        json!({"options": [{"value": "a"}, {"value": "b"}], "allow_freetext": false}),
    );
    let choice = |v: Option<&str>, f: Option<&str>| CardResponse::Choice {
        selected_value: v.map(str::to_string),
        freetext: f.map(str::to_string),
    };
    assert!(validate_response(CardKind::Decision, &decision, choice(Some("a"), None)).is_ok());
    assert!(validate_response(CardKind::Decision, &decision, choice(Some("c"), None)).is_err());
    assert!(validate_response(CardKind::Decision, &decision, choice(None, Some("hm"))).is_err());
    let draft = card(CardKind::DraftReview, json!({}));
    let d = |v: &str, t: Option<&str>| CardResponse::Draft {
        verdict: v.into(),
        edited_text: t.map(str::to_string),
    };
    assert!(validate_response(CardKind::DraftReview, &draft, d("edit", None)).is_err());
    assert!(validate_response(CardKind::DraftReview, &draft, d("edit", Some("x"))).is_ok());
    let failure = card(
        CardKind::ConnectionFailure,
        json!({"recovery_options": [{"action": "reauth"}]}),
    );
    let rec = |a: &str| CardResponse::Recovery {
        selected_action: a.into(),
    };
    assert!(validate_response(CardKind::ConnectionFailure, &failure, rec("reauth")).is_ok());
    assert!(validate_response(CardKind::ConnectionFailure, &failure, rec("skip")).is_ok());
    assert!(validate_response(CardKind::ConnectionFailure, &failure, rec("rm")).is_err());
    // Wrong shape for the kind.
    assert!(validate_response(CardKind::Gate, &draft, d("approve", None)).is_err());
}

#[test]
fn audit_records_never_carry_free_text() {
    let c = card(CardKind::DraftReview, json!({}));
    let answer = CardAnswer {
        request_id: "r1".into(),
        kind: CardKind::DraftReview,
        response: CardResponse::Draft {
            verdict: "edit".into(),
            edited_text: Some("my private words".into()),
        },
        resolution: Resolution::Answered,
        origin: None,
    };
    let (event, data) = audit_record(&c, &answer);
    assert_eq!(event, "card_answered");
    assert!(!data.to_string().contains("private"), "{data}");
    assert_eq!(data["edited"], true);
}

#[test]
fn recently_resolved_is_bounded() {
    let mut r = RecentlyResolved::default();
    for i in 0..(RecentlyResolved::CAPACITY + 10) {
        r.remember(&format!("c{i}"), "owner");
    }
    assert!(!r.answered_in("c0", "owner"));
    assert!(r.answered_in(&format!("c{}", RecentlyResolved::CAPACITY + 9), "owner"));
}

#[test]
fn another_scope_cannot_tell_an_answered_card_from_none() {
    let mut r = RecentlyResolved::default();
    r.remember("c1", "web:alice");
    assert!(r.answered_in("c1", "web:alice"));
    assert!(!r.answered_in("c1", "web:mallory"));
    assert!(!r.answered_in("c2", "web:alice"));
    let t = CardTimeouts::default();
    let answer = CardResponse::Verdict {
        verdict: "approve".into(),
    };
    for (scope, says) in [
        ("web:alice", CardRejection::AlreadyAnswered("c1".into())),
        ("web:mallory", CardRejection::Unknown("c1".into())),
    ] {
        let got = check_answer(
            None,
            "c1",
            scope,
            CardKind::Plan,
            answer.clone(),
            r.answered_in("c1", scope),
            &t,
            Timestamp::now(),
        );
        assert_eq!(got, Err(says), "{scope}");
    }
}

#[test]
fn change_cards_live_until_their_own_expiry() {
    // An apply card waits as long as an approval lives (30 min here), not
    // the plan card's 300 s; an undo card exactly its window.
    let t = CardTimeouts::default();
    let now = Timestamp::now();
    for (phase, minutes) in [("apply", 30), ("undo", 5)] {
        let payload = json!({"work_item_id": "w1", "title": "t", "phase": phase,
            "workspace": "clock", "path": "/p", "plan_hash": "h", "changes_sha256": "s",
            "files": [], "total_added": 0, "total_removed": 0});
        let c = PendingCard {
            request_id: "r1".into(),
            scope_id: "owner".into(),
            card: CardPayload::from_parts("apply_changes", payload).unwrap(),
            created_at: now,
            expires_at: now.plus(chrono::Duration::minutes(minutes)),
            audience: silas_storage::CardAudience::Owner,
        };
        assert_eq!(deadline(&c, &t), c.expires_at, "{phase}");
        let after_plan_timeout = now.plus(chrono::Duration::seconds(301));
        assert_eq!(
            is_expired(&c, &t, after_plan_timeout),
            phase == "undo",
            "{phase}"
        );
    }
}

#[test]
fn a_plan_card_is_live_only_once_its_turn_committed_its_response() {
    let tmp = tempfile::tempdir().unwrap();
    let store = silas_storage::Store::open_in(tmp.path()).unwrap();
    let inbound = silas_storage::NewInbound {
        scope_id: "owner".into(),
        channel: "web".into(),
        sender_id: "owner".into(),
        text: "run it".into(),
        signed: None,
        connection_id: "c1".into(),
        ip: None,
        owner_authenticated: true,
        dedup_key: None,
    };
    let record = store.inbox().accept(inbound, Timestamp::now()).unwrap();
    let mut plan = card(CardKind::Plan, Value::Null);
    // A goal's fix-task card has no turn behind it: live at once.
    assert!(turn_committed(&store, &plan).unwrap());
    if let CardPayload::Plan(p) = &mut plan.card {
        p.inbox_id = Some(record.inbox_id.clone());
    }
    // Stored by step 12, before the response commits: a crash now replays
    // the turn, which files it again.
    assert!(!turn_committed(&store, &plan).unwrap());
    store
        .inbox()
        .record_response(&record.inbox_id, "Here is a plan.", None, Vec::new())
        .unwrap();
    assert!(turn_committed(&store, &plan).unwrap());
    // Other cards are never held back.
    let gate = card(
        CardKind::Gate,
        json!({"gate_name": "g", "reason": "r", "options": ["approve", "block"]}),
    );
    assert!(turn_committed(&store, &gate).unwrap());
}
