//! The verdicts of `silas doctor`: plain functions from gathered facts to a
//! [`Check`] (PASS / WARN / FAIL, what was found, and the fix). No I/O here;
//! `probe.rs` gathers the facts.

use std::path::{Path, PathBuf};

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about a WARN or FAIL.
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// `FAIL keys-dir: … — fix: …`, flattened to one line.
    pub fn line(&self) -> String {
        let mut l = format!("{} {}: {}", self.status.as_str(), self.name, self.detail);
        if let Some(f) = &self.fix {
            l.push_str(" — fix: ");
            l.push_str(f);
        }
        l.replace(['\n', '\r'], " ")
    }
}

/// `Config::validation_errors`, rendered.
pub fn config(source: &str, errors: &[String]) -> Check {
    if errors.is_empty() {
        return Check::pass("config", format!("valid ({source})"));
    }
    Check::fail(
        "config",
        format!(
            "{} problem(s) in {source}: {}",
            errors.len(),
            errors.join("; ")
        ),
        "correct the configuration (`silas config check` lists every problem)",
    )
}

/// What is on disk at one path of the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathFact {
    pub path: PathBuf,
    /// Permission bits; `None` when the path does not exist.
    pub mode: Option<u32>,
}

/// What a missing path means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenAbsent {
    /// `silas init` creates it: FAIL until then.
    NeedsInit,
    /// Created on first use; nothing to check yet.
    Fine,
}

/// A path of the data dir layout must grant no bit beyond `max` (e.g. keys/
/// at most 0700, the data dir at most 0711). The fix narrows to what the
/// mode already has within `max`.
pub fn mode(name: &'static str, fact: &PathFact, max: u32, absent: WhenAbsent) -> Check {
    let path = fact.path.display();
    let Some(mode) = fact.mode else {
        return match absent {
            WhenAbsent::NeedsInit => {
                Check::fail(name, format!("{path} does not exist"), "silas init")
            }
            WhenAbsent::Fine => Check::pass(name, format!("{path} not created yet")),
        };
    };
    let mode = mode & 0o7777;
    // What the daemon itself needs: all of a directory (it creates files
    // there), reading a file (a read-only key file is fine; the store's
    // own check says when it cannot write). A mode of 0000 closes it to
    // everyone else, but also to Silas.
    let need = if max & 0o100 != 0 { 0o700 } else { 0o400 };
    if mode & need != need {
        return Check::fail(
            name,
            format!("{path} is {mode:04o}: its owner (Silas) cannot use it ({need:04o} needed)"),
            format!("chmod {:o} {path}", (mode & max) | need),
        );
    }
    let excess = mode & !max;
    if excess == 0 {
        return Check::pass(name, format!("{path} is {mode:04o}"));
    }
    Check::fail(
        name,
        format!("{path} is {mode:04o}, grants {excess:04o} beyond {max:04o}"),
        format!("chmod {:o} {path}", mode & max),
    )
}

/// One directory on the way to `{data_dir}/sandbox`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ancestor {
    pub path: PathBuf,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Can `uid:gid` search (traverse) this directory? Owner bits for its owner,
/// group bits for its group, other bits otherwise (as the kernel decides,
/// without supplementary groups).
pub fn can_traverse(a: &Ancestor, uid: u32, gid: u32) -> bool {
    let perm = silas_sandbox::reach::DirPerm {
        uid: a.uid,
        gid: a.gid,
        mode: a.mode,
    };
    silas_sandbox::reach::may_traverse(perm, uid, gid)
}

