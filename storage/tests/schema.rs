//! Schema version record: a store written by another schema is refused with
//! an error naming both versions; nothing is repaired implicitly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use redb::{Database, TableDefinition};
use silas_core::{Coded, ErrorCode};
use silas_storage::schema::{SCHEMA_VERSION, schema_checksum};
use silas_storage::{STORE_FILE, Store, StoreError};

const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

fn set_meta(path: &std::path::Path, key: &str, value: &str) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META).unwrap().insert(key, value).unwrap();
    txn.commit().unwrap();
}

fn open_err(path: &std::path::Path) -> StoreError {
    match Store::open(path) {
        Ok(_) => panic!("store opened but should have been refused"),
        Err(e) => e,
    }
}

#[test]
fn fresh_store_is_stamped_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let s = Store::open(&path).unwrap();
        s.audit().log("store.created", Default::default()).unwrap();
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.audit().len().unwrap(), 1);
    assert_eq!(schema_checksum().len(), 64);
}

/// A store file cut to nothing (a full disk, an interrupted copy) is not a
/// fresh store: refused as corrupt, and left as it was.
#[test]
fn an_empty_store_file_is_refused_not_reinitialised() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    std::fs::write(&path, b"").unwrap();
    let e = open_err(&path);
    assert_eq!(e.code(), ErrorCode::EDbCorrupt, "{e}");
    assert!(e.to_string().contains("is empty (0 bytes"), "{e}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "the file was written"
    );
}

/// A flipped page (what a bad disk sector leaves) made redb panic inside
/// `open`: every command, `silas doctor` included, died with an internal
/// error. It is a corrupt store, said as one.
#[test]
fn a_damaged_page_is_a_corrupt_store_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let s = Store::open(&path).unwrap();
        s.audit().log("store.created", Default::default()).unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[4096..4112] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();
    let e = open_err(&path);
    assert_eq!(e.code(), ErrorCode::EDbCorrupt, "{e}");
    assert!(
        e.to_string().contains("restore the data dir from a backup"),
        "{e}"
    );
    assert!(!silas_storage::panic_is_contained());
}

#[test]
fn newer_schema_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    set_meta(&path, "schema_version", &(SCHEMA_VERSION + 1).to_string());
    let err = open_err(&path);
    assert_eq!(err.code(), ErrorCode::EDbSchemaMismatch);
    let msg = err.to_string();
    assert!(msg.contains(&format!("v{}", SCHEMA_VERSION + 1)), "{msg}");
    assert!(msg.contains(&format!("v{SCHEMA_VERSION}")), "{msg}");
    assert!(msg.contains("newer"), "{msg}");
}

#[test]
fn older_schema_without_migration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    set_meta(&path, "schema_version", "0");
    let msg = open_err(&path).to_string();
    assert!(
        msg.contains("v0") && msg.contains(&format!("v{SCHEMA_VERSION}")),
        "{msg}"
    );
    assert!(msg.contains("no migration"), "{msg}");
}

#[test]
fn checksum_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    set_meta(&path, "schema_checksum", "deadbeef");
    let msg = open_err(&path).to_string();
    assert!(
        msg.contains("deadbeef") && msg.contains(&schema_checksum()),
        "{msg}"
    );
}

#[test]
fn foreign_redb_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let def: TableDefinition<u64, u64> = TableDefinition::new("someone_elses");
        txn.open_table(def).unwrap().insert(1, 2).unwrap();
        txn.commit().unwrap();
    }
    let err = open_err(&path);
    assert_eq!(err.code(), ErrorCode::EDbSchemaMismatch);
    assert!(err.to_string().contains("unknown"), "{err}");
}

#[test]
fn second_open_in_the_same_process_reports_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Store::open_in(dir.path()).unwrap();
    let err = match Store::open_in(dir.path()) {
        Ok(_) => panic!("opened twice"),
        Err(e) => e,
    };
    assert!(matches!(err, StoreError::InUse { .. }), "{err}");
}

#[test]
fn v1_store_migrates_to_current_with_owner_devices() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    set_meta(&path, "schema_version", "1");
    set_meta(&path, "schema_checksum", "v1-layout");
    let store = Store::open(&path).unwrap();
    let devices = store.records::<silas_core::model::devices::OwnerDevice>();
    assert!(devices.is_empty().unwrap());
    drop((devices, store));
    // Stamped with this build's schema: it opens again without migrating.
    drop(Store::open(&path).unwrap());
}

#[test]
fn v2_store_migrates_to_current_with_telegram_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    set_meta(&path, "schema_version", "2");
    set_meta(&path, "schema_checksum", "v2-layout");
    let store = Store::open(&path).unwrap();
    let updates = store.telegram_updates();
    assert_eq!(updates.offset().unwrap(), 0);
    assert!(updates.pending().unwrap().is_empty());
    drop((updates, store));
    drop(Store::open(&path).unwrap());
}

