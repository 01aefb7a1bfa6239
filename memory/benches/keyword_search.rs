//! Keyword search over the memory index (issue #18 goal: ≤ 10 ms p99 at
//! 1 M memories). `SILAS_BENCH_MEMORIES` picks the sizes (default
//! `10000,100000`; the 1 M point is `SILAS_BENCH_MEMORIES=1000000`).
//!
//!   cargo bench -p silas-memory --bench keyword_search
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use silas_core::Timestamp;
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier, TrustLevel};
use silas_core::model::messages::TaintLevel;
use silas_memory::Memory;
use silas_storage::Store;

const WORDS: &[&str] = &[
    "invoice",
    "meeting",
    "garden",
    "python",
    "release",
    "budget",
    "tuesday",
    "coffee",
    "deploy",
    "backup",
    "server",
    "holiday",
    "dentist",
    "report",
    "kitchen",
    "train",
    "football",
    "recipe",
    "printer",
    "password",
    "contract",
    "review",
    "birthday",
    "flight",
    "museum",
    "laptop",
    "weather",
    "insurance",
    "grocery",
    "concert",
];

fn item(i: usize, scopes: usize) -> MemoryItem {
    // A deterministic pseudo-random sentence of 12 words.
    let mut x = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut words = Vec::with_capacity(12);
    for _ in 0..12 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51afd7ed558ccd);
        words.push(WORDS[(x % WORDS.len() as u64) as usize]);
    }
    let now = Timestamp::now();
    MemoryItem {
        memory_id: format!("m{i:08}"),
        content: words.join(" "),
        memory_type: MemoryType::Fact,
        reingestion_tier: ReingestionTier::Active,
        trust_level: TrustLevel::Working,
        taint: TaintLevel::Owner,
        created_at: now,
        updated_at: now,
        valid_from: None,
        valid_until: None,
        access_count: 0,
        last_accessed: None,
        semantic_tags: Vec::new(),
        entity_refs: Vec::new(),
        causal_refs: Vec::new(),
        temporal_next: None,
        temporal_prev: None,
        session_id: Some(format!("scope-{}", i % scopes)),
        embedding: None,
        source_kind: "bench".into(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn bench(c: &mut Criterion) {
    let sizes: Vec<usize> = std::env::var("SILAS_BENCH_MEMORIES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for n in sizes {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_in(dir.path()).expect("store");
        let items: Vec<MemoryItem> = (0..n).map(|i| item(i, 10)).collect();
        for chunk in items.chunks(50_000) {
            store.records::<MemoryItem>().put_many(chunk).expect("put");
        }
        let built = Instant::now();
        let mem = Memory::open(store, &dir.path().join("index")).expect("open");
        assert!(mem.wait_ready(Duration::from_secs(3600)));
        eprintln!(
            "{n} memories indexed in {:.1} s",
            built.elapsed().as_secs_f64()
        );
        let queries = [
            "invoice meeting",
            "python deploy server",
            "birthday",
            "museum flight weather",
        ];
        // p50/p99 over 1,000 searches (criterion reports the mean).
        let mut times = Vec::with_capacity(1000);
        for i in 0..1000 {
            let t = Instant::now();
            let found = mem
                .search_keyword(&format!("scope-{}", i % 10), queries[i % queries.len()], 10)
                .expect("search");
            times.push(t.elapsed());
            assert!(!found.is_empty());
        }
        times.sort();
        eprintln!(
            "keyword search at {n}: p50 {:?}, p99 {:?}",
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );
        c.bench_function(&format!("keyword_search/{n}"), |b| {
            let mut i = 0;
            b.iter(|| {
                i += 1;
                mem.search_keyword(&format!("scope-{}", i % 10), queries[i % queries.len()], 10)
                    .expect("search")
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
