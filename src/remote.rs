//! The CLI commands that read or change live state: over the running
//! daemon's control socket (`{data_dir}/control.sock`) when one runs, else
//! directly on the store where that makes sense (redb allows one process
//! at a time, and the daemon holds it).
//!
//! * `status` — the daemon's state; "not running" exits 3 (systemd's
//!   "program is not running" convention).
//! * `audit tail|verify`, `work list|show` — socket, else the store.
//! * `work cancel`, `pair`, `devices` — the daemon only (`pair`/`devices`
//!   keep `--url` for the loopback HTTP API).
//! * `config check` — against the running configuration when a daemon runs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_core::terminal::one_line;
use silas_web::control::protocol::{
    AuditVerifyReport, OnDiskConfig, SOCKET_FILE, StatusReport, WorkSummary,
};
use silas_web::control::{ClientError, ControlClient, OwnerToken, Request, Response};

use crate::cli::{AuditCommand, DevicesCommand, StatusArgs, WorkCommand};
use crate::error::{CliError, coded};

/// Exit code of `silas status` when no daemon runs.
pub const NOT_RUNNING_EXIT: u8 = 3;

pub fn socket_path(cfg: &Config) -> PathBuf {
    cfg.data_dir.join(SOCKET_FILE)
}

/// Whether a daemon listens on the control socket in `data_dir` (a killed
/// daemon's socket file is not enough: something must accept).
pub fn daemon_listens(data_dir: &std::path::Path) -> bool {
    std::os::unix::net::UnixStream::connect(data_dir.join(SOCKET_FILE)).is_ok()
}

/// The owner credential the CLI presents: `$SILAS_WEB_TOKEN`, then the CLI
/// credential file, then `channels.web.auth_token` (as `silas chat`).
fn owner_token(cfg: &Config) -> Result<Option<OwnerToken>, CliError> {
    let token = std::env::var(crate::chat::TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .map(Ok)
        .or_else(|| crate::devices::read_cli_token(&cfg.data_dir).transpose())
        .transpose()?
        .or_else(|| cfg.channels.web.auth_token.clone());
    Ok(token.map(OwnerToken::new))
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    crate::error::runtime(&mut tokio::runtime::Builder::new_current_thread())
}

/// The running daemon, authenticated; `None` when none runs.
async fn connect(cfg: &Config) -> Result<Option<ControlClient>, CliError> {
    let path = socket_path(cfg);
    let client = match ControlClient::open(&path).await {
        Ok(c) => c,
        Err(ClientError::NotRunning) => return Ok(None),
        Err(e) => {
            return Err(CliError::new(
                silas_core::Coded::code(&e),
                format!("cannot reach the daemon at {}: {e}", path.display()),
            ));
        }
    };
    let token = owner_token(cfg)?.ok_or_else(|| {
        CliError::new(
            ErrorCode::EChannelAuth,
            format!(
                "a daemon runs but there is no owner credential to present: {} is missing (set {} or channels.web.auth_token)",
                crate::devices::cli_token_path(&cfg.data_dir).display(),
                crate::chat::TOKEN_ENV
            ),
        )
    })?;
    client.hello(token).await.map(Some).map_err(coded)
}

/// One request to the running daemon; `Ok(None)` when none runs.
pub(crate) fn ask(cfg: &Config, req: Request) -> Result<Option<Response>, CliError> {
    runtime()?.block_on(async {
        match connect(cfg).await? {
            Some(mut c) => c.call(&req).await.map(Some).map_err(coded),
            None => Ok(None),
        }
    })
}

/// The running daemon's web address (`http://host:port`), as its control
/// socket reports it: the only address the CLI hands its owner credential
/// to unless the owner names one (`--url`). The configured port alone is
/// not enough: while the daemon is down any local process may listen
/// there, and `silas chat` sent it the CLI's credential, which then worked
/// on the real daemon (red-team F2).
pub(crate) fn running_web_url(cfg: &Config) -> Result<String, CliError> {
    match ask(cfg, Request::Status) {
        Ok(Some(Response::Status(r))) => Ok(r.web_url.trim_end_matches('/').to_string()),
        _ => Err(CliError::new(
            ErrorCode::EChannelDisconnected,
            format!(
                "no Silas daemon runs on {} (its control socket does not answer), so no \
                 credential was sent: start it with `silas start`, or pass --url to reach one \
                 elsewhere{}",
                cfg.data_dir.display(),
                elsewhere_hint(cfg)
            ),
        )),
    }
}

/// A request only the running daemon can answer.
pub(crate) fn ask_daemon(cfg: &Config, req: Request, what: &str) -> Result<Response, CliError> {
    ask(cfg, req)?.ok_or_else(|| {
        CliError::new(
            ErrorCode::EChannelDisconnected,
            format!(
                "{what} needs the running daemon, and none runs on {} (start it with `silas start`){}",
                cfg.data_dir.display(),
                elsewhere_hint(cfg)
            ),
        )
    })
}

pub(crate) fn unexpected(r: &Response) -> CliError {
    coded(silas_web::control::client::unexpected(r))
}

fn json_line<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}

