//! The memory interface the turn pipeline calls (§4.3 `MemoryStore`, §5.1
//! steps 3.5, 4, 9, 10).
//!
//! The daemon's implementation is [`silas_memory::Memory`]: redb records
//! behind a tantivy full-text index (BM25, English stemming), scope-isolated
//! (issue #18). [`KeywordMemory`] — a plain keyword scan over the store — is
//! what runs when the index cannot be opened, and what tests that script
//! the memory use; both share the write rules of [`apply_op`].

use silas_core::Timestamp;
use silas_core::model::agents::{MemoryOp, MemoryOpType};
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier, TrustLevel};
use silas_core::model::messages::TaintLevel;
use silas_storage::{Store, StoreError};

/// Memory as the pipeline sees it. Synchronous: implementations are local.
pub trait MemoryIndex: Send + Sync {
    /// Store (or replace) a record; writes with the same id are idempotent.
    /// The pipeline calls this only before the turn's durable response
    /// commit (steps 3.5 and 5), so an implementation may defer durability
    /// to that commit: a turn that crashes first is replayed and stores the
    /// same ids again. It may also defer when searches find it (the raw
    /// capture and what an eviction keeps: nothing reads them back in the
    /// next turn), up to a batch or a few quiet seconds.
    fn store_raw(&self, item: &MemoryItem) -> Result<(), StoreError>;
    /// Keyword search within one scope, best first.
    fn search(
        &self,
        scope_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, StoreError>;
    /// Whether each of `ids` still exists, in order (a forgotten memory
    /// leaves the scope's context at the next turn). The stores answer in
    /// one read: a long conversation's context holds hundreds (issue #19).
    fn exist_each(&self, ids: &[&str]) -> Result<Vec<bool>, StoreError>;
    /// Counts a retrieval of each of `ids` (§3.8 `access_count`, read by
    /// the consolidator's promotion proposals). Test doubles that keep no
    /// counts use this default.
    fn record_access(&self, _ids: &[String]) -> Result<(), StoreError> {
        Ok(())
    }
    /// A count that moves whenever a memory is removed, so a scope
    /// re-checks the memories in its context ([`Self::exist_each`]) only
    /// after one was; `None` (test doubles that keep no count): every turn.
    fn removals(&self) -> Option<u64> {
        None
    }
    /// Up to `limit` of the scope's `profile` memories, newest first:
    /// pinned into its memory zone at rehydration (§5.1.3 step 3). The
    /// default is the spec's keyword query ([`PROFILE_QUERY`]) keeping
    /// `profile` memories; the real stores find them by type, whatever
    /// their words.
    fn profile(&self, scope_id: &str, limit: usize) -> Result<Vec<MemoryItem>, StoreError> {
        Ok(self
            .search(scope_id, PROFILE_QUERY, limit)?
            .into_iter()
            .filter(|m| m.memory_type == MemoryType::Profile)
            .collect())
    }
    /// Apply one (already gated) memory op for a scope: whether it changed
    /// a memory (an update or delete of an id that is not one of this
    /// scope's memories, or a link, changes none).
    fn apply(
        &self,
        scope_id: &str,
        op: &MemoryOp,
        taint: TaintLevel,
        id: &str,
    ) -> Result<bool, StoreError>;
}

/// §5.1.3 step 3's keyword query for a scope's profile.
pub const PROFILE_QUERY: &str = "user profile preferences";

/// A new memory record with the pipeline's defaults.
pub fn new_item(
    id: &str,
    scope_id: &str,
    content: &str,
    memory_type: MemoryType,
    tier: ReingestionTier,
    taint: TaintLevel,
    source_kind: &str,
) -> MemoryItem {
    let now = Timestamp::now();
    MemoryItem {
        memory_id: id.to_string(),
        content: content.to_string(),
        memory_type,
        reingestion_tier: tier,
        trust_level: TrustLevel::Working,
        taint,
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
        session_id: Some(scope_id.to_string()),
        embedding: None,
        source_kind: source_kind.to_string(),
    }
}

/// Keyword scan over the `memory` table (stand-in, see module docs).
#[derive(Clone)]
pub struct KeywordMemory {
    store: Store,
}

impl KeywordMemory {
    pub fn new(store: Store) -> Self {
        KeywordMemory { store }
    }
}

impl MemoryIndex for KeywordMemory {
    fn exist_each(&self, ids: &[&str]) -> Result<Vec<bool>, StoreError> {
        self.store.records::<MemoryItem>().contains_each(ids)
    }

    fn record_access(&self, ids: &[String]) -> Result<(), StoreError> {
        Ok(silas_memory::scan::record_access(
            &self.store,
            ids,
            Timestamp::now(),
            false,
        )?)
    }

    fn removals(&self) -> Option<u64> {
        Some(self.store.records::<MemoryItem>().removals())
    }

