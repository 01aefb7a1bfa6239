//! Rate-limiter cost with a full window (issue #19): the Stream and the turn
//! pipeline ask a limiter on every message and every model call, so its
//! price must not grow with the events already in the window. With the
//! defaults a window holds at most 60 events; the load tool's lifted limits
//! (`loadtool/bench.yaml`) let one busy scope hold tens of thousands.
//!
//! Run: `cargo bench -p silas-actors --bench limits -- --noplot`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use silas_actors::limits::{RateLimiter, ScopedWithGlobal};

/// A limiter whose one key holds `n` events spread over the last minute.
fn filled(n: u32, start: Instant) -> RateLimiter {
    let mut l = RateLimiter::per_minute(u32::MAX);
    let step = Duration::from_secs(59) / n.max(1);
    for i in 0..n {
        assert!(l.try_take("scope", start + step * i));
    }
    l
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rate_limiter");
    let start = Instant::now();
    let now = start + Duration::from_secs(59);
    for n in [60u32, 5_000, 50_000] {
        let l = filled(n, start);
        g.bench_with_input(BenchmarkId::new("would_allow", n), &n, |b, _| {
            b.iter(|| std::hint::black_box(l.would_allow("scope", now)))
        });
        g.bench_with_input(BenchmarkId::new("retry_after", n), &n, |b, _| {
            b.iter(|| std::hint::black_box(l.retry_after("scope", now)))
        });
        // One model call as the pipeline makes it: the scope's window is
        // asked, then the global one and the scope's are taken. Time moves
        // by the fill's spacing, so about one event leaves the window per
        // call and the window stays at `n`.
        let mut llm = ScopedWithGlobal::new(filled(n, start), filled(n, start));
        let step = Duration::from_secs(59) / n;
        let mut t = now;
        g.bench_with_input(BenchmarkId::new("llm_call", n), &n, |b, _| {
            b.iter(|| {
                t += step;
                std::hint::black_box(llm.try_take("scope", t)).unwrap();
            })
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    bench(&mut c);
    c.final_summary();
}
