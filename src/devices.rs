//! Owner devices (issue #12): the store and audit behind
//! [`silas_web::auth::OwnerAuth`], the local CLI's credential file
//! (`{data_dir}/cli.token`, 0600), the pairing link printed by `silas start`
//! (with a terminal QR code), and `silas pair` / `silas devices list|revoke`
//! over the loopback HTTP API (`--url`; without it they go over the control
//! socket, `crate::remote`), authenticated with the CLI credential.
//!
//! The credential file is 0640: readable by the daemon's group, whose
//! members administer it (ARCHITECTURE.md, control socket); never by others.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_core::model::devices::OwnerDevice;
use silas_storage::Store;
use silas_web::auth::{AuthAudit, DeviceStore, OwnerAuth};

use crate::cli::DevicesCommand;
use crate::error::CliError;

/// The CLI credential's file name inside the data dir.
pub const CLI_TOKEN_FILE: &str = "cli.token";
/// Label of the device the daemon keeps for the local CLI.
pub const CLI_DEVICE_LABEL: &str = "local CLI";

/// Device records in the redb store.
pub struct StoreDevices(pub Store);

impl DeviceStore for StoreDevices {
    fn load(&self) -> Result<Vec<OwnerDevice>, String> {
        self.0
            .records::<OwnerDevice>()
            .list()
            .map_err(|e| e.to_string())
    }
    fn save(&self, device: &OwnerDevice) -> Result<(), String> {
        self.0
            .records::<OwnerDevice>()
            .put(device)
            .map_err(|e| e.to_string())
    }
    fn save_seen(&self, device: &OwnerDevice) -> Result<(), String> {
        // No fsync per connection: durable with the store's next commit.
        self.0
            .records::<OwnerDevice>()
            .put_deferred(device)
            .map_err(|e| e.to_string())
    }
}

/// Authentication events into the hash-chained audit log.
pub struct StoreAudit(pub Store);

impl AuthAudit for StoreAudit {
    fn record(&self, event: &str, data: serde_json::Value) {
        let data = match data {
            serde_json::Value::Object(o) => o,
            _ => Default::default(),
        };
        if let Err(e) = self.0.audit().log(event, data) {
            tracing::error!(code = %silas_core::Coded::code(&e), "audit write failed: {e}");
        }
    }
}

