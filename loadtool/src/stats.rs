//! Latency percentiles (nearest rank), pure.

use std::time::Duration;

use serde::Serialize;

/// p50 / p95 / p99 / max of a set of latencies, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The nearest-rank percentile `p` (0 < p ≤ 100) of sorted `xs`.
fn rank(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    // ceil(p/100 · n), 1-based; clamped so p = 100 is the maximum.
    let r = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[r.clamp(1, n) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `None` for no samples.
pub fn percentiles(samples: &[Duration]) -> Option<Percentiles> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    Some(Percentiles {
        count: s.len(),
        p50_ms: ms(rank(&s, 50.0)),
        p95_ms: ms(rank(&s, 95.0)),
        p99_ms: ms(rank(&s, 99.0)),
        max_ms: ms(s[s.len() - 1]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn nearest_rank_over_one_to_a_hundred() {
        let xs: Vec<Duration> = (1..=100).rev().map(d).collect();
        let p = percentiles(&xs).unwrap();
        assert_eq!(p.count, 100);
        assert_eq!(p.p50_ms, 50.0);
        assert_eq!(p.p95_ms, 95.0);
        assert_eq!(p.p99_ms, 99.0);
        assert_eq!(p.max_ms, 100.0);
    }

    #[test]
    fn one_sample_is_every_percentile_and_none_is_none() {
        let p = percentiles(&[d(7)]).unwrap();
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (7.0, 7.0, 7.0));
        assert!(percentiles(&[]).is_none());
    }

    #[test]
    fn the_tail_is_not_averaged_away() {
        // 98 fast turns and 2 slow ones: p99 is a slow one, p95 a fast one.
        let mut xs = vec![d(1); 98];
        xs.extend([d(500), d(900)]);
        let p = percentiles(&xs).unwrap();
        assert_eq!(p.p95_ms, 1.0);
        assert_eq!(p.p99_ms, 500.0);
        assert_eq!(p.max_ms, 900.0);
    }
}
