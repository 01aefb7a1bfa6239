//! Workspaces (issue #15): directories the owner registered once, by name,
//! and the plan side that names one.
//!
//! Invariant: only the owner registers a workspace (the CLI with the owner
//! credential, or an owner-authenticated web frame); a plan names one —
//! never a path — and asks `read` or `write` access. Which directory that
//! is, and whether write is allowed, is the registry's answer, never the
//! model's. Every field of [`WorkspaceUse`] is covered by the plan hash.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ModelError;
use crate::Timestamp;

/// Longest workspace name accepted.
pub const WORKSPACE_NAME_MAX: usize = 64;

/// Refuses a name that is not 1–64 characters of `[A-Za-z0-9_-]`: a name is
/// shown on cards and typed on the command line, so it never needs quoting.
pub fn validate_workspace_name(name: &str) -> Result<(), ModelError> {
    let ok = !name.is_empty()
        && name.len() <= WORKSPACE_NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ModelError::WorkspaceBadName {
            name: name.to_string(),
        })
    }
}

/// True for an absolute path with no `.`/`..` component (a plain, already
/// resolved spelling: what the card shows is what is granted).
pub fn is_plain_absolute(path: &str) -> bool {
    let p = Path::new(path);
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// A directory the owner registered (table `workspaces`, keyed by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    pub name: String,
    /// Absolute and canonical (symlinks resolved) when it was registered.
    pub path: String,
    /// Whether a plan may ask `write` on it.
    pub writable: bool,
    pub added_at: Timestamp,
}

impl Workspace {
    pub fn validate(&self) -> Result<(), ModelError> {
        validate_workspace_name(&self.name)?;
        if !is_plain_absolute(&self.path) {
            return Err(ModelError::WorkspaceRelativePath {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// `read-only` / `writable`, as listed and shown.
    pub fn mode_str(&self) -> &'static str {
        if self.writable {
            "writable"
        } else {
            "read-only"
        }
    }
}

spec_enum! {
    /// The access a plan asks on its workspace.
    #[derive(Default)]
    pub enum Access {
        #[default]
        Read => "read",
        Write => "write",
    }
}

spec_enum! {
    /// How an approved change reaches the workspace: after the owner reviews
    /// the diff (default), or directly (the card says so before approval).
    #[derive(Default)]
    pub enum ApplyMode {
        #[default]
        Review => "review",
        Direct => "direct",
    }
}

/// A plan's `workspace:` field. Absent fields take the cautious default
/// (read access, review before apply, nothing extra).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceUse {
    pub name: String,
    #[serde(default)]
    pub access: Access,
    /// Absolute paths outside the workspace (a virtualenv, a toolchain):
    /// granted read and execute only.
    #[serde(default)]
    pub extra_paths: Vec<String>,
    /// Globs the executor may not change, on top of the library's defaults.
    #[serde(default)]
    pub protected: Vec<String>,
    /// The approved plan may edit protected files.
    #[serde(default)]
    pub allow_protected_edits: bool,
    #[serde(default)]
    pub apply: ApplyMode,
    /// A local commit with this message after applying, if set.
    #[serde(default)]
    pub commit_message: Option<String>,
}

impl WorkspaceUse {
    /// A read-only use of `name` with every default.
    pub fn read(name: impl Into<String>) -> Self {
        WorkspaceUse {
            name: name.into(),
            access: Access::Read,
            extra_paths: Vec::new(),
            protected: Vec::new(),
            allow_protected_edits: false,
            apply: ApplyMode::Review,
            commit_message: None,
        }
    }

    /// Shape rules that need no registry: a valid name, plain absolute
    /// extra paths, non-empty globs.
    pub fn validate(&self) -> Result<(), ModelError> {
        validate_workspace_name(&self.name)?;
        if let Some(p) = self.extra_paths.iter().find(|p| !is_plain_absolute(p)) {
            return Err(ModelError::WorkspaceRelativePath { path: p.clone() });
        }
        if self.protected.iter().any(|g| g.trim().is_empty()) {
            return Err(ModelError::WorkspaceEmptyGlob);
        }
        Ok(())
    }
}

/// Why a plan's workspace use was refused against the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceRefusal {
    #[error("the plan names workspace {0:?}, which is not registered")]
    Unknown(String),
    #[error("the plan asks write access on workspace {0:?}, which is registered read-only")]
    ReadOnly(String),
    #[error("the plan names extra path {0:?}, which must be an absolute path")]
    RelativeExtraPath(String),
    #[error("the plan names extra path {0:?}, which does not exist")]
    MissingExtraPath(String),
    #[error(
        "the plan names extra path {path:?}, which {why}; a task may read only what it needs \
         (a virtualenv, a toolchain)"
    )]
    ForbiddenExtraPath { path: String, why: String },
}

