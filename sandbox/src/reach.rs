//! Can the sandbox user reach a directory? A root daemon runs commands as
//! `nobody` ([`SANDBOX_UID`]), which needs search (`x`) permission on every
//! ancestor of its work dirs. A checkout under `/root` (mode 0700) fails
//! that, and every command then dies with "cannot start /bin/sh: Permission
//! denied" — so the daemon checks this at start and places the sandbox dirs
//! elsewhere, or stops with the path that blocks them.
//!
//! The permission rule is a plain function ([`may_traverse`]); [`first_blocker`]
//! applies it to the real ancestors of a path.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::launcher::{SANDBOX_GID, SANDBOX_UID};

/// Owner, group and mode of one directory, as the kernel's permission check
/// sees them (POSIX ACLs are not consulted: a blocker an ACL would lift is
/// reported anyway, which errs on the side of a clear error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirPerm {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// Whether `uid`/`gid` (with no supplementary groups — the launcher clears
/// them) may search a directory with `perm`. Root needs no bits.
pub fn may_traverse(perm: DirPerm, uid: u32, gid: u32) -> bool {
    if uid == 0 {
        return true;
    }
    let bit = if perm.uid == uid {
        0o100
    } else if perm.gid == gid {
        0o010
    } else {
        0o001
    };
    perm.mode & bit != 0
}

/// Why the sandbox user cannot reach a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The ancestor it cannot search.
    pub dir: PathBuf,
    pub mode: u32,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (mode {:04o}) is not searchable by the sandbox user (uid {SANDBOX_UID})",
            self.dir.display(),
            self.mode & 0o7777
        )
    }
}

/// Every existing directory from `/` down to `path` (the path itself
/// included when it exists; it must be absolute), with its owner, group and
/// mode. Missing components are skipped: whoever creates them chooses their
/// mode.
pub fn ancestors(path: &Path) -> Vec<(PathBuf, DirPerm)> {
    let mut chain: Vec<(PathBuf, DirPerm)> = path
        .ancestors()
        .filter_map(|dir| {
            let meta = std::fs::metadata(dir).ok()?;
            let perm = DirPerm {
                uid: meta.uid(),
                gid: meta.gid(),
                mode: meta.mode(),
            };
            Some((dir.to_path_buf(), perm))
        })
        .collect();
    chain.reverse();
    chain
}

/// The first of [`ancestors`] that `uid`/`gid` cannot search.
pub fn first_blocker_for(path: &Path, uid: u32, gid: u32) -> Option<Blocker> {
    ancestors(path)
        .into_iter()
        .find(|(_, perm)| !may_traverse(*perm, uid, gid))
        .map(|(dir, perm)| Blocker {
            dir,
            mode: perm.mode,
        })
}

/// [`first_blocker_for`] the sandbox user a root daemon runs commands as.
pub fn first_blocker(path: &Path) -> Option<Blocker> {
    first_blocker_for(path, SANDBOX_UID, SANDBOX_GID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const U: u32 = 65534;
    const G: u32 = 65534;

    fn perm(uid: u32, gid: u32, mode: u32) -> DirPerm {
        DirPerm { uid, gid, mode }
    }

    #[test]
    fn the_class_that_applies_decides_alone() {
        // Other: only the 001 bit counts.
        assert!(may_traverse(perm(0, 0, 0o711), U, G));
        assert!(may_traverse(perm(0, 0, 0o701), U, G));
        assert!(!may_traverse(perm(0, 0, 0o770), U, G));
        assert!(!may_traverse(perm(0, 0, 0o700), U, G));
        // Group match: only 010, even when "other" would allow it.
        assert!(!may_traverse(perm(0, G, 0o701), U, G));
        assert!(may_traverse(perm(0, G, 0o710), U, G));
        // Owner match: only 100, even when group/other would allow it.
        assert!(!may_traverse(perm(U, G, 0o011), U, G));
        assert!(may_traverse(perm(U, 0, 0o700), U, G));
        // Root searches anything.
        assert!(may_traverse(perm(1, 1, 0o000), 0, 0));
    }

    #[test]
    fn the_first_unsearchable_ancestor_is_named() {
        let base = tempfile::tempdir().unwrap();
        let outer = base.path().join("home");
        let inner = outer.join("project/data/sandbox");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o700)).unwrap();
        // The tempdir itself is 0700 too (tempfile's default): that one comes first.
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // Evaluate as an unrelated user so the answer does not depend on who runs the test.
        let b = first_blocker_for(&inner, 4_000_001, 4_000_001).unwrap();
        assert_eq!(b.dir, outer);
        assert_eq!(b.mode & 0o777, 0o700);
        assert!(b.to_string().contains("mode 0700"), "{b}");
        std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(first_blocker_for(&inner, 4_000_001, 4_000_001), None);
        // A path that does not exist yet is judged by its existing part.
        assert_eq!(
            first_blocker_for(&inner.join("work/x"), 4_000_001, 4_000_001),
            None
        );
    }
}
