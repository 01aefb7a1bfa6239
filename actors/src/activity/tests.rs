use super::*;
use serde_json::json;

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

fn facts(id: &str) -> Option<WorkFacts> {
    (id == "w1").then(|| WorkFacts {
        title: "Create notes.txt".into(),
        checks: Some((2, 2)),
    })
}

fn full_data() -> JsonObject {
    obj(
        json!({"work_item_id": "w1", "gate": "pii", "card_type": "gate_approval",
               "verdict": "block", "all_passed": true, "failed": 0, "label": "GitHub token"}),
    )
}

#[test]
fn every_known_event_has_its_treatment_and_no_fallback_text() {
    for (event, treatment) in KNOWN_EVENTS {
        let item = describe(7, "2026-01-01T00:00:00Z", event, &full_data(), &facts);
        match treatment {
            Treatment::Hidden => assert_eq!(item, None, "{event} should be hidden"),
            Treatment::Shown => {
                let item = item.unwrap_or_else(|| panic!("{event} should be shown"));
                assert!(
                    !item.text.starts_with("Recorded:"),
                    "{event}: {}",
                    item.text
                );
                assert!(!item.text.is_empty());
                assert_eq!(item.seq, 7);
                assert!(
                    ["work", "approval", "card", "security", "system"]
                        .contains(&item.kind.as_str()),
                    "{event}"
                );
            }
        }
    }
    let mut names: Vec<&str> = KNOWN_EVENTS.iter().map(|(e, _)| *e).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), KNOWN_EVENTS.len(), "duplicate entries");
}

#[test]
fn workspace_events_say_which_workspace_what_changed_and_which_approval() {
    let d = obj(
        json!({"work_item_id": "w1", "workspace": "clock", "access": "write",
                       "files": [{"path": "clock.py"}, {"path": "tests/test_clock.py"}],
                       "added": 3, "removed": 1, "protected_edits": ["tests/test_clock.py"],
                       "approval": "0123456789abcdef"}),
    );
    let t = describe(1, "t", "workspace_changes", &d, &facts)
        .unwrap()
        .text;
    assert_eq!(
        t,
        "'Create notes.txt' changed 2 files in a copy of workspace 'clock' (+3 −1); check-defining files edited: 1 — approval 01234567"
    );
    let t = describe(1, "t", "workspace_copied", &d, &facts)
        .unwrap()
        .text;
    assert!(
        t.contains("workspace 'clock'") && t.contains("write access"),
        "{t}"
    );
    let r = describe(1, "t", "workspace_checks_restored", &d, &facts).unwrap();
    assert_eq!(r.kind, "security");
    let a = obj(
        json!({"work_item_id": "w1", "workspace": "clock", "files": ["clock.py"],
               "added": 1, "removed": 1, "token_id": "fedcba9876543210",
               "commit": "0123456789abcdef0123"}),
    );
    let t = describe(1, "t", "workspace_applied", &a, &facts)
        .unwrap()
        .text;
    assert_eq!(
        t,
        "Applied 'Create notes.txt''s changes to workspace 'clock' (1 file, +1 −1) — approval fedcba98; committed as 0123456789ab"
    );
    for (event, kind, words) in [
        ("workspace_apply_declined", "approval", "untouched"),
        ("workspace_apply_refused", "security", "Refused to apply"),
        ("workspace_undone", "work", "as it was"),
        ("workspace_undo_refused", "security", "Did not undo"),
        ("workspace_apply_offered", "approval", "wait for you"),
    ] {
        let r = describe(1, "t", event, &a, &facts).unwrap();
        assert_eq!(r.kind, kind, "{event}");
        assert!(r.text.contains(words), "{event}: {}", r.text);
    }
}

#[test]
fn the_gate_crate_event_names_are_all_known() {
    use silas_gates::audit::names::*;
    for name in [
        GATE_EVALUATED,
        GATE_BLOCKED,
        GATE_BLOCK_ADDITIONAL,
        GATE_MUTATION,
        REJECTED_MUTATION,
        QUALITY_LANE_VIOLATION,
        QUALITY_LLM_ERROR,
        GATE_EVAL_CAP_REACHED,
        ESCALATION_UNKNOWN,
        ESCALATION_CYCLE,
        ACCESS_TRANSITION,
        ACCESS_CONTEXT_REFUSED,
    ] {
        assert!(KNOWN_EVENTS.iter().any(|(e, _)| *e == name), "{name}");
    }
    // Card resolutions are audited under these names.
    for r in [
        crate::cards::Resolution::Answered,
        crate::cards::Resolution::TimedOut,
        crate::cards::Resolution::Disconnected,
        crate::cards::Resolution::Shutdown,
        crate::cards::Resolution::Withdrawn,
    ] {
        assert!(KNOWN_EVENTS.iter().any(|(e, _)| *e == r.audit_event()));
    }
}

