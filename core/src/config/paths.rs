//! Path resolution for the startup path rules: lexical normalisation
//! against the working directory, symlink resolution of whatever part of the
//! path already exists, and the world-writable check.

use std::path::{Component, Path, PathBuf};

/// Makes `path` absolute (joined onto `cwd` when relative) and resolves `.`
/// and `..` lexically, without touching the file system. `..` at the root
/// stays at the root.
pub fn normalize_lexically(path: &Path, cwd: &Path) -> PathBuf {
    let joined;
    let path = if path.is_absolute() {
        path
    } else {
        joined = cwd.join(path);
        &joined
    };
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::Prefix(_) | Component::RootDir => out.push(comp.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

/// The canonical form used to compare configured directories: the lexical
/// normalisation of [`normalize_lexically`], with the longest prefix that
/// exists on disk replaced by its `fs::canonicalize` form (so symlinks are
/// followed) and the not-yet-existing remainder appended unchanged.
pub fn resolve_path(path: &Path, cwd: &Path) -> PathBuf {
    let lexical = normalize_lexically(path, cwd);
    let mut existing: &Path = &lexical;
    let mut missing = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            let mut out = canonical;
            for part in missing.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => return lexical,
        }
    }
}

/// `Some(mode)` when `path` exists and is writable by "other" (mode bit
/// 0o002); `None` when it does not exist or is not world-writable. Always
/// `None` on non-Unix platforms.
pub fn world_writable_mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o002 != 0).then_some(mode & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// `~` or `~/…` with the home directory put in (`home`: `$HOME`); any other
/// path unchanged. `Err` for what a shell would expand but this does not:
/// `~user/…`, or `~` with no home known. Left alone, either became a
/// directory literally named `~` under the working directory.
pub fn expand_home(path: &Path, home: Option<&str>) -> Result<PathBuf, String> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_path_buf());
    };
    let rest = match text.strip_prefix('~') {
        None => return Ok(path.to_path_buf()),
        Some(rest) => rest,
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(format!(
            "{text:?}: only `~/…` (your own home) is expanded; write the full path"
        ));
    }
    match home.filter(|h| h.starts_with('/')) {
        Some(home) => Ok(PathBuf::from(format!("{home}{rest}"))),
        None => Err(format!(
            "{text:?}: `~` needs HOME set to an absolute path; write the full path"
        )),
    }
}
