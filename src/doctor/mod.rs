//! `silas doctor` (issue #13 item 3): one line per check — PASS, WARN or
//! FAIL, what was found and the fix — and exit code 1 when anything failed.
//! `silas start` runs the cheap subset first ([`preflight`]) and stops on a
//! FAIL with the same line.
//!
//! `checks.rs` holds the verdicts (pure, unit-tested), `probe.rs` gathers
//! the facts; this file only orders them.

pub mod checks;
pub(crate) mod probe;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use silas_core::ErrorCode;
use silas_core::config::{Config, KeystoreBackend};
use silas_sandbox::launcher::{SANDBOX_GID, SANDBOX_UID};

use crate::error::CliError;
use checks::{Check, WhenAbsent};

/// Most a path of the data dir may grant (see `commands::initialise`).
const DATA_DIR_MAX: u32 = 0o711;
const PRIVATE_DIR_MAX: u32 = 0o700;
const PRIVATE_FILE_MAX: u32 = 0o600;

/// The data dir's own mode and the private entries in it.
fn layout_checks(cfg: &Config) -> Vec<Check> {
    let d = &cfg.data_dir;
    let mut out = vec![
        checks::mode(
            "data-dir",
            &probe::path_fact(d.clone()),
            DATA_DIR_MAX,
            WhenAbsent::NeedsInit,
        ),
        checks::mode(
            "store-file",
            &probe::path_fact(d.join(silas_storage::STORE_FILE)),
            PRIVATE_FILE_MAX,
            WhenAbsent::NeedsInit,
        ),
        checks::mode(
            "secrets-dir",
            &probe::path_fact(d.join("secrets")),
            PRIVATE_DIR_MAX,
            WhenAbsent::Fine,
        ),
        // The words of every captured message (the daemon narrows it at start).
        checks::mode(
            "memory-index-dir",
            &probe::path_fact(d.join(silas_memory::INDEX_DIR)),
            PRIVATE_DIR_MAX,
            WhenAbsent::Fine,
        ),
    ];
    if cfg.keystore.backend == KeystoreBackend::File {
        let key = cfg.keystore_path();
        if let Some(dir) = key.parent() {
            out.push(checks::mode(
                "keys-dir",
                &probe::path_fact(dir.to_path_buf()),
                PRIVATE_DIR_MAX,
                WhenAbsent::NeedsInit,
            ));
        }
        out.push(checks::mode(
            "key-file",
            &probe::path_fact(key),
            PRIVATE_FILE_MAX,
            WhenAbsent::NeedsInit,
        ));
    }
    out
}

/// Both places commands run: the work dirs' root and the verification dir
/// (which `sandbox.verify_dir` may put elsewhere). The first blocked one is
/// reported.
fn sandbox_dirs_check(cfg: &Config) -> Check {
    let check = |dir: &Path| {
        checks::sandbox_reachable(
            probe::daemon_is_root(),
            dir,
            &probe::ancestors(dir),
            SANDBOX_UID,
            SANDBOX_GID,
        )
    };
    let root = check(&cfg.sandbox_root());
    if root.status == checks::Status::Fail || cfg.verify_dir().starts_with(cfg.sandbox_root()) {
        return root;
    }
    let verify = check(&cfg.verify_dir());
    if verify.status == checks::Status::Fail {
        verify
    } else {
        root
    }
}

fn print(checks: &[Check]) {
    for c in checks {
        println!("{}", c.line());
    }
}

