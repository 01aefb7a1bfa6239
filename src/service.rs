//! `silas service install [--user]` (issue #13 item 6): a hardened systemd
//! unit for the daemon.
//!
//! [`render_unit`] is a pure function of [`UnitSpec`]; [`install`] gathers the
//! absolute paths, writes the file and prints how to enable it. The unit
//! confines the daemon without breaking its own sandbox, which needs user and
//! network namespaces, landlock and seccomp: namespaces stay allowed for
//! `user` and `net`, `PrivateUsers` stays off, and the syscall filter keeps
//! `unshare`, the landlock calls and `seccomp`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use silas_core::ErrorCode;
use silas_core::config::{Config, KeystoreBackend};

use crate::error::CliError;

/// The unit's name (`silas.service`).
pub const UNIT_NAME: &str = "silas.service";
/// The dedicated account of the system unit.
pub const SERVICE_USER: &str = "silas";
/// Where the system unit is written by default.
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";
/// Default host file holding the key-encryption key (system unit).
pub const SYSTEM_KEK_FILE: &str = "/etc/silas/kek";
/// Default environment file with the API keys (system unit).
pub const SYSTEM_ENV_FILE: &str = "/etc/silas/env";
/// Where a user unit's host files (`env`, `kek`) live, under `$HOME`.
pub const USER_FILES_DIR: &str = ".config/silas";

/// The variables the configured models' providers (fallbacks included) read
/// their API keys from, each once.
fn key_vars(cfg: &Config) -> Vec<String> {
    let m = &cfg.models;
    let mut vars: Vec<String> = [&m.proxy, &m.planner, &m.executor, &m.scorer]
        .into_iter()
        .flat_map(|spec| Config::model_chain(spec))
        .filter_map(|model| cfg.resolve_model(model).ok()?.api_key_env)
        .collect();
    vars.sort();
    vars.dedup();
    vars
}

/// Everything the unit depends on; all paths absolute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitSpec {
    /// `--user`: a unit for the user's own service manager.
    pub user_mode: bool,
    /// The `silas` binary.
    pub exe: PathBuf,
    /// `--config`, when one is used.
    pub config: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// Where `silas service install` ran: what the configuration's relative
    /// paths (`skills_dir` is `./skills` by default, `active_goal`, the
    /// sandbox dirs) were resolved against, so the service's
    /// `WorkingDirectory=` — else systemd's `/` or `$HOME`.
    pub working_dir: PathBuf,
    /// `skills_dir`, absolute: the daemon writes the bundled skills and the
    /// skill-maker's there, so the system unit must leave it writable.
    pub skills_dir: PathBuf,
    pub kek: Kek,
    /// `EnvironmentFile=`: where the API keys go (the unit itself is
    /// world-readable, so never `Environment=`).
    pub env_file: PathBuf,
    /// The variables the configured models' providers read their keys from.
    pub key_vars: Vec<String>,
    /// The registered workspaces (path, writable): the daemon reads them,
    /// and applies approved changes to the writable ones.
    pub workspaces: Vec<(PathBuf, bool)>,
}

impl UnitSpec {
    /// Every path the daemon must reach.
    fn reached(&self) -> Vec<&Path> {
        let mut all = vec![
            self.exe.as_path(),
            self.working_dir.as_path(),
            self.data_dir.as_path(),
            self.skills_dir.as_path(),
        ];
        all.extend(self.config.as_deref());
        all.extend(self.workspaces.iter().map(|(p, _)| p.as_path()));
        all
    }

    /// The reached paths inside any of `trees` (what an option hides).
    fn under(&self, trees: &[&str]) -> Vec<&Path> {
        self.reached()
            .into_iter()
            .filter(|p| trees.iter().any(|t| p.starts_with(t)))
            .collect()
    }
}

fn listed(paths: &[&Path]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// How the owner key's key-encryption key reaches the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kek {
    /// `LoadCredential=name:file` (the file exists).
    Load { name: String, file: PathBuf },
    /// The file keystore, but no KEK file yet: the key stays unencrypted at
    /// rest until one is added (a missing credential file would stop the
    /// unit from starting, so no line is written for it).
    Missing { name: String, file: PathBuf },
    /// The OS keyring backend: no KEK.
    Keyring,
}

/// Quotes a value for an `ExecStart=` command line when it needs it
/// (systemd splits on whitespace and treats `\` and quotes specially;
/// `%` starts a specifier and `$` a variable there).
fn exec_arg(p: &Path) -> String {
    list_path(p).replace('$', "$$")
}

