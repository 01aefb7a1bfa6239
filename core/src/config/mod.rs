//! Configuration (spec §11): the typed schema of `config/silas.yaml`, its
//! loading pipeline and the fail-fast startup validation.
//!
//! # Loading
//!
//! [`Config::from_yaml_str`] (and [`Config::load`], which reads the file
//! first) runs these steps:
//!
//! 1. Parse the text as YAML. The document must be a mapping whose only key
//!    is `silas:`; an empty document or an empty `silas:` means "all
//!    defaults".
//! 2. **Interpolation.** In every string scalar, `${VAR}` is replaced by the
//!    environment variable `VAR`. A scalar that is exactly `${VAR}` becomes
//!    `null` when VAR is unset; inside a longer string an unset VAR becomes
//!    the empty string. `$${` writes a literal `${`. Substituted values are
//!    always strings (never re-parsed as YAML); for typed values use an
//!    override.
//! 3. **Environment overrides.** Every variable `SILAS__A__B__C=value` sets
//!    the key `silas.a.b.c` (segments separated by a double underscore,
//!    lower-cased; the prefix is case-sensitive). The value is read as a
//!    YAML scalar: empty/`null`/`~` → null, `true`/`false` → bool, number
//!    literals → numbers, `[..]`/`{..}` flow collections and quoted strings
//!    → parsed YAML, anything else → the verbatim string. Intermediate
//!    mappings are created as needed, so overrides can reach keys the file
//!    leaves out, including entries of free-form maps
//!    (`SILAS__PERSONALITY__PRESETS__WORK__HUMOR=0.2`); list elements cannot
//!    be addressed. Overrides are applied in variable-name order, after
//!    interpolation. Examples: `SILAS__CHANNELS__WEB__PORT=9000`,
//!    `SILAS__CHANNELS__WEB__AUTH_TOKEN=s3cret`, `SILAS__DATA_DIR=/var/lib/silas`.
//! 4. **Typed deserialisation** into [`Config`]. Missing keys take the
//!    spec's defaults; unknown keys are refused (`E_CFG_UNKNOWN_KEY`),
//!    including keys introduced by an override (the error names the
//!    variable); wrong types are `E_CFG_INVALID`.
//!
//! Loading does **not** validate: call [`Config::validate`] before use
//! (`silas start` refuses to start on the first failure).
//!
//! # Error keys
//!
//! Every [`ConfigError`] renders as one line starting with the dotted key
//! *relative to the `silas:` root* (`channels.web.port: …`, sequence
//! elements as `gates.system[0].name`). Keys at the document root other
//! than `silas` are named as-is.
//!
//! # Additions to the §11 file
//!
//! * `providers:` — `name -> {base_url, api_key_env, structured_output,
//!   tool_calling}` OpenAI-compatible endpoints; the built-ins `openrouter`, `openai` and `ollama` are merged
//!   in when absent (a partially given built-in keeps its other fields).
//!   `models.*` and `gates.llm_defaults.model` are `provider:model` strings,
//!   split at the first `:` by [`Config::resolve_model`].
//! * `sandbox.verify_dir` / `sandbox.customer_context_dir` default to null,
//!   meaning `{data_dir}/sandbox/verify` and `{data_dir}/customer_context`
//!   ([`Config::verify_dir`], [`Config::customer_context_dir`]).
//! * `skills_dir` defaults to `./skills`.
//! * `keystore:` — where the owner signing key lives (§5.8 names only the
//!   OS keyring): `backend` `file` (default) or `keyring`; `path` (null:
//!   `{data_dir}/keys/owner.key`); `kek_credential` / `kek_env`, the systemd
//!   credential and then the environment variable a key-encryption key is
//!   read from ([`Config::keystore_path`]).
//!
//! # Validation
//!
//! [`Config::validate`] implements the §11 startup rules, generalised where
//! noted, plus range/consistency checks (see `validate.rs`):
//!
//! * `channels.web.auth_token` is required whenever `channels.web.host` is
//!   not a loopback address (127.0.0.0/8, `::1`, `localhost`), not only for
//!   `0.0.0.0`.
//! * Directories are compared after lexical normalisation against the
//!   working directory, with the existing part of the path canonicalised.
//!   `customer_context_dir` must be strictly inside `data_dir`, and no
//!   existing directory from `data_dir` down to it may be world-writable.
//!   `verify_dir` and `customer_context_dir` must differ and not nest.
//! * `search.provider` without a non-empty `search.api_key` is not an
//!   error: [`Config::web_search_enabled`] is then `false` and the runtime
//!   must not register `web_search`.
//! * `skills.validation.fail_on_process_heavy_description` requires
//!   deterministic lint rules: the skill linter is deterministic by
//!   construction and no key can configure a model-based evaluator, so the
//!   rule holds trivially.
//! * `keystore.kek_env` must be an environment variable name and
//!   `keystore.kek_credential` a plain file name (no `/`, not `.`/`..`);
//!   `keystore.path`, when set, must not be empty.
//! * `llm:` — model-call settings (not in §11): `timeout_seconds`,
//!   `max_retries`, `backoff_initial_ms`/`backoff_max_ms` (bounded
//!   exponential backoff), `max_tool_rounds`, `offline_fallback` and
//!   `prices` (`provider:model` → USD per million input/output tokens).
//! * The provider name `offline` is reserved for the built-in rule-based
//!   responder (`offline:rules`): it resolves without a `providers:` entry
//!   and cannot be defined there.