    fn store_raw(&self, item: &MemoryItem) -> Result<(), StoreError> {
        // No fsync of its own: durable with the turn's response commit (see
        // the trait); one fsync fewer per turn.
        self.store.records::<MemoryItem>().put_deferred(item)
    }

    fn search(
        &self,
        scope_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, StoreError> {
        // Raw conversation capture is not re-injected (§3.8 low tier).
        Ok(silas_memory::scan::search(
            &self.store,
            scope_id,
            ReingestionTier::Active,
            query,
            limit,
        )?)
    }

    fn profile(&self, scope_id: &str, limit: usize) -> Result<Vec<MemoryItem>, StoreError> {
        let mut found = silas_memory::scan::of_type(
            &self.store,
            scope_id,
            ReingestionTier::Active,
            MemoryType::Profile,
        )?;
        silas_memory::scan::newest_first(&mut found);
        found.truncate(limit);
        Ok(found)
    }

    fn apply(
        &self,
        scope_id: &str,
        op: &MemoryOp,
        taint: TaintLevel,
        id: &str,
    ) -> Result<bool, StoreError> {
        let records = self.store.records::<MemoryItem>();
        apply_op(
            scope_id,
            op,
            taint,
            id,
            &|k| records.get(k),
            &|m| records.put(m),
            &|k| records.delete(k).map(|_| ()),
        )
    }
}

type Get<'a> = &'a dyn Fn(&str) -> Result<Option<MemoryItem>, StoreError>;
type Put<'a> = &'a dyn Fn(&MemoryItem) -> Result<(), StoreError>;
type Del<'a> = &'a dyn Fn(&str) -> Result<(), StoreError>;

/// One (already gated) memory op: a store creates a `working` memory of the
/// op's taint; update and delete touch only the scope's own memories and
/// never a constitutional one (§3.8; the pipeline refuses and audits such
/// ops first). An update shaped by external input takes its taint, and a
/// `verified` memory it changes drops to `working` (§3.9).
fn apply_op(
    scope_id: &str,
    op: &MemoryOp,
    taint: TaintLevel,
    id: &str,
    get: Get<'_>,
    put: Put<'_>,
    delete: Del<'_>,
) -> Result<bool, StoreError> {
    match op.op {
        MemoryOpType::Store => {
            let content = op.content.clone().unwrap_or_default();
            let mut item = new_item(
                id,
                scope_id,
                &content,
                op.memory_type,
                ReingestionTier::Active,
                taint,
                "memory_op",
            );
            item.semantic_tags = op.tags.clone();
            item.entity_refs = op.entity_refs.clone();
            put(&item).map(|()| true)
        }
        MemoryOpType::Update => {
            let Some(target) = op.memory_id.as_deref() else {
                return Ok(false);
            };
            match get(target)? {
                Some(mut m)
                    if m.session_id.as_deref() == Some(scope_id)
                        && m.trust_level != TrustLevel::Constitutional =>
                {
                    if let Some(c) = &op.content {
                        m.content = c.clone();
                    }
                    if taint == TaintLevel::External {
                        m.taint = TaintLevel::External;
                        if m.trust_level == TrustLevel::Verified {
                            m.trust_level = TrustLevel::Working;
                        }
                    }
                    m.updated_at = Timestamp::now();
                    put(&m).map(|()| true)
                }
                _ => Ok(false),
            }
        }
        MemoryOpType::Delete => {
            if let Some(target) = op.memory_id.as_deref()
                && let Some(m) = get(target)?
                && m.session_id.as_deref() == Some(scope_id)
                && m.trust_level != TrustLevel::Constitutional
            {
                delete(target)?;
                return Ok(true);
            }
            Ok(false)
        }
        MemoryOpType::Link => Ok(false),
    }
}

impl MemoryIndex for silas_memory::Memory {
    fn exist_each(&self, ids: &[&str]) -> Result<Vec<bool>, StoreError> {
        self.store().records::<MemoryItem>().contains_each(ids)
    }

    fn record_access(&self, ids: &[String]) -> Result<(), StoreError> {
        Ok(self.record_access_queued(ids, Timestamp::now())?)
    }

    fn removals(&self) -> Option<u64> {
        Some(self.store().records::<MemoryItem>().removals())
    }

    fn store_raw(&self, item: &MemoryItem) -> Result<(), StoreError> {
        // Durable with the turn's response commit (see the trait); queued,
        // so the turn does not wait for the store's writer.
        Ok(self.put_queued(item)?)
    }

