//! `ChronicleStore` (spec §4.14): conversation history per scope, in time
//! order, for rehydration after a restart. Entries are keyed
//! `(scope_id, created_at µs, seq)`; a time index keyed
//! `(created_at µs, scope_id, seq)` makes retention pruning a range scan
//! instead of a full-table walk. Both change in one transaction.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable};
use silas_core::Timestamp;
use silas_core::model::context::ContextItem;

use crate::codec;
use crate::error::StoreResult;
use crate::schema::{CHRONICLE, CHRONICLE_BY_TIME, COUNTERS};

const TABLE: &str = "chronicle";
const SEQ_COUNTER: &str = "chronicle_seq";

/// Default retention for chronicle entries (§4.14).
pub const DEFAULT_RETENTION_DAYS: i64 = 90;

#[derive(Clone)]
pub struct ChronicleStore {
    db: Arc<Database>,
}

impl ChronicleStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        ChronicleStore { db }
    }

    /// Append an entry for one scope.
    pub fn append(&self, scope_id: &str, item: &ContextItem) -> StoreResult<()> {
        let txn = self.db.begin_write()?;
        append_in(&txn, scope_id, item)?;
        txn.commit()?;
        Ok(())
    }

    /// The most recent `limit` entries of one scope, oldest first.
    pub fn get_recent(&self, scope_id: &str, limit: usize) -> StoreResult<Vec<ContextItem>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(CHRONICLE)?;
        let mut out = Vec::with_capacity(limit.min(1024));
        let range = table.range((scope_id, i64::MIN, 0u64)..=(scope_id, i64::MAX, u64::MAX))?;
        for row in range.rev().take(limit) {
            let (_, v) = row?;
            out.push(codec::decode(TABLE, v.value())?);
        }
        out.reverse();
        Ok(out)
    }

    /// Delete the entries of one scope that `gone` picks (the owner's
    /// `memory forget`); returns the count.
    pub fn remove_where(
        &self,
        scope_id: &str,
        gone: impl Fn(&ContextItem) -> bool,
    ) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let removed = {
            let mut table = txn.open_table(CHRONICLE)?;
            let mut by_time = txn.open_table(CHRONICLE_BY_TIME)?;
            let mut keys: Vec<(i64, u64)> = Vec::new();
            for row in table.range((scope_id, i64::MIN, 0u64)..=(scope_id, i64::MAX, u64::MAX))? {
                let (k, v) = row?;
                let item: ContextItem = codec::decode(TABLE, v.value())?;
                if gone(&item) {
                    let (_, ts, seq) = k.value();
                    keys.push((ts, seq));
                }
            }
            for (ts, seq) in &keys {
                table.remove((scope_id, *ts, *seq))?;
                by_time.remove((*ts, scope_id, *seq))?;
            }
            keys.len() as u64
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Delete every entry (all scopes) created before `cutoff`; returns the count.
    pub fn prune_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let removed = {
            let mut by_time = txn.open_table(CHRONICLE_BY_TIME)?;
            let mut table = txn.open_table(CHRONICLE)?;
            let mut keys: Vec<(i64, String, u64)> = Vec::new();
            for row in by_time.range((i64::MIN, "", 0u64)..(cutoff.as_micros(), "", 0u64))? {
                let (k, _) = row?;
                let (ts, scope, seq) = k.value();
                keys.push((ts, scope.to_string(), seq));
            }
            for (ts, scope, seq) in &keys {
                table.remove((scope.as_str(), *ts, *seq))?;
                by_time.remove((*ts, scope.as_str(), *seq))?;
            }
            keys.len() as u64
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Apply a retention policy of `days` relative to `now`.
    pub fn prune_older_than(&self, now: Timestamp, days: i64) -> StoreResult<u64> {
        self.prune_before(now.minus(chrono::Duration::days(days)))
    }
}

/// Append a chronicle entry inside an open write transaction (also used by
/// the inbox, whose stage changes commit together with their entry).
pub(crate) fn append_in(
    txn: &redb::WriteTransaction,
    scope_id: &str,
    item: &ContextItem,
) -> StoreResult<()> {
    let mut counters = txn.open_table(COUNTERS)?;
    let seq = counters.get(SEQ_COUNTER)?.map(|v| v.value()).unwrap_or(0);
    counters.insert(SEQ_COUNTER, seq + 1)?;
    let ts = item.created_at.as_micros();
    let mut table = txn.open_table(CHRONICLE)?;
    table.insert((scope_id, ts, seq), codec::encode(TABLE, item)?.as_slice())?;
    let mut by_time = txn.open_table(CHRONICLE_BY_TIME)?;
    by_time.insert((ts, scope_id, seq), ())?;
    Ok(())
}
