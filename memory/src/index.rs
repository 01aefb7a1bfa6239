//! The full-text index over memory records (tantivy): one document per
//! memory — its id (a fast column: hits are read without touching the
//! compressed doc store), scope, its lane (tier and scope in one term, so a
//! keyword search filters with one posting list instead of intersecting a
//! scope list with a tier list that holds nearly every document),
//! `created_at` (fast) and content analysed with the English stemmer
//! (`en_stem`). BM25 ranks.
//!
//! The index is a cache of redb, never the truth: every hit is re-read
//! from the store and re-checked (scope, tier) by the caller. Queries are
//! built from analysed terms, never parsed from user text, so no input can
//! change the query's shape (a `scope:other` in a message is just words).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier};
use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::IndexWriterOptions;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Term, doc};

use crate::MemoryError;

/// Indexing arena (tantivy's minimum per thread is 15 MB); one thread: the
/// daemon writes a handful of memories per turn.
const WRITER_ARENA: usize = 15_000_000;
/// Merge threads of a writer (tantivy's default is four): the segments
/// merged here are a few hundred small documents each, one merge at a time
/// keeps up, and every writer made (a turn's first capture after start or
/// an idle minute) starts three fewer threads.
const MERGE_THREADS: usize = 1;
/// At most this many distinct query terms are looked up.
const MAX_QUERY_TERMS: usize = 32;

#[derive(Clone, Copy)]
struct Fields {
    id: Field,
    scope: Field,
    lane: Field,
    created: Field,
    content: Field,
    /// `{memory_type}/{lane}`: a scope's memories of one type in one tier
    /// are one posting list (rehydration's pinned profile, §5.1.3).
    kind: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        id: b.add_text_field("id", STRING | FAST),
        scope: b.add_text_field("scope", STRING),
        lane: b.add_text_field("lane", STRING),
        created: b.add_i64_field("created", INDEXED | FAST),
        content: b.add_text_field("content", text),
        kind: b.add_text_field("kind", STRING),
    };
    (b.build(), fields)
}

pub(crate) fn tier_name(t: ReingestionTier) -> &'static str {
    match t {
        ReingestionTier::Active => "active",
        ReingestionTier::LowReingestion => "low_reingestion",
    }
}

/// The lane term: the tier's name, `/`, the scope (tier names have no `/`,
/// so the split is unambiguous whatever the scope holds).
fn lane(tier: ReingestionTier, scope: &str) -> String {
    format!("{}/{scope}", tier_name(tier))
}

/// The kind term: the memory type's name (no `/`), `/`, the lane.
fn kind(memory_type: MemoryType, tier: ReingestionTier, scope: &str) -> String {
    format!("{}/{}", memory_type.as_str(), lane(tier, scope))
}

/// No scope: a memory without one is indexed under this, which no caller
/// passes (retrieval is always for a scope).
const NO_SCOPE: &str = "\u{0}none";

