//! `silas skill list|show|validate|install|import|remove` (issue #17
//! items 3, 4, 8): glue over `silas-skill` and the install flow
//! (`silas_actors::skills`). `install` and `import` put the folder under
//! `skills_dir` and store its `skill_install` card; the owner's approval
//! (web, Telegram, chat) installs it after the dry run. `list` and `show` read `skills_dir`; `validate` checks
//! any folder and exits 1 with the findings when it is refused; `remove`
//! deletes a skill's folder and audits `skill_removed` (with the content
//! hash it had) when the store exists.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_core::model::skills::SkillSource;
use silas_skill::{SkillError, SkillLoader, ValidationReport};

use crate::cli::SkillCommand;
use crate::error::{CliError, coded};

/// Where a skill stands with the owner (`skill list`), read from the
/// store; absent when the store cannot be read (none yet, or a running
/// daemon holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Approval {
    /// Installed at exactly its current content.
    Installed,
    /// The owner declined its current content (`skill install NAME` asks again).
    Declined,
    /// Not approved at its current content (a card is or will be offered).
    NotApproved,
    /// A card for its current content waits for the owner's answer.
    Waiting,
    /// Shipped inside the binary, unchanged, not approved: offered only
    /// when the owner asks (`skill install NAME`).
    Shipped,
}

impl Approval {
    /// `shipped`: [`crate::bundled_skills::shipped`], hashed once per
    /// listing; `waiting`: [`waiting_installs`], read once per listing.
    fn of(
        store: &silas_storage::Store,
        shipped: &[(String, String)],
        waiting: Option<&[(String, String)]>,
        name: &str,
        hash: &str,
    ) -> Option<Approval> {
        use silas_core::model::skills::{DeclinedSkill, InstalledSkill, check_use};
        let installed = store.records::<InstalledSkill>().get(name).ok()?;
        if check_use(name, installed.as_ref(), hash).is_ok() {
            return Some(Approval::Installed);
        }
        let declined = store.records::<DeclinedSkill>().get(name).ok()?;
        let shipped = shipped.iter().any(|(n, h)| n == name && h == hash);
        Some(if declined.is_some_and(|d| d.covers(hash)) {
            Approval::Declined
        } else if waiting?.iter().any(|(n, h)| n == name && h == hash) {
            Approval::Waiting
        } else if shipped {
            Approval::Shipped
        } else {
            Approval::NotApproved
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Approval::Installed => "installed",
            Approval::Declined => "declined",
            Approval::NotApproved => "not approved",
            Approval::Waiting => {
                "waiting for your approval (answer its card in the web app, silas chat or Telegram)"
            }
            Approval::Shipped => "shipped, not approved (`silas skill install NAME` asks)",
        }
    }
}

/// The skills (name, content hash) whose unexpired install card waits for
/// the owner's answer. `None` when the store cannot be read.
fn waiting_installs(store: &silas_storage::Store) -> Option<Vec<(String, String)>> {
    use silas_core::cards::CardPayload;
    use silas_storage::records::PendingCard;
    let now = silas_core::Timestamp::now();
    let cards = store.records::<PendingCard>().list().ok()?;
    Some(
        cards
            .into_iter()
            .filter(|c| c.expires_at > now)
            .filter_map(|c| match c.card {
                CardPayload::SkillInstall(s) => Some((s.skill, s.content_hash)),
                _ => None,
            })
            .collect(),
    )
}

/// One `skill list --json` line.
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum ListEntry<'a> {
    Ok {
        name: &'a str,
        activation: silas_skill::Activation,
        content_hash: &'a str,
        description: &'a str,
        errors: usize,
        warnings: usize,
        approval: Option<Approval>,
    },
    Broken {
        name: &'a str,
        error: String,
    },
}

fn counts(r: &ValidationReport) -> (usize, usize) {
    let errors = r.errors().count();
    (errors, r.findings.len() - errors)
}

fn check(cfg: &Config, dir: &Path) -> Result<ValidationReport, CliError> {
    silas_skill::validate(dir, &cfg.skills.validation).map_err(coded)
}

fn print_report(r: &ValidationReport) {
    match &r.content_hash {
        Some(h) => println!("content hash: {h}"),
        None => println!("content hash: none (the folder holds something a skill may not)"),
    }
    for f in &r.findings {
        println!("{f}");
    }
    let (errors, warnings) = counts(r);
    if r.is_valid() {
        println!("skill {} is valid ({warnings} warning(s))", r.skill);
    } else {
        println!(
            "skill {} is refused: {errors} error(s), {warnings} warning(s)",
            r.skill
        );
    }
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ErrorCode::ECfgIo, format!("current directory: {e}")))?;
    // `.` and `..` resolved by the text alone (links are not followed: the
    // validator judges the folder as named), so `silas skill validate ..`
    // names the folder, not "".
    Ok(silas_core::config::normalize_lexically(path, &cwd))
}

