//! The copy of a git workspace: a local clone at HEAD (not a worktree, whose
//! gitdir the executor could reach to plant hooks) overlaid with the working
//! tree's uncommitted state.
//!
//! git runs with a hardened environment so the owner's repository config can
//! never make Silas run a program:
//! - environment cleared except `PATH` (fixed) and `HOME`; `GIT_CONFIG_NOSYSTEM=1`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_ATTR_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`,
//!   `GIT_OPTIONAL_LOCKS=0` (never writes the real repo's index),
//!   `GIT_NO_REPLACE_OBJECTS=1`, `GIT_PAGER=cat`;
//! - command-line config, which outranks the repo's own: `core.hooksPath=/dev/null`,
//!   `core.fsmonitor=false`, `protocol.allow=never` + `protocol.file.allow=always`
//!   (local clone only), `filter.lfs.{smudge,clean,process}=` and
//!   `filter.lfs.required=false`, `core.sshCommand=false`, `credential.helper=`;
//! - `clone --template=` (no hook samples), and the only commands run in the
//!   real repo are `ls-files` (no filters, no hooks) and the clone's read.
//!
//! Filters named in `.gitattributes` other than LFS have no driver: with system
//! and global config off, nothing defines one, and the clone's fresh config has
//! none either. Content is then taken byte for byte from the working tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::copy::Copier;
use crate::error::WorkspaceError;
use crate::fsutil;

const GIT_CANDIDATES: &[&str] = &["/usr/bin/git", "/usr/local/bin/git", "/bin/git"];

/// git from fixed system locations only (never a `git` earlier on a PATH).
pub(crate) fn git_binary() -> Option<PathBuf> {
    GIT_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.metadata().is_ok_and(|m| m.is_file()))
}

pub(crate) fn git(git: &Path, safe_dir: &Path) -> Command {
    let mut cmd = Command::new(git);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_PAGER", "cat")
        .env("LC_ALL", "C");
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    let safe = format!("safe.directory={}", safe_dir.display());
    for c in [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "protocol.allow=never",
        "protocol.file.allow=always",
        "filter.lfs.smudge=",
        "filter.lfs.clean=",
        "filter.lfs.process=",
        "filter.lfs.required=false",
        "core.sshCommand=false",
        "credential.helper=",
        safe.as_str(),
    ] {
        cmd.arg("-c").arg(c);
    }
    cmd.stdin(Stdio::null());
    cmd
}

pub(crate) fn run(mut cmd: Command, what: &str) -> Result<Vec<u8>, WorkspaceError> {
    let out = cmd
        .output()
        .map_err(|e| WorkspaceError::io(format!("run git {what}"), e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(WorkspaceError::Git {
            message: format!("{what}: {}", stderr.trim()),
        });
    }
    Ok(out.stdout)
}

pub(crate) fn take(git_bin: &Path, copier: &mut Copier) -> Result<(), WorkspaceError> {
    let src = copier.src.clone();
    let dest = copier.dest.clone();
    // Tracked (index) plus untracked-not-ignored: exactly the working state.
    let mut cmd = git(git_bin, &src);
    cmd.arg("-C").arg(&src).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]);
    let listing = run(cmd, "ls-files")?;
    let mut paths = BTreeSet::new();
    for raw in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        match std::str::from_utf8(raw) {
            Ok(p) if fsutil::check_rel(p).is_ok() => {
                paths.insert(p.to_owned());
            }
            _ => copier
                .skipped
                .push(String::from_utf8_lossy(raw).into_owned()),
        }
    }
    // Fail on size before cloning anything big.
    let (mut files, mut bytes) = (0u64, 0u64);
    for p in &paths {
        if let Ok(m) = std::fs::symlink_metadata(src.join(p)) {
            files += 1;
            bytes += m.len();
        }
    }
    copier.charge(files, bytes)?;
    // The pre-check is only a fast path: the real copy counts again.
    copier.reset_counts();

    let mut cmd = git(git_bin, &src);
    cmd.args(["clone", "--no-hardlinks", "--quiet", "--template="])
        .arg("--")
        .arg(&src)
        .arg(&dest);
    run(cmd, "clone")?;
    let mut cmd = git(git_bin, &dest);
    cmd.arg("-C")
        .arg(&dest)
        .args(["remote", "remove", "origin"]);
    // An empty repository has no origin to remove; not worth failing over.
    let _ = run(cmd, "remote remove");
    copier.charge(0, dir_size(&dest.join(".git")))?;

    // Clone-created symlinks are re-decided by the overlay (or removed below).
    for p in &paths {
        if fsutil::parents_state(&src, p).is_err() {
            // An indexed path under a directory since replaced by a symlink:
            // reading it would follow the link out of the workspace.
            fsutil::remove_entry(&dest.join(p))
                .map_err(|e| WorkspaceError::io(format!("remove {p}"), e))?;
            copier.skipped.push(p.clone());
            continue;
        }
        match std::fs::symlink_metadata(src.join(p)) {
            Err(e) if fsutil::is_not_found(&e) => {
                // Deleted in the working tree.
                fsutil::remove_entry(&dest.join(p))
                    .map_err(|e| WorkspaceError::io(format!("remove {p}"), e))?;
            }
            Ok(m) if m.is_dir() => copier.skipped.push(p.clone()), // submodule
            _ => copier.copy_entry(p)?,
        }
    }
    sweep(copier)
}

/// Removes from the copy every file or link that is not part of the working
/// state (staged deletions, HEAD symlinks that were skipped).
fn sweep(copier: &Copier) -> Result<(), WorkspaceError> {
    let keep: BTreeSet<&str> = copier
        .facts
        .keys()
        .map(String::as_str)
        .chain(copier.links.iter().map(String::as_str))
        .collect();
    let walker = walkdir::WalkDir::new(&copier.dest)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".git"));
    let mut doomed = Vec::new();
    for entry in walker.flatten() {
        if entry.file_type().is_dir() {
            continue;
        }
        let rel = entry.path().strip_prefix(&copier.dest).ok();
        let known = rel
            .and_then(fsutil::rel_string)
            .is_some_and(|r| keep.contains(r.as_str()));
        if !known {
            doomed.push(entry.path().to_path_buf());
        }
    }
    for p in doomed {
        fsutil::remove_entry(&p)
            .map_err(|e| WorkspaceError::io(format!("remove {}", p.display()), e))?;
    }
    Ok(())
}

fn dir_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}