pub(crate) struct TextIndex {
    index: Index,
    /// Created at the first write, not at open: tantivy's writer allocates
    /// and stamps its 10,000-document pipeline channel up front (≈ 2.5 MB
    /// resident), which a daemon that has not written a memory yet does not
    /// need. Under the mutex, so concurrent first writes create one writer
    /// (tantivy's directory lock would refuse a second).
    writer: Mutex<Option<IndexWriter>>,
    reader: IndexReader,
    fields: Fields,
    /// Writes not yet committed that a read of the active lane must see:
    /// the next read commits them first.
    dirty: AtomicBool,
    /// Uncommitted writes no read needs at once: a turn's raw capture
    /// (§3.8), which nothing reads unless asked for the raw lane, and what
    /// a turn's context eviction keeps as memory, which was in the prompt
    /// until that turn. They wait for the next commit, a raw-lane read,
    /// [`DEFERRED_BATCH`] of them or a quiet spell
    /// ([`TextIndex::commit_if_quiet`]): a tantivy commit (new segment
    /// files, several fsyncs, its indexing thread started anew) per turn was
    /// most of a turn's cost, and once a long conversation's context was
    /// full, every turn paid one and the merges behind it (issue #19). Lost
    /// in a crash, they make the document count differ from redb's, and the
    /// index is rebuilt at the next start. Counts `queued` too.
    deferred: AtomicUsize,
    /// Deferred writes not yet handed to the writer: a turn's capture never
    /// waits for the writer's lock, which a commit holds throughout (about
    /// 10 ms; the turn that completed a batch used to pay that commit, the
    /// one-client p99 of issue #19), nor makes the writer. Every use of the
    /// writer adds these first, so a later delete or update of the same
    /// memory applies after them.
    queued: Mutex<Vec<MemoryItem>>,
    /// Raised when a batch is waiting, for the thread that commits batches
    /// ([`TextIndex::commit_batches_elsewhere`]); without one, the write
    /// that completes a batch commits it.
    committer: OnceLock<Arc<BatchSignal>>,
    /// `deferred` as the last [`TextIndex::commit_if_quiet`] saw it.
    quiet_seen: AtomicUsize,
    /// Every write so far (a counter, compared between idle looks).
    writes: AtomicUsize,
    /// `writes` at the last [`TextIndex::release_writer_if_idle`] look, and
    /// how many looks in a row found it unchanged.
    idle_seen: Mutex<(usize, u32)>,
}

/// Looks without a write after which the writer is dropped: a minute at the
/// quiet-commit thread's 5 s. A writer holds a 10,000-slot document channel
/// (2.4 MiB, all touched) and three threads (indexer, segment updater, one
/// merger); a conversation's turns come well within a minute of each other
/// and keep it, an idle daemon gives it back and makes a new one (a few ms)
/// at its next write (issue #19 item 4).
const WRITER_IDLE_LOOKS: u32 = 12;

/// Deferred writes committed together at most.
pub(crate) const DEFERRED_BATCH: usize = 256;

/// Queued deferred writes at which the writer of one commits them itself,
/// committer or not: a committer that stopped keeping up must not let the
/// queue grow without bound.
const QUEUE_LIMIT: usize = DEFERRED_BATCH * 4;

/// Wakes the thread that commits batches of deferred writes.
#[derive(Default)]
pub(crate) struct BatchSignal {
    raised: Mutex<bool>,
    cv: Condvar,
}

impl BatchSignal {
    fn raise(&self) {
        if let Ok(mut raised) = self.raised.lock() {
            *raised = true;
            self.cv.notify_one();
        }
    }

