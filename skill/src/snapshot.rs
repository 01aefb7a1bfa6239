//! One read of a skill folder: every regular file's relative path, mode and
//! bytes, and the content hash over exactly those bytes. Symbolic links and
//! special files are never followed or read; they are refusals. The
//! validator checks the same bytes it hashes, so a report's hash is the
//! hash of what was checked.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::report::Rule;

/// More files than any sane skill has.
pub const MAX_FILES: usize = 1000;
/// Total bytes read from one skill (all files).
pub const MAX_BYTES: u64 = 32 * 1024 * 1024;

/// One regular file of a skill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// Relative to the skill folder, `/`-separated, UTF-8.
    pub path: String,
    /// Permission bits (`& 0o7777`).
    pub mode: u32,
    pub bytes: Vec<u8>,
}

/// Something in the folder that cannot be part of a skill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub path: String,
    pub rule: Rule,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Sorted by path.
    pub files: Vec<FileEntry>,
    pub refusals: Vec<Refusal>,
}

impl Snapshot {
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .and_then(|i| self.files.get(i))
    }

    /// The content hash (lowercase hex SHA-256), or `None` when something
    /// was refused: a folder with a link or a device has no hash, so it can
    /// never be approved.
    pub fn content_hash(&self) -> Option<String> {
        self.refusals.is_empty().then(|| hash_files(&self.files))
    }
}

/// The deterministic content hash: a version tag, then per file in path
/// order its length-prefixed path, mode and length-prefixed bytes. Modes
/// count because an executable bit changes what a script can do.
pub fn hash_files(files: &[FileEntry]) -> String {
    let mut h = Sha256::new();
    h.update(b"silas-skill-content-v1\n");
    for f in files {
        h.update((f.path.len() as u64).to_be_bytes());
        h.update(f.path.as_bytes());
        h.update(f.mode.to_be_bytes());
        h.update((f.bytes.len() as u64).to_be_bytes());
        h.update(&f.bytes);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn relative(root: &Path, p: &Path) -> Result<String, String> {
    let rel = p.strip_prefix(root).unwrap_or(p);
    let parts: Vec<&str> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_str()
                .ok_or_else(|| rel.display().to_string())
        })
        .collect::<Result<_, _>>()?;
    let s = parts.join("/");
    if s.chars().any(char::is_control) {
        return Err(s.escape_debug().to_string());
    }
    Ok(s)
}