/// One path of a space-separated list (`ReadWritePaths=`): quoted when it
/// needs it, specifiers escaped.
fn list_path(p: &Path) -> String {
    let s = p.display().to_string().replace('%', "%%");
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@,=%".contains(c))
    {
        s
    } else {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// A path that is a directive's whole value (`WorkingDirectory=`,
/// `EnvironmentFile=`): never quoted — systemd keeps the quotes and then
/// refuses the path as not absolute — only specifiers escaped.
fn unit_path(p: &Path) -> String {
    p.display().to_string().replace('%', "%%")
}

impl UnitSpec {
    /// `skills_dir` when the data dir does not already hold it.
    fn skills_outside_data_dir(&self) -> Option<&Path> {
        (!self.skills_dir.starts_with(&self.data_dir)).then_some(self.skills_dir.as_path())
    }
}

/// The unit file text. Every hardening line carries the reason it is there
/// (or, for what is left out, why).
pub fn render_unit(spec: &UnitSpec) -> String {
    let mut u = String::new();
    let mut line = |s: &str| {
        u.push_str(s);
        u.push('\n');
    };
    line("# Generated by `silas service install`. Regenerate rather than edit by hand.");
    line("[Unit]");
    line("Description=Silas, a self-hosted AI agent daemon");
    line("After=network-online.target");
    line("Wants=network-online.target");
    line("");
    line("[Service]");
    line("Type=exec");
    let mut exec = format!("ExecStart={}", exec_arg(&spec.exe));
    if let Some(c) = &spec.config {
        let _ = write!(exec, " --config {}", exec_arg(c));
    }
    let _ = write!(exec, " --data-dir {} start", exec_arg(&spec.data_dir));
    line(&exec);
    line("# Relative paths of the configuration (`skills_dir` is ./skills by default)");
    line("# mean what they meant where `silas service install` ran.");
    line(&format!(
        "WorkingDirectory={}",
        unit_path(&spec.working_dir)
    ));
    line("# The model API key and any ${VARIABLE} the configuration names, as NAME=value");
    line("# lines in a file only the service's account reads (mode 0600): this unit is");
    line("# world-readable. Optional (`-`): without a key the daemon runs offline.");
    line(&format!("EnvironmentFile=-{}", unit_path(&spec.env_file)));
    line("# A crash restarts the daemon; a clean stop (SIGTERM) does not.");
    line("Restart=on-failure");
    line("RestartSec=5s");
    line("# The daemon drains turns and writes its audit checkpoint on SIGTERM.");
    line("TimeoutStopSec=60s");
    line("# Everything it creates is private to it.");
    line("UMask=0077");
    line("# Every connection is a descriptor; the daemon raises its soft limit to this.");
    line("LimitNOFILE=65536");
    if !spec.user_mode {
        line("# A dedicated unprivileged account, not root.");
        line(&format!("User={SERVICE_USER}"));
        line(&format!("Group={SERVICE_USER}"));
    }
    match &spec.kek {
        Kek::Load { name, file } => {
            line("# The owner key's key-encryption key, handed over as a systemd credential:");
            line("# the file keystore reads $CREDENTIALS_DIRECTORY/<keystore.kek_credential>.");
            line(&format!("LoadCredential={name}:{}", file.display()));
        }
        Kek::Missing { name, file } => {
            line("# No key-encryption key file existed when this was generated, so the owner");
            line("# key is stored unencrypted. To encrypt it, create the file and add:");
            line(&format!("# LoadCredential={name}:{}", file.display()));
        }
        Kek::Keyring => {
            line("# No LoadCredential=: the owner key lives in the OS keyring.");
        }
    }
    line("");
    line("# --- Hardening. The daemon's own sandbox needs user and network namespaces,");
    line("# --- landlock and seccomp: nothing below takes those away.");
    line("# No setuid/file-capability gains; the sandbox sets no_new_privs itself anyway,");
    line("# and landlock and unprivileged user namespaces work under it.");
    line("NoNewPrivileges=yes");
    line("# Only `user`, `net` and `pid` namespaces: the sandbox's network isolation and");
    line("# the process namespace each command gets.");
    line("RestrictNamespaces=user net pid");
    line("# Off: a systemd-made user namespace would sit under the sandbox's own and");
    line("# change which uids its commands run as.");
    line("PrivateUsers=no");
    line("# Native syscalls only (no x32/i386 entry points around seccomp filters).");
    line("SystemCallArchitectures=native");
    line("# The usual service set plus what the sandbox needs; inherited by every");
    line("# sandboxed command, so blocked calls fail with EPERM instead of killing it.");
    line(
        "SystemCallFilter=@system-service unshare landlock_create_ruleset landlock_add_rule landlock_restrict_self seccomp",
    );
    line("SystemCallErrorNumber=EPERM");
    line("# IP for the web channel and model calls, unix sockets for the keyring (D-Bus).");
    line("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6");
    line("LockPersonality=yes");
    line("RestrictRealtime=yes");
    line("RestrictSUIDSGID=yes");
    line("# Not MemoryDenyWriteExecute: it is inherited by sandboxed commands and breaks");
    line("# every JIT (node, java, pypy) they may legitimately run.");
    if spec.user_mode {
        line("# Not ProtectSystem/ProtectHome/PrivateTmp/PrivateDevices: in a user unit they");
        line("# make systemd turn PrivateUsers on (see above). The sandbox confines commands");
        line("# with landlock on its own.");
    } else {
        line("# No capabilities at all (the sandbox's namespaces are unprivileged).");
        line("CapabilityBoundingSet=");
        line("AmbientCapabilities=");
        line("# The whole file system read-only except the data dir, the skills dir");
        line("# (bundled and skill-maker skills are written there) and the writable");
        line("# workspaces (approved changes are applied there).");
        line("ProtectSystem=strict");
        // What `ProtectHome=yes` would hide.
        let homes = spec.under(&["/home", "/root", "/run/user"]);
        if homes.is_empty() {
            line("# No home directories.");
            line("ProtectHome=yes");
        } else {
            // Hidden, they would stop the daemon from starting or reading
            // the owner's projects.
            line(&format!(
                "# Home directories read-only, not hidden: the daemon needs {}.",
                listed(&homes)
            ));
            line("ProtectHome=read-only");
        }
        line(&format!("ReadWritePaths={}", list_path(&spec.data_dir)));
        if let Some(skills) = spec.skills_outside_data_dir() {
            line(&format!("ReadWritePaths={}", list_path(skills)));
        }
        for (ws, writable) in &spec.workspaces {
            if *writable {
                line(&format!("ReadWritePaths={}", list_path(ws)));
            }
        }
        // What `PrivateTmp=yes` would hide.
        let tmp = spec.under(&["/tmp", "/var/tmp"]);
        if tmp.is_empty() {
            line("PrivateTmp=yes");
        } else {
            line(&format!(
                "# No PrivateTmp=: it would hide {} (under /tmp, which is also",
                listed(&tmp)
            ));
            line("# emptied at boot: a data dir belongs elsewhere, e.g. /var/lib/silas).");
        }
        line("# /dev/null, /dev/zero and /dev/urandom stay; no hardware devices.");
        line("PrivateDevices=yes");
        line("ProtectKernelTunables=yes");
        line("ProtectKernelModules=yes");
        line("ProtectKernelLogs=yes");
        line("ProtectControlGroups=yes");
        line("ProtectClock=yes");
        line("ProtectHostname=yes");
    }
    line("");
    line("[Install]");
    line(if spec.user_mode {
        "WantedBy=default.target"
    } else {
        "WantedBy=multi-user.target"
    });
    u
}

/// Where `--output` (or the default) sends the unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

/// The default unit path: `~/.config/systemd/user/` or `/etc/systemd/system/`.
pub fn default_target(user_mode: bool, home: Option<&Path>) -> Result<PathBuf, CliError> {
    if !user_mode {
        return Ok(Path::new(SYSTEM_UNIT_DIR).join(UNIT_NAME));
    }
    let home = home.ok_or_else(|| {
        CliError::new(
            ErrorCode::ECfgInvalid,
            "HOME is not set; pass --output PATH for the user unit",
        )
    })?;
    Ok(home.join(".config/systemd/user").join(UNIT_NAME))
}

fn absolute(p: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(p).map_err(|e| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot make {} absolute: {e}", p.display()),
        )
    })
}

