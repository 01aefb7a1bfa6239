//! The optional local commit after an apply (issue #15): exactly the applied
//! paths, with the plan's message, hooks disabled (the hardened git of
//! [`crate::gitcopy`]: `core.hooksPath=/dev/null`, `--no-verify`, no system
//! or global config). Pushing is not done here: that is a connection, not a
//! raw network grant.
//!
//! When Silas runs as root and the repository belongs to someone else, git
//! runs as the repository's owner, so the new objects keep the owner's
//! ownership and `git` keeps working for them afterwards.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::error::WorkspaceError;
use crate::gitcopy;

/// Commits `paths` (relative to `root`, as applied: added, modified or
/// deleted) with `message`. Returns the new commit's id.
pub fn commit(root: &Path, paths: &[String], message: &str) -> Result<String, WorkspaceError> {
    let git_bin = gitcopy::git_binary().ok_or_else(|| WorkspaceError::Git {
        message: "git is not installed".into(),
    })?;
    let dot_git = root.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).map_err(|_| WorkspaceError::Git {
        message: format!("{} is not a git repository", root.display()),
    })?;
    if paths.is_empty() {
        return Err(WorkspaceError::Git {
            message: "nothing to commit".into(),
        });
    }
    let as_owner = |mut cmd: std::process::Command| {
        if is_root() && meta.uid() != 0 {
            cmd.uid(meta.uid()).gid(meta.gid());
        }
        cmd
    };
    let identity = {
        let mut cmd = gitcopy::git(&git_bin, root);
        cmd.arg("-C").arg(root).args(["config", "user.email"]);
        gitcopy::run(as_owner(cmd), "config").is_ok()
    };
    let mut add = gitcopy::git(&git_bin, root);
    add.arg("-C")
        .arg(root)
        .args(["add", "-A", "--"])
        .args(paths.iter().map(|p| format!(":(literal){p}")));
    gitcopy::run(as_owner(add), "add")?;
    let mut commit = gitcopy::git(&git_bin, root);
    if !identity {
        // No identity in the repository's own config (global config is off).
        for (k, v) in [
            ("GIT_AUTHOR_NAME", "Silas"),
            ("GIT_AUTHOR_EMAIL", "silas@localhost"),
            ("GIT_COMMITTER_NAME", "Silas"),
            ("GIT_COMMITTER_EMAIL", "silas@localhost"),
        ] {
            commit.env(k, v);
        }
    }
    commit
        .arg("-C")
        .arg(root)
        .args([
            "commit",
            "--no-verify",
            "--no-gpg-sign",
            "-q",
            "-m",
            message,
            "--",
        ])
        .args(paths.iter().map(|p| format!(":(literal){p}")));
    gitcopy::run(as_owner(commit), "commit")?;
    let mut head = gitcopy::git(&git_bin, root);
    head.arg("-C").arg(root).args(["rev-parse", "HEAD"]);
    let out = gitcopy::run(as_owner(head), "rev-parse")?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", out);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn commits_only_the_applied_paths_without_running_hooks() {
        if gitcopy::git_binary().is_none() {
            eprintln!("skipped: no git");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        sh(root, &["init", "-q"]);
        sh(root, &["config", "user.email", "o@example.test"]);
        sh(root, &["config", "user.name", "Owner"]);
        std::fs::write(root.join("a.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("b.py"), "y = 1\n").unwrap();
        sh(root, &["add", "."]);
        sh(root, &["commit", "-q", "-m", "init"]);
        // A hook that would leave a mark if it ran.
        let hook = root.join(".git/hooks/pre-commit");
        std::fs::write(&hook, "#!/bin/sh\ntouch \"$GIT_DIR/../HOOK_RAN\"\n").unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(root.join("a.py"), "x = 2\n").unwrap();
        std::fs::write(root.join("new.py"), "z = 1\n").unwrap();
        // The owner's own unrelated edit stays uncommitted.
        std::fs::write(root.join("b.py"), "y = 2\n").unwrap();
        let id = commit(root, &["a.py".into(), "new.py".into()], "fix: x").unwrap();
        assert_eq!(sh(root, &["rev-parse", "HEAD"]), id);
        assert_eq!(
            sh(root, &["log", "-1", "--format=%s|%ae"]),
            "fix: x|o@example.test"
        );
        let files = sh(root, &["show", "--name-only", "--format=", "HEAD"]);
        assert_eq!(files, "a.py\nnew.py");
        assert!(!root.join("HOOK_RAN").exists(), "a hook ran");
        assert_eq!(sh(root, &["status", "--porcelain"]), "M b.py");
    }

    #[test]
    fn a_directory_that_is_no_repository_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let e = commit(d.path(), &["a".into()], "m").unwrap_err();
        assert!(e.to_string().contains("not a git repository"), "{e}");
    }
}
