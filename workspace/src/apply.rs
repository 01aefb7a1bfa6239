//! Applying an approved [`ChangeSet`] to the real workspace, all-or-nothing,
//! and undoing it.
//!
//! Order: conflict check (every touched path still as in the snapshot) →
//! backups of originals into the journal dir → journal `staging` → new
//! directories and staged files beside their targets (fsynced, hash-checked
//! against the approved diff) → journal `prepared` → renames → journal
//! `complete`. Nothing is ever written through a symlink in the workspace, and
//! nothing under `.git`.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;

use crate::diff::{ChangeKind, ChangeSet};
use crate::error::ApplyError;
use crate::fsutil;
use crate::journal::{self, BACKUPS, Entry, Journal, JournalState};
use crate::{FileFact, Snapshot};

pub use crate::journal::{RecoveryReport, prune, recover};

/// One file of an apply, as needed to reverse it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoFile {
    pub path: String,
    /// The original (`None`: the apply created the file).
    pub before: Option<FileFact>,
    /// What the apply left (`None`: the apply deleted the file).
    pub after: Option<FileFact>,
    /// File name of the original's copy in `backup_dir`.
    pub backup: Option<String>,
}

/// The reverse patch of an apply: byte-exact originals plus what to expect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoRecord {
    pub id: String,
    pub root: PathBuf,
    pub backup_dir: PathBuf,
    pub files: Vec<UndoFile>,
    /// Directories the apply created; an undo removes them when empty.
    pub created_dirs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub id: String,
    pub undo: UndoRecord,
}

/// Who owns a written file.
enum Owner {
    /// Replaced files keep the owner's uid/gid.
    Keep { uid: u32, gid: u32 },
    /// New files get the owner of their directory.
    Parent,
}

struct Source {
    file: PathBuf,
    sha256: String,
    mode: u32,
    owner: Owner,
}

struct Op {
    path: String,
    /// Hash the target must have now; `None` = it must be absent.
    expect: Option<String>,
    /// New content; `None` = delete.
    content: Option<Source>,
}

/// Applies `changes` (taken from `result`) to `snapshot.source`.
pub fn apply(
    changes: &ChangeSet,
    result: &Path,
    snapshot: &Snapshot,
    journal_dir: &Path,
) -> Result<Applied, ApplyError> {
    let ops = ops_for(changes, result, snapshot)?;
    let journal = execute(&snapshot.source, journal_dir, ops, None)?;
    Ok(applied(&journal, journal_dir))
}

/// Test-only: [`apply`] that "crashes" after `stop_after` renames, leaving
/// the journal `prepared` for [`recover`] — the way crash recovery is tested.
#[doc(hidden)]
pub fn apply_with_fault(
    changes: &ChangeSet,
    result: &Path,
    snapshot: &Snapshot,
    journal_dir: &Path,
    stop_after: usize,
) -> Result<Applied, ApplyError> {
    let ops = ops_for(changes, result, snapshot)?;
    let journal = execute(&snapshot.source, journal_dir, ops, Some(stop_after))?;
    Ok(applied(&journal, journal_dir))
}

/// Reverses an apply byte for byte (originals with their mode and owner,
/// added files removed), all-or-nothing the same way; refused when any file
/// changed since the apply. Returns the undo's own apply record.
pub fn undo(
    undo: &UndoRecord,
    workspace_root: &Path,
    journal_dir: &Path,
) -> Result<Applied, ApplyError> {
    let root = fs::canonicalize(workspace_root)
        .map_err(|e| ApplyError::io(format!("workspace {}", workspace_root.display()), e))?;
    if root != undo.root {
        return Err(ApplyError::Invalid(format!(
            "undo record is for {}, not {}",
            undo.root.display(),
            root.display()
        )));
    }
    let mut ops = Vec::new();
    for f in &undo.files {
        let content = match (&f.before, &f.backup) {
            (Some(before), Some(backup)) => Some(Source {
                file: undo.backup_dir.join(backup),
                sha256: before.sha256.clone(),
                mode: before.mode,
                owner: Owner::Keep {
                    uid: before.uid,
                    gid: before.gid,
                },
            }),
            (Some(_), None) => {
                return Err(ApplyError::Invalid(format!("{}: no backup", f.path)));
            }
            (None, _) => None,
        };
        ops.push(Op {
            path: f.path.clone(),
            expect: f.after.as_ref().map(|a| a.sha256.clone()),
            content,
        });
    }
    let journal = execute(&root, journal_dir, ops, None)?;
    for d in undo.created_dirs.iter().rev() {
        // Only empty ones: the owner may have put files there since.
        let _ = fs::remove_dir(root.join(d));
    }
    Ok(applied(&journal, journal_dir))
}

