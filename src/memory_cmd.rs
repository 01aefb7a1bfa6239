//! `silas memory forget|export|import` (issue #18 items 5–6). With a daemon
//! running the request goes over the control socket (the daemon holds the
//! store and the index); without one the CLI opens both itself. Both paths
//! end in [`forget`], [`export`] and [`import`] here, which audit what was
//! done — ids and counts, never a memory's content.

use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use silas_core::config::Config;
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_memory::{Forget, ImportMode, ImportReport, Memory, MemoryError};
use silas_web::control::{Request, Response};

use crate::cli::{ImportModeArg, MemoryCommand};
use crate::error::CliError;

fn coded(e: impl Coded + std::fmt::Display) -> CliError {
    CliError::new(e.code(), e.to_string())
}

fn audit(memory: &Memory, event: &str, data: serde_json::Value) -> Result<(), CliError> {
    if let serde_json::Value::Object(o) = data {
        memory.store().audit().log(event, o).map_err(coded)?;
    }
    Ok(())
}

/// What `forget` was asked, checked: exactly one way of choosing.
pub fn forget_request(
    id: Option<String>,
    scope: Option<String>,
    query: Option<String>,
) -> Result<Forget, CliError> {
    match (id, scope, query) {
        (Some(id), None, None) => Ok(Forget::Id(id)),
        (None, Some(scope), Some(query)) if !query.trim().is_empty() => {
            Ok(Forget::Query { scope, query })
        }
        (None, Some(scope), None) => Ok(Forget::Scope(scope)),
        _ => Err(CliError::new(
            ErrorCode::ECfgInvalid,
            "say what to forget: --id ID, or --scope SCOPE [--query WORDS]",
        )),
    }
}

/// Erases and audits (`memory_forgotten`: how, the ids, by whom).
pub fn forget(memory: &Memory, what: &Forget, by: &str) -> Result<Vec<String>, CliError> {
    use silas_actors::forget::HistoryFilter;
    // What of the conversation goes with it (the turns a restart rehydrates
    // and the live context), decided before the memories are gone.
    let history = match what {
        Forget::Scope(scope) => Some((scope.clone(), HistoryFilter::All)),
        Forget::Query { scope, query } => Some((scope.clone(), HistoryFilter::words(query))),
        Forget::Id(id) => memory
            .get(id)
            .map_err(coded)?
            .and_then(|m| Some((m.session_id?, HistoryFilter::phrase(&m.content)))),
    };
    if let Forget::Scope(scope) | Forget::Query { scope, .. } = what {
        known_scope(memory, scope)?;
    }
    let ids = memory.forget(what).map_err(coded)?;
    // An id names one memory: none erased means the owner mistyped it (or
    // it is already gone), which an audit entry would record as done.
    if let (Forget::Id(id), true) = (what, ids.is_empty()) {
        return Err(CliError::new(
            ErrorCode::EDbNotFound,
            format!("no memory with id {id:?} (nothing was erased)"),
        ));
    }
    let mut turns = 0;
    if let Some((scope, filter)) = history {
        turns = memory
            .store()
            .chronicle()
            .remove_where(&scope, |item| filter.matches(&item.content))
            .map_err(coded)?;
        // The inbox keeps each delivered message and reply (for redelivery
        // and de-duplication): their words go too.
        memory
            .store()
            .inbox()
            .scrub_delivered(&scope, |text| filter.matches(text))
            .map_err(coded)?;
        // Only inside the daemon: the CLI without one has no live context.
        if let Some(stream) = silas_actors::stream::StreamHandle::find() {
            stream.forget_history(&scope, filter);
        }
    }
    let how = match what {
        Forget::Id(_) => "id",
        Forget::Query { .. } => "query",
        Forget::Scope(_) => "scope",
    };
    audit(
        memory,
        "memory_forgotten",
        json!({"how": how, "ids": ids, "count": ids.len(), "turns": turns, "by": by}),
    )?;
    Ok(ids)
}

/// A scope with neither memories nor conversation is a mistyped one (or
/// one already forgotten): said, with the scopes that do hold memories,
/// rather than "nothing to forget" and success.
fn known_scope(memory: &Memory, scope: &str) -> Result<(), CliError> {
    let turns = memory
        .store()
        .chronicle()
        .get_recent(scope, 1)
        .map_err(coded)?;
    if !turns.is_empty() || !memory.search_session(scope).map_err(coded)?.is_empty() {
        return Ok(());
    }
    let mut known = memory.scopes().map_err(coded)?;
    let more = known.len().saturating_sub(10);
    known.truncate(10);
    let list = match (known.is_empty(), more) {
        (true, _) => "no scope holds memories".to_string(),
        (false, 0) => format!("scopes with memories: {}", known.join(", ")),
        (false, n) => format!("scopes with memories: {} and {n} more", known.join(", ")),
    };
    Err(CliError::new(
        ErrorCode::EDbNotFound,
        format!(
            "nothing is recorded under scope {scope:?} (no memories, no conversation; \
             already forgotten, or mistyped?): nothing was erased; {list}"
        ),
    ))
}