const PENDING_CARDS: TableDefinition<&str, &[u8]> = TableDefinition::new("pending_cards");

fn put_raw_card(path: &std::path::Path, key: &str, record: serde_json::Value) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    let mut bytes = vec![silas_storage::codec::RECORD_V1];
    bytes.extend(serde_json::to_vec(&record).unwrap());
    txn.open_table(PENDING_CARDS)
        .unwrap()
        .insert(key, bytes.as_slice())
        .unwrap();
    txn.commit().unwrap();
}

fn old_card(id: &str, card_type: &str, payload: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "request_id": id, "scope_id": "owner", "card_type": card_type, "payload": payload,
        "created_at": "2026-11-22T10:00:00Z", "expires_at": "2026-11-22T10:30:00Z",
    })
}

/// v3 plan cards carried no `plan` view: the migration builds it from the
/// stored work item, keeps cards that decode as they are, and drops (counts)
/// the ones that cannot be decoded.
#[test]
fn v3_store_migrates_pending_cards_to_typed_payloads() {
    use serde_json::json;
    use silas_core::cards::CardPayload;
    use silas_storage::PendingCard;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let s = Store::open(&path).unwrap();
        let item: silas_core::model::work::WorkItem = serde_json::from_value(json!({
            "id": "wi-1", "type": "task", "title": "Fix the tests", "body": "pytest",
            "verify": [{"name": "tests", "run": "pytest -q", "expect": {"exit_code": 0}}],
        }))
        .unwrap();
        s.work_items().save(&item).unwrap();
    }
    set_meta(&path, "schema_version", "3");
    set_meta(&path, "schema_checksum", "v3-layout");
    let v3_plan = json!({"work_item_id": "wi-1", "title": "Fix the tests", "kind": "task",
        "plan_hash": "ab", "goal_id": "g-1", "reason": "a check failed", "origin": "work_executor"});
    put_raw_card(
        &path,
        "c-plan",
        old_card("c-plan", "approval_request", v3_plan),
    );
    put_raw_card(
        &path,
        "c-gate",
        old_card(
            "c-gate",
            "gate_approval",
            json!({"gate_name": "pii", "value": "x"}),
        ),
    );
    let orphan = json!({"work_item_id": "gone", "plan_hash": "cd"});
    put_raw_card(
        &path,
        "c-orphan",
        old_card("c-orphan", "approval_request", orphan),
    );
    put_raw_card(
        &path,
        "c-junk",
        old_card("c-junk", "no_such_card", json!({})),
    );

    let store = Store::open(&path).unwrap();
    let cards = store.records::<PendingCard>();
    let mut ids: Vec<String> = cards
        .list()
        .unwrap()
        .into_iter()
        .map(|c| c.request_id)
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["c-gate", "c-plan"]);
    match cards.get("c-plan").unwrap().unwrap().card {
        CardPayload::Plan(p) => {
            assert_eq!(p.work_item_id, "wi-1");
            assert_eq!(p.plan_hash, "ab");
            assert_eq!(p.plan.title, "Fix the tests");
            assert_eq!(p.verify.len(), 1);
            assert_eq!(p.goal_id.as_deref(), Some("g-1"));
            assert_eq!(p.origin, silas_core::cards::CardOrigin::WorkExecutor);
        }
        other => panic!("not a plan card: {other:?}"),
    }
    match cards.get("c-gate").unwrap().unwrap().card {
        CardPayload::Gate(g) => assert_eq!(g.gate_name, "pii"),
        other => panic!("not a gate card: {other:?}"),
    }
    drop((cards, store));
    drop(Store::open(&path).unwrap());
}

const WORKSPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("workspaces");

#[test]
fn v5_store_migrates_to_v6_with_the_workspace_registry() {
    use silas_core::model::workspace::Workspace;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    // Make the file a real v5 store: no workspaces table, v5 stamp.
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(WORKSPACES).unwrap());
        txn.commit().unwrap();
    }
    set_meta(&path, "schema_version", "5");
    set_meta(&path, "schema_checksum", "v5-layout");
    let store = Store::open(&path).unwrap();
    let registry = store.records::<Workspace>();
    assert!(registry.is_empty().unwrap());
    let ws = Workspace {
        name: "proj".into(),
        path: "/srv/proj".into(),
        writable: true,
        added_at: silas_core::Timestamp::now(),
    };
    registry.put(&ws).unwrap();
    assert_eq!(registry.get("proj").unwrap(), Some(ws));
    drop((registry, store));
    let store = Store::open(&path).unwrap();
    assert_eq!(store.records::<Workspace>().len().unwrap(), 1);
}

const CONTEXT_SUBSCRIPTIONS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("context_subscriptions");

