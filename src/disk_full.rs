//! A full disk pauses the daemon instead of ending it. redb refuses every
//! write after one failed (the handle must be closed and opened again), so
//! the supervision tree gives up and the run ends with `E_DB_IO`; when the
//! data dir's filesystem is then (nearly) full, [`crate::daemon::start`]
//! waits here for space and runs the daemon again on a reopened store — what
//! was accepted before is durable and replayed like after any restart. The
//! decision is plain functions over data; the waiting is a thin loop.

use std::path::Path;
use std::time::{Duration, Instant};

use silas_core::ErrorCode;

/// Below this much free space after a store failure, the disk counts as full.
pub const FULL_BELOW: u64 = 16 << 20;
/// Free space needed before the daemon starts again (a margin over
/// [`FULL_BELOW`], so one write does not fill it at once).
pub const RESUME_AT: u64 = 32 << 20;
/// At most this many resumes within [`RESUME_WINDOW`]; past it the failure
/// is not a passing full disk and the daemon ends as before.
pub const MAX_RESUMES: usize = 5;
pub const RESUME_WINDOW: Duration = Duration::from_secs(3600);

/// Whether a run that ended with `code` should wait for space and run
/// again: a store I/O failure on a full disk, not too often lately.
pub fn should_wait(code: ErrorCode, free: Option<u64>, resumes: &[Instant], now: Instant) -> bool {
    let recent = resumes
        .iter()
        .filter(|t| now.saturating_duration_since(**t) < RESUME_WINDOW)
        .count();
    code == ErrorCode::EDbIo && free.is_some_and(|f| f < FULL_BELOW) && recent < MAX_RESUMES
}

/// Bytes free for this user on the filesystem holding `dir`.
pub fn free_space(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// How the wait for space ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    Space,
    /// Ctrl-C or SIGTERM while waiting: the daemon ends.
    Stopped,
}

/// Waits until `dir` has [`RESUME_AT`] free, saying so now and every few
/// minutes; a stop signal ends the wait.
pub async fn wait_for_space(dir: &Path) -> Waited {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Waited::Stopped;
    };
    let mut last_said: Option<Instant> = None;
    loop {
        let free = free_space(dir);
        if free.is_some_and(|f| f >= RESUME_AT) {
            return Waited::Space;
        }
        if last_said.is_none_or(|t| t.elapsed() >= Duration::from_secs(300)) {
            let kib = free.map_or_else(|| "unknown".to_string(), |f| (f >> 10).to_string());
            eprintln!(
                "{}: the disk holding {} is full ({kib} KiB free), so the store cannot write. \
                 Waiting for {} MiB free to start again (Ctrl-C stops).",
                ErrorCode::EDbIo,
                dir.display(),
                RESUME_AT >> 20
            );
            last_said = Some(Instant::now());
        }
        tokio::select! {
            _ = term.recv() => return Waited::Stopped,
            _ = int.recv() => return Waited::Stopped,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

/// Opens the store again. Every handle of the ended run must be gone first
/// (redb allows one per file); a task still closing gets a few seconds.
pub async fn reopen(data_dir: &Path) -> Result<silas_storage::Store, silas_storage::StoreError> {
    let mut tries = 0;
    loop {
        match silas_storage::Store::open_in(data_dir) {
            Err(silas_storage::StoreError::InUse { .. }) if tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_store_failure_on_a_full_disk_waits_and_not_forever() {
        let now = Instant::now();
        let full = Some(1 << 20);
        let roomy = Some(10 << 30);
        let cases: &[(ErrorCode, Option<u64>, usize, bool)] = &[
            (ErrorCode::EDbIo, full, 0, true),
            (ErrorCode::EDbIo, Some(FULL_BELOW - 1), 4, true),
            // Space is there: some other I/O failure (a failing disk).
            (ErrorCode::EDbIo, Some(FULL_BELOW), 0, false),
            (ErrorCode::EDbIo, roomy, 0, false),
            (ErrorCode::EDbIo, None, 0, false),
            // Not the store.
            (ErrorCode::EChannelProtocol, full, 0, false),
            (ErrorCode::ECfgInvalid, full, 0, false),
            // Resumed too often within the hour.
            (ErrorCode::EDbIo, full, MAX_RESUMES, false),
        ];
        for &(code, free, recent, want) in cases {
            let resumes = vec![now; recent];
            assert_eq!(
                should_wait(code, free, &resumes, now),
                want,
                "{code:?} {free:?} {recent}"
            );
        }
        // Resumes older than the window no longer count.
        let later = now + RESUME_WINDOW;
        assert!(should_wait(
            ErrorCode::EDbIo,
            full,
            &[now; MAX_RESUMES],
            later
        ));
    }
}
