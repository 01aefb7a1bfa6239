//! The daemon's side of the control socket (`silas_web::control`): answers
//! the CLI's typed requests from the live store, actors and owner auth.
//! The socket is bound by `silas start` next to the web listener; the CLI
//! side is `crate::remote`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use silas_actors::audit_seal::OwnerSeal;
use silas_actors::scheduler::{SchedulerHandle, SchedulerMsg};
use silas_actors::work_executor::{WORK_EXECUTOR_NAME, WorkExecutorMsg};
use silas_core::config::Config;
use silas_core::model::work::WorkItemStatus;
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::Store;
use silas_web::HealthState;
use silas_web::auth::{Credential, OwnerAuth, Revocation};
use silas_web::control::protocol::{
    AuditVerifyReport, CancelReport, ConfigReport, DeviceInfo, MAX_TAIL_LINES, NextJob,
    OnDiskConfig, REDACTED, StatusReport, WorkSummary,
};
use silas_web::control::{ControlBackend, Request, Response};
use silas_web::ws::{BoxFuture, WebBackend};

use crate::error::CliError;

/// Where the running configuration came from, to compare the file with it.
#[derive(Clone, Debug, Default)]
pub struct ConfigOrigin {
    /// `--config`, if given.
    pub path: Option<PathBuf>,
    /// `--data-dir`, if given (it overrides the file's `data_dir`).
    pub data_dir: Option<PathBuf>,
    /// The directory the daemon started in: relative paths mean this.
    pub cwd: PathBuf,
    /// What the running config was read from, as found at start (a file
    /// created since must not be named as the one in force).
    pub source: String,
}

/// Everything the control requests read or act on.
pub struct DaemonControl {
    pub store: Store,
    pub cfg: Arc<Config>,
    pub origin: ConfigOrigin,
    pub auth: Arc<OwnerAuth>,
    pub health: Arc<HealthState>,
    pub web: Arc<dyn WebBackend>,
    /// Whether an owner card would reach someone now (an owner connection
    /// is open, or Telegram shows the owner's cards).
    pub owner_sees_cards: Arc<dyn Fn() -> bool + Send + Sync>,
    pub seal: OwnerSeal,
    /// The web channel's base URL, as pairing links use it.
    pub base_url: String,
    /// The daemon's memory (`None`: its index could not open; the turns use
    /// the keyword scan and `silas memory` is refused).
    pub memory: Option<silas_memory::Memory>,
    pub started_at: Timestamp,
    pub started: Instant,
    /// Connection skills (setup conversations, escalation).
    pub connections: Option<Arc<silas_actors::connection::runtime::ConnectionRuntime>>,
    /// The `model: …` line `silas start` printed (offline mode included).
    pub model: String,
    /// `silas stop`: who asked, to the daemon's main task, which shuts down
    /// as on SIGTERM (the audit's `daemon.stopped` reason names them).
    pub stop: tokio::sync::mpsc::Sender<String>,
}

fn refused(e: impl Coded + std::fmt::Display) -> Response {
    Response::error(e.code(), e.to_string())
}

fn from_cli(e: CliError) -> Response {
    let (code, message) = e.parts();
    Response::error(code, message)
}

/// Runs blocking store work (redb reads, chain walks) off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Response> + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(Response::error(
            ErrorCode::EDbIo,
            format!("store task: {e}"),
        ))
    })
}

fn work_executor() -> Option<ractor::ActorRef<WorkExecutorMsg>> {
    ractor::registry::where_is(WORK_EXECUTOR_NAME).map(ractor::ActorRef::from)
}

impl ControlBackend for DaemonControl {
    fn handle(&self, caller: &Credential, req: Request) -> BoxFuture<'_, Response> {
        let caller = caller.clone();
        Box::pin(async move {
            match self.answer(&caller, req).await {
                Ok(r) | Err(r) => r,
            }
        })
    }
}

