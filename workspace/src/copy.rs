//! Taking the executor's copy of a workspace and the [`Snapshot`] manifest.
//!
//! A git repository is cloned (see `gitcopy`) and overlaid with its
//! uncommitted state; anything else (or any repo when git is missing) is
//! walked honouring `.gitignore`. Either way symlinks are never followed: an
//! in-tree relative link is recreated as a link, any other is skipped and
//! listed; special files are skipped.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;

use crate::error::WorkspaceError;
use crate::fsutil;
use crate::{FileFact, Snapshot, gitcopy};

/// Bounds on a copy; exceeding either fails the copy and removes `dest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyLimits {
    pub max_bytes: u64,
    pub max_files: u64,
}

impl Default for CopyLimits {
    fn default() -> Self {
        CopyLimits {
            max_bytes: 512 * 1024 * 1024,
            max_files: 100_000,
        }
    }
}

/// Copies the workspace at `src` into `dest` (which must not exist; created
/// 0700) and returns the manifest of the real files copied.
pub fn take(src: &Path, dest: &Path, limits: &CopyLimits) -> Result<Snapshot, WorkspaceError> {
    take_as(src, dest, limits, true)
}

/// Like [`take`], but never through git, even when `src` holds a `.git`:
/// for copying a tree the executor wrote (its `.git/config` is the
/// executor's, so no git command may read it). `.git` is left out.
pub fn take_plain(
    src: &Path,
    dest: &Path,
    limits: &CopyLimits,
) -> Result<Snapshot, WorkspaceError> {
    take_as(src, dest, limits, false)
}

fn take_as(
    src: &Path,
    dest: &Path,
    limits: &CopyLimits,
    use_git: bool,
) -> Result<Snapshot, WorkspaceError> {
    let source = fs::canonicalize(src)
        .map_err(|e| WorkspaceError::io(format!("workspace {}", src.display()), e))?;
    if !source.is_dir() {
        return Err(WorkspaceError::NotADirectory { path: source });
    }
    if fs::symlink_metadata(dest).is_ok() {
        return Err(WorkspaceError::DestinationExists {
            path: dest.to_path_buf(),
        });
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .map_err(|e| WorkspaceError::io(format!("create {}", dest.display()), e))?;
    let mut copier = Copier::new(source.clone(), dest.to_path_buf(), *limits);
    let is_repo = use_git && fs::symlink_metadata(source.join(".git")).is_ok_and(|m| m.is_dir());
    let outcome = match (is_repo, gitcopy::git_binary()) {
        (true, Some(git)) => gitcopy::take(&git, &mut copier),
        (true, None) => {
            tracing::info!("git not found: workspace copied without history");
            plain(&mut copier)
        }
        _ => plain(&mut copier),
    };
    if let Err(e) = outcome {
        // A failed copy leaves nothing behind for the executor to pick up.
        let _ = fs::remove_dir_all(dest);
        return Err(e);
    }
    Ok(Snapshot {
        source,
        files: copier.facts,
        skipped: copier.skipped,
        taken_at: Timestamp::now(),
    })
}

/// A `.gitignore`-aware walk of the whole tree (hidden files included, `.git`
/// excluded, the owner's global excludes not consulted).
fn plain(copier: &mut Copier) -> Result<(), WorkspaceError> {
    let walker = ignore::WalkBuilder::new(&copier.src)
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_global(false)
        .git_exclude(false)
        .git_ignore(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "workspace entry not readable; skipped");
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(&copier.src)
            .unwrap_or(entry.path());
        match fsutil::rel_string(rel) {
            Some(rel) => copier.copy_entry(&rel)?,
            None => copier.skipped.push(rel.to_string_lossy().into_owned()),
        }
    }
    Ok(())
}

/// Copies single entries from the real tree into the copy, counting against
/// the limits and recording facts.
pub(crate) struct Copier {
    pub(crate) src: PathBuf,
    pub(crate) dest: PathBuf,
    limits: CopyLimits,
    bytes: u64,
    files: u64,
    pub(crate) facts: BTreeMap<String, FileFact>,
    pub(crate) skipped: Vec<String>,
    /// In-tree symlinks recreated in the copy.
    pub(crate) links: Vec<String>,
}

impl Copier {
    pub(crate) fn new(src: PathBuf, dest: PathBuf, limits: CopyLimits) -> Self {
        Copier {
            src,
            dest,
            limits,
            bytes: 0,
            files: 0,
            facts: BTreeMap::new(),
            skipped: Vec::new(),
            links: Vec::new(),
        }
    }

