//! Command-line surface (spec §12): `init`, `start`, `status`, `chat`, `pair`,
//! `devices list|revoke`, `work list|show|cancel`, `workspace add|list|remove`,
//! `skill list|show|validate|remove`,
//! `audit verify|tail`,
//! `config check`, `doctor`, `service install`, with the global `--config`
//! and `--data-dir` options.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "silas",
    version,
    about = "Silas — a self-hosted AI agent that does things securely"
)]
pub struct Cli {
    /// Configuration file (default: ./config/silas.yaml if present, else built-in defaults).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data directory; overrides `data_dir` from the configuration.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Initialise the data dir, store, sandbox dirs and owner signing key (idempotent).
    Init(InitArgs),
    /// Run the daemon until SIGINT/SIGTERM (initialises first if needed).
    Start(StartArgs),
    /// Show the running daemon's state (exit 3 when it is not running).
    Status(StatusArgs),
    /// Stop the running daemon in order, as on SIGTERM (drains turns, writes
    /// an audit checkpoint), and wait until it has exited.
    Stop,
    /// Background work items: list, show, cancel (cancel needs the daemon).
    #[command(subcommand)]
    Work(WorkCommand),
    /// The owner's registered workspaces: directories a plan may name (by
    /// name) to read or, when registered `--write`, change after approval.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Memories: forget, export to or import from a portable bundle (through
    /// the daemon when it runs).
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Skills under `skills_dir`: list, show (report and content hash),
    /// validate a folder (exit 1 with the findings when refused), remove.
    #[command(subcommand)]
    Skill(SkillCommand),
    /// Service connections (connection skills): add (starts the setup
    /// conversation; its cards reach your web app/Telegram), list, escalate.
    /// Needs the running daemon.
    #[command(subcommand)]
    Connection(ConnectionCommand),
    /// Chat with the running daemon from the terminal (text approvals that
    /// fail closed: no explicit `y` in time means declined).
    Chat(ChatArgs),
    /// Print a fresh one-time pairing link (and QR code) for another owner
    /// device; asks the running daemon (over its control socket).
    Pair(PairArgs),
    /// List or revoke the owner's paired devices (asks the running daemon
    /// over its control socket).
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Inspect the hash-chained audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check the setup: one line per check (PASS/WARN/FAIL) with the fix;
    /// exits 1 when any check fails.
    Doctor,
    /// Run Silas as a systemd service.
    #[command(subcommand)]
    Service(ServiceCommand),
}