pub fn cli_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CLI_TOKEN_FILE)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> CliError {
    CliError::new(
        ErrorCode::ECfgIo,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// Mode of the CLI credential: the owner and the daemon's group.
pub const CLI_TOKEN_MODE: u32 = 0o640;

/// Write `token` to `path` atomically, readable by the owner and group only.
fn write_secret_file(path: &Path, token: &str) -> Result<(), CliError> {
    let tmp = path.with_extension("token.tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(CLI_TOKEN_MODE)
        .open(&tmp)
        .map_err(|e| io_err("create", &tmp, e))?;
    f.write_all(token.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err("write", &tmp, e))?;
    drop(f);
    // The umask may have narrowed it; the group must be able to read it.
    fs::set_permissions(&tmp, fs::Permissions::from_mode(CLI_TOKEN_MODE))
        .map_err(|e| io_err("set permissions on", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_err("replace", path, e))?;
    if let Some(dir) = path.parent()
        && let Ok(d) = fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The CLI credential, if the file exists and other users cannot read it.
pub fn read_cli_token(data_dir: &Path) -> Result<Option<String>, CliError> {
    let path = cli_token_path(data_dir);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path, e)),
    };
    if meta.permissions().mode() & 0o007 != 0 {
        return Err(CliError::new(
            ErrorCode::ECfgInvalid,
            format!(
                "{} is readable by other users; remove it and restart the daemon",
                path.display()
            ),
        ));
    }
    let token = fs::read_to_string(&path).map_err(|e| io_err("read", &path, e))?;
    Ok(Some(token.trim().to_string()).filter(|t| !t.is_empty()))
}

/// Make sure the local CLI has a working credential: keep the one in
/// `cli.token` if it still names a live CLI device, else create a device,
/// write its token, and revoke older CLI devices (one CLI credential at a time).
pub fn ensure_cli_device(auth: &OwnerAuth, data_dir: &Path) -> Result<(), CliError> {
    let current = read_cli_token(data_dir)
        .ok()
        .flatten()
        .and_then(|t| auth.identify(&t))
        .and_then(|c| c.device_id().map(str::to_string));
    let keep = match current {
        Some(id) => {
            // Written 0600 by older versions: open it to the group now.
            let path = cli_token_path(data_dir);
            fs::set_permissions(&path, fs::Permissions::from_mode(CLI_TOKEN_MODE))
                .map_err(|e| io_err("set permissions on", &path, e))?;
            id
        }
        None => {
            let (device, token) = auth
                .create_device(CLI_DEVICE_LABEL)
                .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
            write_secret_file(&cli_token_path(data_dir), &token)?;
            device.device_id
        }
    };
    auth.set_local_device(&keep);
    for d in auth.list() {
        if d.label == CLI_DEVICE_LABEL && !d.revoked && d.device_id != keep {
            auth.revoke(&d.device_id)
                .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
        }
    }
    Ok(())
}

/// The pairing link and, below it, the same as a terminal QR code.
pub fn pairing_banner(link: &str) -> String {
    let mut out = format!("Pair a browser (one use, valid 10 minutes): {link}\n");
    match qrcode::QrCode::new(link.as_bytes()) {
        Ok(code) => {
            let art = code
                .render::<qrcode::render::unicode::Dense1x2>()
                .dark_color(qrcode::render::unicode::Dense1x2::Light)
                .light_color(qrcode::render::unicode::Dense1x2::Dark)
                .quiet_zone(true)
                .build();
            out.push_str(&art);
            out.push('\n');
        }
        Err(e) => tracing::warn!("cannot render the pairing QR code: {e}"),
    }
    out
}

/// Where the device API is: `--url` as given, else where the data dir's
/// control socket says the daemon listens (never just the configured port:
/// see [`crate::remote::running_web_url`]).
fn base_of(cfg: &Config, url: Option<&str>) -> Result<String, CliError> {
    match url {
        Some(u) => Ok(u.trim_end_matches('/').to_string()),
        None => crate::remote::running_web_url(cfg),
    }
}

/// One authenticated request to the running daemon's device API.
async fn call(
    cfg: &Config,
    base: &str,
    method: reqwest::Method,
    path: &str,
) -> Result<serde_json::Value, CliError> {
    let token = read_cli_token(&cfg.data_dir)?.ok_or_else(|| {
        CliError::new(
            ErrorCode::ECfgInvalid,
            format!(
                "no CLI credential at {}: start the daemon (`silas start`) with this data dir first",
                cli_token_path(&cfg.data_dir).display()
            ),
        )
    })?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("HTTP client: {e}")))?;
    let resp = client
        .request(method, format!("{base}{path}"))
        .bearer_auth(&token)
        .send()
        .await
        .map_err(|e| {
            CliError::new(
                ErrorCode::EChannelDisconnected,
                format!("cannot reach the Silas daemon at {base} (is `silas start` running?): {e}"),
            )
        })?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("request failed");
        let code = if status == reqwest::StatusCode::UNAUTHORIZED {
            ErrorCode::EChannelAuth
        } else {
            ErrorCode::EChannelProtocol
        };
        return Err(CliError::new(
            code,
            format!("the daemon refused: {why} (HTTP {status})"),
        ));
    }
    Ok(body)
}

fn block_on<T>(fut: impl std::future::Future<Output = Result<T, CliError>>) -> Result<T, CliError> {
    crate::error::runtime(&mut tokio::runtime::Builder::new_current_thread())?.block_on(fut)
}

/// `silas pair`: a fresh one-time pairing link for another device.
pub fn pair(cfg: &Config, url: Option<&str>) -> Result<ExitCode, CliError> {
    let base = base_of(cfg, url)?;
    let body = block_on(call(cfg, &base, reqwest::Method::POST, "/devices/pair"))?;
    let link = body["link"].as_str().ok_or_else(|| {
        CliError::new(
            ErrorCode::EChannelProtocol,
            "the daemon sent no pairing link",
        )
    })?;
    print!("{}", pairing_banner(link));
    Ok(ExitCode::SUCCESS)
}

