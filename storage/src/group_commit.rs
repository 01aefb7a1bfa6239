//! Group commit (issue #19): one writer thread commits the store's queued
//! writes, and one fsync covers every write that arrived while the previous
//! fsync ran.
//!
//! Each queued write runs in its **own** redb write transaction, committed
//! with [`Durability::None`] (no fsync), so a write that fails is rolled back
//! alone and never fails its batch-mates. redb persists every earlier
//! non-durable commit with the next [`Durability::Immediate`] one, so after
//! a batch the writer makes one durable commit — the batch's last write, or
//! an empty transaction when that write failed — and only then reports the
//! writes that asked for durability. A non-durable commit updates redb's
//! header in memory only: a process that dies before the durable commit
//! loses it, which is why nothing may be acknowledged before its [`Wait`]
//! is met.
//!
//! Callers either `.await` the result ([`GroupCommit::write`], the hot path:
//! no runtime worker thread blocks on an fsync), block on it
//! ([`GroupCommit::write_blocking`], cold paths and tests), or do not wait
//! at all ([`GroupCommit::write_detached`]). The queue is FIFO: a write is
//! committed after every write queued before it, so a task's own earlier
//! writes are durable once a later durable write of its own is reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};

use crate::error::{StoreError, StoreResult};

/// When a queued write reports back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// After a durable commit that holds it (fsync'd): the write survives a
    /// crash from the moment it is reported.
    Durable,
    /// After its own non-durable commit: visible to every reader, durable
    /// with the store's next durable commit, lost if the process dies first.
    /// For writes a replay redoes.
    Visible,
    /// Like [`Wait::Visible`], but the writer also makes it durable within
    /// [`LAZY_FLUSH_AFTER`] even if no durable write comes to carry it.
    Lazy,
}

/// Longest a [`Wait::Lazy`] write stays non-durable when no durable write
/// follows. Short enough that an idle daemon does not keep it volatile;
/// long enough that, at low load, the next message's acceptance carries it
/// (one fsync for both).
pub const LAZY_FLUSH_AFTER: Duration = Duration::from_millis(2);

/// Most writes one batch takes from the queue before it commits durably,
/// bounding the wait of the first write of a large burst.
const MAX_BATCH: usize = 1024;

/// Counters of the writer, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Writes committed (durably or not).
    pub writes: u64,
    /// Durable (fsync'd) commits the writer made.
    pub durable_commits: u64,
    /// Batches taken from the queue.
    pub batches: u64,
}

#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    durable_commits: AtomicU64,
    batches: AtomicU64,
}

/// Where a write's result goes.
enum Reply<R> {
    Async(tokio::sync::oneshot::Sender<StoreResult<R>>),
    Blocking(mpsc::SyncSender<StoreResult<R>>),
    /// Nobody waits: a failure is logged (`what` names the write).
    Detached(&'static str),
}

impl<R> Reply<R> {
    fn send(self, result: StoreResult<R>) {
        match self {
            // A waiter that went away (a cancelled task) no longer cares.
            Reply::Async(tx) => {
                let _ = tx.send(result);
            }
            Reply::Blocking(tx) => {
                let _ = tx.send(result);
            }
            Reply::Detached(what) => {
                if let Err(e) = result {
                    tracing::warn!(write = what, "queued store write failed: {e}");
                }
            }
        }
    }
}

/// Called once the batch's durable commit is known (for [`Wait::Durable`])
/// or right after the write's own commit (otherwise).
type Completion = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// How one queued write went.
enum Ran {
    /// Committed with the durability it was given.
    Committed(Completion),
    /// The write or its commit failed; its waiter has been told.
    Failed { commit_failed: bool },
}

struct Job {
    wait: Wait,
    run: Box<dyn FnOnce(&Database, Durability) -> Ran + Send>,
}

/// The store's single writer. Shared by every clone of the store; the last
/// one to go stops the thread (after a final durable commit) and waits for
/// it, so the database is closed when the store is.
pub struct GroupCommit {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    counters: Arc<Counters>,
}

fn stopped() -> StoreError {
    StoreError::Io("the store's writer has stopped".into())
}

impl GroupCommit {
    pub(crate) fn start(db: Arc<Database>) -> StoreResult<GroupCommit> {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("silas-store-writer".into())
            .spawn(move || writer_loop(&db, &rx, &c))
            .map_err(|e| StoreError::Io(format!("cannot start the store writer: {e}")))?;
        Ok(GroupCommit {
            tx: Mutex::new(Some(tx)),
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            counters,
        })
    }

    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            writes: self.counters.writes.load(Ordering::Relaxed),
            durable_commits: self.counters.durable_commits.load(Ordering::Relaxed),
            batches: self.counters.batches.load(Ordering::Relaxed),
        }
    }

    fn submit<R, F>(&self, wait: Wait, op: F, reply: Reply<R>)
    where
        R: Send + 'static,
        F: FnOnce(&WriteTransaction) -> StoreResult<R> + Send + 'static,
    {
        let run = move |db: &Database, durability: Durability| -> Ran {
            let value = match run_one(db, durability, op) {
                Ok(v) => v,
                Err((e, commit_failed)) => {
                    reply.send(Err(e));
                    return Ran::Failed { commit_failed };
                }
            };
            Ran::Committed(Box::new(move |flushed: StoreResult<()>| {
                reply.send(flushed.map(|()| value));
            }))
        };
        let job = Job {
            wait,
            run: Box::new(run),
        };
        // If the writer is gone (it panicked) the job is dropped here, and
        // with it the reply's sender: a waiter then gets "stopped".
        if let Ok(guard) = self.tx.lock()
            && let Some(tx) = guard.as_ref()
        {
            let _ = tx.send(job);
        }
    }

    /// Queues `op` and waits (asynchronously) until `wait` is met.
    pub async fn write<R, F>(&self, wait: Wait, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&WriteTransaction) -> StoreResult<R> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(wait, op, Reply::Async(tx));
        // A dropped sender means the writer dropped the job: it stopped.
        rx.await.map_err(|_| stopped())?
    }

    /// Queues `op` and blocks the calling thread until `wait` is met.
    pub fn write_blocking<R, F>(&self, wait: Wait, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&WriteTransaction) -> StoreResult<R> + Send + 'static,
    {
        if std::thread::current().id() == self.thread_id {
            // A write queued from inside a write would wait for itself.
            return Err(StoreError::Invalid(
                "a store write was queued from the store writer".into(),
            ));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(wait, op, Reply::Blocking(tx));
        rx.recv().map_err(|_| stopped())?
    }

    /// Queues `op` without waiting for it; a failure is logged under `what`.
    pub fn write_detached<F>(&self, wait: Wait, what: &'static str, op: F)
    where
        F: FnOnce(&WriteTransaction) -> StoreResult<()> + Send + 'static,
    {
        self.submit(wait, op, Reply::Detached(what));
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        // Closing the channel ends the writer's loop after what is queued.
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let handle = self.thread.lock().ok().and_then(|mut h| h.take());
        if let Some(handle) = handle
            && std::thread::current().id() != self.thread_id
            && handle.join().is_err()
        {
            tracing::error!("the store writer panicked");
        }
    }
}

/// Runs one write in its own transaction and commits it.
fn run_one<R>(
    db: &Database,
    durability: Durability,
    op: impl FnOnce(&WriteTransaction) -> StoreResult<R>,
) -> Result<R, (StoreError, bool)> {
    let mut txn = db.begin_write().map_err(|e| (e.into(), false))?;
    txn.set_durability(durability)
        .map_err(|e| (e.into(), false))?;
    // On an error the transaction is dropped: redb rolls it back.
    let value = op(&txn).map_err(|e| (e, false))?;
    txn.commit().map_err(|e| (e.into(), true))?;
    Ok(value)
}

/// An empty durable commit: makes every earlier non-durable commit durable.
fn flush(db: &Database) -> StoreResult<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    txn.commit()?;
    Ok(())
}

