//! The linear scan over redb that answers while the index is being rebuilt
//! (and the reference the index is tested against): plain word overlap,
//! the same scope and tier rules.

use silas_core::Timestamp;
use silas_core::model::memory::{MemoryItem, ReingestionTier};
use silas_storage::Store;

use crate::MemoryError;

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .collect()
}

/// The scope's records (prefiltered on the stored JSON, then checked).
pub(crate) fn all_of(store: &Store, scope: &str) -> Result<Vec<MemoryItem>, MemoryError> {
    let needle = format!(
        "\"session_id\":{}",
        serde_json::to_string(scope).unwrap_or_default()
    );
    Ok(store
        .records::<MemoryItem>()
        .list_prefiltered(|json| json.contains(&needle))?
        .into_iter()
        .filter(|m| m.session_id.as_deref() == Some(scope))
        .collect())
}

pub(crate) fn search(
    store: &Store,
    scope: &str,
    tier: ReingestionTier,
    query: &str,
    limit: usize,
) -> Result<Vec<MemoryItem>, MemoryError> {
    let q = words(query);
    if q.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let mut scored: Vec<(usize, MemoryItem)> = all_of(store, scope)?
        .into_iter()
        .filter(|m| m.reingestion_tier == tier)
        .filter_map(|m| {
            let w = words(&m.content);
            let score = q.iter().filter(|t| w.contains(t)).count();
            (score > 0).then_some((score, m))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.memory_id.cmp(&b.1.memory_id)));
    Ok(scored.into_iter().take(limit).map(|(_, m)| m).collect())
}

pub(crate) fn between(
    store: &Store,
    scope: &str,
    from: Timestamp,
    to: Timestamp,
    limit: usize,
) -> Result<Vec<MemoryItem>, MemoryError> {
    Ok(all_of(store, scope)?
        .into_iter()
        .filter(|m| m.created_at >= from && m.created_at < to)
        .take(limit)
        .collect())
}