/// `silas devices list|revoke`.
pub fn devices(cfg: &Config, cmd: DevicesCommand) -> Result<ExitCode, CliError> {
    match cmd {
        DevicesCommand::List { url, json } => {
            let base = base_of(cfg, url.as_deref())?;
            let body = block_on(call(cfg, &base, reqwest::Method::GET, "/devices"))?;
            let list = body["devices"].as_array().cloned().unwrap_or_default();
            if json {
                for d in &list {
                    println!("{d}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<22} {:<10} {:<28} {:<28} LABEL",
                "DEVICE", "STATE", "CREATED", "LAST SEEN"
            );
            for d in &list {
                let state = if d["revoked"].as_bool().unwrap_or(false) {
                    "revoked"
                } else {
                    "active"
                };
                println!(
                    "{:<22} {:<10} {:<28} {:<28} {}",
                    d["device_id"].as_str().unwrap_or("?"),
                    state,
                    d["created_at"].as_str().unwrap_or("-"),
                    d["last_seen"].as_str().unwrap_or("-"),
                    silas_web::auth::printable_label(d["label"].as_str().unwrap_or("")),
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        DevicesCommand::Revoke { device_id, url } => {
            if device_id.is_empty()
                || !device_id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(CliError::new(
                    ErrorCode::ECfgInvalid,
                    format!("not a device id: {device_id:?} (see `silas devices list`)"),
                ));
            }
            let base = base_of(cfg, url.as_deref())?;
            let answer = block_on(call(
                cfg,
                &base,
                reqwest::Method::POST,
                &format!("/devices/{device_id}/revoke"),
            ))?;
            if answer["already"].as_bool() == Some(true) {
                println!("{device_id} was already revoked: nothing changed");
                return Ok(ExitCode::SUCCESS);
            }
            println!("revoked {device_id}; its open connections were closed");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `silas devices list` from the control socket's typed answer.
pub fn print_devices(devices: &[silas_web::control::protocol::DeviceInfo], json: bool) {
    if json {
        for d in devices {
            println!("{}", serde_json::to_string(d).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<22} {:<10} {:<28} {:<28} LABEL",
        "DEVICE", "STATE", "CREATED", "LAST SEEN"
    );
    for d in devices {
        println!(
            "{:<22} {:<10} {:<28} {:<28} {}",
            d.device_id,
            if d.revoked { "revoked" } else { "active" },
            d.created_at.to_string(),
            d.last_seen
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            silas_web::auth::printable_label(&d.label),
        );
    }
}

/// Build the daemon's owner authentication over `store`, with the CLI
/// credential in place.
pub fn owner_auth(cfg: &Config, store: &Store) -> Result<Arc<OwnerAuth>, CliError> {
    let auth = OwnerAuth::new(
        cfg.channels.web.auth_token.clone(),
        Arc::new(StoreDevices(store.clone())),
        Arc::new(StoreAudit(store.clone())),
    )
    .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    ensure_cli_device(&auth, &cfg.data_dir)?;
    Ok(Arc::new(auth))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cli_token_is_written_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let auth = OwnerAuth::ephemeral(None);
        ensure_cli_device(&auth, dir.path()).unwrap();
        let path = cli_token_path(dir.path());
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let first = read_cli_token(dir.path()).unwrap().unwrap();
        assert!(auth.identify(&first).is_some());
        // Still valid: kept, no second CLI device; an older 0600 file is
        // opened to the group.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        ensure_cli_device(&auth, dir.path()).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(read_cli_token(dir.path()).unwrap().unwrap(), first);
        assert_eq!(auth.list().len(), 1);
        // A lost credential: a new device, the old one revoked.
        fs::remove_file(&path).unwrap();
        ensure_cli_device(&auth, dir.path()).unwrap();
        let second = read_cli_token(dir.path()).unwrap().unwrap();
        assert_ne!(first, second);
        assert!(auth.identify(&first).is_none());
        assert!(auth.identify(&second).is_some());
    }

    #[test]
    fn a_world_readable_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = cli_token_path(dir.path());
        fs::write(&path, "abc").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_cli_token(dir.path()).unwrap_err();
        assert!(e.one_line().contains("readable by other users"), "{e:?}");
    }

    #[test]
    fn pairing_banner_has_link_and_qr() {
        let b = pairing_banner("http://127.0.0.1:8420/#pair=abc");
        assert!(b.contains("http://127.0.0.1:8420/#pair=abc"));
        assert!(b.lines().count() > 10, "{b}");
    }
}
