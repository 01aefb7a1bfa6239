//! Tests of the full-text index (`index.rs`).

#![allow(clippy::unwrap_used)]
use super::*;
use silas_core::Timestamp;

pub(crate) fn memory(id: &str, tier: ReingestionTier) -> MemoryItem {
    use silas_core::model::memory::{MemoryType, TrustLevel};
    use silas_core::model::messages::TaintLevel;
    let now = Timestamp::now();
    MemoryItem {
        memory_id: id.into(),
        content: format!("cats and dogs {id}"),
        memory_type: MemoryType::Fact,
        reingestion_tier: tier,
        trust_level: TrustLevel::Working,
        taint: TaintLevel::Owner,
        created_at: now,
        updated_at: now,
        valid_from: None,
        valid_until: None,
        access_count: 0,
        last_accessed: None,
        semantic_tags: Vec::new(),
        entity_refs: Vec::new(),
        causal_refs: Vec::new(),
        temporal_next: None,
        temporal_prev: None,
        session_id: Some("s".into()),
        embedding: None,
        source_kind: "test".into(),
    }
}

fn generation(ix: &TextIndex) -> u64 {
    ix.reader.searcher().generation().generation_id()
}

/// The active lane's "cats" memories.
fn active_cats(ix: &TextIndex) -> Vec<String> {
    ix.search("s", ReingestionTier::Active, "cats", 500)
        .unwrap()
}

/// An index holding one committed active memory, "a1", and its
/// generation.
fn with_a1() -> (TextIndex, u64) {
    let ix = TextIndex::in_ram().unwrap();
    ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
    assert_eq!(active_cats(&ix), ["a1"]);
    let g = generation(&ix);
    (ix, g)
}

#[test]
fn raw_captures_wait_for_a_raw_read_or_a_batch_while_active_writes_do_not() {
    let (ix, g) = with_a1();
    // A raw capture: an active-lane read does not commit for it…
    ix.upsert(&memory("r1", ReingestionTier::LowReingestion))
        .unwrap();
    assert_eq!(active_cats(&ix), ["a1"]);
    assert_eq!(generation(&ix), g, "committed for a raw capture");
    // …a raw-lane read does, and sees it.
    assert_eq!(
        ix.search("s", ReingestionTier::LowReingestion, "cats", 10)
            .unwrap(),
        ["r1"]
    );
    assert!(generation(&ix) > g);
    // A complete batch of raw captures is committed by the capture that
    // completes it when no committer thread takes batches.
    let g = generation(&ix);
    for n in 0..DEFERRED_BATCH {
        ix.upsert(&memory(
            &format!("r{}", n + 2),
            ReingestionTier::LowReingestion,
        ))
        .unwrap();
    }
    assert!(generation(&ix) > g);
    assert_eq!(ix.num_docs().unwrap(), DEFERRED_BATCH as u64 + 2);
}

/// What a context eviction keeps (active lane) is deferred like a raw
/// capture: an active-lane read does not commit for it — once a long
/// conversation's context is full every turn keeps some, and a commit
/// per turn was most of the turn's cost — the quiet commit or a batch
/// makes it searchable; an ordinary active write still commits at the
/// next read.
#[test]
fn deferred_active_writes_wait_for_a_batch_or_a_quiet_spell() {
    let (ix, g) = with_a1();
    ix.upsert_deferred(&memory("kept1", ReingestionTier::Active))
        .unwrap();
    assert_eq!(active_cats(&ix), ["a1"]);
    assert_eq!(
        generation(&ix),
        g,
        "an active read committed a deferred write"
    );
    // Quiet: the next look commits it, and it is found.
    assert!(!ix.commit_if_quiet().unwrap());
    assert!(ix.commit_if_quiet().unwrap());
    let mut found = active_cats(&ix);
    found.sort();
    assert_eq!(found, ["a1", "kept1"]);
    // A complete batch of them is committed (no committer thread here).
    let g = generation(&ix);
    for n in 0..DEFERRED_BATCH {
        ix.upsert_deferred(&memory(&format!("kept{}", n + 2), ReingestionTier::Active))
            .unwrap();
    }
    assert_eq!(active_cats(&ix).len(), DEFERRED_BATCH + 2);
    assert!(generation(&ix) > g);
    // An ordinary active write is seen by the very next read.
    ix.upsert(&memory("a2", ReingestionTier::Active)).unwrap();
    assert!(active_cats(&ix).contains(&"a2".to_string()));
}

