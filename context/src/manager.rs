//! The per-scope context manager (§5.7): items in four zones, the active
//! profile, and two-tier eviction. Pure data and policy: the turn runtime
//! persists what comes back (evicted and masked items become `episode`
//! memories) and makes the scorer call between [`ContextManager::tier1`] and
//! [`ContextManager::evict_groups`].

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use regex::Regex;
use silas_core::model::context::{ContextItem, ContextItemKind, ContextZone};

use crate::budget::Budgets;
use crate::inspect::{EvictionTally, Inspection, ItemUse, SubscriptionUse, ZoneUse};
use crate::render;
use crate::subscriptions::{Materializer, SubscriptionNote, Subscriptions};
use crate::tokens::TokenCounter;
use silas_core::config::ContextConfig;

/// Messages whose content is below this many tokens may be trivial
/// acknowledgements.
const TRIVIAL_MAX_TOKENS: u64 = 20;

/// §5.7's default trivial-acknowledgement pattern (a literal: a unit
/// test proves it compiles).
fn trivial() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)^(ok|okay|thanks|thank you|got it|sure|yes|no|👍)\s*[.!?]*$").ok()
    })
    .as_ref()
}

/// What Tier 1 did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tier1 {
    /// Items evicted to fit their zone (to be kept as episode memories).
    pub evicted: Vec<ContextItem>,
    /// Tool results masked this turn, with their original content (kept as
    /// memories: the placeholder says "see memory for details").
    pub masked: Vec<ContextItem>,
    /// Trivial acknowledgements dropped (not kept).
    pub dropped: usize,
    /// Subscriptions deactivated for not being referenced.
    pub notes: Vec<SubscriptionNote>,
    /// Tokens in use afterwards (system + zones).
    pub usage: u64,
    /// Still above `scorer_threshold_pct` of the window: Tier 2 is needed.
    pub needs_scorer: bool,
}

/// One scope's context window.
pub struct ContextManager {
    scope_id: String,
    profile: String,
    items: Vec<ContextItem>,
    counter: Arc<dyn TokenCounter>,
    /// What eviction did so far (for `context_inspection`).
    tally: EvictionTally,
    /// Live references materialised into the workspace zone each turn.
    pub subscriptions: Subscriptions,
    /// `memo[n]` is what was worked out once about `items[n]`: every turn
    /// renders the whole context and looks for trivial acknowledgements in
    /// all of it, but an item's answers change only when the item does. The
    /// two vectors change together, in the methods below; an item rewritten
    /// in place gets a fresh memo.
    memo: Vec<Memo>,
    /// Every item's `ctx_id`: `add` is once per id, and a long conversation
    /// holds thousands of items (issue #19: a linear look per add was a
    /// visible part of every turn).
    ids: HashSet<String>,
}

/// Worked out once per item (see `ContextManager::memo`).
#[derive(Debug, Default)]
struct Memo {
    /// The item's rendered block.
    block: OnceLock<Arc<str>>,
    /// Whether its content is a trivial acknowledgement.
    trivial: OnceLock<bool>,
}

impl std::fmt::Debug for ContextManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextManager")
            .field("scope_id", &self.scope_id)
            .field("profile", &self.profile)
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

/// The masking placeholder (§5.7) for a tool result of `token_count`
/// tokens. `source` is `tool:{name}`, with `:failed` when it failed.
pub fn mask_placeholder(source: &str, token_count: u64) -> String {
    let rest = source.strip_prefix("tool:").unwrap_or(source);
    let (name, outcome) = match rest.strip_suffix(":failed") {
        Some(name) => (name, "FAILED"),
        None => (rest, "SUCCEEDED"),
    };
    format!("[Result of {name} ({outcome}) — {token_count} tokens — see memory for details]")
}

impl ContextManager {
    pub fn new(scope_id: &str, profile: &str, counter: Arc<dyn TokenCounter>) -> Self {
        ContextManager {
            scope_id: scope_id.to_owned(),
            profile: profile.to_owned(),
            items: Vec::new(),
            counter,
            tally: EvictionTally::default(),
            subscriptions: Subscriptions::default(),
            memo: Vec::new(),
            ids: HashSet::new(),
        }
    }

