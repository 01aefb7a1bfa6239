//! `silas-core`: the pure heart of Silas — the domain model (spec §3), the
//! canonical JSON module every hash and signature goes through, the hash
//! projections built on it, the error taxonomy (§18.1) and the configuration
//! schema with its startup validation (§11). Nothing here does I/O beyond
//! reading environment variables handed in by the caller; nothing here knows
//! about actors, storage or the network.

// Tests may unwrap: a panic there is a test failure, which is what we want.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod address;
pub mod approval;
pub mod b64;
pub mod canonical;
pub mod cards;
pub mod config;
pub mod error;
pub mod goal_terms;
pub mod model;
pub mod never_log;
pub mod patterns;
pub mod projections;
pub mod risk;
pub mod secrets;
pub mod strict_json;
pub mod taint;
pub mod terminal;
pub mod time;

pub use b64::Base64Bytes;
pub use error::{Coded, ErrorCode};
pub use time::Timestamp;
