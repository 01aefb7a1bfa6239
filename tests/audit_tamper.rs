//! Audit-log tamper evidence through the real binary (issue #12 item 8,
//! §4.16): a daemon runs and stops (writing a signed checkpoint and the
//! `audit.head` mirror), then the store is edited directly the way someone
//! with write access to the redb file but without the owner key could, and
//! `silas audit verify` must refuse it with a one-line, coded error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use silas_storage::{AuditEntry, Checkpoint, Store};

const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
const CHECKPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("audit_checkpoints");
const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

/// `silas start`, then SIGTERM: a clean stop writes a signed checkpoint.
/// Then `silas init` once more, which appends one entry after it.
fn run_daemon_once(dir: &Path) {
    let (daemon, _addr) = support::start(dir);
    daemon.stop_blocking();
    let init = support::silas(dir).arg("init").output().unwrap();
    assert!(init.status.success(), "{init:?}");
}

fn verify(dir: &Path) -> Output {
    support::silas(dir)
        .args(["audit", "verify"])
        .output()
        .unwrap()
}

/// Non-zero exit, one stderr line carrying the taxonomy code; returns it.
fn assert_refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "verify passed:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("E_DB_AUDIT_CHAIN_BROKEN"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

fn open_store(dir: &Path) -> Store {
    Store::open_in(dir.join("data")).unwrap()
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> T {
    serde_json::from_slice(&bytes[1..]).unwrap()
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend(serde_json::to_vec(v).unwrap());
    out
}

/// Rewrite entry `from`, recompute every hash after it, and rewrite every
/// checkpoint record to the new hashes (the old signatures kept: there is no
/// key to make new ones). The plain hash chain cannot tell.
fn rewrite_chain(store: &Store, from: u64) {
    let txn = store.raw_database().begin_write().unwrap();
    {
        let mut t = txn.open_table(AUDIT).unwrap();
        let len = t.len().unwrap();
        let mut prev = decode::<AuditEntry>(t.get(from - 1).unwrap().unwrap().value()).entry_hash;
        let mut new_hash = HashMap::new();
        for seq in from..len {
            let mut e: AuditEntry = decode(t.get(seq).unwrap().unwrap().value());
            if seq == from {
                e.event = "rewritten.by_attacker".into();
            }
            e.prev_hash = prev;
            e.entry_hash = e.compute_hash().unwrap();
            prev = e.entry_hash.clone();
            new_hash.insert(seq, e.entry_hash.clone());
            t.insert(seq, encode(&e).as_slice()).unwrap();
        }
        let mut cps = txn.open_table(CHECKPOINTS).unwrap();
        let rows: Vec<(String, Vec<u8>)> = cps
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value().to_string(), v.value().to_vec())
            })
            .collect();
        assert!(!rows.is_empty(), "the daemon wrote no checkpoint");
        for (id, bytes) in rows {
            let mut cp: Checkpoint = decode(&bytes);
            if let Some(h) = new_hash.get(&cp.head_seq) {
                cp.head_hash = h.clone();
            }
            cps.insert(id.as_str(), encode(&cp).as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
    assert!(store.audit().verify_chain().unwrap().valid);
}

/// Remove every checkpoint record and the latest-checkpoint pointer.
fn drop_checkpoints(store: &Store) {
    let txn = store.raw_database().begin_write().unwrap();
    {
        txn.open_table(CHECKPOINTS)
            .unwrap()
            .retain(|_, _| false)
            .unwrap();
        txn.open_table(META)
            .unwrap()
            .remove("audit_latest_checkpoint")
            .unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn untouched_store_verifies_and_reports_the_window_after_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    assert!(dir.path().join("data/audit.head").is_file());
    let out = verify(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("audit chain ok: "), "{stdout}");
    assert!(
        stdout.contains("signed checkpoints ok: 1 verified"),
        "{stdout}"
    );
    // The `silas init` after the stop is the one uncovered entry.
    let len = open_store(dir.path()).audit().len().unwrap();
    let window = format!(
        "entries {0}..{0} are after the last signed checkpoint and are protected by the hash chain only",
        len - 1
    );
    assert!(stdout.contains(&window), "{stdout}");
}

#[test]
fn chain_rewritten_with_every_hash_recomputed_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    {
        let store = open_store(dir.path());
        rewrite_chain(&store, 1);
    }
    // The mirror outside the store names the old head.
    let line = assert_refused(&verify(dir.path()));
    assert!(line.contains("rewritten: entry"), "{line}");
    assert!(line.contains("head mirror"), "{line}");
    // With the mirror deleted too, the checkpoints' signatures still fail.
    std::fs::remove_file(dir.path().join("data/audit.head")).unwrap();
    let line = assert_refused(&verify(dir.path()));
    assert!(
        line.contains("does not verify against the owner key"),
        "{line}"
    );
}

#[test]
fn cut_tail_is_detected_even_with_the_checkpoints_removed() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    let len = {
        let store = open_store(dir.path());
        let len = store.audit().len().unwrap();
        // Cut the last three entries (the shutdown and the `init` after it).
        let txn = store.raw_database().begin_write().unwrap();
        {
            let mut t = txn.open_table(AUDIT).unwrap();
            for seq in (len - 3)..len {
                t.remove(seq).unwrap();
            }
        }
        txn.commit().unwrap();
        drop_checkpoints(&store);
        assert!(store.audit().verify_chain().unwrap().valid);
        len - 3
    };
    let line = assert_refused(&verify(dir.path()));
    assert!(line.contains("truncated:"), "{line}");
    assert!(
        line.contains(&format!("the store has only {len} entries")),
        "{line}"
    );
}