fn parse_since(since: Option<&str>) -> Result<Option<Timestamp>, CliError> {
    since
        .map(|s| {
            Timestamp::parse(s).map_err(|e| {
                CliError::new(
                    ErrorCode::ECfgInvalid,
                    format!("--since {s:?}: not an RFC 3339 time ({e})"),
                )
            })
        })
        .transpose()
}

/// Writes the bundle to `path` (created 0600, never over an existing file).
pub fn export(
    memory: &Memory,
    path: &Path,
    since: Option<&str>,
    include_raw: bool,
    by: &str,
) -> Result<usize, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let since = parse_since(since)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("{}: {e}", path.display())))?;
    let mut out = BufWriter::new(file);
    let n = match memory.export(since, include_raw, &mut out) {
        Ok(n) => n,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(path);
            return Err(coded(e));
        }
    };
    audit(
        memory,
        "memory_exported",
        json!({"records": n, "include_raw": include_raw, "since": since, "by": by}),
    )?;
    Ok(n)
}

pub fn import(
    memory: &Memory,
    path: &Path,
    mode: ImportMode,
    by: &str,
) -> Result<ImportReport, CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("{}: {e}", path.display())))?;
    let report = memory
        .import(&mut BufReader::new(file), mode)
        .map_err(|e: MemoryError| coded(e))?;
    audit(
        memory,
        "memory_imported",
        json!({"records": report.records, "replaced": report.replaced,
               "mode": if mode == ImportMode::Replace { "replace" } else { "merge" }, "by": by}),
    )?;
    Ok(report)
}

/// PATH as the owner typed it, absolute against the CLI's cwd (the daemon's
/// cwd means nothing to the owner).
fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    Ok(std::env::current_dir()
        .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("current directory: {e}")))?
        .join(path))
}

fn path_text(p: &Path) -> Result<String, CliError> {
    p.to_str().map(str::to_owned).ok_or_else(|| {
        CliError::new(
            ErrorCode::ECfgInvalid,
            format!("{} is not UTF-8", p.display()),
        )
    })
}

/// The memory store without a daemon: the store and the index in the data dir.
fn open_direct(cfg: &Config) -> Result<Memory, CliError> {
    let store = crate::commands::open_existing_store(&cfg.data_dir)?;
    let memory = Memory::open(store, &cfg.data_dir.join(silas_memory::INDEX_DIR)).map_err(coded)?;
    // Forget-by-query searches the index: let a rebuild finish first.
    memory.wait_ready(std::time::Duration::from_secs(600));
    Ok(memory)
}

