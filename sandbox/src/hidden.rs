//! Paths no sandboxed command may see through the system grants: the
//! daemon's data dir (owner key, `cli.token`, the store, the secret store's
//! key) and its configuration file.
//!
//! Every command may read the system directories (`/usr`, `/etc`, `/opt`,
//! …). Landlock only ever adds access, so a data dir *inside* one of them
//! (`/opt/silas/data`, an unprivileged daemon whose command runs as its own
//! uid) was readable by every approved command. A system directory with a
//! hidden path below it is therefore granted around it: its entries, one
//! rule each, recursing into the one on the way down and leaving out the
//! hidden path itself. What a spec grants by name (the work dir, a
//! workspace) is its own rule and is not affected.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static PROCESS_WIDE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Hide `paths` from every command this process's sandboxes run (added to
/// each spec's `hidden_paths` when it is sent to the launcher). Symlinks are
/// resolved (landlock rules follow them); a path that does not exist is
/// kept as given.
pub fn hide_from_commands(paths: impl IntoIterator<Item = PathBuf>) {
    let Ok(mut hidden) = PROCESS_WIDE.lock() else {
        return;
    };
    for p in paths {
        let p = std::fs::canonicalize(&p).unwrap_or(p);
        if !hidden.contains(&p) {
            hidden.push(p);
        }
    }
}

/// What [`hide_from_commands`] registered.
pub(crate) fn process_wide() -> Vec<PathBuf> {
    PROCESS_WIDE.lock().map(|h| h.clone()).unwrap_or_default()
}

/// The paths to grant for `roots` so that no hidden path lies beneath any
/// of them. `list` gives a directory's entries (full paths); a directory
/// that cannot be listed contributes nothing (fails closed).
pub(crate) fn around(
    roots: &[PathBuf],
    hidden: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        grant_around(root, hidden, list, &mut out);
    }
    out
}

fn grant_around(
    path: &Path,
    hidden: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
    out: &mut Vec<PathBuf>,
) {
    if hidden.iter().any(|h| path.starts_with(h)) {
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        out.push(path.to_path_buf());
        return;
    }
    for entry in list(path) {
        grant_around(&entry, hidden, list, out);
    }
}

/// [`around`] over the real filesystem: `roots` resolved (`/lib` is
/// `/usr/lib` on a merged-/usr system), missing roots left out.
pub(crate) fn system_grants(roots: &[&str], hidden: &[PathBuf]) -> Vec<PathBuf> {
    if hidden.is_empty() {
        return roots.iter().map(PathBuf::from).collect();
    }
    let resolved: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    // Resolved again here: a data dir registered before it was created
    // (a first start) could not be resolved then.
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
        .collect();
    let hidden = hidden.as_slice();
    let list = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    around(&resolved, hidden, &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn tree(dir: &Path) -> Vec<PathBuf> {
        let names: &[&str] = match dir.to_str().unwrap_or("") {
            "/opt" => &["/opt/silas", "/opt/other"],
            "/opt/silas" => &["/opt/silas/silas", "/opt/silas/data", "/opt/silas/skills"],
            "/etc" => &["/etc/passwd", "/etc/silas"],
            "/etc/silas" => &["/etc/silas/silas.yaml", "/etc/silas/README"],
            _ => &[],
        };
        names.iter().map(|n| p(n)).collect()
    }

    #[test]
    fn roots_without_hidden_paths_are_granted_whole() {
        let roots = [p("/usr"), p("/opt")];
        assert_eq!(around(&roots, &[], &tree), roots.to_vec());
        assert_eq!(around(&roots, &[p("/home/me/data")], &tree), roots.to_vec());
    }

    #[test]
    fn a_hidden_path_inside_a_root_is_granted_around() {
        let roots = [p("/usr"), p("/opt"), p("/etc")];
        let hidden = [p("/opt/silas/data"), p("/etc/silas/silas.yaml")];
        assert_eq!(
            around(&roots, &hidden, &tree),
            vec![
                p("/usr"),
                p("/opt/silas/silas"),
                p("/opt/silas/skills"),
                p("/opt/other"),
                p("/etc/passwd"),
                p("/etc/silas/README"),
            ]
        );
    }

    #[test]
    fn a_root_inside_or_equal_to_a_hidden_path_is_left_out() {
        assert_eq!(
            around(&[p("/opt"), p("/usr")], &[p("/opt")], &tree),
            vec![p("/usr")]
        );
        assert_eq!(
            around(&[p("/opt/silas/data/x")], &[p("/opt/silas")], &tree),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn an_unlistable_directory_grants_nothing_below_it() {
        let nothing = |_: &Path| Vec::new();
        assert_eq!(
            around(&[p("/opt"), p("/usr")], &[p("/opt/silas/data")], &nothing),
            vec![p("/usr")]
        );
    }

    #[test]
    fn component_prefixes_are_not_paths_below() {
        // `/opt/silas-data` is not below `/opt/silas`.
        let list = |d: &Path| match d.to_str() {
            Some("/opt") => vec![p("/opt/silas"), p("/opt/silas-data")],
            _ => Vec::new(),
        };
        assert_eq!(
            around(&[p("/opt")], &[p("/opt/silas")], &list),
            vec![p("/opt/silas-data")]
        );
    }
}