    fn search(
        &self,
        scope_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, StoreError> {
        Ok(self.search_keyword(scope_id, query, limit)?)
    }

    fn profile(&self, scope_id: &str, limit: usize) -> Result<Vec<MemoryItem>, StoreError> {
        Ok(self.of_type(scope_id, MemoryType::Profile, limit)?)
    }

    fn apply(
        &self,
        scope_id: &str,
        op: &MemoryOp,
        taint: TaintLevel,
        id: &str,
    ) -> Result<bool, StoreError> {
        apply_op(
            scope_id,
            op,
            taint,
            id,
            &|k| Ok(self.get(k)?),
            &|m| Ok(self.put(m, true)?),
            &|k| {
                self.forget(&silas_memory::Forget::Id(k.to_string()))?;
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_skips_other_scopes_and_the_raw_tier() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let mem = KeywordMemory::new(store);
        for (id, scope, tier) in [
            ("a", "s1", ReingestionTier::Active),
            ("b", "s2", ReingestionTier::Active),
            ("c", "s1", ReingestionTier::LowReingestion),
        ] {
            let m = new_item(
                id,
                scope,
                "hello there",
                MemoryType::Fact,
                tier,
                TaintLevel::Owner,
                "t",
            );
            mem.store_raw(&m).unwrap();
        }
        let found = mem.search("s1", "hello", 10).unwrap();
        let ids: Vec<_> = found.iter().map(|m| m.memory_id.as_str()).collect();
        assert_eq!(ids, vec!["a"]);
    }
    fn op(kind: &str, id: Option<&str>, content: &str) -> MemoryOp {
        serde_json::from_value(serde_json::json!({
            "op": kind, "memory_id": id, "content": content, "memory_type": "fact"
        }))
        .unwrap()
    }

    /// Both implementations keep the same write rules (the index one also
    /// keeps its index in step).
    #[test]
    fn memory_ops_follow_the_same_rules_in_both_implementations() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let full = silas_memory::Memory::in_ram(store.clone()).unwrap();
        let scan = KeywordMemory::new(store.clone());
        let impls: [(&str, &dyn MemoryIndex); 2] = [("index", &full), ("scan", &scan)];
        for (name, mem) in impls {
            let id = |s: &str| format!("{name}-{s}");
            mem.apply(
                "s1",
                &op("store", None, "the owner likes tea"),
                TaintLevel::Owner,
                &id("a"),
            )
            .unwrap();
            let a = store
                .records::<MemoryItem>()
                .get(&id("a"))
                .unwrap()
                .unwrap();
            assert_eq!(a.trust_level, TrustLevel::Working, "{name}");
            // Verified, then changed by external input: downgraded and tainted.
            store
                .records::<MemoryItem>()
                .put(&MemoryItem {
                    trust_level: TrustLevel::Verified,
                    ..a
                })
                .unwrap();
            mem.apply(
                "s1",
                &op("update", Some(&id("a")), "the owner likes coffee"),
                TaintLevel::External,
                "u",
            )
            .unwrap();
            let a = store
                .records::<MemoryItem>()
                .get(&id("a"))
                .unwrap()
                .unwrap();
            assert_eq!(
                (a.trust_level, a.taint),
                (TrustLevel::Working, TaintLevel::External),
                "{name}"
            );
            // Another scope can neither update nor delete it.
            mem.apply(
                "s2",
                &op("update", Some(&id("a")), "hijacked"),
                TaintLevel::Owner,
                "u",
            )
            .unwrap();
            mem.apply(
                "s2",
                &op("delete", Some(&id("a")), ""),
                TaintLevel::Owner,
                "u",
            )
            .unwrap();
            let a = store
                .records::<MemoryItem>()
                .get(&id("a"))
                .unwrap()
                .unwrap();
            assert_eq!(a.content, "the owner likes coffee", "{name}");
            // A constitutional memory is immutable.
            store
                .records::<MemoryItem>()
                .put(&MemoryItem {
                    trust_level: TrustLevel::Constitutional,
                    ..a
                })
                .unwrap();
            mem.apply(
                "s1",
                &op("delete", Some(&id("a")), ""),
                TaintLevel::Owner,
                "u",
            )
            .unwrap();
            assert!(
                store
                    .records::<MemoryItem>()
                    .get(&id("a"))
                    .unwrap()
                    .is_some(),
                "{name}"
            );
        }
        // The index saw every write made through it (the scan's went to the
        // store alone): the scope finds its own record only.
        let found = full.search("s1", "coffee", 10).unwrap();
        let ids: Vec<&str> = found.iter().map(|m| m.memory_id.as_str()).collect();
        assert_eq!(ids, vec!["index-a"]);
        assert!(full.search("s2", "coffee", 10).unwrap().is_empty());
        // A delete through the index implementation leaves no index entry.
        full.apply(
            "s1",
            &op("store", None, "ephemeral note"),
            TaintLevel::Owner,
            "e",
        )
        .unwrap();
        assert_eq!(full.search("s1", "ephemeral", 10).unwrap().len(), 1);
        full.apply("s1", &op("delete", Some("e"), ""), TaintLevel::Owner, "x")
            .unwrap();
        assert!(full.search("s1", "ephemeral", 10).unwrap().is_empty());
    }
}
