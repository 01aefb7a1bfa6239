//! The linear scan over redb that answers while the index is being rebuilt
//! (and the reference the index is tested against): plain word overlap,
//! the same scope and tier rules.

use silas_core::Timestamp;
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier};
use silas_storage::Store;

use crate::MemoryError;

/// A raw-tier record's `reingestion_tier` field as serde_json writes it.
pub const LOW_TIER_JSON: &str = "\"reingestion_tier\":\"low_reingestion\"";

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .collect()
}

/// The scope's records (prefiltered on the stored JSON, then checked).
pub(crate) fn all_of(store: &Store, scope: &str) -> Result<Vec<MemoryItem>, MemoryError> {
    of_scope(store, scope, None)
}

/// The scope's records, of `tier` only when given. Decoding every record of
/// every scope grew with the store (every turn adds a raw capture): records
/// that are not this scope's, or of another tier, are skipped before
/// decoding. serde_json escapes quotes inside strings, so these key/value
/// sequences only occur as the fields themselves; the decoded fields still
/// decide.
fn of_scope(
    store: &Store,
    scope: &str,
    tier: Option<ReingestionTier>,
) -> Result<Vec<MemoryItem>, MemoryError> {
    let needle = format!(
        "\"session_id\":{}",
        serde_json::to_string(scope).unwrap_or_default()
    );
    let tier_ok = |json: &str| match tier {
        None => true,
        Some(ReingestionTier::Active) => !json.contains(LOW_TIER_JSON),
        Some(ReingestionTier::LowReingestion) => json.contains(LOW_TIER_JSON),
    };
    Ok(store
        .records::<MemoryItem>()
        .list_prefiltered(|json| json.contains(&needle) && tier_ok(json))?
        .into_iter()
        .filter(|m| m.session_id.as_deref() == Some(scope))
        .filter(|m| tier.is_none_or(|t| m.reingestion_tier == t))
        .collect())
}

/// Word-overlap search of one scope's records of `tier`, best first (the
/// keyword scan, and the answer while the index is rebuilt).
pub fn search(
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
    let mut scored: Vec<(usize, MemoryItem)> = of_scope(store, scope, Some(tier))?
        .into_iter()
        .filter_map(|m| {
            let w = words(&m.content);
            let score = q.iter().filter(|t| w.contains(t)).count();
            (score > 0).then_some((score, m))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.memory_id.cmp(&b.1.memory_id)));
    Ok(scored.into_iter().take(limit).map(|(_, m)| m).collect())
}

/// The scope's records of `tier` and `memory_type`.
pub fn of_type(
    store: &Store,
    scope: &str,
    tier: ReingestionTier,
    memory_type: MemoryType,
) -> Result<Vec<MemoryItem>, MemoryError> {
    Ok(of_scope(store, scope, Some(tier))?
        .into_iter()
        .filter(|m| m.memory_type == memory_type)
        .collect())
}

/// Most recently updated first, ties by id (a stable order to pin in).
pub fn newest_first(items: &mut [MemoryItem]) {
    items.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.memory_id.cmp(&b.memory_id))
    });
}

/// Oldest created first, ties by id (temporal and session reads).
pub fn oldest_first(items: &mut [MemoryItem]) {
    items.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.memory_id.cmp(&b.memory_id))
    });
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

/// Counts one retrieval of each of `ids` that still exists (`access_count`,
/// `last_accessed`), in one write without an fsync of its own; `wait`:
/// return once it is visible, else at once (queued). Shared by
/// [`crate::Memory::record_access`] and the scan fallback.
pub fn record_access(
    store: &Store,
    ids: &[String],
    now: Timestamp,
    wait: bool,
) -> Result<(), MemoryError> {
    let records = store.records::<MemoryItem>();
    let count = move |m: &mut MemoryItem| {
        m.access_count = m.access_count.saturating_add(1);
        m.last_accessed = Some(now);
    };
    if wait {
        records.update_each(ids, count)?;
    } else {
        records.update_each_queued(ids, count);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search prefilter's needles match the stored form exactly.
    #[test]
    fn prefilter_needles_match_the_stored_json() {
        let raw: MemoryItem = serde_json::from_value(serde_json::json!({
            "memory_id": "raw-1", "session_id": "sc\"ope",
            "content": "text with \"reingestion_tier\":\"low_reingestion\"",
            "memory_type": "episode", "reingestion_tier": "low_reingestion",
            "taint": "owner", "source_kind": "conversation_raw"
        }))
        .unwrap();
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
}
