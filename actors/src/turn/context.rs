//! The turn runtime's side of the context manager (§4.2, §5.7): each scope
//! holds one [`ContextManager`] (crate `silas-context`); this module builds
//! its items and hands its rendering to the agents. Budgets, eviction and
//! rendering rules live in `silas-context`.

use std::sync::Arc;

use silas_context::{CharsPerToken, TokenCounter};
use silas_core::Timestamp;
use silas_core::model::context::{ContextItem, ContextItemKind, ContextZone};
use silas_core::model::messages::TaintLevel;
use silas_llm::prompts::RenderedContext;

pub use silas_context::ContextManager;

/// The token counter every scope uses (`chars / 3.5`).
pub fn counter() -> Arc<dyn TokenCounter> {
    Arc::new(CharsPerToken)
}

/// A new, empty context for `scope_id`.
pub fn new_context(scope_id: &str, profile: &str) -> ContextManager {
    ContextManager::new(scope_id, profile, counter())
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
        token_count: CharsPerToken.count(&content),
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

/// The context blocks for the agents (§3.5 delimiters, zone order).
pub fn rendered(ctx: &ContextManager, tools: Vec<String>, access_level: &str) -> RenderedContext {
    RenderedContext {
        blocks: ctx.render(),
        access_level: access_level.to_string(),
        tools,
        skills: Vec::new(),
        profiles: Vec::new(),
        workspaces: Vec::new(),
    }
}