#[derive(Subcommand, Debug)]
pub enum ServiceCommand {
    /// Write a hardened systemd unit for the daemon and print how to enable it.
    Install {
        /// A unit for your own service manager (~/.config/systemd/user/)
        /// instead of the system one (/etc/systemd/system/, user `silas`).
        #[arg(long)]
        user: bool,
        /// Write the unit here instead (`-` for stdout).
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// Serve the web app and API on this port for this run (instead of
    /// `channels.web.port`, default 8420); 0 picks a free one.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Replace an existing owner signing key (outstanding approvals become invalid).
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ChatArgs {
    /// The daemon's WebSocket URL (default: ws://HOST:PORT/ws from `channels.web`).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Web auth token (default: $SILAS_WEB_TOKEN, then the CLI credential
    /// `{data_dir}/cli.token` the daemon keeps, then `channels.web.auth_token`).
    /// Prefer the environment variable: arguments are visible to other users.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Seconds to answer an approval card before it is declined.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub approval_timeout: u64,
    /// After input ends, seconds to wait for outstanding replies and approved work.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// One JSON object instead of the readable form.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum WorkCommand {
    /// Every work item, oldest first.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// One work item in full.
    Show {
        id: String,
        /// On one line.
        #[arg(long)]
        json: bool,
    },
    /// Stop a work item (its run, if any) and end it failed; audited.
    Cancel { id: String },
}

#[derive(Subcommand, Debug)]
pub enum WorkspaceCommand {
    /// Register a directory under NAME (read-only unless --write).
    Add {
        /// 1–64 characters of A-Z, a-z, 0-9, '_' or '-'.
        name: String,
        /// An existing directory (relative paths mean the current directory's).
        path: PathBuf,
        /// Plans may ask write access (changes still need your approval).
        #[arg(long)]
        write: bool,
    },
    /// Every registered workspace: name, mode, path.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Forget a workspace (the directory itself is untouched).
    Remove { name: String },
}

#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// Erase memories — from the store, the search index and every later
    /// export. Exactly one of --id, --query (with --scope) or --scope.
    Forget {
        /// One memory by its id.
        #[arg(long, conflicts_with_all = ["query"])]
        id: Option<String>,
        /// Every memory of this scope the keyword query finds.
        #[arg(long, requires = "scope")]
        query: Option<String>,
        /// A conversation scope (`owner`, `telegram:123`, a customer id);
        /// alone: every memory of that scope.
        #[arg(long)]
        scope: Option<String>,
    },
    /// Write every memory to a versioned JSONL bundle at PATH (0600).
    Export {
        path: PathBuf,
        /// Only memories changed at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Include the raw conversation capture (low-reingestion lane).
        #[arg(long)]
        include_raw: bool,
    },
    /// Read a bundle from PATH: `merge` adds (replacing equal ids),
    /// `replace` makes it the whole memory (one transaction).
    Import {
        path: PathBuf,
        #[arg(long, value_enum, default_value = "merge")]
        mode: ImportModeArg,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportModeArg {
    Merge,
    Replace,
}

#[derive(Subcommand, Debug)]
pub enum SkillCommand {
    /// Every skill in `skills_dir`: name, activation, content hash, state.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// One skill: its files, content hash and validation report.
    Show {
        name: String,
        /// The report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Validate a skill folder (any path); exit 1 when it is refused.
    Validate {
        path: PathBuf,
        /// The report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Copy a skill folder into `skills_dir`, validate it and, when its
    /// report has no error, store its `skill_install` card for the owner
    /// (nothing runs before the owner approves it). Given the NAME (or
    /// path) of a skill already in `skills_dir` — one the owner declined,
    /// say — it forgets the decline and offers the card again.
    Install { path: PathBuf },
    /// Adapt a Claude/OpenAI/OpenClaw-style skill folder (local path only)
    /// into `skills_dir`, print the transformation report, then the same
    /// validation and install card as `install`.
    Import { path: PathBuf },
    /// Delete a skill's folder from `skills_dir` (audited).
    Remove { name: String },
}

#[derive(Args, Debug)]
pub struct PairArgs {
    /// Ask over the daemon's loopback HTTP API at this base URL instead of
    /// the control socket.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum DevicesCommand {
    /// Show every owner device (active and revoked).
    List {
        /// Ask over the daemon's loopback HTTP API at this base URL instead
        /// of the control socket.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a device: its credential stops working and its open
    /// connections are closed.
    Revoke {
        device_id: String,
        /// Ask over the daemon's loopback HTTP API at this base URL instead
        /// of the control socket.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Verify the hash chain (the whole chain, or from a checkpoint).
    Verify {
        /// Verify only from the latest checkpoint (or the one named) to the head.
        #[arg(long, value_name = "CHECKPOINT_ID", num_args = 0..=1, default_missing_value = "latest")]
        from_checkpoint: Option<String>,
    },
    /// Record that you have looked at the tampering a start found (until
    /// then `verify` keeps failing on it).
    Acknowledge,
    /// Print the most recent entries, oldest first.
    Tail {
        /// How many entries.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
        /// One JSON object per line instead of the readable form.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Load and validate the configuration; report every problem, one per line.
    Check,
}

/// Help and version go to stdout as usual; a usage error becomes one line.
pub fn report_parse_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            eprintln!("{}", usage_error_line(&e));
            ExitCode::from(2)
        }
    }
}

/// A usage error on one line: clap's first paragraph (which names what is
/// missing or unexpected on the lines after its first), then the usage of
/// the command that was meant.
fn usage_error_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let what = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let what = what.strip_prefix("error: ").unwrap_or(&what);
    let what = if what.is_empty() {
        "invalid arguments"
    } else {
        what
    };
    match rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
    {
        Some(usage) => format!("error: {what} (usage: {usage})"),
        None => format!("error: {what} (see `silas --help`)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> String {
        match Cli::try_parse_from(args) {
            Ok(_) => String::new(),
            Err(e) => usage_error_line(&e),
        }
    }

    #[test]
    fn a_usage_error_names_what_is_missing_and_the_usage() {
        // Before: "error: the following required arguments were not
        // provided: (see `silas --help`)", naming nothing.
        assert_eq!(
            line(&["silas", "work", "show"]),
            "error: the following required arguments were not provided: <ID> \
             (usage: silas work show <ID>)"
        );
        let unexpected = line(&["silas", "work", "list", "--nope"]);
        assert!(
            unexpected.starts_with("error: unexpected argument '--nope' found"),
            "{unexpected}"
        );
        assert!(
            unexpected.ends_with("(usage: silas work list [OPTIONS])"),
            "{unexpected}"
        );
        assert!(!unexpected.contains('\n'), "{unexpected}");
    }
}

#[derive(Subcommand, Debug)]
pub enum ConnectionCommand {
    /// Set up a connection with the installed connection skill SKILL.
    Add {
        skill: String,
        /// A non-secret setting the skill declares, as NAME=VALUE (repeatable).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        settings: Vec<String>,
    },
    /// List connections with their status and last health check.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Ask (with a card) for more service permissions on a connection.
    Escalate {
        connection_id: String,
        /// A permission from the skill's `available_permissions` (repeatable).
        #[arg(long = "permission", required = true)]
        permissions: Vec<String>,
        #[arg(long)]
        reason: String,
    },
}
