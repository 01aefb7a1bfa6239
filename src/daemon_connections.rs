//! The daemon's connection skills (issue #17 item 6): the
//! [`ConnectionRuntime`] over the installed skills, the sandbox, the
//! encrypted secret store and the connection egress (the owner's explicit
//! `connections.host_pins`, audited at start).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use silas_actors::cards::CardTimeouts;
use silas_actors::connection::runtime::{
    ConnectionRuntime, ConnectionRuntimeArgs, ConnectionSecrets, default_manager,
};
use silas_actors::skills::SkillHost;
use silas_core::config::Config;
use silas_core::{Coded, ErrorCode};
use silas_execution::connection_setup::{ConnectionEgress, SecretSink};
use silas_keys::secrets::SecretStore;
use silas_storage::Store;
use tokio::sync::watch;
use zeroize::Zeroizing;

use crate::error::CliError;

/// The encrypted secret store, as connection setups use it: a new token
/// for a ref replaces the old one.
struct StoreSecrets(Arc<SecretStore>);

impl SecretSink for StoreSecrets {
    fn put(&self, ref_id: &str, value: &[u8]) -> Result<(), String> {
        self.0.remove(ref_id).map_err(|e| e.to_string())?;
        self.0.put(ref_id, value).map_err(|e| e.to_string())
    }
    fn remove(&self, ref_id: &str) {
        if let Err(e) = self.0.remove(ref_id) {
            tracing::warn!(code = %e.code(), "secret not removed: {e}");
        }
    }
}

impl ConnectionSecrets for StoreSecrets {
    fn get(&self, ref_id: &str) -> Result<Zeroizing<Vec<u8>>, String> {
        self.0.get(ref_id).map_err(|e| e.to_string())
    }
}

fn invalid(e: impl std::fmt::Display) -> CliError {
    CliError::new(ErrorCode::ECfgInvalid, e.to_string())
}

pub fn build(
    cfg: &Config,
    store: &Store,
    skills: Arc<SkillHost>,
    stop: watch::Receiver<bool>,
    timeouts: CardTimeouts,
    secrets: Arc<SecretStore>,
) -> Result<Arc<ConnectionRuntime>, CliError> {
    let launcher = silas_sandbox::Launcher::current_exe()
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;
    let c = &cfg.connections;
    let mut pins: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for (host, addrs) in &c.host_pins {
        let parsed = addrs
            .iter()
            .map(|a| a.trim().parse::<IpAddr>().map_err(invalid))
            .collect::<Result<Vec<_>, _>>()?;
        pins.insert(host.clone(), parsed);
    }
    if !pins.is_empty() || !c.trusted_private_cidrs.is_empty() {
        // The owner's explicit egress statements, on the record.
        let data =
            json!({"host_pins": c.host_pins, "trusted_private_cidrs": c.trusted_private_cidrs});
        if let serde_json::Value::Object(o) = data {
            store.audit().log("connection.egress_configured", o)?;
        }
    }
    let egress = ConnectionEgress::new(pins, c.trusted_private_cidrs.clone()).map_err(invalid)?;
    Ok(ConnectionRuntime::new(ConnectionRuntimeArgs {
        store: store.clone(),
        skills,
        sandbox: silas_sandbox::SubprocessSandbox::new(launcher),
        work_base: cfg.sandbox_work_dir(),
        secrets: Arc::new(StoreSecrets(secrets)),
        egress: Some(egress),
        timeouts,
        setup_timeout: Duration::from_secs(c.setup_timeout_seconds),
        stop,
        stream: Arc::new(silas_actors::stream::StreamHandle::find),
        manager: default_manager(),
    }))
}
