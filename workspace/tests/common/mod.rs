//! Helpers shared by the workspace integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn write(root: &Path, rel: &str, content: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

pub fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
}

pub fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Every entry under `root` (`.git` excluded): kind, bytes or link target, mode.
pub fn tree(root: &Path) -> BTreeMap<String, (String, Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    for e in walkdir(root) {
        let rel = e.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let m = fs::symlink_metadata(&e).unwrap();
        let entry = if m.file_type().is_symlink() {
            (
                "link".to_owned(),
                fs::read_link(&e)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes(),
                0,
            )
        } else if m.is_dir() {
            ("dir".to_owned(), Vec::new(), m.mode() & 0o7777)
        } else {
            ("file".to_owned(), fs::read(&e).unwrap(), m.mode() & 0o7777)
        };
        out.insert(rel, entry);
    }
    out
}

fn walkdir(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if dir == root && p.file_name().unwrap() == ".git" {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

pub fn git_bin() -> Option<PathBuf> {
    ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Runs git for test setup (isolated from the machine's config).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(git_bin().unwrap())
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
