//! Approval benchmarks: token signing and verification in memory, and the
//! full consuming `verify` with its durable nonce record (latency p50/p99).
//!
//! Run: `cargo bench --bench approval` (figures go to BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use serde_json::json;
use silas_actors::approval::ApprovalService;
use silas_core::approval::{self, IssuePolicy, Subject};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope};
use silas_core::model::work::WorkItem;
use silas_core::{Timestamp, projections};
use silas_keys::OwnerKey;
use silas_storage::Store;

fn goal() -> WorkItem {
    serde_json::from_value(json!({
        "id": "goal-1", "type": "goal", "title": "Keep CI green", "body": "Watch CI; fix what breaks.",
        "verify": [{"name": "ci", "run": "./ci-status", "expect": {"equals": "green"}}],
        "gates": [{"name": "spend", "on": "on_tool_call", "type": "numeric_range",
                   "auto_approve": {"min": 0.0, "max": 5.0}, "on_block": "report"}],
        "skills": ["coding"], "escalation": {"report": {"action": "report"}},
        "failure_context": "Fix: $failed_checks",
    }))
    .unwrap()
}

fn spawned(goal: &WorkItem) -> WorkItem {
    let mut v = serde_json::to_value(goal).unwrap();
    v["id"] = json!("fix-1");
    v["type"] = json!("task");
    v["parent"] = json!(goal.id);
    v["body"] = json!("Fix: ci red");
    serde_json::from_value(v).unwrap()
}

fn service(dir: &std::path::Path) -> (ApprovalService, Arc<OwnerKey>) {
    let store = Store::open_in(dir).unwrap();
    let key = Arc::new(OwnerKey::generate().unwrap());
    let policy = IssuePolicy {
        max_standing_executions: 10_000_000,
        ..IssuePolicy::default()
    };
    (ApprovalService::new(store, key.clone(), policy), key)
}

fn decision(max: u64) -> ApprovalDecision {
    serde_json::from_value(json!({"verdict": "approved", "conditions": {"max_executions": max}}))
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (svc, key) = service(dir.path());
    let g = goal();
    let fix = spawned(&g);
    let token = svc
        .issue_token(
            Subject::WorkItem(&g),
            &decision(10_000_000),
            ApprovalScope::Standing,
            &owner_origin(&svc),
            Timestamp::now(),
        )
        .unwrap();
    let vk = key.verifying_key();
    let sig_ok = move |p: &[u8], s: &[u8]| silas_keys::verify(&vk, p, s);

    let mut group = c.benchmark_group("approval");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sign_token", |b| {
        b.iter(|| {
            let payload = projections::token_signing_payload(&token).unwrap();
            black_box(key.sign(&payload))
        })
    });
    group.bench_function("verify_in_memory", |b| {
        b.iter(|| {
            black_box(
                approval::authorize_execution(&token, &g, Some(&fix), Timestamp::now(), &sig_ok)
                    .unwrap(),
            )
        })
    });
    group.bench_function("verify_durable", |b| {
        b.iter(|| {
            black_box(
                svc.verify(&token, &g, Some(&fix), Timestamp::now())
                    .unwrap(),
            )
        })
    });
    group.finish();
}

/// Per-call latency of the consuming verify (signature, hashes, nonce and
/// token state in one fsync'd transaction with its audit entry).
fn durable_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let (svc, _) = service(dir.path());
    let g = goal();
    let fix = spawned(&g);
    let token = svc
        .issue_token(
            Subject::WorkItem(&g),
            &decision(10_000_000),
            ApprovalScope::Standing,
            &owner_origin(&svc),
            Timestamp::now(),
        )
        .unwrap();
    let n = 2000;
    let mut lat: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        svc.verify(&token, &g, Some(&fix), Timestamp::now())
            .unwrap();
        lat.push(t0.elapsed());
    }
    lat.sort();
    let pct = |p: f64| lat[((n as f64 * p) as usize).min(n - 1)];
    println!(
        "approval/verify_durable latency over {n} calls: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        lat[n - 1].as_secs_f64() * 1e3
    );
}

fn main() {
    durable_percentiles();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}

/// Registers a test connection as owner-authenticated with the engine and
/// returns it as the origin of the owner's answers.
fn owner_origin(
    svc: &silas_actors::approval::ApprovalService,
) -> silas_actors::approval::AnswerOrigin {
    svc.owner_sessions().authenticated("test", "owner-device");
    silas_actors::approval::AnswerOrigin::new("test", "owner-device")
}
