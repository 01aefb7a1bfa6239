//! The CLI commands: configuration loading, `init`, `audit`, `config check`,
//! and the hand-off to the daemon for `start`.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use silas_core::ErrorCode;
use silas_core::config::{Config, EnvSource, KeystoreBackend, ProcessEnv};
use silas_keys::{FileKeystore, InitOutcome, KekSources, KeyringKeystore, OwnerKey, OwnerKeystore};
use silas_storage::Store;

use crate::cli::{Cli, Command, ConfigCommand, ServiceCommand};
use crate::daemon;
use crate::error::CliError;

pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => config_check(cli.config.as_deref(), cli.data_dir),
        Command::Init(args) => {
            let mut cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            arrange_sandbox_root(&mut cfg)?;
            let init = initialise(&cfg, args.force)?;
            print_init_report(&cfg, &init);
            Ok(ExitCode::SUCCESS)
        }
        Command::Start(args) => {
            let mut cfg = load_config(cli.config.as_deref(), cli.data_dir.clone())?;
            if let Some(port) = args.port {
                cfg.channels.web.port = port;
            }
            arrange_sandbox_root(&mut cfg)?;
            crate::doctor::port_preflight(&cfg)?;
            let init = initialise(&cfg, false)?;
            if !matches!(init.key_outcome, InitOutcome::KeptExisting { .. }) {
                print_init_report(&cfg, &init);
            } else if let Some(line) = crate::bundled_skills::report(&init.skills, &cfg.skills_dir)
            {
                println!("{line}");
            }
            // After init (which creates and narrows the layout), before
            // anything is served: the sandbox dirs as `silas doctor` checks them.
            crate::doctor::preflight(&cfg)?;
            let origin = crate::control::ConfigOrigin {
                path: cli.config.clone(),
                data_dir: cli.data_dir.clone(),
                cwd: working_dir()?,
                source: config_source_with_env(cli.config.as_deref(), &ProcessEnv),
            };
            daemon::start(cfg, init.store, init.owner_key, origin)
        }
        Command::Chat(args) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::chat::run(&cfg, args)
        }
        Command::Pair(args) => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::pair(&cfg, args.url.as_deref())
        }
        Command::Devices(cmd) => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::devices(&cfg, cmd)
        }
        Command::Doctor => crate::doctor::run(cli.config.as_deref(), cli.data_dir),
        Command::Service(ServiceCommand::Install { user, output }) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::service::install(&cfg, cli.config.as_deref(), user, output.as_deref())
        }
        Command::Audit(cmd) => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::audit(&cfg, cmd)
        }
        Command::Status(args) => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::status(&cfg, args)
        }
        Command::Stop => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::stop(&cfg)
        }
        Command::Work(cmd) => {
            let cfg = load_for_daemon(cli.config.as_deref(), cli.data_dir)?;
            crate::remote::work(&cfg, cmd)
        }
        Command::Workspace(cmd) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::workspace_cmd::run(&cfg, cmd)
        }
        Command::Memory(cmd) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::memory_cmd::run(&cfg, cmd)
        }
        Command::Skill(cmd) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::skill_cmd::run(&cfg, cmd)
        }
        Command::Connection(cmd) => {
            let cfg = load_config(cli.config.as_deref(), cli.data_dir)?;
            crate::connection_cmd::run(&cfg, cmd)
        }
    }
}

/// Load, apply `--data-dir`, make every path absolute, validate.
pub fn load_config(path: Option<&Path>, data_dir: Option<PathBuf>) -> Result<Config, CliError> {
    let cfg = load_unvalidated(path, data_dir)?;
    match config_errors(&cfg).into_iter().next() {
        Some(e) => Err(e.into()),
        None => Ok(cfg),
    }
}

/// For the commands that talk to the running daemon (status, work, audit,
/// pair, devices): a configuration file broken since the daemon started
/// must not lock the owner out of it (`silas work cancel` of runaway work).
/// On a configuration error the daemon is looked for in the data dir that
/// `--data-dir` or the file itself (read leniently) names, else `./data`;
/// when its control socket is there the command goes on, with a warning,
/// else the error stands.
pub fn load_for_daemon(path: Option<&Path>, data_dir: Option<PathBuf>) -> Result<Config, CliError> {
    match load_config(path, data_dir.clone()) {
        Ok(cfg) => Ok(cfg),
        Err(err) => {
            let cfg = running_daemons_config(path, data_dir, err)?;
            eprintln!(
                "  the running daemon in {} is reached anyway (it keeps the configuration it started with); `silas config check` shows both",
                cfg.data_dir.display()
            );
            Ok(cfg)
        }
    }
}

