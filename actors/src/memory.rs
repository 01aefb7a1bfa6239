//! The memory interface the turn pipeline calls (§4.3 `MemoryStore`, §5.1
//! steps 3.5, 4, 9, 10) and a minimal real implementation.
//!
//! [`KeywordMemory`] is a plain keyword scan over the store's `memory`
//! records (scope = `MemoryItem.session_id`). **It is a stand-in:** the full
//! memory index (tantivy full-text, optional vectors, trust rules, episode
//! eviction) is later work and replaces it behind the same [`MemoryIndex`]
//! trait without touching the pipeline.

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
    /// same ids again.
    fn store_raw(&self, item: &MemoryItem) -> Result<(), StoreError>;
    /// Keyword search within one scope, best first.
    fn search(
        &self,
        scope_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, StoreError>;
    /// Apply one (already gated) memory op for a scope.
    fn apply(
        &self,
        scope_id: &str,
        op: &MemoryOp,
        taint: TaintLevel,
        id: &str,
    ) -> Result<(), StoreError>;
}

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

/// A raw-tier record's `reingestion_tier` field as serde_json writes it.
const LOW_TIER_JSON: &str = "\"reingestion_tier\":\"low_reingestion\"";

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .collect()
}

impl MemoryIndex for KeywordMemory {
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
        let q = words(query);
        if q.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        // Decoding every record of every scope per turn grew with the store
        // (every turn adds a raw capture): skip, before decoding, records
        // that are not this scope's or are in the raw tier. serde_json
        // escapes quotes inside strings, so these key/value sequences only
        // occur as the fields themselves; the filters below still decide.
        let session = format!(
            "\"session_id\":{}",
            serde_json::to_string(scope_id).unwrap_or_default()
        );
        let mut scored: Vec<(usize, MemoryItem)> = self
            .store
            .records::<MemoryItem>()
            .list_prefiltered(|json| json.contains(&session) && !json.contains(LOW_TIER_JSON))?
            .into_iter()
            .filter(|m| m.session_id.as_deref() == Some(scope_id))
            // Raw conversation capture is not re-injected (§3.8 low tier).
            .filter(|m| m.reingestion_tier == ReingestionTier::Active)
            .filter_map(|m| {
                let w = words(&m.content);
                let score = q.iter().filter(|t| w.contains(t)).count();
                (score > 0).then_some((score, m))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.memory_id.cmp(&b.1.memory_id)));
        Ok(scored.into_iter().take(limit).map(|(_, m)| m).collect())
    }

    fn apply(
        &self,
        scope_id: &str,
        op: &MemoryOp,
        taint: TaintLevel,
        id: &str,
    ) -> Result<(), StoreError> {
        let records = self.store.records::<MemoryItem>();
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
                records.put(&item)
            }
            MemoryOpType::Update => {
                let Some(target) = op.memory_id.as_deref() else {
                    return Ok(());
                };
                match records.get(target)? {
                    // Constitutional memories cannot be modified at runtime
                    // (§3.8); the pipeline refuses and audits such ops first.
                    Some(mut m)
                        if m.session_id.as_deref() == Some(scope_id)
                            && m.trust_level != TrustLevel::Constitutional =>
                    {
                        if let Some(c) = &op.content {
                            m.content = c.clone();
                        }
                        m.updated_at = Timestamp::now();
                        records.put(&m)
                    }
                    _ => Ok(()),
                }
            }
            MemoryOpType::Delete => {
                if let Some(target) = op.memory_id.as_deref()
                    && let Some(m) = records.get(target)?
                    && m.session_id.as_deref() == Some(scope_id)
                    && m.trust_level != TrustLevel::Constitutional
                {
                    records.delete(target)?;
                }
                Ok(())
            }
            MemoryOpType::Link => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search prefilter's needles match the stored form exactly.
    #[test]
    fn prefilter_needles_match_the_stored_json() {
        let raw = new_item(
            "raw-1",
            "sc\"ope",
            "text with \"reingestion_tier\":\"low_reingestion\"",
            MemoryType::Episode,
            ReingestionTier::LowReingestion,
            TaintLevel::Owner,
            "conversation_raw",
        );
        let json = serde_json::to_string(&raw).unwrap();
        assert_eq!(json.matches(LOW_TIER_JSON).count(), 1, "{json}");
        assert!(json.contains(&format!("\"session_id\":{}", "\"sc\\\"ope\"")));
        let active = MemoryItem {
            reingestion_tier: ReingestionTier::Active,
            ..raw
        };
        let json = serde_json::to_string(&active).unwrap();
        assert!(!json.contains(LOW_TIER_JSON), "{json}");
    }

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
}