    pub fn scope_id(&self) -> &str {
        &self.scope_id
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// Switches the zone budgets' profile; true when it changed (the
    /// caller audits switches). A shrunk zone is fitted at the next
    /// [`Self::tier1`].
    pub fn set_profile(&mut self, profile: &str) -> bool {
        if self.profile == profile {
            return false;
        }
        self.profile = profile.to_owned();
        true
    }

    pub fn items(&self) -> &[ContextItem] {
        &self.items
    }

    /// Adds `item` (once per `ctx_id`), counting its tokens.
    pub fn add(&mut self, item: ContextItem) {
        if self.contains(&item.ctx_id) {
            return;
        }
        self.push_counted(item);
    }

    /// Appends `item` with its tokens counted as the agents see it: its
    /// whole block — delimiter line, escaped content, end line — so the
    /// zone budgets bound the prompt actually sent. Counting the content
    /// alone let a conversation of short messages render to about 2.5
    /// times its budget (issue #19, BENCHMARKS.md "Long conversations").
    /// The block is kept for rendering.
    fn push_counted(&mut self, mut item: ContextItem) {
        let memo = Memo::default();
        item.token_count = count_block(self.counter.as_ref(), &item, &memo);
        self.ids.insert(item.ctx_id.clone());
        self.items.push(item);
        self.memo.push(memo);
    }

    pub fn contains(&self, ctx_id: &str) -> bool {
        self.ids.contains(ctx_id)
    }

    /// Drops the items `gone` says are gone; returns how many.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&ContextItem) -> bool) -> usize {
        self.retain(|i, _| !gone(i))
    }

    /// Keeps the items (and their memos) `keep` says to keep; returns how
    /// many went.
    fn retain(&mut self, mut keep: impl FnMut(&ContextItem, &Memo) -> bool) -> usize {
        let before = self.items.len();
        let verdicts: Vec<bool> = self
            .items
            .iter()
            .zip(&self.memo)
            .map(|(i, m)| keep(i, m))
            .collect();
        if verdicts.iter().all(|keep| *keep) {
            return 0;
        }
        for (item, _) in self.items.iter().zip(&verdicts).filter(|(_, k)| !**k) {
            self.ids.remove(&item.ctx_id);
        }
        let mut v = verdicts.iter();
        self.items.retain(|_| v.next().copied().unwrap_or(true));
        let mut v = verdicts.iter();
        self.memo.retain(|_| v.next().copied().unwrap_or(true));
        before - self.items.len()
    }

    pub fn zone_tokens(&self, zone: ContextZone) -> u64 {
        self.items
            .iter()
            .filter(|i| i.zone == zone)
            .map(|i| i.token_count)
            .sum()
    }

    /// Tokens of the system zone's items (the caller adds the prompt's).
    pub fn system_tokens(&self) -> u64 {
        self.zone_tokens(ContextZone::System)
    }

    /// Tokens in use: the system zone as budgeted plus the other zones.
    pub fn usage(&self, b: &Budgets) -> u64 {
        b.system
            + [
                ContextZone::Chronicle,
                ContextZone::Memory,
                ContextZone::Workspace,
            ]
            .iter()
            .map(|z| self.zone_tokens(*z))
            .sum::<u64>()
    }

    /// Never evicted: pinned items, the system zone, and the conversation
    /// of the turn being answered (a memory recalled this turn may go).
    fn protected(i: &ContextItem, turn: u64) -> bool {
        i.pinned
            || i.zone == ContextZone::System
            || (i.zone == ContextZone::Chronicle && i.turn_number >= turn)
    }

    /// Tier 1 (§5.7), always run: observation masking, trivial
    /// acknowledgements, then each zone's own policy until it fits.
    pub fn tier1(&mut self, turn: u64, cfg: &ContextConfig, b: &Budgets) -> Tier1 {
        let mut out = Tier1 {
            masked: self.mask_observations(turn, cfg.observation_mask_after_turns),
            ..Tier1::default()
        };
        out.dropped = self.drop_trivial(turn);
        let expired = self
            .subscriptions
            .deactivate_stale(turn, u64::from(cfg.subscription_ttl_turns));
        for note in &expired {
            if let SubscriptionNote::Expired { sub_id } = note {
                let id = format!("sub:{sub_id}");
                self.remove_where(|i| i.ctx_id == id);
            }
        }
        out.notes = expired;
        for zone in [
            ContextZone::Chronicle,
            ContextZone::Memory,
            ContextZone::Workspace,
        ] {
            let mut used = self.zone_tokens(zone);
            while used > b.of(zone) {
                let Some(pos) = self.zone_victim(zone, turn) else {
                    break;
                };
                used = used.saturating_sub(self.items[pos].token_count);
                if let Some(kept) = self.take(pos) {
                    out.evicted.push(kept);
                }
            }
        }
        out.usage = self.usage(b);
        out.needs_scorer = out.usage > b.threshold(cfg.scorer_threshold_pct);
        self.tally.evicted += out.evicted.len() as u64;
        self.tally.masked += out.masked.len() as u64;
        self.tally.dropped += out.dropped as u64;
        self.tally.deactivated += out.notes.len() as u64;
        out
    }