impl WorkspaceRefusal {
    /// The audit `reason` of a refusal.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkspaceRefusal::Unknown(_) => "unknown_workspace",
            WorkspaceRefusal::ReadOnly(_) => "write_on_read_only",
            WorkspaceRefusal::RelativeExtraPath(_) => "relative_extra_path",
            WorkspaceRefusal::MissingExtraPath(_) => "missing_extra_path",
            WorkspaceRefusal::ForbiddenExtraPath { .. } => "forbidden_extra_path",
        }
    }
}

/// Checks a plan's workspace use against the registry entry it names
/// (`registered`: `None` when the name is unknown) and the filesystem
/// (`resolve`: an extra path with its symlinks resolved, `None` when it does
/// not exist). No extra path may reach Silas's own directories
/// (`reserved`, canonical) or what [`extra_path_refusal`] keeps out.
/// Returns the registered workspace.
pub fn check_use<'a>(
    want: &WorkspaceUse,
    registered: Option<&'a Workspace>,
    reserved: &[(&str, &Path)],
    resolve: impl Fn(&str) -> Option<PathBuf>,
) -> Result<&'a Workspace, WorkspaceRefusal> {
    let ws = registered
        .filter(|w| w.name == want.name)
        .ok_or_else(|| WorkspaceRefusal::Unknown(want.name.clone()))?;
    if want.access == Access::Write && !ws.writable {
        return Err(WorkspaceRefusal::ReadOnly(want.name.clone()));
    }
    for p in &want.extra_paths {
        if !is_plain_absolute(p) {
            return Err(WorkspaceRefusal::RelativeExtraPath(p.clone()));
        }
        let Some(real) = resolve(p) else {
            return Err(WorkspaceRefusal::MissingExtraPath(p.clone()));
        };
        if let Some(why) = extra_path_refusal(&real, reserved) {
            return Err(WorkspaceRefusal::ForbiddenExtraPath {
                path: p.clone(),
                why,
            });
        }
    }
    Ok(ws)
}

/// Directories that hold credentials wherever they are (a home's `.ssh`):
/// no extra path is one, or inside one.
const CREDENTIAL_DIRS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".password-store",
    ".netrc",
    ".git-credentials",
];

/// Why an extra path (canonical) may not be granted to a task: it is the
/// filesystem root, a directory of every user's or service's trees, a
/// home directory (its keys and tokens), a credentials directory, or it
/// overlaps one of Silas's own directories (`reserved`: the data dir with
/// the owner key, the device credentials and the secrets). The sandbox
/// grants an extra path read and execute, recursively, as the daemon's own
/// user when the daemon is not root.
pub fn extra_path_refusal(path: &Path, reserved: &[(&str, &Path)]) -> Option<String> {
    if path.parent().is_none() {
        return Some("is the filesystem root".into());
    }
    if is_shared_parent(path) {
        return Some("holds every user's or service's files".into());
    }
    if is_home(path) {
        return Some(HOME.into());
    }
    for (what, dir) in reserved {
        if path.starts_with(dir) || dir.starts_with(path) {
            return Some(format!("overlaps Silas's {what} ({})", dir.display()));
        }
    }
    home_or_credentials(path)
}

const HOME: &str = "is a home directory (its keys and tokens)";

fn is_home(path: &Path) -> bool {
    path == Path::new("/root") || path.parent() == Some(Path::new("/home"))
}

/// Why `path` (canonical) holds someone's keys: a home directory, or a
/// credentials directory or anything inside one.
fn home_or_credentials(path: &Path) -> Option<String> {
    if is_home(path) {
        return Some(HOME.into());
    }
    let credentials = path
        .components()
        .any(|c| CREDENTIAL_DIRS.iter().any(|d| c.as_os_str() == *d))
        || path.ends_with(".config/silas");
    credentials.then(|| "holds credentials".into())
}

