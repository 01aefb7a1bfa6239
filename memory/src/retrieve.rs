//! `MemoryRetriever` (§4.3, issue #18 item 3): one ranked, de-duplicated
//! answer from several strategies.
//!
//! * **Keyword** — BM25 over the full-text index ([`crate::Memory::search_keyword`]).
//! * **Semantic** — cosine similarity between the query's embedding and the
//!   scope's stored embeddings, only when an [`Embedder`] is configured. It is
//!   off by default: Silas never downloads a model at run time, so an
//!   embedder is something the owner installs and names.
//!
//! The lists are merged by reciprocal-rank fusion (`Σ 1 / (60 + rank)`),
//! each memory counted once, best first. Every strategy reads one scope
//! only, as the store does.

use std::collections::BTreeMap;
use std::sync::Arc;

use silas_core::model::memory::{MemoryItem, ReingestionTier};

use crate::{Memory, MemoryError, scan};

/// Turns text into a vector. Implementations must be local (no network).
pub trait Embedder: Send + Sync {
    fn embed(&self, text: &str) -> Result<Vec<f64>, String>;
}

/// The rank-fusion constant (the usual 60).
const RRF_K: f64 = 60.0;

/// Cosine similarity; 0 for mismatched or zero vectors.
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// Reciprocal-rank fusion of ranked id lists; ties keep first appearance.
pub fn fuse(lists: &[Vec<String>], limit: usize) -> Vec<String> {
    let mut score: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    let mut order = 0usize;
    for list in lists {
        for (rank, id) in list.iter().enumerate() {
            let e = score.entry(id.as_str()).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            e.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
    }
    let mut ranked: Vec<(&str, (f64, usize))> = score.into_iter().collect();
    ranked.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
    ranked
        .into_iter()
        .take(limit)
        .map(|(id, _)| id.to_owned())
        .collect()
}

/// Keyword plus (when configured) semantic retrieval over one store.
#[derive(Clone)]
pub struct Retriever {
    memory: Memory,
    embedder: Option<Arc<dyn Embedder>>,
}

impl Retriever {
    /// Keyword only (the default).
    pub fn new(memory: Memory) -> Self {
        Retriever {
            memory,
            embedder: None,
        }
    }

    /// With a local embedder for the semantic strategy.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The scope's active memories best matching `query`, each once.
    pub fn retrieve(
        &self,
        scope: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<MemoryItem>, MemoryError> {
        let keyword = self.memory.search_keyword(scope, query, limit)?;
        let Some(embedder) = &self.embedder else {
            return Ok(keyword);
        };
        let semantic = match embedder.embed(query) {
            Ok(q) => {
                let mut scored: Vec<(f64, MemoryItem)> = scan::all_of(self.memory.store(), scope)?
                    .into_iter()
                    .filter(|m| m.reingestion_tier == ReingestionTier::Active)
                    .filter_map(|m| {
                        let s = cosine(&q, m.embedding.as_deref()?);
                        (s > 0.0).then_some((s, m))
                    })
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                scored.truncate(limit);
                scored.into_iter().map(|(_, m)| m).collect()
            }
            Err(e) => {
                tracing::warn!("embedder failed; keyword results only: {e}");
                Vec::new()
            }
        };
        let ids = fuse(
            &[
                keyword.iter().map(|m| m.memory_id.clone()).collect(),
                semantic.iter().map(|m| m.memory_id.clone()).collect(),
            ],
            limit,
        );
        let mut by_id: BTreeMap<String, MemoryItem> = keyword
            .into_iter()
            .chain(semantic)
            .map(|m| (m.memory_id.clone(), m))
            .collect();
        Ok(ids.into_iter().filter_map(|id| by_id.remove(&id)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_counts_each_memory_once_and_rewards_agreement() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let fused = fuse(&[s(&["a", "b", "c"]), s(&["c", "d", "a"])], 10);
        assert_eq!(fused, ["a", "c", "b", "d"]);
        assert_eq!(fuse(&[s(&["x", "y"])], 1), ["x"]);
        assert!(fuse(&[], 5).is_empty());
    }

    #[test]
    fn cosine_edges() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 0.0]) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }
}
