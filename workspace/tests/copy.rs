//! `copy::take`: the executor's copy of a workspace (issue #15 item 2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use common::{git, git_bin, write};
use silas_core::{Coded, ErrorCode};
use silas_workspace::WorkspaceError;
use silas_workspace::copy::{self, CopyLimits};

#[test]
fn git_copy_has_the_uncommitted_state_and_runs_nothing_from_the_repo() {
    if git_bin().is_none() {
        println!("NOTE: git not installed; git copy test skipped");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    write(&ws, ".gitignore", b"*.log\n");
    write(&ws, ".gitattributes", b"*.py filter=evil\n");
    write(&ws, "a.py", b"print('committed')\n");
    write(&ws, "b.py", b"print('to be deleted')\n");
    write(&ws, "pkg/c.py", b"x = 1\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    // Uncommitted: an edit, a deletion, an untracked file, an ignored file.
    write(&ws, "a.py", b"print('edited, not committed')\n");
    fs::remove_file(ws.join("b.py")).unwrap();
    write(&ws, "new.py", b"untracked = True\n");
    write(&ws, "debug.log", b"ignored\n");
    // The owner's repo config tries to make Silas run programs.
    let pwned = tmp.path().join("pwned");
    for (key, what) in [
        ("core.fsmonitor", "fsmonitor"),
        ("filter.evil.clean", "clean"),
        ("filter.evil.smudge", "smudge"),
        ("core.pager", "pager"),
    ] {
        let cmd = format!("touch {}-{what}", pwned.display());
        git(&ws, &["config", key, &cmd]);
    }
    let hook = ws.join(".git/hooks/post-checkout");
    fs::write(
        &hook,
        format!("#!/bin/sh\ntouch {}-hook\n", pwned.display()),
    )
    .unwrap();
    common::chmod(&ws, ".git/hooks/post-checkout", 0o755);

    let dest = tmp.path().join("copy");
    let snap = copy::take(&ws, &dest, &CopyLimits::default()).unwrap();

    assert_eq!(
        fs::read(dest.join("a.py")).unwrap(),
        b"print('edited, not committed')\n"
    );
    assert!(
        !dest.join("b.py").exists(),
        "deleted file must not come back"
    );
    assert_eq!(
        fs::read(dest.join("new.py")).unwrap(),
        b"untracked = True\n"
    );
    assert!(!dest.join("debug.log").exists(), "ignored file copied");
    assert_eq!(fs::read(dest.join("pkg/c.py")).unwrap(), b"x = 1\n");
    // A real clone (its own .git directory, not a worktree's gitdir file) at HEAD.
    assert!(dest.join(".git").is_dir());
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), head);
    let hooks = dest.join(".git/hooks");
    let planted: Vec<_> = fs::read_dir(&hooks)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(planted.is_empty(), "clone has hooks: {planted:?}");
    for what in ["fsmonitor", "clean", "smudge", "pager", "hook"] {
        let marker = format!("{}-{what}", pwned.display());
        assert!(
            !Path::new(&marker).exists(),
            "the repo made Silas run its {what}"
        );
    }
    let names: Vec<&str> = snap.files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [".gitattributes", ".gitignore", "a.py", "new.py", "pkg/c.py"]
    );
    assert_eq!(snap.source, fs::canonicalize(&ws).unwrap());
    let fact = &snap.files["a.py"];
    assert_eq!(fact.size, b"print('edited, not committed')\n".len() as u64);
    assert_eq!(
        fact.sha256,
        silas_core::canonical::sha256_hex(b"print('edited, not committed')\n")
    );
    assert_eq!(common::mode(&dest), 0o700);
}

#[test]
fn plain_copy_honours_gitignore_and_includes_hidden_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, ".gitignore", b"build/\n*.tmp\n");
    write(&ws, "src/main.py", b"main\n");
    write(&ws, ".env.example", b"A=1\n");
    write(&ws, "build/out.bin", b"artefact");
    write(&ws, "src/scratch.tmp", b"tmp");
    write(&ws, "src/.gitignore", b"local.txt\n");
    write(&ws, "src/local.txt", b"nested ignore");
    common::chmod(&ws, "src/main.py", 0o750);
    let dest = tmp.path().join("copy");
    let snap = copy::take(&ws, &dest, &CopyLimits::default()).unwrap();
    let names: Vec<&str> = snap.files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            ".env.example",
            ".gitignore",
            "src/.gitignore",
            "src/main.py"
        ]
    );
    assert!(!dest.join("build").exists());
    assert!(!dest.join("src/scratch.tmp").exists());
    assert!(!dest.join("src/local.txt").exists());
    assert_eq!(common::mode(&dest.join("src/main.py")), 0o750);
    assert_eq!(snap.files["src/main.py"].mode, 0o750);
}

