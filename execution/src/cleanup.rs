//! Removing what a sandboxed run left behind. A home server runs commands
//! for years; every run's directory (staged inputs, outputs, whatever the
//! command wrote) is deleted once nothing needs it.

use std::path::Path;

/// Deletes `dir` and everything in it. What a command left may be
/// unsearchable to its owner (a `chmod 000` dir), so permissions are opened
/// first on a second try; symlinks are removed, never followed. Failure is
/// logged, never fatal: the result the directory served stands.
pub fn remove_tree(dir: &Path) {
    if !dir.exists() || std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    open_up(dir);
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::warn!(dir = %dir.display(), "cannot remove a finished run's directory: {e}");
    }
}

fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        // `file_type` does not follow links: a link to a directory is a link.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&entry.path());
        }
    }
}
