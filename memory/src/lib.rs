//! `silas-memory`: the memory store (§4.3, §6) — redb records (the truth)
//! behind a tantivy full-text index (BM25, English stemming) kept beside the
//! store in `{data_dir}/memory-index/`.
//!
//! * **Scope isolation.** Every retrieval names one scope; the index filters
//!   on it and every hit is re-read from redb and checked again, so no query
//!   text can reach another scope's memories. There is no cross-scope read
//!   API.
//! * **The index is a cache.** A missing, corrupt or stale index (document
//!   count ≠ records) is rebuilt from redb on a background thread; start-up
//!   does not wait, and searches scan redb until the rebuild is done.
//! * **Lanes.** `search_keyword` returns the active tier only; the raw
//!   `low_reingestion` lane (`search_raw`) is never auto-injected.
//! * **Forget** erases from redb and the index (and so from every later
//!   export); **export/import** is the versioned JSONL bundle of [`bundle`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod bundle;
pub mod consolidate;
mod index;
pub mod retrieve;
pub mod scan;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{Store, StoreError};

pub use bundle::{ImportMode, ImportReport};
use index::{BatchSignal, TextIndex};

/// Where the index lives under the data dir.
pub const INDEX_DIR: &str = "memory-index";

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("memory index: {0}")]
    Index(String),
    #[error("memory index files: {0}")]
    Io(String),
    #[error("memory bundle line {line}: {reason}")]
    Bundle { line: usize, reason: String },
}

impl Coded for MemoryError {
    fn code(&self) -> ErrorCode {
        match self {
            MemoryError::Store(e) => e.code(),
            MemoryError::Index(_) | MemoryError::Io(_) => ErrorCode::EDbIo,
            MemoryError::Bundle { .. } => ErrorCode::EDbCorrupt,
        }
    }
}

impl From<MemoryError> for StoreError {
    fn from(e: MemoryError) -> StoreError {
        match e {
            MemoryError::Store(s) => s,
            MemoryError::Bundle { .. } => StoreError::Invalid(e.to_string()),
            other => StoreError::Io(other.to_string()),
        }
    }
}

/// What to forget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forget {
    /// One memory, whatever its scope.
    Id(String),
    /// Every memory of `scope` (both tiers) whose text holds every word of
    /// `query` ([`mentions_all`]), as the conversation turns forgotten with
    /// them must: the index finds a memory by any one word, and
    /// "koala-55 banana" then forgot every memory mentioning bananas while
    /// the turn saying "koala-55" stayed.
    Query { scope: String, query: String },
    /// Every memory of a scope, both lanes (a purged customer scope), and
    /// the scope's persisted context subscriptions.
    Scope(String),
}

/// The words of a forget query, lowercased, for [`mentions_all`].
pub fn query_words(query: &str) -> Vec<String> {
    query.split_whitespace().map(str::to_lowercase).collect()
}

/// Whether `text` holds every one of `words` (lowercased, as
/// [`query_words`] gives them), case-insensitively; never for no words.
pub fn mentions_all(text: &str, words: &[String]) -> bool {
    let text = text.to_lowercase();
    !words.is_empty() && words.iter().all(|w| text.contains(w.as_str()))
}

/// How often the index looks for deferred writes that stopped coming.
const QUIET_COMMIT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

struct Inner {
    store: Store,
    index: TextIndex,
    /// The index holds every record (no rebuild running).
    ready: AtomicBool,
}

/// The memory store. Cheap to clone.
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

impl Memory {
    /// Opens the index in `dir` over `store`'s `memory` records. A new,
    /// corrupt or stale index is rebuilt in the background.
    pub fn open(store: Store, dir: &Path) -> Result<Memory, MemoryError> {
        let (index, fresh) = TextIndex::open(dir)?;
        let m = Memory::from_parts(store, index);
        let stale =
            fresh || m.inner.index.num_docs()? != m.inner.store.records::<MemoryItem>().len()?;
        if stale {
            m.rebuild_in_background();
        } else {
            m.inner.ready.store(true, Ordering::Release);
        }
        m.commit_when_quiet();
        Ok(m)
    }

