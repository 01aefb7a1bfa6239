//! The facts `silas doctor` judges, gathered from the system: file modes and
//! owners, the landlock ABI, a trial sandboxed command, who holds the web
//! port, the model endpoint's `/models`, the keystore, the store lock and
//! the clock. Verdicts live in `checks.rs`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope,
};
use serde::Deserialize;
use silas_core::config::Config;

use super::checks::{Ancestor, Model, PathFact, PortState, StoreState, Trial};

/// How long any network probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn path_fact(path: PathBuf) -> PathFact {
    let mode = std::fs::symlink_metadata(&path).ok().map(|m| m.mode());
    PathFact { path, mode }
}

/// Every existing directory from `/` down to `target` (inclusive when it
/// exists), with mode and owner. Missing tail components are skipped: `init`
/// creates them traversable.
pub fn ancestors(target: &Path) -> Vec<Ancestor> {
    let abs = std::path::absolute(target).unwrap_or_else(|_| target.to_path_buf());
    silas_sandbox::reach::ancestors(&abs)
        .into_iter()
        .map(|(path, p)| Ancestor {
            path,
            mode: p.mode,
            uid: p.uid,
            gid: p.gid,
        })
        .collect()
}

pub fn daemon_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A landlock ruleset is only created (a file descriptor), never applied:
/// the highest ABI whose rights the kernel accepts as a hard requirement.
pub fn landlock_abi() -> u8 {
    let probes: [(u8, ABI); 6] = [
        (6, ABI::V6),
        (5, ABI::V5),
        (4, ABI::V4),
        (3, ABI::V3),
        (2, ABI::V2),
        (1, ABI::V1),
    ];
    for (n, abi) in probes {
        if landlock_accepts(n, abi) {
            // Every right the sandbox uses is there: say the kernel's own
            // version, as the sandbox's line below does (a 6.15 kernel is
            // ABI 7, which adds no right to probe).
            return if n == 6 { n.max(kernel_abi()) } else { n };
        }
    }
    0
}

/// The running kernel's landlock ABI version (see the sandbox's).
fn kernel_abi() -> u8 {
    u8::try_from(silas_sandbox::kernel_landlock_abi()).unwrap_or(u8::MAX)
}

fn landlock_accepts(n: u8, abi: ABI) -> bool {
    let Ok(mut rs) = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
    else {
        return false;
    };
    if n >= 4 {
        let Ok(r) = rs.handle_access(AccessNet::from_all(abi)) else {
            return false;
        };
        rs = r;
    }
    if n >= 6 {
        let Ok(r) = rs.scope(Scope::AbstractUnixSocket) else {
            return false;
        };
        rs = r;
    }
    rs.create().is_ok()
}

/// The secret a trial command must not read: the owner key file when the
/// file keystore has one, else the store.
pub fn trial_secret(cfg: &Config) -> PathBuf {
    let key = cfg.keystore_path();
    if key.is_file() {
        key
    } else {
        cfg.data_dir.join(silas_storage::STORE_FILE)
    }
}

/// Runs one command through the real sandbox (this binary as launcher, no
/// network) in a fresh work dir under `{data_dir}/sandbox/work`, which is
/// removed afterwards.
pub async fn sandbox_trial(cfg: &Config, secret: &Path) -> Trial {
    let base = cfg.sandbox_work_dir();
    if !base.is_dir() {
        return Trial::NotInitialised;
    }
    let launcher = match silas_sandbox::Launcher::current_exe() {
        Ok(l) => l,
        Err(e) => return Trial::Failed(e.to_string()),
    };
    let sandbox = silas_sandbox::SubprocessSandbox::new(launcher);
    let id = format!("doctor-{}", std::process::id());
    let dir = match sandbox.fresh_work_dir(&base, &id) {
        Ok(d) => d,
        Err(e) => return Trial::Failed(e.to_string()),
    };
    let script = "cat \"$1\" >/dev/null 2>&1 && echo READ || echo DENIED";
    let mut spec = silas_sandbox::SandboxSpec::new(
        vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            secret.display().to_string(),
        ],
        dir.clone(),
    );
    spec.timeout = Duration::from_secs(10);
    let out = sandbox.run(&spec).await;
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) => Trial::Ran {
            exit_code: match o.termination {
                silas_sandbox::Termination::Exited { code } => Some(code),
                _ => None,
            },
            secret_read: o.stdout.trim() == "READ",
            confinement: o.confinement,
        },
        Err(e @ silas_sandbox::SandboxError::Unavailable { .. }) => {
            Trial::Unavailable(e.to_string())
        }
        Err(e) => Trial::Failed(e.to_string()),
    }
}