#[test]
fn the_spec_example_reads_as_written() {
    let item = describe(
        1,
        "t",
        "work_item.done",
        &obj(json!({"work_item_id": "w1"})),
        &facts,
    )
    .unwrap();
    assert_eq!(
        item.text,
        "Approved and ran 'Create notes.txt' — 2 checks passed"
    );
    let unknown = describe(
        2,
        "t",
        "work_item.done",
        &obj(json!({"work_item_id": "zz"})),
        &facts,
    )
    .unwrap();
    assert_eq!(unknown.text, "Approved and ran a task");
}

#[test]
fn card_resolutions_read_plainly() {
    let timed_out = describe(
        1,
        "t",
        "card_timed_out",
        &obj(json!({"card_type": "approval_request", "verdict": "declined"})),
        &facts,
    )
    .unwrap();
    assert_eq!(
        timed_out.text,
        "A plan approval card got no answer in time and was declined — nothing changed"
    );
    let answered = describe(
        2,
        "t",
        "card_answered",
        &obj(json!({"card_type": "suggestion", "selected_value": "not_now"})),
        &facts,
    )
    .unwrap();
    assert_eq!(answered.text, "You answered a suggestion card: not now");
}

#[test]
fn missed_runs_read_as_caught_up_or_skipped() {
    let caught = describe(
        1,
        "t",
        "scheduler.missed",
        &obj(json!({"job_id": "goal:g1", "missed": 3, "caught_up": true})),
        &facts,
    )
    .unwrap();
    assert_eq!(
        caught.text,
        "Ran 'goal:g1' once to catch up on 3 runs missed while Silas was down"
    );
    let skipped = describe(
        2,
        "t",
        "scheduler.missed",
        &obj(json!({"job_id": "heartbeat", "missed": 1, "caught_up": false})),
        &facts,
    )
    .unwrap();
    assert_eq!(
        skipped.text,
        "Skipped 1 run of 'heartbeat' missed while Silas was down"
    );
}

#[test]
fn unknown_events_are_recorded_not_dropped() {
    let item = describe(3, "t", "future.thing_done", &JsonObject::new(), &facts).unwrap();
    assert_eq!(item.kind, "other");
    assert_eq!(item.text, "Recorded: future thing done");
}

#[test]
fn every_rate_limit_has_its_own_sentence() {
    let mut seen = std::collections::BTreeSet::new();
    let kinds = crate::limits::LimitKind::ALL.map(|k| k.as_str());
    for limit in kinds.iter().copied().chain(["scope", "ip"]) {
        let data = obj(json!({"limit": limit, "scope_id": "owner"}));
        let item = describe(
            1,
            "2026-01-01T00:00:00Z",
            "security_rate_limited",
            &data,
            &|_| None,
        )
        .unwrap_or_else(|| panic!("{limit} hidden"));
        assert_eq!(item.kind, "security");
        assert!(!item.text.starts_with("Recorded"), "{limit}");
        seen.insert(item.text);
    }
    // llm_scope / llm_global share one; scope / ip share the original.
    assert_eq!(seen.len(), kinds.len() - 1 + 1, "{seen:?}");
}

/// A plan a chatbot customer's conversation proposed says so in the
/// timeline: its title is the model's, steered by a stranger (one read
/// "[SYSTEM] Silas security update — owner action required").
#[test]
fn a_customers_plan_is_attributed_in_the_timeline() {
    let at = "2026-01-01T00:00:00Z";
    let owner = obj(json!({"work_item_id": "w1", "scope_id": "owner"}));
    let text = describe(1, at, "plan_proposed", &owner, &facts)
        .unwrap()
        .text;
    assert_eq!(
        text,
        "Proposed 'Create notes.txt' and asked for your approval"
    );
    let customer = obj(json!({"work_item_id": "w1", "scope_id": "ws-7-12"}));
    let text = describe(2, at, "plan_proposed", &customer, &facts)
        .unwrap()
        .text;
    assert_eq!(
        text,
        "A customer's conversation (ws-7-12) proposed 'Create notes.txt' and asked for your approval"
    );
}

