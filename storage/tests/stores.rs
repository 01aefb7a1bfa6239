//! Work items, chronicle and keyed records round-trip through redb, with
//! their indexes kept consistent in one transaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use silas_core::Timestamp;
use silas_core::model::approval::ApprovalToken;
use silas_core::model::context::ContextItem;
use silas_core::model::memory::MemoryItem;
use silas_core::model::personality::PersonaEvent;
use silas_core::model::work::{BudgetUsed, WorkItem, WorkItemStatus};
use silas_storage::{PendingCard, Store, StoreError};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_in(dir.path()).unwrap();
    (dir, s)
}

fn work_item(id: &str, parent: Option<&str>) -> WorkItem {
    serde_json::from_value(json!({
        "id": id, "type": "task", "title": format!("Task {id}"), "parent": parent,
        "body": "Fix the failing test in auth.py — ünïcödé ok",
        "verify": [{"name": "tests", "run": "pytest -q", "expect": {"exit_code": 0}}],
        "skills": ["coding"],
    }))
    .unwrap()
}

fn token(work_item_id: &str) -> ApprovalToken {
    serde_json::from_value(json!({
        "token_id": "tok-1", "plan_hash": "ab".repeat(32), "work_item_id": work_item_id,
        "scope": "standing", "verdict": "approved",
        "signature": "3q2+7wABAgP/",
        "issued_at": "2026-11-22T10:00:00Z", "expires_at": "2026-11-22T10:30:00.250000Z",
        "nonce": "n-1", "approval_strength": "tap",
        "conditions": {"spawn_policy_hash": "cd".repeat(32)},
        "executions_used": 2, "max_executions": 10, "execution_nonces": ["e-1", "e-2"],
    }))
    .unwrap()
}

#[test]
fn work_item_with_approval_token_round_trips_losslessly() {
    let (_d, s) = store();
    let mut wi = work_item("wi-1", None);
    wi.approval_token = Some(token("wi-1"));
    s.work_items().save(&wi).unwrap();
    let back = s.work_items().get("wi-1").unwrap().unwrap();
    assert_eq!(back, wi);
    let t = back.approval_token.unwrap();
    assert_eq!(t.executions_used, 2);
    assert_eq!(t.execution_nonces, vec!["e-1", "e-2"]);
    assert_eq!(
        t.signature.as_slice(),
        &[0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03, 0xff]
    );
    // The signature is stored as a base64 string, not a byte array.
    let raw = serde_json::to_value(s.work_items().get("wi-1").unwrap().unwrap()).unwrap();
    assert_eq!(raw["approval_token"]["signature"], "3q2+7wABAgP/");
    assert!(s.work_items().get("nope").unwrap().is_none());
}

#[test]
fn status_and_parent_indexes_follow_updates() {
    let (_d, s) = store();
    let ws = s.work_items();
    ws.save_all(&[
        work_item("p", None),
        work_item("c1", Some("p")),
        work_item("c2", Some("p")),
    ])
    .unwrap();
    assert_eq!(ws.list_by_status(WorkItemStatus::Pending).unwrap().len(), 3);
    let mut kids: Vec<String> = ws
        .list_by_parent("p")
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    kids.sort();
    assert_eq!(kids, vec!["c1", "c2"]);

    let used = BudgetUsed {
        tokens: 1200,
        cost_usd: 0.25,
        attempts: 1,
        executor_runs: 1,
        ..Default::default()
    };
    let updated = ws
        .update_status("c1", WorkItemStatus::Running, &used)
        .unwrap();
    assert_eq!(updated.status, WorkItemStatus::Running);
    assert_eq!(ws.get("c1").unwrap().unwrap().budget_used, used);
    assert_eq!(ws.list_by_status(WorkItemStatus::Pending).unwrap().len(), 2);
    let running = ws.list_by_status(WorkItemStatus::Running).unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].id, "c1");

    // Re-parenting through save moves the index entry.
    let mut c2 = ws.get("c2").unwrap().unwrap();
    c2.parent = None;
    c2.follow_up_of = Some("c1".into());
    ws.save(&c2).unwrap();
    assert_eq!(ws.list_by_parent("p").unwrap().len(), 1);
    assert_eq!(ws.list_by_follow_up("c1").unwrap()[0].id, "c2");
}