fn ops_for(changes: &ChangeSet, result: &Path, snapshot: &Snapshot) -> Result<Vec<Op>, ApplyError> {
    let invalid = |p: &str, why: &str| ApplyError::Invalid(format!("{p}: {why}"));
    let mut ops = Vec::new();
    for c in &changes.files {
        fsutil::check_rel(&c.path).map_err(|reason| ApplyError::UnsafePath {
            path: c.path.clone(),
            reason,
        })?;
        let base = snapshot.files.get(&c.path);
        let content = |fact: Option<&FileFact>| -> Result<Source, ApplyError> {
            let sha = c
                .after_sha256
                .clone()
                .ok_or_else(|| invalid(&c.path, "no content hash"))?;
            Ok(match fact {
                Some(f) => Source {
                    file: result.join(&c.path),
                    sha256: sha,
                    mode: f.mode,
                    owner: Owner::Keep {
                        uid: f.uid,
                        gid: f.gid,
                    },
                },
                None => Source {
                    file: result.join(&c.path),
                    sha256: sha,
                    // Never setuid/setgid/sticky or group/other write
                    // from the executor (the diff masks it too).
                    mode: c.mode & 0o755,
                    owner: Owner::Parent,
                },
            })
        };
        let op = match (c.kind, base) {
            (ChangeKind::Added, None) => Op {
                path: c.path.clone(),
                expect: None,
                content: Some(content(None)?),
            },
            (ChangeKind::Modified | ChangeKind::Deleted, Some(fact)) => {
                if c.before_sha256.as_deref() != Some(fact.sha256.as_str()) {
                    return Err(invalid(&c.path, "change set is not from this snapshot"));
                }
                Op {
                    path: c.path.clone(),
                    expect: Some(fact.sha256.clone()),
                    content: match c.kind {
                        ChangeKind::Deleted => None,
                        _ => Some(content(Some(fact))?),
                    },
                }
            }
            _ => return Err(invalid(&c.path, "change set is not from this snapshot")),
        };
        ops.push(op);
    }
    Ok(ops)
}

fn applied(journal: &Journal, journal_dir: &Path) -> Applied {
    Applied {
        id: journal.id.clone(),
        undo: UndoRecord {
            id: journal.id.clone(),
            root: journal.root.clone(),
            backup_dir: journal.dir(journal_dir).join(BACKUPS),
            files: journal
                .entries
                .iter()
                .map(|e| UndoFile {
                    path: e.path.clone(),
                    before: e.before.clone(),
                    after: e.after.clone(),
                    backup: e.backup.clone(),
                })
                .collect(),
            created_dirs: journal.created_dirs.clone(),
        },
    }
}