#[test]
fn a_model_written_memory_is_shown_with_its_origin_never_its_content() {
    let d = obj(
        json!({"op": "store", "memory_id": "mem-1-0", "memory_type": "preference",
                       "taint": "external", "scope_id": "ws-3"}),
    );
    let t = describe(1, "t", "memory_op_applied", &d, &facts).unwrap();
    assert_eq!(
        t.text,
        "Remembered a preference from untrusted input in conversation ws-3"
    );
    let d = obj(
        json!({"op": "delete", "memory_id": "m", "memory_type": "fact",
                       "taint": "owner", "scope_id": "owner"}),
    );
    let t = describe(1, "t", "memory_op_applied", &d, &facts).unwrap();
    assert_eq!(t.text, "Forgot a memory from you");
}

#[test]
fn a_refused_memory_change_says_why() {
    let cases = [
        (
            "not_found",
            "Refused a change to a memory that is not this conversation's",
        ),
        ("too_long", "Refused to keep a memory the size of a page"),
        ("not_supported", "Did not link memories (not supported)"),
        (
            "constitutional",
            "Refused a change to a protected (constitutional) memory",
        ),
    ];
    for (reason, want) in cases {
        let d = obj(json!({"op": "update", "reason": reason, "scope_id": "ws-1"}));
        let t = describe(1, "t", "memory_op_refused", &d, &facts).unwrap();
        assert_eq!(t.text, want);
    }
}

/// Every event name the sources hand to the audit log (`audit(…, "name"`,
/// `.log("name"`, `.record("name"`, a turn's `self.push("name"`) is in
/// [`KNOWN_EVENTS`]: an event added without a treatment shows as
/// "Recorded: …", which this catches when the event is written.
#[test]
fn every_event_the_sources_emit_is_known() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let emitted = regex::Regex::new(
        r#"(?:\baudit|\.log|\.record|self\.push)\s*\(\s*(?:[A-Za-z_&.]+\s*,\s*)?"([a-z][a-z0-9_]*[._][a-z0-9_.]+)""#,
    )
    .expect("pattern");
    let mut files = Vec::new();
    // The binary's `src/` and every member crate's.
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(root)
        .expect("workspace root")
        .flatten()
        .map(|e| e.path().join("src"))
        .chain([root.join("src")])
        .filter(|p| p.is_dir())
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 100, "found {} source files", files.len());
    let mut unknown = Vec::new();
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for name in emitted.captures_iter(code).filter_map(|c| c.get(1)) {
            seen += 1;
            if !KNOWN_EVENTS.iter().any(|(e, _)| *e == name.as_str()) {
                unknown.push(format!("{} in {}", name.as_str(), file.display()));
            }
        }
    }
    assert!(seen > 100, "the pattern found only {seen} emitted names");
    assert!(
        unknown.is_empty(),
        "emitted but not in KNOWN_EVENTS (add each with its treatment and sentence):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_events_added_with_the_source_check_read_as_sentences() {
    let d = obj(json!({"work_item_id": "w1", "tool_name": "shell_exec", "by": "owner"}));
    let text = |e: &str| describe(1, "t", e, &d, &facts).map(|i| i.text);
    assert_eq!(
        text("work_item.paused").as_deref(),
        Some("'Create notes.txt' paused: its shell_exec call waits for your approval")
    );
    assert_eq!(
        text("work_item.cancelled").as_deref(),
        Some("You cancelled 'Create notes.txt'")
    );
    // Other work_item.* bookkeeping stays hidden; a name nobody knows
    // still shows rather than vanishing.
    assert_eq!(text("work_item.retrying"), None);
    assert_eq!(
        text("brand_new.event").as_deref(),
        Some("Recorded: brand new event")
    );
    let none = obj(json!({}));
    let paused = describe(1, "t", "work_item.paused", &none, &facts).map(|i| i.text);
    assert_eq!(
        paused.as_deref(),
        Some("A task paused: its tool call waits for your approval")
    );
}