    /// Starts the thread that commits deferred writes (raw captures,
    /// evictions kept as memory): each batch once complete
    /// (`TextIndex::commit_batches_elsewhere`, so no turn waits for it; it
    /// also makes the writer a capture found missing), and
    /// the last ones once none has come for [`QUIET_COMMIT_EVERY`]
    /// (`TextIndex::commit_if_quiet`); it ends with the last clone of this
    /// `Memory`.
    fn commit_when_quiet(&self) {
        let inner = Arc::downgrade(&self.inner);
        let signal = Arc::new(BatchSignal::default());
        let batches = signal.clone();
        let started = std::thread::Builder::new()
            .name("memory-quiet-commit".into())
            .spawn(move || {
                let mut next_look = Instant::now() + QUIET_COMMIT_EVERY;
                loop {
                    let batch = batches.wait_until(next_look);
                    let Some(inner) = inner.upgrade() else { break };
                    if batch && let Err(e) = inner.index.commit_batch() {
                        tracing::warn!("memory index: batch commit failed: {e}");
                    }
                    if Instant::now() < next_look {
                        continue;
                    }
                    next_look = Instant::now() + QUIET_COMMIT_EVERY;
                    if let Err(e) = inner.index.commit_if_quiet() {
                        tracing::warn!("memory index: quiet commit failed: {e}");
                    }
                    if let Err(e) = inner.index.release_writer_if_idle() {
                        tracing::warn!("memory index: releasing the idle writer failed: {e}");
                    }
                }
            });
        match started {
            Ok(_) => self.inner.index.commit_batches_elsewhere(signal),
            Err(e) => {
                tracing::warn!(
                    "memory index: no quiet commits ({e}); a batch is committed by the write that completes it"
                )
            }
        }
    }

    /// A RAM index over `store`, built before this returns (tests, benches).
    pub fn in_ram(store: Store) -> Result<Memory, MemoryError> {
        let m = Memory::from_parts(store, TextIndex::in_ram()?);
        m.rebuild()?;
        Ok(m)
    }

    fn from_parts(store: Store, index: TextIndex) -> Memory {
        Memory {
            inner: Arc::new(Inner {
                store,
                index,
                ready: AtomicBool::new(false),
            }),
        }
    }

    fn rebuild_in_background(&self) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("memory-index-rebuild".into())
            .spawn(move || match me.rebuild() {
                Ok(n) => tracing::info!(records = n, "memory index rebuilt"),
                Err(e) => tracing::error!(code = %e.code(), "memory index rebuild failed: {e}"),
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the memory index rebuild: {e}");
        }
    }

    /// Re-indexes every record from redb; returns how many.
    pub fn rebuild(&self) -> Result<usize, MemoryError> {
        let all = self.inner.store.records::<MemoryItem>().list()?;
        // A new store over a new index (every first start): nothing to
        // clear or add, and no writer (its channel and threads) to make.
        if all.is_empty() && self.inner.index.num_docs()? == 0 {
            self.inner.ready.store(true, Ordering::Release);
            return Ok(0);
        }
        self.inner.index.clear()?;
        for chunk in all.chunks(10_000) {
            self.inner.index.upsert_all(chunk)?;
        }
        self.inner.index.commit()?;
        self.inner.ready.store(true, Ordering::Release);
        Ok(all.len())
    }

