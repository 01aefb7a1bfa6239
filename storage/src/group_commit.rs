//! Group commit (issue #19): one writer thread commits the store's queued
//! writes, and one fsync covers every write that arrived while the previous
//! fsync ran.
//!
//! A batch runs in **one** redb write transaction, committed once: with
//! [`Durability::Immediate`] (one fsync) when any write in it must be
//! durable, else with [`Durability::None`]. If a write fails, the batch's
//! transaction is rolled back and its writes are run again one transaction
//! each (committed non-durably, then one empty durable commit), so one bad
//! write never fails its batch-mates — which is why queued writes are `Fn`:
//! they may run twice. redb persists every earlier non-durable commit with
//! the next durable one; a non-durable commit updates redb's header in
//! memory only, so a process that dies before the durable commit loses it —
//! which is why nothing may be acknowledged before its [`Wait`] is met.
//!
//! Callers either `.await` the result ([`GroupCommit::write`], the hot path:
//! no runtime worker thread blocks on an fsync), block on it
//! ([`GroupCommit::write_blocking`], cold paths and tests), do not wait
//! at all ([`GroupCommit::write_detached`]), or take it in two steps
//! ([`GroupCommit::write_staged`]: the value once visible, then a
//! [`DurableTicket`] met by the first durable commit after it — so work
//! that only readers need can start while the fsync is still to come, and
//! a later durable write of that work carries both in one fsync). The queue is FIFO: a write is
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

/// The longest a failed flush waits before it is tried again.
const MAX_FLUSH_RETRY: Duration = Duration::from_secs(1);

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

/// Told once a durable commit holds a staged write.
type DurableWaiter = tokio::sync::oneshot::Sender<StoreResult<()>>;

/// The second step of [`GroupCommit::write_staged`]: met once the write is
/// durable (fsync'd), at the latest [`LAZY_FLUSH_AFTER`] after it became
/// visible, or with the first durable commit that comes before that.
#[derive(Debug)]
pub struct DurableTicket(tokio::sync::oneshot::Receiver<StoreResult<()>>);

impl DurableTicket {
    /// Waits until the write is durable; `Err` if the durable commit failed
    /// for good (the store's writer stopped) — then it must not be
    /// acknowledged.
    pub async fn wait(self) -> StoreResult<()> {
        self.0.await.map_err(|_| stopped())?
    }

    /// Whether it is durable already (without waiting).
    pub fn is_met(&mut self) -> bool {
        matches!(self.0.try_recv(), Ok(Ok(())))
    }
}

/// Where a write's result goes.
enum Reply<R> {
    Async(tokio::sync::oneshot::Sender<StoreResult<R>>),
    Blocking(mpsc::SyncSender<StoreResult<R>>),
    /// Nobody waits: a failure is logged (`what` names the write).
    Detached(&'static str),
    /// Told twice: the value at its own commit, then (see
    /// [`DurableTicket`]) once a durable commit holds it.
    Staged {
        visible: tokio::sync::oneshot::Sender<StoreResult<R>>,
        durable: DurableWaiter,
    },
}

impl<R> Reply<R> {
    /// Sends `result`; a staged write that committed hands back its
    /// durability waiter for the writer to keep until a durable commit.
    fn send(self, result: StoreResult<R>) -> Option<DurableWaiter> {
        match (self, result) {
            (Reply::Staged { visible, durable }, Ok(v)) => {
                let _ = visible.send(Ok(v));
                return Some(durable);
            }
            (Reply::Staged { visible, durable }, Err(e)) => {
                let _ = durable.send(Err(e.clone()));
                let _ = visible.send(Err(e));
            }
            // A waiter that went away (a cancelled task) no longer cares.
            (Reply::Async(tx), result) => {
                let _ = tx.send(result);
            }
            (Reply::Blocking(tx), result) => {
                let _ = tx.send(result);
            }
            (Reply::Detached(what), Err(e)) => {
                tracing::warn!(write = what, "queued store write failed: {e}");
            }
            (Reply::Detached(_), Ok(_)) => {}
        }
        None
    }
}

/// One queued write, type-erased: `apply` runs it inside a transaction
/// (possibly twice, see the module doc), `finish` reports the outcome.
trait Queued: Send {
    fn apply(&mut self, txn: &WriteTransaction) -> StoreResult<()>;
    fn finish(self: Box<Self>, outcome: StoreResult<()>) -> Option<DurableWaiter>;
}

struct Pending<R, F> {
    op: F,
    value: Option<R>,
    reply: Reply<R>,
}

impl<R, F> Queued for Pending<R, F>
where
    R: Send,
    F: Fn(&WriteTransaction) -> StoreResult<R> + Send,
{
    fn apply(&mut self, txn: &WriteTransaction) -> StoreResult<()> {
        // A write that panics fails alone (its transaction is rolled back
        // like any failed write's); the writer thread lives on for the rest.
        let op = &self.op;
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(txn)))
            .map_err(|_| StoreError::Invalid("a queued store write panicked".into()))?;
        self.value = Some(ran?);
        Ok(())
    }

    fn finish(self: Box<Self>, outcome: StoreResult<()>) -> Option<DurableWaiter> {
        let Pending { value, reply, .. } = *self;
        reply.send(outcome.and_then(|()| {
            value.ok_or_else(|| StoreError::Invalid("queued write reported before it ran".into()))
        }))
    }
}