mod env;
mod error;
mod paths;
/// The members of a `models.<role>` value, in order.
pub fn model_chain(spec: &str) -> Vec<&str> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

mod operations;
mod providers;
mod sections;
mod serde_util;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

use crate::model::context::ContextProfile;

pub use env::{EnvSource, MapEnv, OVERRIDE_PREFIX, ProcessEnv};
pub use error::ConfigError;
pub use operations::*;
pub use paths::{expand_home, normalize_lexically, resolve_path, world_writable_mode};
pub use providers::{
    ModelEndpoint, ProviderConfig, StructuredOutputMode, ToolCallingMode, builtin_providers,
};
pub use sections::*;
pub use validate::{
    MAX_SKILL_METADATA_BUDGET_PCT, MIN_AUTH_TOKEN_CHARS, PORTABILITY_BUNDLE_FORMATS,
    REINGESTION_TIERS, is_loopback_host, looks_like_bot_token,
};

use env::{AppliedOverride, dotted};
use serde_util::lenient_string;

/// The shipped default configuration file, `config/silas.yaml`.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../../config/silas.yaml");

/// Where [`Config::load`] looks when no path is given (relative to the
/// working directory).
pub const DEFAULT_CONFIG_PATH: &str = "config/silas.yaml";

/// The `silas:` section: the whole configuration. `Default` is the spec's
/// defaults (identical to loading `silas: {}`).
///
/// `Serialize` emits a document that loads back to the same value; note that
/// it includes secrets (`channels.web.auth_token`, `channels.telegram.token`,
/// `search.api_key`) as they were resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Scope id of the owner (single-user mode maps every turn to it).
    #[serde(deserialize_with = "lenient_string")]
    pub owner_id: String,
    /// Root of all persistent state (database, sandbox directories).
    pub data_dir: PathBuf,
    pub models: ModelsConfig,
    /// Model providers, with the built-ins merged in.
    #[serde(deserialize_with = "providers::deserialize_providers")]
    pub providers: BTreeMap<String, ProviderConfig>,
    pub search: SearchConfig,
    pub context: ContextConfig,
    pub rehydration: RehydrationConfig,
    pub chronicle: ChronicleConfig,
    pub audit: AuditConfig,
    pub memory: MemoryConfig,
    pub personality: PersonalityConfig,
    pub interaction: InteractionConfig,
    pub suggestions: SuggestionsConfig,
    pub behavior_preferences: BehaviorPreferencesConfig,
    pub channels: ChannelsConfig,
    pub limits: LimitsConfig,
    pub backpressure: BackpressureConfig,
    pub sandbox: SandboxConfig,
    pub approval: ApprovalConfig,
    pub nonce_store: NonceStoreConfig,
    pub connections: ConnectionsConfig,
    pub batch_review: BatchReviewConfig,
    pub autonomy: AutonomyConfig,
    pub gates: GatesConfig,
    /// Path of a goal file registered at startup, if any.
    pub active_goal: Option<PathBuf>,
    pub scheduler: SchedulerConfig,
    pub skills: SkillsConfig,
    /// Flat skill namespace: one directory per skill.
    pub skills_dir: PathBuf,
    /// Where the owner signing key lives (§5.8).
    pub keystore: KeystoreConfig,
    /// How model calls are made (timeouts, retries, prices, offline fallback).
    pub llm: LlmConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            owner_id: "owner".to_owned(),
            data_dir: PathBuf::from("./data"),
            models: ModelsConfig::default(),
            providers: builtin_providers(),
            search: SearchConfig::default(),
            context: ContextConfig::default(),
            rehydration: RehydrationConfig::default(),
            chronicle: ChronicleConfig::default(),
            audit: AuditConfig::default(),
            memory: MemoryConfig::default(),
            personality: PersonalityConfig::default(),
            interaction: InteractionConfig::default(),
            suggestions: SuggestionsConfig::default(),
            behavior_preferences: BehaviorPreferencesConfig::default(),
            channels: ChannelsConfig::default(),
            limits: LimitsConfig::default(),
            backpressure: BackpressureConfig::default(),
            sandbox: SandboxConfig::default(),
            approval: ApprovalConfig::default(),
            nonce_store: NonceStoreConfig::default(),
            connections: ConnectionsConfig::default(),
            batch_review: BatchReviewConfig::default(),
            autonomy: AutonomyConfig::default(),
            gates: GatesConfig::default(),
            active_goal: None,
            scheduler: SchedulerConfig::default(),
            skills: SkillsConfig::default(),
            skills_dir: PathBuf::from("./skills"),
            keystore: KeystoreConfig::default(),
            llm: LlmConfig::default(),
        }
    }
}