impl DaemonControl {
    async fn answer(&self, caller: &Credential, req: Request) -> Result<Response, Response> {
        let store = self.store.clone();
        Ok(match req {
            // Answered by the server before a request reaches the backend.
            Request::Hello { .. } => {
                Response::error(ErrorCode::EChannelProtocol, "already authenticated")
            }
            Request::Status => Response::Status(Box::new(self.status().await?)),
            Request::Stop => {
                let by = caller.device_id().unwrap_or("config_token").to_owned();
                // Full: a stop is asked for already.
                let _ = self.stop.try_send(by);
                Response::Stopping {
                    pid: std::process::id(),
                }
            }
            Request::AuditTail { lines } => {
                let n = lines.min(MAX_TAIL_LINES);
                let entries = blocking(move || store.audit().tail(n).map_err(refused)).await?;
                Response::AuditTail { entries }
            }
            Request::AuditAcknowledge => {
                let seal = self.seal.clone();
                let n = blocking(move || acknowledge_tampering(&store, &seal).map_err(from_cli))
                    .await?;
                Response::AuditAcknowledged { entries: n }
            }
            Request::AuditVerify { from_checkpoint } => {
                let seal = self.seal.clone();
                Response::AuditVerified(
                    blocking(move || {
                        verify_audit(&store, &seal, from_checkpoint.as_deref()).map_err(from_cli)
                    })
                    .await?,
                )
            }
            Request::Pair => {
                let code = self
                    .auth
                    .issue_pairing_code(Some(caller))
                    .map_err(refused)?;
                Response::PairingLink {
                    link: silas_web::pairing_link(&self.base_url, &code),
                }
            }
            Request::DevicesList => Response::Devices {
                devices: self.auth.list().iter().map(DeviceInfo::from).collect(),
            },
            Request::DevicesRevoke { device_id } => {
                match self.auth.revoke(&device_id).map_err(refused)? {
                    Revocation::NoSuchDevice => {
                        return Err(Response::error(
                            ErrorCode::EDbNotFound,
                            format!("no device {device_id:?} (see `silas devices list`)"),
                        ));
                    }
                    Revocation::AlreadyRevoked => {
                        return Ok(Response::DeviceRevoked {
                            device_id,
                            already: true,
                        });
                    }
                    Revocation::Revoked => {}
                }
                // Revoking the local CLI's own device (a leaked `cli.token`)
                // rotates it: a fresh one is written at once, instead of
                // every later command failing until the next start.
                crate::devices::ensure_cli_device(&self.auth, &self.cfg.data_dir)
                    .map_err(from_cli)?;
                Response::DeviceRevoked {
                    device_id,
                    already: false,
                }
            }
            Request::WorkList => Response::WorkItems {
                items: blocking(move || list_work(&store).map_err(refused)).await?,
            },
            Request::WorkShow { id } => {
                let found = blocking({
                    let id = id.clone();
                    move || {
                        let Some(item) = store.work_items().get(&id).map_err(refused)? else {
                            return Ok(None);
                        };
                        let changes =
                            silas_actors::change_history::history(&store, &id).map_err(refused)?;
                        Ok(Some((item, changes)))
                    }
                })
                .await?;
                match found {
                    Some((item, changes)) => Response::WorkItem {
                        item: Box::new(item),
                        changes,
                    },
                    None => {
                        return Err(Response::error(
                            ErrorCode::EDbNotFound,
                            format!("no work item {id:?}"),
                        ));
                    }
                }
            }
            Request::WorkCancel { id } => Response::WorkCancelled(self.cancel(caller, id).await?),
            Request::ConfigCheck => Response::Config(Box::new(self.config_report())),
            Request::WorkspaceList => Response::Workspaces {
                workspaces: blocking(move || {
                    silas_actors::workspaces::list(&store).map_err(refused)
                })
                .await?,
            },
            Request::WorkspaceAdd {
                name,
                path,
                writable,
            } => {
                let reserved = crate::workspace_cmd::reserved_dirs(&self.cfg);
                let by = caller.device_id().unwrap_or("cli").to_owned();
                Response::WorkspaceAdded {
                    workspace: blocking(move || {
                        silas_actors::workspaces::add(
                            &store,
                            &name,
                            std::path::Path::new(&path),
                            writable,
                            &reserved,
                            &by,
                        )
                        .map_err(refused)
                    })
                    .await?,
                }
            }
            Request::MemoryForget { id, scope, query } => {
                let memory = self.memory()?;
                let what = crate::memory_cmd::forget_request(id, scope, query).map_err(from_cli)?;
                let by = caller.device_id().unwrap_or("cli").to_owned();
                Response::MemoryForgotten {
                    ids: blocking(move || {
                        crate::memory_cmd::forget(&memory, &what, &by).map_err(from_cli)
                    })
                    .await?,
                }
            }
            Request::MemoryExport {
                path,
                since,
                include_raw,
            } => {
                let memory = self.memory()?;
                let by = caller.device_id().unwrap_or("cli").to_owned();
                Response::MemoryExported {
                    records: blocking(move || {
                        crate::memory_cmd::export(
                            &memory,
                            std::path::Path::new(&path),
                            since.as_deref(),
                            include_raw,
                            &by,
                        )
                        .map_err(from_cli)
                    })
                    .await?,
                }
            }
            Request::MemoryImport { path, replace } => {
                let memory = self.memory()?;
                let by = caller.device_id().unwrap_or("cli").to_owned();
                let mode = if replace {
                    silas_memory::ImportMode::Replace
                } else {
                    silas_memory::ImportMode::Merge
                };
                let r = blocking(move || {
                    crate::memory_cmd::import(&memory, std::path::Path::new(&path), mode, &by)
                        .map_err(from_cli)
                })
                .await?;
                Response::MemoryImported {
                    records: r.records,
                    replaced: r.replaced,
                }
            }
            Request::ConnectionAdd { skill, settings } => {
                let rt = self.connections()?;
                // Its steps are cards: with nobody to show them to, the first
                // was declined at once and the setup failed unseen while the
                // CLI said it had started.
                if !(self.owner_sees_cards)() {
                    return Err(Response::error(
                        ErrorCode::EChannelDisconnected,
                        "no owner client is connected to show the setup's sign-in steps: open the web app (or `silas chat`, which shows a device code), then run this again".to_string(),
                    ));
                }
                Response::ConnectionSetupStarted {
                    connection_id: rt.start_setup(&skill, settings).await.map_err(refused)?,
                }
            }
            Request::ConnectionList => Response::Connections {
                connections: blocking(move || {
                    store
                        .records::<silas_core::model::connections::Connection>()
                        .list()
                        .map_err(refused)
                })
                .await?,
            },
            Request::ConnectionEscalate {
                connection_id,
                permissions,
                reason,
            } => {
                let rt = self.connections()?;
                // Checked now, answered on the card (which may take minutes).
                let conn = blocking({
                    let id = connection_id.clone();
                    move || {
                        store
                            .records::<silas_core::model::connections::Connection>()
                            .get(&id)
                            .map_err(refused)
                    }
                })
                .await?
                .ok_or_else(|| {
                    Response::error(
                        ErrorCode::EDbNotFound,
                        format!("no connection {connection_id:?}"),
                    )
                })?;
                silas_actors::connection::escalation::missing_permissions(&conn, &permissions)
                    .map_err(refused)?;
                let id = connection_id.clone();
                tokio::spawn(async move {
                    if let Err(e) = silas_actors::connection::escalation::escalate_permission(
                        &rt,
                        &id,
                        permissions,
                        &reason,
                    )
                    .await
                    {
                        tracing::warn!(connection_id = %id, code = %e.code(), "permission escalation: {e}");
                    }
                });
                Response::ConnectionEscalationAsked { connection_id }
            }
            Request::WorkspaceRemove { name } => {
                let by = caller.device_id().unwrap_or("cli").to_owned();
                Response::WorkspaceRemoved {
                    workspace: blocking(move || {
                        silas_actors::workspaces::remove(&store, &name, &by).map_err(refused)
                    })
                    .await?,
                }
            }
        })
    }

