//! The owner's workspace registry (issue #15): add, list, remove — each
//! change audited (`workspace_added` / `workspace_removed`) — and the check
//! a plan's `workspace:` passes before it becomes a card and again when it
//! is approved.
//!
//! Only owner-authenticated callers reach [`add`] / [`remove`]: the CLI
//! (directly on the store when no daemon runs, else over the control
//! socket) and the web channel's owner frames. No model-facing path calls
//! them; a plan only *names* a workspace, checked by [`check_plan`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;
use silas_core::model::work::WorkItem;
use silas_core::model::workspace::{
    RegistryRefusal, Workspace, WorkspaceRefusal, WorkspaceUse, check_registration, check_use,
};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{Store, StoreError};

/// Why a registry change was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{0}")]
    Refused(#[from] RegistryRefusal),
    #[error("{path:?} is not an existing directory: {why}")]
    NotADirectory { path: String, why: String },
    #[error("{0:?} is not valid UTF-8; rename the directory")]
    NotUtf8(String),
    #[error("no workspace named {0:?} (see `silas workspace list`)")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Coded for RegistryError {
    fn code(&self) -> ErrorCode {
        match self {
            RegistryError::Refused(_)
            | RegistryError::NotADirectory { .. }
            | RegistryError::NotUtf8(_) => ErrorCode::ECfgInvalid,
            RegistryError::NotFound(_) => ErrorCode::EDbNotFound,
            RegistryError::Store(e) => e.code(),
        }
    }
}

/// Serialises check-then-write of [`add`] within the process holding the
/// store (redb lets only one process open it, so this covers every writer).
static REGISTRY_LOCK: Mutex<()> = Mutex::new(());

/// Canonical form of an owner-given absolute path: symlinks resolved, must
/// be an existing directory.
pub fn canonical_dir(path: &Path) -> Result<PathBuf, RegistryError> {
    let shown = || path.display().to_string();
    // Relative to what? The daemon's cwd is not the owner's: callers make
    // a path absolute where the owner typed it.
    if !path.is_absolute() {
        return Err(RegistryError::NotADirectory {
            path: shown(),
            why: "the path must be absolute".into(),
        });
    }
    let canon = std::fs::canonicalize(path).map_err(|e| RegistryError::NotADirectory {
        path: shown(),
        why: e.to_string(),
    })?;
    if !canon.is_dir() {
        return Err(RegistryError::NotADirectory {
            path: shown(),
            why: "it is not a directory".into(),
        });
    }
    Ok(canon)
}

/// Registers `path` (absolute) as `name`. `reserved`: Silas's own
/// directories (data dir, sandbox dirs), canonical where they exist.
/// `by`: who asked (a device id, or `cli`), for the audit entry.
pub fn add(
    store: &Store,
    name: &str,
    path: &Path,
    writable: bool,
    reserved: &[(String, PathBuf)],
    by: &str,
) -> Result<Workspace, RegistryError> {
    let canon = canonical_dir(path)?;
    let text = canon
        .to_str()
        .ok_or_else(|| RegistryError::NotUtf8(canon.display().to_string()))?
        .to_string();
    let reserved: Vec<(&str, &Path)> = reserved
        .iter()
        .map(|(w, p)| (w.as_str(), p.as_path()))
        .collect();
    let records = store.records::<Workspace>();
    // A poisoned lock only means another add panicked; the store is intact.
    let _guard = REGISTRY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    check_registration(name, &canon, &reserved, &records.list()?)?;
    let ws = Workspace {
        name: name.to_string(),
        path: text,
        writable,
        added_at: Timestamp::now(),
    };
    records.put(&ws)?;
    audit(store, "workspace_added", &ws, by)?;
    Ok(ws)
}

/// Every registered workspace, by name.
pub fn list(store: &Store) -> Result<Vec<Workspace>, RegistryError> {
    Ok(store.records::<Workspace>().list()?)
}

/// Removes `name`; the directory itself is never touched.
pub fn remove(store: &Store, name: &str, by: &str) -> Result<Workspace, RegistryError> {
    let _guard = REGISTRY_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let ws = store
        .records::<Workspace>()
        .delete(name)?
        .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
    audit(store, "workspace_removed", &ws, by)?;
    Ok(ws)
}