#[test]
fn replacing_the_owner_key_keeps_the_log_verifiable() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    let force = support::silas(dir.path())
        .args(["init", "--force"])
        .output()
        .unwrap();
    assert!(force.status.success(), "{force:?}");
    // The old key's checkpoint no longer verifies; the new key's covers it.
    let out = verify(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 checkpoint(s) not signed by the current owner key"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("protected by the hash chain only"),
        "{stdout}"
    );
}

#[test]
fn tampering_while_stopped_is_recorded_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    {
        let store = open_store(dir.path());
        let len = store.audit().len().unwrap();
        let txn = store.raw_database().begin_write().unwrap();
        {
            let mut t = txn.open_table(AUDIT).unwrap();
            for seq in (len - 3)..len {
                t.remove(seq).unwrap();
            }
        }
        txn.commit().unwrap();
        drop_checkpoints(&store);
    }
    // The next run would sign the cut chain at its shutdown checkpoint; the
    // start records what it found first, inside the log that gets signed.
    run_daemon_once(dir.path());
    let found: Vec<serde_json::Value> = support::audit_events(dir.path())
        .into_iter()
        .filter(|e| e["event"] == "audit.tamper_detected")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let problem = found[0]["data"]["problem"].as_str().unwrap();
    assert!(problem.starts_with("truncated:"), "{problem}");
    assert_eq!(found[0]["data"]["code"], "E_DB_AUDIT_CHAIN_BROKEN");

    // The checkpoint signed since covers the cut chain, so the chain itself
    // verifies; `audit verify` still fails on what the start recorded, in
    // both modes, until the owner acknowledges it.
    for args in [
        &["audit", "verify"][..],
        &["audit", "verify", "--from-checkpoint"][..],
    ] {
        let out = support::silas(dir.path()).args(args).output().unwrap();
        let line = assert_refused(&out);
        assert!(line.contains("truncated:"), "{line}");
        assert!(line.contains("silas audit acknowledge"), "{line}");
    }
    let ack = support::silas(dir.path())
        .args(["audit", "acknowledge"])
        .output()
        .unwrap();
    assert!(ack.status.success(), "{ack:?}");
    assert!(String::from_utf8_lossy(&ack.stdout).contains("acknowledged 1"));
    let out = verify(dir.path());
    assert!(out.status.success(), "{out:?}");
    let again = support::silas(dir.path())
        .args(["audit", "acknowledge"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("no tampering recorded"));
}

/// A head mirror changed while the daemon was stopped: the start records it;
/// once the owner acknowledges it (through the running daemon), `audit
/// verify` passes at once. Before, the acknowledgement said so but verify
/// kept failing on the mirror until the next checkpoint (the hourly one, or
/// the stop).
#[test]
fn acknowledging_a_tampered_mirror_makes_verify_pass_at_once() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon_once(dir.path());
    let head = dir.path().join("data/audit.head");
    let mut mirror: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&head).unwrap()).unwrap();
    mirror["entry_hash"] = serde_json::Value::from("0".repeat(64));
    std::fs::write(&head, mirror.to_string()).unwrap();

    let (daemon, _addr) = support::start(dir.path());
    let line = assert_refused(&verify(dir.path()));
    assert!(
        line.contains("silas audit acknowledge") || line.contains("tampered"),
        "{line}"
    );
    let ack = support::silas(dir.path())
        .args(["audit", "acknowledge"])
        .output()
        .unwrap();
    assert!(ack.status.success(), "{ack:?}");
    assert!(
        String::from_utf8_lossy(&ack.stdout).contains("acknowledged 1"),
        "{ack:?}"
    );
    let out = verify(dir.path());
    assert!(out.status.success(), "{out:?}");
    daemon.stop_blocking();
    let out = verify(dir.path());
    assert!(out.status.success(), "{out:?}");
}

/// A flipped page in the store (a bad sector, a careless edit): `audit
/// verify` died with `E_INTERNAL` and exit 101 (a panic inside redb), and
/// `silas doctor` printed none of its lines. Now both name a corrupt store
/// and its fix.
#[test]
fn a_damaged_store_page_is_reported_not_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let init = support::silas(dir).arg("init").output().unwrap();
    assert!(init.status.success(), "{init:?}");
    let path = dir.join("data").join(silas_storage::STORE_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[4096..4112] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();

    let out = verify(dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("E_DB_CORRUPT"), "{stderr}");
    assert!(!stderr.contains("E_INTERNAL"), "{stderr}");

    let doctor = support::silas(dir).arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL store:") && l.contains("restore the data dir")),
        "{text}"
    );
    assert!(text.contains("PASS owner-key"), "{text}");
}