    fn connections(
        &self,
    ) -> Result<Arc<silas_actors::connection::runtime::ConnectionRuntime>, Response> {
        self.connections.clone().ok_or_else(|| {
            Response::error(
                ErrorCode::ESandboxUnavailable,
                "connection skills are unavailable in this daemon (see its log)",
            )
        })
    }

    fn memory(&self) -> Result<silas_memory::Memory, Response> {
        self.memory.clone().ok_or_else(|| {
            Response::error(
                ErrorCode::EDbIo,
                "the memory index could not be opened (see the daemon log); memory requests are unavailable",
            )
        })
    }

    async fn status(&self) -> Result<StatusReport, Response> {
        let store = self.store.clone();
        let pending_cards = blocking(move || {
            store
                .records::<silas_storage::PendingCard>()
                .list()
                .map(|v| v.len())
                .map_err(refused)
        })
        .await?;
        let running_work = match work_executor() {
            Some(w) => ractor::call_t!(w, WorkExecutorMsg::Running, 2_000).unwrap_or_default(),
            None => Vec::new(),
        };
        let next_jobs = match SchedulerHandle::find() {
            Some(s) if self.cfg.scheduler.enabled => {
                let mut jobs: Vec<NextJob> = s
                    .list()
                    .await
                    .into_iter()
                    .map(|j| {
                        let (action, target) = j.action.to_parts();
                        NextJob {
                            job_id: j.job_id,
                            action: action.to_owned(),
                            target,
                            schedule: j.schedule,
                            next_fire: j.next_fire,
                        }
                    })
                    .collect();
                // Soonest first; jobs with no next fire last.
                jobs.sort_by_key(|j| (j.next_fire.is_none(), j.next_fire, j.job_id.clone()));
                Some(jobs)
            }
            _ => None,
        };
        Ok(StatusReport {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            started_at: self.started_at,
            uptime_seconds: self.started.elapsed().as_secs(),
            web_url: self.base_url.trim_end_matches('/').to_owned(),
            connections: self.health.connections(),
            queue: self.web.queue_pressure().await,
            pending_cards,
            running_work,
            next_jobs,
            providers: self.web.providers(),
            channels: self.web.channels(),
            model: self.model.clone(),
        })
    }

