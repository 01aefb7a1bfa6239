//! Small filesystem helpers shared by every module: no-follow opens, hashing
//! copies, safe relative paths, parent directories that are never symlinks.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path};

use rustix::fs::OFlags;
use sha2::{Digest, Sha256};
use silas_core::canonical::hex_lower;

use crate::FileFact;

/// Opens a regular file for reading without following a final symlink and
/// without blocking on a FIFO; anything but a regular file is an error.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Creates a new file (never an existing one, never through a symlink).
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags((OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32)
        .open(path)
}

/// Streams `src` into `dst`, returning the hex SHA-256 and byte count.
pub(crate) fn copy_hashed(src: &mut File, dst: &mut File) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok((hex_lower(&hasher.finalize()), total))
}

/// Hashes a regular file (no symlink follow) and returns it with its metadata.
pub(crate) fn hash_file(path: &Path) -> io::Result<(String, Metadata)> {
    let mut file = open_regular(path)?;
    let meta = file.metadata()?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok((hex_lower(&hasher.finalize()), meta))
}

pub(crate) fn fact(sha256: String, meta: &Metadata) -> FileFact {
    FileFact {
        sha256,
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }
}

/// A relative path as the `/`-separated UTF-8 string used everywhere in the
/// typed data; `None` for non-UTF-8 names or non-normal components.
pub(crate) fn rel_string(rel: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?),
            _ => return None,
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

/// Validates a relative path taken from typed data before it is joined to a
/// real root: normal components only, and never inside a `.git` directory
/// (writing there could plant hooks).
pub(crate) fn check_rel(rel: &str) -> Result<(), String> {
    if rel.is_empty() || rel.starts_with('/') || rel.contains('\0') {
        return Err("not a relative path".into());
    }
    for part in rel.split('/') {
        match part {
            "" | "." | ".." => return Err("path escapes or is not normal".into()),
            ".git" => return Err("inside a .git directory".into()),
            _ => {}
        }
    }
    Ok(())
}

/// Parent directories of `rel` under `root`: `Ok(true)` when all exist as real
/// directories, `Ok(false)` when one is missing, `Err` when one is a symlink
/// or not a directory (writing there would leave the tree).
pub(crate) fn parents_state(root: &Path, rel: &str) -> Result<bool, String> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut cur = root.to_path_buf();
    for part in &parts[..parts.len().saturating_sub(1)] {
        cur.push(part);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("{} is a symlink", cur.display()));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory", cur.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{}: {e}", cur.display())),
        }
    }
    Ok(true)
}

/// Creates the missing parent directories of `rel` under `root`, refusing a
/// symlink or file on the way. Returns the relative directories it created,
/// shallowest first.
pub(crate) fn ensure_parents(root: &Path, rel: &str, mode: u32) -> io::Result<Vec<String>> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut created = Vec::new();
    let mut cur = root.to_path_buf();
    let mut rel_cur = String::new();
    for part in &parts[..parts.len().saturating_sub(1)] {
        cur.push(part);
        if !rel_cur.is_empty() {
            rel_cur.push('/');
        }
        rel_cur.push_str(part);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {}
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{rel_cur} is a symlink or not a directory"
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), mode)
                    .create(&cur)?;
                created.push(rel_cur.clone());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Whether a symlink at `link_rel` with `target` stays inside the tree when
/// resolved lexically (relative target, `..` never climbing above the root).
pub(crate) fn link_lexically_inside(link_rel: &str, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut stack: Vec<String> = link_rel.split('/').map(str::to_owned).collect();
    stack.pop();
    for c in target.components() {
        match c {
            Component::Normal(s) => match s.to_str() {
                Some(s) => stack.push(s.to_owned()),
                None => return false,
            },
            Component::CurDir => {}
            Component::ParentDir => {
                if stack.pop().is_none() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

pub(crate) fn fsync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

pub(crate) fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// Removes whatever non-directory entry is at `path` (file, symlink, special);
/// absent is fine.
pub(crate) fn remove_entry(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_checks() {
        assert!(check_rel("a/b.py").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "a/../../x",
            "./a",
            "a//b",
            ".git/hooks/pre-commit",
        ] {
            assert!(check_rel(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lexical_links() {
        assert!(link_lexically_inside("a/l", Path::new("../b")));
        assert!(link_lexically_inside("l", Path::new("docs/README")));
        assert!(!link_lexically_inside("l", Path::new("../x")));
        assert!(!link_lexically_inside("a/l", Path::new("../../x")));
        assert!(!link_lexically_inside("l", Path::new("/etc/passwd")));
    }
}