/// The document root: `silas:` and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    silas: Config,
}

impl Config {
    /// Parses, interpolates, applies `SILAS__…` overrides and deserialises
    /// (see the module docs). Does not validate.
    pub fn from_yaml_str(text: &str, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        let mut root: Value = serde_yaml_ng::from_str(text)
            .map_err(|e| ConfigError::parse(None, format!("invalid YAML: {e}")))?;
        match &root {
            Value::Null => root = Value::Mapping(Mapping::new()),
            Value::Mapping(_) => {}
            _ => {
                return Err(ConfigError::parse(
                    None,
                    "the configuration document must be a mapping with a `silas:` key",
                ));
            }
        }
        env::interpolate(&mut root, env)?;
        let applied = env::apply_overrides(&mut root, env)?;
        if let Value::Mapping(map) = &mut root
            && let Some(section @ Value::Null) = map.get_mut("silas")
        {
            *section = Value::Mapping(Mapping::new());
        }
        let mut cfg = serde_path_to_error::deserialize::<_, ConfigFile>(root)
            .map(|file| file.silas)
            .map_err(|e| schema_error(e, &applied))?;
        cfg.expand_home(env.var("HOME").as_deref())?;
        Ok(cfg)
    }

    /// `~/…` in every configured path means the home directory, as in a
    /// shell; the error names the key of a `~` that cannot be expanded.
    fn expand_home(&mut self, home: Option<&str>) -> Result<(), ConfigError> {
        let fields: [(&str, Option<&mut PathBuf>); 7] = [
            ("silas.data_dir", Some(&mut self.data_dir)),
            ("silas.skills_dir", Some(&mut self.skills_dir)),
            ("silas.active_goal", self.active_goal.as_mut()),
            ("silas.sandbox.root_dir", self.sandbox.root_dir.as_mut()),
            ("silas.sandbox.verify_dir", self.sandbox.verify_dir.as_mut()),
            (
                "silas.sandbox.customer_context_dir",
                self.sandbox.customer_context_dir.as_mut(),
            ),
            ("silas.keystore.path", self.keystore.path.as_mut()),
        ];
        for (key, path) in fields {
            if let Some(p) = path {
                *p = paths::expand_home(p, home).map_err(|m| ConfigError::invalid(key, m))?;
            }
        }
        Ok(())
    }

