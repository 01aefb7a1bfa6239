//! A task that names a workspace (issue #15) works on a copy of it, never on
//! the real directory:
//!
//! * `{work_base}/ws-{item_id}/base` — the untouched copy
//!   (`silas_workspace::copy::take`, hardened git clone + uncommitted state,
//!   or a `.gitignore`-aware copy), with the real tree's manifest in
//!   `snapshot.json`;
//! * `…/result` — a second copy, handed to the sandbox user: every tool call
//!   of every attempt runs there (landlock: that copy read-write, the plan's
//!   extra paths read/execute, nothing else of the host);
//! * `…/verify-{attempt}` — per verification, a plain copy of the result
//!   (no git reads the executor's `.git`) with the files that define the
//!   checks restored from `base` unless the plan allows editing them; the
//!   checks run there in their own sandboxes, and the copy is removed.
//!
//! On success the change set (`base` → `result`) is stored with the item's
//! artifacts (`changes.diff`, `changes.json`) and audited
//! (`workspace_changes`, protected edits flagged). Nothing is written to the
//! real workspace here.

use std::path::{Path, PathBuf};

use serde_json::json;
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_core::model::workspace::WorkspaceUse;
use silas_execution::executors::ProjectDir;
use silas_execution::verification::{VerificationReport, VerificationRunner};
use silas_workspace::{ChangeSet, CopyLimits, Protected, Snapshot, copy, diff, protect};

use super::engine::{WorkEngine, WorkError};

/// The copies of one task's workspace.
pub struct WorkspaceRun {
    pub use_: WorkspaceUse,
    pub root: PathBuf,
    pub snapshot: Snapshot,
    pub protected: Protected,
}

const SNAPSHOT: &str = "snapshot.json";
/// The stored change set, in the item's artifacts (an apply approval binds
/// its SHA-256).
pub(super) const CHANGES_FILE: &str = "changes.json";

/// A run's change set as stored with the item's artifacts.
pub struct StoredChanges {
    pub set: ChangeSet,
    /// SHA-256 of the stored `changes.json`.
    pub sha256: String,
}

fn io(what: impl std::fmt::Display) -> WorkError {
    WorkError::Io(what.to_string())
}

impl WorkspaceRun {
    pub fn base(&self) -> PathBuf {
        self.root.join("base")
    }

    pub fn result(&self) -> PathBuf {
        self.root.join("result")
    }
}

impl WorkEngine {
    /// The item's workspace copies, made on first use (and after a restart
    /// reused as they were left). `Ok(None)`: the item names no workspace.
    /// The registry is checked again here: a workspace removed (or made
    /// read-only) since the approval stops the task.
    pub(super) fn workspace_run(&self, item: &WorkItem) -> Result<Option<WorkspaceRun>, WorkError> {
        let (use_, ws) = match crate::workspaces::check_plan(&self.store, item) {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(e) => return Err(WorkError::Workspace(format!("check: {e}"))),
        };
        if !silas_sandbox::manager::is_plain_dir_name(&item.id) {
            return Err(io(format!("unsafe work item id {:?}", item.id)));
        }
        let root = self.workspace_root(&item.id);
        if let Some(run) = reopen(item, &use_, &root) {
            return Ok(Some(run));
        }
        let snapshot_path = root.join(SNAPSHOT);
        // A half-made run (a crash while copying) starts over.
        silas_execution::cleanup::remove_tree(&root);
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(&root)
            .map_err(|e| io(format!("cannot create {}: {e}", root.display())))?;
        // Traversable (not listable) so the sandbox user reaches its copy.
        set_mode(&root, 0o711)?;
        let limits = CopyLimits::default();
        let snapshot = copy::take(Path::new(&ws.path), &root.join("base"), &limits)
            .map_err(|e| WorkError::Workspace(format!("{}: {e}", ws.name)))?;
        copy::take_plain(&root.join("base"), &root.join("result"), &limits)
            .map_err(|e| WorkError::Workspace(format!("{}: {e}", ws.name)))?;
        let protected = protected_set(item, &use_, &root.join("base")).map_err(io)?;
        self.registry
            .sandbox()
            .hand_over_tree(&root.join("result"))
            .map_err(io)?;
        let text =
            serde_json::to_string(&snapshot).map_err(|e| WorkError::Encoding(e.to_string()))?;
        // Owner-only: the manifest lists the owner's files (the root dir is
        // traversable by the sandbox user).
        write_private(&snapshot_path, text.as_bytes())?;
        self.audit(
            "workspace_copied",
            json!({"work_item_id": item.id, "workspace": ws.name, "path": ws.path,
                   "access": use_.access, "files": snapshot.files.len(),
                   "skipped": snapshot.skipped}),
        )?;
        Ok(Some(WorkspaceRun {
            use_,
            root,
            snapshot,
            protected,
        }))
    }