/// `host:port` of the web channel as configured.
pub fn web_addr(cfg: &Config) -> String {
    let ws = crate::chat::default_url(cfg);
    ws.trim_start_matches("ws://")
        .trim_end_matches("/ws")
        .to_string()
}

/// What `/health` of a Silas daemon answers (`silas-web`).
#[derive(Deserialize)]
struct Health {
    status: String,
    /// Present on every answer of this version, with or without the counts.
    #[serde(default)]
    service: Option<String>,
    /// The counts: what an earlier version's answer is known by.
    #[serde(default)]
    connections: Option<u64>,
}

/// Free (we can bind it), held by a Silas daemon (its `/health` answers as
/// ours), or held by something else.
pub async fn port_state(cfg: &Config) -> PortState {
    let host = cfg.channels.web.host.as_str();
    let port = cfg.channels.web.port;
    if port == 0 {
        return PortState::Free;
    }
    match std::net::TcpListener::bind((host, port)) {
        Ok(l) => {
            drop(l);
            return PortState::Free;
        }
        Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
            return PortState::Other(format!("cannot bind: {e}"));
        }
        Err(_) => {}
    }
    match health_is_silas(&web_addr(cfg)).await {
        Ok(()) => PortState::Silas,
        Err(why) => PortState::Other(why),
    }
}

async fn health_is_silas(addr: &str) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let resp = client
        .get(format!("http://{addr}/health"))
        .send()
        .await
        .map_err(|e| format!("no HTTP answer: {}", e.without_url()))?;
    if !resp.status().is_success() {
        return Err(format!(
            "GET /health answered HTTP {}",
            resp.status().as_u16()
        ));
    }
    match resp.json::<Health>().await {
        Ok(h)
            if h.status == "ok"
                && (h.service.as_deref() == Some("silas") || h.connections.is_some()) =>
        {
            Ok(())
        }
        _ => Err("GET /health does not answer as Silas".into()),
    }
}

/// The proxy model's endpoint asked for `/models`, or offline mode.
pub async fn model(cfg: &Config) -> Model {
    let env = silas_core::config::ProcessEnv;
    match silas_llm::choose_provider(cfg, &env) {
        Ok(silas_llm::ProviderChoice::Offline { reason }) => return Model::Offline { reason },
        Ok(_) => {}
        Err(e) => {
            return Model::Unreachable {
                base: cfg.models.proxy.clone(),
                error: e.to_string(),
            };
        }
    }
    let endpoint = match cfg.resolve_model(&cfg.models.proxy) {
        Ok(e) => e,
        Err(e) => {
            return Model::Unreachable {
                base: cfg.models.proxy.clone(),
                error: e.to_string(),
            };
        }
    };
    let base = endpoint.base_url.clone();
    use silas_llm::probe::ProbeOutcome as P;
    match silas_llm::probe::probe_models(&endpoint, &env, PROBE_TIMEOUT).await {
        P::Listed { models, named } => Model::Listed {
            base,
            models,
            missing: (!named).then(|| endpoint.model.clone()),
        },
        P::Refused { status } => Model::Refused { base, status },
        P::NotOpenAi { detail } => Model::NotOpenAi { base, detail },
        P::Unreachable { error } => Model::Unreachable { base, error },
        P::Silent { seconds } => Model::Silent { base, seconds },
    }
}

/// Opens the owner keystore read-only (`load`, never creating a key).
/// The keystore's description, or why it does not open and the fix.
pub fn keystore(cfg: &Config) -> Result<String, (String, String)> {
    let ks = crate::commands::keystore_from_config(cfg);
    match ks.load() {
        Ok(_) => Ok(ks.describe()),
        Err(e) => Err((e.to_string(), e.fix())),
    }
}

