//! glibc's allocator tuned for a long-running daemon (issue #19 item 3,
//! BENCHMARKS.md "churn").
//!
//! Measured with `silas-bench churn`: the heap in use grew far less than the
//! resident set did, and `malloc_trim(0)` gave back only part of the
//! difference. Two glibc defaults kept freed memory resident:
//!
//! - The mmap threshold is dynamic: once a large block (tantivy's
//!   per-segment indexing arenas, redb's write buffers) is freed, the
//!   threshold rises to its size, so every later block of that size comes
//!   from an arena, where small long-lived allocations (cache pages, scope
//!   maps) pin the pages around it after it is freed. A fixed threshold keeps
//!   large blocks in their own mappings, returned to the kernel on free.
//! - Up to eight arenas per core, each holding its own free memory; the
//!   daemon's threads (runtime workers, the blocking pool, the indexer, the
//!   group-commit writer) each end up with one. A few shared arenas reuse
//!   what another thread freed.
//!
//! Even then, free chunks inside an arena stay resident until
//! `malloc_trim` hands their pages back; glibc does that on its own only at
//! the top of the main heap. [`spawn_trimmer`] does it for every arena: within
//! a second when megabytes are free (a burst of visitors ended and their
//! scopes were released), and at most once a minute when the daemon is idle
//! (start-up's and timers' scratch memory, a few hundred KiB; issue #19
//! item 4). [`trim`] does it once when start-up is done.
//!
//! Elsewhere (musl, other libcs) this is a no-op.

use std::time::Duration;