#[test]
fn symlinks_leaving_the_workspace_are_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, "README", b"readme\n");
    write(&ws, "docs/guide.md", b"guide\n");
    fs::write(tmp.path().join("outside"), b"secret next door\n").unwrap();
    symlink("/etc/passwd", ws.join("passwd")).unwrap();
    symlink("../outside", ws.join("up")).unwrap();
    symlink("../README", ws.join("docs/readme-link")).unwrap();
    // A chain: lexically inside, resolves outside through `here -> .`.
    symlink(".", ws.join("here")).unwrap();
    symlink("here/../outside", ws.join("chain")).unwrap();
    let dest = tmp.path().join("copy");
    let snap = copy::take(&ws, &dest, &CopyLimits::default()).unwrap();
    for skipped in ["passwd", "up", "chain", "here"] {
        assert!(
            snap.skipped.iter().any(|s| s == skipped),
            "{skipped} not skipped: {:?}",
            snap.skipped
        );
        assert!(
            fs::symlink_metadata(dest.join(skipped)).is_err(),
            "{skipped} copied"
        );
    }
    assert!(!snap.files.contains_key("passwd"));
    assert_eq!(
        fs::read_link(dest.join("docs/readme-link")).unwrap(),
        Path::new("../README")
    );
    assert_eq!(
        fs::read(dest.join("docs/readme-link")).unwrap(),
        b"readme\n"
    );
}

#[test]
fn committed_symlink_to_etc_passwd_is_not_in_a_git_copy() {
    if git_bin().is_none() {
        println!("NOTE: git not installed; git symlink test skipped");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    write(&ws, "a.txt", b"a\n");
    symlink("/etc/passwd", ws.join("passwd")).unwrap();
    write(&ws, "d/file", b"committed\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "link"]);
    // After the commit, `d` becomes a link to a directory outside; the index
    // still lists `d/file`.
    let outside = tmp.path().join("outside");
    write(&outside, "file", b"outside secret\n");
    fs::remove_dir_all(ws.join("d")).unwrap();
    symlink(&outside, ws.join("d")).unwrap();
    let dest = tmp.path().join("copy");
    let snap = copy::take(&ws, &dest, &CopyLimits::default()).unwrap();
    assert!(
        fs::symlink_metadata(dest.join("passwd")).is_err(),
        "clone's link left in the copy"
    );
    assert!(snap.skipped.contains(&"passwd".to_owned()));
    assert!(dest.join("a.txt").is_file());
    assert!(!snap.files.contains_key("d/file"));
    let leaked = fs::read(dest.join("d/file")).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&leaked).contains("outside secret"));
    assert!(
        fs::symlink_metadata(dest.join("d")).is_err(),
        "outside link copied"
    );
}

#[test]
fn size_limits_fail_with_a_clear_error_and_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    for i in 0..3 {
        write(&ws, &format!("f{i}.bin"), &[7u8; 1000]);
    }
    let dest = tmp.path().join("copy");
    let limits = CopyLimits {
        max_bytes: 2500,
        max_files: 100,
    };
    let err = copy::take(&ws, &dest, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                bytes: 3000,
                limit: 2500
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("limit of 2500 bytes"), "{err}");
    assert_eq!(err.code(), ErrorCode::ESandboxFailed);
    assert!(!dest.exists(), "partial copy left behind");

    let limits = CopyLimits {
        max_bytes: 1 << 20,
        max_files: 2,
    };
    let err = copy::take(&ws, &dest, &limits).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::TooManyFiles { files: 3, limit: 2 }),
        "{err:?}"
    );
    assert!(!dest.exists());

    // Under the limits it works; an existing destination is refused.
    let limits = CopyLimits {
        max_bytes: 3000,
        max_files: 3,
    };
    copy::take(&ws, &dest, &limits).unwrap();
    let err = copy::take(&ws, &dest, &limits).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::DestinationExists { .. }),
        "{err:?}"
    );
}

#[test]
fn git_copy_size_limit_applies_before_cloning() {
    if git_bin().is_none() {
        println!("NOTE: git not installed; test skipped");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    write(&ws, "big.bin", &[1u8; 5000]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "big"]);
    let dest = tmp.path().join("copy");
    let limits = CopyLimits {
        max_bytes: 4000,
        max_files: 100,
    };
    let err = copy::take(&ws, &dest, &limits).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::TooLarge { limit: 4000, .. }),
        "{err:?}"
    );
    assert!(!dest.exists());
}

/// A tree the executor wrote is copied without git: its planted `.git`
/// (hooks, fsmonitor) is neither copied nor run.
#[test]
fn a_plain_take_of_an_executor_tree_never_runs_its_git() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("result");
    let marker = dir.path().join("pwned");
    write(&src, "app.py", b"x = 2\n");
    write(
        &src,
        ".git/config",
        format!(
            "[core]\n\tfsmonitor = touch {}\n\thooksPath = /tmp\n",
            marker.display()
        )
        .as_bytes(),
    );
    write(&src, ".git/HEAD", b"ref: refs/heads/main\n");
    let dest = dir.path().join("verify");
    let snap = copy::take_plain(&src, &dest, &CopyLimits::default()).unwrap();
    assert_eq!(fs::read_to_string(dest.join("app.py")).unwrap(), "x = 2\n");
    assert!(!dest.join(".git").exists());
    assert!(snap.files.contains_key("app.py"));
    assert!(!marker.exists(), "a planted git config ran");
}