/// Why the owner's registration was refused (paths already canonical).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistryRefusal {
    #[error("{0}")]
    BadName(ModelError),
    #[error("{0:?} is the filesystem root; register a project directory instead")]
    Root(String),
    #[error("{path:?} overlaps Silas's {what} ({reserved:?}); a workspace must be outside it")]
    Reserved {
        path: String,
        what: String,
        reserved: String,
    },
    #[error(
        "{0:?} is a system directory; register a project directory instead \
         (a task could otherwise read, or after approval change, the system's files)"
    )]
    System(String),
    #[error("{path:?} {why}; register a project directory instead")]
    Credentials { path: String, why: String },
    #[error("a workspace named {0:?} already exists; remove it first")]
    NameTaken(String),
    #[error("{path:?} is already registered as workspace {name:?}")]
    PathTaken { path: String, name: String },
}

/// The operating system's own trees: no workspace inside one.
const SYSTEM_TREES: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib",
    "/var/log",
    "/var/cache",
    "/var/spool",
    "/var/mail",
];

/// Directories that hold many unrelated trees (every user's, every
/// service's): projects live below them, never them whole.
const SHARED_PARENTS: &[&str] = &["/home", "/var", "/tmp", "/srv", "/opt", "/mnt", "/media"];

/// Whether `path` (canonical) is a system tree or a shared parent.
pub fn is_system_dir(path: &Path) -> bool {
    SYSTEM_TREES.iter().any(|t| path.starts_with(t)) || is_shared_parent(path)
}

fn is_shared_parent(path: &Path) -> bool {
    SHARED_PARENTS.iter().any(|p| path == Path::new(p))
}

/// Pure registration rules over canonical paths: a valid, unused name; not
/// `/` nor a system directory ([`is_system_dir`]); not inside, nor
/// containing, any reserved directory (`reserved`:
/// what it is, its canonical path — the data dir, the sandbox dirs); not a
/// path another workspace already has.
pub fn check_registration(
    name: &str,
    path: &Path,
    reserved: &[(&str, &Path)],
    existing: &[Workspace],
) -> Result<(), RegistryRefusal> {
    validate_workspace_name(name).map_err(RegistryRefusal::BadName)?;
    let shown = path.display().to_string();
    if path.parent().is_none() {
        return Err(RegistryRefusal::Root(shown));
    }
    // A shared parent says what it is even when Silas's own data sits in it.
    if is_shared_parent(path) {
        return Err(RegistryRefusal::System(shown));
    }
    for (what, dir) in reserved {
        if path.starts_with(dir) || dir.starts_with(path) {
            return Err(RegistryRefusal::Reserved {
                path: shown,
                what: (*what).to_string(),
                reserved: dir.display().to_string(),
            });
        }
    }
    if is_system_dir(path) {
        return Err(RegistryRefusal::System(shown));
    }
    // What an extra path may not be, a workspace may not be either: a task
    // works on a copy of the whole tree (keys included).
    if let Some(why) = home_or_credentials(path) {
        return Err(RegistryRefusal::Credentials { path: shown, why });
    }
    if existing.iter().any(|w| w.name == name) {
        return Err(RegistryRefusal::NameTaken(name.to_string()));
    }
    if let Some(w) = existing.iter().find(|w| Path::new(&w.path) == path) {
        return Err(RegistryRefusal::PathTaken {
            path: shown,
            name: w.name.clone(),
        });
    }
    Ok(())
}

// ---- what became of a work item's change set (`silas work show`)

/// One step of a change set's life.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangeStep {
    pub at: Timestamp,
    pub workspace: String,
    pub what: ChangeEvent,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChangeEvent {
    /// Waiting for the owner's review.
    Offered {
        files: u64,
    },
    Applied {
        files: u64,
    },
    ApplyDeclined,
    /// The apply failed its checks (a conflict, the workspace moved…).
    ApplyRefused {
        reason: String,
    },
    Undone {
        files: u64,
    },
    /// The undo was declined or its card expired: the changes stay.
    UndoDeclined,
    UndoRefused {
        reason: String,
    },
}

