//! The executor's result against the untouched copy: a typed change set (what
//! the "apply changes" card shows and what apply writes) and a bounded,
//! git-style unified diff.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};
use similar::{ChangeTag, TextDiff};

use crate::Snapshot;
use crate::error::WorkspaceError;
use crate::fsutil;
use crate::protect::Protected;

/// Upper bound of [`ChangeSet::unified_diff`].
pub const MAX_DIFF_BYTES: usize = 1024 * 1024;
/// Bytes looked at to decide whether a file is binary (as git does).
const BINARY_SNIFF: usize = 8000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    pub kind: ChangeKind,
    pub added_lines: u64,
    pub removed_lines: u64,
    pub binary: bool,
    /// Permission bits of the result's file (the original's for a deletion).
    pub mode: u32,
    /// A protected file (test, check config): the card flags the edit.
    pub protected: bool,
    /// Content hash in the untouched copy (`None` for an added file).
    pub before_sha256: Option<String>,
    /// Content hash in the result (`None` for a deletion): apply writes only
    /// these exact bytes.
    pub after_sha256: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RefusalReason {
    /// A symlink whose target leaves the workspace.
    SymlinkOutside {
        target: String,
    },
    /// Any other new or changed symlink: links are not applied.
    Symlink {
        target: String,
    },
    /// A file became a directory or link, or a directory became something else.
    TypeChanged,
    SpecialFile,
    NotUtf8,
    /// A new name with a control character (an escape sequence, a newline)
    /// or an invisible one (a bidi override, a zero-width space): written
    /// into the owner's tree it would act on their terminal at the next
    /// `ls`, break line-based tools, or read as another name.
    ControlCharacter,
    /// A file named `.git` (a `gitdir:` pointer that makes a subdirectory
    /// another repository, with its own config and hooks): git metadata is
    /// never written, so the card says so before the owner decides.
    GitMetadata,
    /// A file inside another version-control system's metadata (`.hg`,
    /// `.svn`, `.bzr`, `_darcs`, `.jj`): its config can name hooks that run
    /// on the owner's next command there, outside any sandbox.
    VcsMetadata,
    /// Compiled Python (`__pycache__/`, `*.pyc`, `*.pyo`, extension modules
    /// `*.so`/`*.pyd`): code no diff shows, which Python may run in place
    /// of the reviewed source.
    CompiledPython,
}

/// Version-control metadata directories besides `.git` (which the walk
/// skips: the copy's own repository).
const VCS_DIRS: &[&str] = &[".hg", ".svn", ".bzr", "_darcs", ".jj"];

/// Why a new or changed file at `rel` is never applied, whatever it holds.
fn never_applied(rel: &str) -> Option<RefusalReason> {
    let dirs = rel.rsplit_once('/').map_or("", |(d, _)| d);
    if dirs.split('/').any(|d| VCS_DIRS.contains(&d)) {
        Some(RefusalReason::VcsMetadata)
    } else if crate::shadow::is_compiled_python(rel) {
        Some(RefusalReason::CompiledPython)
    } else {
        None
    }
}

/// A character a new file name may not have: controls (newline and tab
/// too), bidi overrides and isolates, and the invisible ones — what the
/// terminal escapes.
fn unsafe_name_char(c: char) -> bool {
    c.is_control() || silas_core::terminal::unsafe_char(c)
}

/// Something in the result that is reported but never applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub path: String,
    #[serde(flatten)]
    pub reason: RefusalReason,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    pub files: Vec<FileChange>,
    pub refused: Vec<Refusal>,
    /// Every text change with git-style headers, at most [`MAX_DIFF_BYTES`].
    pub unified_diff: String,
    pub diff_truncated: bool,
    pub total_added: u64,
    pub total_removed: u64,
}

impl ChangeSet {
    /// Protected files the executor changed (the card's warning).
    pub fn protected_edits(&self) -> Vec<&str> {
        self.files
            .iter()
            .filter(|f| f.protected)
            .map(|f| f.path.as_str())
            .collect()
    }
}

/// The base's `.gitignore` rules, deepest directory first: new build
/// artefacts in the result (ignored in the real workspace) are not changes.
struct BaseIgnores(Vec<(String, Gitignore)>);