#[test]
fn v7_store_migrates_to_v8_with_context_subscriptions() {
    use silas_core::model::context::{ContextSubscription, ScopeSubscriptions, SubscriptionType};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(CONTEXT_SUBSCRIPTIONS).unwrap());
        txn.commit().unwrap();
    }
    set_meta(&path, "schema_version", "7");
    set_meta(&path, "schema_checksum", "v7-layout");
    let store = Store::open(&path).unwrap();
    let subs = ScopeSubscriptions {
        scope_id: "owner".into(),
        subscriptions: vec![ContextSubscription {
            sub_id: "sub-1".into(),
            sub_type: SubscriptionType::MemoryQuery,
            target: "garden".into(),
            zone: silas_core::model::context::ContextZone::Workspace,
            created_at: silas_core::Timestamp::now(),
            turn_created: 3,
            content_hash: String::new(),
            active: true,
            token_count: 0,
        }],
    };
    store.records::<ScopeSubscriptions>().put(&subs).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.records::<ScopeSubscriptions>().get("owner").unwrap(),
        Some(subs)
    );
}

const DECLINED_SKILLS: TableDefinition<&str, &[u8]> = TableDefinition::new("declined_skills");

/// v9 (issue #17): a v8 store gains `declined_skills`; what it held stays.
#[test]
fn v8_store_migrates_to_v9_with_declined_skills() {
    use silas_core::model::skills::DeclinedSkill;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let s = Store::open(&path).unwrap();
        s.audit()
            .log("before.migration", Default::default())
            .unwrap();
    }
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(DECLINED_SKILLS).unwrap());
        txn.commit().unwrap();
    }
    set_meta(&path, "schema_version", "8");
    set_meta(&path, "schema_checksum", "v8-layout");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.audit().len().unwrap(), 1, "the v8 data is kept");
    let rec = DeclinedSkill::with(None, "count-lines", "ab12", silas_core::Timestamp::now());
    store.records::<DeclinedSkill>().put(&rec).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.records::<DeclinedSkill>().get("count-lines").unwrap(),
        Some(rec)
    );
}

const INBOX_UNACKED: TableDefinition<(&str, u64), &str> = TableDefinition::new("inbox_unacked");

/// v10 (issue #19): a v9 store gains `inbox_unacked`; its delivered replies
/// count as acknowledged (nothing is sent again) and its data stays.
#[tokio::test]
async fn v9_store_migrates_to_v10_with_unacked_replies() {
    use silas_storage::{NewInbound, ReplyAck};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    let msg = || NewInbound {
        scope_id: "owner".into(),
        channel: "web".into(),
        sender_id: "owner".into(),
        text: "hi".into(),
        signed: None,
        connection_id: "ws-1".into(),
        ip: None,
        owner_authenticated: true,
        dedup_key: None,
    };
    let old = {
        let s = Store::open(&path).unwrap();
        let r = s
            .inbox()
            .accept(msg(), silas_core::Timestamp::now())
            .unwrap();
        s.inbox()
            .mark_delivered(&r.inbox_id, ReplyAck::Channel)
            .unwrap();
        r.inbox_id
    };
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(INBOX_UNACKED).unwrap());
        txn.commit().unwrap();
    }
    set_meta(&path, "schema_version", "9");
    set_meta(&path, "schema_checksum", "v9-layout");
    let store = Store::open(&path).unwrap();
    let inbox = store.inbox();
    assert!(inbox.get(&old).unwrap().is_some(), "the v9 data is kept");
    assert!(inbox.unacked_for_scope("owner").unwrap().is_empty());
    let r = inbox.accept(msg(), silas_core::Timestamp::now()).unwrap();
    inbox.mark_delivered(&r.inbox_id, ReplyAck::Client).unwrap();
    drop((inbox, store));
    let store = Store::open(&path).unwrap();
    assert_eq!(store.inbox().unacked_for_scope("owner").unwrap().len(), 1);
}

const TELEGRAM_PROGRESS: TableDefinition<&str, &[u8]> = TableDefinition::new("telegram_progress");

/// v11: a v10 store gains `telegram_progress`; what it held stays.
#[test]
fn v10_store_migrates_to_v11_with_telegram_progress() {
    use silas_storage::TelegramProgressMessage;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STORE_FILE);
    {
        let s = Store::open(&path).unwrap();
        s.audit()
            .log("before.migration", Default::default())
            .unwrap();
    }
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(TELEGRAM_PROGRESS).unwrap());
        txn.commit().unwrap();
    }
    set_meta(&path, "schema_version", "10");
    set_meta(&path, "schema_checksum", "v10-layout");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.audit().len().unwrap(), 1, "the v10 data is kept");
    let rec = TelegramProgressMessage {
        key: "1001:in-1".into(),
        chat_id: 1001,
        message_id: 7,
        sent_at: silas_core::Timestamp::now(),
    };
    store
        .records::<TelegramProgressMessage>()
        .put(&rec)
        .unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store
            .records::<TelegramProgressMessage>()
            .get("1001:in-1")
            .unwrap(),
        Some(rec)
    );
}