    /// The copies a finished task left for applying (`None`: gone).
    pub(super) fn kept_run(&self, item: &WorkItem) -> Option<WorkspaceRun> {
        let use_ = item.workspace.as_ref()?;
        reopen(item, use_, &self.workspace_root(&item.id))
    }

    /// The item's checks over a fresh copy of the result, the checks' own
    /// files restored from the untouched copy first (unless the approved plan
    /// allows editing them).
    pub(super) async fn verify_workspace(
        &self,
        item: &WorkItem,
        run: &WorkspaceRun,
    ) -> Result<VerificationReport, WorkError> {
        let verify = run.root.join(format!("verify-{}", item.attempts));
        silas_execution::cleanup::remove_tree(&verify);
        copy::take_plain(&run.result(), &verify, &CopyLimits::default()).map_err(io)?;
        let protected = (!run.use_.allow_protected_edits).then_some(&run.protected);
        let restored = protect::prepare_for_checks(&run.base(), &verify, protected).map_err(io)?;
        if !restored.is_empty() {
            self.audit(
                "workspace_checks_restored",
                json!({"work_item_id": item.id, "attempt": item.attempts, "files": restored}),
            )?;
        }
        // Code under test that reaches into the test runner could forge the
        // verdict: not run, failed with the files named (unless the plan
        // lets the work edit the checks' own files, which forges it anyway).
        let reach = match protected {
            Some(_) => silas_workspace::reach::into_test_runner(&run.base(), &verify),
            None => Vec::new(),
        };
        if !reach.is_empty() {
            silas_execution::cleanup::remove_tree(&verify);
            let named: Vec<String> = reach.iter().map(ToString::to_string).collect();
            self.audit(
                "workspace_checks_refused",
                json!({"work_item_id": item.id, "attempt": item.attempts,
                       "files": reach.iter().map(|r| r.path.as_str()).collect::<Vec<_>>()}),
            )?;
            return Ok(VerificationRunner::refused(
                &item.verify,
                &format!(
                    "not run: code under test may not reach into the test runner ({})",
                    named.join("; ")
                ),
            ));
        }
        let report = match self.registry.sandbox().hand_over_tree(&verify) {
            Ok(()) => {
                self.verifier
                    .run_checks_on_project(&item.verify, &verify)
                    .await
            }
            Err(e) => {
                silas_execution::cleanup::remove_tree(&verify);
                return Err(io(e));
            }
        };
        silas_execution::cleanup::remove_tree(&verify);
        Ok(report)
    }

