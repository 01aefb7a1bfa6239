//! `silas-bench` (issue #19 item 5): a load tool that starts the real
//! daemon binary with a zero-latency fake model ([`silas_testkit::FakeLlm`])
//! on loopback and drives WebSocket clients against it, from outside, the
//! way users' clients do.
//!
//! Modes ([`Mode`]): many scopes (chatbot customers, one scope each), one
//! hot scope (the owner pipelining into one queue: backpressure), idle
//! connections (memory per authenticated connection) and churn (rounds of
//! fresh visitors; RSS after each round). Each reports turns/s, latency
//! percentiles, RSS over time and lost / duplicated / refused replies
//! ([`Report`]).
//!
//! **Bounded and loopback only:** every count has a ceiling
//! ([`limits::check`]), every wait a timeout, the whole run a deadline; the
//! daemon and the fake model bind 127.0.0.1 and the daemon's config
//! ([`BENCH_CONFIG`]) names no other peer.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod client;
pub mod daemon;
pub mod limits;
pub mod modes;
pub mod report;
pub mod stats;

pub use daemon::{Daemon, DaemonOpts};
pub use modes::{Mode, drive, run};
pub use report::Report;

/// The recorded bench configuration (`loadtool/bench.yaml`), with
/// `@BASE_URL@` standing for the fake model's address.
pub const BENCH_CONFIG: &str = include_str!("../bench.yaml");

/// What can stop a bench run.
#[derive(Debug)]
pub struct BenchError(pub String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl BenchError {
    pub fn new(msg: impl Into<String>) -> Self {
        BenchError(msg.into())
    }
}