/// The uid owning the data dir (`None`: not there yet).
pub fn data_dir_owner(cfg: &Config) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(&cfg.data_dir).ok().map(|m| m.uid())
}

/// Bytes free for this user on the data dir's filesystem.
pub fn free_space(cfg: &Config) -> Option<u64> {
    crate::disk_full::free_space(&cfg.data_dir)
}

pub fn cli_token(cfg: &Config) -> Option<PathBuf> {
    let p = crate::devices::cli_token_path(&cfg.data_dir);
    p.is_file().then_some(p)
}

/// The store opened (and closed again) when it is not locked; with it, the
/// audit log's last timestamp for the clock check.
pub fn store(cfg: &Config) -> (StoreState, Option<chrono::DateTime<chrono::Utc>>) {
    let path = cfg.data_dir.join(silas_storage::STORE_FILE);
    if !path.is_file() {
        return (StoreState::Absent, None);
    }
    match silas_storage::Store::open(&path) {
        Ok(store) => {
            let last = store
                .audit()
                .tail(1)
                .ok()
                .and_then(|t| t.last().map(|e| e.timestamp.datetime()));
            (StoreState::Opens, last)
        }
        Err(silas_storage::StoreError::InUse { .. }) => (StoreState::InUse, None),
        Err(e) => (StoreState::Broken(e.to_string()), None),
    }
}

/// When this binary was written: the system clock cannot be earlier.
pub fn binary_time() -> Option<chrono::DateTime<chrono::Utc>> {
    let exe = std::env::current_exe().ok()?;
    let modified = std::fs::metadata(exe).ok()?.modified().ok()?;
    Some(chrono::DateTime::<chrono::Utc>::from(modified))
}

/// What the configured Bot API said to the bot token.
pub async fn telegram(cfg: &Config) -> Option<super::checks::Telegram> {
    use super::checks::Telegram as T;
    let tg = &cfg.channels.telegram;
    if !tg.enabled {
        return None;
    }
    let api = tg.api_url.trim().to_string();
    if tg.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
        // Kept in the secret store (token_ref): `silas start` reads it.
        return Some(T::StoredToken { api });
    }
    let settings = match silas_telegram::TelegramSettings::from_config(tg) {
        Ok(s) => s,
        Err(e) => {
            return Some(T::Invalid {
                detail: e.to_string(),
            });
        }
    };
    let client = match silas_telegram::BotClient::new(&settings.api_url, settings.token) {
        Ok(c) => c,
        Err(e) => {
            return Some(T::Invalid {
                detail: e.to_string(),
            });
        }
    };
    Some(
        match tokio::time::timeout(PROBE_TIMEOUT, client.get_me()).await {
            Ok(Ok(me)) => T::Answered {
                api,
                bot: me.username.unwrap_or(me.first_name),
            },
            Ok(Err(silas_telegram::TelegramError::Unauthorized { status, .. })) => {
                T::Rejected { api, status }
            }
            // The error never carries the request URL (the token is in it).
            Ok(Err(e)) => T::Unreachable {
                api,
                error: e.to_string(),
            },
            Err(_) => T::Unreachable {
                api,
                error: "no answer in time".into(),
            },
        },
    )
}

/// The process's open-file limits: (soft, hard; `None` = unlimited).
pub fn open_files() -> (u64, Option<u64>) {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (l.current.unwrap_or(u64::MAX), l.maximum)
}

/// The host's `TZ`, when `scheduler.timezone` is `local` and Silas cannot
/// read it (cron times then follow another zone than the host's clock).
pub fn unread_tz(cfg: &Config) -> Option<String> {
    let local = cfg
        .scheduler
        .timezone
        .trim()
        .eq_ignore_ascii_case(silas_actors::scheduler::cron_expr::LOCAL_TIMEZONE);
    local
        .then(|| silas_actors::scheduler::unread_tz(std::env::var("TZ").ok().as_deref()))
        .flatten()
}
