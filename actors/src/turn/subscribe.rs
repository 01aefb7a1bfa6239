//! Where context subscriptions come from (issue #18 item 2) and what they
//! may read. The agent cannot subscribe to files (§5.7: the harness controls
//! context); its only lever is `memory_queries`, which the harness keeps
//! live as `memory_query` subscriptions of the asking scope (step 9). The
//! owner can: a message naming a file in a registered
//! workspace as `name/path` (whole file) or `name/path:10-45` (lines)
//! subscribes the owner's context to it, so the next turns see its current
//! text until nobody mentions it for `subscription_ttl_turns` turns.
//!
//! [`WorkspaceFiles`] reads only inside registered workspaces: plain
//! relative paths (no `..`, no absolute, no hidden tricks), resolved and
//! checked to stay under the workspace's canonical root, at most
//! [`MAX_FILE_BYTES`]. Customer scopes never get file subscriptions.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use silas_context::subscriptions::{Materializer, parse_range};
use silas_core::model::context::SubscriptionType;
use silas_core::model::messages::TaintLevel;
use silas_core::model::workspace::Workspace;

use crate::memory::MemoryIndex;

/// Largest file a subscription reads (the token cap applies after).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Memories a `memory_query` subscription shows.
const QUERY_LIMIT: usize = 5;

/// The file subscriptions `text` asks for: words of the form
/// `ws/path[:a-b]` whose `ws` is a registered workspace.
pub fn mentioned(text: &str, workspaces: &[Workspace]) -> Vec<(SubscriptionType, String)> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let word = word.trim_matches(|c: char| "`'\"()[]{}<>,;!?".contains(c));
        let word = word.strip_suffix('.').unwrap_or(word);
        let Some((ws, rest)) = word.split_once('/') else {
            continue;
        };
        if rest.is_empty() || !workspaces.iter().any(|w| w.name == ws) {
            continue;
        }
        let (sub_type, path) = match parse_range(word) {
            Some((p, _, _)) => (SubscriptionType::FileLines, p),
            None => (SubscriptionType::File, word),
        };
        let rel = &path[ws.len() + 1..];
        if plain_relative(rel).is_some() {
            let target = match sub_type {
                SubscriptionType::FileLines => word.to_owned(),
                _ => path.to_owned(),
            };
            if !out.iter().any(|(_, t)| *t == target) {
                out.push((sub_type, target));
            }
        }
    }
    out
}

/// `rel` as a path of plain components only.
fn plain_relative(rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    (!rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_))))
        .then(|| p.to_path_buf())
}

/// Reads subscribed files from the registered workspaces and runs memory
/// queries in one scope.
pub struct WorkspaceFiles {
    pub workspaces: Vec<Workspace>,
    pub memory: Arc<dyn MemoryIndex>,
    pub scope_id: String,
}

impl WorkspaceFiles {
    fn resolve(&self, target: &str) -> Result<PathBuf, String> {
        let (ws, rel) = target
            .split_once('/')
            .ok_or_else(|| format!("{target:?} is not workspace/path"))?;
        let w = self
            .workspaces
            .iter()
            .find(|w| w.name == ws)
            .ok_or_else(|| format!("no workspace named {ws:?}"))?;
        let rel =
            plain_relative(rel).ok_or_else(|| format!("{rel:?} is not a plain relative path"))?;
        let root = Path::new(&w.path)
            .canonicalize()
            .map_err(|e| format!("workspace {ws:?}: {e}"))?;
        let full = root
            .join(rel)
            .canonicalize()
            .map_err(|e| format!("{target}: {e}"))?;
        // A symlink inside the workspace must not lead out of it.
        if !full.starts_with(&root) {
            return Err(format!("{target} leads outside its workspace"));
        }
        Ok(full)
    }
}

impl Materializer for WorkspaceFiles {
    fn read_file(&self, path: &str) -> Result<String, String> {
        let full = self.resolve(path)?;
        let meta = std::fs::metadata(&full).map_err(|e| format!("{path}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{path} is not a file"));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!("{path} is larger than {MAX_FILE_BYTES} bytes"));
        }
        let bytes = std::fs::read(&full).map_err(|e| format!("{path}: {e}"))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn memory_query(&self, query: &str) -> Vec<(String, String, TaintLevel)> {
        match self.memory.search(&self.scope_id, query, QUERY_LIMIT) {
            Ok(found) => found
                .into_iter()
                .map(|m| (m.memory_id, m.content, m.taint))
                .collect(),
            Err(e) => {
                tracing::warn!(scope_id = %self.scope_id, "memory query subscription failed: {e}");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use silas_core::Timestamp;

    use super::*;

    fn ws(name: &str, path: &str) -> Workspace {
        Workspace {
            name: name.into(),
            path: path.into(),
            writable: false,
            added_at: Timestamp::now(),
        }
    }

    #[test]
    fn only_registered_workspaces_and_plain_paths_are_mentioned() {
        let all = [ws("site", "/srv/site"), ws("notes", "/srv/notes")];
        let got = mentioned(
            "Look at `site/src/app.py` and site/src/db.py:10-45, also notes/todo.md. \
             Not other/x.py, not site/../etc/passwd, not /etc/passwd, not site/ or site/src/app.py again.",
            &all,
        );
        assert_eq!(
            got,
            vec![
                (SubscriptionType::File, "site/src/app.py".to_owned()),
                (
                    SubscriptionType::FileLines,
                    "site/src/db.py:10-45".to_owned()
                ),
                (SubscriptionType::File, "notes/todo.md".to_owned()),
            ]
        );
    }

    struct NoMemory;
    impl MemoryIndex for NoMemory {
        fn store_raw(
            &self,
            _: &silas_core::model::memory::MemoryItem,
        ) -> Result<(), silas_storage::StoreError> {
            Ok(())
        }
        fn search(
            &self,
            _: &str,
            _: &str,
            _: usize,
        ) -> Result<Vec<silas_core::model::memory::MemoryItem>, silas_storage::StoreError> {
            Ok(Vec::new())
        }
        fn exist_each(&self, ids: &[&str]) -> Result<Vec<bool>, silas_storage::StoreError> {
            Ok(vec![false; ids.len()])
        }
        fn apply(
            &self,
            _: &str,
            _: &silas_core::model::agents::MemoryOp,
            _: TaintLevel,
            _: &str,
        ) -> Result<bool, silas_storage::StoreError> {
            Ok(false)
        }
    }

    #[test]
    fn reads_stay_inside_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("site");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/app.py"), "print('hi')\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "top secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
        let files = WorkspaceFiles {
            workspaces: vec![ws("site", root.to_str().unwrap())],
            memory: Arc::new(NoMemory),
            scope_id: "owner".into(),
        };
        assert_eq!(files.read_file("site/src/app.py").unwrap(), "print('hi')\n");
        for bad in [
            "site/link.txt",
            "site/../secret.txt",
            "other/src/app.py",
            "site/src",
            "site//etc/passwd",
        ] {
            let e = files.read_file(bad).unwrap_err();
            assert!(!e.contains("top secret"), "{bad}: {e}");
        }
        assert!(
            files
                .read_file("site/link.txt")
                .unwrap_err()
                .contains("outside")
        );
    }
}