/// Where the running daemon is when the configuration file cannot be
/// loaded (`err`, printed as a warning): the data dir `--data-dir` or the
/// file itself (read leniently) names, else `./data`. `Err(err)` when no
/// daemon's control socket is there.
fn running_daemons_config(
    path: Option<&Path>,
    data_dir: Option<PathBuf>,
    err: CliError,
) -> Result<Config, CliError> {
    let named = data_dir.or_else(|| {
        let file = path.unwrap_or(Path::new(silas_core::config::DEFAULT_CONFIG_PATH));
        let text = std::fs::read_to_string(file).ok()?;
        Config::data_dir_named_in(&text)
    });
    let mut cfg = Config::default();
    if let Some(dir) = named {
        match expand_home(&dir) {
            Ok(dir) => cfg.data_dir = dir,
            Err(_) => return Err(err),
        }
    }
    cfg.anchor_paths(&working_dir()?);
    // Something listens there (a killed daemon's socket file is not enough).
    if !crate::remote::daemon_listens(&cfg.data_dir) {
        return Err(err);
    }
    eprintln!("warning: {}", err.one_line());
    Ok(cfg)
}

/// Every rule the configuration breaks, in order: core's startup rules,
/// then what only the gate providers (a regex, a numeric range, a script's
/// command) and the scheduler's parsers (time zone, cron) can check.
pub fn config_errors(cfg: &Config) -> Vec<silas_core::config::ConfigError> {
    let mut errors = cfg.validation_errors();
    errors.extend(silas_actors::turn::pipeline::gate_config_errors(cfg));
    errors.extend(silas_actors::scheduler::config_errors(cfg));
    errors
}

/// Load and apply `--data-dir`; paths are anchored at the working directory
/// here, once, so nothing downstream ever sees `./data` (issue #13).
pub fn load_unvalidated(
    path: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> Result<Config, CliError> {
    let cfg = load_unvalidated_at(path, data_dir, &working_dir()?)?;
    hide_from_commands(&cfg, path);
    Ok(cfg)
}

/// No sandboxed command this process runs may read the data dir (owner
/// key, CLI token, store, secret store key), a keystore kept elsewhere, the
/// configuration file, or the service's own files (`silas service
/// install`: the environment file with the provider's API key and the
/// key-encryption key, in `/etc/silas` or `~/.config/silas`) — not even
/// where they sit inside a system directory every command may read
/// (`/opt/silas/data`, `/etc`). Without the last, a command of an
/// unprivileged daemon (it runs as the daemon's user) read the API key
/// from `/etc/silas/env` and printed it past the redaction, reversed.
fn hide_from_commands(cfg: &Config, path: Option<&Path>) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    silas_sandbox::hide_from_commands(hidden_paths(cfg, path, home.as_deref()));
}

/// What [`hide_from_commands`] hides.
fn hidden_paths(cfg: &Config, path: Option<&Path>, home: Option<&Path>) -> Vec<PathBuf> {
    let file = path
        .map(Path::to_path_buf)
        .or_else(|| Some(PathBuf::from(silas_core::config::DEFAULT_CONFIG_PATH)))
        .filter(|p| p.is_file())
        .and_then(|p| std::path::absolute(p).ok());
    let service_files = [
        crate::service::SYSTEM_ENV_FILE,
        crate::service::SYSTEM_KEK_FILE,
    ]
    .into_iter()
    .filter_map(|f| Path::new(f).parent().map(Path::to_path_buf))
    .chain(home.map(|h| h.join(crate::service::USER_FILES_DIR)));
    let mut out: Vec<PathBuf> = [cfg.data_dir.clone(), cfg.keystore_path()]
        .into_iter()
        .chain(file)
        .chain(service_files)
        .collect();
    out.dedup();
    out
}

/// [`load_unvalidated`] with relative paths meaning `cwd`.
pub fn load_unvalidated_at(
    path: Option<&Path>,
    data_dir: Option<PathBuf>,
    cwd: &Path,
) -> Result<Config, CliError> {
    let mut cfg = Config::load(path, &ProcessEnv)?;
    if let Some(d) = data_dir {
        cfg.data_dir = expand_home(&d)
            .map_err(|m| CliError::new(ErrorCode::ECfgInvalid, format!("--data-dir {m}")))?;
    }
    cfg.anchor_paths(cwd);
    Ok(cfg)
}