impl std::fmt::Display for ChangeStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ws = &self.workspace;
        match &self.what {
            ChangeEvent::Offered { files } => write!(
                f,
                "{files} file(s) offered for {ws}, waiting for your review"
            )?,
            ChangeEvent::Applied { files } => write!(f, "applied {files} file(s) to {ws}")?,
            ChangeEvent::ApplyDeclined => write!(f, "not applied to {ws} (declined)")?,
            ChangeEvent::ApplyRefused { reason } => write!(f, "not applied to {ws}: {reason}")?,
            ChangeEvent::Undone { files } => {
                write!(f, "undone in {ws} ({files} file(s) restored)")?
            }
            ChangeEvent::UndoDeclined => write!(f, "undo not taken: the changes to {ws} stay")?,
            ChangeEvent::UndoRefused { reason } => write!(f, "not undone in {ws}: {reason}")?,
        }
        write!(f, " — {}", self.at)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    fn ws(name: &str, path: &str, writable: bool) -> Workspace {
        Workspace {
            name: name.into(),
            path: path.into(),
            writable,
            added_at: Timestamp::now(),
        }
    }

    #[test]
    fn names_follow_the_rule() {
        for ok in ["a", "my-proj_2", &"x".repeat(64)] {
            assert!(validate_workspace_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "../x", "a/b", "é", &"x".repeat(65), "a.b"] {
            assert!(validate_workspace_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            Access::ALL,
            &[(Access::Read, "read"), (Access::Write, "write")],
        );
        assert_enum_strings(
            ApplyMode::ALL,
            &[(ApplyMode::Review, "review"), (ApplyMode::Direct, "direct")],
        );
    }

    #[test]
    fn a_bare_use_takes_the_cautious_defaults() {
        let u: WorkspaceUse = serde_json::from_value(json!({"name": "proj"})).unwrap();
        assert_eq!(u, WorkspaceUse::read("proj"));
        round_trip(&u);
        round_trip(&ws("proj", "/srv/proj", true));
    }

    #[test]
    fn shape_rules() {
        let mut u = WorkspaceUse::read("proj");
        u.extra_paths = vec!["venv".into()];
        assert!(u.validate().is_err());
        u.extra_paths = vec!["/opt/../etc".into()];
        assert!(u.validate().is_err());
        u.extra_paths = vec!["/opt/venv".into()];
        assert!(u.validate().is_ok());
        u.protected = vec!["  ".into()];
        assert!(u.validate().is_err());
        assert!(ws("p", "rel/dir", false).validate().is_err());
    }

    fn real(p: &str) -> Option<PathBuf> {
        Some(PathBuf::from(p))
    }

    #[test]
    fn extra_paths_never_reach_keys_homes_or_silas_itself() {
        let data = Path::new("/srv/silas/data");
        let reserved = [("data dir", data)];
        let rw = ws("proj", "/srv/proj", true);
        let mut u = WorkspaceUse::read("proj");
        for bad in [
            "/",
            "/home",
            "/tmp",
            "/var",
            "/root",
            "/home/owner",
            "/srv/silas",
            "/srv/silas/data",
            "/srv/silas/data/keys",
            "/home/owner/.ssh",
            "/home/owner/.config/silas",
            "/opt/app/.aws/cli",
        ] {
            u.extra_paths = vec![bad.into()];
            let r = check_use(&u, Some(&rw), &reserved, real);
            assert!(
                matches!(&r, Err(WorkspaceRefusal::ForbiddenExtraPath { path, .. }) if path == bad),
                "{bad}: {r:?}"
            );
        }
        // What the path resolves to counts, not how it is spelt.
        u.extra_paths = vec!["/opt/link".into()];
        assert!(check_use(&u, Some(&rw), &reserved, |_| Some(data.join("keys"))).is_err());
        for ok in [
            "/opt/venv",
            "/usr/lib/jvm",
            "/home/owner/.cargo",
            "/home/owner/proj/.venv",
            "/srv/silas-other",
        ] {
            u.extra_paths = vec![ok.into()];
            assert!(check_use(&u, Some(&rw), &reserved, real).is_ok(), "{ok}");
        }
    }

    #[test]
    fn use_is_checked_against_the_registry() {
        let ro = ws("proj", "/srv/proj", false);
        let rw = ws("proj", "/srv/proj", true);
        let mut u = WorkspaceUse::read("proj");
        assert_eq!(
            check_use(&u, None, &[], real),
            Err(WorkspaceRefusal::Unknown("proj".into()))
        );
        assert!(check_use(&u, Some(&ro), &[], real).is_ok());
        u.access = Access::Write;
        assert_eq!(
            check_use(&u, Some(&ro), &[], real),
            Err(WorkspaceRefusal::ReadOnly("proj".into()))
        );
        assert!(check_use(&u, Some(&rw), &[], real).is_ok());
        u.extra_paths = vec!["/opt/venv".into()];
        assert_eq!(
            check_use(&u, Some(&rw), &[], |_| None),
            Err(WorkspaceRefusal::MissingExtraPath("/opt/venv".into()))
        );
        u.extra_paths = vec!["venv".into()];
        assert_eq!(
            check_use(&u, Some(&rw), &[], real),
            Err(WorkspaceRefusal::RelativeExtraPath("venv".into()))
        );
        // A registry entry under another name never answers for this one.
        let other = ws("other", "/srv/other", true);
        assert!(check_use(&WorkspaceUse::read("proj"), Some(&other), &[], real).is_err());
    }

    #[test]
    fn registration_rules() {
        let data = PathBuf::from("/var/lib/silas");
        let reserved = [("data dir", data.as_path())];
        let existing = vec![ws("proj", "/srv/proj", false)];
        let ok = |n: &str, p: &str| check_registration(n, Path::new(p), &reserved, &existing);
        assert!(ok("new", "/srv/new").is_ok());
        assert!(matches!(ok("new", "/"), Err(RegistryRefusal::Root(_))));
        for system in [
            "/etc",
            "/etc/nginx",
            "/usr",
            "/usr/local/bin",
            "/boot",
            "/proc/1",
        ] {
            assert!(
                matches!(ok("new", system), Err(RegistryRefusal::System(_))),
                "{system}"
            );
        }
        // (`/var` itself holds the data dir here: refused as containing it.)
        assert!(ok("new", "/var").is_err());
        for shared in ["/home", "/tmp", "/srv", "/opt", "/mnt"] {
            assert!(
                matches!(ok("new", shared), Err(RegistryRefusal::System(_))),
                "{shared}"
            );
        }
        // Projects below a shared parent are what workspaces are for.
        for project in [
            "/home/kai/proj",
            "/var/www/site",
            "/opt/app",
            "/tmp/scratch",
        ] {
            assert!(ok("new", project).is_ok(), "{project}");
        }
        // Homes and credentials, as for extra paths.
        for keys in [
            "/root",
            "/home/kai",
            "/root/.ssh",
            "/home/kai/.gnupg/private",
            "/srv/.aws",
        ] {
            assert!(
                matches!(ok("new", keys), Err(RegistryRefusal::Credentials { .. })),
                "{keys}"
            );
        }
        // Components, not bytes: /etcetera is nobody's system tree.
        assert!(ok("new", "/etcetera").is_ok());
        assert!(matches!(
            ok("new", "/var/lib/silas/x"),
            Err(RegistryRefusal::Reserved { .. })
        ));
        assert!(matches!(
            ok("new", "/var/lib"),
            Err(RegistryRefusal::Reserved { .. })
        ));
        assert!(matches!(
            ok("new", "/var/lib/silas"),
            Err(RegistryRefusal::Reserved { .. })
        ));
        // A sibling sharing a prefix is not inside: components, not bytes.
        // (Refused all the same, as inside the system's /var/lib.)
        assert!(matches!(
            ok("new", "/var/lib/silas2"),
            Err(RegistryRefusal::System(_))
        ));
        assert!(matches!(
            ok("proj", "/srv/x"),
            Err(RegistryRefusal::NameTaken(_))
        ));
        assert!(matches!(
            ok("new", "/srv/proj"),
            Err(RegistryRefusal::PathTaken { .. })
        ));
        assert!(matches!(
            ok("bad name", "/srv/y"),
            Err(RegistryRefusal::BadName(_))
        ));
    }
}