/// Paths whose current state is not what the op expects.
fn conflicts(root: &Path, ops: &[Op]) -> Result<Vec<String>, ApplyError> {
    let mut out = Vec::new();
    for op in ops {
        journal::check_parents(root, &op.path)?;
        let target = root.join(&op.path);
        let ok = match &op.expect {
            None => fs::symlink_metadata(&target).is_err_and(|e| fsutil::is_not_found(&e)),
            Some(sha) => fsutil::hash_file(&target).is_ok_and(|(h, _)| &h == sha),
        };
        if !ok {
            out.push(op.path.clone());
        }
    }
    Ok(out)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates `journal_dir/{id}/backups` with a fresh id.
fn new_journal_dir(journal_dir: &Path) -> Result<String, ApplyError> {
    let err = |e| ApplyError::io(format!("journal dir {}", journal_dir.display()), e);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(journal_dir)
        .map_err(err)?;
    loop {
        let id = format!(
            "{:x}-{:x}-{:x}",
            Timestamp::now().as_micros(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        match fs::DirBuilder::new()
            .mode(0o700)
            .create(journal_dir.join(&id))
        {
            Ok(()) => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(journal_dir.join(&id).join(BACKUPS))
                    .map_err(err)?;
                return Ok(id);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err(e)),
        }
    }
}

/// Nearest existing directory above `rel` (uid, gid, mode).
fn parent_owner(root: &Path, rel: &str) -> (u32, u32, u32) {
    let mut p = root.join(rel);
    while let Some(parent) = p.parent() {
        if let Ok(m) = fs::symlink_metadata(parent)
            && m.is_dir()
        {
            return (m.uid(), m.gid(), m.mode() & 0o777);
        }
        p = parent.to_path_buf();
    }
    (0, 0, 0o755)
}

fn execute(
    root: &Path,
    journal_dir: &Path,
    ops: Vec<Op>,
    fault: Option<usize>,
) -> Result<Journal, ApplyError> {
    let conflicted = conflicts(root, &ops)?;
    if !conflicted.is_empty() {
        return Err(ApplyError::Conflict { paths: conflicted });
    }
    let id = new_journal_dir(journal_dir)?;
    let jdir = journal_dir.join(&id);
    let mut written = None;
    match prepare(root, journal_dir, &id, &ops, &mut written) {
        Ok(()) => {}
        Err(e) => {
            match written {
                Some(mut j) => {
                    if let Err(rb) = j.rollback(journal_dir) {
                        tracing::error!(error = %rb, id, "rollback failed; recovery at start will retry");
                    }
                }
                None => {
                    let _ = fs::remove_dir_all(&jdir);
                }
            }
            return Err(e);
        }
    }
    let Some(mut journal) = written else {
        return Err(ApplyError::Invalid("journal missing after prepare".into()));
    };
    if let Err(e) = journal.finish(journal_dir, fault) {
        if !matches!(e, ApplyError::InjectedFault(_))
            && let Err(rb) = journal.rollback(journal_dir)
        {
            tracing::error!(error = %rb, id, "rollback failed; recovery at start will retry");
        }
        return Err(e);
    }
    Ok(journal)
}

/// Backups, journal, directories and staged files: everything up to the
/// first rename. `written` holds the journal once it is on disk, so the
/// caller can roll back whatever was staged.
fn prepare(
    root: &Path,
    journal_dir: &Path,
    id: &str,
    ops: &[Op],
    written: &mut Option<Journal>,
) -> Result<(), ApplyError> {
    let backups = journal_dir.join(id).join(BACKUPS);
    let mut entries = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let target = root.join(&op.path);
        let (before, backup) = match &op.expect {
            Some(sha) => {
                let name = i.to_string();
                let fact = backup_file(&target, &backups.join(&name), &op.path)?;
                if &fact.sha256 != sha {
                    // Changed between the check and the backup.
                    return Err(ApplyError::Conflict {
                        paths: vec![op.path.clone()],
                    });
                }
                (Some(fact), Some(name))
            }
            None => (None, None),
        };
        let after = match &op.content {
            None => None,
            Some(src) => {
                let size = fs::symlink_metadata(&src.file)
                    .map(|m| m.len())
                    .unwrap_or(0);
                let (uid, gid) = match src.owner {
                    Owner::Keep { uid, gid } => (uid, gid),
                    Owner::Parent => {
                        let (u, g, _) = parent_owner(root, &op.path);
                        (u, g)
                    }
                };
                Some(FileFact {
                    sha256: src.sha256.clone(),
                    size,
                    mode: src.mode,
                    uid,
                    gid,
                })
            }
        };
        entries.push(Entry {
            path: op.path.clone(),
            staged: op
                .content
                .as_ref()
                .map(|_| journal::side_name(&op.path, &format!("silas-apply-{id}"))),
            backup,
            before,
            after,
        });
    }
    let journal = Journal {
        version: 1,
        id: id.to_owned(),
        root: root.to_path_buf(),
        state: JournalState::Staging,
        created_dirs: Vec::new(),
        entries,
    };
    journal.write(journal_dir)?;
    let journal = written.insert(journal);
    stage(journal, journal_dir, ops)?;
    journal.state = JournalState::Prepared;
    if let Err(e) = journal.write(journal_dir) {
        journal.state = JournalState::Staging;
        return Err(e);
    }
    Ok(())
}

fn backup_file(target: &Path, backup: &Path, rel: &str) -> Result<FileFact, ApplyError> {
    let err = |e| ApplyError::io(format!("back up {rel}"), e);
    let mut from = fsutil::open_regular(target).map_err(err)?;
    let meta = from.metadata().map_err(err)?;
    let mut to = fsutil::create_new(backup, 0o600).map_err(err)?;
    let (sha, _) = fsutil::copy_hashed(&mut from, &mut to).map_err(err)?;
    to.sync_all().map_err(err)?;
    Ok(fsutil::fact(sha, &meta))
}

fn stage(journal: &mut Journal, journal_dir: &Path, ops: &[Op]) -> Result<(), ApplyError> {
    let root = journal.root.clone();
    // New directories first, recorded so a rollback removes them.
    for op in ops.iter().filter(|o| o.expect.is_none()) {
        let (uid, gid, mode) = parent_owner(&root, &op.path);
        let created = fsutil::ensure_parents(&root, &op.path, mode)
            .map_err(|e| ApplyError::io(format!("create parents of {}", op.path), e))?;
        for d in created {
            let _ = std::os::unix::fs::chown(root.join(&d), Some(uid), Some(gid));
            journal.created_dirs.push(d);
        }
    }
    if !journal.created_dirs.is_empty() {
        journal.write(journal_dir)?;
    }
    for (op, entry) in ops.iter().zip(journal.entries.clone()) {
        let (Some(src), Some(staged), Some(after)) = (
            &op.content,
            journal.staged_path(&entry),
            entry.after.as_ref(),
        ) else {
            continue;
        };
        let err = |e| ApplyError::io(format!("stage {}", op.path), e);
        let mut from = fsutil::open_regular(&src.file).map_err(|_| ApplyError::ContentChanged {
            path: op.path.clone(),
        })?;
        let mut to = fsutil::create_new(&staged, 0o600).map_err(err)?;
        let (sha, _) = fsutil::copy_hashed(&mut from, &mut to).map_err(err)?;
        if sha != src.sha256 {
            return Err(ApplyError::ContentChanged {
                path: op.path.clone(),
            });
        }
        journal::set_mode_owner(&to, after).map_err(err)?;
        to.sync_all().map_err(err)?;
    }
    Ok(())
}