    pub(crate) fn reset_counts(&mut self) {
        self.files = 0;
        self.bytes = 0;
    }

    /// Counts `files`/`bytes` against the limits (used by the git pre-check
    /// and for the clone's `.git`).
    pub(crate) fn charge(&mut self, files: u64, bytes: u64) -> Result<(), WorkspaceError> {
        self.files += files;
        self.bytes += bytes;
        if self.files > self.limits.max_files {
            return Err(WorkspaceError::TooManyFiles {
                files: self.files,
                limit: self.limits.max_files,
            });
        }
        if self.bytes > self.limits.max_bytes {
            return Err(WorkspaceError::TooLarge {
                bytes: self.bytes,
                limit: self.limits.max_bytes,
            });
        }
        Ok(())
    }

    /// Copies the real entry at `rel` (whatever is at the copy's `rel` is
    /// replaced). Directories are created; other types follow the policy.
    pub(crate) fn copy_entry(&mut self, rel: &str) -> Result<(), WorkspaceError> {
        let real = self.src.join(rel);
        let meta = match fs::symlink_metadata(&real) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(path = rel, error = %e, "workspace entry vanished; skipped");
                self.skipped.push(rel.to_owned());
                return Ok(());
            }
        };
        let ft = meta.file_type();
        let target = self.dest.join(rel);
        if ft.is_dir() {
            return self.make_dir(rel);
        }
        if !(ft.is_file() || ft.is_symlink()) {
            self.skipped.push(rel.to_owned());
            return Ok(());
        }
        fsutil::ensure_parents(&self.dest, rel, 0o700)
            .map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))?;
        fsutil::remove_entry(&target).map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))?;
        if ft.is_symlink() {
            return self.copy_link(rel, &real, &target);
        }
        self.charge(1, meta.len())?;
        let mut from = match fsutil::open_regular(&real) {
            Ok(f) => f,
            Err(e) => {
                // Raced into a symlink/FIFO, or unreadable: never followed, listed.
                tracing::warn!(path = rel, error = %e, "workspace file not copied");
                self.skipped.push(rel.to_owned());
                return Ok(());
            }
        };
        let real_meta = from
            .metadata()
            .map_err(|e| WorkspaceError::io(format!("stat {rel}"), e))?;
        let mut to = fsutil::create_new(&target, 0o600)
            .map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))?;
        let (sha, size) = fsutil::copy_hashed(&mut from, &mut to)
            .map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))?;
        if size > meta.len() {
            // Grew while copying: charge the difference too.
            self.charge(0, size - meta.len())?;
        }
        let fact = fsutil::fact(sha, &real_meta);
        // The copy keeps the permission bits, never setuid/setgid/sticky.
        to.set_permissions(fs::Permissions::from_mode(fact.mode & 0o777))
            .map_err(|e| WorkspaceError::io(format!("chmod {rel}"), e))?;
        self.facts.insert(rel.to_owned(), FileFact { size, ..fact });
        Ok(())
    }

    fn make_dir(&mut self, rel: &str) -> Result<(), WorkspaceError> {
        let target = self.dest.join(rel);
        match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => Ok(()),
            _ => {
                fsutil::remove_entry(&target)
                    .map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))?;
                fsutil::ensure_parents(&self.dest, &format!("{rel}/x"), 0o700)
                    .map(|_| ())
                    .map_err(|e| WorkspaceError::io(format!("copy {rel}"), e))
            }
        }
    }

    /// Recreates an in-tree relative link; anything else is listed as skipped.
    fn copy_link(&mut self, rel: &str, real: &Path, target: &Path) -> Result<(), WorkspaceError> {
        let link =
            fs::read_link(real).map_err(|e| WorkspaceError::io(format!("readlink {rel}"), e))?;
        // Lexically inside AND resolving inside on the real tree: a chain such
        // as `b -> .` plus `a -> b/../x` passes the first check only.
        let resolves_inside =
            fs::canonicalize(real).is_ok_and(|p| p.starts_with(&self.src) && p != self.src);
        if fsutil::link_lexically_inside(rel, &link) && resolves_inside {
            std::os::unix::fs::symlink(&link, target)
                .map_err(|e| WorkspaceError::io(format!("symlink {rel}"), e))?;
            self.links.push(rel.to_owned());
        } else {
            tracing::info!(path = rel, "symlink leaving the workspace not copied");
            self.skipped.push(rel.to_owned());
        }
        Ok(())
    }
}