pub fn run(cfg: &Config, cmd: MemoryCommand) -> Result<ExitCode, CliError> {
    match cmd {
        MemoryCommand::Forget { id, query, scope } => {
            let what = forget_request(id.clone(), scope.clone(), query.clone())?;
            let req = Request::MemoryForget { id, scope, query };
            let ids = match crate::remote::ask(cfg, req)? {
                Some(Response::MemoryForgotten { ids }) => ids,
                Some(other) => return Err(crate::remote::unexpected(&other)),
                None => forget(&open_direct(cfg)?, &what, "cli")?,
            };
            if ids.is_empty() {
                println!("nothing to forget");
            } else {
                println!(
                    "forgot {} memor{}",
                    ids.len(),
                    if ids.len() == 1 { "y" } else { "ies" }
                );
            }
        }
        MemoryCommand::Export {
            path,
            since,
            include_raw,
        } => {
            let abs = absolute(&path)?;
            let req = Request::MemoryExport {
                path: path_text(&abs)?,
                since: since.clone(),
                include_raw,
            };
            let n = match crate::remote::ask(cfg, req)? {
                Some(Response::MemoryExported { records }) => records,
                Some(other) => return Err(crate::remote::unexpected(&other)),
                None => export(
                    &open_direct(cfg)?,
                    &abs,
                    since.as_deref(),
                    include_raw,
                    "cli",
                )?,
            };
            println!("exported {n} memories to {}", abs.display());
        }
        MemoryCommand::Import { path, mode } => {
            let abs = absolute(&path)?;
            let replace = mode == ImportModeArg::Replace;
            let req = Request::MemoryImport {
                path: path_text(&abs)?,
                replace,
            };
            let (records, replaced) = match crate::remote::ask(cfg, req)? {
                Some(Response::MemoryImported { records, replaced }) => (records, replaced),
                Some(other) => return Err(crate::remote::unexpected(&other)),
                None => {
                    let mode = if replace {
                        ImportMode::Replace
                    } else {
                        ImportMode::Merge
                    };
                    let r = import(&open_direct(cfg)?, &abs, mode, "cli")?;
                    (r.records, r.replaced)
                }
            };
            if replace {
                println!("imported {records} memories; they are now the whole memory");
            } else {
                println!("imported {records} memories ({replaced} replaced one with the same id)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How many memories the web app's Memory panel lists at once.
const WEB_LIST: usize = 30;

fn view(m: silas_core::model::memory::MemoryItem) -> silas_web::protocol::MemoryView {
    silas_web::protocol::MemoryView {
        preview: m.content.chars().take(200).collect(),
        memory_id: m.memory_id,
        memory_type: m.memory_type.as_str().to_owned(),
        trust_level: m.trust_level.as_str().to_owned(),
        taint: m.taint.as_str().to_owned(),
        created_at: m.created_at.to_string(),
    }
}

/// The web app's owner-only memory frames (issue #18 item 5): list the
/// owner conversation's memories (by query, or the most recent) and forget
/// one by id, exactly as `silas memory forget --id` does (audited
/// `memory_forgotten` with ids, never content). Returns the list to show
/// and what was forgotten.
pub async fn web_op(
    memory: Option<Memory>,
    owner: bool,
    connection_id: &str,
    frame: silas_web::protocol::ClientFrame,
) -> Result<(Vec<silas_web::protocol::MemoryView>, Vec<String>), silas_web::protocol::ProtocolError>
{
    use silas_web::protocol::{ClientFrame, ProtocolError};
    let refused = |code: ErrorCode, why: String| ProtocolError::new(code.as_str(), why, None);
    if !owner {
        return Err(refused(
            ErrorCode::EChannelAuth,
            "only the owner manages memories".into(),
        ));
    }
    let memory =
        memory.ok_or_else(|| refused(ErrorCode::EDbIo, "the memory index is not open".into()))?;
    let by = format!("owner:web:{connection_id}");
    tokio::task::spawn_blocking(move || {
        let mut forgotten = Vec::new();
        let query = match frame {
            ClientFrame::MemoryForget { memory_id } => {
                forgotten = forget(&memory, &Forget::Id(memory_id), &by).map_err(|e| {
                    let (code, why) = e.parts();
                    refused(code, why)
                })?;
                String::new()
            }
            ClientFrame::MemoryList { query } => query,
            _ => String::new(),
        };
        let scope = silas_actors::turn::OWNER_SCOPE;
        let found = if query.trim().is_empty() {
            // The last 90 days, bounded: enough to find the recent ones.
            let now = Timestamp::now();
            let since =
                Timestamp::from_micros(now.as_micros() - 90 * 86_400 * 1_000_000).unwrap_or(now);
            let mut all = memory
                .search_between(scope, since, now, 5_000)
                .map_err(|e| refused(e.code(), e.to_string()))?;
            all.reverse();
            all.truncate(WEB_LIST);
            all
        } else {
            memory
                .search_keyword(scope, &query, WEB_LIST)
                .map_err(|e| refused(e.code(), e.to_string()))?
        };
        Ok((found.into_iter().map(view).collect(), forgotten))
    })
    .await
    .map_err(|e| refused(ErrorCode::EDbIo, e.to_string()))?
}

/// One consolidator round over every scope (§6.4): merges and prunes, and
/// audits `memory_consolidated` per scope that changed (ids and counts,
/// never content). Returns the number of memories removed.
pub fn consolidate_all(memory: &Memory, now: Timestamp) -> Result<usize, CliError> {
    let mut removed = 0;
    let changed = memory
        .consolidate_all(now, silas_memory::consolidate::Policy::default())
        .map_err(coded)?;
    for (scope, plan) in changed {
        let gone = plan.removed();
        removed += gone.len();
        audit(
            memory,
            "memory_consolidated",
            json!({"scope_id": scope, "merged": plan.merged.len(), "pruned": plan.pruned.len(),
                   "removed_ids": gone}),
        )?;
    }
    Ok(removed)
}

/// Promotion cards open at once, at most (the owner is asked a few at a
/// time, not flooded).
const MAX_OPEN_PROMOTIONS: usize = 3;

/// Memory ids with a promotion card open (one card per memory).
type InFlight = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// Runs [`consolidate_all`] every `every` until `stop` turns true, then
/// proposes promotions (§6.4 step 3) when the Stream runs.
pub async fn consolidation_loop(
    memory: Memory,
    every: std::time::Duration,
    timeouts: silas_actors::cards::CardTimeouts,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let in_flight = InFlight::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        let m = memory.clone();
        match tokio::task::spawn_blocking(move || consolidate_all(&m, Timestamp::now())).await {
            Ok(Ok(n)) => tracing::info!(removed = n, "memory consolidation"),
            Ok(Err(e)) => tracing::warn!("memory consolidation failed: {}", e.one_line()),
            Err(e) => tracing::warn!("memory consolidation stopped: {e}"),
        }
        if let Some(stream) = silas_actors::stream::StreamHandle::find() {
            propose_promotions(&memory, &stream, &timeouts, &in_flight);
        }
    }
}

/// Opens an owner card for each promotion candidate not already asked
/// (at most [`MAX_OPEN_PROMOTIONS`] open); each waits in its own task.
fn propose_promotions(
    memory: &Memory,
    stream: &silas_actors::stream::StreamHandle,
    timeouts: &silas_actors::cards::CardTimeouts,
    in_flight: &InFlight,
) {
    let candidates = match memory.promotion_candidates(Default::default()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(code = %e.code(), "promotion candidates unreadable: {e}");
            return;
        }
    };
    for m in candidates {
        {
            let Ok(mut open) = in_flight.lock() else {
                return;
            };
            if open.len() >= MAX_OPEN_PROMOTIONS {
                return;
            }
            if !open.insert(m.memory_id.clone()) {
                continue;
            }
        }
        let asked = silas_core::cards::MemoryPromotion::for_item(&m);
        let (memory, stream, timeouts, in_flight) =
            (memory.clone(), stream.clone(), *timeouts, in_flight.clone());
        tokio::spawn(async move {
            let outcome = ask_promotion(&memory, &stream, &asked, &timeouts).await;
            if let Ok(mut open) = in_flight.lock() {
                open.remove(&asked.memory_id);
            }
            // Ids and the outcome only: the memory's text stays out of the
            // audit log.
            let logged = audit(
                &memory,
                "memory_promotion",
                json!({"memory_id": asked.memory_id, "scope_id": asked.scope_id,
                       "external": asked.external, "outcome": outcome}),
            );
            if let Err(e) = logged {
                tracing::warn!("memory promotion not audited: {}", e.one_line());
            }
        });
    }
}

/// Asks the owner about one promotion and applies the answer; returns the
/// audited outcome. Only an in-time owner answer choosing `promote`
/// promotes (the Stream accepts answers to an owner card from owner
/// connections only); a safe default (timeout, nobody connected,
/// shutdown) changes nothing and the memory may be proposed again.
async fn ask_promotion(
    memory: &Memory,
    stream: &silas_actors::stream::StreamHandle,
    asked: &silas_core::cards::MemoryPromotion,
    timeouts: &silas_actors::cards::CardTimeouts,
) -> &'static str {
    let now = Timestamp::now();
    let ttl = chrono::Duration::from_std(timeouts.plan).unwrap_or(chrono::Duration::seconds(300));
    let card = silas_storage::PendingCard {
        request_id: format!("promote-{}-{}", asked.memory_id, now.as_micros()),
        scope_id: silas_actors::turn::OWNER_SCOPE.to_string(),
        card: asked.card(),
        created_at: now,
        expires_at: now.plus(ttl),
        audience: silas_storage::CardAudience::Owner,
    };
    let answer = match stream.ask(card, timeouts).await {
        Ok(a) => a,
        Err(e) => {
            tracing::info!("promotion card not opened: {e}");
            return "unavailable";
        }
    };
    if answer.resolution != silas_actors::cards::Resolution::Answered {
        return "unanswered";
    }
    let confirmed = silas_core::cards::MemoryPromotion::confirmed(&answer.response);
    match memory.resolve_promotion(asked, confirmed) {
        Ok(true) if confirmed => "promoted",
        Ok(true) => "declined",
        Ok(false) => "changed",
        Err(e) => {
            tracing::warn!(code = %e.code(), "promotion not applied: {e}");
            "failed"
        }
    }
}