fn audit(store: &Store, event: &str, ws: &Workspace, by: &str) -> Result<(), StoreError> {
    if let serde_json::Value::Object(o) = json!({
        "name": ws.name, "path": ws.path, "writable": ws.writable, "by": by,
    }) {
        store.audit().log(event, o)?;
    }
    Ok(())
}

/// Why a plan's workspace use cannot go ahead.
#[derive(Debug, thiserror::Error)]
pub enum PlanWorkspaceError {
    #[error("{0}")]
    Refused(#[from] WorkspaceRefusal),
    #[error("cannot read the workspace registry: {0}")]
    Store(#[from] StoreError),
}

/// The registered workspace a plan names, checked: the name is registered,
/// `write` only on a writable one, extra paths absolute, existing and
/// clear of the data dir, homes and credentials (`check_use`).
/// `Ok(None)` for a plan that names no workspace.
pub fn check_plan(
    store: &Store,
    item: &WorkItem,
) -> Result<Option<(WorkspaceUse, Workspace)>, PlanWorkspaceError> {
    let Some(want) = &item.workspace else {
        return Ok(None);
    };
    let registered = store.records::<Workspace>().get(&want.name)?;
    // The data dir (the store's own directory) holds the owner key, the
    // device credentials and the secrets.
    let data_dir = store
        .path()
        .parent()
        .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()));
    let reserved: Vec<(&str, &Path)> = data_dir.iter().map(|d| ("data dir", d.as_path())).collect();
    let ws = check_use(want, registered.as_ref(), &reserved, |p| {
        std::fs::canonicalize(p).ok()
    })?;
    Ok(Some((want.clone(), ws.clone())))
}

/// The names the planner may use (never paths: the model needs only the
/// name, and a path tells it about the owner's filesystem). Each with its
/// mode, so it does not ask write on a read-only one.
pub fn planner_lines(store: &Store) -> Result<Vec<String>, StoreError> {
    Ok(store
        .records::<Workspace>()
        .list()?
        .iter()
        .map(|w| format!("{} ({})", w.name, w.mode_str()))
        .collect())
}