    async fn cancel(&self, caller: &Credential, id: String) -> Result<CancelReport, Response> {
        let executor = work_executor().ok_or_else(|| {
            Response::error(
                ErrorCode::EChannelDisconnected,
                "the work executor is restarting; try again",
            )
        })?;
        let by = caller.device_id().unwrap_or("config_token").to_owned();
        let done = ractor::call_t!(
            executor,
            |reply| WorkExecutorMsg::Cancel {
                id: id.clone(),
                by,
                reply
            },
            10_000
        )
        .map_err(|e| Response::error(ErrorCode::EChannelTimeout, format!("work executor: {e}")))?;
        // Cancelling what has already ended leaves it as it is: the state
        // asked for holds, so it is not an error (a script may retry).
        let done = match done {
            Err(silas_actors::work_executor::CancelError::Ended { status, .. }) => {
                return Ok(CancelReport {
                    id,
                    previous: status,
                    now: status,
                    already_ended: true,
                    was_running: false,
                    also_cancelled: Vec::new(),
                });
            }
            other => other.map_err(refused)?,
        };
        // A cancelled goal's schedule goes with it.
        if let Some(s) = SchedulerHandle::find() {
            let _ = s.actor.cast(SchedulerMsg::Sync);
        }
        Ok(CancelReport {
            id,
            previous: done.previous,
            now: done.now,
            already_ended: false,
            was_running: done.was_running,
            also_cancelled: done.also,
        })
    }

    fn config_report(&self) -> ConfigReport {
        ConfigReport {
            source: self.origin.source.clone(),
            running: Box::new(redacted(&self.cfg)),
            on_disk: compare_on_disk(&self.cfg, &self.origin),
        }
    }
}

