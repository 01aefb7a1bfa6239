//! `silas-storage`: every byte Silas keeps lives here, in one redb file.
//!
//! Typed tables for work items, chronicle, nonces, audit entries and
//! checkpoints, persona state and events, memory records, service connections
//! and pending cards; the hash-chained [`audit::AuditLog`]; and the schema
//! version record that makes startup refuse a store it did not write
//! ([`schema`]). Values are versioned JSON ([`codec`]). Every multi-record
//! change is a single write transaction, so a crash leaves either all of it or
//! none of it.
//!
//! **Architecture invariant:** this crate knows nothing about actors, the
//! network or LLMs; it depends only on `silas-core` for the model and the
//! canonical JSON module.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod audit;
pub mod audit_seal;
pub mod chronicle;
pub mod codec;
pub mod error;
pub mod group_commit;
pub mod inbox;
mod inbox_ack;
mod migrate_cards;
pub mod nonces;
pub mod records;
pub mod scheduled_jobs;
pub mod schema;
pub mod telegram_updates;
pub mod work_items;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::Database;

pub use audit::{AuditEntry, AuditLog, ChainBreak, ChainVerification, Checkpoint};
pub use audit_seal::{CheckpointSigner, CheckpointVerifier, HeadMirror, SealReport};
pub use chronicle::ChronicleStore;

pub use error::{StoreError, StoreResult};
pub use group_commit::{DurableTicket, GroupCommitStats, Wait};
pub use inbox::{
    AckOutcome, InboxRecord, InboxStage, InboxStore, InputRecord, NewInbound, ReplyAck, TurnOutcome,
};
pub use nonces::{ApprovalLedger, NonceDomain, NonceStore};
pub use records::{
    CardAudience, Keyed, PendingCard, PersonaEvents, Records, TelegramCardMessage,
    TelegramProgressMessage,
};
pub use scheduled_jobs::ScheduledJob;
pub use telegram_updates::{Recorded, TelegramUpdates, UpdateRecord, UpdateState};
pub use work_items::WorkItemStore;

/// redb's own page cache. It keeps every page written until it is full, so
/// it grows with the store's history: by its default (1 GiB) without end,
/// by 16 MiB as ≈ 4 KiB per past chatbot visitor until the 4,000th (issue
/// #19 item 3, BENCHMARKS.md "churn"). A turn reads recent pages and the
/// trees' inner pages: at 4 MiB, 3,200 visitors of churn missed it 40 times
/// in 380,000 reads, and a miss is a read from the OS page cache.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// File name of the store inside the data dir.
pub const STORE_FILE: &str = "silas.redb";

/// The store holds the audit log, approvals and memory: the file is created
/// 0600 by us before redb opens it, so it never exists with the umask's mode
/// (redb would create it 0644 under the usual umask). An existing file wider
/// than 0600 (an older version's) is narrowed.
fn create_owner_only(path: &Path) -> StoreResult<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |e: std::io::Error| StoreError::Io(format!("{}: {e}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // An existing store is opened, never emptied.
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    let mode = file.metadata().map_err(io)?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
    }
    Ok(())
}

/// A handle to the open store. Cheap to clone; all clones share one database
/// and its one [`group_commit::GroupCommit`] writer.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    writer: Arc<group_commit::GroupCommit>,
    /// Inbox records whose first attempt was counted at acceptance by this
    /// process (see [`InboxStore::begin_attempt`]).
    attempt_book: inbox::SharedAttemptBook,
    /// Removals per keyed table (see [`records::Removals`]).
    removals: Arc<records::Removals>,
    path: PathBuf,
}