    /// Removes the item at `pos`: a subscription's block is deactivated
    /// (§3.5: deactivated, not deleted — it can come back) and not kept;
    /// anything else is returned to be kept as memory.
    fn take(&mut self, pos: usize) -> Option<ContextItem> {
        let item = self.items.remove(pos);
        self.memo.remove(pos);
        self.ids.remove(&item.ctx_id);
        if item.kind == ContextItemKind::Subscription {
            if let Some(sub_id) = item.ctx_id.strip_prefix("sub:") {
                self.subscriptions.deactivate(sub_id);
            }
            self.tally.deactivated += 1;
            return None;
        }
        Some(item)
    }

    /// Replaces the subscription blocks with this turn's materialisation
    /// (§5.7 render step 1); returns what the caller should log.
    pub fn materialize(
        &mut self,
        m: &dyn Materializer,
        turn: u64,
        max_subscription_tokens: u64,
    ) -> Vec<SubscriptionNote> {
        let shown: std::collections::BTreeSet<String> = self
            .items
            .iter()
            .filter_map(|i| i.ctx_id.strip_prefix("mem:").map(str::to_owned))
            .collect();
        let (fresh, notes) = self.subscriptions.materialize(
            m,
            turn,
            max_subscription_tokens,
            self.counter.as_ref(),
            &shown,
        );
        self.retain(|i, _| i.kind != ContextItemKind::Subscription);
        for item in fresh {
            self.push_counted(item);
        }
        notes
    }

    /// Masks tool results older than `after` turns; returns the originals.
    fn mask_observations(&mut self, turn: u64, after: u32) -> Vec<ContextItem> {
        let counter = self.counter.clone();
        let mut originals = Vec::new();
        for (i, memo) in self
            .items
            .iter_mut()
            .zip(self.memo.iter_mut())
            .filter(|(i, _)| {
                i.kind == ContextItemKind::ToolResult
                    && !i.masked
                    && i.turn_number + u64::from(after) < turn
            })
        {
            originals.push(i.clone());
            *memo = Memo::default();
            // The placeholder names the size of what the tool returned.
            i.content = mask_placeholder(&i.source, counter.count(&i.content));
            i.masked = true;
            i.token_count = count_block(counter.as_ref(), i, memo);
        }
        originals
    }

    /// Drops "ok", "thanks", … — but never from the last two turns, where
    /// a "yes" still answers something.
    fn drop_trivial(&mut self, turn: u64) -> usize {
        let counter = self.counter.clone();
        self.retain(|i, memo| {
            !(i.zone == ContextZone::Chronicle
                && i.kind == ContextItemKind::Message
                && !i.pinned
                && i.turn_number + 2 <= turn
                && *memo.trivial.get_or_init(|| {
                    counter.count(&i.content) < TRIVIAL_MAX_TOKENS
                        && trivial().is_some_and(|re| re.is_match(i.content.trim()))
                }))
        })
    }