    /// A goal's cycle checks over a fresh copy of the workspace it names,
    /// as the workspace is now (`Ok(None)`: it names none). Without this
    /// the checks ran in an empty directory: every cycle of a goal watching
    /// a project failed and spawned a fix task. The copy goes afterwards;
    /// the goal never writes to the workspace.
    pub(super) async fn goal_checks_on_workspace(
        &self,
        goal: &WorkItem,
    ) -> Result<Option<VerificationReport>, WorkError> {
        let ws = match crate::workspaces::check_plan(&self.store, goal) {
            Ok(Some((_, ws))) => ws,
            Ok(None) => return Ok(None),
            Err(e) => return Err(WorkError::Workspace(format!("check: {e}"))),
        };
        if !silas_sandbox::manager::is_plain_dir_name(&goal.id) {
            return Err(io(format!("unsafe work item id {:?}", goal.id)));
        }
        let root = self.workspace_root(&format!("{}-cycle", goal.id));
        silas_execution::cleanup::remove_tree(&root);
        let tree = root.join("tree");
        let prepared = (|| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(&root)
                .map_err(|e| io(format!("cannot create {}: {e}", root.display())))?;
            set_mode(&root, 0o711)?;
            copy::take(Path::new(&ws.path), &tree, &CopyLimits::default())
                .map_err(|e| WorkError::Workspace(format!("{}: {e}", ws.name)))?;
            self.registry.sandbox().hand_over_tree(&tree).map_err(io)
        })();
        let report = match prepared {
            Ok(()) => Ok(Some(
                self.verifier
                    .run_checks_on_project(&goal.verify, &tree)
                    .await,
            )),
            Err(e) => Err(e),
        };
        silas_execution::cleanup::remove_tree(&root);
        report
    }

    /// Where a workspace item's tool calls run (its result copy).
    pub(super) fn project_dir_for(&self, item: &WorkItem) -> Option<ProjectDir> {
        let use_ = item.workspace.as_ref()?;
        Some(ProjectDir {
            dir: self.workspace_root(&item.id).join("result"),
            read_paths: use_.extra_paths.iter().map(PathBuf::from).collect(),
        })
    }

    /// The executor's summary, plus the change set of a workspace run
    /// (stored with the item's artifacts).
    pub(super) fn summary_with_changes(
        &self,
        item: &WorkItem,
        run: Option<&WorkspaceRun>,
        summary: &str,
    ) -> Result<(String, Option<StoredChanges>), WorkError> {
        let Some(run) = run else {
            return Ok((summary.to_string(), None));
        };
        let changes = self.workspace_changes(item, run)?;
        let text = format!(
            "{summary}\n\n{}",
            describe(&changes.set, &run.use_.name, run.use_.allow_protected_edits,)
        );
        Ok((text, Some(changes)))
    }

    /// Removes a finished task's copies unless they are still needed: a
    /// change card still waiting to be answered needs `base`/`result` to
    /// apply from, and a paused or blocked task may still go on.
    pub(super) fn release_workspace(&self, item_id: &str, status: WorkItemStatus) {
        if !self.keeps_run_dirs(item_id, status) {
            silas_execution::cleanup::remove_tree(&self.workspace_root(item_id));
        }
    }

    /// `{work_base}/ws-{item_id}`.
    pub(super) fn workspace_root(&self, item_id: &str) -> PathBuf {
        self.registry.work_base().join(format!("ws-{item_id}"))
    }

    /// The change set of a finished run, stored with the item's artifacts
    /// and audited. The real workspace is not touched.
    pub(super) fn workspace_changes(
        &self,
        item: &WorkItem,
        run: &WorkspaceRun,
    ) -> Result<StoredChanges, WorkError> {
        let changes =
            diff::changes(&run.snapshot, &run.base(), &run.result(), &run.protected).map_err(io)?;
        let dir = self.artifact_dir(&item.id);
        silas_execution::artifacts::create_private_dir(&dir).map_err(io)?;
        std::fs::write(dir.join("changes.diff"), &changes.unified_diff)
            .map_err(|e| io(format!("cannot store the diff: {e}")))?;
        let text = serde_json::to_string_pretty(&changes)
            .map_err(|e| WorkError::Encoding(e.to_string()))?;
        // What an apply approval binds: these exact bytes.
        let sha256 = silas_core::canonical::sha256_hex(text.as_bytes());
        std::fs::write(dir.join(CHANGES_FILE), text)
            .map_err(|e| io(format!("cannot store the change set: {e}")))?;
        let files: Vec<serde_json::Value> = changes
            .files
            .iter()
            .map(|f| {
                json!({"path": f.path, "kind": f.kind, "added": f.added_lines,
                       "removed": f.removed_lines, "protected": f.protected})
            })
            .collect();
        self.audit(
            "workspace_changes",
            json!({"work_item_id": item.id, "workspace": run.use_.name,
                   "files": files, "added": changes.total_added, "removed": changes.total_removed,
                   "protected_edits": changes.protected_edits(),
                   "changes_sha256": sha256,
                   "approval": item.approval_token.as_ref().map(|t| t.token_id.clone())}),
        )?;
        Ok(StoredChanges {
            set: changes,
            sha256,
        })
    }
}

/// What the checks are defined by: the default set, the plan's own globs and
/// what the checks' commands read their instructions from (in `base`, the
/// untouched copy: the scripts they source).
fn protected_set(
    item: &WorkItem,
    use_: &WorkspaceUse,
    base: &Path,
) -> Result<Protected, silas_workspace::WorkspaceError> {
    Protected::for_checks_in(
        base,
        &use_.protected,
        item.verify.iter().map(|c| c.run.as_str()),
    )
}

/// The copies a run left in `root` (both copies and their manifest), as
/// they were; `None` when any part is missing or unreadable.
fn reopen(item: &WorkItem, use_: &WorkspaceUse, root: &Path) -> Option<WorkspaceRun> {
    let text = std::fs::read_to_string(root.join(SNAPSHOT)).ok()?;
    let snapshot = serde_json::from_str::<Snapshot>(&text).ok()?;
    let protected = protected_set(item, use_, &root.join("base")).ok()?;
    (root.join("base").is_dir() && root.join("result").is_dir()).then(|| WorkspaceRun {
        use_: use_.clone(),
        root: root.to_path_buf(),
        snapshot,
        protected,
    })
}

/// A one-paragraph account of a change set for the item's result.
pub fn describe(changes: &ChangeSet, workspace: &str, checks_saw_edits: bool) -> String {
    if changes.files.is_empty() {
        return format!("No changes to workspace {workspace}.");
    }
    let mut out = format!(
        "Changes to workspace {workspace} (made on a copy): {} file(s), +{} −{}.",
        changes.files.len(),
        changes.total_added,
        changes.total_removed
    );
    if let Some(note) =
        silas_core::cards::protected_note(&changes.protected_edits(), checks_saw_edits)
    {
        out.push(' ');
        out.push_str(&note);
    }
    out
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), WorkError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io(format!("cannot write {}: {e}", path.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| io(format!("cannot write {}: {e}", path.display())))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), WorkError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io(format!("cannot set the mode of {}: {e}", path.display())))
}