thread_local! {
    /// Set while [`contain_panics`] runs on this thread: the process's panic
    /// hook stays quiet for a panic that is caught and reported as an error.
    static CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a panic now on this thread will be caught by [`contain_panics`]
/// (for the binary's panic hook: such a panic is not an internal error).
pub fn panic_is_contained() -> bool {
    CONTAINED.with(|c| c.get())
}

/// Runs `f`; a panic inside it (redb's on a damaged page) becomes
/// [`StoreError::Corrupt`] with the panic's message.
fn contain_panics<T>(f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    let before = CONTAINED.with(|c| c.replace(true));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(before));
    out.unwrap_or_else(|payload| {
        let msg =
            silas_core::error::panic_text(&*payload).unwrap_or_else(|| "unreadable page".into());
        Err(StoreError::Corrupt(format!("a damaged page ({msg})")))
    })
}

impl Store {
    /// Open (creating if absent) the store file at `path`, checking or stamping
    /// its schema record.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Store> {
        let path = path.as_ref().to_path_buf();
        // redb would initialise an empty file as a fresh store: every
        // command would then go on as if nothing had ever been recorded.
        // An empty store file is what a full disk or a cut-off copy leaves.
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            return Err(StoreError::Corrupt(format!(
                "{} is empty (0 bytes; a full disk or an interrupted copy?): restore the data \
                 dir from a backup, or move the file aside to start with a new, empty store",
                path.display()
            )));
        }
        create_owner_only(&path)?;
        // redb panics on some damaged pages (an invalid page type byte)
        // instead of returning `Corrupted`: that took every command down,
        // `silas doctor` included, with an internal error and no diagnosis.
        let db = contain_panics(|| {
            let db = redb::Builder::new()
                .set_cache_size(CACHE_BYTES)
                .create(&path)
                .map_err(|e| match e {
                    redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse {
                        path: path.display().to_string(),
                    },
                    other => StoreError::from(other),
                })?;
            let txn = db.begin_write()?;
            schema::check_or_stamp(&txn)?;
            txn.commit()?;
            Ok(db)
        })
        .map_err(|e| match e {
            StoreError::Corrupt(why) => StoreError::Corrupt(format!(
                "{why} in {}: restore the data dir from a backup",
                path.display()
            )),
            other => other,
        })?;
        let db = Arc::new(db);
        let writer = Arc::new(group_commit::GroupCommit::start(db.clone())?);
        Ok(Store {
            db,
            writer,
            attempt_book: Default::default(),
            removals: Default::default(),
            path,
        })
    }

    /// Open the store inside a data dir.
    pub fn open_in(data_dir: impl AsRef<Path>) -> StoreResult<Store> {
        Store::open(data_dir.as_ref().join(STORE_FILE))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn audit(&self) -> AuditLog {
        AuditLog::new(self.db.clone(), self.writer.clone(), &self.path)
    }

    pub fn work_items(&self) -> WorkItemStore {
        WorkItemStore::new(self.db.clone())
    }

    pub fn chronicle(&self) -> ChronicleStore {
        ChronicleStore::new(self.db.clone())
    }

    pub fn inbox(&self) -> InboxStore {
        InboxStore::new(
            self.db.clone(),
            self.writer.clone(),
            self.attempt_book.clone(),
        )
    }

    /// The group-commit writer's counters (durable commits, writes).
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.writer.stats()
    }

    pub fn nonces(&self) -> NonceStore {
        NonceStore::new(self.db.clone())
    }

    /// The Telegram channel's received updates and refused chats.
    pub fn telegram_updates(&self) -> TelegramUpdates {
        TelegramUpdates::new(self.db.clone())
    }

    pub fn approvals(&self) -> ApprovalLedger {
        ApprovalLedger::new(self.db.clone())
    }

    /// Persona state, memory records, connections or pending cards.
    pub fn records<T: Keyed>(&self) -> Records<T> {
        Records::new(self.db.clone(), self.writer.clone(), self.removals.clone())
    }

    pub fn persona_events(&self) -> PersonaEvents {
        PersonaEvents::new(self.db.clone())
    }

    /// Raw database access, for tests that tamper with stored bytes.
    #[doc(hidden)]
    pub fn raw_database(&self) -> &Database {
        &self.db
    }
}