    /// Loads the configuration file at `path`; with `None`, loads
    /// [`DEFAULT_CONFIG_PATH`] from the working directory when it exists and
    /// the built-in [`DEFAULT_CONFIG_YAML`] otherwise. Does not validate.
    pub fn load(path: Option<&Path>, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        let default_path = Path::new(DEFAULT_CONFIG_PATH);
        let path = match path {
            Some(p) => p,
            None if default_path.is_file() => default_path,
            None => return Config::from_yaml_str(DEFAULT_CONFIG_YAML, env),
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            context: format!("{}: cannot read configuration file", path.display()),
            source,
        })?;
        Config::from_yaml_str(&text, env).map_err(|e| match e {
            ConfigError::Parse { key: None, message } => ConfigError::Parse {
                key: None,
                message: format!("{}: {message}", path.display()),
            },
            other => other,
        })
    }

    /// `silas.data_dir` as a configuration text names it, read leniently:
    /// the rest of the file may be broken (a typo'd key since the daemon
    /// started). `None` when the text says nothing about it.
    pub fn data_dir_named_in(text: &str) -> Option<PathBuf> {
        let root: Value = serde_yaml_ng::from_str(text).ok()?;
        root.get("silas")?
            .get("data_dir")?
            .as_str()
            .map(PathBuf::from)
    }

    /// Runs every startup rule; the first failure is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.validation_errors().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every startup-rule failure, in rule order (empty when valid).
    /// Relative paths are resolved against the process working directory.
    pub fn validation_errors(&self) -> Vec<ConfigError> {
        match std::env::current_dir() {
            Ok(cwd) => self.validation_errors_in(&cwd),
            Err(source) => vec![ConfigError::Io {
                context: "cannot determine the working directory to resolve data_dir".to_owned(),
                source,
            }],
        }
    }

    /// [`Config::validation_errors`] with relative paths resolved against `cwd`.
    pub fn validation_errors_in(&self, cwd: &Path) -> Vec<ConfigError> {
        validate::collect(self, cwd)
    }

    /// Resolves a `provider:model` string (split at the first `:`) against
    /// `providers:`.
    /// The members of a `models.<role>` value, in order (one for a plain
    /// `provider:model`).
    pub fn model_chain(spec: &str) -> Vec<&str> {
        model_chain(spec)
    }

    pub fn resolve_model(&self, spec: &str) -> Result<ModelEndpoint, ConfigError> {
        providers::resolve(&self.providers, spec).map_err(|m| providers::model_error(spec, m))
    }

    /// Whether the `web_search` tool may be registered: `search.provider`
    /// and `search.api_key` are both set and non-empty. Without a key the
    /// tool is disabled rather than failing startup (§11).
    pub fn web_search_enabled(&self) -> bool {
        let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
        set(&self.search.provider) && set(&self.search.api_key)
    }

    /// The secret values this configuration hands the daemon: every
    /// provider's API key (from its `api_key_env`), the web auth token, the
    /// Telegram bot token and the web-search key. The daemon registers them
    /// with [`crate::secrets::register_known`] so a copy of one is redacted
    /// wherever it turns up, whatever its shape.
    pub fn secret_values(&self, env: &dyn EnvSource) -> Vec<String> {
        let keys = self
            .providers
            .values()
            .filter_map(|p| p.api_key_env.as_deref())
            .filter_map(|var| env.var(var));
        let configured = [
            &self.channels.web.auth_token,
            &self.channels.telegram.token,
            &self.search.api_key,
        ]
        .into_iter()
        .filter_map(Clone::clone);
        keys.chain(configured)
            .filter(|v| !v.trim().is_empty())
            .collect()
    }

    /// `{data_dir}/sandbox`: the one part of the data dir the unprivileged
    /// sandbox user must traverse (a root daemon runs sandboxes as `nobody`),
    /// so everything else in the data dir can stay owner-only.
    pub fn sandbox_root(&self) -> PathBuf {
        self.sandbox
            .root_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("sandbox"))
    }

    /// Makes every configured path absolute, once, against `cwd` (the
    /// directory the command was started in — what `./data` means to a
    /// user), resolving `.` and `..` lexically. After this nothing
    /// downstream sees a relative path: the sandbox launcher insists on
    /// absolute ones, and a relative path would silently change meaning
    /// with the process's working directory.
    pub fn anchor_paths(&mut self, cwd: &Path) {
        let fix = |p: &mut PathBuf| *p = paths::normalize_lexically(p, cwd);
        fix(&mut self.data_dir);
        fix(&mut self.skills_dir);
        for p in [
            self.active_goal.as_mut(),
            self.sandbox.root_dir.as_mut(),
            self.sandbox.verify_dir.as_mut(),
            self.sandbox.customer_context_dir.as_mut(),
            self.keystore.path.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            fix(p);
        }
    }

    /// `{data_dir}/sandbox/work`: the executors' per-run work dirs.
    pub fn sandbox_work_dir(&self) -> PathBuf {
        self.sandbox_root().join("work")
    }

    /// `sandbox.verify_dir`, or `{data_dir}/sandbox/verify` when unset.
    pub fn verify_dir(&self) -> PathBuf {
        self.sandbox
            .verify_dir
            .clone()
            .unwrap_or_else(|| self.sandbox_root().join("verify"))
    }

    /// `{data_dir}/artifacts`: stored artifacts, owner-only.
    pub fn artifacts_dir(&self) -> PathBuf {
        self.data_dir.join("artifacts")
    }

    /// `sandbox.customer_context_dir`, or `{data_dir}/customer_context` when unset.
    pub fn customer_context_dir(&self) -> PathBuf {
        self.sandbox
            .customer_context_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("customer_context"))
    }

    /// `keystore.path`, or `{data_dir}/keys/owner.key` when unset.
    pub fn keystore_path(&self) -> PathBuf {
        self.keystore
            .path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("keys").join("owner.key"))
    }

    /// The profile named by `context.default_profile` (always present in a
    /// validated configuration).
    pub fn default_context_profile(&self) -> Option<&ContextProfile> {
        self.context.profiles.get(&self.context.default_profile)
    }
}