#[test]
fn update_of_missing_item_and_refused_update_change_nothing() {
    let (_d, s) = store();
    let ws = s.work_items();
    let err = ws
        .update_status("ghost", WorkItemStatus::Done, &BudgetUsed::default())
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }));
    ws.save(&work_item("a", None)).unwrap();
    let err = ws
        .update("a", |w| {
            w.status = WorkItemStatus::Done;
            Err(StoreError::Invalid("refused".into()))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)));
    assert_eq!(
        ws.get("a").unwrap().unwrap().status,
        WorkItemStatus::Pending
    );
    assert!(ws.list_by_status(WorkItemStatus::Done).unwrap().is_empty());
}

fn chron(ctx_id: &str, at: &str, text: &str) -> ContextItem {
    serde_json::from_value(json!({
        "ctx_id": ctx_id, "zone": "chronicle", "content": text, "token_count": 3,
        "created_at": at, "turn_number": 1, "source": "channel:web", "taint": "owner", "kind": "message",
    }))
    .unwrap()
}

#[test]
fn chronicle_is_per_scope_time_ordered_and_prunable() {
    let (_d, s) = store();
    let c = s.chronicle();
    // Appended out of order; read back in time order.
    c.append("owner", &chron("3", "2026-11-03T00:00:00Z", "third"))
        .unwrap();
    c.append("owner", &chron("1", "2026-11-01T00:00:00Z", "first"))
        .unwrap();
    c.append("owner", &chron("2", "2026-11-02T00:00:00Z", "second"))
        .unwrap();
    c.append("conn-9", &chron("x", "2026-10-01T00:00:00Z", "other scope"))
        .unwrap();
    // Same timestamp twice: both kept (sequence disambiguates).
    c.append("owner", &chron("3b", "2026-11-03T00:00:00Z", "third again"))
        .unwrap();

    let recent: Vec<String> = c
        .get_recent("owner", 3)
        .unwrap()
        .into_iter()
        .map(|i| i.content)
        .collect();
    assert_eq!(recent, vec!["second", "third", "third again"]);
    assert_eq!(c.get_recent("owner", 100).unwrap().len(), 4);
    assert_eq!(
        c.get_recent("conn-9", 10).unwrap()[0].content,
        "other scope"
    );
    assert!(c.get_recent("nobody", 10).unwrap().is_empty());

    let removed = c
        .prune_before(Timestamp::parse("2026-11-02T00:00:00Z").unwrap())
        .unwrap();
    assert_eq!(removed, 2); // "first" and the other scope's entry
    assert_eq!(c.get_recent("owner", 10).unwrap().len(), 3);
    assert!(c.get_recent("conn-9", 10).unwrap().is_empty());

    // 90-day retention relative to a fixed "now".
    let now = Timestamp::parse("2027-01-30T00:00:00Z").unwrap(); // cutoff 2026-11-01
    assert_eq!(c.prune_older_than(now, 90).unwrap(), 0);
    let later = Timestamp::parse("2027-03-01T00:00:00Z").unwrap();
    assert_eq!(c.prune_older_than(later, 90).unwrap(), 3);
}