/// On disk, so that the new writer must find the old one's directory
/// lock released.
#[test]
fn an_idle_writer_is_released_and_the_next_write_makes_another() {
    let dir = tempfile::tempdir().unwrap();
    let (ix, _) = TextIndex::open(dir.path()).unwrap();
    ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
    assert!(ix.has_writer());
    // A write not yet committed: kept, however long the quiet.
    for _ in 0..WRITER_IDLE_LOOKS * 2 {
        assert!(!ix.release_writer_if_idle().unwrap());
    }
    assert!(ix.has_writer());
    // Committed by a read; then a minute of looks without a write.
    assert_eq!(active_cats(&ix), ["a1"]);
    for _ in 0..WRITER_IDLE_LOOKS {
        assert!(!ix.release_writer_if_idle().unwrap());
    }
    assert!(ix.release_writer_if_idle().unwrap());
    assert!(!ix.has_writer());
    assert!(!ix.release_writer_if_idle().unwrap(), "released once");
    // Reads need no writer; the next write makes a new one.
    assert_eq!(active_cats(&ix), ["a1"]);
    ix.upsert(&memory("a2", ReingestionTier::Active)).unwrap();
    assert!(ix.has_writer());
    let mut found = active_cats(&ix);
    found.sort();
    assert_eq!(found, ["a1", "a2"]);
}

#[test]
fn a_write_between_looks_restarts_the_idle_count() {
    let (ix, _) = with_a1();
    for round in 0..3 {
        for _ in 0..WRITER_IDLE_LOOKS {
            assert!(!ix.release_writer_if_idle().unwrap());
        }
        ix.upsert(&memory(&format!("b{round}"), ReingestionTier::Active))
            .unwrap();
        assert_eq!(active_cats(&ix).len(), round + 2);
    }
    assert!(ix.has_writer());
}

#[test]
fn raw_captures_are_committed_once_quiet_and_not_while_they_keep_coming() {
    let ix = TextIndex::in_ram().unwrap();
    assert!(!ix.commit_if_quiet().unwrap(), "nothing pending");
    let g = generation(&ix);
    ix.upsert(&memory("r1", ReingestionTier::LowReingestion))
        .unwrap();
    assert!(
        !ix.commit_if_quiet().unwrap(),
        "a capture since the last look"
    );
    ix.upsert(&memory("r2", ReingestionTier::LowReingestion))
        .unwrap();
    assert!(!ix.commit_if_quiet().unwrap(), "still coming");
    assert_eq!(generation(&ix), g);
    // No capture between two looks: committed, visible, nothing left.
    assert!(ix.commit_if_quiet().unwrap());
    assert!(generation(&ix) > g);
    assert_eq!(ix.deferred.load(Ordering::Acquire), 0);
    assert_eq!(ix.reader.searcher().num_docs(), 2);
    assert!(!ix.commit_if_quiet().unwrap(), "nothing pending again");
}

#[test]
fn the_writer_is_created_at_the_first_write_not_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (ix, fresh) = TextIndex::open(dir.path()).unwrap();
    assert!(fresh);
    assert!(!ix.has_writer(), "open created the writer");
    // Reads and counts need no writer.
    assert_eq!(ix.num_docs().unwrap(), 0);
    assert!(
        ix.search("s", ReingestionTier::Active, "cats", 10)
            .unwrap()
            .is_empty()
    );
    assert!(!ix.has_writer());
    ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
    assert!(ix.has_writer());
    ix.commit().unwrap();
    drop(ix);
    // Reopened: the committed document is searchable, still no writer.
    let (ix, fresh) = TextIndex::open(dir.path()).unwrap();
    assert!(!fresh);
    assert_eq!(
        ix.search("s", ReingestionTier::Active, "cats", 10).unwrap(),
        ["a1"]
    );
    assert!(!ix.has_writer());
}

#[test]
fn concurrent_first_writes_share_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (ix, _) = TextIndex::open(dir.path()).unwrap();
    let ix = std::sync::Arc::new(ix);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|n| {
            let ix = ix.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                // A second writer would fail on tantivy's directory lock.
                ix.upsert(&memory(&format!("a{n}"), ReingestionTier::Active))
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    assert_eq!(ix.num_docs().unwrap(), 8);
}

/// Raw captures, `n` of them from `first`.
fn capture(ix: &TextIndex, first: usize, n: usize) {
    for k in first..first + n {
        ix.upsert_deferred(&memory(&format!("r{k}"), ReingestionTier::LowReingestion))
            .unwrap();
    }
}