    /// The next item a zone's policy evicts: oldest chronicle item; the
    /// least relevant memory; a completed result before an active plan or
    /// subscription in the workspace.
    fn zone_victim(&self, zone: ContextZone, turn: u64) -> Option<usize> {
        let candidates = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| i.zone == zone && !Self::protected(i, turn));
        match zone {
            ContextZone::Chronicle => candidates.min_by_key(|(p, i)| (i.turn_number, *p)),
            ContextZone::Memory => candidates.min_by(|(pa, a), (pb, b)| {
                a.relevance
                    .total_cmp(&b.relevance)
                    .then(a.turn_number.cmp(&b.turn_number))
                    .then(pa.cmp(pb))
            }),
            ContextZone::Workspace => candidates.min_by_key(|(p, i)| {
                (
                    i.kind != ContextItemKind::ExecutionResult,
                    i.turn_number,
                    *p,
                )
            }),
            ContextZone::System => None,
        }
        .map(|(p, _)| p)
    }

    /// What the scorer is shown: every item that could be evicted, with
    /// its id (`ctx_id`), header and the start of its content.
    pub fn scorer_blocks(&self, turn: u64) -> String {
        self.items
            .iter()
            .filter(|i| !Self::protected(i, turn))
            .map(|i| {
                let start: String = i.content.chars().take(200).collect();
                format!(
                    "[{}] {} ({} tokens)\n{}",
                    i.ctx_id,
                    render::header(i),
                    i.token_count,
                    render::escape(&start)
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Tier 2 with the scorer's answer: evicts its groups in order until
    /// usage is at most `eviction_threshold_pct`; unknown or protected ids
    /// are ignored (the scorer is a model). What the groups do not free,
    /// the aggressive heuristic does.
    pub fn evict_groups(
        &mut self,
        groups: &[Vec<String>],
        turn: u64,
        cfg: &ContextConfig,
        b: &Budgets,
    ) -> Vec<ContextItem> {
        let target = b.threshold(cfg.eviction_threshold_pct);
        self.tally.tier2_rounds += 1;
        let mut out = Vec::new();
        for group in groups {
            if self.usage(b) <= target {
                return out;
            }
            for id in group {
                if let Some(pos) = self
                    .items
                    .iter()
                    .position(|i| &i.ctx_id == id && !Self::protected(i, turn))
                {
                    out.extend(self.take(pos));
                }
            }
        }
        out.extend(self.evict_down_to(target, turn, b));
        self.tally.evicted += out.len() as u64;
        out
    }

    /// The deterministic fallback when the scorer cannot answer (timeout,
    /// failure, breaker open): oldest chronicle, least relevant memory and
    /// completed workspace items in turn, until usage is at most
    /// `eviction_threshold_pct` or nothing more may go.
    pub fn evict_aggressively(
        &mut self,
        turn: u64,
        cfg: &ContextConfig,
        b: &Budgets,
    ) -> Vec<ContextItem> {
        self.tally.tier2_rounds += 1;
        let out = self.evict_down_to(b.threshold(cfg.eviction_threshold_pct), turn, b);
        self.tally.evicted += out.len() as u64;
        out
    }

    /// Oldest chronicle, least relevant memory, completed workspace item in
    /// turn until usage is at most `target` or nothing more may go.
    fn evict_down_to(&mut self, target: u64, turn: u64, b: &Budgets) -> Vec<ContextItem> {
        let mut out = Vec::new();
        'rounds: while self.usage(b) > target {
            let mut any = false;
            for zone in [
                ContextZone::Chronicle,
                ContextZone::Memory,
                ContextZone::Workspace,
            ] {
                if self.usage(b) <= target {
                    break 'rounds;
                }
                if let Some(pos) = self.zone_victim(zone, turn) {
                    out.extend(self.take(pos));
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        out
    }

    /// The blocks the agents see, in zone order (§3.5 delimiters).
    pub fn render(&self) -> Vec<Arc<str>> {
        debug_assert_eq!(self.items.len(), self.memo.len(), "memo out of step");
        let mut blocks = Vec::with_capacity(self.items.len());
        for zone in render::ZONE_ORDER {
            for (item, memo) in self.items.iter().zip(&self.memo) {
                if item.zone != zone {
                    continue;
                }
                let block = memo
                    .block
                    .get_or_init(|| Arc::from(render::item_block(item)));
                debug_assert_eq!(**block, render::item_block(item), "stale block");
                blocks.push(block.clone());
            }
        }
        blocks
    }

    /// The `context_inspection` view of this scope: zones, item ids and
    /// token counts, subscriptions, eviction so far (no content).
    pub fn inspect(&self, b: &Budgets) -> Inspection {
        let zones = render::ZONE_ORDER
            .iter()
            .map(|z| {
                let items: Vec<&ContextItem> = self.items.iter().filter(|i| i.zone == *z).collect();
                ZoneUse {
                    zone: z.as_str(),
                    items: items.len(),
                    tokens: items.iter().map(|i| i.token_count).sum(),
                    budget: b.of(*z),
                    pinned: items.iter().filter(|i| i.pinned).count(),
                    masked: items.iter().filter(|i| i.masked).count(),
                    listing: items
                        .iter()
                        .map(|i| ItemUse {
                            ctx_id: i.ctx_id.clone(),
                            kind: i.kind.as_str(),
                            turn: i.turn_number,
                            tokens: i.token_count,
                            pinned: i.pinned,
                            masked: i.masked,
                        })
                        .collect(),
                }
            })
            .collect();
        let subscriptions = self
            .subscriptions
            .all()
            .iter()
            .map(|t| SubscriptionUse {
                sub_id: t.sub.sub_id.clone(),
                sub_type: t.sub.sub_type.as_str(),
                active: t.sub.active,
                tokens: t.sub.token_count,
            })
            .collect();
        let usage = self.usage(b);
        Inspection {
            scope_id: self.scope_id.clone(),
            profile: self.profile.clone(),
            window: b.total,
            system: b.system,
            usage,
            headroom: b.total.saturating_sub(usage),
            zones,
            subscriptions,
            eviction: self.tally,
        }
    }
}

/// `item`'s tokens as rendered (see [`ContextManager::push_counted`]); the
/// block is rendered into `memo` once.
fn count_block(counter: &dyn TokenCounter, item: &ContextItem, memo: &Memo) -> u64 {
    counter.count(
        memo.block
            .get_or_init(|| Arc::from(render::item_block(item))),
    )
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