/// Whether a link at `link` (relative to `root`) pointing at `target`
/// resolves inside `root`, lexically.
fn link_stays_inside(root: &Path, link: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let rel_dir = link
        .parent()
        .and_then(|d| d.strip_prefix(root).ok())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut depth: i64 = rel_dir.components().count() as i64;
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

/// Read the folder. `Err` only for I/O on the folder itself; everything
/// about its contents is a file or a refusal.
pub fn take(root: &Path) -> std::io::Result<Snapshot> {
    let meta = fs::symlink_metadata(root)?;
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut snap = Snapshot::default();
    let mut total: u64 = 0;
    let mut paths: Vec<(PathBuf, fs::FileType)> = Vec::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false).min_depth(1) {
        let entry = entry.map_err(std::io::Error::other)?;
        paths.push((entry.path().to_path_buf(), entry.file_type()));
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, ft) in paths {
        let rel = match relative(root, &path) {
            Ok(r) => r,
            Err(shown) => {
                snap.refusals.push(Refusal {
                    path: shown,
                    rule: Rule::PathName,
                    message: "file names must be UTF-8 without control characters".into(),
                });
                continue;
            }
        };
        if ft.is_dir() {
            continue;
        }
        if ft.is_symlink() {
            let target = fs::read_link(&path).unwrap_or_default();
            let where_to = if link_stays_inside(root, &path, &target) {
                "inside the skill"
            } else {
                "outside the skill"
            };
            snap.refusals.push(Refusal {
                path: rel,
                rule: Rule::Symlink,
                message: format!(
                    "symbolic link to {} ({where_to}); skills may not contain links",
                    target.display()
                ),
            });
            continue;
        }
        if !ft.is_file() {
            snap.refusals.push(Refusal {
                path: rel,
                rule: Rule::SpecialFile,
                message: "not a regular file (FIFO, socket or device)".into(),
            });
            continue;
        }
        if snap.files.len() >= MAX_FILES {
            snap.refusals.push(Refusal {
                path: rel,
                rule: Rule::TooLarge,
                message: format!("more than {MAX_FILES} files"),
            });
            break;
        }
        // O_NOFOLLOW: a file replaced by a link after the walk is an error,
        // not a read through the link.
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        let fmeta = file.metadata()?;
        if !fmeta.is_file() {
            snap.refusals.push(Refusal {
                path: rel,
                rule: Rule::SpecialFile,
                message: "changed into a non-regular file while being read".into(),
            });
            continue;
        }
        let remaining = MAX_BYTES.saturating_sub(total);
        let mut bytes = Vec::new();
        (&mut file).take(remaining + 1).read_to_end(&mut bytes)?;
        total += bytes.len() as u64;
        if total > MAX_BYTES {
            snap.refusals.push(Refusal {
                path: rel,
                rule: Rule::TooLarge,
                message: format!("the skill holds more than {MAX_BYTES} bytes"),
            });
            break;
        }
        snap.files.push(FileEntry {
            path: rel,
            mode: fmeta.mode() & 0o7777,
            bytes,
        });
    }
    snap.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn skill() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("scripts")).unwrap();
        fs::write(d.path().join("SKILL.md"), "---\nname: x\n---\n").unwrap();
        fs::write(d.path().join("scripts/a.py"), "print(1)\n").unwrap();
        d
    }

    #[test]
    fn the_hash_covers_paths_bytes_and_modes_and_nothing_else() {
        let d = skill();
        let h1 = take(d.path()).unwrap().content_hash().unwrap();
        // Same content, read again (mtime changes do not matter).
        assert_eq!(take(d.path()).unwrap().content_hash().unwrap(), h1);
        let script = d.path().join("scripts/a.py");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let h2 = take(d.path()).unwrap().content_hash().unwrap();
        assert_ne!(h1, h2, "a mode change changes the hash");
        fs::write(&script, "print(2)\n").unwrap();
        let h3 = take(d.path()).unwrap().content_hash().unwrap();
        assert_ne!(h2, h3, "a byte change changes the hash");
        fs::rename(&script, d.path().join("scripts/b.py")).unwrap();
        assert_ne!(take(d.path()).unwrap().content_hash().unwrap(), h3);
        // Empty directories are not content.
        fs::create_dir(d.path().join("assets")).unwrap();
        let h4 = take(d.path()).unwrap().content_hash().unwrap();
        fs::remove_dir(d.path().join("assets")).unwrap();
        assert_eq!(take(d.path()).unwrap().content_hash().unwrap(), h4);
    }

    #[test]
    fn links_are_refused_and_leave_no_hash() {
        let d = skill();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("scripts/pw")).unwrap();
        std::os::unix::fs::symlink("a.py", d.path().join("scripts/alias.py")).unwrap();
        let s = take(d.path()).unwrap();
        assert_eq!(s.content_hash(), None);
        let msgs: Vec<(&str, &str)> = s
            .refusals
            .iter()
            .map(|r| (r.path.as_str(), r.message.as_str()))
            .collect();
        assert_eq!(s.refusals.len(), 2, "{msgs:?}");
        assert!(s.refusals.iter().all(|r| r.rule == Rule::Symlink));
        assert!(msgs.contains(&(
            "scripts/pw",
            "symbolic link to /etc/passwd (outside the skill); skills may not contain links"
        )));
        assert!(
            msgs.iter()
                .any(|(p, m)| *p == "scripts/alias.py" && m.contains("inside"))
        );
        // The link's target was never read.
        assert!(s.file("scripts/pw").is_none());
    }

    #[test]
    fn a_linked_directory_is_not_walked() {
        let d = skill();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("references")).unwrap();
        let s = take(d.path()).unwrap();
        assert_eq!(s.refusals.len(), 1);
        assert!(s.files.iter().all(|f| !f.path.contains("secret")));
    }
}