/// `silas service install`: writes the unit and prints the next steps.
pub fn install(
    cfg: &Config,
    config_path: Option<&Path>,
    user_mode: bool,
    output: Option<&Path>,
) -> Result<ExitCode, CliError> {
    let exe = std::env::current_exe().map_err(|e| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot locate the silas executable: {e}"),
        )
    })?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    // A user unit's files live in ~/.config/silas, the system unit's in /etc/silas.
    let host_file = |name: &str, system: &str| match (user_mode, home.as_deref()) {
        (true, Some(h)) => h.join(USER_FILES_DIR).join(name),
        _ => PathBuf::from(system),
    };
    let kek = match cfg.keystore.backend {
        KeystoreBackend::Keyring => Kek::Keyring,
        KeystoreBackend::File => {
            let file = host_file("kek", SYSTEM_KEK_FILE);
            let name = cfg.keystore.kek_credential.clone();
            if file.is_file() {
                Kek::Load { name, file }
            } else {
                Kek::Missing { name, file }
            }
        }
    };
    let env_file = host_file("env", SYSTEM_ENV_FILE);
    let spec = UnitSpec {
        user_mode,
        exe,
        config: config_path.map(absolute).transpose()?,
        data_dir: absolute(&cfg.data_dir)?,
        working_dir: std::env::current_dir().map_err(|e| {
            CliError::new(
                ErrorCode::ECfgIo,
                format!("cannot read the current directory: {e}"),
            )
        })?,
        skills_dir: absolute(&cfg.skills_dir)?,
        kek,
        env_file,
        key_vars: key_vars(cfg),
        // Not initialised yet: none to reach.
        workspaces: crate::workspace_cmd::registered(cfg)
            .unwrap_or_default()
            .into_iter()
            .map(|w| (PathBuf::from(w.path), w.writable))
            .collect(),
    };
    let unit = render_unit(&spec);
    let target = match output {
        Some(p) if p == Path::new("-") => Target::Stdout,
        Some(p) => Target::File(p.to_path_buf()),
        None => Target::File(default_target(user_mode, home.as_deref())?),
    };
    match &target {
        Target::Stdout => {
            print!("{unit}");
            return Ok(ExitCode::SUCCESS);
        }
        Target::File(path) => write_unit(path, &unit)?,
    }
    if let Target::File(path) = &target {
        println!("wrote {}", path.display());
    }
    for l in next_steps(&spec) {
        println!("{l}");
    }
    // The unit starts with the environment file, not this shell's: an
    // override set here would silently not apply to the service.
    let overrides = crate::commands::override_names(&silas_core::config::ProcessEnv);
    if !overrides.is_empty() {
        println!(
            "note: this shell sets {}, which the service will not see: put them in {} or the \
             config file",
            overrides.join(", "),
            spec.env_file.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn write_unit(path: &Path, unit: &str) -> Result<(), CliError> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot {what} {}: {e}", p.display()),
        )
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    }
    std::fs::write(path, unit).map_err(|e| io("write", path, e))
}