/// `silas doctor`.
pub fn run(config: Option<&Path>, data_dir: Option<PathBuf>) -> Result<ExitCode, CliError> {
    let source = crate::commands::config_source(config);
    let mut cfg = match crate::commands::load_unvalidated(config, data_dir) {
        Ok(c) => c,
        Err(e) => {
            // Nothing else can be checked without a configuration.
            print(&[checks::config(&source, &[e.one_line()])]);
            return Ok(ExitCode::from(1));
        }
    };
    // Judge the layout `silas start` would use.
    let moved = crate::commands::planned_sandbox_root(&cfg);
    if let Some(fallback) = moved.clone() {
        cfg.sandbox.root_dir = Some(fallback);
    }
    let errors: Vec<String> = crate::commands::config_errors(&cfg)
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut report = vec![
        checks::config(&source, &errors),
        checks::user(
            &cfg.data_dir,
            probe::data_dir_owner(&cfg),
            rustix::process::geteuid().as_raw(),
        ),
        checks::disk(&cfg.data_dir, probe::free_space(&cfg)),
    ];
    report.extend(layout_checks(&cfg));
    report.push(checks::landlock(probe::landlock_abi()));
    report.push(sandbox_dirs_check(&cfg));
    if let Some(root) = &moved {
        report.push(Check::pass(
            "sandbox-placement",
            format!(
                "the data dir's parents are closed to the sandbox user, so `silas start` keeps the sandbox dirs in {}",
                root.display()
            ),
        ));
    }
    let runtime = crate::error::runtime(&mut tokio::runtime::Builder::new_current_thread())?;
    let secret = probe::trial_secret(&cfg);
    let trial = runtime.block_on(probe::sandbox_trial(&cfg, &secret));
    report.extend(checks::sandbox_trial(&trial, &secret));
    let addr = probe::web_addr(&cfg);
    let port = runtime.block_on(probe::port_state(&cfg));
    let (soft, hard) = probe::open_files();
    report.push(checks::open_files(soft, hard));
    report.push(checks::port(&addr, &port, false));
    report.push(checks::model(&runtime.block_on(probe::model(&cfg))));
    if let Some(t) = runtime.block_on(probe::telegram(&cfg)) {
        report.push(checks::telegram(&t));
    }
    report.extend(checks::owner_credential(
        probe::keystore(&cfg),
        probe::cli_token(&cfg).as_deref(),
    ));
    let (store, last_audit) = probe::store(&cfg);
    // The daemon may listen on another port than this config's (an
    // environment override at its start): its control socket still answers.
    let daemon_running =
        port == checks::PortState::Silas || crate::remote::daemon_listens(&cfg.data_dir);
    report.push(checks::store(&store, daemon_running));
    let mut floors = Vec::new();
    if let Some(t) = probe::binary_time() {
        floors.push(("the silas binary's build", t));
    }
    if let Some(t) = last_audit {
        floors.push(("the audit log's last entry", t));
    }
    report.push(checks::clock(chrono::Utc::now(), &floors));
    // An unknown zone is the config check's FAIL already.
    if cfg.scheduler.enabled
        && let Ok(zone) = silas_actors::scheduler::parse_timezone(&cfg.scheduler.timezone)
    {
        report.push(checks::timezone(
            cfg.scheduler.timezone.trim(),
            zone.name(),
            probe::unread_tz(&cfg).as_deref(),
        ));
    }
    print(&report);
    Ok(if checks::any_failed(&report) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The cheap check `silas start` runs after initialising, before it serves:
/// the sandbox dirs' reachability (config is validated by loading, the web
/// port by [`port_preflight`] before initialising). A FAIL stops it with the
/// check's line and fix. (The data dir's modes are narrowed by `initialise`
/// itself, and a key file readable by others is refused there.)
pub fn preflight(cfg: &Config) -> Result<(), CliError> {
    // Said, not refused: the owner may be about to free space, and a
    // daemon that runs can still answer what needs no write.
    let disk = checks::disk(&cfg.data_dir, probe::free_space(cfg));
    if disk.status != checks::Status::Pass {
        eprintln!("warning: {}", disk.line());
    }
    fail_with(sandbox_dirs_check(cfg), ErrorCode::ESandboxUnavailable)
}

/// The web port check, run before `start` initialises anything:
/// a second `silas start` from another directory (while the first daemon
/// holds the port) must not leave a new data dir and owner key behind.
pub fn port_preflight(cfg: &Config) -> Result<(), CliError> {
    let runtime = crate::error::runtime(&mut tokio::runtime::Builder::new_current_thread())?;
    let port = runtime.block_on(probe::port_state(cfg));
    fail_with(
        checks::port(&probe::web_addr(cfg), &port, true),
        // A refused start (§18.1 `E_CFG_*`): the fix is `channels.web.port`
        // or stopping the other daemon.
        ErrorCode::ECfgInvalid,
    )
}

fn fail_with(check: checks::Check, code: ErrorCode) -> Result<(), CliError> {
    match check.status {
        checks::Status::Fail => Err(CliError::new(code, check.line())),
        _ => Ok(()),
    }
}
