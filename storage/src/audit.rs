//! The hash-chained audit log (spec §4.16; meao M1.5/M3 NEVER_LOG).
//!
//! Entry `n` stores `prev_hash` = entry `n-1`'s `entry_hash` (a fixed genesis
//! value for entry 0) and `entry_hash = SHA-256(canonical JSON of the entry
//! without entry_hash)`, computed through `silas_core::canonical`. Entries are
//! keyed by their sequence number, starting at 0, so the position of an entry
//! is its index. Every append is its own durable write transaction: a crash
//! leaves whole entries or none. Before anything is stored the data passes
//! the NEVER_LOG sanitiser (content fields removed, secrets redacted, errors
//! cut to 500 chars).
//!
//! Verification reports the index of the first bad entry: a modified entry
//! fails its own hash; a deleted entry shows as a gap at its index; a
//! reordered pair shows as a key/sequence mismatch; a truncated tail is caught
//! by a checkpoint that covers entries which no longer exist.
//!
//! Checkpoints are signed by the owner key and the latest one is mirrored
//! outside the store, so a rewrite with recomputed hashes or a cut tail is
//! caught as well: see [`crate::audit_seal`] and [`AuditLog::verify_sealed`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, WriteTransaction};
use serde::{Deserialize, Serialize};
use silas_core::model::JsonObject;
use silas_core::{Base64Bytes, Timestamp, canonical, never_log};

use crate::audit_seal::{self, CheckpointSigner, CheckpointVerifier, HeadMirror, SealReport};
use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::group_commit::{GroupCommit, Wait};
use crate::schema::{AUDIT, AUDIT_CHECKPOINTS, META};

/// `prev_hash` of the first entry.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const LATEST_CHECKPOINT_KEY: &str = "audit_latest_checkpoint";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub seq: u64,
    pub timestamp: Timestamp,
    pub event: String,
    pub data: JsonObject,
    pub prev_hash: String,
    pub entry_hash: String,
}

/// The hashed part of an entry: everything but `entry_hash`.
#[derive(Serialize)]
struct HashedFields<'a> {
    seq: u64,
    timestamp: &'a Timestamp,
    event: &'a str,
    data: &'a JsonObject,
    prev_hash: &'a str,
}

impl HashedFields<'_> {
    fn hash(&self) -> StoreResult<String> {
        canonical::hash_of(self).map_err(|e| StoreError::Encoding {
            table: "audit",
            detail: e.to_string(),
        })
    }
}

/// An entry as stored, borrowed: serialises exactly as [`AuditEntry`].
#[derive(Serialize)]
struct EntryRef<'a> {
    #[serde(flatten)]
    fields: &'a HashedFields<'a>,
    entry_hash: &'a str,
}

/// The entry ID the spec's `log` returns: the sequence number as text.
fn entry_id(seq: u64) -> String {
    seq.to_string()
}

impl AuditEntry {
    /// The entry ID the spec's `log` returns.
    pub fn id(&self) -> String {
        entry_id(self.seq)
    }

    pub fn compute_hash(&self) -> StoreResult<String> {
        HashedFields {
            seq: self.seq,
            timestamp: &self.timestamp,
            event: &self.event,
            data: &self.data,
            prev_hash: &self.prev_hash,
        }
        .hash()
    }
}

/// A recorded chain head, against which later verification detects truncation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub checkpoint_id: String,
    pub head_seq: u64,
    pub head_hash: String,
    pub created_at: Timestamp,
    /// Owner-key signature over [`audit_seal::checkpoint_payload`]; `None`
    /// on checkpoints written before checkpoints were signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Base64Bytes>,
}

/// Where and why a chain failed verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainBreak {
    /// Index (= sequence number) of the first bad entry.
    pub index: u64,
    pub reason: String,
}

/// Written at start when the store and its signed checkpoints or head mirror
/// disagree (tampering while the daemon was stopped).
pub const TAMPER_DETECTED: &str = "audit.tamper_detected";
/// Written by `silas audit acknowledge`: the owner has seen the tampering
/// recorded before it.
pub const TAMPER_ACKNOWLEDGED: &str = "audit.tamper_acknowledged";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainVerification {
    pub valid: bool,
    pub entries_checked: u64,
    pub first_bad: Option<ChainBreak>,
}

