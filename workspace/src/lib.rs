//! `silas-workspace`: the owner's project directory as a *workspace* (issue #15).
//!
//! The executor never touches the real directory. [`copy::take`] makes a private
//! copy (a hardened local `git clone` plus the uncommitted state, or a
//! `.gitignore`-aware copy) and a [`Snapshot`] manifest of the real files;
//! [`diff::changes`] turns the executor's result into a typed [`diff::ChangeSet`]
//! with a bounded unified diff; [`protect`] restores the files that define the
//! checks before verification; [`apply::apply`] writes an approved change set
//! into the real workspace all-or-nothing behind a crash journal
//! ([`apply::recover`] at start), and [`apply::undo`] reverses it.
//!
//! Pure library: no actors, no network. Every type that crosses into the daemon
//! is serde so it can be persisted with the task.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod apply;
pub mod commit;
pub mod copy;
pub mod diff;
mod error;
mod fsutil;
mod gitcopy;
mod journal;
pub mod protect;
pub mod reach;
pub mod shadow;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;

pub use apply::{Applied, RecoveryReport, UndoFile, UndoRecord};
pub use copy::CopyLimits;
pub use diff::{ChangeKind, ChangeSet, FileChange, Refusal, RefusalReason};
pub use error::{ApplyError, WorkspaceError};
pub use protect::Protected;

/// What Silas knows about one regular file: enough to detect a change
/// (hash, size) and to put it back exactly (mode, owner).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFact {
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The manifest of the real workspace's regular files as they were copied.
/// Conflict detection at apply time and the protected-file restore both
/// compare against it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Canonical path of the real workspace.
    pub source: PathBuf,
    /// Relative, `/`-separated path → fact, for every regular file copied.
    pub files: BTreeMap<String, FileFact>,
    /// Paths not copied: symlinks leaving the tree, special files, submodules,
    /// unreadable or non-UTF-8 names.
    pub skipped: Vec<String>,
    pub taken_at: Timestamp,
}
