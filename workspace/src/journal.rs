//! The apply journal: what an apply is about to do, written (and fsynced)
//! before the first rename, so a crash mid-apply is finished or rolled back
//! at the next start (`apply::recover`).
//!
//! Layout: `journal_dir/{id}/journal.json` plus `journal_dir/{id}/backups/{n}`,
//! the byte-exact originals of every replaced or deleted file (also the undo
//! record's source).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::FileFact;
use crate::error::ApplyError;
use crate::fsutil;

pub(crate) const JOURNAL_FILE: &str = "journal.json";
pub(crate) const BACKUPS: &str = "backups";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum JournalState {
    /// Staged files and new directories may exist; nothing renamed yet.
    Staging,
    /// Every staged file is complete and fsynced; renames may have started.
    Prepared,
    Complete,
    RolledBack,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub path: String,
    /// File name of the staged content beside the target; `None` = delete.
    pub staged: Option<String>,
    /// File name under `backups/` of the original; `None` = target was absent.
    pub backup: Option<String>,
    pub before: Option<FileFact>,
    pub after: Option<FileFact>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub version: u32,
    pub id: String,
    pub root: PathBuf,
    pub state: JournalState,
    /// Directories this apply created (relative, shallowest first).
    pub created_dirs: Vec<String>,
    pub entries: Vec<Entry>,
}

impl Journal {
    pub(crate) fn dir(&self, journal_dir: &Path) -> PathBuf {
        journal_dir.join(&self.id)
    }

