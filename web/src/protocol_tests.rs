use super::*;
use serde_json::json;

#[test]
fn error_frames_quote_client_values_only_as_a_bounded_prefix() {
    let long = "x".repeat(60 * 1024);
    let e = ProtocolError::new(
        "E_CARD_UNKNOWN",
        format!("no pending card {:?}", format!("{long}\"q")),
        Some(long.clone()),
    );
    let ServerFrame::Error {
        message,
        request_id,
        ..
    } = e.frame()
    else {
        panic!("not an error frame");
    };
    assert_eq!(message, format!("no pending card \"{}…\"", &long[..64]));
    assert_eq!(request_id, Some(format!("{}…", &long[..64])));
    // Short values, serde's backticks, an unterminated quote, and a
    // message with no quote at all.
    for (given, shown) in [
        (
            "unknown verdict \"maybe\"",
            "unknown verdict \"maybe\"".to_string(),
        ),
        (
            "frame has no string `type`",
            "frame has no string `type`".into(),
        ),
        (
            &format!("unknown variant `{long}`, expected one of `auth`"),
            format!("unknown variant `{}…`, expected one of `auth`", &long[..64]),
        ),
        (
            &format!("open \"{long}"),
            format!("open \"{}…", &long[..64]),
        ),
    ] {
        let ServerFrame::Error { message, .. } = ProtocolError::new("E", given, None).frame()
        else {
            panic!("not an error frame");
        };
        assert_eq!(message, shown);
    }
    let ServerFrame::Error { message, .. } = ProtocolError::new("E", long, None).frame() else {
        panic!("not an error frame");
    };
    assert_eq!(message.chars().count(), ERROR_MESSAGE_MAX_CHARS + 1);
    assert_eq!(
        clip("é".repeat(70).as_str()),
        format!("{}…", "é".repeat(64))
    );
}

#[test]
fn every_client_type_parses_with_spec_names() {
    let frames = [
        json!({"type": "auth", "token": "t"}),
        json!({"type": "message", "text": "hi"}),
        json!({"type": "approval_response", "request_id": "r", "verdict": "approved"}),
        json!({"type": "gate_response", "request_id": "r", "verdict": "continue"}),
        json!({"type": "checkpoint", "request_id": "r", "verdict": "ok"}),
        json!({"type": "batch_review_response", "request_id": "r", "verdict": "edit_selection", "selected_item_ids": ["a"]}),
        json!({"type": "draft_review_response", "request_id": "r", "verdict": "edit", "edited_text": "x"}),
        json!({"type": "decision_response", "request_id": "r", "selected_value": "a", "freetext": null}),
        json!({"type": "suggestion_response", "request_id": "r", "selected_value": "later"}),
        json!({"type": "autonomy_threshold_response", "request_id": "r", "verdict": "tighten_now"}),
        json!({"type": "secure_input_completed", "ref_id": "ref", "success": true}),
        json!({"type": "connection_setup_response", "request_id": "r", "step_type": "device_code", "action": "done"}),
        json!({"type": "permission_escalation_response", "request_id": "r", "verdict": "just_this_once"}),
        json!({"type": "connection_failure_response", "request_id": "r", "selected_action": "retry_later"}),
        json!({"type": "ack", "id": "00000000000000000007"}),
    ];
    for f in frames {
        let parsed = parse_client_frame(&f.to_string()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap()["type"], f["type"]);
    }
}