/// A root daemon's sandbox runs as `nobody` (`sandbox_uid`), which must
/// traverse every directory down to and including `{data_dir}/sandbox`.
/// A non-root daemon's sandbox runs as the daemon's own user.
pub fn sandbox_reachable(
    daemon_is_root: bool,
    sandbox_dir: &Path,
    ancestors: &[Ancestor],
    sandbox_uid: u32,
    sandbox_gid: u32,
) -> Check {
    const NAME: &str = "sandbox-dirs";
    if !daemon_is_root {
        return Check::pass(NAME, "the sandbox runs as this user; nothing to traverse");
    }
    let blocked: Vec<&Ancestor> = ancestors
        .iter()
        .filter(|a| !can_traverse(a, sandbox_uid, sandbox_gid))
        .collect();
    match blocked.first() {
        None => Check::pass(
            NAME,
            format!(
                "the sandbox user (uid {sandbox_uid}) can reach {}",
                sandbox_dir.display()
            ),
        ),
        Some(first) => Check::fail(
            NAME,
            format!(
                "the sandbox user (uid {sandbox_uid}) cannot traverse {} ({:04o}, owner {}), so no sandboxed command can start in {}",
                first.path.display(),
                first.mode & 0o7777,
                first.uid,
                sandbox_dir.display()
            ),
            blocked
                .iter()
                .map(|a| format!("chmod o+x {}", a.path.display()))
                .collect::<Vec<_>>()
                .join(" && "),
        ),
    }
}

/// The landlock ABI the kernel supports (0 = none). The sandbox confines
/// files with ABI 3 and networked checks need ABI 6 (Linux 6.12).
pub fn landlock(abi: u8) -> Check {
    const NAME: &str = "landlock";
    match abi {
        0 => Check::fail(
            NAME,
            "the kernel has no landlock (not built in or not enabled at boot); the sandbox refuses to run commands",
            "use Linux ≥ 6.2 with landlock in the `lsm=` boot parameter",
        ),
        1 | 2 => Check::fail(
            NAME,
            format!("landlock ABI {abi}; the sandbox needs ABI 3 (Linux 6.2)"),
            "upgrade the kernel to Linux ≥ 6.2 (6.12 for networked checks)",
        ),
        3..=5 => Check::warn(
            NAME,
            format!(
                "landlock ABI {abi}: commands are confined, but checks with network access fail closed (they need ABI 6)"
            ),
            "upgrade the kernel to Linux ≥ 6.12 for networked checks",
        ),
        _ => Check::pass(NAME, format!("landlock ABI {abi}")),
    }
}

/// What the trial sandboxed command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trial {
    /// The data dir (or its sandbox dir) is not there yet.
    NotInitialised,
    /// It ran; `secret_read` says whether it could read the probe secret.
    Ran {
        exit_code: Option<i32>,
        secret_read: bool,
        confinement: silas_sandbox::Confinement,
    },
    /// The sandbox refused: a kernel feature is missing (`E_SANDBOX_UNAVAILABLE`).
    Unavailable(String),
    /// Any other failure to run it.
    Failed(String),
}

/// Two lines: isolation works at all (no network, landlock, rlimits) and the
/// command is confined (it cannot read the owner key).
pub fn sandbox_trial(trial: &Trial, secret: &Path) -> Vec<Check> {
    const RUN: &str = "sandbox";
    const CONFINED: &str = "sandbox-confinement";
    match trial {
        Trial::NotInitialised => vec![Check::fail(
            RUN,
            "no sandbox dir to try a command in",
            "silas init",
        )],
        Trial::Unavailable(e) => vec![Check::fail(
            RUN,
            format!("a trial command cannot be isolated: {e}"),
            "enable what it names (network namespaces need root or unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0)",
        )],
        Trial::Failed(e) => vec![Check::fail(
            RUN,
            format!("a trial command did not run: {e}"),
            "see the error; `silas doctor` again after fixing it",
        )],
        Trial::Ran {
            exit_code,
            secret_read,
            confinement,
        } => {
            let ran = Check::pass(
                RUN,
                format!(
                    "a trial command ran isolated ({}; {}{}; landlock ABI {}; limits; exit {})",
                    confinement.isolation.describe(),
                    if confinement.pid_namespace {
                        "a process namespace of its own"
                    } else {
                        "the host's process namespace"
                    },
                    if confinement.private_proc {
                        ", a /proc showing only its own processes"
                    } else {
                        ", the host's /proc (every command line)"
                    },
                    confinement.landlock_abi,
                    exit_code.map_or_else(|| "by signal".into(), |c| c.to_string())
                ),
            );
            let confined = if *secret_read {
                Check::fail(
                    CONFINED,
                    format!("a sandboxed command could read {}", secret.display()),
                    "do not run the daemon with a landlock-less kernel or a modified launcher; report this",
                )
            } else {
                Check::pass(
                    CONFINED,
                    format!("a sandboxed command cannot read {}", secret.display()),
                )
            };
            vec![ran, confined]
        }
    }
}