/// `~/…` of a path the owner typed, with this process's `$HOME`.
pub fn expand_home(path: &Path) -> Result<PathBuf, String> {
    let home = std::env::var("HOME").ok();
    silas_core::config::expand_home(path, home.as_deref())
}

fn working_dir() -> Result<PathBuf, CliError> {
    std::env::current_dir().map_err(|e| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot read the working directory to resolve relative paths: {e}"),
        )
    })
}

/// Where a root daemon's sandbox dirs go when the data dir's own
/// `sandbox/` is unreachable for the sandbox user: one directory per data
/// dir (named by a hash of its path) under this root.
pub const FALLBACK_SANDBOX_BASE: &str = "/var/lib/silas/sandbox";

/// As root, commands run as `nobody`, which must search every ancestor of
/// the sandbox dirs. When the data dir sits under a private directory (a
/// checkout in `/root`) and `sandbox.root_dir` is not set, they go under
/// [`FALLBACK_SANDBOX_BASE`] instead. A non-root daemon runs commands as its
/// own user, which reached the data dir already. `None`: stay put.
pub fn planned_sandbox_root(cfg: &Config) -> Option<PathBuf> {
    let moved = rustix::process::geteuid().is_root()
        && cfg.sandbox.root_dir.is_none()
        && silas_sandbox::reach::first_blocker(&cfg.sandbox_root()).is_some();
    moved.then(|| {
        let id = silas_core::canonical::sha256_hex(cfg.data_dir.as_os_str().as_encoded_bytes());
        Path::new(FALLBACK_SANDBOX_BASE).join(&id[..16])
    })
}

/// Applies [`planned_sandbox_root`], creating the fallback chain 0711.
/// Whatever is then configured is checked by `doctor::preflight`, which
/// stops the start with the blocking directory and the fix.
pub fn arrange_sandbox_root(cfg: &mut Config) -> Result<(), CliError> {
    if let Some(fallback) = planned_sandbox_root(cfg) {
        create_traversable_dir(&fallback)?;
        // Only the chain this created; /var/lib itself stays as the system has it.
        for dir in fallback
            .ancestors()
            .take_while(|d| d.starts_with("/var/lib/silas"))
        {
            set_mode(dir, 0o711)?;
        }
        cfg.sandbox.root_dir = Some(fallback);
    }
    Ok(())
}

/// The lines `config check` shows for a configuration (no secret values).
pub fn print_config_summary(cfg: &Config) {
    println!("  data_dir:   {}", cfg.data_dir.display());
    println!(
        "  web:        http://{}:{}{}",
        cfg.channels.web.host,
        cfg.channels.web.port,
        if cfg.channels.web.auth_token.is_some() {
            " (auth token set)"
        } else {
            ""
        }
    );
    println!(
        "  web_search: {}",
        if cfg.web_search_enabled() {
            "enabled"
        } else {
            "disabled (no search provider key)"
        }
    );
}

pub fn config_source(path: Option<&Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None if Path::new(silas_core::config::DEFAULT_CONFIG_PATH).is_file() => {
            silas_core::config::DEFAULT_CONFIG_PATH.to_string()
        }
        None => "built-in defaults".to_string(),
    }
}

/// [`config_source`] and the names (never the values) of the `SILAS__…`
/// environment overrides applied on top of it.
pub fn config_source_with_env(path: Option<&Path>, env: &dyn EnvSource) -> String {
    let vars = override_names(env);
    let source = config_source(path);
    if vars.is_empty() {
        source
    } else {
        format!("{source} + environment ({})", vars.join(", "))
    }
}

/// The `SILAS__…` variables set in `env`, sorted: names only, never values.
pub fn override_names(env: &dyn EnvSource) -> Vec<String> {
    let mut vars: Vec<String> = env
        .vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with(silas_core::config::OVERRIDE_PREFIX))
        .collect();
    vars.sort();
    vars
}

fn config_check(path: Option<&Path>, data_dir: Option<PathBuf>) -> Result<ExitCode, CliError> {
    // A file that does not even load still leaves the daemon's own view.
    let cfg = match load_unvalidated(path, data_dir.clone()) {
        Ok(cfg) => cfg,
        Err(err) => running_daemons_config(path, data_dir, err)?,
    };
    // A running daemon reports the configuration in force and compares
    // the file with it.
    if let Some(code) = crate::remote::config_check(&cfg)? {
        return Ok(code);
    }
    let errors = config_errors(&cfg);
    if errors.is_empty() {
        println!("config ok: {}", config_source_with_env(path, &ProcessEnv));
        print_config_summary(&cfg);
        return Ok(ExitCode::SUCCESS);
    }
    for e in &errors {
        eprintln!("error[{}]: {e}", silas_core::Coded::code(e));
    }
    Ok(ExitCode::from(2))
}

