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
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier};
use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Term, doc};

use crate::MemoryError;

/// Indexing arena (tantivy's minimum per thread is 15 MB); one thread: the
/// daemon writes a handful of memories per turn.
const WRITER_ARENA: usize = 15_000_000;
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
    /// index is rebuilt at the next start.
    deferred: AtomicUsize,
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
/// (2.4 MiB, all touched) and six threads; a conversation's turns come well
/// within a minute of each other and keep it, an idle daemon gives it back
/// and makes a new one (a few ms) at its next write (issue #19 item 4).
const WRITER_IDLE_LOOKS: u32 = 12;

/// Deferred writes committed together at most.
const DEFERRED_BATCH: usize = 256;

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
        std::fs::create_dir_all(dir)
            .map_err(|e| MemoryError::Io(format!("{}: {e}", dir.display())))?;
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
                    .writer_with_num_threads(1, WRITER_ARENA)
                    .map_err(ix)?,
            ),
        };
        f(w)
    }

    /// Whether the writer exists yet (tests).
    #[cfg(test)]
    pub(crate) fn has_writer(&self) -> bool {
        self.writer.lock().is_ok_and(|w| w.is_some())
    }

    /// Adds or replaces one memory's document (not yet committed): the next
    /// read of its lane commits it first, except a raw capture (deferred).
    pub(crate) fn upsert(&self, item: &MemoryItem) -> Result<(), MemoryError> {
        self.with_writer(|w| self.upsert_with(w, item, false))
    }

    /// [`Self::upsert`] for a write no read needs at once, whatever its lane
    /// (see `deferred`).
    pub(crate) fn upsert_deferred(&self, item: &MemoryItem) -> Result<(), MemoryError> {
        self.with_writer(|w| self.upsert_with(w, item, true))
    }

    /// Many at once, under one lock (rebuild, import).
    pub(crate) fn upsert_all(&self, items: &[MemoryItem]) -> Result<(), MemoryError> {
        self.with_writer(|w| {
            for item in items {
                self.upsert_with(w, item, false)?;
            }
            Ok(())
        })
    }

    fn upsert_with(
        &self,
        w: &IndexWriter,
        item: &MemoryItem,
        deferred: bool,
    ) -> Result<(), MemoryError> {
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
        if deferred || item.reingestion_tier == ReingestionTier::LowReingestion {
            self.deferred.fetch_add(1, Ordering::AcqRel);
        } else {
            self.dirty.store(true, Ordering::Release);
        }
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
    /// needs it; see `deferred`.
    fn commit_for(&self, raw: bool) -> Result<(), MemoryError> {
        let pending = self.deferred.load(Ordering::Acquire);
        let needed = self.dirty.load(Ordering::Acquire)
            || (pending > 0 && (raw || pending >= DEFERRED_BATCH));
        if !needed {
            return Ok(());
        }
        self.with_writer(|w| {
            // Taken under the writer lock: writes racing this commit set them
            // again and are committed next time.
            self.dirty.store(false, Ordering::Release);
            let taken = self.deferred.swap(0, Ordering::AcqRel);
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use silas_core::Timestamp;

    fn memory(id: &str, tier: ReingestionTier) -> MemoryItem {
        use silas_core::model::memory::{MemoryType, TrustLevel};
        use silas_core::model::messages::TaintLevel;
        let now = Timestamp::now();
        MemoryItem {
            memory_id: id.into(),
            content: format!("cats and dogs {id}"),
            memory_type: MemoryType::Fact,
            reingestion_tier: tier,
            trust_level: TrustLevel::Working,
            taint: TaintLevel::Owner,
            created_at: now,
            updated_at: now,
            valid_from: None,
            valid_until: None,
            access_count: 0,
            last_accessed: None,
            semantic_tags: Vec::new(),
            entity_refs: Vec::new(),
            causal_refs: Vec::new(),
            temporal_next: None,
            temporal_prev: None,
            session_id: Some("s".into()),
            embedding: None,
            source_kind: "test".into(),
        }
    }

    fn generation(ix: &TextIndex) -> u64 {
        ix.reader.searcher().generation().generation_id()
    }

    /// The active lane's "cats" memories.
    fn active_cats(ix: &TextIndex) -> Vec<String> {
        ix.search("s", ReingestionTier::Active, "cats", 500)
            .unwrap()
    }

    /// An index holding one committed active memory, "a1", and its
    /// generation.
    fn with_a1() -> (TextIndex, u64) {
        let ix = TextIndex::in_ram().unwrap();
        ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
        assert_eq!(active_cats(&ix), ["a1"]);
        let g = generation(&ix);
        (ix, g)
    }

    #[test]
    fn raw_captures_wait_for_a_raw_read_or_a_batch_while_active_writes_do_not() {
        let (ix, g) = with_a1();
        // A raw capture: an active-lane read does not commit for it…
        ix.upsert(&memory("r1", ReingestionTier::LowReingestion))
            .unwrap();
        assert_eq!(active_cats(&ix), ["a1"]);
        assert_eq!(generation(&ix), g, "committed for a raw capture");
        // …a raw-lane read does, and sees it.
        assert_eq!(
            ix.search("s", ReingestionTier::LowReingestion, "cats", 10)
                .unwrap(),
            ["r1"]
        );
        assert!(generation(&ix) > g);
        // A batch of raw captures is committed by any read.
        let g = generation(&ix);
        for n in 0..DEFERRED_BATCH {
            ix.upsert(&memory(
                &format!("r{}", n + 2),
                ReingestionTier::LowReingestion,
            ))
            .unwrap();
        }
        ix.search("s", ReingestionTier::Active, "cats", 10).unwrap();
        assert!(generation(&ix) > g);
        assert_eq!(ix.num_docs().unwrap(), DEFERRED_BATCH as u64 + 2);
    }

    /// What a context eviction keeps (active lane) is deferred like a raw
    /// capture: an active-lane read does not commit for it — once a long
    /// conversation's context is full every turn keeps some, and a commit
    /// per turn was most of the turn's cost — the quiet commit or a batch
    /// makes it searchable; an ordinary active write still commits at the
    /// next read.
    #[test]
    fn deferred_active_writes_wait_for_a_batch_or_a_quiet_spell() {
        let (ix, g) = with_a1();
        ix.upsert_deferred(&memory("kept1", ReingestionTier::Active))
            .unwrap();
        assert_eq!(active_cats(&ix), ["a1"]);
        assert_eq!(
            generation(&ix),
            g,
            "an active read committed a deferred write"
        );
        // Quiet: the next look commits it, and it is found.
        assert!(!ix.commit_if_quiet().unwrap());
        assert!(ix.commit_if_quiet().unwrap());
        let mut found = active_cats(&ix);
        found.sort();
        assert_eq!(found, ["a1", "kept1"]);
        // A batch of them is committed by the next active read.
        let g = generation(&ix);
        for n in 0..DEFERRED_BATCH {
            ix.upsert_deferred(&memory(&format!("kept{}", n + 2), ReingestionTier::Active))
                .unwrap();
        }
        assert_eq!(active_cats(&ix).len(), DEFERRED_BATCH + 2);
        assert!(generation(&ix) > g);
        // An ordinary active write is seen by the very next read.
        ix.upsert(&memory("a2", ReingestionTier::Active)).unwrap();
        assert!(active_cats(&ix).contains(&"a2".to_string()));
    }

    /// On disk, so that the new writer must find the old one's directory
    /// lock released.
    #[test]
    fn an_idle_writer_is_released_and_the_next_write_makes_another() {
        let dir = tempfile::tempdir().unwrap();
        let (ix, _) = TextIndex::open(dir.path()).unwrap();
        ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
        assert!(ix.has_writer());
        // A write not yet committed: kept, however long the quiet.
        for _ in 0..WRITER_IDLE_LOOKS * 2 {
            assert!(!ix.release_writer_if_idle().unwrap());
        }
        assert!(ix.has_writer());
        // Committed by a read; then a minute of looks without a write.
        assert_eq!(active_cats(&ix), ["a1"]);
        for _ in 0..WRITER_IDLE_LOOKS {
            assert!(!ix.release_writer_if_idle().unwrap());
        }
        assert!(ix.release_writer_if_idle().unwrap());
        assert!(!ix.has_writer());
        assert!(!ix.release_writer_if_idle().unwrap(), "released once");
        // Reads need no writer; the next write makes a new one.
        assert_eq!(active_cats(&ix), ["a1"]);
        ix.upsert(&memory("a2", ReingestionTier::Active)).unwrap();
        assert!(ix.has_writer());
        let mut found = active_cats(&ix);
        found.sort();
        assert_eq!(found, ["a1", "a2"]);
    }

    #[test]
    fn a_write_between_looks_restarts_the_idle_count() {
        let (ix, _) = with_a1();
        for round in 0..3 {
            for _ in 0..WRITER_IDLE_LOOKS {
                assert!(!ix.release_writer_if_idle().unwrap());
            }
            ix.upsert(&memory(&format!("b{round}"), ReingestionTier::Active))
                .unwrap();
            assert_eq!(active_cats(&ix).len(), round + 2);
        }
        assert!(ix.has_writer());
    }

    #[test]
    fn raw_captures_are_committed_once_quiet_and_not_while_they_keep_coming() {
        let ix = TextIndex::in_ram().unwrap();
        assert!(!ix.commit_if_quiet().unwrap(), "nothing pending");
        let g = generation(&ix);
        ix.upsert(&memory("r1", ReingestionTier::LowReingestion))
            .unwrap();
        assert!(
            !ix.commit_if_quiet().unwrap(),
            "a capture since the last look"
        );
        ix.upsert(&memory("r2", ReingestionTier::LowReingestion))
            .unwrap();
        assert!(!ix.commit_if_quiet().unwrap(), "still coming");
        assert_eq!(generation(&ix), g);
        // No capture between two looks: committed, visible, nothing left.
        assert!(ix.commit_if_quiet().unwrap());
        assert!(generation(&ix) > g);
        assert_eq!(ix.deferred.load(Ordering::Acquire), 0);
        assert_eq!(ix.reader.searcher().num_docs(), 2);
        assert!(!ix.commit_if_quiet().unwrap(), "nothing pending again");
    }

    #[test]
    fn the_writer_is_created_at_the_first_write_not_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let (ix, fresh) = TextIndex::open(dir.path()).unwrap();
        assert!(fresh);
        assert!(!ix.has_writer(), "open created the writer");
        // Reads and counts need no writer.
        assert_eq!(ix.num_docs().unwrap(), 0);
        assert!(
            ix.search("s", ReingestionTier::Active, "cats", 10)
                .unwrap()
                .is_empty()
        );
        assert!(!ix.has_writer());
        ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
        assert!(ix.has_writer());
        ix.commit().unwrap();
        drop(ix);
        // Reopened: the committed document is searchable, still no writer.
        let (ix, fresh) = TextIndex::open(dir.path()).unwrap();
        assert!(!fresh);
        assert_eq!(
            ix.search("s", ReingestionTier::Active, "cats", 10).unwrap(),
            ["a1"]
        );
        assert!(!ix.has_writer());
    }

    #[test]
    fn concurrent_first_writes_share_one_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (ix, _) = TextIndex::open(dir.path()).unwrap();
        let ix = std::sync::Arc::new(ix);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let ix = ix.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    // A second writer would fail on tantivy's directory lock.
                    ix.upsert(&memory(&format!("a{n}"), ReingestionTier::Active))
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(ix.num_docs().unwrap(), 8);
    }
}