    /// Atomically replaces the journal file (tmp + fsync + rename + dir fsync).
    pub(crate) fn write(&self, journal_dir: &Path) -> Result<(), ApplyError> {
        let dir = self.dir(journal_dir);
        let path = dir.join(JOURNAL_FILE);
        let tmp = dir.join(format!("{JOURNAL_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ApplyError::Journal {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let err = |e| ApplyError::io(format!("write journal {}", path.display()), e);
        let _ = fs::remove_file(&tmp);
        let mut f = fsutil::create_new(&tmp, 0o600).map_err(err)?;
        std::io::Write::write_all(&mut f, &bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
        fs::rename(&tmp, &path).map_err(err)?;
        fsutil::fsync_dir(&dir).map_err(err)
    }

    pub(crate) fn read(path: &Path) -> Result<Journal, ApplyError> {
        let bytes = fs::read(path)
            .map_err(|e| ApplyError::io(format!("read journal {}", path.display()), e))?;
        serde_json::from_slice(&bytes).map_err(|e| ApplyError::Journal {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    pub(crate) fn target(&self, e: &Entry) -> PathBuf {
        self.root.join(&e.path)
    }

    pub(crate) fn staged_path(&self, e: &Entry) -> Option<PathBuf> {
        let name = e.staged.as_ref()?;
        let target = self.target(e);
        Some(target.parent().unwrap_or(&self.root).join(name))
    }

    /// The entry's effect is already in place.
    pub(crate) fn is_done(&self, e: &Entry) -> bool {
        matches_fact(&self.target(e), e.after.as_ref())
    }

    /// Renames every remaining staged file into place (or deletes), then
    /// marks the journal complete. `fault`: stop after that many renames.
    pub(crate) fn finish(
        &mut self,
        journal_dir: &Path,
        fault: Option<usize>,
    ) -> Result<(), ApplyError> {
        let mut done = 0usize;
        let mut parents = Vec::new();
        for e in &self.entries {
            if self.is_done(e) {
                continue;
            }
            check_parents(&self.root, &e.path)?;
            let target = self.target(e);
            match self.staged_path(e) {
                Some(staged) => fs::rename(&staged, &target)
                    .map_err(|err| ApplyError::io(format!("rename into {}", e.path), err))?,
                None => fs::remove_file(&target)
                    .map_err(|err| ApplyError::io(format!("delete {}", e.path), err))?,
            }
            if let Some(p) = target.parent() {
                parents.push(p.to_path_buf());
            }
            done += 1;
            if fault == Some(done) {
                return Err(ApplyError::InjectedFault(done));
            }
        }
        parents.sort();
        parents.dedup();
        for p in parents {
            fsutil::fsync_dir(&p).map_err(|e| ApplyError::io("fsync workspace dir", e))?;
        }
        self.state = JournalState::Complete;
        self.write(journal_dir)
    }

    /// Puts every touched path back as it was before the apply: staged files
    /// removed, originals restored byte for byte with their mode and owner,
    /// added files removed, created directories removed when empty.
    pub(crate) fn rollback(&mut self, journal_dir: &Path) -> Result<(), ApplyError> {
        let renames_started = self.state != JournalState::Staging;
        for e in &self.entries {
            if let Some(staged) = self.staged_path(e) {
                let _ = fs::remove_file(staged);
            }
            if !renames_started {
                continue;
            }
            check_parents(&self.root, &e.path)?;
            let target = self.target(e);
            match (&e.before, &e.backup) {
                (Some(before), Some(backup)) => {
                    if !matches_fact(&target, Some(before)) {
                        let src = self.dir(journal_dir).join(BACKUPS).join(backup);
                        self.restore_from(&src, &target, before, &e.path)?;
                    }
                }
                _ => {
                    // Added by this apply: removed only if it is still ours.
                    if e.after.is_some() && matches_fact(&target, e.after.as_ref()) {
                        fs::remove_file(&target)
                            .map_err(|err| ApplyError::io(format!("remove {}", e.path), err))?;
                    }
                }
            }
        }
        for d in self.created_dirs.iter().rev() {
            let _ = fs::remove_dir(self.root.join(d));
        }
        self.state = JournalState::RolledBack;
        self.write(journal_dir)
    }

    fn restore_from(
        &self,
        backup: &Path,
        target: &Path,
        fact: &FileFact,
        rel: &str,
    ) -> Result<(), ApplyError> {
        let err = |e| ApplyError::io(format!("restore {rel}"), e);
        let tmp = target
            .parent()
            .unwrap_or(&self.root)
            .join(side_name(rel, &format!("silas-restore-{}", self.id)));
        let _ = fs::remove_file(&tmp);
        let mut from = fsutil::open_regular(backup).map_err(err)?;
        let mut to = fsutil::create_new(&tmp, 0o600).map_err(err)?;
        let (sha, _) = fsutil::copy_hashed(&mut from, &mut to).map_err(err)?;
        if sha != fact.sha256 {
            let _ = fs::remove_file(&tmp);
            return Err(ApplyError::Journal {
                path: backup.to_path_buf(),
                reason: "backup does not match its recorded hash".into(),
            });
        }
        set_mode_owner(&to, fact).map_err(err)?;
        to.sync_all().map_err(err)?;
        fs::rename(&tmp, target).map_err(err)
    }
}

/// `.{name}.{tag}` beside the target; the name part is bounded so the result
/// stays under NAME_MAX.
pub(crate) fn side_name(rel: &str, tag: &str) -> String {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let mut end = name.len().min(120);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(".{}.{tag}", &name[..end])
}

/// Whether `path` is in the state `fact` describes (`None` = absent).
pub(crate) fn matches_fact(path: &Path, fact: Option<&FileFact>) -> bool {
    match fact {
        None => fs::symlink_metadata(path).is_err_and(|e| fsutil::is_not_found(&e)),
        Some(f) => fsutil::hash_file(path).is_ok_and(|(sha, _)| sha == f.sha256),
    }
}

pub(crate) fn check_parents(root: &Path, rel: &str) -> Result<(), ApplyError> {
    fsutil::check_rel(rel).map_err(|reason| ApplyError::UnsafePath {
        path: rel.to_owned(),
        reason,
    })?;
    fsutil::parents_state(root, rel)
        .map(|_| ())
        .map_err(|reason| ApplyError::UnsafePath {
            path: rel.to_owned(),
            reason,
        })
}

/// Gives an open file the recorded mode and owner (chown only when it
/// differs, so an unprivileged daemon writing its own files never needs it).
pub(crate) fn set_mode_owner(file: &fs::File, fact: &FileFact) -> std::io::Result<()> {
    let meta = file.metadata()?;
    if meta.uid() != fact.uid || meta.gid() != fact.gid {
        std::os::unix::fs::fchown(file, Some(fact.uid), Some(fact.gid))?;
    }
    // After chown: chown clears setuid/setgid bits.
    file.set_permissions(fs::Permissions::from_mode(fact.mode))
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// Journals whose staged files were all present: the apply was finished.
    pub finished: Vec<String>,
    /// Journals rolled back to the pre-apply tree.
    pub rolled_back: Vec<String>,
}

/// At daemon start: finishes or rolls back every incomplete journal for
/// `workspace_root`. Idempotent (a handled journal is marked so).
pub fn recover(journal_dir: &Path, workspace_root: &Path) -> Result<RecoveryReport, ApplyError> {
    let mut report = RecoveryReport::default();
    let root = fs::canonicalize(workspace_root)
        .map_err(|e| ApplyError::io(format!("workspace {}", workspace_root.display()), e))?;
    let entries = match fs::read_dir(journal_dir) {
        Ok(e) => e,
        Err(e) if fsutil::is_not_found(&e) => return Ok(report),
        Err(e) => return Err(ApplyError::io("read journal dir", e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path().join(JOURNAL_FILE))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for path in paths {
        let mut journal = Journal::read(&path)?;
        if journal.root != root {
            continue;
        }
        match journal.state {
            JournalState::Complete | JournalState::RolledBack => {}
            JournalState::Staging => {
                journal.rollback(journal_dir)?;
                report.rolled_back.push(journal.id.clone());
            }
            JournalState::Prepared => {
                let finishable = journal.entries.iter().all(|e| {
                    journal.is_done(e)
                        || journal
                            .staged_path(e)
                            .is_some_and(|s| fsutil::open_regular(&s).is_ok())
                        || (e.staged.is_none() && e.after.is_none())
                });
                if finishable {
                    journal.finish(journal_dir, None)?;
                    report.finished.push(journal.id.clone());
                } else {
                    journal.rollback(journal_dir)?;
                    report.rolled_back.push(journal.id.clone());
                }
            }
        }
        tracing::info!(id = %journal.id, state = ?journal.state, "apply journal recovered");
    }
    Ok(report)
}

/// Removes finished journals (complete or rolled back) last written more
/// than `older_than` ago, with their backups: once the undo window is over
/// nothing reads them. Incomplete journals are never pruned (recovery needs
/// them). Returns how many were removed.
pub fn prune(journal_dir: &Path, older_than: std::time::Duration) -> Result<usize, ApplyError> {
    let entries = match fs::read_dir(journal_dir) {
        Ok(e) => e,
        Err(e) if fsutil::is_not_found(&e) => return Ok(0),
        Err(e) => return Err(ApplyError::io("read journal dir", e)),
    };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path().join(JOURNAL_FILE);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= older_than);
        if !old {
            continue;
        }
        let Ok(journal) = Journal::read(&path) else {
            continue;
        };
        if matches!(
            journal.state,
            JournalState::Complete | JournalState::RolledBack
        ) && fs::remove_dir_all(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}