#[test]
fn keyed_records_and_persona_events() {
    let (_d, s) = store();
    let mem: MemoryItem = serde_json::from_value(json!({
        "memory_id": "m1", "content": "prefers concise answers", "memory_type": "preference",
        "created_at": "2026-11-01T00:00:00Z", "updated_at": "2026-11-01T00:00:00Z",
        "source_kind": "memory_op", "semantic_tags": ["behavior:response/concise"],
    }))
    .unwrap();
    let memories = s.records::<MemoryItem>();
    memories.put(&mem).unwrap();
    assert_eq!(memories.get("m1").unwrap().unwrap(), mem);
    assert_eq!(memories.len().unwrap(), 1);
    assert_eq!(memories.delete("m1").unwrap().unwrap(), mem);
    assert!(memories.is_empty().unwrap());

    let card = PendingCard {
        request_id: "req-1".into(),
        scope_id: "owner".into(),
        card: silas_core::cards::gate_card("pii", json!("x"), json!({"work_item_id": "wi-1"})),
        created_at: Timestamp::now(),
        expires_at: Timestamp::now(),
        audience: silas_storage::CardAudience::Owner,
    };
    s.records::<PendingCard>().put(&card).unwrap();
    assert_eq!(s.records::<PendingCard>().list().unwrap(), vec![card]);

    let ev = |id: &str, at: &str| -> PersonaEvent {
        serde_json::from_value(json!({
            "event_id": id, "scope_id": "owner", "event_type": "task_completed",
            "source": "runtime", "created_at": at, "delta_mood": {"energy": 0.05},
        }))
        .unwrap()
    };
    let events = s.persona_events();
    events.append(&ev("e2", "2026-11-02T00:00:00Z")).unwrap();
    events.append(&ev("e1", "2026-11-01T00:00:00Z")).unwrap();
    let got: Vec<String> = events
        .since("owner", Timestamp::parse("2026-10-01T00:00:00Z").unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(got, vec!["e1", "e2"]);
    assert_eq!(
        events
            .since("owner", Timestamp::parse("2026-11-01T12:00:00Z").unwrap())
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open_in(dir.path()).unwrap();
        s.work_items().save(&work_item("keep", None)).unwrap();
        s.chronicle()
            .append("owner", &chron("c", "2026-11-01T00:00:00Z", "hello"))
            .unwrap();
    }
    let s = Store::open_in(dir.path()).unwrap();
    assert!(s.work_items().get("keep").unwrap().is_some());
    assert_eq!(
        s.chronicle().get_recent("owner", 5).unwrap()[0].content,
        "hello"
    );
}

/// Issue #19, "Long conversations": a scope's context holds hundreds of
/// memories, checked and counted every turn. Existence for all of them is
/// one read; their access counts one write; and a removal count that does
/// not move tells a reader nothing was removed, so it need not check.
#[test]
fn many_records_are_checked_and_changed_at_once_and_removals_are_counted() {
    let (_d, s) = store();
    let memories = s.records::<MemoryItem>();
    let mem = |id: &str| -> MemoryItem {
        serde_json::from_value(json!({
            "memory_id": id, "content": format!("note {id}"), "memory_type": "episode",
            "created_at": "2026-11-01T00:00:00Z", "updated_at": "2026-11-01T00:00:00Z",
            "source_kind": "context_eviction",
        }))
        .unwrap()
    };
    let all: Vec<MemoryItem> = (0..50).map(|n| mem(&format!("m{n}"))).collect();
    memories.put_many(&all).unwrap();
    assert_eq!(memories.removals(), 0, "puts are not removals");
    assert_eq!(
        memories.contains_each(&["m3", "gone", "m49"]).unwrap(),
        [true, false, true]
    );

    let keys: Vec<String> = (0..50)
        .map(|n| format!("m{n}"))
        .chain(["gone".to_string()])
        .collect();
    let before = s.group_commit_stats().writes;
    memories
        .update_each(&keys, |m| m.access_count += 1)
        .unwrap();
    assert_eq!(
        s.group_commit_stats().writes - before,
        1,
        "one write for all"
    );
    assert!(memories.list().unwrap().iter().all(|m| m.access_count == 1));
    assert!(
        memories.get("gone").unwrap().is_none(),
        "a missing key stays missing"
    );
    memories.update_each_queued(&keys, |m| m.access_count += 1);
    // Queued: committed before the writer's next write.
    memories.put(&mem("late")).unwrap();
    assert_eq!(memories.get("m7").unwrap().unwrap().access_count, 2);

    // Every way of removing moves the count; another table's do not.
    s.records::<PendingCard>().delete("nothing").unwrap();
    assert_eq!(memories.removals(), 0);
    memories.delete("m1").unwrap();
    assert_eq!(memories.removals(), 1);
    memories.delete_many(&["m2".into(), "m3".into()]).unwrap();
    assert_eq!(memories.removals(), 2);
    memories.replace_all(&[mem("m0")]).unwrap();
    assert_eq!(memories.removals(), 3);
    assert_eq!(
        memories.contains_each(&["m0", "m4"]).unwrap(),
        [true, false]
    );
    // Shared by every handle of the store.
    assert_eq!(s.records::<MemoryItem>().removals(), 3);
}