/// Every work item, oldest first.
pub fn list_work(store: &Store) -> Result<Vec<WorkSummary>, silas_storage::StoreError> {
    let items = store.work_items();
    let mut all = Vec::new();
    for s in WorkItemStatus::ALL {
        all.extend(items.list_by_status(*s)?.iter().map(WorkSummary::from));
    }
    all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    Ok(all)
}

/// `silas audit verify`: the hash chain, then the owner key's signatures
/// and the head mirror (hashes alone can be recomputed by whoever can write
/// the store; the signatures cannot).
pub fn verify_audit(
    store: &Store,
    seal: &OwnerSeal,
    from_checkpoint: Option<&str>,
) -> Result<AuditVerifyReport, CliError> {
    let audit = store.audit();
    let v = match from_checkpoint {
        None => audit.verify_chain()?,
        Some("latest") => audit.verify_from_checkpoint(None)?,
        Some(id) => audit.verify_from_checkpoint(Some(id))?,
    };
    if let Some(b) = v.first_bad {
        return Err(CliError::new(
            ErrorCode::EDbAuditChainBroken,
            format!("audit chain broken at entry {}: {}", b.index, b.reason),
        ));
    }
    let seal = audit.verify_sealed(seal)?;
    if let Some(problem) = &seal.problem {
        return Err(CliError::new(
            ErrorCode::EDbAuditChainBroken,
            format!("audit log tampered: {problem}"),
        ));
    }
    // What a start found while the daemon was down is not vouched for by
    // the checkpoints signed since: it stays reported until acknowledged.
    let recorded = audit.unacknowledged_tampering()?;
    if let Some(first) = recorded.first() {
        let problem = first
            .data
            .get("problem")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("see the entry");
        return Err(CliError::new(
            ErrorCode::EDbAuditChainBroken,
            format!(
                "the chain verifies, but {} start(s) found the audit log tampered while the \
                 daemon was stopped; the first, entry #{} at {}: {problem}. Entries before it \
                 may be missing or changed. Once you have looked: `silas audit acknowledge`",
                recorded.len(),
                first.seq,
                first.timestamp
            ),
        ));
    }
    Ok(AuditVerifyReport {
        entries_checked: v.entries_checked,
        seal,
    })
}

/// `silas audit acknowledge`: records that the owner has seen the tampering
/// entries since the last acknowledgement, then signs a checkpoint of the
/// chain as it now is (which rewrites the head mirror: a tampered mirror
/// kept `audit verify` failing until the next hourly checkpoint); returns
/// how many there were.
pub fn acknowledge_tampering(store: &Store, seal: &OwnerSeal) -> Result<usize, CliError> {
    let audit = store.audit();
    let n = audit.unacknowledged_tampering()?.len();
    if n > 0 {
        let data = serde_json::json!({"acknowledged": n});
        if let serde_json::Value::Object(data) = data {
            audit.log(silas_storage::audit::TAMPER_ACKNOWLEDGED, data)?;
        }
        audit.write_checkpoint(seal)?;
    }
    Ok(n)
}

/// The configuration with its secrets replaced by [`REDACTED`].
pub fn redacted(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    let hide = |s: &mut Option<String>| {
        if s.is_some() {
            *s = Some(REDACTED.to_owned());
        }
    };
    hide(&mut c.channels.web.auth_token);
    hide(&mut c.channels.telegram.token);
    hide(&mut c.search.api_key);
    c
}

