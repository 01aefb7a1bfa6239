//! What a run reports, and how clients' tallies add up to it (pure).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::stats::{Percentiles, percentiles};

/// One client's (or one pipeline's) count of what happened to its turns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub sent: u64,
    pub replies: u64,
    /// Sent and never answered (within the wait, or the socket died).
    pub lost: u64,
    /// Replies beyond one per message sent.
    pub duplicated: u64,
    pub refused: BTreeMap<String, u64>,
    pub latencies: Vec<Duration>,
    pub connect_failures: u64,
}

impl Tally {
    pub fn refuse(&mut self, code: &str) {
        *self.refused.entry(code.to_string()).or_default() += 1;
    }

    pub fn merge(&mut self, other: Tally) {
        self.sent += other.sent;
        self.replies += other.replies;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        for (code, n) in other.refused {
            *self.refused.entry(code).or_default() += n;
        }
        self.latencies.extend(other.latencies);
        self.connect_failures += other.connect_failures;
    }

    pub fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }
}

/// RSS of the daemon at one moment of the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RssSample {
    pub at_s: f64,
    pub kib: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RssSummary {
    pub start_kib: u64,
    pub peak_kib: u64,
    pub end_kib: u64,
    /// At most [`SERIES_POINTS`] samples, evenly picked from the run.
    pub series: Vec<RssSample>,
}

pub const SERIES_POINTS: usize = 24;

impl RssSummary {
    pub fn from_samples(samples: &[RssSample]) -> RssSummary {
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return RssSummary::default();
        };
        let step = samples.len().div_ceil(SERIES_POINTS).max(1);
        let mut series: Vec<RssSample> = samples.iter().step_by(step).copied().collect();
        if series.last() != Some(last) {
            series.push(*last);
        }
        RssSummary {
            start_kib: first.kib,
            peak_kib: samples.iter().map(|s| s.kib).max().unwrap_or(0),
            end_kib: last.kib,
            series,
        }
    }
}

/// Churn: RSS after each round of fresh visitors has left.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Round {
    pub round: usize,
    pub visitors_so_far: usize,
    pub rss_kib: u64,
    /// Of `rss_kib`: anonymous pages (heap) and file-backed ones (the
    /// binary, the store's and the index's mapped files).
    pub anon_kib: u64,
    pub file_kib: u64,
}

impl Round {
    fn rss(&self) -> String {
        format!(
            "RSS {:.1} MiB (anonymous {:.1}, file-backed {:.1})",
            self.rss_kib as f64 / 1024.0,
            self.anon_kib as f64 / 1024.0,
            self.file_kib as f64 / 1024.0
        )
    }
}

/// Churn: the reading after the rounds and a quiet spell without visitors.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settled {
    pub after_s: u64,
    #[serde(flatten)]
    pub reading: Round,
}

/// The outcome of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub mode: String,
    pub clients: usize,
    pub connect_failures: u64,
    pub sent: u64,
    pub replies: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub refused: u64,
    pub refused_codes: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub turns_per_second: f64,
    pub latency: Option<Percentiles>,
    pub rss: RssSummary,
    /// Idle mode: RSS growth per open authenticated connection.
    pub per_connection_kib: Option<f64>,
    /// Churn mode.
    pub rounds: Vec<Round>,
    /// Churn mode with `--settle-seconds`.
    pub settled: Option<Settled>,
    pub daemon_alive: bool,
    /// Every reply's latency in the order the replies came (for one
    /// client, the turn order): where the tail comes from (`--latencies`).
    #[serde(skip)]
    pub latencies: Vec<Duration>,
}

