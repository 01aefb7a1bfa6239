//! `silas-actors`: the supervised ractor actors of the runtime.
//!
//! At this stage: the root [`supervisor`] (generic child specs, restart
//! intensity that escalates to a clean process exit), its pure
//! [`restart`] policy, and the [`housekeeper`] child that applies chronicle
//! retention and checkpoints the audit chain. The Stream, TurnProcessors,
//! ConnectionManager, ApprovalEngine, GateRunner, WorkExecutor and Scheduler
//! join this tree with the runtime work.
//!
//! **Architecture invariant:** actors are thin shells. Decisions are pure
//! functions in `silas-core` (or in a module's pure half, like
//! [`restart::RestartTracker`]); actors sequence them and persist state via
//! `silas-storage`, so a restarted actor rebuilds everything from redb.
//! Messages are plain owned data (no borrows, no non-`Send` payloads) so the
//! `ractor_cluster` path stays open.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod activity;
pub mod approval;
pub mod audit_seal;
pub mod cards;
pub mod change_history;
pub mod channel;
pub mod connection;
pub mod forget;
pub mod gate_model;
pub mod gate_runner;
pub mod housekeeper;
pub mod limits;
pub mod memory;
pub mod refusal_audit;
pub mod restart;
pub mod scheduler;
pub mod scope_release;
pub mod skills;
pub mod skills_mcp;
pub mod stream;
mod stream_accept;
pub mod supervisor;
pub mod turn;
pub mod work;
pub mod work_executor;
pub mod workspaces;