/// Everything `init` set up; `start` continues with it.
pub struct Initialised {
    pub store: Store,
    pub owner_key: OwnerKey,
    pub key_outcome: InitOutcome,
    pub keystore: OwnerKeystore,
    /// The bundled skills written into (or already in) `skills_dir`.
    pub skills: Vec<crate::bundled_skills::Placed>,
}

/// The owner keystore selected by `keystore:`. The file backend reads its
/// key-encryption key from the real process environment (systemd's
/// `$CREDENTIALS_DIRECTORY`, then `keystore.kek_env`).
pub fn keystore_from_config(cfg: &Config) -> OwnerKeystore {
    let ks = &cfg.keystore;
    match ks.backend {
        KeystoreBackend::File => FileKeystore::new(
            cfg.keystore_path(),
            KekSources::from_process_env(&ks.kek_env, &ks.kek_credential),
        )
        .into(),
        KeystoreBackend::Keyring => KeyringKeystore::secret_service(&cfg.owner_id).into(),
    }
}

/// A store whose audit log is sealed by an owner key, with the key file
/// gone (deleted, or a data dir restored without `keys/`): a fresh key
/// would make every earlier signature fail as "tampered" and the new key
/// the owner's without a word. Refused unless `--force` says so.
fn refuse_a_lost_key(cfg: &Config, store: &Store, force: bool) -> Result<(), CliError> {
    let key = cfg.keystore_path();
    if force || cfg.keystore.backend != KeystoreBackend::File || key.exists() {
        return Ok(());
    }
    if store.audit().latest_checkpoint()?.is_none() {
        return Ok(());
    }
    Err(CliError::new(
        ErrorCode::ECfgKeystore,
        format!(
            "the owner key {} is missing, but this data dir's audit log is signed by it: \
             restore the key from your backup; `silas init --force` makes a new key instead \
             (the log's earlier signatures will no longer verify, and a new checkpoint covers them)",
            key.display()
        ),
    ))
}

/// Owner-only, also when it already existed with a wider mode.
fn create_private_dir(path: &Path) -> Result<(), CliError> {
    create_dir_with_mode(path, 0o700)?;
    set_mode(path, 0o700)
}

/// Directories on the path to sandbox work dirs: when the daemon runs as root
/// the sandbox runs as `nobody`, which must be able to *traverse* (not list or
/// read) them. Everything sensitive inside is 0600/0700 on its own.
fn create_traversable_dir(path: &Path) -> Result<(), CliError> {
    create_dir_with_mode(path, 0o711)?;
    set_mode(path, 0o711)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), CliError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot set permissions on {}: {e}", path.display()),
        )
    })
}

/// Mode of the data dir itself: traverse-only for anyone else, never
/// listable. `{data_dir}/sandbox` has to be reached by `nobody` when the
/// daemon is root (0711); otherwise only the daemon's group traverses it
/// (0710), to reach the control socket (0660) and the CLI credential (0640)
/// — an administrator in the service's group runs `silas status`. Every
/// other entry (keys/, secrets/, the store) stays 0700/0600 (issue #12
/// item 6; ARCHITECTURE.md, control socket).
pub fn data_dir_mode(daemon_is_root: bool) -> u32 {
    if daemon_is_root { 0o711 } else { 0o710 }
}

fn create_dir_with_mode(path: &Path, mode: u32) -> Result<(), CliError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| {
            CliError::new(
                ErrorCode::ECfgIo,
                format!("cannot create directory {}: {e}", path.display()),
            )
        })
}