/// Shows the registered directory on a plan card that names a workspace
/// (the card's view is built from the item, which holds only the name).
/// An unregistered name keeps "path not looked up"; the approval re-checks.
pub fn fill_card_path(store: &Store, card: &mut silas_storage::PendingCard) {
    if let silas_core::cards::CardPayload::Plan(p) = &mut card.card
        && let Some(view) = p.plan.workspace.as_mut()
        && view.path.is_none()
        && let Ok(Some(ws)) = store.records::<Workspace>().get(&view.name)
    {
        view.path = Some(ws.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::model::workspace::Access;

    fn fixture() -> (tempfile::TempDir, Store, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let store = Store::open_in(&data).unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        (dir, store, std::fs::canonicalize(data).unwrap())
    }

    #[test]
    fn a_plan_card_shows_the_registered_directory() {
        let (dir, store, _) = fixture();
        let ws = add(&store, "proj", &dir.path().join("proj"), false, &[], "t").unwrap();
        let item: WorkItem = serde_json::from_value(serde_json::json!({
            "id": "t1", "type": "task", "title": "t", "body": "b",
            "workspace": {"name": "proj"}}))
        .unwrap();
        let now = Timestamp::now();
        let mut card = silas_storage::PendingCard {
            request_id: "c1".into(),
            scope_id: "owner".into(),
            card: silas_core::cards::CardPayload::Plan(silas_core::cards::plan_card(&item, "h")),
            created_at: now,
            expires_at: now,
            audience: Default::default(),
        };
        let path = |c: &silas_storage::PendingCard| match &c.card {
            silas_core::cards::CardPayload::Plan(p) => {
                p.plan.workspace.as_ref().and_then(|w| w.path.clone())
            }
            _ => None,
        };
        assert_eq!(path(&card), None);
        fill_card_path(&store, &mut card);
        assert_eq!(path(&card), Some(ws.path));
    }

    #[test]
    fn add_list_remove_are_audited() {
        let (dir, store, data) = fixture();
        let reserved = vec![("data dir".to_string(), data)];
        let ws = add(
            &store,
            "proj",
            &dir.path().join("proj"),
            true,
            &reserved,
            "cli",
        )
        .unwrap();
        assert!(Path::new(&ws.path).is_absolute());
        assert_eq!(list(&store).unwrap(), vec![ws.clone()]);
        // The same directory under another name, through a symlink.
        std::os::unix::fs::symlink(dir.path().join("proj"), dir.path().join("link")).unwrap();
        assert!(matches!(
            add(
                &store,
                "again",
                &dir.path().join("link"),
                false,
                &reserved,
                "cli"
            ),
            Err(RegistryError::Refused(RegistryRefusal::PathTaken { .. }))
        ));
        assert!(matches!(
            add(
                &store,
                "d",
                &dir.path().join("data"),
                false,
                &reserved,
                "cli"
            ),
            Err(RegistryError::Refused(RegistryRefusal::Reserved { .. }))
        ));
        assert!(matches!(
            add(
                &store,
                "nope",
                &dir.path().join("missing"),
                false,
                &reserved,
                "cli"
            ),
            Err(RegistryError::NotADirectory { .. })
        ));
        remove(&store, "proj", "cli").unwrap();
        assert!(list(&store).unwrap().is_empty());
        assert!(matches!(
            remove(&store, "proj", "cli"),
            Err(RegistryError::NotFound(_))
        ));
        let events: Vec<String> = store
            .audit()
            .tail(10)
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect();
        assert_eq!(events, vec!["workspace_added", "workspace_removed"]);
    }

    #[test]
    fn plans_are_checked_against_the_registry() {
        let (dir, store, _) = fixture();
        add(&store, "ro", &dir.path().join("proj"), false, &[], "cli").unwrap();
        let mut item = WorkItem::new("t1", silas_core::model::work::WorkItemType::Task, "t");
        assert!(check_plan(&store, &item).unwrap().is_none());
        item.workspace = Some(WorkspaceUse::read("ro"));
        let (_, ws) = check_plan(&store, &item).unwrap().unwrap();
        assert_eq!(ws.name, "ro");
        item.workspace = Some(WorkspaceUse {
            access: Access::Write,
            ..WorkspaceUse::read("ro")
        });
        assert!(matches!(
            check_plan(&store, &item),
            Err(PlanWorkspaceError::Refused(WorkspaceRefusal::ReadOnly(_)))
        ));
        item.workspace = Some(WorkspaceUse::read("ghost"));
        assert!(matches!(
            check_plan(&store, &item),
            Err(PlanWorkspaceError::Refused(WorkspaceRefusal::Unknown(_)))
        ));
        assert_eq!(planner_lines(&store).unwrap(), vec!["ro (read-only)"]);
    }

    /// A plan's extra path is granted read to the sandboxed command, which
    /// runs as the daemon's user when the daemon is not root: the data dir
    /// (owner key, device credentials, secrets) is never one, by any
    /// spelling (a symlink to it, a parent of it).
    #[test]
    fn no_plan_reads_the_data_dir_through_an_extra_path() {
        let (dir, store, data) = fixture();
        add(&store, "proj", &dir.path().join("proj"), false, &[], "cli").unwrap();
        let link = dir.path().join("innocent");
        std::os::unix::fs::symlink(data.join("."), &link).unwrap();
        let mut item = WorkItem::new("t1", silas_core::model::work::WorkItemType::Task, "t");
        for path in [data.clone(), data.parent().unwrap().to_path_buf(), link] {
            item.workspace = Some(WorkspaceUse {
                extra_paths: vec![path.display().to_string()],
                ..WorkspaceUse::read("proj")
            });
            let r = check_plan(&store, &item);
            assert!(
                matches!(
                    &r,
                    Err(PlanWorkspaceError::Refused(
                        WorkspaceRefusal::ForbiddenExtraPath { .. }
                    ))
                ),
                "{}: {r:?}",
                path.display()
            );
        }
    }
}