/// Who holds the web port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortState {
    Free,
    /// `GET /health` answered as Silas.
    Silas,
    /// Something else (or something that does not answer HTTP).
    Other(String),
}

/// For `doctor` our own running daemon is fine; for `start` it is not
/// (`for_start`): a second daemon cannot bind.
pub fn port(addr: &str, state: &PortState, for_start: bool) -> Check {
    const NAME: &str = "port";
    match state {
        PortState::Free => Check::pass(NAME, format!("{addr} is free")),
        PortState::Silas if !for_start => {
            Check::pass(NAME, format!("{addr} is held by the running Silas daemon"))
        }
        PortState::Silas => Check::fail(
            NAME,
            format!("a Silas daemon is already running at {addr}"),
            "`silas stop` stops it (with its --data-dir, or where it was started); a second \
             daemon needs a data dir (--data-dir) and a channels.web.port of its own",
        ),
        PortState::Other(why) => Check::fail(
            NAME,
            format!("{addr} is in use by another program ({why})"),
            format!(
                "stop whatever listens there (`ss -ltnp | grep {addr}`), or set channels.web.port"
            ),
        ),
    }
}

/// What asking `{base}/models` found (no prompt is sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Model {
    /// The offline responder serves: no endpoint to ask.
    Offline { reason: String },
    /// It answered with an OpenAI-style model list; `missing`: the
    /// configured model's name when the list does not have it.
    Listed {
        base: String,
        models: usize,
        missing: Option<String>,
    },
    /// HTTP 401/403: the key is wrong or missing.
    Refused { base: String, status: u16 },
    /// It answered, but not as the OpenAI API does.
    NotOpenAi { base: String, detail: String },
    /// No connection or no answer in time.
    Unreachable { base: String, error: String },
    /// Connected, no answer in time (busy, or hung).
    Silent { base: String, seconds: u64 },
}

pub fn model(m: &Model) -> Check {
    const NAME: &str = "model";
    match m {
        Model::Offline { reason } => Check::warn(
            NAME,
            format!("offline mode ({reason}): the rule-based responder, not an LLM"),
            "set the provider's API key (see `models:`/`providers:` in the config) for a real model",
        ),
        Model::Listed {
            base,
            models,
            missing: None,
        } => Check::pass(
            NAME,
            format!("{base} speaks the OpenAI API ({models} model(s) listed)"),
        ),
        // A server with one model may answer to any name (llama.cpp), so
        // not a failure; a typo'd name on any other gets HTTP 404.
        Model::Listed {
            base,
            models,
            missing: Some(name),
        } => Check::warn(
            NAME,
            format!(
                "{base} speaks the OpenAI API, but the configured model {name:?} is not among \
                 its {models} listed model(s)"
            ),
            "check the model name after the `provider:` in `models:` (GET /models lists \
             what the server serves)",
        ),
        Model::Refused { base, status } => Check::fail(
            NAME,
            format!("{base} refused the API key (HTTP {status})"),
            "check the key in the provider's api_key_env variable",
        ),
        Model::NotOpenAi { base, detail } => Check::fail(
            NAME,
            format!("{base} does not answer like an OpenAI-compatible API: {detail}"),
            "check the provider's base_url (it usually ends in /v1)",
        ),
        Model::Unreachable { base, error } => Check::fail(
            NAME,
            format!("cannot reach {base}: {error}"),
            "start the model server or correct the provider's base_url",
        ),
        // A local server computing a completion answers nothing else: it
        // is there, so not a failure, but turns will wait on it too.
        Model::Silent { base, seconds } => Check::warn(
            NAME,
            format!("{base} accepted the connection but sent no answer within {seconds} s"),
            "if the model server is busy with a long completion, run `silas doctor` again when \
             it is done; if it stays silent, restart it",
        ),
    }
}