/// `silas init`: idempotent; never replaces the owner key unless `force`.
pub fn initialise(cfg: &Config, force: bool) -> Result<Initialised, CliError> {
    let root = rustix::process::geteuid().is_root();
    create_dir_with_mode(&cfg.data_dir, data_dir_mode(root))?;
    set_mode(&cfg.data_dir, data_dir_mode(root))?;
    // Created 0600 by the store itself (no umask window).
    let store = Store::open_in(&cfg.data_dir)?;
    // Narrow what an older layout (or another tool) left wider; these are
    // created 0700 by their owners when absent. `verify/` is where checks
    // ran before they moved under `sandbox/`; done first so a verify_dir
    // configured there (however spelled) is made traversable again below.
    for dir in ["keys", "secrets", "verify"] {
        let p = cfg.data_dir.join(dir);
        if p.is_dir() {
            set_mode(&p, 0o700)?;
        }
    }
    create_traversable_dir(&cfg.sandbox_root())?;
    create_traversable_dir(&cfg.sandbox_work_dir())?;
    create_traversable_dir(&cfg.verify_dir())?;
    create_private_dir(&cfg.artifacts_dir())?;
    create_private_dir(&cfg.customer_context_dir())?;
    let keystore = keystore_from_config(cfg);
    refuse_a_lost_key(cfg, &store, force)?;
    let (key_outcome, owner_key) = keystore.open(force)?;
    let (event, outcome) = match &key_outcome {
        InitOutcome::Created { .. } => ("init.owner_key_created", "created"),
        InitOutcome::KeptExisting { .. } => ("init.checked", "kept_existing"),
        InitOutcome::Replaced { .. } => ("init.owner_key_replaced", "replaced"),
        InitOutcome::Encrypted { .. } => ("init.owner_key_encrypted", "encrypted"),
    };
    // The binary's own skills, where absent; approved like any other on
    // their cards (never automatically).
    let skills = crate::bundled_skills::place(&cfg.skills_dir)?;
    let written: Vec<&str> = skills
        .iter()
        .filter_map(|p| match p {
            crate::bundled_skills::Placed::Written(n) => Some(n.as_str()),
            crate::bundled_skills::Placed::Kept(_) | crate::bundled_skills::Placed::Removed(_) => {
                None
            }
        })
        .collect();
    // Backend name and encryption state only: never a path's content or a KEK.
    let data = json!({
        "bundled_skills_written": written,
        "keystore": keystore.backend(),
        "keystore_encrypted": keystore.encrypted_at_rest(),
        "key_outcome": outcome,
        "public_key": owner_key.public_key_hex(),
        "schema_version": silas_storage::schema::SCHEMA_VERSION,
    });
    if let serde_json::Value::Object(data) = data {
        store.audit().log(event, data)?;
    }
    if matches!(key_outcome, InitOutcome::Replaced { .. }) {
        // Checkpoints signed by the replaced key no longer verify; one signed
        // by the new key covers (supersedes) them and re-signs the mirror.
        store.audit().write_checkpoint(&BorrowedSeal(&owner_key))?;
    }
    Ok(Initialised {
        store,
        owner_key,
        key_outcome,
        keystore,
        skills,
    })
}

/// The owner key as checkpoint signer, borrowed (`init` keeps ownership).
struct BorrowedSeal<'a>(&'a OwnerKey);

impl silas_storage::CheckpointSigner for BorrowedSeal<'_> {
    fn sign(&self, payload: &[u8]) -> Vec<u8> {
        self.0.sign(payload).to_bytes().to_vec()
    }
}

fn print_init_report(cfg: &Config, init: &Initialised) {
    let key_line = match &init.key_outcome {
        InitOutcome::Created { .. } => "created",
        InitOutcome::KeptExisting { .. } => "kept (already present)",
        InitOutcome::Replaced { .. } => "REPLACED (--force): earlier approvals no longer verify",
        InitOutcome::Encrypted { .. } => "kept, and now encrypted at rest (re-encrypted in place)",
    };
    println!("Silas initialised in {}", cfg.data_dir.display());
    println!(
        "  store:                {} (schema v{})",
        init.store.path().display(),
        silas_storage::schema::SCHEMA_VERSION
    );
    println!(
        "  owner signing key:    {key_line}, in the {}",
        init.keystore.describe()
    );
    println!(
        "  owner public key:     {}",
        init.owner_key.public_key_hex()
    );
    println!(
        "  sandbox work dir:     {}",
        cfg.sandbox_work_dir().display()
    );
    println!("  verification dir:     {}", cfg.verify_dir().display());
    if let Some(line) = crate::bundled_skills::report(&init.skills, &cfg.skills_dir) {
        println!("{line}");
    }
    println!(
        "  customer context dir: {}",
        cfg.customer_context_dir().display()
    );
    println!(
        "  web search:           {}",
        if cfg.web_search_enabled() {
            "enabled"
        } else {
            "disabled (no search.api_key)"
        }
    );
}

