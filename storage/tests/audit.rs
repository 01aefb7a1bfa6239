//! Audit log: chain integrity, tamper detection with the index of the first
//! bad entry, checkpoints, NEVER_LOG on the stored bytes, and crash safety.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use redb::TableDefinition;
use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_storage::{AuditEntry, Store};

const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => panic!("not an object"),
    }
}

fn store_with(n: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let batch = (0..n)
        .map(|i| {
            (
                "turn.processed".to_string(),
                obj(json!({"i": i, "scope_id": "owner"})),
            )
        })
        .collect();
    store.audit().log_batch(batch).unwrap();
    (dir, store)
}

fn read_raw(store: &Store, seq: u64) -> Vec<u8> {
    let txn = redb::ReadableDatabase::begin_read(store.raw_database()).unwrap();
    let t = txn.open_table(AUDIT).unwrap();
    t.get(seq).unwrap().unwrap().value().to_vec()
}

fn tamper(store: &Store, f: impl FnOnce(&mut redb::Table<u64, &[u8]>)) {
    let txn = store.raw_database().begin_write().unwrap();
    {
        let mut t = txn.open_table(AUDIT).unwrap();
        f(&mut t);
    }
    txn.commit().unwrap();
}

fn decode(bytes: &[u8]) -> AuditEntry {
    serde_json::from_slice(&bytes[1..]).unwrap()
}

fn encode(e: &AuditEntry) -> Vec<u8> {
    let mut v = vec![1u8];
    v.extend(serde_json::to_vec(e).unwrap());
    v
}

#[test]
fn intact_chain_verifies() {
    let (_d, store) = store_with(200);
    let audit = store.audit();
    let id = audit.log("daemon.started", obj(json!({"pid": 1}))).unwrap();
    assert_eq!(id, "200");
    let v = audit.verify_chain().unwrap();
    assert!(v.valid, "{v:?}");
    assert_eq!(v.entries_checked, 201);
    let tail = audit.tail(3).unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![198, 199, 200]
    );
    assert_eq!(tail[1].entry_hash, tail[2].prev_hash);
}

#[test]
fn first_entry_links_to_genesis_and_hash_is_over_canonical_json() {
    let (_d, store) = store_with(1);
    let e = &store.audit().tail(1).unwrap()[0];
    assert_eq!(e.prev_hash, silas_storage::audit::GENESIS_HASH);
    let body = json!({"seq": e.seq, "timestamp": e.timestamp, "event": e.event, "data": e.data, "prev_hash": e.prev_hash});
    let expected =
        silas_core::canonical::sha256_hex(&silas_core::canonical::to_bytes(&body).unwrap());
    assert_eq!(e.entry_hash, expected);
}

#[test]
fn modified_entry_is_detected_at_its_index() {
    let (_d, store) = store_with(100);
    let mut e = decode(&read_raw(&store, 57));
    e.data.insert("i".into(), json!(999));
    tamper(&store, |t| {
        t.insert(57, encode(&e).as_slice()).unwrap();
    });
    let v = store.audit().verify_chain().unwrap();
    assert!(!v.valid);
    let b = v.first_bad.unwrap();
    assert_eq!(b.index, 57);
    assert!(b.reason.contains("modified"), "{}", b.reason);
    assert_eq!(v.entries_checked, 57);
}

#[test]
fn modified_entry_with_recomputed_hash_breaks_the_next_link() {
    let (_d, store) = store_with(100);
    let mut e = decode(&read_raw(&store, 40));
    e.event = "approval.granted".into();
    e.entry_hash = e.compute_hash().unwrap();
    tamper(&store, |t| {
        t.insert(40, encode(&e).as_slice()).unwrap();
    });
    let b = store.audit().verify_chain().unwrap().first_bad.unwrap();
    assert_eq!(b.index, 41);
    assert!(b.reason.contains("prev_hash"), "{}", b.reason);
}

#[test]
fn deleted_entry_is_detected_at_its_index() {
    let (_d, store) = store_with(100);
    tamper(&store, |t| {
        t.remove(80).unwrap();
    });
    let b = store.audit().verify_chain().unwrap().first_bad.unwrap();
    assert_eq!(b.index, 80);
    assert!(b.reason.contains("missing"), "{}", b.reason);
}

#[test]
fn reordered_pair_is_detected() {
    let (_d, store) = store_with(100);
    let a = read_raw(&store, 30);
    let b = read_raw(&store, 31);
    tamper(&store, |t| {
        t.insert(30, b.as_slice()).unwrap();
        t.insert(31, a.as_slice()).unwrap();
    });
    let brk = store.audit().verify_chain().unwrap().first_bad.unwrap();
    assert_eq!(brk.index, 30);
    assert!(brk.reason.contains("reordered"), "{}", brk.reason);
}

#[test]
fn truncated_tail_is_detected_against_a_checkpoint() {
    let (_d, store) = store_with(200);
    let audit = store.audit();
    let cp = audit.write_checkpoint().unwrap();
    assert!(audit.verify_from_checkpoint(None).unwrap().valid);
    tamper(&store, |t| {
        for seq in 150..200 {
            t.remove(seq).unwrap();
        }
    });
    // Without the checkpoint a clean truncation would look like a shorter,
    // valid chain; with it, both verifications catch it.
    for v in [
        audit.verify_chain().unwrap(),
        audit.verify_from_checkpoint(Some(&cp)).unwrap(),
    ] {
        assert!(!v.valid);
        let b = v.first_bad.unwrap();
        assert_eq!(b.index, 150);
        assert!(b.reason.contains("truncated"), "{}", b.reason);
    }
}