fn writer_loop(db: &Database, rx: &Receiver<Job>, counters: &Counters) {
    // Since when a lazy write has been waiting for a durable commit.
    let mut lazy_since: Option<Instant> = None;
    // Whether the writer committed anything non-durably since its last
    // durable commit (other handles only ever commit durably).
    let mut dirty = false;
    loop {
        let first = match lazy_since {
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
            Some(since) => {
                let left = (since + LAZY_FLUSH_AFTER).saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(job) => Some(job),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        let mut batch: Vec<Job> = first.into_iter().collect();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        counters.batches.fetch_add(1, Ordering::Relaxed);
        let lazy_due = lazy_since.is_some_and(|s| s.elapsed() >= LAZY_FLUSH_AFTER);
        let must_flush = lazy_due || batch.iter().any(|j| j.wait == Wait::Durable);
        let last = batch.len().saturating_sub(1);
        let mut waiting: Vec<Completion> = Vec::new();
        // The durable commit's outcome, once one was made in this batch.
        let mut flushed: Option<StoreResult<()>> = None;
        for (i, job) in batch.into_iter().enumerate() {
            // The batch's last write carries the fsync for all of them.
            let durable_here = must_flush && i == last;
            let durability = if durable_here {
                Durability::Immediate
            } else {
                Durability::None
            };
            match (job.run)(db, durability) {
                Ran::Committed(done) => {
                    counters.writes.fetch_add(1, Ordering::Relaxed);
                    dirty = true;
                    if durable_here {
                        counters.durable_commits.fetch_add(1, Ordering::Relaxed);
                        flushed = Some(Ok(()));
                    }
                    match job.wait {
                        Wait::Durable => waiting.push(done),
                        Wait::Visible => done(Ok(())),
                        Wait::Lazy => {
                            done(Ok(()));
                            lazy_since.get_or_insert_with(Instant::now);
                        }
                    }
                }
                Ran::Failed { commit_failed } => {
                    if durable_here && commit_failed {
                        flushed = Some(Err(StoreError::Io(
                            "the batch's durable commit failed".into(),
                        )));
                    }
                }
            }
        }
        if !must_flush {
            continue;
        }
        let flushed = match flushed {
            Some(r) => r,
            None if dirty => {
                let r = flush(db);
                if r.is_ok() {
                    counters.durable_commits.fetch_add(1, Ordering::Relaxed);
                }
                r
            }
            None => Ok(()),
        };
        match &flushed {
            Ok(()) => {
                dirty = false;
                lazy_since = None;
            }
            // Retried with the next durable write, or a window from now.
            Err(_) => lazy_since = lazy_since.map(|_| Instant::now()),
        }
        for done in waiting {
            done(match &flushed {
                Ok(()) => Ok(()),
                Err(e) => Err(e.clone()),
            });
        }
        if let Err(e) = &flushed {
            tracing::error!("store durable commit failed: {e}");
        }
    }
    // Queue closed: make what is left durable before the store closes.
    if dirty && let Err(e) = flush(db) {
        tracing::error!("store durable commit at close failed: {e}");
    }
}