/// What the owner does next, one line each.
pub fn next_steps(spec: &UnitSpec) -> Vec<String> {
    let mut out = Vec::new();
    let data = spec.data_dir.display();
    if !spec.key_vars.is_empty() && !spec.env_file.is_file() {
        let lines: Vec<String> = spec.key_vars.iter().map(|v| format!("{v}=…")).collect();
        out.push(format!(
            "put the API key in {} (mode 0600{}): {}",
            spec.env_file.display(),
            // systemd reads `EnvironmentFile=` as root, before it drops to
            // the service user: that user (and so no command the daemon
            // runs as it) needs to read the file.
            if spec.user_mode {
                String::new()
            } else {
                ", owned by root".to_string()
            },
            lines.join(" / ")
        ));
    }
    if let Kek::Missing { file, .. } = &spec.kek {
        out.push(format!(
            "optional: to encrypt the owner key at rest, put a key-encryption key in {} (mode 0600) and run this again",
            file.display()
        ));
    }
    if spec.user_mode {
        out.push(
            "enable it: systemctl --user daemon-reload && systemctl --user enable --now silas"
                .into(),
        );
        out.push("keep it running after logout: loginctl enable-linger \"$USER\"".into());
    } else {
        out.push(format!(
            "create the account and hand it the data dir: useradd --system --home-dir {data} --shell /usr/sbin/nologin {SERVICE_USER} && mkdir -p {data} && chown -R {SERVICE_USER}:{SERVICE_USER} {data}"
        ));
        if let Some(skills) = spec.skills_outside_data_dir() {
            let skills = skills.display();
            out.push(format!(
                "and the skills dir: mkdir -p {skills} && chown -R {SERVICE_USER}:{SERVICE_USER} {skills}"
            ));
        }
        out.push("enable it: systemctl daemon-reload && systemctl enable --now silas".into());
    }
    if !spec.user_mode {
        out.push(
            "after `silas workspace add`, run this again: the unit lets the daemon write only to \
             the workspaces registered now"
                .into(),
        );
    }
    out.push("then check the setup: silas doctor".into());
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(user_mode: bool) -> UnitSpec {
        UnitSpec {
            user_mode,
            exe: "/usr/local/bin/silas".into(),
            config: Some("/etc/silas/silas.yaml".into()),
            data_dir: "/var/lib/silas".into(),
            working_dir: "/var/lib/silas".into(),
            skills_dir: "/var/lib/silas/skills".into(),
            kek: Kek::Load {
                name: "silas-kek".into(),
                file: "/etc/silas/kek".into(),
            },
            env_file: "/nonexistent/silas/env".into(),
            key_vars: vec!["OPENROUTER_API_KEY".into()],
            workspaces: Vec::new(),
        }
    }

    /// A binary, data dir or project under /home, or a data dir under
    /// /tmp, stays reachable: `ProtectHome=yes` and `PrivateTmp=yes` hid
    /// them from the service (it could not even start).
    #[test]
    fn what_the_daemon_needs_is_never_hidden_by_the_hardening() {
        let u = render_unit(&spec(false));
        assert_eq!(values(&u, "ProtectHome"), vec!["yes"]);
        assert_eq!(values(&u, "PrivateTmp"), vec!["yes"]);

        let mut s = spec(false);
        s.exe = "/home/me/silas/target/release/silas".into();
        s.workspaces = vec![("/home/me/proj".into(), true), ("/srv/docs".into(), false)];
        let u = render_unit(&s);
        assert_eq!(values(&u, "ProtectHome"), vec!["read-only"]);
        assert!(
            u.contains("/home/me/silas/target/release/silas, /home/me/proj"),
            "{u}"
        );
        assert_eq!(
            values(&u, "ReadWritePaths"),
            vec!["/var/lib/silas", "/home/me/proj"]
        );
        assert_eq!(values(&u, "PrivateTmp"), vec!["yes"]);

        let mut s = spec(false);
        s.data_dir = "/tmp/try/data".into();
        s.working_dir = "/tmp/try".into();
        let u = render_unit(&s);
        assert!(values(&u, "PrivateTmp").is_empty(), "{u}");
        assert!(u.contains("it would hide /tmp/try, /tmp/try/data"), "{u}");
    }

    fn values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect()
    }

    #[test]
    fn system_unit_is_hardened_and_runs_as_silas() {
        let u = render_unit(&spec(false));
        for (k, v) in [
            ("User", "silas"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("ReadWritePaths", "/var/lib/silas"),
            ("WorkingDirectory", "/var/lib/silas"),
            ("LoadCredential", "silas-kek:/etc/silas/kek"),
            ("Restart", "on-failure"),
            ("SystemCallArchitectures", "native"),
            ("LockPersonality", "yes"),
            (
                "ExecStart",
                "/usr/local/bin/silas --config /etc/silas/silas.yaml --data-dir /var/lib/silas start",
            ),
            ("WantedBy", "multi-user.target"),
        ] {
            assert_eq!(values(&u, k), vec![v], "{k} in\n{u}");
        }
    }

    #[test]
    fn relative_paths_keep_their_meaning_and_the_skills_dir_stays_writable() {
        // `silas service install` run in /srv/silas with the defaults.
        let mut s = spec(false);
        s.data_dir = "/srv/silas/data".into();
        s.working_dir = "/srv/silas".into();
        s.skills_dir = "/srv/silas/skills".into();
        let u = render_unit(&s);
        assert_eq!(values(&u, "WorkingDirectory"), vec!["/srv/silas"]);
        assert_eq!(
            values(&u, "ReadWritePaths"),
            vec!["/srv/silas/data", "/srv/silas/skills"]
        );
        let steps = next_steps(&s).join("\n");
        assert!(
            steps.contains("chown -R silas:silas /srv/silas/skills"),
            "{steps}"
        );
        // The user unit runs there too (no ReadWritePaths to add).
        s.user_mode = true;
        let u = render_unit(&s);
        assert_eq!(values(&u, "WorkingDirectory"), vec!["/srv/silas"]);
        assert!(values(&u, "ReadWritePaths").is_empty());
    }

    #[test]
    fn nothing_breaks_the_sandbox() {
        for user_mode in [false, true] {
            let u = render_unit(&spec(user_mode));
            let ns = values(&u, "RestrictNamespaces");
            assert_eq!(ns.len(), 1);
            let allowed: Vec<&str> = ns[0].split_whitespace().collect();
            for ns in ["user", "net", "pid"] {
                assert!(allowed.contains(&ns), "{ns}: {u}");
            }
            assert_eq!(values(&u, "PrivateUsers"), vec!["no"]);
            let filter = values(&u, "SystemCallFilter");
            assert_eq!(filter.len(), 1);
            assert!(!filter[0].starts_with('~'), "a deny list: {u}");
            for call in [
                "unshare",
                "landlock_create_ruleset",
                "landlock_add_rule",
                "landlock_restrict_self",
                "seccomp",
            ] {
                assert!(filter[0].split_whitespace().any(|c| c == call), "{call}");
            }
            assert!(values(&u, "MemoryDenyWriteExecute").is_empty());
        }
    }

    #[test]
    fn user_unit_has_no_account_and_no_namespace_options() {
        let u = render_unit(&spec(true));
        assert!(values(&u, "User").is_empty());
        assert!(values(&u, "ProtectSystem").is_empty());
        assert!(values(&u, "PrivateTmp").is_empty());
        assert_eq!(values(&u, "WantedBy"), vec!["default.target"]);
        let steps = next_steps(&spec(true)).join("\n");
        assert!(
            steps.contains("systemctl --user daemon-reload && systemctl --user enable --now silas")
        );
    }

    #[test]
    fn keyring_backend_loads_no_credential_and_paths_are_quoted() {
        let mut s = spec(false);
        s.kek = Kek::Keyring;
        s.data_dir = "/srv/my data".into();
        s.skills_dir = "/srv/my data/skills".into();
        let u = render_unit(&s);
        assert!(values(&u, "LoadCredential").is_empty());
        assert_eq!(values(&u, "ReadWritePaths"), vec!["\"/srv/my data\""]);
        assert!(values(&u, "ExecStart")[0].contains("--data-dir \"/srv/my data\" start"));
        // A whole-value path is never quoted (systemd would keep the quotes).
        s.working_dir = "/srv/my 100% data".into();
        s.exe = "/opt/$HOME/silas".into();
        let u = render_unit(&s);
        assert_eq!(values(&u, "WorkingDirectory"), vec!["/srv/my 100%% data"]);
        assert!(values(&u, "ExecStart")[0].starts_with("\"/opt/$$HOME/silas\" "));
        let steps = next_steps(&s).join("\n");
        assert!(steps.contains("systemctl daemon-reload && systemctl enable --now silas"));
    }

    #[test]
    fn a_missing_kek_file_is_a_comment_not_a_load() {
        let mut s = spec(false);
        s.kek = Kek::Missing {
            name: "silas-kek".into(),
            file: "/etc/silas/kek".into(),
        };
        let u = render_unit(&s);
        // systemd refuses to start a unit whose credential file is missing.
        assert!(values(&u, "LoadCredential").is_empty());
        assert!(
            u.contains("\n# LoadCredential=silas-kek:/etc/silas/kek\n"),
            "{u}"
        );
        assert!(next_steps(&s).iter().any(|l| l.contains("/etc/silas/kek")));
    }

    /// The API key reaches a service through a file only its account reads,
    /// never through the world-readable unit; the next steps say which
    /// variable goes there.
    #[test]
    fn the_api_key_comes_from_an_environment_file() {
        for user_mode in [false, true] {
            let s = spec(user_mode);
            let u = render_unit(&s);
            assert_eq!(
                values(&u, "EnvironmentFile"),
                vec!["-/nonexistent/silas/env"]
            );
            assert!(values(&u, "Environment").is_empty());
            let steps = next_steps(&s).join("\n");
            assert!(
                steps.contains("put the API key in /nonexistent/silas/env (mode 0600")
                    && steps.contains("OPENROUTER_API_KEY=…"),
                "{steps}"
            );
        }
        let mut keyless = spec(false);
        keyless.key_vars.clear();
        assert!(!next_steps(&keyless).join("\n").contains("API key"));
    }

    #[test]
    fn default_targets() {
        assert_eq!(
            default_target(false, None).unwrap(),
            Path::new("/etc/systemd/system/silas.service")
        );
        assert_eq!(
            default_target(true, Some(Path::new("/home/o"))).unwrap(),
            Path::new("/home/o/.config/systemd/user/silas.service")
        );
        assert!(default_target(true, None).is_err());
    }
}
