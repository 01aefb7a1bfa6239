//! A minimal per-scope context window (§4.2 `ContextManager`, §5.7) for the
//! turn pipeline: the scope's items in four zones, a rough token count,
//! oldest-first eviction of unpinned chronicle/memory items when over
//! budget, and rendering for the agents. **A stand-in:** the full context
//! manager (profiles per zone, observation masking, subscriptions, the
//! two-tier scorer eviction) is later work; the pipeline calls it only
//! through these few methods.

use silas_core::Timestamp;
use silas_core::model::context::{ContextItem, ContextItemKind, ContextZone};
use silas_core::model::messages::TaintLevel;
use silas_llm::prompts::RenderedContext;

/// ~4 characters per token (§5.13's heuristic counter).
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

#[allow(clippy::too_many_arguments)]
pub fn item(
    ctx_id: String,
    zone: ContextZone,
    kind: ContextItemKind,
    content: String,
    turn_number: u64,
    source: &str,
    taint: TaintLevel,
    pinned: bool,
) -> ContextItem {
    ContextItem {
        ctx_id,
        zone,
        token_count: estimate_tokens(&content),
        content,
        created_at: Timestamp::now(),
        turn_number,
        source: source.to_string(),
        taint,
        kind,
        relevance: 1.0,
        masked: false,
        pinned,
    }
}

#[derive(Clone, Debug)]
pub struct ScopeContext {
    pub scope_id: String,
    pub items: Vec<ContextItem>,
    pub profile: String,
    /// Allocable tokens for chronicle + memory + workspace.
    pub budget_tokens: u64,
}

impl ScopeContext {
    pub fn new(scope_id: &str, profile: &str, budget_tokens: u64) -> Self {
        ScopeContext {
            scope_id: scope_id.to_string(),
            items: Vec::new(),
            profile: profile.to_string(),
            budget_tokens,
        }
    }

    pub fn add(&mut self, item: ContextItem) {
        if !self.items.iter().any(|i| i.ctx_id == item.ctx_id) {
            self.items.push(item);
        }
    }

    pub fn contains(&self, ctx_id: &str) -> bool {
        self.items.iter().any(|i| i.ctx_id == ctx_id)
    }

    /// Drops the items `gone` says are gone; returns how many.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&ContextItem) -> bool) -> usize {
        let before = self.items.len();
        self.items.retain(|i| !gone(i));
        before - self.items.len()
    }

    pub fn set_profile(&mut self, profile: &str) {
        self.profile = profile.to_string();
    }

    pub fn tokens(&self) -> u64 {
        self.items.iter().map(|i| i.token_count).sum()
    }

    /// Evicts the oldest unpinned chronicle/memory items until within
    /// budget; returns what was evicted (the caller persists it as episodes).
    pub fn enforce_budget(&mut self) -> Vec<ContextItem> {
        let mut evicted = Vec::new();
        while self.tokens() > self.budget_tokens {
            let Some(pos) = self.items.iter().position(|i| {
                !i.pinned && matches!(i.zone, ContextZone::Chronicle | ContextZone::Memory)
            }) else {
                break;
            };
            evicted.push(self.items.remove(pos));
        }
        evicted
    }

    /// The zones as text blocks, in order, each item tagged with its taint.
    pub fn render(&self, tools: Vec<String>, access_level: &str) -> RenderedContext {
        let mut blocks = Vec::new();
        for zone in [
            ContextZone::System,
            ContextZone::Chronicle,
            ContextZone::Memory,
            ContextZone::Workspace,
        ] {
            let lines: Vec<String> = self
                .items
                .iter()
                .filter(|i| i.zone == zone && !i.masked)
                .map(|i| {
                    let kind = if i.kind == ContextItemKind::Message {
                        ""
                    } else {
                        i.kind.as_str()
                    };
                    format!("[{}{kind}] {}", i.taint.as_str(), i.content)
                })
                .collect();
            if !lines.is_empty() {
                blocks.push(format!("## {}\n{}", zone.as_str(), lines.join("\n")));
            }
        }
        RenderedContext {
            blocks,
            access_level: access_level.to_string(),
            tools,
            skills: Vec::new(),
            profiles: Vec::new(),
            workspaces: Vec::new(),
        }
    }
}