#[test]
fn verify_from_checkpoint_checks_only_the_suffix_but_catches_tampering_there() {
    let (_d, store) = store_with(100);
    let audit = store.audit();
    audit.write_checkpoint().unwrap();
    let batch = (0..50)
        .map(|i| ("x.y".to_string(), obj(json!({"j": i}))))
        .collect();
    audit.log_batch(batch).unwrap();
    let v = audit.verify_from_checkpoint(None).unwrap();
    assert!(v.valid);
    assert_eq!(v.entries_checked, 51); // the checkpointed head + 50 new
    let mut e = decode(&read_raw(&store, 120));
    e.data.insert("j".into(), json!(-1));
    tamper(&store, |t| {
        t.insert(120, encode(&e).as_slice()).unwrap();
    });
    assert_eq!(
        audit
            .verify_from_checkpoint(None)
            .unwrap()
            .first_bad
            .unwrap()
            .index,
        120
    );
}

#[test]
fn checkpoint_head_rewrite_is_detected() {
    let (_d, store) = store_with(10);
    let audit = store.audit();
    audit.write_checkpoint().unwrap();
    let mut e = decode(&read_raw(&store, 9));
    e.event = "rewritten".into();
    e.entry_hash = e.compute_hash().unwrap();
    tamper(&store, |t| {
        t.insert(9, encode(&e).as_slice()).unwrap();
    });
    let v = audit.verify_chain().unwrap();
    assert_eq!(v.first_bad.unwrap().index, 9);
}

#[test]
fn never_log_content_and_secret_canaries_never_reach_the_store_file() {
    let dir = tempfile::tempdir().unwrap();
    let canary_content = "CANARY-CONTENT-7d1f2a";
    let canary_secret = "ghp_CANARYsecretAAAAAAAAAAAAAAAAAAAAAAAAAA";
    {
        let store = Store::open_in(dir.path()).unwrap();
        let audit = store.audit();
        audit
            .log(
                "message.received",
                obj(json!({
                    "message": {"content": canary_content, "channel": "web"},
                    "tool": {"output": canary_content},
                    "response_text": canary_content,
                    "error": format!("auth failed for token {canary_secret}"),
                })),
            )
            .unwrap();
        let stored = &audit.tail(1).unwrap()[0];
        assert_eq!(stored.data["message"]["channel"], "web");
        assert!(
            stored.data["error"]
                .as_str()
                .unwrap()
                .contains("[REDACTED:github_token]")
        );
        assert!(audit.verify_chain().unwrap().valid);
    }
    let bytes = std::fs::read(dir.path().join(silas_storage::STORE_FILE)).unwrap();
    for canary in [canary_content.as_bytes(), b"CANARYsecret"] {
        assert!(
            !bytes.windows(canary.len()).any(|w| w == canary),
            "canary found in store file"
        );
    }
}

#[test]
fn invalid_event_names_are_refused() {
    let (_d, store) = store_with(0);
    assert!(store.audit().log("", JsonObject::new()).is_err());
    assert!(store.audit().log("Has Spaces", JsonObject::new()).is_err());
    assert!(store.audit().is_empty().unwrap());
}

#[test]
fn empty_log_verifies_and_cannot_be_checkpointed() {
    let (_d, store) = store_with(0);
    let v = store.audit().verify_chain().unwrap();
    assert!(v.valid);
    assert_eq!(v.entries_checked, 0);
    assert!(store.audit().write_checkpoint().is_err());
}

const CRASH_TOTAL: u64 = 10_000;

/// Child half of the crash test: appends entries one durable transaction at a
/// time and reports each commit on stdout. Run only by `sigkill_mid_append…`.
#[test]
#[ignore = "helper process for sigkill_mid_append_leaves_a_verifiable_store"]
fn crash_child_appender() {
    let Ok(dir) = std::env::var("SILAS_CRASH_DIR") else {
        return;
    };
    let store = Store::open_in(&dir).unwrap();
    let audit = store.audit();
    let mut out = std::io::stdout().lock();
    for i in 0..CRASH_TOTAL {
        let id = audit.log("crash.append", obj(json!({"i": i}))).unwrap();
        writeln!(out, "committed {id}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_mid_append_leaves_a_verifiable_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_appender",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SILAS_CRASH_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last_committed: Option<u64> = None;
    // Kill somewhere in the middle: after a few hundred committed appends.
    while let Some(Ok(line)) = lines.next() {
        if let Some(id) = line.strip_prefix("committed ") {
            last_committed = Some(id.parse().unwrap());
            if last_committed >= Some(400) {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    // Drain what the child reported before it died.
    for line in lines.map_while(Result::ok) {
        if let Some(id) = line.strip_prefix("committed ") {
            last_committed = Some(id.parse().unwrap());
        }
    }
    child.wait().unwrap();
    let last_committed = last_committed.expect("child never committed");
    assert!(
        last_committed < CRASH_TOTAL - 1,
        "child finished before the kill; test proves nothing"
    );

    let store = Store::open_in(dir.path()).unwrap();
    let v = store.audit().verify_chain().unwrap();
    assert!(v.valid, "{v:?}");
    // Every entry the child saw committed is present; at most one more (the
    // append in flight when killed) may have landed, and nothing partial.
    assert!(
        v.entries_checked > last_committed,
        "{} <= {last_committed}",
        v.entries_checked
    );
    assert!(v.entries_checked <= last_committed + 2);
    let tail = store.audit().tail(1).unwrap();
    assert_eq!(tail[0].seq + 1, v.entries_checked);
}