    /// Whether the index is complete (tests wait for the background rebuild).
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }

    /// Waits up to `within` for [`Self::is_ready`].
    pub fn wait_ready(&self, within: Duration) -> bool {
        let until = std::time::Instant::now() + within;
        while !self.is_ready() {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Stores (or replaces) a record. `durable: false` skips the fsync: the
    /// record is durable with the store's next durable commit (a turn's raw
    /// capture, redone on replay).
    pub fn put(&self, item: &MemoryItem, durable: bool) -> Result<(), MemoryError> {
        let records = self.inner.store.records::<MemoryItem>();
        if durable {
            records.put(item)?;
        } else {
            records.put_deferred(item)?;
        }
        self.inner.index.upsert(item)?;
        Ok(())
    }

    /// [`Self::put`] with `durable: false`, without waiting for the store's
    /// writer: the record is queued and committed before any write queued
    /// after it (so the turn's own durable response commit makes it
    /// durable). Until then a search may find it in the index and drop it
    /// when re-reading redb. Searchable with the index's next batch of such
    /// writes, a raw-lane read or a quiet spell, not at the next read. For
    /// a turn's raw capture, which nothing reads back unless asked for the
    /// raw lane, and what its context eviction keeps as memory, which was
    /// in the prompt until that turn.
    pub fn put_queued(&self, item: &MemoryItem) -> Result<(), MemoryError> {
        self.inner.store.records::<MemoryItem>().put_queued(item)?;
        self.inner.index.upsert_deferred(item)?;
        Ok(())
    }

    /// Commits every write the index still holds back (a turn's raw
    /// capture waits for its batch or a quiet spell). The daemon calls it
    /// at shutdown: an index left behind its records is stale at the next
    /// start and rebuilt from scratch, every restart.
    pub fn flush(&self) -> Result<(), MemoryError> {
        self.inner.index.commit()
    }

    pub fn get(&self, id: &str) -> Result<Option<MemoryItem>, MemoryError> {
        Ok(self.inner.store.records::<MemoryItem>().get(id)?)
    }

    /// Re-reads hits from redb, keeping only the scope's records of `tier`.
    fn load(
        &self,
        ids: Vec<String>,
        scope: &str,
        tier: Option<ReingestionTier>,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        let records = self.inner.store.records::<MemoryItem>();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(m) = records.get(&id)?
                && m.session_id.as_deref() == Some(scope)
                && tier.is_none_or(|t| m.reingestion_tier == t)
            {
                out.push(m);
            }
        }
        Ok(out)
    }

    fn search_tier(
        &self,
        scope: &str,
        tier: ReingestionTier,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        if !self.is_ready() {
            return scan::search(&self.inner.store, scope, tier, query, limit);
        }
        let ids = self.inner.index.search(scope, tier, query, limit)?;
        self.load(ids, scope, Some(tier))
    }

    /// BM25 keyword search over the scope's active memories, best first.
    pub fn search_keyword(
        &self,
        scope: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        self.search_tier(scope, ReingestionTier::Active, query, limit)
    }

    /// The raw `low_reingestion` lane (conversation capture): searched only
    /// on explicit request, never injected automatically (§3.8).
    pub fn search_raw(
        &self,
        scope: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        self.search_tier(scope, ReingestionTier::LowReingestion, query, limit)
    }

    /// Up to `limit` of the scope's active memories of `memory_type`, most
    /// recently updated first (rehydration pins the scope's `profile`
    /// memories, §5.1.3 step 3). One posting list in the index; the scan
    /// while it is rebuilt.
    pub fn of_type(
        &self,
        scope: &str,
        memory_type: MemoryType,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        let tier = ReingestionTier::Active;
        let mut found = if self.is_ready() {
            // Every match, then the newest `limit`: the index's order is not
            // recency.
            let all = self.inner.store.records::<MemoryItem>().len()?.max(1) as usize;
            let ids = self.inner.index.of_kind(scope, tier, memory_type, all)?;
            self.load(ids, scope, Some(tier))?
        } else {
            scan::of_type(&self.inner.store, scope, tier, memory_type)?
        };
        found.retain(|m| m.memory_type == memory_type);
        scan::newest_first(&mut found);
        found.truncate(limit);
        Ok(found)
    }

    /// The scope's memories created in `[from, to)`, oldest first.
    pub fn search_between(
        &self,
        scope: &str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        let mut found = if self.is_ready() {
            let ids =
                self.inner
                    .index
                    .created_between(scope, from.as_micros(), to.as_micros(), limit)?;
            self.load(ids, scope, None)?
        } else {
            scan::between(&self.inner.store, scope, from, to, limit)?
        };
        scan::oldest_first(&mut found);
        Ok(found)
    }

    /// Every memory of a session (§4.3 `search_session`), both lanes,
    /// oldest first. A Silas session is a scope, so another scope's
    /// memories never appear.
    pub fn search_session(&self, scope: &str) -> Result<Vec<MemoryItem>, MemoryError> {
        let mut found = scan::all_of(&self.inner.store, scope)?;
        scan::oldest_first(&mut found);
        Ok(found)
    }

    /// The scope's memories valid at `at` (`valid_from` ≤ at < `valid_until`,
    /// open ends count as valid), active tier.
    pub fn valid_at(&self, scope: &str, at: Timestamp) -> Result<Vec<MemoryItem>, MemoryError> {
        Ok(scan::all_of(&self.inner.store, scope)?
            .into_iter()
            .filter(|m| m.reingestion_tier == ReingestionTier::Active)
            .filter(|m| m.valid_from.is_none_or(|f| f <= at))
            .filter(|m| m.valid_until.is_none_or(|u| at < u))
            .collect())
    }

    /// Erases memories from redb and the index; returns their ids (the
    /// caller audits the ids, never the content).
    pub fn forget(&self, what: &Forget) -> Result<Vec<String>, MemoryError> {
        let ids: Vec<String> = match what {
            Forget::Id(id) => vec![id.clone()],
            Forget::Scope(scope) => scan::all_of(&self.inner.store, scope)?
                .into_iter()
                .map(|m| m.memory_id)
                .collect(),
            Forget::Query { scope, query } => {
                let mut ids: Vec<String> = Vec::new();
                // Every match: at most all the records there are.
                let limit = self.inner.store.records::<MemoryItem>().len()?.max(1) as usize;
                let words = query_words(query);
                for tier in [ReingestionTier::Active, ReingestionTier::LowReingestion] {
                    for m in self.search_tier(scope, tier, query, limit)? {
                        if mentions_all(&m.content, &words) {
                            ids.push(m.memory_id);
                        }
                    }
                }
                ids
            }
        };
        let removed = self.inner.store.records::<MemoryItem>().delete_many(&ids)?;
        let gone: Vec<String> = removed.into_iter().map(|m| m.memory_id).collect();
        self.inner.index.delete(&gone)?;
        self.inner.index.commit()?;
        if let Forget::Scope(scope) = what {
            // A purged scope keeps nothing that re-reads or names its
            // memories: its persisted memory-query subscriptions go too.
            self.inner
                .store
                .records::<silas_core::model::context::ScopeSubscriptions>()
                .delete(scope)?;
        }
        Ok(gone)
    }

    /// One consolidator pass over `scope` (§6.4, [`consolidate`]): merges
    /// duplicates and prunes stale memories, durably; returns the plan
    /// applied (the caller audits ids and counts, never content).
    pub fn consolidate(
        &self,
        scope: &str,
        now: Timestamp,
        policy: consolidate::Policy,
    ) -> Result<consolidate::Plan, MemoryError> {
        let items = scan::all_of(&self.inner.store, scope)?;
        let plan = consolidate::plan(&items, now, policy);
        self.apply_plans(std::slice::from_ref(&plan))?;
        Ok(plan)
    }

    /// The consolidator's round over every scope: the store is read once
    /// and grouped by scope (each scope is planned on its own; nothing is
    /// merged across scopes), and every change is written in one go.
    /// Returns the scopes whose plan changed something.
    pub fn consolidate_all(
        &self,
        now: Timestamp,
        policy: consolidate::Policy,
    ) -> Result<Vec<(String, consolidate::Plan)>, MemoryError> {
        let mut by_scope: std::collections::BTreeMap<String, Vec<MemoryItem>> =
            std::collections::BTreeMap::new();
        for m in self.all()? {
            if let Some(scope) = m.session_id.clone() {
                by_scope.entry(scope).or_default().push(m);
            }
        }
        let changed: Vec<(String, consolidate::Plan)> = by_scope
            .into_iter()
            .map(|(scope, items)| (scope, consolidate::plan(&items, now, policy)))
            .filter(|(_, p)| !p.updated.is_empty() || !p.removed().is_empty())
            .collect();
        let plans: Vec<consolidate::Plan> = changed.iter().map(|(_, p)| p.clone()).collect();
        self.apply_plans(&plans)?;
        Ok(changed)
    }

    /// Writes consolidation plans to redb and the index (one commit).
    fn apply_plans(&self, plans: &[consolidate::Plan]) -> Result<(), MemoryError> {
        let updated: Vec<MemoryItem> = plans.iter().flat_map(|p| p.updated.clone()).collect();
        let removed: Vec<String> = plans.iter().flat_map(|p| p.removed()).collect();
        if updated.is_empty() && removed.is_empty() {
            return Ok(());
        }
        let records = self.inner.store.records::<MemoryItem>();
        records.put_many(&updated)?;
        records.delete_many(&removed)?;
        self.inner.index.upsert_all(&updated)?;
        self.inner.index.delete(&removed)?;
        self.inner.index.commit()?;
        Ok(())
    }

    /// Counts a retrieval of each of `ids` (§3.8 `access_count`,
    /// `last_accessed`; the consolidator's promotion rule reads them).
    /// Deferred: durable with the store's next durable commit; the index
    /// holds neither field, so it is not touched.
    pub fn record_access(&self, ids: &[String], now: Timestamp) -> Result<(), MemoryError> {
        scan::record_access(&self.inner.store, ids, now, true)
    }

    /// [`Self::record_access`] without waiting for the store's writer (a
    /// turn's retrieval: the counts are advisory and nothing in the turn
    /// reads them back; the writer commits them before the turn's later
    /// writes).
    pub fn record_access_queued(&self, ids: &[String], now: Timestamp) -> Result<(), MemoryError> {
        scan::record_access(&self.inner.store, ids, now, false)
    }

    /// The memories to propose for promotion, every scope, from one read.
    pub fn promotion_candidates(
        &self,
        policy: consolidate::Policy,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        let all = self.all()?;
        Ok(consolidate::promotion_candidates(&all, policy)
            .into_iter()
            .cloned()
            .collect())
    }

    /// Applies the owner's answer to a promotion card: `confirmed` makes
    /// the memory `verified`; otherwise it is tagged
    /// [`consolidate::PROMOTION_DECLINED_TAG`] and not proposed again.
    /// Nothing happens (`Ok(false)`) when the memory is gone, is no longer
    /// `working`, or its content changed since the card was made — the
    /// owner confirmed that text, not another.
    pub fn resolve_promotion(
        &self,
        asked: &silas_core::cards::MemoryPromotion,
        confirmed: bool,
    ) -> Result<bool, MemoryError> {
        let records = self.inner.store.records::<MemoryItem>();
        let Some(mut m) = records.get(&asked.memory_id)? else {
            return Ok(false);
        };
        let same = silas_core::canonical::sha256_hex(m.content.as_bytes()) == asked.content_sha256;
        if !same
            || m.trust_level != silas_core::model::memory::TrustLevel::Working
            || m.session_id.as_deref() != Some(asked.scope_id.as_str())
        {
            return Ok(false);
        }
        if confirmed {
            m.trust_level = silas_core::model::memory::TrustLevel::Verified;
        } else {
            m.semantic_tags
                .push(consolidate::PROMOTION_DECLINED_TAG.to_owned());
        }
        m.updated_at = Timestamp::now();
        records.put(&m)?;
        self.inner.index.upsert(&m)?;
        self.inner.index.commit()?;
        Ok(true)
    }

    /// The scopes that have memories (for the consolidator's rounds).
    pub fn scopes(&self) -> Result<Vec<String>, MemoryError> {
        let mut scopes: Vec<String> = self
            .all()?
            .into_iter()
            .filter_map(|m| m.session_id)
            .collect();
        scopes.sort();
        scopes.dedup();
        Ok(scopes)
    }

    /// Every record, for export (key order).
    pub(crate) fn all(&self) -> Result<Vec<MemoryItem>, MemoryError> {
        Ok(self.inner.store.records::<MemoryItem>().list()?)
    }

    /// Replaces or merges records durably, then re-indexes them.
    pub(crate) fn write_all(&self, items: &[MemoryItem], replace: bool) -> Result<(), MemoryError> {
        let records = self.inner.store.records::<MemoryItem>();
        if replace {
            records.replace_all(items)?;
            self.inner.index.clear()?;
        } else {
            records.put_many(items)?;
        }
        self.inner.index.upsert_all(items)?;
        self.inner.index.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A new store and index on disk, as the daemon opens them, ready.
    fn opened() -> (tempfile::TempDir, Memory) {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open_in(d.path()).unwrap();
        let m = Memory::open(store, &d.path().join("index")).unwrap();
        assert!(m.wait_ready(Duration::from_secs(10)));
        (d, m)
    }

    /// Every first start opens a new index over a new store: nothing to
    /// rebuild, so no writer (its channel and threads) is made for it.
    #[test]
    fn a_new_index_over_an_empty_store_makes_no_writer() {
        let (_d, m) = opened();
        assert!(!m.inner.index.has_writer());
    }

    /// The daemon's index hands complete batches of raw captures to its
    /// committer thread, which makes them searchable well before a quiet
    /// spell would ([`QUIET_COMMIT_EVERY`], two looks).
    #[test]
    fn the_committer_thread_commits_a_complete_batch() {
        let (_d, m) = opened();
        let started = Instant::now();
        for n in 0..index::DEFERRED_BATCH {
            let item = index::tests::memory(&format!("r{n}"), ReingestionTier::LowReingestion);
            m.put_queued(&item).unwrap();
        }
        let committed = || m.inner.index.committed_docs();
        while committed() < index::DEFERRED_BATCH as u64 && started.elapsed() < QUIET_COMMIT_EVERY {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(committed(), index::DEFERRED_BATCH as u64);
        assert!(started.elapsed() < QUIET_COMMIT_EVERY);
    }
}
