//! Issue #18: `render` + eviction at a 180 k-token budget (goal ≤ 5 ms).
//! A scope's context is filled past its budget — 900 chronicle messages,
//! tool results and 300 memories of ~350 tokens each (~420 k tokens, so
//! Tier 1 masks and evicts) — then each iteration runs what step 5 of a
//! turn does on a copy: Tier 1 (masking, trivial drop, zone eviction),
//! then render of every block. A second case renders the next turn's
//! context, where only the new item is rendered afresh.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use silas_context::{Budgets, CharsPerToken, ContextManager};
use silas_core::Timestamp;
use silas_core::config::ContextConfig;
use silas_core::model::context::{ContextItem, ContextItemKind, ContextZone};
use silas_core::model::messages::TaintLevel;

fn item(id: String, zone: ContextZone, kind: ContextItemKind, turn: u64) -> ContextItem {
    // ~1,200 characters ≈ 343 tokens at 3.5 characters per token.
    let content = format!(
        "{id}: {}",
        "the quick brown fox jumps over the lazy dog ".repeat(27)
    );
    ContextItem {
        ctx_id: id,
        zone,
        content,
        token_count: 0,
        created_at: Timestamp::now(),
        turn_number: turn,
        source: "channel:web".into(),
        taint: TaintLevel::Owner,
        kind,
        relevance: 1.0 / (1.0 + turn as f64),
        masked: false,
        pinned: false,
    }
}

fn filled() -> ContextManager {
    let mut m = ContextManager::new("owner", "conversation", Arc::new(CharsPerToken));
    for t in 0..900u64 {
        let kind = if t % 3 == 0 {
            ContextItemKind::ToolResult
        } else {
            ContextItemKind::Message
        };
        m.add(item(format!("c{t}"), ContextZone::Chronicle, kind, t));
    }
    for t in 0..300u64 {
        m.add(item(
            format!("m{t}"),
            ContextZone::Memory,
            ContextItemKind::Memory,
            t * 3,
        ));
    }
    m
}

fn bench(c: &mut Criterion) {
    let cfg = ContextConfig {
        total_tokens: 180_000,
        ..ContextConfig::default()
    };
    let Some(profile) = cfg.profiles.get("conversation").cloned() else {
        return;
    };
    let budgets = Budgets::compute(&cfg, &profile, None, 2_000);
    c.bench_function("context/tier1_and_render_180k", |b| {
        b.iter_batched(
            filled,
            |mut m| {
                let t1 = m.tier1(900, &cfg, &budgets);
                black_box(t1.evicted.len());
                black_box(m.render())
            },
            BatchSize::LargeInput,
        )
    });
    // A turn after the first: the previous turn rendered every block, this
    // one adds its message and renders again (blocks cached per item).
    c.bench_function("context/next_turn_render_180k", |b| {
        b.iter_batched(
            || {
                let mut m = filled();
                m.tier1(900, &cfg, &budgets);
                black_box(m.render());
                m.add(item(
                    "c900".into(),
                    ContextZone::Chronicle,
                    ContextItemKind::Message,
                    900,
                ));
                m
            },
            |m| black_box(m.render()),
            BatchSize::LargeInput,
        )
    });
    // What the iteration did, for BENCHMARKS.md.
    let mut m = filled();
    let (items, before) = (m.items().len(), m.usage(&budgets));
    let t1 = m.tier1(900, &cfg, &budgets);
    println!(
        "context: {items} items, {before} tokens before; {} evicted, {} masked; {} tokens after (budget {})",
        t1.evicted.len(),
        t1.masked.len(),
        m.usage(&budgets),
        budgets.total
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