struct Job {
    wait: Wait,
    write: Box<dyn Queued>,
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
        F: Fn(&WriteTransaction) -> StoreResult<R> + Send + 'static,
    {
        let job = Job {
            wait,
            write: Box::new(Pending {
                op,
                value: None,
                reply,
            }),
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
        F: Fn(&WriteTransaction) -> StoreResult<R> + Send + 'static,
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
        F: Fn(&WriteTransaction) -> StoreResult<R> + Send + 'static,
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

    /// Queues `op` and waits (asynchronously) until it is visible, like a
    /// [`Wait::Lazy`] write; the [`DurableTicket`] it returns is met once a
    /// durable commit holds it, which the writer makes happen within
    /// [`LAZY_FLUSH_AFTER`] unless a durable write queued meanwhile does.
    /// For a write that must be durable before it is acknowledged, but
    /// whose value others may act on before that (their own durable writes
    /// queue behind it, so a crash loses them together).
    pub async fn write_staged<R, F>(&self, op: F) -> StoreResult<(R, DurableTicket)>
    where
        R: Send + 'static,
        F: Fn(&WriteTransaction) -> StoreResult<R> + Send + 'static,
    {
        let (visible, visible_rx) = tokio::sync::oneshot::channel();
        let (durable, durable_rx) = tokio::sync::oneshot::channel();
        self.submit(Wait::Lazy, op, Reply::Staged { visible, durable });
        let value = visible_rx.await.map_err(|_| stopped())??;
        Ok((value, DurableTicket(durable_rx)))
    }

    /// Queues `op` without waiting for it; a failure is logged under `what`.
    pub fn write_detached<F>(&self, wait: Wait, what: &'static str, op: F)
    where
        F: Fn(&WriteTransaction) -> StoreResult<()> + Send + 'static,
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

fn begin(db: &Database, durability: Durability) -> StoreResult<WriteTransaction> {
    let mut txn = db.begin_write()?;
    txn.set_durability(durability)?;
    Ok(txn)
}

/// An empty durable commit: makes every earlier non-durable commit durable.
fn flush(db: &Database) -> StoreResult<()> {
    begin(db, Durability::Immediate)?.commit()?;
    Ok(())
}

/// The batch in one transaction. `Err(batch)` when a write failed: the
/// transaction was rolled back and nothing was reported.
fn run_together(
    db: &Database,
    mut batch: Vec<Job>,
    durable: bool,
) -> Result<(Vec<Job>, StoreResult<()>), Vec<Job>> {
    let durability = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    let txn = match begin(db, durability) {
        Ok(t) => t,
        Err(e) => return Ok((batch, Err(e))),
    };
    for job in &mut batch {
        if job.write.apply(&txn).is_err() {
            // Dropping the transaction rolls the whole batch back.
            drop(txn);
            return Err(batch);
        }
    }
    let committed = txn.commit().map_err(StoreError::from);
    Ok((batch, committed))
}

/// The fallback: each write in its own non-durable transaction. Returns the
/// writes that committed; the failed ones have been told.
fn run_one_by_one(db: &Database, batch: Vec<Job>) -> Vec<Job> {
    let mut committed = Vec::with_capacity(batch.len());
    for mut job in batch {
        let outcome = begin(db, Durability::None).and_then(|txn| {
            job.write.apply(&txn)?;
            txn.commit()?;
            Ok(())
        });
        match outcome {
            Ok(()) => committed.push(job),
            Err(e) => {
                // A failed write has no durability to wait for.
                let _ = job.write.finish(Err(e));
            }
        }
    }
    committed
}

fn writer_loop(db: &Database, rx: &Receiver<Job>, counters: &Counters) {
    // Since when a lazy write has been waiting for a durable commit.
    let mut lazy_since: Option<Instant> = None;
    // Whether the writer committed anything non-durably since its last
    // durable commit (other handles only ever commit durably).
    let mut dirty = false;
    // Staged writes committed non-durably, told at the next durable commit.
    let mut awaiting: Vec<DurableWaiter> = Vec::new();
    // How long lazy writes wait for a durable commit: the lazy window, and
    // longer after each failed flush (a broken disk is not retried and
    // logged 500 times a second).
    let mut flush_after = LAZY_FLUSH_AFTER;
    loop {
        let first = match lazy_since {
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
            Some(since) => {
                let left = (since + flush_after).saturating_duration_since(Instant::now());
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
        // An empty batch: only the lazy window ran out.
        let must_flush = batch.is_empty()
            || lazy_since.is_some_and(|s| s.elapsed() >= flush_after)
            || batch.iter().any(|j| j.wait == Wait::Durable);

        // `together`: the batch's one commit is every write's own outcome;
        // otherwise only the durable ones wait for the closing flush.
        let (committed, outcome, together) = if batch.is_empty() {
            (Vec::new(), if dirty { flush(db) } else { Ok(()) }, true)
        } else {
            match run_together(db, batch, must_flush) {
                Ok((jobs, outcome)) => {
                    if outcome.is_ok() && !must_flush {
                        dirty = true;
                    }
                    (jobs, outcome, true)
                }
                Err(batch) => {
                    let jobs = run_one_by_one(db, batch);
                    if !jobs.is_empty() {
                        dirty = true;
                    }
                    let outcome = if must_flush && dirty {
                        flush(db)
                    } else {
                        Ok(())
                    };
                    (jobs, outcome, false)
                }
            }
        };
        if must_flush && outcome.is_ok() && (dirty || !committed.is_empty()) {
            counters.durable_commits.fetch_add(1, Ordering::Relaxed);
        }
        if outcome.is_ok() {
            counters
                .writes
                .fetch_add(committed.len() as u64, Ordering::Relaxed);
        }
        match &outcome {
            Ok(()) if must_flush => {
                dirty = false;
                lazy_since = None;
                flush_after = LAZY_FLUSH_AFTER;
            }
            Ok(()) => {
                if committed.iter().any(|j| j.wait == Wait::Lazy) {
                    lazy_since.get_or_insert_with(Instant::now);
                }
            }
            Err(e) => {
                tracing::error!("store commit failed: {e}");
                // Retried with the next durable write, or a (longer) window
                // from now.
                if lazy_since.is_some() {
                    flush_after = (flush_after * 2).min(MAX_FLUSH_RETRY);
                    lazy_since = Some(Instant::now());
                }
            }
        }
        // A durable commit settles every staged write before it: met, or —
        // if it failed, whether they reached the disk being unknown —
        // refused, so their senders resend under the same idempotency key
        // instead of waiting for a durable commit a failed store may never
        // make. Before this batch's own replies: whoever hears of a later
        // durable write finds every earlier staged one met.
        if must_flush {
            for w in awaiting.drain(..) {
                let _ = w.send(outcome.clone());
            }
        }
        for job in committed {
            let result = if together || job.wait == Wait::Durable {
                outcome.clone()
            } else {
                Ok(())
            };
            if let Some(w) = job.write.finish(result) {
                if must_flush {
                    let _ = w.send(outcome.clone());
                } else {
                    awaiting.push(w);
                }
            }
        }
    }
    // Queue closed: make what is left durable before the store closes.
    let closing = if dirty { flush(db) } else { Ok(()) };
    if let Err(e) = &closing {
        tracing::error!("store durable commit at close failed: {e}");
    }
    for w in awaiting {
        let _ = w.send(closing.clone());
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, TableDefinition};

    use super::*;

    const T: TableDefinition<&str, u64> = TableDefinition::new("t");

    /// A fresh store and its writer (keep the directory alive).
    fn writer() -> (tempfile::TempDir, Arc<Database>, GroupCommit) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::create(dir.path().join("db")).unwrap());
        let gc = GroupCommit::start(db.clone()).unwrap();
        (dir, db, gc)
    }

    fn put(k: &'static str) -> impl Fn(&WriteTransaction) -> StoreResult<u64> {
        move |txn: &WriteTransaction| -> StoreResult<u64> {
            txn.open_table(T)?.insert(k, 7)?;
            Ok(7)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_staged_write_is_visible_at_once_and_durable_within_the_lazy_window() {
        let (_dir, db, gc) = writer();
        let (value, ticket) = gc.write_staged(put("a")).await.unwrap();
        assert_eq!(value, 7);
        let read = db.begin_read().unwrap();
        assert!(read.open_table(T).unwrap().get("a").unwrap().is_some());
        // Nothing else is queued: the writer's lazy flush meets it.
        tokio::time::timeout(Duration::from_secs(10), ticket.wait())
            .await
            .expect("met within the lazy window")
            .unwrap();
        assert_eq!(gc.stats().durable_commits, 1);
    }

    /// The ticket is met by the first durable commit after the write: the
    /// durable write of the work that acted on it carries both (one fsync),
    /// and whoever hears of that write finds the ticket met already.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_later_durable_write_meets_an_earlier_staged_ticket() {
        let (_dir, _db, gc) = writer();
        for k in ["a", "b", "c"] {
            let (_, mut ticket) = gc.write_staged(put(k)).await.unwrap();
            gc.write(Wait::Durable, put("response")).await.unwrap();
            assert!(
                ticket.is_met(),
                "{k}: met before the durable write reported"
            );
        }
        let durable = gc.stats().durable_commits;
        assert!((3..=6).contains(&durable), "{durable}");
    }

    /// A staged write that fails tells both steps, and nothing is met.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_staged_write_is_refused_at_once() {
        let (_dir, _db, gc) = writer();
        let fail =
            |_: &WriteTransaction| -> StoreResult<u64> { Err(StoreError::Invalid("no".into())) };
        let e = gc.write_staged(fail).await.unwrap_err();
        assert!(e.to_string().contains("no"), "{e}");
    }

    /// A store whose fsync fails once `fail` is set (an I/O error, a
    /// full or vanished disk): commits without durability still succeed.
    #[derive(Debug)]
    struct FailingSync {
        inner: redb::backends::InMemoryBackend,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    impl redb::StorageBackend for FailingSync {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("injected fsync failure"));
            }
            self.inner.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            self.inner.write(offset, data)
        }
    }

    /// A staged write is visible at once, but its durable commit fails: the
    /// ticket is refused, not left waiting for a durable commit that may
    /// never come (the Stream then fails the acceptance instead of never
    /// answering its sender), and a later durable write is refused too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_staged_write_whose_durable_commit_fails_is_refused_not_left_waiting() {
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let backend = FailingSync {
            inner: redb::backends::InMemoryBackend::new(),
            fail: fail.clone(),
        };
        let db = Arc::new(Database::builder().create_with_backend(backend).unwrap());
        let gc = GroupCommit::start(db.clone()).unwrap();
        fail.store(true, Ordering::SeqCst);
        let (value, ticket) = gc.write_staged(put("a")).await.unwrap();
        assert_eq!(value, 7);
        let told = tokio::time::timeout(Duration::from_secs(5), ticket.wait())
            .await
            .expect("the ticket was left waiting after its durable commit failed");
        let e = told.unwrap_err();
        assert!(e.to_string().contains("injected fsync failure"), "{e}");
        let later = tokio::time::timeout(Duration::from_secs(5), gc.write(Wait::Durable, put("b")))
            .await
            .expect("a durable write after the failure never answered");
        assert!(later.is_err(), "{later:?}");
        // The failed flush is retried with a growing wait (2 ms doubling to
        // 1 s), not every 2 ms: about 8 rounds in 300 ms rather than 150.
        let before = gc.stats().batches;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rounds = gc.stats().batches - before;
        assert!(rounds <= 20, "{rounds} flush rounds in 300 ms");
    }

    /// Closing the store makes a staged write durable and meets its ticket.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closing_the_writer_meets_the_staged_tickets() {
        let (_dir, _db, gc) = writer();
        let (_, ticket) = gc.write_staged(put("a")).await.unwrap();
        drop(gc);
        ticket.wait().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_panics_fails_alone_and_the_writer_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::create(dir.path().join("db")).unwrap());
        let gc = Arc::new(GroupCommit::start(db.clone()).unwrap());
        let put = |k: &'static str| {
            move |txn: &WriteTransaction| -> StoreResult<()> {
                txn.open_table(T)?.insert(k, 1)?;
                Ok(())
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (i, k) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let gc = gc.clone();
            tasks.spawn(async move {
                if i == 1 {
                    let boom = |_: &WriteTransaction| -> StoreResult<()> { panic!("boom") };
                    (k, gc.write(Wait::Durable, boom).await)
                } else {
                    (k, gc.write(Wait::Durable, put(k)).await)
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            let (k, r) = r.unwrap();
            assert_eq!(r.is_err(), k == "b", "{k}: {r:?}");
        }
        // The writer still serves writes afterwards.
        gc.write(Wait::Durable, put("e")).await.unwrap();
        let read = db.begin_read().unwrap();
        let t = read.open_table(T).unwrap();
        for k in ["a", "c", "d", "e"] {
            assert!(t.get(k).unwrap().is_some(), "{k}");
        }
        assert!(t.get("b").unwrap().is_none());
    }
}
