//! Audit log benchmarks: durable single appends, batched appends, and chain
//! verification over one million entries (full and from a checkpoint).
//!
//! Run: `cargo bench --bench audit` (figures go to BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_storage::Store;

const CHAIN_LEN: u64 = 1_000_000;

fn data(i: u64) -> JsonObject {
    match json!({
        "scope_id": "owner",
        "turn_id": format!("turn-{i}"),
        "work_item_id": "wi-7f3a",
        "gate": "input_guard",
        "action": "continue",
        "latency_ms": 12,
    }) {
        Value::Object(o) => o,
        _ => unreachable!(),
    }
}

fn bench_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let audit = store.audit();
    let mut g = c.benchmark_group("audit_append");
    g.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    g.bench_function("durable_single", |b| {
        b.iter(|| {
            i += 1;
            black_box(audit.log("gate.evaluated", data(i)).unwrap())
        })
    });
    g.throughput(Throughput::Elements(1000));
    g.bench_function("batch_1000", |b| {
        b.iter_batched(
            || {
                (0..1000)
                    .map(|j| ("gate.evaluated".to_string(), data(j)))
                    .collect::<Vec<_>>()
            },
            |batch| black_box(audit.log_batch(batch).unwrap()),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_verify(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let audit = store.audit();
    for chunk in 0..(CHAIN_LEN / 10_000) {
        let batch = (0..10_000)
            .map(|j| ("gate.evaluated".to_string(), data(chunk * 10_000 + j)))
            .collect();
        audit.log_batch(batch).unwrap();
    }
    let seal = silas_actors::audit_seal::OwnerSeal::new(std::sync::Arc::new(
        silas_keys::OwnerKey::generate().unwrap(),
    ));
    audit.write_checkpoint(&seal).unwrap();
    let batch = (0..1000)
        .map(|j| ("gate.evaluated".to_string(), data(j)))
        .collect();
    audit.log_batch(batch).unwrap();

    let mut g = c.benchmark_group("audit_verify");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    g.throughput(Throughput::Elements(CHAIN_LEN + 1000));
    g.bench_function("verify_chain_1M", |b| {
        b.iter(|| {
            let v = audit.verify_chain().unwrap();
            assert!(v.valid);
            black_box(v)
        })
    });
    g.throughput(Throughput::Elements(1001));
    g.bench_function("verify_from_checkpoint_1M_plus_1000", |b| {
        b.iter(|| {
            let v = audit.verify_from_checkpoint(None).unwrap();
            assert!(v.valid);
            black_box(v)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_append, bench_verify);
criterion_main!(benches);