/// Blocks at least this large get their own mapping (glibc's initial
/// default, made fixed).
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Arenas per process: one per core, at least two (so the runtime's workers
/// do not all serialise on one lock) and at most four (each arena keeps its
/// own free memory).
fn arena_max(cores: usize) -> i32 {
    i32::try_from(cores.clamp(2, 4)).unwrap_or(2)
}

/// How often the trimmer looks at the free memory.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Free memory inside the arenas worth giving back (below it a trim's
/// page faults on reuse would cost more than the pages are worth).
const TRIM_ABOVE: usize = 4 << 20;

/// Free memory an idle daemon gives back (below it, not worth a call).
const IDLE_TRIM_ABOVE: usize = 256 << 10;

/// Free memory that moved less than this between two looks: idle.
const QUIET_DELTA: usize = 64 << 10;

/// At most one idle trim per this many looks (a minute): idle timers reuse
/// and touch free chunks again, so an idle daemon's trim is not once only.
const IDLE_TRIM_EVERY: u32 = 60;

/// Whether `free` bytes held inside the arenas are worth a trim.
fn worth_trimming(free: usize) -> bool {
    free >= TRIM_ABOVE
}

/// The trimmer's memory between looks.
#[derive(Debug, Default)]
struct Trimmer {
    last_free: Option<usize>,
    /// Looks since the last trim; `None` before the first.
    since_trim: Option<u32>,
}

impl Trimmer {
    /// One look at the free memory: whether to trim now. Megabytes free
    /// always are; a few hundred KiB only when the daemon is idle (the free
    /// memory barely moved since the last look) and no trim came in the
    /// last minute.
    fn decide(&mut self, free: usize) -> bool {
        let quiet = self
            .last_free
            .is_some_and(|last| last.abs_diff(free) < QUIET_DELTA);
        self.last_free = Some(free);
        let due = self
            .since_trim
            .is_none_or(|n| n.saturating_add(1) >= IDLE_TRIM_EVERY);
        let trim = worth_trimming(free) || (quiet && due && free >= IDLE_TRIM_ABOVE);
        self.since_trim = if trim {
            Some(0)
        } else {
            self.since_trim.map(|n| n.saturating_add(1))
        };
        trim
    }
}

/// Starts the thread that hands free arena pages back to the kernel (see
/// the module doc). It runs for the life of the process; `false` when it
/// could not start or there is nothing to trim on this libc.
pub fn spawn_trimmer() -> bool {
    if !imp::AVAILABLE {
        return false;
    }
    std::thread::Builder::new()
        .name("malloc-trim".into())
        .spawn(|| {
            let mut trimmer = Trimmer::default();
            loop {
                std::thread::sleep(TRIM_EVERY);
                if trimmer.decide(imp::free_bytes()) {
                    imp::trim();
                }
            }
        })
        .is_ok()
}

/// Hands every arena's free pages back now (start-up is done: its config
/// parsing, pattern compiling and store opening left free chunks behind);
/// whether any were.
pub fn trim() -> bool {
    imp::trim()
}

/// What [`tune`] could not set (named, for one log line); empty when all
/// settings took.
pub fn tune() -> Vec<&'static str> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    imp::tune(MMAP_THRESHOLD, arena_max(cores))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod imp {
    pub const AVAILABLE: bool = true;

    pub fn tune(mmap_threshold: i32, arena_max: i32) -> Vec<&'static str> {
        let mut failed = Vec::new();
        // SAFETY: mallopt only changes allocator parameters; glibc takes its
        // own lock, and it is called before the runtime's threads start.
        if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold) } != 1 {
            failed.push("M_MMAP_THRESHOLD");
        }
        // SAFETY: as above.
        if unsafe { libc::mallopt(libc::M_ARENA_MAX, arena_max) } != 1 {
            failed.push("M_ARENA_MAX");
        }
        failed
    }

    /// Bytes free inside the arenas (all of them, not only the main one).
    pub fn free_bytes() -> usize {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.fordblks
    }

    /// Returns free pages of every arena to the kernel; whether any were.
    pub fn trim() -> bool {
        // SAFETY: malloc_trim takes each arena's lock; no pointer is passed.
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }

    /// Bytes glibc holds in separately mapped blocks now.
    #[cfg(test)]
    pub fn mapped_bytes() -> usize {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.hblkhd
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub const AVAILABLE: bool = false;

    pub fn tune(_mmap_threshold: i32, _arena_max: i32) -> Vec<&'static str> {
        Vec::new()
    }

    pub fn free_bytes() -> usize {
        0
    }

    pub fn trim() -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn arenas_follow_the_cores_within_two_to_four() {
        assert_eq!(arena_max(1), 2);
        assert_eq!(arena_max(2), 2);
        assert_eq!(arena_max(3), 3);
        assert_eq!(arena_max(64), 4);
    }

    /// Untuned glibc raises its mmap threshold to the size of a freed
    /// mapped block, so the next block a little smaller comes from an arena
    /// and stays resident after it is freed; tuned, it is mapped again.
    #[test]
    fn a_large_block_is_mapped_even_after_a_larger_one_was_freed() {
        assert!(tune().is_empty());
        let big = vec![1u8; 4 << 20];
        drop(std::hint::black_box(big));
        let before = imp::mapped_bytes();
        let next = std::hint::black_box(vec![1u8; 1 << 20]);
        let grew = imp::mapped_bytes().saturating_sub(before);
        drop(next);
        assert!(
            grew >= 1 << 20,
            "the 1 MiB block was not mapped: +{grew} bytes"
        );
    }

    #[test]
    fn only_megabytes_of_free_memory_are_worth_a_trim() {
        assert!(!worth_trimming(0));
        assert!(!worth_trimming(TRIM_ABOVE - 1));
        assert!(worth_trimming(TRIM_ABOVE));
    }

    #[test]
    fn megabytes_free_are_trimmed_at_every_look() {
        let mut t = Trimmer::default();
        for free in [TRIM_ABOVE, TRIM_ABOVE * 3, TRIM_ABOVE] {
            assert!(t.decide(free));
        }
    }

    #[test]
    fn an_idle_daemon_trims_its_few_hundred_kib_once_a_minute() {
        let mut t = Trimmer::default();
        let free = IDLE_TRIM_ABOVE + 300_000;
        // The first look has nothing to compare with: not known to be idle.
        assert!(!t.decide(free));
        // Barely moved since: idle, trimmed.
        assert!(t.decide(free + QUIET_DELTA - 1));
        // Still idle: the next idle trim waits a minute of looks.
        for _ in 0..IDLE_TRIM_EVERY - 1 {
            assert!(!t.decide(free));
        }
        assert!(t.decide(free));
    }

    #[test]
    fn a_busy_or_nearly_empty_free_list_is_left_alone() {
        let mut t = Trimmer::default();
        // Moving by more than the quiet delta at every look: busy.
        let mut free = IDLE_TRIM_ABOVE;
        for _ in 0..10 {
            free += QUIET_DELTA;
            assert!(!t.decide(free));
        }
        // Idle, but too little is free to be worth a call.
        let mut t = Trimmer::default();
        for _ in 0..10 {
            assert!(!t.decide(IDLE_TRIM_ABOVE - 1));
        }
    }

    /// Many small blocks freed (a burst of visitors gone) leave free chunks
    /// inside the arena that free() alone does not hand back.
    #[test]
    fn freed_small_blocks_inside_the_heap_are_trimmed() {
        assert!(tune().is_empty());
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![i as u8; 1024]).collect();
        // Keep every 64th block: the freed space is interior, not the top.
        let kept: Vec<Vec<u8>> = blocks.iter().step_by(64).cloned().collect();
        blocks.clear();
        blocks.shrink_to_fit();
        assert!(
            imp::free_bytes() >= TRIM_ABOVE,
            "free {}",
            imp::free_bytes()
        );
        assert!(Trimmer::default().decide(imp::free_bytes()));
        assert!(trim());
        drop(std::hint::black_box(kept));
    }
}