impl ChainVerification {
    fn ok(entries_checked: u64) -> Self {
        ChainVerification {
            valid: true,
            entries_checked,
            first_bad: None,
        }
    }

    fn broken(entries_checked: u64, index: u64, reason: String) -> Self {
        ChainVerification {
            valid: false,
            entries_checked,
            first_bad: Some(ChainBreak { index, reason }),
        }
    }
}

/// Append-only, hash-chained audit log over the store.
#[derive(Clone)]
pub struct AuditLog {
    db: Arc<Database>,
    writer: Arc<GroupCommit>,
    /// The head mirror file, next to the store file.
    head_mirror: PathBuf,
}

fn check_event_name(event: &str) -> StoreResult<()> {
    let ok = !event.is_empty()
        && event.len() <= 128
        && event.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b':' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "audit event name {event:?} must be 1-128 chars of [a-z0-9_.:-]"
        )))
    }
}

impl AuditLog {
    pub(crate) fn new(db: Arc<Database>, writer: Arc<GroupCommit>, store_path: &Path) -> Self {
        AuditLog {
            db,
            writer,
            head_mirror: store_path.with_file_name(audit_seal::HEAD_MIRROR_FILE),
        }
    }

    /// Where the latest signed head is mirrored outside the store.
    pub fn head_mirror_path(&self) -> &Path {
        &self.head_mirror
    }

    /// Append one entry (sanitised) in its own durable transaction; returns its ID.
    pub fn log(&self, event: &str, data: JsonObject) -> StoreResult<String> {
        let ids = self.log_batch(vec![(event.to_string(), data)])?;
        ids.into_iter()
            .next()
            .ok_or_else(|| StoreError::Invalid("empty batch".into()))
    }

    /// Append several entries in one transaction (all or none), durable
    /// when it returns (through the store's group commit); their IDs.
    pub fn log_batch(&self, events: Vec<(String, JsonObject)>) -> StoreResult<Vec<String>> {
        for (event, _) in &events {
            check_event_name(event)?;
        }
        let events = Sanitized::new(events);
        self.writer
            .write_blocking(Wait::Durable, move |txn| append_in(txn, &events))
    }

    /// [`Self::log_batch`] for async callers.
    pub async fn log_batch_async(
        &self,
        events: Vec<(String, JsonObject)>,
    ) -> StoreResult<Vec<String>> {
        for (event, _) in &events {
            check_event_name(event)?;
        }
        let events = Sanitized::new(events);
        self.writer
            .write(Wait::Durable, move |txn| append_in(txn, &events))
            .await
    }

