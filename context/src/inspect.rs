//! The `context_inspection` tool's view (§5.7 "core retrieval tools",
//! issue #18): what one scope's context holds — the profile and window,
//! each zone's items by id with their token counts, the subscriptions and
//! what eviction has done so far. Ids, kinds and sizes only, never content:
//! the agent already sees the content in its blocks, and the view must be
//! safe to log.

use serde::Serialize;

/// What eviction has done to a scope's context since it was (re)built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EvictionTally {
    /// Items evicted by Tier 1 or Tier 2 (kept as `episode` memories).
    pub evicted: u64,
    /// Tool results observation-masked.
    pub masked: u64,
    /// Trivial acknowledgements dropped.
    pub dropped: u64,
    /// Subscriptions deactivated (over budget, unreferenced, evicted).
    pub deactivated: u64,
    /// Tier-2 rounds (scorer or its deterministic fallback).
    pub tier2_rounds: u64,
}

/// One item in [`ZoneUse`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ItemUse {
    pub ctx_id: String,
    pub kind: &'static str,
    pub turn: u64,
    pub tokens: u64,
    pub pinned: bool,
    pub masked: bool,
}

/// One zone in [`Inspection`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneUse {
    pub zone: &'static str,
    pub items: usize,
    pub tokens: u64,
    pub budget: u64,
    pub pinned: usize,
    pub masked: usize,
    /// The zone's items, in render order.
    pub listing: Vec<ItemUse>,
}

/// One subscription in [`Inspection`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SubscriptionUse {
    pub sub_id: String,
    pub sub_type: &'static str,
    pub active: bool,
    pub tokens: u64,
}

/// The `context_inspection` view: sizes and ids, never content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    pub scope_id: String,
    pub profile: String,
    pub window: u64,
    pub system: u64,
    pub usage: u64,
    pub headroom: u64,
    pub zones: Vec<ZoneUse>,
    pub subscriptions: Vec<SubscriptionUse>,
    pub eviction: EvictionTally,
}

/// An id as shown: ids come from stores and imports, so only plain
/// characters pass (a newline or `---` in an id cannot reach the prompt).
fn safe_id(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_:.@".contains(*c))
        .take(80)
        .collect()
}

impl Inspection {
    /// The tool's answer as the model reads it: one line per zone and item.
    /// Built from ids, kinds and numbers only, so nothing in it can be
    /// content (or forge a block delimiter).
    pub fn render(&self) -> String {
        let mut out = format!(
            "profile {} | window {} | system {} | used {} | headroom {}\n",
            self.profile, self.window, self.system, self.usage, self.headroom
        );
        for z in &self.zones {
            out.push_str(&format!(
                "{}: {} items, {} / {} tokens, {} pinned, {} masked\n",
                z.zone, z.items, z.tokens, z.budget, z.pinned, z.masked
            ));
            for i in &z.listing {
                let mut flags = String::new();
                if i.pinned {
                    flags.push_str(" pinned");
                }
                if i.masked {
                    flags.push_str(" masked");
                }
                out.push_str(&format!(
                    "  {} ({}, turn {}, {} tokens{})\n",
                    safe_id(&i.ctx_id),
                    i.kind,
                    i.turn,
                    i.tokens,
                    flags
                ));
            }
        }
        for s in &self.subscriptions {
            out.push_str(&format!(
                "subscription {} ({}, {}, {} tokens)\n",
                safe_id(&s.sub_id),
                s.sub_type,
                if s.active { "active" } else { "inactive" },
                s.tokens
            ));
        }
        let e = &self.eviction;
        out.push_str(&format!(
            "evicted so far: {} items kept as memory, {} masked, {} trivial dropped, {} subscriptions deactivated, {} tier-2 rounds",
            e.evicted, e.masked, e.dropped, e.deactivated, e.tier2_rounds
        ));
        out
    }
}
