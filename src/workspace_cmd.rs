//! `silas workspace add|list|remove` (issue #15): the owner registers a
//! directory once, by name. With a daemon running the request goes over the
//! control socket (owner credential on the connection); without one the CLI
//! writes the store itself. Both paths end in `silas_actors::workspaces`,
//! which checks and audits every change.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use silas_actors::workspaces::{self, RegistryError};
use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_core::model::workspace::Workspace;
use silas_web::control::{Request, Response};
use silas_web::protocol::{ClientFrame, ProtocolError};

use crate::cli::WorkspaceCommand;
use crate::error::{CliError, coded};

/// Silas's own directories, which no workspace may overlap: the data dir
/// (store, keys, secrets) and the sandbox dirs. Canonical where they exist.
pub fn reserved_dirs(cfg: &Config) -> Vec<(String, PathBuf)> {
    let mut cfg = cfg.clone();
    // The directory `silas start` would move the sandbox root to.
    if let Some(root) = crate::commands::planned_sandbox_root(&cfg) {
        cfg.sandbox.root_dir = Some(root);
    }
    let canon = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    vec![
        ("data dir".to_string(), canon(cfg.data_dir.clone())),
        ("sandbox root".to_string(), canon(cfg.sandbox_root())),
        ("verification dir".to_string(), canon(cfg.verify_dir())),
        (
            "customer context dir".to_string(),
            canon(cfg.customer_context_dir()),
        ),
    ]
}

/// PATH as the owner typed it, made absolute against the CLI's cwd (the
/// daemon's cwd means nothing to the owner) and canonicalised.
fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    // A quoted `'~/proj'` reaches us unexpanded.
    let path = &crate::commands::expand_home(path)
        .map_err(|m| CliError::new(ErrorCode::ECfgInvalid, m))?;
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("current directory: {e}")))?
            .join(path)
    };
    workspaces::canonical_dir(&abs).map_err(coded)
}

fn path_text(p: &Path) -> Result<String, CliError> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| coded(RegistryError::NotUtf8(p.display().to_string())))
}

/// The registered workspaces: the running daemon's, else the store's.
pub fn registered(cfg: &Config) -> Result<Vec<Workspace>, CliError> {
    match crate::remote::ask(cfg, Request::WorkspaceList)? {
        Some(Response::Workspaces { workspaces }) => Ok(workspaces),
        Some(other) => Err(crate::remote::unexpected(&other)),
        None => {
            let store = crate::commands::open_existing_store(&cfg.data_dir)?;
            workspaces::list(&store).map_err(coded)
        }
    }
}

pub fn run(cfg: &Config, cmd: WorkspaceCommand) -> Result<ExitCode, CliError> {
    match cmd {
        WorkspaceCommand::Add { name, path, write } => {
            let abs = absolute(&path)?;
            let req = Request::WorkspaceAdd {
                name: name.clone(),
                path: path_text(&abs)?,
                writable: write,
            };
            let ws = match crate::remote::ask(cfg, req)? {
                Some(Response::WorkspaceAdded { workspace }) => workspace,
                Some(other) => return Err(crate::remote::unexpected(&other)),
                None => {
                    let store = crate::commands::open_existing_store(&cfg.data_dir)?;
                    workspaces::add(&store, &name, &abs, write, &reserved_dirs(cfg), "cli")
                        .map_err(coded)?
                }
            };
            println!(
                "added workspace {} → {} ({})",
                ws.name,
                ws.path,
                ws.mode_str()
            );
        }
        WorkspaceCommand::List { json } => print_list(&registered(cfg)?, json),
        WorkspaceCommand::Remove { name } => {
            let req = Request::WorkspaceRemove { name: name.clone() };
            let ws = match crate::remote::ask(cfg, req)? {
                Some(Response::WorkspaceRemoved { workspace }) => workspace,
                Some(other) => return Err(crate::remote::unexpected(&other)),
                None => {
                    let store = crate::commands::open_existing_store(&cfg.data_dir)?;
                    workspaces::remove(&store, &name, "cli").map_err(coded)?
                }
            };
            println!(
                "removed workspace {} ({}); the directory itself is untouched",
                ws.name, ws.path
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A web channel registry frame (`workspace_list|add|remove`): the same
/// registry calls as the control socket, for an owner connection only.
/// Returns the registry after the change, for the `workspaces` frame.
pub async fn web_op(
    store: &silas_storage::Store,
    reserved: &[(String, PathBuf)],
    owner: bool,
    connection_id: &str,
    frame: ClientFrame,
) -> Result<Vec<Workspace>, ProtocolError> {
    if !owner {
        return Err(ProtocolError::new(
            ErrorCode::EChannelAuth.as_str(),
            "only the owner manages workspaces",
            None,
        ));
    }
    let (store, reserved) = (store.clone(), reserved.to_vec());
    let by = format!("web:{connection_id}");
    let refused = |e: RegistryError| {
        ProtocolError::new(silas_core::Coded::code(&e).as_str(), e.to_string(), None)
    };
    tokio::task::spawn_blocking(move || {
        match frame {
            ClientFrame::WorkspaceAdd {
                name,
                path,
                writable,
            } => {
                workspaces::add(&store, &name, Path::new(&path), writable, &reserved, &by)
                    .map_err(refused)?;
            }
            ClientFrame::WorkspaceRemove { name } => {
                workspaces::remove(&store, &name, &by).map_err(refused)?;
            }
            _ => {}
        }
        workspaces::list(&store).map_err(refused)
    })
    .await
    .unwrap_or_else(|e| {
        Err(ProtocolError::new(
            ErrorCode::EDbIo.as_str(),
            format!("registry task: {e}"),
            None,
        ))
    })
}

fn print_list(all: &[Workspace], json: bool) {
    if json {
        for w in all {
            println!("{}", serde_json::to_string(w).unwrap_or_default());
        }
        return;
    }
    if all.is_empty() {
        println!("no workspaces (add one with `silas workspace add NAME PATH [--write]`)");
        return;
    }
    println!("{:<24} {:<10} PATH", "NAME", "MODE");
    for w in all {
        println!("{:<24} {:<10} {}", w.name, w.mode_str(), w.path);
    }
}