impl BaseIgnores {
    fn load(snapshot: &Snapshot, base_copy: &Path) -> Self {
        let mut all = Vec::new();
        for rel in snapshot.files.keys() {
            let dir = match rel.strip_suffix(".gitignore") {
                Some("") => String::new(),
                Some(d) if d.ends_with('/') => d.trim_end_matches('/').to_owned(),
                _ => continue,
            };
            let mut b = GitignoreBuilder::new(base_copy.join(&dir));
            if b.add(base_copy.join(rel)).is_some() {
                continue;
            }
            if let Ok(gi) = b.build() {
                all.push((dir, gi));
            }
        }
        all.sort_by_key(|(d, _)| {
            std::cmp::Reverse(d.matches('/').count() + usize::from(!d.is_empty()))
        });
        BaseIgnores(all)
    }

    fn ignored(&self, base_copy: &Path, rel: &str) -> bool {
        for (dir, gi) in &self.0 {
            if !dir.is_empty() && !rel.starts_with(&format!("{dir}/")) {
                continue;
            }
            let m = gi.matched_path_or_any_parents(base_copy.join(rel), false);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// Compares the untouched copy with the executor's result. Neither tree's
/// symlinks are followed; `.git` directories are ignored.
pub fn changes(
    snapshot: &Snapshot,
    base_copy: &Path,
    result: &Path,
    protected: &Protected,
) -> Result<ChangeSet, WorkspaceError> {
    let ignores = BaseIgnores::load(snapshot, base_copy);
    let mut files = Vec::new();
    let mut refused = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut walker = walkdir::WalkDir::new(result)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter();
    while let Some(entry) = walker.next() {
        let entry = entry
            .map_err(|e| WorkspaceError::io("walk result", std::io::Error::other(e.to_string())))?;
        if entry.depth() == 0 {
            continue;
        }
        let ft = entry.file_type();
        if ft.is_dir() && entry.file_name() == ".git" {
            walker.skip_current_dir();
            continue;
        }
        if entry.file_name() == ".git" {
            refused.push(Refusal {
                path: entry
                    .path()
                    .strip_prefix(result)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                reason: RefusalReason::GitMetadata,
            });
            continue;
        }
        let Some(rel) = entry
            .path()
            .strip_prefix(result)
            .ok()
            .and_then(fsutil::rel_string)
        else {
            refused.push(Refusal {
                path: entry.path().to_string_lossy().into_owned(),
                reason: RefusalReason::NotUtf8,
            });
            if ft.is_dir() {
                walker.skip_current_dir();
            }
            continue;
        };
        let in_base = snapshot.files.get(&rel);
        if in_base.is_none() && rel.chars().any(unsafe_name_char) {
            // Only new names: one the owner's tree already has is theirs.
            refused.push(Refusal {
                path: rel,
                reason: RefusalReason::ControlCharacter,
            });
            if ft.is_dir() {
                walker.skip_current_dir();
            }
            continue;
        }
        if ft.is_dir() {
            if in_base.is_some() {
                seen.insert(rel.clone());
                refused.push(Refusal {
                    path: rel,
                    reason: RefusalReason::TypeChanged,
                });
                walker.skip_current_dir();
            }
            continue;
        }
        if ft.is_symlink() {
            if in_base.is_some() {
                seen.insert(rel.clone());
            }
            if let Some(r) = symlink_refusal(base_copy, entry.path(), &rel) {
                refused.push(r);
            }
            continue;
        }
        if !ft.is_file() {
            refused.push(Refusal {
                path: rel,
                reason: RefusalReason::SpecialFile,
            });
            continue;
        }
        let (after_sha, meta) = fsutil::hash_file(entry.path())
            .map_err(|e| WorkspaceError::io(format!("read result {rel}"), e))?;
        // Group/other write and setuid/setgid/sticky never come from the
        // executor: the card shows, and apply writes, at most rwxr-xr-x.
        let mode = meta.permissions().mode() & 0o755;
        match in_base {
            Some(fact) => {
                seen.insert(rel.clone());
                if fact.sha256 == after_sha {
                    continue;
                }
                if let Some(reason) = never_applied(&rel) {
                    refused.push(Refusal { path: rel, reason });
                    continue;
                }
                files.push(FileChange {
                    path: rel,
                    kind: ChangeKind::Modified,
                    added_lines: 0,
                    removed_lines: 0,
                    binary: false,
                    mode,
                    protected: false,
                    before_sha256: Some(fact.sha256.clone()),
                    after_sha256: Some(after_sha),
                });
            }
            None => {
                let base_is_link = fs::symlink_metadata(base_copy.join(&rel))
                    .is_ok_and(|m| m.file_type().is_symlink());
                if base_is_link {
                    // An in-tree link of the base replaced by a file: links
                    // are not applied, so neither is this.
                    refused.push(Refusal {
                        path: rel,
                        reason: RefusalReason::TypeChanged,
                    });
                    continue;
                }
                if ignores.ignored(base_copy, &rel) {
                    // Ignored in the workspace (build output, caches).
                    continue;
                }
                if let Some(reason) = never_applied(&rel) {
                    refused.push(Refusal { path: rel, reason });
                    continue;
                }
                files.push(FileChange {
                    path: rel,
                    kind: ChangeKind::Added,
                    added_lines: 0,
                    removed_lines: 0,
                    binary: false,
                    mode,
                    protected: false,
                    before_sha256: None,
                    after_sha256: Some(after_sha),
                });
            }
        }
    }
    for (rel, fact) in &snapshot.files {
        if seen.contains(rel) {
            continue;
        }
        if fsutil::parents_state(result, rel).is_err() {
            // A parent became a link or file: not a deletion Silas will apply.
            refused.push(Refusal {
                path: rel.clone(),
                reason: RefusalReason::TypeChanged,
            });
            continue;
        }
        if never_applied(rel) == Some(RefusalReason::VcsMetadata) {
            refused.push(Refusal {
                path: rel.clone(),
                reason: RefusalReason::VcsMetadata,
            });
            continue;
        }
        files.push(FileChange {
            path: rel.clone(),
            kind: ChangeKind::Deleted,
            added_lines: 0,
            removed_lines: 0,
            binary: false,
            mode: fact.mode & 0o777,
            protected: false,
            before_sha256: Some(fact.sha256.clone()),
            after_sha256: None,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = DiffWriter::default();
    for change in &mut files {
        // A new module shadowing what the checks import counts as a
        // check-defining edit too (it was removed for verification).
        change.protected = protected.is_protected(&change.path)
            || (change.kind == ChangeKind::Added
                && protected.shadows(&change.path, |f| snapshot.files.contains_key(f)));
        let old = match change.kind {
            ChangeKind::Added => Vec::new(),
            _ => read(&base_copy.join(&change.path), &change.path)?,
        };
        let new = match change.kind {
            ChangeKind::Deleted => Vec::new(),
            _ => read(&result.join(&change.path), &change.path)?,
        };
        out.file(change, &old, &new);
    }
    Ok(ChangeSet {
        total_added: files.iter().map(|f| f.added_lines).sum(),
        total_removed: files.iter().map(|f| f.removed_lines).sum(),
        files,
        refused,
        unified_diff: out.text,
        diff_truncated: out.truncated,
    })
}

fn symlink_refusal(base_copy: &Path, path: &Path, rel: &str) -> Option<Refusal> {
    let target: PathBuf = fs::read_link(path).unwrap_or_default();
    let base = base_copy.join(rel);
    if fs::symlink_metadata(&base).is_ok_and(|m| m.file_type().is_symlink())
        && fs::read_link(&base).ok().as_ref() == Some(&target)
    {
        return None; // unchanged in-tree link
    }
    let shown = target.to_string_lossy().into_owned();
    let reason = if fsutil::link_lexically_inside(rel, &target) {
        RefusalReason::Symlink { target: shown }
    } else {
        RefusalReason::SymlinkOutside { target: shown }
    };
    Some(Refusal {
        path: rel.to_owned(),
        reason,
    })
}

fn read(path: &Path, rel: &str) -> Result<Vec<u8>, WorkspaceError> {
    use std::io::Read;
    let mut f =
        fsutil::open_regular(path).map_err(|e| WorkspaceError::io(format!("read {rel}"), e))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)
        .map_err(|e| WorkspaceError::io(format!("read {rel}"), e))?;
    Ok(buf)
}

fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// `prefix` + `path` as a diff header names it: quoted C-style, as git
/// does, when the path holds a control character, a quote or a backslash.
/// The executor names the files; unquoted, a name with a newline in it
/// would forge header lines in the diff the owner reviews.
fn header_path(prefix: &str, path: &str) -> String {
    if !path
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return format!("{prefix}{path}");
    }
    let mut q = String::from("\"");
    q.push_str(prefix);
    for c in path.chars() {
        match c {
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    q.push_str(&format!("\\{b:03o}"));
                }
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[derive(Default)]
struct DiffWriter {
    text: String,
    truncated: bool,
}

impl DiffWriter {
    fn file(&mut self, change: &mut FileChange, old: &[u8], new: &[u8]) {
        let (a_p, b_p) = (
            header_path("a/", &change.path),
            header_path("b/", &change.path),
        );
        let mut chunk = format!("diff --git {a_p} {b_p}\n");
        match change.kind {
            ChangeKind::Added => chunk.push_str(&format!("new file mode 100{:o}\n", change.mode)),
            ChangeKind::Deleted => {
                chunk.push_str(&format!("deleted file mode 100{:o}\n", change.mode))
            }
            ChangeKind::Modified => {}
        }
        let (a, b) = match change.kind {
            ChangeKind::Added => ("/dev/null".to_owned(), b_p),
            ChangeKind::Deleted => (a_p, "/dev/null".to_owned()),
            ChangeKind::Modified => (a_p, b_p),
        };
        match (as_text(old), as_text(new)) {
            (Some(o), Some(n)) => {
                let diff = TextDiff::configure()
                    .timeout(Duration::from_secs(2))
                    .diff_lines(o, n);
                for c in diff.iter_all_changes() {
                    match c.tag() {
                        ChangeTag::Insert => change.added_lines += 1,
                        ChangeTag::Delete => change.removed_lines += 1,
                        ChangeTag::Equal => {}
                    }
                }
                chunk.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(3)
                        .header(&a, &b)
                        .to_string(),
                );
            }
            _ => {
                change.binary = true;
                chunk.push_str(&format!("Binary files {a} and {b} differ\n"));
            }
        }
        self.push(&chunk);
    }

    fn push(&mut self, chunk: &str) {
        if self.truncated {
            return;
        }
        if self.text.len() + chunk.len() <= MAX_DIFF_BYTES {
            self.text.push_str(chunk);
            return;
        }
        // Cut at the last whole line that fits, then say so.
        let room = MAX_DIFF_BYTES.saturating_sub(self.text.len());
        let mut cut = chunk[..floor_char_boundary(chunk, room)]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        cut = cut.min(chunk.len());
        self.text.push_str(&chunk[..cut]);
        self.text
            .push_str("[diff truncated: the full change is larger than 1 MiB]\n");
        self.truncated = true;
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_paths_with_control_characters_are_quoted_as_git_does() {
        assert_eq!(header_path("a/", "src/lib.rs"), "a/src/lib.rs");
        assert_eq!(header_path("b/", "ü ñ.txt"), "b/ü ñ.txt");
        assert_eq!(
            header_path("b/", "evil\nfake line.txt"),
            "\"b/evil\\nfake line.txt\""
        );
        assert_eq!(
            header_path("a/", "x\u{1b}[31m\"q\"\\"),
            "\"a/x\\033[31m\\\"q\\\"\\\\\""
        );
        for p in ["evil\nname", "t\tab", "bell\u{7}"] {
            assert!(!header_path("a/", p).chars().any(char::is_control), "{p:?}");
        }
    }

    #[test]
    fn truncation_marks_and_bounds() {
        let mut w = DiffWriter::default();
        let line = "+".repeat(99) + "\n";
        for _ in 0..(MAX_DIFF_BYTES / 1000 + 2) {
            w.push(&line.repeat(10));
        }
        assert!(w.truncated);
        assert!(w.text.len() <= MAX_DIFF_BYTES + 80);
        assert!(
            w.text
                .ends_with("[diff truncated: the full change is larger than 1 MiB]\n")
        );
    }

    #[test]
    fn binary_sniff() {
        assert!(as_text(b"a\0b").is_none());
        assert!(as_text(&[0xff, 0xfe]).is_none());
        assert_eq!(as_text(b"x\n"), Some("x\n"));
    }
}