/// The file as it is now, against the configuration in force.
pub fn compare_on_disk(running: &Config, origin: &ConfigOrigin) -> OnDiskConfig {
    // Loaded exactly as `silas start` loaded the running one: anchored at
    // the same directory, with the sandbox dirs placed the same way.
    let mut now = match crate::commands::load_unvalidated_at(
        origin.path.as_deref(),
        origin.data_dir.clone(),
        &origin.cwd,
    ) {
        Ok(c) => c,
        Err(e) => {
            return OnDiskConfig::Invalid {
                errors: vec![e.one_line()],
            };
        }
    };
    if let Some(root) = crate::commands::planned_sandbox_root(&now) {
        now.sandbox.root_dir = Some(root);
    }
    let errors = crate::commands::config_errors(&now);
    if !errors.is_empty() {
        return OnDiskConfig::Invalid {
            errors: errors
                .iter()
                .map(|e| format!("error[{}]: {e}", e.code()))
                .collect(),
        };
    }
    // Compared section by section (values never leave this function).
    let (a, b) = (
        serde_json::to_value(running).unwrap_or_default(),
        serde_json::to_value(&now).unwrap_or_default(),
    );
    let mut sections: Vec<String> = match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => a
            .keys()
            .chain(b.keys())
            .filter(|k| a.get(*k) != b.get(*k))
            .cloned()
            .collect(),
        _ => vec!["(unreadable)".into()],
    };
    sections.sort();
    sections.dedup();
    if sections.is_empty() {
        OnDiskConfig::Same
    } else {
        OnDiskConfig::Differs { sections }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use silas_core::config::ProcessEnv;

    #[test]
    fn secrets_are_redacted_and_nothing_else_changes() {
        let mut cfg = Config::default();
        cfg.channels.web.auth_token = Some("web-secret".into());
        cfg.search.api_key = Some("search-secret".into());
        let r = redacted(&cfg);
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("web-secret") && !text.contains("search-secret"));
        assert_eq!(r.channels.web.auth_token.as_deref(), Some(REDACTED));
        assert_eq!(
            r.channels.telegram.token, None,
            "an unset secret stays unset"
        );
        assert_eq!(r.data_dir, cfg.data_dir);
    }

    #[test]
    fn on_disk_config_is_compared_by_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("silas.yaml");
        std::fs::write(&path, "silas:\n  chronicle:\n    retention_days: 30\n").unwrap();
        let origin = ConfigOrigin {
            path: Some(path.clone()),
            data_dir: Some(dir.path().join("data")),
            cwd: dir.path().to_path_buf(),
            source: path.display().to_string(),
        };
        let mut running = Config::load(Some(&path), &ProcessEnv).unwrap();
        running.data_dir = dir.path().join("data");
        running.anchor_paths(dir.path());
        if let Some(root) = crate::commands::planned_sandbox_root(&running) {
            running.sandbox.root_dir = Some(root);
        }
        assert_eq!(compare_on_disk(&running, &origin), OnDiskConfig::Same);
        std::fs::write(&path, "silas:\n  chronicle:\n    retention_days: 31\n").unwrap();
        assert_eq!(
            compare_on_disk(&running, &origin),
            OnDiskConfig::Differs {
                sections: vec!["chronicle".into()]
            }
        );
        std::fs::write(&path, "silas:\n  no_such_key: 1\n").unwrap();
        match compare_on_disk(&running, &origin) {
            OnDiskConfig::Invalid { errors } => {
                assert!(
                    errors[0].starts_with("error[E_CFG_UNKNOWN_KEY]"),
                    "{errors:?}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn work_is_listed_across_statuses_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let mk = |id: &str, status: &str, at: &str| {
            serde_json::from_value::<silas_core::model::work::WorkItem>(serde_json::json!({
                "id": id, "type": "task", "title": id, "body": "b",
                "status": status, "created_at": at,
            }))
            .unwrap()
        };
        store
            .work_items()
            .save(&mk("w2", "done", "2024-01-02T00:00:00Z"))
            .unwrap();
        store
            .work_items()
            .save(&mk("w1", "running", "2024-01-01T00:00:00Z"))
            .unwrap();
        let all = list_work(&store).unwrap();
        let ids: Vec<_> = all.iter().map(|w| (w.id.as_str(), w.status)).collect();
        assert_eq!(
            ids,
            [
                ("w1", WorkItemStatus::Running),
                ("w2", WorkItemStatus::Done)
            ]
        );
    }
}
