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

/// What a turn's zones may hold (§3.5 headroom math): the window is the
/// smaller of `context.total_tokens` and the model's own context window
/// (`window`, when known) less room for the answer; the system prompt's
/// tokens come off it (at most `system_max`); the zones get the profile's
/// share of the rest (≤ 80%), and what remains is headroom. Items are
/// evicted whole to fit, so a prompt is never cut mid-message by a server.
pub fn zone_budget(
    total_tokens: u64,
    system_max: u64,
    window: Option<u64>,
    system_tokens: u64,
    profile_share: f64,
) -> u64 {
    let total = match window {
        // The answer is generated inside the same window.
        Some(w) => total_tokens.min(w.saturating_sub(answer_room(w))),
        None => total_tokens,
    };
    let allocable = total.saturating_sub(system_tokens.min(system_max));
    let share = if profile_share.is_finite() {
        profile_share.clamp(0.0, 0.8)
    } else {
        0.8
    };
    // Truncation toward zero is the floor of §3.5.
    (allocable as f64 * share) as u64
}

/// Tokens kept free for the model's answer in a window of `w`.
fn answer_room(w: u64) -> u64 {
    (w / 8).min(4096)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_budget_follows_the_headroom_math() {
        // (total, system_max, window, system, share) → budget
        type Case = (u64, u64, Option<u64>, u64, f64, u64);
        let table: &[Case] = &[
            // No window: the configured total, less the system prompt.
            (180_000, 8_000, None, 2_000, 0.8, 142_400),
            // The system prompt counts at most system_max.
            (180_000, 8_000, None, 50_000, 0.8, 137_600),
            // A small local model: 8192 less 1024 for the answer.
            (180_000, 8_000, Some(8_192), 2_000, 0.8, 4_134),
            // A large window never raises the configured total.
            (180_000, 8_000, Some(1_000_000), 2_000, 0.8, 142_400),
            // The answer's room is capped at 4096.
            (180_000, 8_000, Some(131_072), 0, 0.5, 63_488),
            // More share than 80% is never given; NaN takes 80%.
            (10_000, 8_000, None, 0, 0.95, 8_000),
            (10_000, 8_000, None, 0, f64::NAN, 8_000),
            // A system prompt larger than the window leaves nothing.
            (180_000, 8_000, Some(4_096), 6_000, 0.8, 0),
        ];
        for &(total, max, window, system, share, want) in table {
            assert_eq!(
                zone_budget(total, max, window, system, share),
                want,
                "{total} {max} {window:?} {system} {share}"
            );
        }
    }
}