// ------------------------------------------------------------------ status

pub fn status(cfg: &Config, args: StatusArgs) -> Result<ExitCode, CliError> {
    let report = match ask(cfg, Request::Status)? {
        Some(Response::Status(r)) => r,
        Some(other) => return Err(unexpected(&other)),
        None => {
            if args.json {
                println!("{{\"running\":false}}");
            } else {
                println!("{}", not_running(cfg));
            }
            return Ok(ExitCode::from(NOT_RUNNING_EXIT));
        }
    };
    if args.json {
        json_line(&report);
    } else {
        print!("{}", status_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

// ------------------------------------------------------------------ stop

/// `silas stop`: asks for the orderly shutdown, then waits for the control
/// socket to stop answering — the daemon's last step before it exits.
pub fn stop(cfg: &Config) -> Result<ExitCode, CliError> {
    let pid = match ask(cfg, Request::Stop)? {
        Some(Response::Stopping { pid }) => pid,
        Some(other) => return Err(unexpected(&other)),
        None => {
            // Already stopped is what was asked for (as `systemctl stop`).
            println!("{}", not_running(cfg));
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!("silas: stopping (pid {pid}): finishing turns in flight…");
    // Turns drain, then the server, then the actors: up to three graces.
    let patience = cfg
        .backpressure
        .shutdown_grace_seconds
        .saturating_mul(3)
        .saturating_add(10);
    let deadline = Instant::now() + Duration::from_secs(patience);
    let sock = socket_path(cfg);
    while Instant::now() < deadline {
        let gone = std::os::unix::net::UnixStream::connect(&sock).is_err();
        if gone && exited(pid) {
            println!("silas: stopped");
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(CliError::new(
        ErrorCode::EChannelTimeout,
        format!(
            "the daemon (pid {pid}) is still shutting down after {}s; `kill {pid}` asks \
             again, its log says what it waits for",
            patience
        ),
    ))
}

/// Whether `pid` has ended: gone, or a zombie its parent has yet to reap.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// What `status` and `stop` say when no daemon answers.
fn not_running(cfg: &Config) -> String {
    format!(
        "silas: not running (no daemon on {}){}",
        socket_path(cfg).display(),
        elsewhere_hint(cfg)
    )
}

/// When the data dir itself is missing, the daemon may well run — started
/// in another directory, whose `./data` this is not.
pub(crate) fn elsewhere_hint(cfg: &Config) -> String {
    if cfg.data_dir.exists() {
        return String::new();
    }
    format!(
        "\n  there is no data directory at {}: if you started the daemon in another \
         directory, run this there or pass --data-dir DIR (`silas start` prints its data \
         directory)",
        cfg.data_dir.display()
    )
}

fn duration_text(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

pub fn status_text(r: &StatusReport) -> String {
    let mut out = format!(
        "silas: running (pid {}, version {}, up {} since {})\n",
        r.pid,
        r.version,
        duration_text(r.uptime_seconds),
        r.started_at
    );
    out.push_str(&format!("  web:           {}/\n", r.web_url));
    if let Some(model) = r.model.strip_prefix("model: ") {
        out.push_str(&format!("  model:         {model}\n"));
    }
    out.push_str(&format!("  connections:   {}\n", r.connections));
    match &r.queue {
        Some(q) => out.push_str(&format!(
            "  turn queue:    {} ({} of {} pending, {} scope(s) waiting{})\n",
            q.pressure,
            q.pending_total,
            q.capacity_total,
            q.scopes_waiting,
            if q.accepting { "" } else { ", draining" }
        )),
        None => out.push_str("  turn queue:    unavailable (restarting)\n"),
    }
    out.push_str(&format!("  pending cards: {}\n", r.pending_cards));
    if !r.providers.is_empty() {
        let states: Vec<String> = r
            .providers
            .iter()
            .map(|(name, state)| format!("{name} {state}"))
            .collect();
        out.push_str(&format!("  providers:     {}\n", states.join(", ")));
    }
    for (name, state) in &r.channels {
        out.push_str(&format!("  {:<15}{state}\n", format!("{name}:")));
    }
    if r.running_work.is_empty() {
        out.push_str("  running work:  none\n");
    } else {
        out.push_str(&format!("  running work:  {}\n", r.running_work.join(", ")));
    }
    match &r.next_jobs {
        None => out.push_str("  scheduler:     disabled\n"),
        Some(jobs) if jobs.is_empty() => out.push_str("  scheduler:     no jobs\n"),
        Some(jobs) => {
            out.push_str("  next jobs:\n");
            for j in jobs.iter().take(5) {
                let when = j
                    .next_fire
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "-".into());
                out.push_str(&format!("    {when}  {}  ({})\n", j.job_id, j.schedule));
            }
        }
    }
    out
}

// ------------------------------------------------------------------ audit

pub fn audit(cfg: &Config, cmd: AuditCommand) -> Result<ExitCode, CliError> {
    let req = match &cmd {
        AuditCommand::Tail { lines, .. } => Request::AuditTail { lines: *lines },
        AuditCommand::Verify { from_checkpoint } => Request::AuditVerify {
            from_checkpoint: from_checkpoint.clone(),
        },
        AuditCommand::Acknowledge => Request::AuditAcknowledge,
    };
    let remote = ask(cfg, req)?;
    match (cmd, remote) {
        (AuditCommand::Tail { json, .. }, Some(Response::AuditTail { entries })) => {
            crate::commands::print_audit_tail(&entries, json);
            Ok(ExitCode::SUCCESS)
        }
        (AuditCommand::Verify { .. }, Some(Response::AuditVerified(report))) => {
            print_verified(&report);
            Ok(ExitCode::SUCCESS)
        }
        (AuditCommand::Acknowledge, Some(Response::AuditAcknowledged { entries })) => {
            print_acknowledged(entries);
            Ok(ExitCode::SUCCESS)
        }
        (_, Some(other)) => Err(unexpected(&other)),
        // No daemon: the store is free to open.
        (cmd, None) => {
            let store = crate::commands::open_existing_store(&cfg.data_dir)?;
            match cmd {
                AuditCommand::Tail { lines, json } => {
                    crate::commands::print_audit_tail(&store.audit().tail(lines)?, json);
                }
                AuditCommand::Verify { from_checkpoint } => {
                    let seal = owner_seal(cfg)?;
                    let report =
                        crate::control::verify_audit(&store, &seal, from_checkpoint.as_deref())?;
                    print_verified(&report);
                }
                AuditCommand::Acknowledge => {
                    let seal = owner_seal(cfg)?;
                    print_acknowledged(crate::control::acknowledge_tampering(&store, &seal)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The owner key's seal over the audit log, for the CLI without a daemon.
fn owner_seal(cfg: &Config) -> Result<silas_actors::audit_seal::OwnerSeal, CliError> {
    Ok(silas_actors::audit_seal::OwnerSeal::new(
        std::sync::Arc::new(crate::commands::keystore_from_config(cfg).load()?),
    ))
}

fn print_acknowledged(entries: usize) {
    if entries == 0 {
        println!("no tampering recorded since the last acknowledgement");
    } else {
        println!(
            "acknowledged {entries} tampering record(s); `silas audit verify` no longer reports them"
        );
    }
}

fn print_verified(r: &AuditVerifyReport) {
    println!("audit chain ok: {} entries verified", r.entries_checked);
    for line in crate::commands::seal_report_lines(&r.seal) {
        println!("{line}");
    }
}

// ------------------------------------------------------------------ work

pub fn work(cfg: &Config, cmd: WorkCommand) -> Result<ExitCode, CliError> {
    match cmd {
        WorkCommand::List { json } => {
            let (items, live) = match ask(cfg, Request::WorkList)? {
                Some(Response::WorkItems { items }) => (items, true),
                Some(other) => return Err(unexpected(&other)),
                None => {
                    let store = crate::commands::open_existing_store(&cfg.data_dir)?;
                    (crate::control::list_work(&store)?, false)
                }
            };
            print_work_list(&items, json, live);
        }
        WorkCommand::Show { id, json } => {
            let (item, changes) = match ask(cfg, Request::WorkShow { id: id.clone() })? {
                Some(Response::WorkItem { item, changes }) => (*item, changes),
                Some(other) => return Err(unexpected(&other)),
                None => {
                    let store = crate::commands::open_existing_store(&cfg.data_dir)?;
                    let item = store.work_items().get(&id)?.ok_or_else(|| {
                        CliError::new(ErrorCode::EDbNotFound, format!("no work item {id:?}"))
                    })?;
                    let changes = silas_actors::change_history::history(&store, &id)?;
                    (item, changes)
                }
            };
            if json {
                json_line(&item);
            } else {
                print!("{}", work_item_text(&item));
                for (n, step) in changes.iter().enumerate() {
                    let label = if n == 0 { "changes" } else { "" };
                    println!("{label:<12}{}", one_line(&step.to_string()));
                }
            }
        }
        WorkCommand::Cancel { id } => {
            let r = match ask_daemon(cfg, Request::WorkCancel { id }, "cancelling work")? {
                Response::WorkCancelled(r) => r,
                other => return Err(unexpected(&other)),
            };
            if r.already_ended {
                println!("{} had already ended ({}): nothing to cancel", r.id, r.now);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "cancelled {} (was {}{}); it is now {}",
                r.id,
                r.previous,
                if r.was_running {
                    ", its run was stopped"
                } else {
                    ""
                },
                r.now
            );
            if !r.also_cancelled.is_empty() {
                println!("  also cancelled: {}", r.also_cancelled.join(", "));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `live`: a running daemon answered. Read from the store while it is
/// stopped, an item it was running still says `running`: it is marked, and
/// a line says it resumes at the next start.
fn print_work_list(items: &[WorkSummary], json: bool, live: bool) {
    if json {
        for w in items {
            json_line(w);
        }
        return;
    }
    if items.is_empty() {
        println!("no work items");
        return;
    }
    // As wide as the longest id (offline plans' ids are 29 characters).
    let id_width = items
        .iter()
        .map(|w| w.id.chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    println!(
        "{:<id_width$} {:<8} {:<9} {:<8} {:<28} TITLE",
        "ID", "TYPE", "STATUS", "ATTEMPTS", "CREATED"
    );
    let mut interrupted = false;
    for w in items {
        let title: String = one_line(&w.title).chars().take(60).collect();
        let mut status = w.status.as_str().to_owned();
        if !live && w.status == silas_core::model::work::WorkItemStatus::Running {
            status.push('*');
            interrupted = true;
        }
        println!(
            "{:<id_width$} {:<8} {:<9} {:<8} {:<28} {title}",
            w.id,
            w.kind.as_str(),
            status,
            w.attempts,
            w.created_at.to_string()
        );
    }
    if interrupted {
        println!("* not running now: the daemon is stopped; it resumes these at `silas start`");
    }
}

/// `silas work show ID`: what the owner asks about an item, one field a
/// line; `--json` has the whole record. Titles, briefings and failure
/// text come from the model and are shown, never obeyed, by the terminal.
fn work_item_text(w: &silas_core::model::work::WorkItem) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let mut field = |name: &str, value: &str| {
        let _ = writeln!(t, "{name:<12}{value}");
    };
    field("id", &one_line(&w.id));
    field("title", &one_line(&w.title));
    field("type", w.kind.as_str());
    let mut status = w.status.as_str().to_string();
    if w.attempts > 0 {
        status.push_str(&format!(
            " (attempt {} of {})",
            w.attempts, w.budget.max_attempts
        ));
    }
    field("status", &status);
    field("created", &w.created_at.to_string());
    if let Some(scope) = &w.scope_id {
        field("scope", &one_line(scope));
    }
    if let Some(schedule) = &w.schedule {
        field("schedule", &one_line(schedule));
    }
    if let Some(ws) = &w.workspace {
        field(
            "workspace",
            &format!(
                "{} ({}, {})",
                one_line(&ws.name),
                ws.access.as_str(),
                match ws.apply {
                    silas_core::model::workspace::ApplyMode::Direct => "applied directly",
                    silas_core::model::workspace::ApplyMode::Review => "applied after review",
                }
            ),
        );
    }
    if !w.skills.is_empty() {
        field("skills", &one_line(&w.skills.join(", ")));
    }
    for (label, ids) in [
        ("tasks", &w.tasks),
        ("depends on", &w.depends_on),
        ("inputs from", &w.input_artifacts_from),
    ] {
        if !ids.is_empty() {
            field(label, &one_line(&ids.join(", ")));
        }
    }
    let used = &w.budget_used;
    field(
        "budget",
        &format!(
            "{} of {} tokens, ${:.2} of ${:.2}, {:.0} of {} s",
            used.tokens,
            w.budget.max_tokens,
            used.cost_usd,
            w.budget.max_cost_usd,
            used.wall_time_seconds,
            w.budget.max_wall_time_seconds
        ),
    );
    let checks: Vec<String> = w
        .verify
        .iter()
        .map(|c| one_line(&c.name).into_owned())
        .collect();
    if !checks.is_empty() {
        field(
            "checks",
            &format!(
                "{} ({} result{} recorded)",
                checks.join(", "),
                w.verification_results.len(),
                if w.verification_results.len() == 1 {
                    ""
                } else {
                    "s"
                }
            ),
        );
    }
    if let Some(why) = &w.failure_context {
        field("failure", &one_line(why));
    }
    let _ = writeln!(t, "\n{}", silas_core::terminal::printable(w.body.trim()));
    t
}

// ------------------------------------------------------------------ devices

pub fn pair(cfg: &Config, url: Option<&str>) -> Result<ExitCode, CliError> {
    if url.is_some() {
        return crate::devices::pair(cfg, url);
    }
    match ask_daemon(cfg, Request::Pair, "pairing")? {
        Response::PairingLink { link } => {
            print!("{}", crate::devices::pairing_banner(&link));
            Ok(ExitCode::SUCCESS)
        }
        other => Err(unexpected(&other)),
    }
}

pub fn devices(cfg: &Config, cmd: DevicesCommand) -> Result<ExitCode, CliError> {
    match cmd {
        DevicesCommand::List { url: Some(u), json } => {
            crate::devices::devices(cfg, DevicesCommand::List { url: Some(u), json })
        }
        DevicesCommand::Revoke {
            device_id,
            url: Some(u),
        } => crate::devices::devices(
            cfg,
            DevicesCommand::Revoke {
                device_id,
                url: Some(u),
            },
        ),
        DevicesCommand::List { url: None, json } => {
            match ask_daemon(cfg, Request::DevicesList, "listing devices")? {
                Response::Devices { devices } => {
                    crate::devices::print_devices(&devices, json);
                    Ok(ExitCode::SUCCESS)
                }
                other => Err(unexpected(&other)),
            }
        }
        DevicesCommand::Revoke {
            device_id,
            url: None,
        } => match ask_daemon(
            cfg,
            Request::DevicesRevoke { device_id },
            "revoking a device",
        )? {
            Response::DeviceRevoked {
                device_id,
                already: true,
            } => {
                println!("{device_id} was already revoked: nothing changed");
                Ok(ExitCode::SUCCESS)
            }
            Response::DeviceRevoked { device_id, .. } => {
                println!("revoked {device_id}; its open connections were closed");
                Ok(ExitCode::SUCCESS)
            }
            other => Err(unexpected(&other)),
        },
    }
}

// ------------------------------------------------------------------ config

/// `silas config check` against the running daemon; `None` when none runs
/// (the caller checks the file on its own then).
pub fn config_check(cfg: &Config) -> Result<Option<ExitCode>, CliError> {
    let report = match ask(cfg, Request::ConfigCheck)? {
        Some(Response::Config(r)) => r,
        Some(other) => return Err(unexpected(&other)),
        None => return Ok(None),
    };
    let running = &report.running;
    println!("config in force (running daemon): {}", report.source);
    crate::commands::print_config_summary(running);
    match &report.on_disk {
        OnDiskConfig::Same => {
            println!("config on disk: same as the running daemon's");
            Ok(Some(ExitCode::SUCCESS))
        }
        OnDiskConfig::Differs { sections } => {
            println!(
                "config on disk: valid, differs in {} (restart the daemon to apply)",
                sections.join(", ")
            );
            Ok(Some(ExitCode::SUCCESS))
        }
        OnDiskConfig::Invalid { errors } => {
            eprintln!("config on disk is invalid (the daemon keeps running the config above):");
            for e in errors {
                eprintln!("{e}");
            }
            Ok(Some(ExitCode::from(2)))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short_and_readable() {
        assert_eq!(duration_text(5), "5s");
        assert_eq!(duration_text(65), "1m 5s");
        assert_eq!(duration_text(3 * 3600 + 120), "3h 2m");
        assert_eq!(duration_text(2 * 86_400 + 3600), "2d 1h");
    }

    #[test]
    fn status_text_names_every_part() {
        let r = StatusReport {
            version: "0.1.0".into(),
            pid: 42,
            started_at: silas_core::Timestamp::now(),
            uptime_seconds: 61,
            web_url: "http://127.0.0.1:8420".into(),
            connections: 2,
            queue: None,
            pending_cards: 1,
            running_work: vec!["w-1".into()],
            next_jobs: None,
            providers: [
                ("a".to_string(), "closed".to_string()),
                ("b".into(), "open".into()),
            ]
            .into_iter()
            .collect(),
            model: "model: offline (no OPENROUTER_API_KEY set) — rule-based responder, not an LLM"
                .into(),
            channels: [("telegram".to_string(), "ok".to_string())]
                .into_iter()
                .collect(),
        };
        let t = status_text(&r);
        for want in [
            "running (pid 42",
            "up 1m 1s",
            "http://127.0.0.1:8420/",
            "connections:   2",
            "pending cards: 1",
            "running work:  w-1",
            "scheduler:     disabled",
            "providers:     a closed, b open",
            "telegram:      ok",
            "model:         offline (no OPENROUTER_API_KEY set)",
        ] {
            assert!(t.contains(want), "{want:?} in {t}");
        }
    }

    #[test]
    fn work_show_text_names_the_fields_and_shows_escapes() {
        let mut w = silas_core::model::work::WorkItem::new(
            "t-1",
            silas_core::model::work::WorkItemType::Task,
            "Fix\u{1b}[2J the\nbuild",
        );
        w.body = "Step one.\n\u{1b}]52;c;eA==\u{7}".into();
        w.failure_context = Some("exit 2".into());
        let text = work_item_text(&w);
        assert!(!text.contains(['\u{1b}', '\u{7}']), "{text:?}");
        assert!(
            text.lines().any(|l| l == "title       Fix\\e[2J the build"),
            "{text}"
        );
        assert!(text.lines().any(|l| l == "failure     exit 2"), "{text}");
        assert!(text.contains("Step one.\n\\e]52;c;eA==\\u{7}"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("budget      0 of ")),
            "{text}"
        );
    }
}
