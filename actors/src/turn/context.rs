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

/// The header of the `context_inspection` tool's block.
pub const INSPECTION_HEADER: &str = "--- context_inspection | read-only ---";

/// The context blocks for the agents (§3.5 delimiters, zone order). When
/// the access level offers `context_inspection`, its answer — this scope's
/// zones, item ids, token counts and eviction so far, from
/// [`ContextManager::inspect`] — is the last block: the Proxy and Planner
/// make one structured call each, with no tool loop to call it in, so a
/// read-only tool's result travels with the request (as `memory_search`'s
/// do through `memory_queries`).
pub fn rendered(
    ctx: &ContextManager,
    budgets: &silas_context::Budgets,
    tools: Vec<String>,
    access_level: &str,
) -> RenderedContext {
    let mut blocks = ctx.render();
    if tools
        .iter()
        .any(|t| t == silas_llm::toolset::CONTEXT_INSPECTION)
    {
        blocks.push(
            silas_context::render::block(INSPECTION_HEADER, &ctx.inspect(budgets).render()).into(),
        );
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
