//! `silas-context`: what the model sees each turn (spec §3.5, §5.7).
//!
//! * [`tokens`] — token counting behind [`TokenCounter`] (`chars / 3.5`).
//! * [`budget`] — the §3.5 headroom math: the system zone's actual size
//!   (≤ `system_max`) comes off the window, each zone gets its profile share
//!   of the rest (≤ 80% together), the remainder is headroom.
//! * [`manager`] — [`ContextManager`], one per scope: items in four zones,
//!   the active profile, Tier-1 heuristics (observation masking, trivial
//!   acknowledgements, per-zone eviction; pinned items and the current turn
//!   are never evicted), Tier-2 eviction by the scorer's groups or the
//!   deterministic aggressive fallback. Everything evicted or masked comes
//!   back to the caller to be kept as an `episode` memory.
//! * [`subscriptions`] — live files, line ranges and memory queries,
//!   re-materialised each render with change detection.
//! * [`inspect`] — the `context_inspection` tool's view: zones, item ids,
//!   token counts, subscriptions, eviction so far; never content.
//! * [`scrub`] — injection markers out of external content before it is
//!   kept as memory.
//! * [`render`] — blocks in zone order with the §3.5 delimiters; content
//!   can never forge a delimiter.
//!
//! **Invariant:** a manager holds exactly one scope's items and has no API
//! that reads another scope; the turn runtime owns one per scope.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod budget;
pub mod inspect;
pub mod manager;
pub mod render;
pub mod scrub;
pub mod subscriptions;
pub mod tokens;

pub use budget::Budgets;
pub use inspect::Inspection;
pub use manager::{ContextManager, Tier1};
pub use tokens::{CharsPerToken, TokenCounter};
