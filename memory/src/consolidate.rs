//! The memory consolidator (§6.4, issue #18 item 3), run in the background
//! every `memory.consolidation_interval_minutes`.
//!
//! * **Merge duplicates** — memories of one scope whose content is the same
//!   once case, spacing and trailing punctuation are ignored. The keeper is
//!   the most trusted (constitutional > verified > working), then the
//!   oldest; it takes the others' tags, entity refs and access counts, and
//!   only `working` copies are removed. Never across scopes: the household
//!   and chatbot cases rely on that isolation.
//! * **Prune stale** — `working` memories whose `valid_until` has passed,
//!   and `working` episodes (evicted context, conversation fragments) not
//!   used for [`Policy::stale_episode_days`]. Facts, preferences and
//!   decisions the owner kept are not pruned by age, and nothing verified or
//!   constitutional is ever removed.
//!
//! * **Propose promotion** — [`promotion_candidates`]: `working` memories
//!   of the active lane retrieved at least [`Policy::promote_after_accesses`]
//!   times and not already declined. Promotion to `verified` needs the
//!   owner's confirmation (§6.4 step 3, §5.12: external-tainted content is
//!   never persisted as verified without it), so the consolidator only
//!   proposes; [`crate::Memory::resolve_promotion`] applies the owner's
//!   answer.
//!
//! [`plan`] is the pure decision; [`crate::Memory::consolidate`] applies it.

use std::collections::BTreeMap;

use silas_core::Timestamp;
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier, TrustLevel};

/// The consolidator's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub stale_episode_days: i64,
    /// Retrievals after which a working memory is proposed for promotion.
    pub promote_after_accesses: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            stale_episode_days: 90,
            promote_after_accesses: 3,
        }
    }
}

/// Tag of a memory whose promotion the owner declined: not proposed again.
pub const PROMOTION_DECLINED_TAG: &str = "promotion:declined";

/// The memories the consolidator proposes for promotion, most used first.
pub fn promotion_candidates(items: &[MemoryItem], policy: Policy) -> Vec<&MemoryItem> {
    let mut out: Vec<&MemoryItem> = items
        .iter()
        .filter(|m| {
            m.trust_level == TrustLevel::Working
                && m.reingestion_tier == ReingestionTier::Active
                && m.session_id.is_some()
                && m.access_count >= policy.promote_after_accesses
                && !m.semantic_tags.iter().any(|t| t == PROMOTION_DECLINED_TAG)
        })
        .collect();
    out.sort_by(|a, b| {
        b.access_count
            .cmp(&a.access_count)
            .then(a.memory_id.cmp(&b.memory_id))
    });
    out
}

/// What one pass decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Keepers with the merged tags, refs and counts (to be written).
    pub updated: Vec<MemoryItem>,
    /// `(keeper id, removed duplicate ids)`.
    pub merged: Vec<(String, Vec<String>)>,
    /// Stale memories to remove.
    pub pruned: Vec<String>,
}

impl Plan {
    /// Every id the pass removes.
    pub fn removed(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.merged.iter().flat_map(|(_, d)| d.clone()).collect();
        ids.extend(self.pruned.iter().cloned());
        ids
    }
}

/// Content as duplicates are compared.
pub fn normalise(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(['.', '!', '?', ' '])
        .to_lowercase()
}

fn trust_rank(t: TrustLevel) -> u8 {
    match t {
        TrustLevel::Constitutional => 2,
        TrustLevel::Verified => 1,
        TrustLevel::Working => 0,
    }
}