/// With a committer thread, the capture that completes a batch only
/// raises its signal: no turn pays the commit (about 10 ms, the one-client
/// p99's worst turn after the first, issue #19), and an active read does
/// not commit for it either.
#[test]
fn a_complete_batch_is_the_committers_job_not_the_capturing_turns() {
    let (ix, g) = with_a1();
    let signal = std::sync::Arc::new(BatchSignal::default());
    ix.commit_batches_elsewhere(signal.clone());
    capture(&ix, 0, DEFERRED_BATCH - 1);
    assert!(!signal.wait_until(Instant::now()), "raised before a batch");
    capture(&ix, DEFERRED_BATCH - 1, 1);
    assert_eq!(generation(&ix), g, "the capturing call committed");
    assert_eq!(active_cats(&ix), ["a1"]);
    assert_eq!(generation(&ix), g, "an active read committed the batch");
    // What the committer thread does once woken.
    assert!(signal.wait_until(Instant::now()));
    assert!(ix.commit_batch().unwrap());
    assert!(generation(&ix) > g);
    assert_eq!(ix.reader.searcher().num_docs(), DEFERRED_BATCH as u64 + 1);
    // Woken again by the same batch: nothing left to commit.
    assert!(!ix.commit_batch().unwrap());
    // A committer that stopped keeping up: the queue is bounded, the
    // capture at the limit commits itself.
    let g = generation(&ix);
    capture(&ix, 1_000, QUEUE_LIMIT - 1);
    assert_eq!(generation(&ix), g);
    capture(&ix, 5_000, 1);
    assert!(generation(&ix) > g);
    assert_eq!(ix.deferred.load(Ordering::Acquire), 0);
}

/// A capture that finds no writer queues and asks the committer to make
/// one, so a turn never pays for the writer (its channel and threads, a
/// few ms) and the rest of the batch is indexed as it comes.
#[test]
fn the_committer_makes_the_writer_a_capture_found_missing() {
    let ix = TextIndex::in_ram().unwrap();
    let signal = std::sync::Arc::new(BatchSignal::default());
    ix.commit_batches_elsewhere(signal.clone());
    capture(&ix, 0, 2);
    assert!(!ix.has_writer(), "a capture made the writer");
    assert!(
        signal.wait_until(Instant::now()),
        "the committer was not asked"
    );
    assert!(!ix.commit_batch().unwrap(), "committed before a batch");
    assert!(ix.has_writer());
    assert!(ix.queued.lock().unwrap().is_empty());
    // The next capture goes to the writer and asks for nothing.
    capture(&ix, 2, 1);
    assert!(ix.queued.lock().unwrap().is_empty());
    assert!(!signal.wait_until(Instant::now()));
    assert_eq!(
        ix.search("s", ReingestionTier::LowReingestion, "cats", 10)
            .unwrap()
            .len(),
        3
    );
}

/// A capture only queues: it returns while another thread holds the
/// writer (as a commit does, for its whole length).
#[test]
fn a_capture_does_not_wait_for_the_writer() {
    let ix = std::sync::Arc::new(TextIndex::in_ram().unwrap());
    let held = ix.writer.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let capturing = ix.clone();
    let t = std::thread::spawn(move || {
        capture(&capturing, 0, 3);
        tx.send(()).unwrap();
    });
    let returned = rx.recv_timeout(std::time::Duration::from_secs(5));
    drop(held);
    t.join().unwrap();
    assert!(returned.is_ok(), "the capture waited for the writer's lock");
    // Queued, not lost: a raw-lane read sees them.
    assert_eq!(
        ix.search("s", ReingestionTier::LowReingestion, "cats", 10)
            .unwrap()
            .len(),
        3
    );
}

/// Whatever touches the writer adds the queued captures first, so a
/// forget or an update of a memory still queued applies after it.
#[test]
fn a_write_after_a_queued_capture_applies_after_it() {
    let ix = TextIndex::in_ram().unwrap();
    capture(&ix, 0, 2);
    ix.delete(&["r0".to_string()]).unwrap();
    let mut updated = memory("r1", ReingestionTier::Active);
    updated.content = "birds".into();
    ix.upsert(&updated).unwrap();
    let raw = |q: &str| {
        ix.search("s", ReingestionTier::LowReingestion, q, 10)
            .unwrap()
    };
    assert!(
        raw("cats").is_empty(),
        "a queued capture outlived its forget or update"
    );
    assert_eq!(
        ix.search("s", ReingestionTier::Active, "birds", 10)
            .unwrap(),
        ["r1"]
    );
    assert_eq!(ix.num_docs().unwrap(), 1);
}

#[test]
fn only_the_daemons_user_may_enter_the_index_directory() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(crate::INDEX_DIR);
    let (ix, fresh) = TextIndex::open(&dir).unwrap();
    assert!(fresh);
    assert_eq!(mode(&dir), 0o700, "a new index directory");
    ix.upsert(&memory("a1", ReingestionTier::Active)).unwrap();
    ix.commit().unwrap();
    drop(ix);
    // An index an older build left open to everyone is narrowed at open.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ix, fresh) = TextIndex::open(&dir).unwrap();
    assert!(!fresh, "the existing index is kept");
    assert_eq!(mode(&dir), 0o700, "an existing index directory");
    assert_eq!(
        ix.search("s", ReingestionTier::Active, "cats", 10).unwrap(),
        ["a1"]
    );
}