    /// The last `n` entries, oldest first.
    pub fn tail(&self, n: usize) -> StoreResult<Vec<AuditEntry>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let mut out = Vec::with_capacity(n.min(1024));
        for row in table.iter()?.rev().take(n) {
            let (_, v) = row?;
            out.push(codec::decode("audit", v.value())?);
        }
        out.reverse();
        Ok(out)
    }

    /// The `audit.tamper_detected` entries written since the last
    /// `audit.tamper_acknowledged` one, oldest first: tampering found at a
    /// start stays reported by `silas audit verify` until the owner has
    /// looked at it, instead of being covered by the next checkpoint.
    pub fn unacknowledged_tampering(&self) -> StoreResult<Vec<AuditEntry>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let mut found = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            let e: AuditEntry = codec::decode("audit", v.value())?;
            match e.event.as_str() {
                TAMPER_DETECTED => found.push(e),
                TAMPER_ACKNOWLEDGED => found.clear(),
                _ => {}
            }
        }
        Ok(found)
    }

    pub fn len(&self) -> StoreResult<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(AUDIT)?.len()?)
    }

    pub fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.len()? == 0)
    }

    /// Verify the whole chain from entry 0, then every checkpoint against it.
    pub fn verify_chain(&self) -> StoreResult<ChainVerification> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let walked = walk(table.iter()?, 0, GENESIS_HASH.to_string())?;
        if !walked.valid {
            return Ok(walked);
        }
        let checkpoints = txn.open_table(AUDIT_CHECKPOINTS)?;
        for row in checkpoints.iter()? {
            let (_, v) = row?;
            let cp: Checkpoint = codec::decode("audit_checkpoints", v.value())?;
            if let Some(broken) = check_checkpoint(&table, &cp, walked.entries_checked)? {
                return Ok(broken);
            }
        }
        Ok(walked)
    }

    /// Record the current chain head, signed, and mirror it outside the
    /// store; returns the checkpoint ID.
    pub fn write_checkpoint(&self, signer: &dyn CheckpointSigner) -> StoreResult<String> {
        let txn = self.db.begin_write()?;
        let head = {
            let table = txn.open_table(AUDIT)?;
            let last = table.last()?;
            match last {
                Some((_, v)) => codec::decode::<AuditEntry>("audit", v.value())?,
                None => {
                    return Err(StoreError::Invalid(
                        "cannot checkpoint an empty audit log".into(),
                    ));
                }
            }
        };
        let mut cp = Checkpoint {
            checkpoint_id: format!(
                "cp-{}-{}",
                head.seq,
                &head.entry_hash[..12.min(head.entry_hash.len())]
            ),
            head_seq: head.seq,
            head_hash: head.entry_hash.clone(),
            created_at: Timestamp::now(),
            signature: None,
        };
        cp.signature = Some(Base64Bytes(
            signer.sign(&audit_seal::checkpoint_payload(&cp)?),
        ));
        {
            let mut cps = txn.open_table(AUDIT_CHECKPOINTS)?;
            cps.insert(
                cp.checkpoint_id.as_str(),
                codec::encode("audit_checkpoints", &cp)?.as_slice(),
            )?;
            let mut meta = txn.open_table(META)?;
            meta.insert(LATEST_CHECKPOINT_KEY, cp.checkpoint_id.as_str())?;
        }
        txn.commit()?;
        // After the commit: a crash in between leaves the mirror one signed
        // checkpoint behind, which still verifies (it agrees with the chain).
        if let Some(mirror) = HeadMirror::of(&cp) {
            mirror.write(&self.head_mirror)?;
        }
        Ok(cp.checkpoint_id)
    }

    /// Every stored checkpoint, in ID order.
    pub fn checkpoints(&self) -> StoreResult<Vec<Checkpoint>> {
        let txn = self.db.begin_read()?;
        let cps = txn.open_table(AUDIT_CHECKPOINTS)?;
        let mut out = Vec::new();
        for row in cps.iter()? {
            let (_, v) = row?;
            out.push(codec::decode("audit_checkpoints", v.value())?);
        }
        Ok(out)
    }

    /// Signatures and the head mirror checked against the stored chain (run
    /// after the hash chain itself verified): catches a chain rewritten with
    /// recomputed hashes and a cut tail, and reports what no signature covers.
    pub fn verify_sealed(&self, verifier: &dyn CheckpointVerifier) -> StoreResult<SealReport> {
        self.assess_seal(&self.checkpoints()?, verifier)
    }

    /// [`Self::verify_sealed`] against the latest checkpoint and the mirror
    /// only — what the daemon checks at every start. A rewrite with
    /// recomputed hashes changes every hash after it, so the latest signed
    /// head sees it, and a cut tail falls below that head or the mirror;
    /// reading and verifying every checkpoint ever written (one an hour)
    /// would make start-up grow with the age of the log.
    pub fn verify_sealed_head(&self, verifier: &dyn CheckpointVerifier) -> StoreResult<SealReport> {
        let latest: Vec<Checkpoint> = self.latest_checkpoint()?.into_iter().collect();
        self.assess_seal(&latest, verifier)
    }

    fn assess_seal(
        &self,
        checkpoints: &[Checkpoint],
        verifier: &dyn CheckpointVerifier,
    ) -> StoreResult<SealReport> {
        let mirror = HeadMirror::read(&self.head_mirror)?;
        let txn = self.db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let hash_at = |seq: u64| -> StoreResult<Option<String>> {
            match table.get(seq)? {
                None => Ok(None),
                Some(v) => {
                    let entry: AuditEntry = codec::decode("audit", v.value())?;
                    Ok(Some(entry.compute_hash()?))
                }
            }
        };
        audit_seal::assess(
            table.len()?,
            &hash_at,
            checkpoints,
            mirror.as_ref(),
            verifier,
        )
    }

    pub fn latest_checkpoint(&self) -> StoreResult<Option<Checkpoint>> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let Some(id) = meta
            .get(LATEST_CHECKPOINT_KEY)?
            .map(|v| v.value().to_string())
        else {
            return Ok(None);
        };
        let cps = txn.open_table(AUDIT_CHECKPOINTS)?;
        let found = cps.get(id.as_str())?;
        match found {
            Some(v) => Ok(Some(codec::decode("audit_checkpoints", v.value())?)),
            None => Err(StoreError::Corrupt(format!(
                "latest audit checkpoint {id} is missing"
            ))),
        }
    }

    /// Verify from a checkpoint (the latest when `None`) to the current head.
    /// With no checkpoint at all this is a full verification.
    pub fn verify_from_checkpoint(
        &self,
        checkpoint_id: Option<&str>,
    ) -> StoreResult<ChainVerification> {
        let cp = match checkpoint_id {
            Some(id) => {
                let txn = self.db.begin_read()?;
                let cps = txn.open_table(AUDIT_CHECKPOINTS)?;
                let found = cps.get(id)?;
                match found {
                    Some(v) => codec::decode::<Checkpoint>("audit_checkpoints", v.value())?,
                    None => {
                        return Err(StoreError::NotFound {
                            what: "audit checkpoint",
                            id: id.to_string(),
                        });
                    }
                }
            }
            None => match self.latest_checkpoint()? {
                Some(cp) => cp,
                None => return self.verify_chain(),
            },
        };
        let txn = self.db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let len = table.len()?;
        if let Some(broken) = check_checkpoint(&table, &cp, len)? {
            return Ok(broken);
        }
        let mut walked = walk(
            table.range((cp.head_seq + 1)..)?,
            cp.head_seq + 1,
            cp.head_hash.clone(),
        )?;
        walked.entries_checked += 1; // the checkpointed head itself
        Ok(walked)
    }
}