/// The Telegram channel's Bot API, when enabled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Telegram {
    Answered {
        api: String,
        bot: String,
    },
    /// 401/404: the token is wrong or revoked.
    Rejected {
        api: String,
        status: u16,
    },
    Unreachable {
        api: String,
        error: String,
    },
    Invalid {
        detail: String,
    },
    /// `token_ref`: read from the secret store by `silas start`.
    StoredToken {
        api: String,
    },
}

pub fn telegram(t: &Telegram) -> Check {
    const NAME: &str = "telegram";
    match t {
        Telegram::Answered { api, bot } => {
            Check::pass(NAME, format!("{api} knows the bot token (bot @{bot})"))
        }
        Telegram::Rejected { api, status } => Check::fail(
            NAME,
            format!("{api} rejected the bot token (HTTP {status})"),
            "set channels.telegram.token (SILAS_TELEGRAM_TOKEN) to the token @BotFather gave you",
        ),
        Telegram::Unreachable { api, error } => Check::fail(
            NAME,
            format!("cannot reach {api}: {error}"),
            "check the network, or channels.telegram.api_url for a self-hosted Bot API server",
        ),
        Telegram::Invalid { detail } => Check::fail(
            NAME,
            detail.clone(),
            "fix the channels.telegram key the message names",
        ),
        Telegram::StoredToken { api } => Check::warn(
            NAME,
            format!("the bot token is in the secret store (token_ref); not tried against {api}"),
            "`silas start` reads it; a wrong token shows as \"telegram channel stopped\" in its log",
        ),
    }
}

/// The owner keystore and the local CLI's credential.
/// `keystore`: what opened, or why it did not and its one fix.
pub fn owner_credential(
    keystore: Result<String, (String, String)>,
    cli_token: Option<&Path>,
) -> Vec<Check> {
    let key = match keystore {
        Ok(what) => Check::pass("owner-key", format!("opens ({what})")),
        Err((e, fix)) => Check::fail(
            "owner-key",
            format!("the owner keystore does not open: {e}"),
            fix,
        ),
    };
    let cli = match cli_token {
        Some(p) => Check::pass("cli-credential", format!("{} present", p.display())),
        None => Check::warn(
            "cli-credential",
            "no cli.token in the data dir yet, so `silas chat`/`pair`/`devices` cannot authenticate",
            "silas start (the daemon writes it)",
        ),
    };
    vec![key, cli]
}

/// Who runs the check against who owns the data dir: another user (an
/// admin checking the service's data dir) sees permission errors, which the
/// checks below would report as missing or broken files.
pub fn user(data_dir: &Path, owner: Option<u32>, me: u32) -> Check {
    const NAME: &str = "user";
    match owner {
        Some(owner) if owner != me => Check::warn(
            NAME,
            format!(
                "{} belongs to uid {owner}, and this runs as uid {me}: what this user may not \
                 read shows as missing or broken below",
                data_dir.display()
            ),
            format!("run it as the daemon's user (`sudo -u '#{owner}' silas doctor …`)"),
        ),
        Some(_) => Check::pass(NAME, format!("runs as the owner of {}", data_dir.display())),
        None => Check::pass(NAME, format!("{} not created yet", data_dir.display())),
    }
}

/// Free space where the data dir lives: a full disk stops every write of
/// the store, and the daemon pauses until there is space again.
pub fn disk(where_: &Path, free: Option<u64>) -> Check {
    const NAME: &str = "disk";
    const LOW: u64 = 512 << 20;
    const FULL: u64 = 64 << 20;
    let Some(free) = free else {
        return Check::pass(NAME, format!("{} not created yet", where_.display()));
    };
    let text = format!("{} MiB free for {}", free >> 20, where_.display());
    if free < FULL {
        Check::fail(
            NAME,
            text,
            "free space there: when the store cannot write, the daemon pauses until there is space again",
        )
    } else if free < LOW {
        Check::warn(NAME, text, "free space there before the store runs out")
    } else {
        Check::pass(NAME, text)
    }
}