    /// Waits until raised or `until`; whether it was raised (lowering it).
    pub(crate) fn wait_until(&self, until: Instant) -> bool {
        let Ok(mut raised) = self.raised.lock() else {
            return false;
        };
        loop {
            if *raised {
                *raised = false;
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.cv.wait_timeout(raised, left) {
                Ok((guard, _)) => raised = guard,
                Err(_) => return false,
            }
        }
    }
}

/// The index holds the words of every captured message, so only the
/// daemon's user may enter its directory: tantivy writes its files with the
/// process umask (0644), and the data dir above is traversable (0711 for a
/// root daemon, so the sandbox user reaches `sandbox/`).
fn private_dir(dir: &Path) -> Result<(), MemoryError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |e: std::io::Error| MemoryError::Io(format!("{}: {e}", dir.display()));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

fn ix(e: tantivy::TantivyError) -> MemoryError {
    MemoryError::Index(e.to_string())
}

impl TextIndex {
    /// Opens the index in `dir`, creating it when missing. An index that
    /// does not open (corrupt, another schema) is discarded and created
    /// anew. Returns whether it was (re)created — the caller rebuilds.
    pub(crate) fn open(dir: &Path) -> Result<(TextIndex, bool), MemoryError> {
        let (schema, fields) = schema();
        let existing = dir.join("meta.json").is_file();
        if existing {
            // An index made by an older build (0755, as tantivy's files are
            // 0644) is narrowed before anything reads it.
            private_dir(dir)?;
            let opened = MmapDirectory::open(dir)
                .map_err(|e| MemoryError::Index(e.to_string()))
                .and_then(|d| Index::open(d).map_err(ix))
                .and_then(|i| {
                    if i.schema() == schema {
                        Ok(i)
                    } else {
                        Err(MemoryError::Index("schema changed".into()))
                    }
                });
            match opened {
                Ok(index) => return Ok((Self::wrap(index, fields)?, false)),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), "memory index unusable ({e}); rebuilding");
                    std::fs::remove_dir_all(dir)
                        .map_err(|e| MemoryError::Io(format!("{}: {e}", dir.display())))?;
                }
            }
        }
        private_dir(dir)?;
        let d = MmapDirectory::open(dir).map_err(|e| MemoryError::Index(e.to_string()))?;
        let index = Index::create(d, schema, Default::default()).map_err(ix)?;
        Ok((Self::wrap(index, fields)?, true))
    }

    /// An index in RAM (tests and benchmarks).
    pub(crate) fn in_ram() -> Result<TextIndex, MemoryError> {
        let (schema, fields) = schema();
        Self::wrap(Index::create_in_ram(schema), fields)
    }

    fn wrap(index: Index, fields: Fields) -> Result<TextIndex, MemoryError> {
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(ix)?;
        Ok(TextIndex {
            index,
            writer: Mutex::new(None),
            reader,
            fields,
            dirty: AtomicBool::new(false),
            deferred: AtomicUsize::new(0),
            queued: Mutex::new(Vec::new()),
            committer: OnceLock::new(),
            quiet_seen: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            idle_seen: Mutex::new((0, 0)),
        })
    }

    /// Runs `f` with the writer under its lock, creating the writer first
    /// if no write has happened yet.
    fn with_writer<R>(
        &self,
        f: impl FnOnce(&mut IndexWriter) -> Result<R, MemoryError>,
    ) -> Result<R, MemoryError> {
        let mut slot = self
            .writer
            .lock()
            .map_err(|_| MemoryError::Index("index writer poisoned".into()))?;
        self.writes.fetch_add(1, Ordering::AcqRel);
        let w = match &mut *slot {
            Some(w) => w,
            none => none.insert(
                self.index
                    .writer_with_options(
                        IndexWriterOptions::builder()
                            .num_worker_threads(1)
                            .num_merge_threads(MERGE_THREADS)
                            .memory_budget_per_thread(WRITER_ARENA)
                            .build(),
                    )
                    .map_err(ix)?,
            ),
        };
        self.drain(w, false)?;
        f(w)
    }

    /// Adds the queued deferred writes to the writer (the caller holds its
    /// lock). With `settle`, also takes the count of deferred writes not yet
    /// committed — all in the writer once this returns — for the commit
    /// about to run; taken under the queue's lock, so a write queued
    /// meanwhile is counted for the next commit, not lost.
    fn drain(&self, w: &IndexWriter, settle: bool) -> Result<usize, MemoryError> {
        let (items, taken) = {
            let mut queued = self.queue()?;
            let taken = if settle {
                self.deferred.swap(0, Ordering::AcqRel)
            } else {
                0
            };
            (std::mem::take(&mut *queued), taken)
        };
        for item in &items {
            if let Err(e) = self.add(w, item) {
                self.deferred.fetch_add(taken, Ordering::AcqRel);
                return Err(e);
            }
        }
        Ok(taken)
    }

    fn queue(&self) -> Result<std::sync::MutexGuard<'_, Vec<MemoryItem>>, MemoryError> {
        self.queued
            .lock()
            .map_err(|_| MemoryError::Index("index queue poisoned".into()))
    }

    /// Makes [`Self::commit`] the job of whoever waits on `signal` once
    /// [`DEFERRED_BATCH`] deferred writes are waiting, instead of the write
    /// that completed the batch (the daemon's quiet-commit thread,
    /// `Memory::open`). The first call wins.
    pub(crate) fn commit_batches_elsewhere(&self, signal: Arc<BatchSignal>) {
        let _ = self.committer.set(signal);
    }

    /// Documents searchable now, committing nothing (tests).
    #[cfg(test)]
    pub(crate) fn committed_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Whether the writer exists yet (tests).
    #[cfg(test)]
    pub(crate) fn has_writer(&self) -> bool {
        self.writer.lock().is_ok_and(|w| w.is_some())
    }

    /// Adds or replaces one memory's document (not yet committed): the next
    /// read of its lane commits it first, except a raw capture (deferred).
    pub(crate) fn upsert(&self, item: &MemoryItem) -> Result<(), MemoryError> {
        if item.reingestion_tier == ReingestionTier::LowReingestion {
            return self.upsert_deferred(item);
        }
        self.with_writer(|w| {
            self.add(w, item)?;
            self.dirty.store(true, Ordering::Release);
            Ok(())
        })
    }

    /// [`Self::upsert`] for a write no read needs at once, whatever its lane
    /// (see `deferred`). Never waits for the writer: handed to it when it
    /// is free (tantivy indexes the document in its own thread, so a batch
    /// is indexed as it comes, not all at its commit), queued while a
    /// commit holds it or before it exists (made off the turn, by the
    /// next commit).
    pub(crate) fn upsert_deferred(&self, item: &MemoryItem) -> Result<(), MemoryError> {
        let mut no_writer = false;
        let direct = match self.writer.try_lock() {
            Ok(mut slot) => match slot.as_mut() {
                Some(w) => {
                    self.drain(w, false)?;
                    self.add(w, item)?;
                    // Counted under the writer's lock: no commit can take
                    // the document without its count.
                    Some(self.count_deferred())
                }
                None => {
                    no_writer = true;
                    None
                }
            },
            // Held (a commit runs), or poisoned: the queue's next drain
            // reports that.
            Err(_) => None,
        };
        let waiting = match direct {
            Some(waiting) => waiting,
            None => {
                let mut queued = self.queue()?;
                queued.push(item.clone());
                self.count_deferred()
            }
        };
        if waiting < DEFERRED_BATCH {
            // The committer makes the writer now, so the rest of the batch
            // is indexed as it comes rather than all at its commit.
            if no_writer && let Some(committer) = self.committer.get() {
                committer.raise();
            }
            return Ok(());
        }
        match self.committer.get() {
            Some(committer) if waiting < QUEUE_LIMIT => {
                committer.raise();
                Ok(())
            }
            _ => self.commit(),
        }
    }

    /// Counts one more deferred write; how many wait for a commit now.
    fn count_deferred(&self) -> usize {
        self.writes.fetch_add(1, Ordering::AcqRel);
        self.deferred.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Many at once, under one lock (rebuild, import: the caller commits).
    pub(crate) fn upsert_all(&self, items: &[MemoryItem]) -> Result<(), MemoryError> {
        self.with_writer(|w| {
            for item in items {
                self.add(w, item)?;
            }
            self.dirty.store(true, Ordering::Release);
            Ok(())
        })
    }

    /// One memory's document, replacing any earlier one (the caller holds
    /// the writer's lock and accounts for the write).
    fn add(&self, w: &IndexWriter, item: &MemoryItem) -> Result<(), MemoryError> {
        let f = self.fields;
        let scope = item.session_id.as_deref().unwrap_or(NO_SCOPE);
        w.delete_term(Term::from_field_text(f.id, &item.memory_id));
        w.add_document(doc!(
            f.id => item.memory_id.as_str(),
            f.scope => scope,
            f.lane => lane(item.reingestion_tier, scope),
            f.kind => kind(item.memory_type, item.reingestion_tier, scope),
            f.created => item.created_at.as_micros(),
            f.content => item.content.as_str(),
        ))
        .map_err(ix)?;
        Ok(())
    }

    pub(crate) fn delete(&self, ids: &[String]) -> Result<(), MemoryError> {
        self.with_writer(|w| {
            for id in ids {
                w.delete_term(Term::from_field_text(self.fields.id, id));
            }
            self.dirty.store(true, Ordering::Release);
            Ok(())
        })
    }

    pub(crate) fn clear(&self) -> Result<(), MemoryError> {
        self.with_writer(|w| w.delete_all_documents().map(|_| ()).map_err(ix))?;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// Commits every pending write and makes it visible to searches.
    pub(crate) fn commit(&self) -> Result<(), MemoryError> {
        self.commit_for(true)
    }

    /// Commits when a read that does (`raw`) or does not see the raw lane
    /// needs it; see `deferred` (a batch of those is committed when it is
    /// complete, [`Self::upsert_deferred`]).
    fn commit_for(&self, raw: bool) -> Result<(), MemoryError> {
        let needed = self.dirty.load(Ordering::Acquire)
            || (raw && self.deferred.load(Ordering::Acquire) > 0);
        if !needed {
            return Ok(());
        }
        self.with_writer(|w| {
            // Taken under the writer lock: writes racing this commit set them
            // again and are committed next time.
            let taken = self.drain(w, true)?;
            self.dirty.store(false, Ordering::Release);
            if let Err(e) = w.commit() {
                self.dirty.store(true, Ordering::Release);
                self.deferred.fetch_add(taken, Ordering::AcqRel);
                return Err(ix(e));
            }
            Ok(())
        })?;
        self.reader.reload().map_err(ix)?;
        Ok(())
    }

    /// What [`Self::commit_batches_elsewhere`]'s signal asks for: commits
    /// a complete batch of deferred writes, or else hands the queued ones
    /// to the writer, making it (a capture found none); whether it
    /// committed. A signal raised again by the batch just committed finds
    /// none.
    pub(crate) fn commit_batch(&self) -> Result<bool, MemoryError> {
        if self.deferred.load(Ordering::Acquire) >= DEFERRED_BATCH {
            self.commit()?;
            return Ok(true);
        }
        let queued = self.queue()?.len();
        if queued > 0 {
            self.with_writer(|_| Ok(()))?;
        }
        Ok(false)
    }

    /// Commits the deferred writes still waiting when none has come since
    /// the previous call; whether it committed. Called on a timer: once the
    /// visitors have gone quiet, their last deferred writes are committed
    /// (durable, so a crash no longer forces a rebuild) and the writer's
    /// indexing arena — megabytes while a segment is open — is given back,
    /// instead of staying until the next burst's batch or raw-lane read.
    pub(crate) fn commit_if_quiet(&self) -> Result<bool, MemoryError> {
        let pending = self.deferred.load(Ordering::Acquire);
        let seen = self.quiet_seen.swap(pending, Ordering::AcqRel);
        if pending == 0 || pending != seen {
            return Ok(false);
        }
        self.commit()?;
        self.quiet_seen.store(0, Ordering::Release);
        Ok(true)
    }

    /// Drops the writer once [`WRITER_IDLE_LOOKS`] calls in a row saw no
    /// write and nothing is left to commit; whether it did. Called on the
    /// quiet-commit timer, after [`Self::commit_if_quiet`]. The writer's
    /// merges finish first, under its lock, so the next write's new writer
    /// never finds the index still locked by this one.
    pub(crate) fn release_writer_if_idle(&self) -> Result<bool, MemoryError> {
        let writes = self.writes.load(Ordering::Acquire);
        {
            let mut seen = self
                .idle_seen
                .lock()
                .map_err(|_| MemoryError::Index("idle tracker poisoned".into()))?;
            let looks = if seen.0 == writes {
                seen.1.saturating_add(1)
            } else {
                0
            };
            *seen = (writes, looks);
            if looks < WRITER_IDLE_LOOKS {
                return Ok(false);
            }
        }
        let mut slot = self
            .writer
            .lock()
            .map_err(|_| MemoryError::Index("index writer poisoned".into()))?;
        let pending =
            self.dirty.load(Ordering::Acquire) || self.deferred.load(Ordering::Acquire) > 0;
        if pending || self.writes.load(Ordering::Acquire) != writes {
            return Ok(false);
        }
        match slot.take() {
            Some(w) => {
                w.wait_merging_threads().map_err(ix)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    pub(crate) fn num_docs(&self) -> Result<u64, MemoryError> {
        self.commit()?;
        Ok(self.reader.searcher().num_docs())
    }

    /// The query's analysed terms (the content field's own analyser), de-duplicated.
    fn terms(&self, query: &str) -> Result<Vec<Term>, MemoryError> {
        let mut analyzer = self
            .index
            .tokenizer_for_field(self.fields.content)
            .map_err(ix)?;
        let mut stream = analyzer.token_stream(query);
        let mut seen = Vec::new();
        while stream.advance() {
            let t = stream.token().text.clone();
            if !seen.contains(&t) {
                seen.push(t);
            }
            if seen.len() >= MAX_QUERY_TERMS {
                break;
            }
        }
        Ok(seen
            .into_iter()
            .map(|t| Term::from_field_text(self.fields.content, &t))
            .collect())
    }

    fn filter(&self, field: Field, value: &str) -> (Occur, Box<dyn Query>) {
        let q = TermQuery::new(
            Term::from_field_text(field, value),
            IndexRecordOption::Basic,
        );
        // Filters do not score: BM25 over the content decides the order.
        (
            Occur::Must,
            Box::new(ConstScoreQuery::new(Box::new(q), 0.0)),
        )
    }

    fn run(&self, query: &dyn Query, limit: usize, raw: bool) -> Result<Vec<String>, MemoryError> {
        self.commit_for(raw)?;
        let searcher = self.reader.searcher();
        let top = searcher
            .search(query, &TopDocs::with_limit(limit).order_by_score())
            .map_err(ix)?;
        let mut ids = Vec::with_capacity(top.len());
        for (_, addr) in top {
            // The id's fast column: no doc-store block to decompress per hit.
            let Some(col) = searcher
                .segment_reader(addr.segment_ord)
                .fast_fields()
                .str("id")
                .map_err(ix)?
            else {
                continue;
            };
            let mut id = String::new();
            if let Some(ord) = col.term_ords(addr.doc_id).next()
                && col
                    .ord_to_str(ord, &mut id)
                    .map_err(|e| MemoryError::Index(e.to_string()))?
            {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// BM25 over `query` within one scope and tier, best first.
    pub(crate) fn search(
        &self,
        scope: &str,
        tier: ReingestionTier,
        query: &str,
        limit: usize,
    ) -> Result<Vec<String>, MemoryError> {
        let terms = self.terms(query)?;
        if terms.is_empty() || limit == 0 || scope.is_empty() {
            return Ok(Vec::new());
        }
        let any_term: Vec<(Occur, Box<dyn Query>)> = terms
            .into_iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs));
                (Occur::Should, q)
            })
            .collect();
        let q = BooleanQuery::new(vec![
            self.filter(self.fields.lane, &lane(tier, scope)),
            (Occur::Must, Box::new(BooleanQuery::new(any_term))),
        ]);
        self.run(&q, limit, tier == ReingestionTier::LowReingestion)
    }

    /// Up to `limit` memories of one scope, tier and type (unordered: the
    /// caller orders them).
    pub(crate) fn of_kind(
        &self,
        scope: &str,
        tier: ReingestionTier,
        memory_type: MemoryType,
        limit: usize,
    ) -> Result<Vec<String>, MemoryError> {
        if limit == 0 || scope.is_empty() {
            return Ok(Vec::new());
        }
        let q = TermQuery::new(
            Term::from_field_text(self.fields.kind, &kind(memory_type, tier, scope)),
            IndexRecordOption::Basic,
        );
        self.run(&q, limit, tier == ReingestionTier::LowReingestion)
    }

    /// Memories of one scope created in `[from, to)` (microseconds), newest
    /// index order; the caller sorts by time.
    pub(crate) fn created_between(
        &self,
        scope: &str,
        from: i64,
        to: i64,
        limit: usize,
    ) -> Result<Vec<String>, MemoryError> {
        if limit == 0 || scope.is_empty() || from >= to {
            return Ok(Vec::new());
        }
        let range = RangeQuery::new(
            Bound::Included(Term::from_field_i64(self.fields.created, from)),
            Bound::Excluded(Term::from_field_i64(self.fields.created, to)),
        );
        let q = BooleanQuery::new(vec![
            self.filter(self.fields.scope, scope),
            (Occur::Must, Box::new(range)),
        ]);
        // Time ranges cover every lane.
        self.run(&q, limit, true)
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
pub(crate) mod tests;