/// The pass over one scope's memories (`items` all of one scope).
pub fn plan(items: &[MemoryItem], now: Timestamp, policy: Policy) -> Plan {
    let mut out = Plan::default();
    let day = 86_400_000_000i64;
    let stale_before = now.as_micros() - policy.stale_episode_days * day;
    let mut pruned = std::collections::BTreeSet::new();
    for m in items {
        if m.trust_level != TrustLevel::Working {
            continue;
        }
        let expired = m
            .valid_until
            .is_some_and(|u| u.as_micros() <= now.as_micros());
        let last_use = m.last_accessed.unwrap_or(m.updated_at).as_micros();
        let stale_episode = m.memory_type == MemoryType::Episode
            && m.reingestion_tier == ReingestionTier::Active
            && last_use < stale_before;
        if expired || stale_episode {
            pruned.insert(m.memory_id.clone());
        }
    }
    // Duplicates among what is left, per tier (the raw lane stays apart).
    let mut groups: BTreeMap<(ReingestionTier, String), Vec<&MemoryItem>> = BTreeMap::new();
    for m in items.iter().filter(|m| !pruned.contains(&m.memory_id)) {
        let key = normalise(&m.content);
        if !key.is_empty() {
            groups.entry((m.reingestion_tier, key)).or_default().push(m);
        }
    }
    for (_, mut group) in groups {
        if group.len() < 2 {
            continue;
        }
        group.sort_by(|a, b| {
            trust_rank(b.trust_level)
                .cmp(&trust_rank(a.trust_level))
                .then(a.created_at.as_micros().cmp(&b.created_at.as_micros()))
                .then(a.memory_id.cmp(&b.memory_id))
        });
        let mut keeper = group[0].clone();
        let mut removed = Vec::new();
        for dup in &group[1..] {
            if dup.trust_level != TrustLevel::Working {
                continue;
            }
            for t in &dup.semantic_tags {
                if !keeper.semantic_tags.contains(t) {
                    keeper.semantic_tags.push(t.clone());
                }
            }
            for r in &dup.entity_refs {
                if !keeper.entity_refs.contains(r) {
                    keeper.entity_refs.push(r.clone());
                }
            }
            keeper.access_count = keeper.access_count.saturating_add(dup.access_count);
            removed.push(dup.memory_id.clone());
        }
        if !removed.is_empty() {
            keeper.updated_at = now;
            out.merged.push((keeper.memory_id.clone(), removed));
            out.updated.push(keeper);
        }
    }
    out.pruned = pruned.into_iter().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::model::messages::TaintLevel;

    fn at(days_ago: i64) -> Timestamp {
        let now = Timestamp::parse("2026-11-24T12:00:00Z").unwrap();
        Timestamp::from_micros(now.as_micros() - days_ago * 86_400_000_000).unwrap()
    }

    fn mem(id: &str, content: &str, t: MemoryType, trust: TrustLevel, days_ago: i64) -> MemoryItem {
        MemoryItem {
            memory_id: id.into(),
            content: content.into(),
            memory_type: t,
            reingestion_tier: ReingestionTier::Active,
            trust_level: trust,
            taint: TaintLevel::Owner,
            created_at: at(days_ago),
            updated_at: at(days_ago),
            valid_from: None,
            valid_until: None,
            access_count: 1,
            last_accessed: None,
            semantic_tags: vec![format!("tag-{id}")],
            entity_refs: Vec::new(),
            causal_refs: Vec::new(),
            temporal_next: None,
            temporal_prev: None,
            session_id: Some("owner".into()),
            embedding: None,
            source_kind: "memory_op".into(),
        }
    }

    #[test]
    fn duplicates_merge_into_the_most_trusted_oldest_and_only_working_copies_go() {
        use MemoryType::Fact;
        use TrustLevel::*;
        let items = vec![
            mem("a", "The cat is called Miso.", Fact, Working, 10),
            mem("b", "the cat  is called miso", Fact, Working, 20),
            mem("c", "The cat is called Miso!", Fact, Verified, 5),
            mem("d", "THE CAT IS CALLED MISO", Fact, Constitutional, 1),
            mem("e", "The dog is called Rex", Fact, Working, 3),
        ];
        let p = plan(&items, at(0), Policy::default());
        assert_eq!(
            p.merged,
            vec![("d".to_owned(), vec!["b".to_owned(), "a".to_owned()])]
        );
        assert!(p.pruned.is_empty());
        let keeper = &p.updated[0];
        assert_eq!(keeper.memory_id, "d");
        assert_eq!(keeper.access_count, 3);
        assert!(keeper.semantic_tags.contains(&"tag-a".to_owned()));
        assert!(
            !p.removed().contains(&"c".to_owned()),
            "a verified copy stays"
        );
    }

    #[test]
    fn stale_episodes_and_expired_working_memories_are_pruned_nothing_trusted() {
        use MemoryType::*;
        use TrustLevel::*;
        let mut expired = mem("x", "offer ends friday", Fact, Working, 30);
        expired.valid_until = Some(at(1));
        let mut expired_verified = mem("xv", "old verified", Fact, Verified, 30);
        expired_verified.valid_until = Some(at(1));
        let mut used = mem("u", "episode used lately", Episode, Working, 200);
        used.last_accessed = Some(at(3));
        let mut raw = mem("r", "raw capture", Episode, Working, 400);
        raw.reingestion_tier = ReingestionTier::LowReingestion;
        let items = vec![
            mem("old", "an old evicted turn", Episode, Working, 120),
            mem("new", "a recent evicted turn", Episode, Working, 10),
            mem("fact", "an old fact", Fact, Working, 400),
            mem("vep", "verified episode", Episode, Verified, 400),
            expired,
            expired_verified,
            used,
            raw,
        ];
        let p = plan(&items, at(0), Policy::default());
        assert_eq!(p.pruned, vec!["old".to_owned(), "x".to_owned()]);
        assert!(p.merged.is_empty());
    }

    #[test]
    fn normalising_ignores_case_spacing_and_end_punctuation_only() {
        assert_eq!(normalise("  Hello,   World!! "), "hello, world");
        assert_ne!(normalise("pay 10"), normalise("pay 100"));
        assert_eq!(normalise("..."), "");
    }
}