#[test]
fn invalid_frames_are_typed_errors_with_request_id() {
    let cases = [
        (
            r#"{"type":"batch_review_response","request_id":"r1","verdict":"edit_selection"}"#,
            Some("r1"),
        ),
        (
            r#"{"type":"batch_review_response","request_id":"r2","verdict":"approve","selected_item_ids":["x"]}"#,
            Some("r2"),
        ),
        (
            r#"{"type":"autonomy_threshold_response","request_id":"r3","verdict":"yolo"}"#,
            Some("r3"),
        ),
        (
            r#"{"type":"approval_response","request_id":"r4"}"#,
            Some("r4"),
        ),
        (
            r#"{"type":"approval_response","request_id":"r5","verdict":"approved","extra":1}"#,
            Some("r5"),
        ),
        (r#"{"type":"teleport"}"#, None),
        // A frame with no fields takes none either.
        (r#"{"type":"workspace_list","path":"/"}"#, None),
        (r#"{"text":"no type"}"#, None),
        (r#"not json"#, None),
        (r#"{"type":"message","text":"   "}"#, None),
    ];
    for (text, rid) in cases {
        let e = parse_client_frame(text).unwrap_err();
        assert_eq!(e.code, "E_CHANNEL_PROTOCOL", "{text}");
        assert_eq!(e.request_id.as_deref(), rid, "{text}");
        assert!(matches!(e.frame(), ServerFrame::Error { .. }));
    }
    let huge = format!(
        r#"{{"type":"message","text":"{}"}}"#,
        "a".repeat(MAX_FRAME_BYTES)
    );
    assert!(parse_client_frame(&huge).is_err());
}

#[test]
fn server_frames_serialise_with_spec_names() {
    let f = ServerFrame::WorkStatus {
        work_item_id: "w".into(),
        status: "done".into(),
        summary: "ok".into(),
        verification: json!([{"name": "tests", "passed": true, "reason": "exit 0"}]),
    };
    let v = serde_json::to_value(&f).unwrap();
    assert_eq!(v["type"], "work_status");
    assert_eq!(v["verification"][0]["passed"], true);
    let v = serde_json::to_value(ServerFrame::UndoOffer {
        request_id: "u1".into(),
        work_item_id: "w".into(),
        summary: "archived 3".into(),
        expires_at: "2026-01-01T00:05:00Z".into(),
    })
    .unwrap();
    assert_eq!(
        v,
        json!({"type": "undo_offer", "request_id": "u1", "work_item_id": "w",
               "summary": "archived 3", "expires_at": "2026-01-01T00:05:00Z"})
    );
    let v = serde_json::to_value(ServerFrame::AuthOk {
        scope_id: "owner".into(),
        model: None,
    })
    .unwrap();
    assert_eq!(v, json!({"type": "auth_ok", "scope_id": "owner"}));
    let v = serde_json::to_value(
        ProtocolError::new("E_CHANNEL_PROTOCOL", "bad", Some("r".into())).frame(),
    )
    .unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "code": "E_CHANNEL_PROTOCOL", "message": "bad", "request_id": "r"})
    );
}

#[test]
fn a_reply_carries_its_id_and_an_ack_names_it() {
    let reply = ServerFrame::Message {
        text: "hi".into(),
        sender: "silas".into(),
        timestamp: "t".into(),
        id: Some("00000000000000000003".into()),
    };
    let v = serde_json::to_value(&reply).unwrap();
    assert_eq!(
        v,
        json!({"type": "message", "text": "hi", "sender": "silas", "timestamp": "t",
               "id": "00000000000000000003"})
    );
    assert_eq!(serde_json::from_value::<ServerFrame>(v).unwrap(), reply);
    // A notice has no id (and an older server's reply reads as none).
    let v = json!({"type": "message", "text": "n", "sender": "silas", "timestamp": "t"});
    assert!(matches!(
        serde_json::from_value::<ServerFrame>(v).unwrap(),
        ServerFrame::Message { id: None, .. }
    ));
    assert_eq!(
        parse_client_frame(r#"{"type":"ack","id":"00000000000000000003"}"#).unwrap(),
        ClientFrame::Ack {
            id: "00000000000000000003".into()
        }
    );
    for bad in [
        r#"{"type":"ack"}"#,
        r#"{"type":"ack","id":3}"#,
        r#"{"type":"ack","id":"1","scope_id":"owner"}"#,
    ] {
        assert_eq!(
            parse_client_frame(bad).unwrap_err().code,
            "E_CHANNEL_PROTOCOL"
        );
    }
}

#[test]
fn activity_frame_shape() {
    let f = ServerFrame::Activity {
        initial: true,
        items: vec![ActivityItem {
            seq: 41,
            at: "2026-01-01T09:00:00Z".into(),
            kind: "work".into(),
            text: "Approved and ran 'Create notes.txt' — 2 checks passed".into(),
        }],
    };
    let v = serde_json::to_value(&f).unwrap();
    assert_eq!(
        v,
        json!({"type": "activity", "initial": true, "items": [{"seq": 41,
            "at": "2026-01-01T09:00:00Z", "kind": "work",
            "text": "Approved and ran 'Create notes.txt' — 2 checks passed"}]})
    );
    assert_eq!(serde_json::from_value::<ServerFrame>(v).unwrap(), f);
}

#[test]
fn secure_input_request_shape() {
    let v = serde_json::to_value(ServerFrame::SecureInputRequest {
        ref_id: "sec-1".into(),
        label: "GitHub token".into(),
        input_hint: Some("ghp_…".into()),
        guidance: json!({"instructions": "Create a token", "help_url": null}),
    })
    .unwrap();
    assert_eq!(v["type"], "secure_input_request");
    assert_eq!(v["ref_id"], "sec-1");
    assert_eq!(v["guidance"]["instructions"], "Create a token");
}

/// serde_json keeps the last of two equal keys: a frame that says two
/// things is refused with a typed error instead of read as its last word.
#[test]
fn a_frame_with_a_repeated_key_is_refused() {
    for text in [
        r#"{"type":"card_response","request_id":"c1","decision":"declined","decision":"approved"}"#,
        r#"{"type":"message","text":"hi","type":"card_response"}"#,
        r#"{"type":"message","text":"a","text":"b"}"#,
    ] {
        let e = parse_client_frame(text).unwrap_err();
        let ServerFrame::Error { code, message, .. } = e.frame() else {
            panic!("not an error frame");
        };
        assert_eq!(code, "E_CHANNEL_PROTOCOL", "{text}");
        assert!(message.contains("appears twice"), "{message}");
    }
    // The same frames with each key once parse.
    assert!(parse_client_frame(r#"{"type":"message","text":"a"}"#).is_ok());
}

#[test]
fn a_message_may_name_itself_and_accepted_echoes_it() {
    let f = parse_client_frame(r#"{"type":"message","text":"hi","client_id":"a1-B_2"}"#).unwrap();
    assert!(matches!(f, ClientFrame::Message { client_id: Some(ref id), .. } if id == "a1-B_2"));
    let f = parse_client_frame(r#"{"type":"message","text":"hi"}"#).unwrap();
    assert!(matches!(
        f,
        ClientFrame::Message {
            client_id: None,
            ..
        }
    ));
    let long = "x".repeat(MAX_CLIENT_ID + 1);
    for bad in ["", "a b", "a/b", "é", long.as_str()] {
        let text =
            serde_json::json!({"type": "message", "text": "hi", "client_id": bad}).to_string();
        let e = parse_client_frame(&text).unwrap_err();
        assert_eq!(e.code, "E_CHANNEL_PROTOCOL", "{bad:?}");
        assert!(e.message.contains("client_id"), "{}", e.message);
    }
    let ok = "y".repeat(MAX_CLIENT_ID);
    let text = serde_json::json!({"type": "message", "text": "hi", "client_id": ok}).to_string();
    assert!(parse_client_frame(&text).is_ok());
    let accepted = serde_json::to_value(ServerFrame::Accepted {
        id: "00000000000000000001".into(),
        client_id: Some("c1".into()),
    })
    .unwrap();
    assert_eq!(
        accepted,
        serde_json::json!({"type": "accepted", "id": "00000000000000000001", "client_id": "c1"})
    );
    let plain = serde_json::to_value(ServerFrame::Accepted {
        id: "00000000000000000001".into(),
        client_id: None,
    })
    .unwrap();
    assert!(plain.get("client_id").is_none());
}
