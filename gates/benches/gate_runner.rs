//! A 10-gate policy evaluation through `GateRunner::check_gates`: the shape
//! of an `on_tool_call` check on a trading/ops tool — numeric ranges (one
//! with a clamp mutation), string matches, regexes, approval_always and the
//! guard checks (pii, secrets, jailbreak) over the tool arguments.
//! Run: `cargo bench -p silas-gates --bench gate_runner -- --noplot`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::gates::{Gate, GateTrigger};
use silas_gates::{GateRunner, GuardProvider, PredicateProvider, TurnBudget};

fn gates() -> Vec<Gate> {
    let defs = json!([
        {"name": "size", "on": "on_tool_call", "type": "numeric_range", "extract": "position_usd",
         "block": {"outside": [0, 1000]}, "auto_approve": {"min": 0, "max": 50}, "require_approval": {"min": 50, "max": 1000}},
        {"name": "size_clamp", "on": "on_tool_call", "type": "numeric_range", "extract": "leverage",
         "block": {"outside": [1, 100]}, "auto_approve": {"min": 1, "max": 5}, "config": {"clamp": {"max": 5}}},
        {"name": "side", "on": "on_tool_call", "extract": "side", "allowed_values": ["buy", "sell"], "approval_values": ["short"]},
        {"name": "venue", "on": "on_tool_call", "extract": "venue", "allowed_values": ["kalshi", "polymarket", "paper"]},
        {"name": "ticker", "on": "on_tool_call", "type": "regex", "extract": "ticker", "config": {"pattern": "^[A-Z0-9-]{2,24}$"}},
        {"name": "endpoint", "on": "on_tool_call", "type": "regex", "extract": "base_url", "config": {"pattern": "^https://[a-z0-9.-]+\\.example\\.com/"}},
        {"name": "confirm", "on": "on_tool_call", "type": "approval_always", "extract": "ticker"},
        {"name": "pii_args", "on": "on_tool_call", "provider": "guardrails_ai", "check": "pii", "extract": "note", "config": {"on_fail": "exception"}},
        {"name": "secret_args", "on": "on_tool_call", "provider": "guardrails_ai", "check": "secrets", "extract": "note", "config": {"on_fail": "exception"}},
        {"name": "injection_args", "on": "on_tool_call", "provider": "guardrails_ai", "check": "jailbreak", "extract": "note"}
    ]);
    serde_json::from_value(defs).unwrap()
}

fn context() -> JsonObject {
    let v: Value = json!({
        "tool": "place_order",
        "tool_args": {
            "position_usd": 25.0, "leverage": 8, "side": "buy", "venue": "kalshi",
            "ticker": "WEATHER-NYC-HIGH-80", "base_url": "https://api.example.com/v2",
            "note": "Rebalance after the forecast update; the NOAA model moved the high to 81F, so size down and keep the stop at the previous level."
        }
    });
    v.as_object().unwrap().clone()
}

fn bench(c: &mut Criterion) {
    let mut runner = GateRunner::new();
    runner.register("predicate", Arc::new(PredicateProvider::new(vec![])));
    runner.register("guardrails_ai", Arc::new(GuardProvider));
    let gates = gates();
    let ctx = context();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Warm caches (regexes compile once per pattern) and check the shape.
    let o = rt.block_on(runner.check_gates(
        &gates,
        GateTrigger::OnToolCall,
        None,
        ctx.clone(),
        &mut TurnBudget::new(64),
    ));
    assert_eq!(o.policy_results.len(), 10);
    assert!(o.blocked().is_none(), "{:?}", o.blocked());
    assert_eq!(o.merged_context["tool_args"]["leverage"], json!(5.0));

    c.bench_function("gate_runner/policy_10_gates", |b| {
        b.iter(|| {
            let o = rt.block_on(runner.check_gates(
                black_box(&gates),
                GateTrigger::OnToolCall,
                None,
                black_box(ctx.clone()),
                &mut TurnBudget::new(64),
            ));
            black_box(o)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