/// Whether the store opens, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreState {
    Opens,
    Absent,
    /// Locked by another process.
    InUse,
    Broken(String),
}

pub fn store(state: &StoreState, daemon_running: bool) -> Check {
    const NAME: &str = "store";
    match state {
        StoreState::Opens => Check::pass(NAME, "opens (no daemon holds it)"),
        StoreState::Absent => Check::fail(NAME, "no store yet", "silas init"),
        StoreState::InUse if daemon_running => {
            Check::pass(NAME, "held by the running Silas daemon")
        }
        StoreState::InUse => Check::fail(
            NAME,
            "locked by another process, and no Silas daemon answers on the web port or the control socket",
            "find and stop the other process (`fuser -v {data_dir}/silas.redb`)",
        ),
        StoreState::Broken(e) => Check::fail(
            NAME,
            format!("does not open: {e}"),
            "restore the data dir from a backup",
        ),
    }
}

/// The open-file limit the daemon asks for at start (issue #19: every
/// WebSocket is a descriptor; 10,000 idle connections need more than the
/// usual soft limit of 1,024).
pub const OPEN_FILES_WANTED: u64 = 65_536;

/// Connections the daemon should be able to hold.
const OPEN_FILES_ENOUGH: u64 = 10_240;

/// The soft limit the daemon sets: up to [`OPEN_FILES_WANTED`], never
/// above the hard limit (`None`: unlimited), never below today's.
pub fn open_files_target(soft: u64, hard: Option<u64>) -> u64 {
    hard.map_or(OPEN_FILES_WANTED, |h| h.min(OPEN_FILES_WANTED))
        .max(soft)
}

/// Whether the daemon will be able to hold many connections.
pub fn open_files(soft: u64, hard: Option<u64>) -> Check {
    let target = open_files_target(soft, hard);
    let hard_s = hard.map_or("unlimited".to_owned(), |h| h.to_string());
    let detail = format!(
        "soft {soft}, hard {hard_s}; the daemon raises the soft limit to {target} at start"
    );
    if target >= OPEN_FILES_ENOUGH {
        Check::pass("open files", detail)
    } else {
        Check::warn(
            "open files",
            format!("{detail}, too few for many connections"),
            "raise the hard limit (LimitNOFILE=65536 in the systemd unit, or `ulimit -Hn 65536` as root)",
        )
    }
}

/// The system clock against times it must be after (the binary's build,
/// the audit log's last entry). A small slack absorbs coarse timestamps.
pub fn clock(
    now: chrono::DateTime<chrono::Utc>,
    floors: &[(&str, chrono::DateTime<chrono::Utc>)],
) -> Check {
    const NAME: &str = "clock";
    let slack = chrono::Duration::minutes(5);
    match floors.iter().find(|(_, t)| now + slack < *t) {
        None => Check::pass(NAME, format!("{} UTC", now.format("%Y-%m-%d %H:%M:%S"))),
        Some((what, t)) => Check::fail(
            NAME,
            format!(
                "the system time {} is before {what} ({}): approvals, schedules and the audit log would be wrong",
                now.format("%Y-%m-%d %H:%M:%S"),
                t.format("%Y-%m-%d %H:%M:%S")
            ),
            "set the clock (timedatectl set-ntp true)",
        ),
    }
}

/// The zone cron times use (`scheduler.timezone`, `local` resolved), and a
/// `TZ` in this environment Silas cannot read: the C library may honour
/// it, so the host's clock and the schedules would disagree unseen.
pub fn timezone(setting: &str, used: &str, unread: Option<&str>) -> Check {
    const NAME: &str = "timezone";
    match unread {
        None => Check::pass(
            NAME,
            format!("cron times are in {used} (scheduler.timezone: {setting})"),
        ),
        Some(tz) => Check::warn(
            NAME,
            silas_actors::scheduler::unread_tz_warning(tz, used),
            "set scheduler.timezone to the zone you mean (an IANA name), or TZ to one",
        ),
    }
}

/// Exit code of a report: 1 when any check failed.
pub fn any_failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}