/// Audit events whose data went through [`never_log::sanitize`], once:
/// sanitising is not idempotent (it rebuilds the withheld-keys list), and
/// a group commit may run its operation again, so the events are sanitised
/// when the operation is built and only borrowed when it runs.
pub(crate) struct Sanitized(Vec<(String, JsonObject)>);

impl Sanitized {
    pub(crate) fn new(mut events: Vec<(String, JsonObject)>) -> Self {
        for (_, data) in &mut events {
            never_log::sanitize(data);
        }
        Sanitized(events)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What an append needs of the last entry (its data is skipped unread).
#[derive(Deserialize)]
struct Head {
    entry_hash: String,
}

/// Append entries inside an open write transaction (also used by other stores
/// that must audit in the same transaction as their own change); their IDs.
pub(crate) fn append_in(txn: &WriteTransaction, events: &Sanitized) -> StoreResult<Vec<String>> {
    let mut table = txn.open_table(AUDIT)?;
    let (mut next_seq, mut prev_hash) = match table.last()? {
        Some((k, v)) => {
            let last: Head = codec::decode("audit", v.value())?;
            (k.value() + 1, last.entry_hash)
        }
        None => (0, GENESIS_HASH.to_string()),
    };
    let mut ids = Vec::with_capacity(events.0.len());
    for (event, data) in &events.0 {
        let timestamp = Timestamp::now();
        let fields = HashedFields {
            seq: next_seq,
            timestamp: &timestamp,
            event,
            data,
            prev_hash: &prev_hash,
        };
        let entry_hash = fields.hash()?;
        let entry = EntryRef {
            fields: &fields,
            entry_hash: &entry_hash,
        };
        table.insert(next_seq, codec::encode("audit", &entry)?.as_slice())?;
        ids.push(entry_id(next_seq));
        prev_hash = entry_hash;
        next_seq += 1;
    }
    Ok(ids)
}

type AuditRow<'a> = Result<
    (
        redb::AccessGuard<'a, u64>,
        redb::AccessGuard<'a, &'static [u8]>,
    ),
    redb::StorageError,
>;

/// Walk rows in key order, expecting `start_seq` first and `prev` as its prev_hash.
fn walk<'a>(
    rows: impl Iterator<Item = AuditRow<'a>>,
    start_seq: u64,
    prev: String,
) -> StoreResult<ChainVerification> {
    let mut expected_prev = prev;
    let mut checked = 0u64;
    for (expected_seq, row) in (start_seq..).zip(rows) {
        let (k, v) = row?;
        let key = k.value();
        let entry: AuditEntry = match codec::decode("audit", v.value()) {
            Ok(e) => e,
            Err(e) => {
                return Ok(ChainVerification::broken(
                    checked,
                    key,
                    format!("undecodable entry: {e}"),
                ));
            }
        };
        if key != expected_seq {
            return Ok(ChainVerification::broken(
                checked,
                expected_seq,
                format!("entry {expected_seq} is missing (next stored entry is {key})"),
            ));
        }
        if entry.seq != key {
            return Ok(ChainVerification::broken(
                checked,
                key,
                format!(
                    "entry stored at position {key} claims sequence {} (reordered)",
                    entry.seq
                ),
            ));
        }
        if entry.prev_hash != expected_prev {
            return Ok(ChainVerification::broken(
                checked,
                key,
                "prev_hash does not match the previous entry's hash".into(),
            ));
        }
        let recomputed = entry.compute_hash()?;
        if recomputed != entry.entry_hash {
            return Ok(ChainVerification::broken(
                checked,
                key,
                "entry_hash does not match the entry's contents (modified)".into(),
            ));
        }
        expected_prev = entry.entry_hash;
        checked += 1;
    }
    Ok(ChainVerification::ok(checked))
}

/// `None` when the checkpoint agrees with the stored chain.
fn check_checkpoint(
    table: &impl ReadableTable<u64, &'static [u8]>,
    cp: &Checkpoint,
    chain_len: u64,
) -> StoreResult<Option<ChainVerification>> {
    let found = table.get(cp.head_seq)?;
    let Some(v) = found else {
        return Ok(Some(ChainVerification::broken(
            chain_len,
            chain_len.min(cp.head_seq),
            format!(
                "truncated: checkpoint {} covers entry {} but the chain has only {} entries",
                cp.checkpoint_id, cp.head_seq, chain_len
            ),
        )));
    };
    let entry: AuditEntry = codec::decode("audit", v.value())?;
    if entry.entry_hash != cp.head_hash || entry.compute_hash()? != cp.head_hash {
        return Ok(Some(ChainVerification::broken(
            0,
            cp.head_seq,
            format!(
                "entry {} does not match checkpoint {}",
                cp.head_seq, cp.checkpoint_id
            ),
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use silas_core::never_log::REMOVED_KEY;

    use super::*;

    fn obj(v: serde_json::Value) -> JsonObject {
        match v {
            serde_json::Value::Object(o) => o,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn a_rerun_append_keeps_what_sanitising_withheld() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("audit.redb")).unwrap();
        let canary = "canary-7f3e9a";
        let events = Sanitized::new(vec![(
            "turn.responded".into(),
            obj(json!({"stdout": canary, "ok": 1})),
        )]);
        // A group commit whose batch failed runs the operation again in a
        // fresh transaction: the first run is rolled back.
        let txn = db.begin_write().unwrap();
        append_in(&txn, &events).unwrap();
        txn.abort().unwrap();
        let txn = db.begin_write().unwrap();
        assert_eq!(append_in(&txn, &events).unwrap(), ["0"]);
        txn.commit().unwrap();

        let txn = db.begin_read().unwrap();
        let table = txn.open_table(AUDIT).unwrap();
        let stored = table.get(0).unwrap().unwrap();
        let entry: AuditEntry = codec::decode("audit", stored.value()).unwrap();
        assert_eq!(entry.data[REMOVED_KEY], json!(["stdout"]));
        assert_eq!(entry.data["ok"], 1);
        assert!(!String::from_utf8_lossy(stored.value()).contains(canary));
        // The borrowed form wrote exactly what the owned entry encodes to,
        // under the hash of its fields.
        assert_eq!(entry.compute_hash().unwrap(), entry.entry_hash);
        assert_eq!(entry.prev_hash, GENESIS_HASH);
        assert_eq!(codec::encode("audit", &entry).unwrap(), stored.value());
    }
}