pub fn open_existing_store(data_dir: &Path) -> Result<Store, CliError> {
    let path = data_dir.join(silas_storage::STORE_FILE);
    if !path.is_file() && !data_dir.exists() {
        // Most often a command run from another directory than the one the
        // daemon was started in: `silas init` here would make a second,
        // empty Silas.
        return Err(CliError::new(
            ErrorCode::EDbNotFound,
            format!(
                "no data directory at {}: run this in the directory you started Silas in, or \
                 pass --data-dir DIR (`silas start` prints its data directory); `silas init` \
                 makes a new, empty one here",
                data_dir.display()
            ),
        ));
    }
    if !path.is_file() {
        return Err(CliError::new(
            ErrorCode::EDbNotFound,
            format!("no store at {}; run `silas init` first", path.display()),
        ));
    }
    match Store::open(&path) {
        Ok(store) => Ok(store),
        // This command works on the store itself, which a running daemon
        // holds: say so, rather than guess at "another process".
        Err(silas_storage::StoreError::InUse { .. }) if crate::remote::daemon_listens(data_dir) => {
            Err(CliError::new(
                ErrorCode::EDbIo,
                format!(
                    "the running daemon holds the store at {}: this command works on the store \
                     itself, so stop the daemon first (`silas stop`) and run it again",
                    path.display()
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// `silas audit tail`: oldest first, readable or one JSON object per line.
pub fn print_audit_tail(entries: &[silas_storage::AuditEntry], json: bool) {
    for e in entries {
        if json {
            println!("{}", serde_json::to_string(&e).unwrap_or_default());
        } else {
            let data = serde_json::to_string(&e.data).unwrap_or_default();
            println!("#{:<6} {} {:<28} {data}", e.seq, e.timestamp, e.event);
        }
    }
}

/// At start: the signed checkpoints and the head mirror against the store
/// (lookups only, no chain walk). Tampering while the daemon was down would
/// otherwise be laundered by the next checkpoint, which signs whatever head
/// it finds; so it is logged and written into the audit log itself, where
/// every later signed checkpoint keeps it. Never refuses to start.
pub fn check_audit_seal_at_start(store: &Store, seal: &silas_actors::audit_seal::OwnerSeal) {
    let code = ErrorCode::EDbAuditChainBroken;
    let problem = match store.audit().verify_sealed_head(seal) {
        Ok(r) => r.problem,
        Err(e) => Some(format!("cannot check the audit seal: {e}")),
    };
    let Some(problem) = problem else { return };
    tracing::error!(%code, "audit log tampered while stopped: {problem}; see `silas audit verify`");
    let data = json!({"code": code.as_str(), "problem": problem});
    if let serde_json::Value::Object(data) = data
        && let Err(e) = store
            .audit()
            .log(silas_storage::audit::TAMPER_DETECTED, data)
    {
        tracing::error!(code = %silas_core::Coded::code(&e), "audit write failed: {e}");
    }
}

/// What a passing sealed verification vouches for, and what it does not.
pub fn seal_report_lines(r: &silas_storage::SealReport) -> Vec<String> {
    let mut lines = Vec::new();
    match r.covered_through {
        Some(last) => lines.push(format!(
            "signed checkpoints ok: {} verified against the owner key; entries 0..{last} covered; head mirror ok",
            r.signed_checkpoints
        )),
        None => lines.push("no signed checkpoint yet".to_string()),
    }
    if let Some((first, last)) = r.uncovered {
        let after = if r.covered_through.is_some() {
            "are after the last signed checkpoint"
        } else {
            "are not covered by any signed checkpoint"
        };
        lines.push(format!(
            "entries {first}..{last} {after} and are protected by the hash chain only"
        ));
    }
    if !r.unsigned_superseded.is_empty() {
        lines.push(format!(
            "{} checkpoint(s) not signed by the current owner key (written before checkpoint signing or under a replaced key), covered by a later signed checkpoint",
            r.unsigned_superseded.len()
        ));
    }
    lines
}

#[cfg(test)]
mod hidden_tests {
    use super::*;

    #[test]
    fn the_service_files_with_the_api_key_are_hidden_from_commands() {
        let cfg = Config::default();
        let hidden = hidden_paths(&cfg, None, Some(Path::new("/home/owner")));
        for secret in [
            crate::service::SYSTEM_ENV_FILE,
            crate::service::SYSTEM_KEK_FILE,
            "/home/owner/.config/silas/env",
            "/home/owner/.config/silas/kek",
        ] {
            assert!(
                hidden.iter().any(|h| Path::new(secret).starts_with(h)),
                "{secret} readable by commands: {hidden:?}"
            );
        }
        assert!(hidden.contains(&cfg.data_dir));
    }
}