/// Turns a deserialisation failure into a keyed [`ConfigError`]: unknown
/// fields become `E_CFG_UNKNOWN_KEY` naming the full key, everything else
/// `E_CFG_INVALID`; either names the override variable responsible, if any.
fn schema_error(
    e: serde_path_to_error::Error<serde_yaml_ng::Error>,
    applied: &[AppliedOverride],
) -> ConfigError {
    let mut segments: Vec<String> = e
        .path()
        .iter()
        .map(|seg| match seg {
            serde_path_to_error::Segment::Seq { index } => format!("[{index}]"),
            serde_path_to_error::Segment::Map { key } => key.clone(),
            serde_path_to_error::Segment::Enum { variant } => variant.clone(),
            serde_path_to_error::Segment::Unknown => "?".to_owned(),
        })
        .collect();
    let message = e.inner().to_string();
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'));
    let from_env = |segments: &[String]| {
        applied
            .iter()
            .find(|o| o.path.starts_with(segments))
            .map(|o| format!(" (set by environment variable {})", o.var))
            .unwrap_or_default()
    };
    match unknown {
        Some((field, rest)) => {
            // serde_path_to_error usually records the offending key as the
            // last segment already; add it only when it does not.
            if segments.last().map(String::as_str) != Some(field) {
                segments.push(field.to_owned());
            }
            let expected = rest.trim_start_matches([',', ' ']);
            let expected = if expected.is_empty() {
                String::new()
            } else {
                format!("; {expected}")
            };
            ConfigError::unknown_key(
                dotted(&segments),
                format!("unknown key{expected}{}", from_env(&segments)),
            )
        }
        None => ConfigError::invalid(
            dotted(&segments),
            format!("{message}{}", from_env(&segments)),
        ),
    }
}