/// `text` on one line, control and bidi characters shown (a skill's
/// description is anyone's text: U+202E would reverse the listing), cut to
/// `max` characters.
fn short(text: &str, max: usize) -> String {
    let text = silas_core::terminal::one_line(text);
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Store the install card of `name` (already in `skills_dir`); a skill the
/// report refuses gets no card and its copied folder is removed again.
fn offer(
    cfg: &Config,
    store: silas_storage::Store,
    name: &str,
    source: SkillSource,
    transformation: Vec<String>,
) -> Result<ExitCode, CliError> {
    let host = silas_actors::skills::SkillHost::new(store, cfg)
        .with_shipped(crate::bundled_skills::shipped());
    match host.offer(name, source, transformation) {
        Ok(card) => {
            let hash = match &card.card {
                silas_core::cards::CardPayload::SkillInstall(c) => c.content_hash.clone(),
                _ => String::new(),
            };
            println!(
                "skill {name} waits for your install approval (card {}, content hash {hash}); nothing runs before it",
                card.request_id
            );
            // The rest of skills_dir too: a folder put there by hand gets its
            // card now rather than at the next daemon start (once per hash).
            match host.scan_and_offer() {
                Ok(s) if !s.offered.is_empty() => println!(
                    "also waiting for your install approval: {}",
                    s.offered.join(", ")
                ),
                Ok(_) => {}
                Err(e) => println!("the rest of the skills directory was not scanned: {e}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(cfg.skills_dir.join(name));
            println!("skill {name} is refused: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// The name of the skill `arg` designates under `skills_dir`: a bare skill
/// name with a folder there, or a path whose parent is `skills_dir`.
fn in_skills_dir(cfg: &Config, arg: &Path) -> Result<Option<String>, CliError> {
    let as_name = arg.to_str().filter(|s| silas_skill::is_valid_name(s));
    if let Some(name) = as_name
        && std::fs::symlink_metadata(cfg.skills_dir.join(name)).is_ok()
    {
        return Ok(Some(name.to_string()));
    }
    let abs = absolute(arg)?;
    let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
        return Ok(None);
    };
    let same = match (parent.canonicalize(), cfg.skills_dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let name = name.to_string_lossy().into_owned();
    Ok((same && silas_skill::is_valid_name(&name)).then_some(name))
}

pub fn run(cfg: &Config, cmd: SkillCommand) -> Result<ExitCode, CliError> {
    let loader = SkillLoader::new(&cfg.skills_dir);
    match cmd {
        SkillCommand::List { json } => {
            let cat = loader.scan().map_err(coded)?;
            if !json && cat.skills.is_empty() && cat.broken.is_empty() {
                println!("no skills in {}", cfg.skills_dir.display());
            }
            // Read-only use of the store when it can be opened (a running
            // daemon holds it; then the approval column is left out).
            let store_file = cfg.data_dir.join(silas_storage::STORE_FILE);
            let store = store_file
                .is_file()
                .then(|| silas_storage::Store::open(&store_file).ok())
                .flatten();
            // Listed in name order, loaded and broken together.
            let mut rows: Vec<(String, ListEntry)> = Vec::new();
            let shipped = crate::bundled_skills::shipped();
            let waiting = store.as_ref().and_then(waiting_installs);
            let reports: Vec<ValidationReport> = cat
                .skills
                .iter()
                .map(|s| check(cfg, &s.dir))
                .collect::<Result<_, _>>()?;
            for (s, r) in cat.skills.iter().zip(&reports) {
                let (errors, warnings) = counts(r);
                rows.push((
                    s.name.clone(),
                    ListEntry::Ok {
                        name: &s.name,
                        activation: s.manifest.activation,
                        content_hash: &s.content_hash,
                        description: &s.manifest.description,
                        errors,
                        warnings,
                        approval: store.as_ref().and_then(|st| {
                            Approval::of(st, &shipped, waiting.as_deref(), &s.name, &s.content_hash)
                        }),
                    },
                ));
            }
            for (name, e) in &cat.broken {
                rows.push((
                    name.clone(),
                    ListEntry::Broken {
                        name,
                        error: e.to_string(),
                    },
                ));
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, row) in rows {
                if json {
                    println!("{}", serde_json::to_string(&row).unwrap_or_default());
                    continue;
                }
                match row {
                    ListEntry::Ok {
                        name,
                        activation,
                        content_hash,
                        description,
                        errors,
                        approval,
                        ..
                    } => {
                        let state = if errors == 0 {
                            "valid".to_string()
                        } else {
                            format!("{errors} error(s)")
                        };
                        let act = serde_json::to_value(activation)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default();
                        let approval = approval
                            .map(|a| format!("  {}", a.as_str()))
                            .unwrap_or_default();
                        println!(
                            "{name}  {act}  {}  {state}{approval}  {}",
                            &content_hash[..12.min(content_hash.len())],
                            short(description, 60)
                        );
                    }
                    ListEntry::Broken { name, error } => println!(
                        "{}  broken  {}",
                        silas_core::terminal::one_line(name),
                        silas_core::terminal::one_line(&error)
                    ),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCommand::Show { name, json } => {
            let dir = loader.path_of(&name).map_err(coded)?;
            if std::fs::symlink_metadata(&dir).is_err() {
                return Err(coded(SkillError::NotFound(name)));
            }
            let report = check(cfg, &dir)?;
            if json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
                return Ok(ExitCode::SUCCESS);
            }
            println!("skill {name} ({})", dir.display());
            match loader.load(&name) {
                Ok(s) => {
                    println!(
                        "description: {}",
                        silas_core::terminal::printable(&s.manifest.description)
                    );
                    for f in &s.files {
                        let path = silas_core::terminal::one_line(&f.path);
                        println!("  {:04o} {:>8}  {path}", f.mode, f.size);
                    }
                }
                Err(e) => println!("not loadable: {e}"),
            }
            print_report(&report);
            Ok(ExitCode::SUCCESS)
        }
        SkillCommand::Validate { path, json } => {
            let report = check(cfg, &absolute(&path)?)?;
            if json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                print_report(&report);
            }
            Ok(if report.is_valid() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        SkillCommand::Install { path } => {
            // A bundled skill's bare name means the bundled skill, even with
            // a folder of that name in the current directory (`./NAME`
            // installs the folder): one the owner removed is put back as
            // shipped, then offered like any skill under skills_dir.
            if let Some(name) = path
                .to_str()
                .filter(|n| crate::bundled_skills::is_bundled(n))
            {
                if crate::bundled_skills::restore(&cfg.skills_dir, name)? {
                    println!(
                        "bundled skill {name} written back to {}",
                        cfg.skills_dir.display()
                    );
                }
                if path.is_dir() {
                    println!(
                        "(a folder {name} is here too: `silas skill install ./{name}` installs that one)"
                    );
                }
            }
            // A skill already under skills_dir (by name, or its path
            // there): ask the owner again — a decline is forgotten.
            if let Some(name) = in_skills_dir(cfg, &path)? {
                let store = crate::commands::open_existing_store(&cfg.data_dir)?;
                let host = silas_actors::skills::SkillHost::new(store, cfg);
                return match host.reoffer(&name) {
                    Ok(card) => {
                        println!(
                            "skill {name} waits for your install approval (card {}): answer it in the web app, silas chat or Telegram; nothing runs before it",
                            card.request_id
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        println!("skill {name} is refused: {e}");
                        Ok(ExitCode::from(1))
                    }
                };
            }
            let src = absolute(&path)?;
            let report = check(cfg, &src)?;
            print_report(&report);
            if !report.is_valid() {
                return Ok(ExitCode::from(1));
            }
            let store = crate::commands::open_existing_store(&cfg.data_dir)?;
            let name = silas_skill::install::copy_into(&src, &cfg.skills_dir).map_err(coded)?;
            offer(cfg, store, &name, SkillSource::Installed, Vec::new())
        }
        SkillCommand::Import { path } => {
            let src = absolute(&path)?;
            let store = crate::commands::open_existing_store(&cfg.data_dir)?;
            let report = silas_skill::import::import(&src, &cfg.skills_dir).map_err(coded)?;
            let lines = report.lines();
            for l in &lines {
                println!("{l}");
            }
            if let serde_json::Value::Object(o) = serde_json::json!({
                "skill": report.name, "format": report.format,
                "removed": report.removed, "skipped_files": report.skipped_files,
            }) {
                store.audit().log("skill_imported", o)?;
            }
            let dir = cfg.skills_dir.join(&report.name);
            print_report(&check(cfg, &dir)?);
            offer(cfg, store, &report.name, SkillSource::Imported, lines)
        }
        SkillCommand::Remove { name } => {
            // Open the store first: a removal that cannot be audited does
            // not happen (a running daemon holds the store).
            let store_file = cfg.data_dir.join(silas_storage::STORE_FILE);
            let store = if store_file.is_file() {
                Some(crate::commands::open_existing_store(&cfg.data_dir)?)
            } else {
                None
            };
            let hash = loader.remove(&name).map_err(coded)?;
            // A bundled skill would be written back at the next start.
            crate::bundled_skills::record_removal(&cfg.skills_dir, &name)?;
            let mut withdrawn = None;
            if let Some(store) = store {
                // The approval goes with the folder: the same bytes put
                // back are offered again, not run under the old approval.
                let w = silas_actors::skills::remove::withdraw(&store, &name)?;
                if let serde_json::Value::Object(o) = serde_json::json!({
                    "name": name, "content_hash": hash, "by": "cli",
                    "approval_withdrawn": w.approval, "cards_closed": w.cards,
                }) {
                    store.audit().log("skill_removed", o)?;
                }
                withdrawn = Some(w);
            }
            println!(
                "removed skill {name} ({})",
                hash.as_deref().unwrap_or("was not loadable")
            );
            if let Some(w) = withdrawn.filter(|w| w.approval.is_some()) {
                let token = w.approval.unwrap_or_default();
                println!(
                    "its install approval ({}) is withdrawn: put back, it is offered for approval again",
                    &token[..token.len().min(12)]
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