impl Report {
    pub fn new(mode: &str, clients: usize, tally: Tally, elapsed: Duration) -> Report {
        let secs = elapsed.as_secs_f64();
        Report {
            mode: mode.to_string(),
            clients,
            connect_failures: tally.connect_failures,
            sent: tally.sent,
            replies: tally.replies,
            lost: tally.lost,
            duplicated: tally.duplicated,
            refused: tally.refused_total(),
            turns_per_second: if secs > 0.0 {
                tally.replies as f64 / secs
            } else {
                0.0
            },
            refused_codes: tally.refused,
            elapsed_s: secs,
            latency: percentiles(&tally.latencies),
            latencies: tally.latencies,
            ..Report::default()
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "mode: {} ({} clients)", self.mode, self.clients)?;
        writeln!(
            f,
            "turns: sent {}, replies {}, lost {}, duplicated {}, refused {} {:?}, connect failures {}",
            self.sent,
            self.replies,
            self.lost,
            self.duplicated,
            self.refused,
            self.refused_codes,
            self.connect_failures
        )?;
        writeln!(
            f,
            "throughput: {:.1} turns/s over {:.2} s",
            self.turns_per_second, self.elapsed_s
        )?;
        if let Some(l) = &self.latency {
            writeln!(
                f,
                "latency (submit → reply): p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} turns)",
                l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms, l.count
            )?;
        }
        writeln!(
            f,
            "daemon RSS: start {:.1} MiB, peak {:.1} MiB, end {:.1} MiB",
            self.rss.start_kib as f64 / 1024.0,
            self.rss.peak_kib as f64 / 1024.0,
            self.rss.end_kib as f64 / 1024.0
        )?;
        if let Some(k) = self.per_connection_kib {
            writeln!(f, "per idle authenticated connection: {k:.1} KiB")?;
        }
        for r in &self.rounds {
            writeln!(
                f,
                "round {}: {} visitors so far, {}",
                r.round,
                r.visitors_so_far,
                r.rss()
            )?;
        }
        if let Some(s) = &self.settled {
            writeln!(
                f,
                "after {} s without visitors: {}",
                s.after_s,
                s.reading.rss()
            )?;
        }
        write!(
            f,
            "daemon: {}",
            if self.daemon_alive { "alive" } else { "DIED" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_add_up_and_throughput_counts_replies_only() {
        let mut a = Tally {
            sent: 3,
            replies: 2,
            lost: 1,
            latencies: vec![Duration::from_millis(2), Duration::from_millis(4)],
            ..Tally::default()
        };
        a.refuse("E_CHANNEL_BACKPRESSURE");
        let mut b = Tally {
            sent: 2,
            replies: 2,
            duplicated: 1,
            latencies: vec![Duration::from_millis(6), Duration::from_millis(8)],
            ..Tally::default()
        };
        b.refuse("E_CHANNEL_BACKPRESSURE");
        b.refuse("E_CHANNEL_RATE_LIMITED");
        a.merge(b);
        let r = Report::new("many-scopes", 2, a, Duration::from_secs(2));
        assert_eq!((r.sent, r.replies, r.lost, r.duplicated), (5, 4, 1, 1));
        assert_eq!(r.refused, 3);
        assert_eq!(r.refused_codes["E_CHANNEL_BACKPRESSURE"], 2);
        assert_eq!(r.turns_per_second, 2.0);
        assert_eq!(r.latency.unwrap().count, 4);
        assert_eq!(r.latency.unwrap().max_ms, 8.0);
    }

    #[test]
    fn rss_series_is_bounded_and_keeps_the_ends() {
        let samples: Vec<RssSample> = (0..1000)
            .map(|i| RssSample {
                at_s: i as f64 / 10.0,
                kib: 10_000 + (i % 97),
            })
            .collect();
        let s = RssSummary::from_samples(&samples);
        assert!(s.series.len() <= SERIES_POINTS + 1, "{}", s.series.len());
        assert_eq!(s.series.first(), samples.first());
        assert_eq!(s.series.last(), samples.last());
        assert_eq!(s.start_kib, 10_000);
        assert_eq!(s.peak_kib, 10_096);
        assert_eq!(RssSummary::from_samples(&[]), RssSummary::default());
    }
}
