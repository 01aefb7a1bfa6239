//! Startup validation (§11 "Startup validation rules", plus the additions
//! listed in the module docs of [`super`]). Every rule yields at most one
//! [`ConfigError`] per offending key; `Config::validate` reports the first,
//! `Config::validation_errors` all of them in rule order.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use crate::model::agents::InteractionRegister;

use super::Config;
use super::error::ConfigError;
use super::operations::{APPROVAL_STRENGTHS, RISK_LEVELS};
use super::paths::{resolve_path, world_writable_mode};
use super::providers;
use super::sections::{MOOD_DIMENSIONS, PERSONALITY_AXES};

/// Maximum of `context.skill_metadata_budget_pct` (§11).
pub const MAX_SKILL_METADATA_BUDGET_PCT: f64 = 0.10;

/// Reingestion tiers (§3.8) accepted for `memory.raw_reingestion_default_tier`.
pub const REINGESTION_TIERS: [&str; 2] = ["active", "low_reingestion"];

/// Memory portability bundle formats this build can write.
pub const PORTABILITY_BUNDLE_FORMATS: [&str; 1] = ["jsonl-v1"];

/// `true` for `localhost`, any 127.0.0.0/8 address and `::1` (also in
/// brackets, and IPv4-mapped forms such as `::ffff:127.0.0.1`).
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    h.parse::<IpAddr>()
        .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// `owner_chat_id` must be a chat id; `owner_user_id` a user id, and
/// required when the owner chat is a group (negative id), since in a group
/// only the owner's user may act as the owner.
fn telegram_ids(tg: &super::sections::TelegramChannelConfig, c: &mut Checker) {
    let chat = match tg.owner_chat_id.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => match v.parse::<i64>() {
            Ok(id) if id != 0 => Some(id),
            _ => {
                c.fail(
                    "channels.telegram.owner_chat_id",
                    format!("must be a Telegram chat id (a non-zero integer), got {v:?}"),
                );
                None
            }
        },
        _ => None,
    };
    match tg.owner_user_id.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => {
            if !v.parse::<i64>().is_ok_and(|id| id > 0) {
                c.fail(
                    "channels.telegram.owner_user_id",
                    format!("must be a Telegram user id (a positive integer), got {v:?}"),
                );
            }
        }
        _ => {
            if tg.enabled && chat.is_some_and(|id| id < 0) {
                c.fail(
                    "channels.telegram.owner_user_id",
                    "required when channels.telegram.owner_chat_id is a group chat (negative id)",
                );
            }
        }
    }
}

/// The Bot API URL carries the token in every request: https, or plain http
/// only to a loopback host (a local Bot API server or a test fake).
/// A secret-store ref (the shape `silas_keys::secrets::valid_ref` accepts).
fn valid_secret_ref(r: &str) -> bool {
    r.len() <= 128
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `channels.web.public_url`: an absolute http(s) URL without credentials,
/// query or fragment (links are built by appending to it).
fn check_public_url(url: &str) -> Result<(), String> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("must be an http(s) URL, got {url:?}"))?;
    if !matches!(scheme, "http" | "https") {
        return Err(format!("must be an http(s) URL, got {url:?}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("has no host: {url:?}"));
    }
    if authority.contains('@') {
        return Err("must not contain credentials".into());
    }
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment".into());
    }
    Ok(())
}

fn check_bot_api_url(url: &str) -> Result<(), String> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("must be an http(s) URL, got {url:?}"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not contain credentials".into());
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    if host.is_empty() {
        return Err(format!("has no host: {url:?}"));
    }
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment".into());
    }
    match scheme {
        "https" => Ok(()),
        "http" if is_loopback_host(host) => Ok(()),
        "http" => Err(format!(
            "plain http is allowed only to a loopback host (the bot token is in every request), got host {host:?}"
        )),
        _ => Err(format!("must be an http(s) URL, got {url:?}")),
    }
}

fn blank(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(|s| s.trim().is_empty())
}

struct Checker {
    errors: Vec<ConfigError>,
}

impl Checker {
    fn fail(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::invalid(key, message));
    }

    fn positive(&mut self, key: &str, value: u64) {
        if value == 0 {
            self.fail(key, "must be greater than 0");
        }
    }

    /// A value in `[lo, hi]` (NaN is refused).
    fn within(&mut self, key: &str, value: f64, lo: f64, hi: f64) {
        if !(lo..=hi).contains(&value) {
            self.fail(key, format!("must be within [{lo}, {hi}], got {value}"));
        }
    }

    /// Keys of a delta/preset map must name known dimensions; values within range.
    fn dimension_map<'a>(
        &mut self,
        key: &str,
        map: impl IntoIterator<Item = (&'a String, &'a f64)>,
        allowed: &[&str],
        what: &str,
        lo: f64,
        hi: f64,
    ) {
        for (name, value) in map {
            let k = format!("{key}.{name}");
            if allowed.contains(&name.as_str()) {
                self.within(&k, *value, lo, hi);
            } else {
                self.errors.push(ConfigError::unknown_key(
                    k,
                    format!("unknown {what} (expected one of {})", allowed.join(", ")),
                ));
            }
        }
    }
}

/// Shortest accepted `channels.web.auth_token` (issue #12).
pub const MIN_AUTH_TOKEN_CHARS: usize = 32;

/// Runs every rule. `cwd` anchors relative paths.
pub(crate) fn collect(cfg: &Config, cwd: &Path) -> Vec<ConfigError> {
    let mut c = Checker { errors: Vec::new() };
    spec_rules(cfg, cwd, &mut c);
    additional_rules(cfg, &mut c);
    goal_rule(cfg, cwd, &mut c);
    c.errors
}

/// A chatbot goal opens the web chat to anonymous customers: the switch
/// must name a goal file that exists and says something, or a typo in the
/// path would open the chat with nothing behind it.
fn goal_rule(cfg: &Config, cwd: &Path, c: &mut Checker) {
    let Some(goal) = &cfg.active_goal else {
        return;
    };
    let path = resolve_path(goal, cwd);
    let shown = path.display().to_string();
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => c.fail(
            "active_goal",
            format!("{shown:?} is empty: a chatbot goal says what customers get"),
        ),
        Ok(_) => {}
        Err(e) => c.fail(
            "active_goal",
            format!("cannot read the goal file {shown:?}: {e}"),
        ),
    }
}

/// The thirteen §11 rules, in spec order.
fn spec_rules(cfg: &Config, cwd: &Path, c: &mut Checker) {
    // 1. A non-loopback web host requires an auth token (the spec names
    //    0.0.0.0; any address reachable from other hosts is treated alike).
    let web = &cfg.channels.web;
    if !is_loopback_host(&web.host) && blank(&web.auth_token) {
        c.fail(
            "channels.web.auth_token",
            format!(
                "required when channels.web.host is not a loopback address (got {:?})",
                web.host
            ),
        );
    }

    // Issue #12: a configured token is an owner credential; a short one is
    // guessable, so it is refused rather than weakening every device's.
    if let Some(t) = &web.auth_token
        && !t.trim().is_empty()
        && t.chars().count() < MIN_AUTH_TOKEN_CHARS
    {
        c.fail(
            "channels.web.auth_token",
            format!(
                "must be at least {MIN_AUTH_TOKEN_CHARS} characters (got {})",
                t.chars().count()
            ),
        );
    }

    // 2. verify_dir and customer_context_dir resolve to different canonical
    //    paths (and, stricter than the spec, neither contains the other).
    let data = resolve_path(&cfg.data_dir, cwd);
    let verify = resolve_path(&cfg.verify_dir(), cwd);
    let customer = resolve_path(&cfg.customer_context_dir(), cwd);
    if verify == customer {
        c.fail(
            "sandbox.verify_dir",
            format!(
                "must resolve to a different directory than sandbox.customer_context_dir \
                 (both resolve to {:?})",
                verify.display().to_string()
            ),
        );
    } else if verify.starts_with(&customer) || customer.starts_with(&verify) {
        c.fail(
            "sandbox.verify_dir",
            format!(
                "must not be nested with sandbox.customer_context_dir ({:?} vs {:?})",
                verify.display().to_string(),
                customer.display().to_string()
            ),
        );
    }

    // 2b. The sandbox root is searchable by the sandbox user (a root daemon
    //     makes it 0711); it must never be the data dir or one of its
    //     ancestors, which would open the private data dir to it.
    if let Some(root) = &cfg.sandbox.root_dir {
        let root = resolve_path(root, cwd);
        if data.starts_with(&root) {
            c.fail(
                "sandbox.root_dir",
                format!(
                    "must not be data_dir or contain it ({:?} vs data_dir {:?})",
                    root.display().to_string(),
                    data.display().to_string()
                ),
            );
        }
    }

    // 3. customer_context_dir strictly inside data_dir and not world-writable
    //    (checked on every existing directory from data_dir down to it).
    if !(customer.starts_with(&data) && customer != data) {
        c.fail(
            "sandbox.customer_context_dir",
            format!(
                "must be inside data_dir ({:?}), got {:?}",
                data.display().to_string(),
                customer.display().to_string()
            ),
        );
    } else {
        let mut chain: Vec<&Path> = customer
            .ancestors()
            .take_while(|p| p.starts_with(&data))
            .collect();
        chain.reverse();
        if let Some((dir, mode)) = chain
            .into_iter()
            .find_map(|p| world_writable_mode(p).map(|m| (p, m)))
        {
            c.fail(
                "sandbox.customer_context_dir",
                format!(
                    "must not be world-writable ({:?} has mode {mode:04o})",
                    dir.display().to_string()
                ),
            );
        }
    }

    // 4. Every context profile: each pct in [0, 1], sum <= 0.80.
    for (name, profile) in &cfg.context.profiles {
        if let Err(e) = profile.validate() {
            c.fail(format!("context.profiles.{name}"), e.to_string());
        }
    }

    // 5. Skill metadata budget.
    c.within(
        "context.skill_metadata_budget_pct",
        cfg.context.skill_metadata_budget_pct,
        0.0,
        MAX_SKILL_METADATA_BUDGET_PCT,
    );

    // 6. search.provider without search.api_key is not an error: web_search
    //    is simply not registered (`Config::web_search_enabled`).

    // 7. Every interaction register has a default mode.
    let missing: Vec<&str> = InteractionRegister::ALL
        .iter()
        .filter(|r| !cfg.interaction.default_mode_by_register.contains_key(r))
        .map(InteractionRegister::as_str)
        .collect();
    if !missing.is_empty() {
        c.fail(
            "interaction.default_mode_by_register",
            format!(
                "must define every register; missing: {}",
                missing.join(", ")
            ),
        );
    }

    // 8. Hysteresis between widening and tightening.
    let a = &cfg.autonomy;
    // `partial_cmp` so that NaN (incomparable) fails too.
    if a.widen_correction_rate_max
        .partial_cmp(&a.tighten_correction_rate_min)
        != Some(std::cmp::Ordering::Less)
    {
        c.fail(
            "autonomy.widen_correction_rate_max",
            format!(
                "must be less than autonomy.tighten_correction_rate_min (hysteresis required; got {} >= {})",
                a.widen_correction_rate_max, a.tighten_correction_rate_min
            ),
        );
    }

    // 9. Batch review sizing.
    if a.max_batch_review_size < cfg.batch_review.default_size {
        c.fail(
            "autonomy.max_batch_review_size",
            format!(
                "must be >= batch_review.default_size (got {} < {})",
                a.max_batch_review_size, cfg.batch_review.default_size
            ),
        );
    }

    // 10. Suggestions run on the scheduler's heartbeat.
    if cfg.suggestions.enabled && !cfg.scheduler.enabled {
        c.fail(
            "suggestions.enabled",
            "requires scheduler.enabled (suggestions run on the scheduler heartbeat)",
        );
    }

    // 11. External skill imports always produce a transform report.
    let import = &cfg.skills.import;
    if import.allow_external && !import.require_transform_report {
        c.fail(
            "skills.import.require_transform_report",
            "must be true when skills.import.allow_external is true",
        );
    }

    // 12. Description length bounds.
    let v = &cfg.skills.validation;
    if v.description_min_chars > v.description_max_chars {
        c.fail(
            "skills.validation.description_min_chars",
            format!(
                "must be <= skills.validation.description_max_chars (got {} > {})",
                v.description_min_chars, v.description_max_chars
            ),
        );
    }

    // 13. `fail_on_process_heavy_description` requires deterministic lint
    //     rules. The skill linter is deterministic by construction (fixed
    //     pattern rules, no model call), and the schema has no key that
    //     could configure a model-based evaluator, so this rule cannot fail.
    //     Should such a key be added, it must be refused here whenever
    //     `skills.validation.fail_on_process_heavy_description` is true.
}

/// The smallest context window a provider may declare: below it the
/// system prompt and a turn do not fit at all.
pub const MIN_CONTEXT_WINDOW: u64 = 2048;

/// Rules beyond §11 that keep obviously broken configurations from starting.
fn additional_rules(cfg: &Config, c: &mut Checker) {
    if cfg.owner_id.trim().is_empty() {
        c.fail("owner_id", "must not be empty");
    }

    // Switches this build cannot honour are refused, not ignored: an owner
    // who turned the web server off must not find it still listening.
    if !cfg.channels.web.enabled {
        c.fail(
            "channels.web.enabled",
            "the web server cannot be turned off (it serves /health, pairing, the \
             approvals and `silas chat`); keep channels.web.host on loopback, the default, \
             to keep it private",
        );
    }
    if cfg.sandbox.backend == super::operations::SandboxBackend::Docker {
        c.fail(
            "sandbox.backend",
            "\"docker\" is not available in this build; use \"subprocess\" \
             (namespaces, landlock, seccomp and rlimits)",
        );
    }

    // Providers and model strings.
    for (name, p) in &cfg.providers {
        if name == super::operations::OFFLINE_PROVIDER {
            c.fail(
                format!("providers.{name}"),
                "the provider name \"offline\" is reserved for the built-in offline responder",
            );
        }
        if name.is_empty() || name.contains(':') {
            c.fail(
                format!("providers.{name}"),
                "provider names must be non-empty and must not contain ':'",
            );
        }
        if p.base_url.is_empty() {
            c.fail(
                format!("providers.{name}.base_url"),
                format!("required (provider {name:?} has no built-in default)"),
            );
        } else if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
            c.fail(
                format!("providers.{name}.base_url"),
                format!("must be an http:// or https:// URL, got {:?}", p.base_url),
            );
        }
        if let Some(t) = p.timeout_seconds {
            c.positive(&format!("providers.{name}.timeout_seconds"), t);
        }
        if let Some(w) = p.context_window
            && w < MIN_CONTEXT_WINDOW
        {
            c.fail(
                format!("providers.{name}.context_window"),
                format!("must be at least {MIN_CONTEXT_WINDOW} tokens, got {w}"),
            );
        }
        if let Some(var) = &p.api_key_env
            && !is_env_var_name(var)
        {
            c.fail(
                format!("providers.{name}.api_key_env"),
                format!(
                    "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got {var:?}"
                ),
            );
        }
    }
    let m = &cfg.models;
    for (key, spec) in [
        ("models.proxy", &m.proxy),
        ("models.planner", &m.planner),
        ("models.executor", &m.executor),
        ("models.scorer", &m.scorer),
        ("gates.llm_defaults.model", &cfg.gates.llm_defaults.model),
    ] {
        let chain = super::model_chain(spec);
        if chain.is_empty() {
            c.fail(key, "must name a provider:model");
        }
        for (i, member) in chain.iter().enumerate() {
            if let Err(message) = providers::resolve(&cfg.providers, member) {
                let k = if chain.len() > 1 {
                    format!("{key}[{i}]")
                } else {
                    key.to_string()
                };
                c.fail(k, message);
            }
        }
    }

    llm_rules(&cfg.llm, c);

    // Search (checked whether or not web_search ends up enabled).
    let search = &cfg.search;
    c.positive(
        "chronicle.retention_days",
        cfg.chronicle.retention_days.into(),
    );
    c.positive(
        "audit.checkpoint_interval_minutes",
        cfg.audit.checkpoint_interval_minutes.into(),
    );
    c.positive("search.timeout_seconds", search.timeout_seconds);
    c.positive("search.max_results", search.max_results.into());
    c.positive("search.max_query_chars", search.max_query_chars.into());

    // Context budget.
    let ctx = &cfg.context;
    if !ctx.profiles.contains_key(&ctx.default_profile) {
        let known: Vec<&str> = ctx.profiles.keys().map(String::as_str).collect();
        c.fail(
            "context.default_profile",
            format!(
                "must name a profile in context.profiles, got {:?} (profiles: {})",
                ctx.default_profile,
                known.join(", ")
            ),
        );
    }
    c.positive("context.total_tokens", ctx.total_tokens);
    if ctx.system_max >= ctx.total_tokens {
        c.fail(
            "context.system_max",
            format!(
                "must be less than context.total_tokens (got {} >= {})",
                ctx.system_max, ctx.total_tokens
            ),
        );
    }
    c.positive(
        "context.max_subscription_tokens",
        ctx.max_subscription_tokens,
    );
    if !(ctx.eviction_threshold_pct > 0.0 && ctx.eviction_threshold_pct <= 1.0) {
        c.fail(
            "context.eviction_threshold_pct",
            format!("must be within (0, 1], got {}", ctx.eviction_threshold_pct),
        );
    }
    if !(ctx.scorer_threshold_pct >= ctx.eviction_threshold_pct && ctx.scorer_threshold_pct <= 1.0)
    {
        c.fail(
            "context.scorer_threshold_pct",
            format!(
                "must be within [context.eviction_threshold_pct, 1] = [{}, 1], got {}",
                ctx.eviction_threshold_pct, ctx.scorer_threshold_pct
            ),
        );
    }

    // Memory.
    let mem = &cfg.memory;
    c.positive("memory.embedding_dim", mem.embedding_dim.into());
    c.positive(
        "memory.consolidation_interval_minutes",
        mem.consolidation_interval_minutes.into(),
    );
    if !REINGESTION_TIERS.contains(&mem.raw_reingestion_default_tier.as_str()) {
        c.fail(
            "memory.raw_reingestion_default_tier",
            format!(
                "must be one of {}, got {:?}",
                REINGESTION_TIERS.join(", "),
                mem.raw_reingestion_default_tier
            ),
        );
    }
    if !PORTABILITY_BUNDLE_FORMATS.contains(&mem.portability_bundle_format.as_str()) {
        c.fail(
            "memory.portability_bundle_format",
            format!(
                "must be one of {}, got {:?}",
                PORTABILITY_BUNDLE_FORMATS.join(", "),
                mem.portability_bundle_format
            ),
        );
    }

    // Personality.
    let p = &cfg.personality;
    if p.directive_tokens_min > p.directive_tokens_max {
        c.fail(
            "personality.directive_tokens_min",
            format!(
                "must be <= personality.directive_tokens_max (got {} > {})",
                p.directive_tokens_min, p.directive_tokens_max
            ),
        );
    }
    c.within(
        "personality.decay_rate_per_hour",
        p.decay_rate_per_hour,
        0.0,
        1.0,
    );
    for (axis, value) in p.baseline.fields() {
        c.within(&format!("personality.baseline.{axis}"), value, 0.0, 1.0);
    }
    for (dim, value) in p.mood.neutral.fields() {
        c.within(&format!("personality.mood.neutral.{dim}"), value, 0.0, 1.0);
    }
    for (name, deltas) in &p.contexts {
        let key = format!("personality.contexts.{name}");
        c.dimension_map(
            &key,
            deltas,
            &PERSONALITY_AXES,
            "personality axis",
            -1.0,
            1.0,
        );
    }
    for (name, preset) in &p.presets {
        let key = format!("personality.presets.{name}");
        c.dimension_map(
            &key,
            preset,
            &PERSONALITY_AXES,
            "personality axis",
            0.0,
            1.0,
        );
    }
    for (event, w) in &p.mood.event_weights {
        let key = format!("personality.mood.event_weights.{event}");
        c.dimension_map(
            &format!("{key}.mood"),
            &w.mood,
            &MOOD_DIMENSIONS,
            "mood dimension",
            -1.0,
            1.0,
        );
        c.dimension_map(
            &format!("{key}.axes"),
            &w.axes,
            &PERSONALITY_AXES,
            "personality axis",
            -1.0,
            1.0,
        );
    }

    c.within(
        "interaction.high_initiative_min",
        cfg.interaction.high_initiative_min,
        0.0,
        1.0,
    );

    // Channels.
    let web = &cfg.channels.web;
    if web.host.trim().is_empty() {
        c.fail("channels.web.host", "must not be empty");
    }
    let tg = &cfg.channels.telegram;
    if let Some(url) = web.public_url.as_deref().filter(|u| !u.trim().is_empty())
        && let Err(why) = check_public_url(url)
    {
        c.fail("channels.web.public_url", why);
    }
    if let Some(r) = tg.token_ref.as_deref().filter(|r| !r.trim().is_empty())
        && !valid_secret_ref(r)
    {
        c.fail(
            "channels.telegram.token_ref",
            "must be a secret ref (letters, digits, '-' and '_', at most 128)",
        );
    }
    if tg.enabled {
        if blank(&tg.token) && blank(&tg.token_ref) {
            c.fail(
                "channels.telegram.token",
                "required when channels.telegram.enabled is true (set SILAS_TELEGRAM_TOKEN, or token_ref to a stored secret)",
            );
        }
        if blank(&tg.owner_chat_id) {
            c.fail(
                "channels.telegram.owner_chat_id",
                "required when channels.telegram.enabled is true (set SILAS_TELEGRAM_OWNER_ID)",
            );
        }
    }
    telegram_ids(tg, c);
    if let Err(why) = check_bot_api_url(&tg.api_url) {
        c.fail("channels.telegram.api_url", why);
    }

    // Limits and backpressure.
    for (field, value) in cfg.limits.fields() {
        c.positive(&format!("limits.{field}"), value.into());
    }
    let ceiling = &cfg.limits.plan_budget_ceiling;
    for (field, value) in ceiling.counts() {
        c.positive(&format!("limits.plan_budget_ceiling.{field}"), value);
    }
    if !(ceiling.max_cost_usd.is_finite() && ceiling.max_cost_usd >= 0.0) {
        c.fail(
            "limits.plan_budget_ceiling.max_cost_usd",
            format!("must be a number >= 0, got {}", ceiling.max_cost_usd),
        );
    }
    // A global cap below one scope's allowance would make the per-scope
    // limit meaningless (one scope could starve every other).
    if cfg.limits.llm_calls_per_minute_global < cfg.limits.llm_calls_per_minute_per_scope {
        c.fail(
            "limits.llm_calls_per_minute_global",
            format!(
                "must be >= limits.llm_calls_per_minute_per_scope (got {} < {})",
                cfg.limits.llm_calls_per_minute_global, cfg.limits.llm_calls_per_minute_per_scope
            ),
        );
    }
    let bp = &cfg.backpressure;
    c.positive(
        "backpressure.max_pending_turns_per_scope",
        bp.max_pending_turns_per_scope.into(),
    );
    c.positive(
        "backpressure.max_pending_turns_total",
        bp.max_pending_turns_total.into(),
    );
    if bp.max_pending_turns_per_scope > bp.max_pending_turns_total {
        c.fail(
            "backpressure.max_pending_turns_per_scope",
            format!(
                "must be <= backpressure.max_pending_turns_total (got {} > {})",
                bp.max_pending_turns_per_scope, bp.max_pending_turns_total
            ),
        );
    }

    // Sandbox resources.
    c.positive(
        "sandbox.default_memory_mb",
        cfg.sandbox.default_memory_mb.into(),
    );
    c.positive(
        "sandbox.default_cpu_seconds",
        cfg.sandbox.default_cpu_seconds.into(),
    );

    // Approval and nonce store.
    let ap = &cfg.approval;
    c.positive(
        "approval.default_ttl_minutes",
        ap.default_ttl_minutes.into(),
    );
    c.positive(
        "approval.standing_ttl_minutes",
        ap.standing_ttl_minutes.into(),
    );
    if ap.standing_ttl_minutes > crate::approval::MAX_TTL_MINUTES {
        c.fail(
            "approval.standing_ttl_minutes",
            format!(
                "must be at most one year ({} minutes), got {}",
                crate::approval::MAX_TTL_MINUTES,
                ap.standing_ttl_minutes
            ),
        );
    }
    c.positive("approval.max_executions", ap.max_executions.into());
    c.positive(
        "approval.plan_card_timeout_seconds",
        ap.plan_card_timeout_seconds,
    );
    c.positive(
        "approval.gate_card_timeout_seconds",
        ap.gate_card_timeout_seconds,
    );
    c.positive("approval.undo_window_seconds", ap.undo_window_seconds);
    if ap.undo_window_seconds > 7 * 24 * 3600 {
        c.fail(
            "approval.undo_window_seconds",
            format!(
                "must be at most a week (604800 s), got {}",
                ap.undo_window_seconds
            ),
        );
    }
    for (i, level) in ap.auto_approve_risk_levels.iter().enumerate() {
        if !RISK_LEVELS.contains(&level.as_str()) {
            c.fail(
                format!("approval.auto_approve_risk_levels[{i}]"),
                format!("must be one of {}, got {level:?}", RISK_LEVELS.join(", ")),
            );
        }
    }
    for (scope, strength) in &ap.scope_min_strength {
        if !APPROVAL_STRENGTHS.contains(&strength.as_str()) {
            c.fail(
                format!("approval.scope_min_strength.{scope}"),
                format!(
                    "must be one of {}, got {strength:?}",
                    APPROVAL_STRENGTHS.join(", ")
                ),
            );
        }
    }
    let ns = &cfg.nonce_store;
    if ns.ttl_minutes < ap.default_ttl_minutes {
        c.fail(
            "nonce_store.ttl_minutes",
            format!(
                "must be >= approval.default_ttl_minutes so nonces outlive the tokens they protect (got {} < {})",
                ns.ttl_minutes, ap.default_ttl_minutes
            ),
        );
    }
    c.positive(
        "nonce_store.prune_interval_minutes",
        ns.prune_interval_minutes.into(),
    );

    c.positive(
        "connections.recovery_max_attempts",
        cfg.connections.recovery_max_attempts.into(),
    );
    c.positive(
        "connections.setup_timeout_seconds",
        cfg.connections.setup_timeout_seconds,
    );
    for (host, addrs) in &cfg.connections.host_pins {
        let key = format!("connections.host_pins.{host}");
        let name_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
        if !name_ok {
            c.fail(key.clone(), "must be a plain host name");
        }
        if addrs.is_empty() {
            c.fail(key.clone(), "needs at least one address");
        }
        for a in addrs {
            if a.trim().parse::<std::net::IpAddr>().is_err() {
                c.fail(key.clone(), format!("{a:?} is not an IP address"));
            }
        }
    }
    for cidr in &cfg.connections.trusted_private_cidrs {
        let ok = cidr.split_once('/').is_some_and(|(ip, bits)| {
            ip.trim().parse::<std::net::IpAddr>().is_ok() && bits.trim().parse::<u8>().is_ok()
        });
        if !ok {
            c.fail(
                "connections.trusted_private_cidrs",
                format!("{cidr:?} is not a CIDR (address/prefix)"),
            );
        }
    }

    // Batch review and autonomy.
    c.positive(
        "batch_review.default_size",
        cfg.batch_review.default_size.into(),
    );
    let conf = &cfg.batch_review.confidence;
    c.within("batch_review.confidence.high_min", conf.high_min, 0.0, 1.0);
    c.within(
        "batch_review.confidence.medium_min",
        conf.medium_min,
        0.0,
        1.0,
    );
    if conf.medium_min > conf.high_min {
        c.fail(
            "batch_review.confidence.medium_min",
            format!(
                "must be <= batch_review.confidence.high_min (got {} > {})",
                conf.medium_min, conf.high_min
            ),
        );
    }
    let a = &cfg.autonomy;
    c.positive("autonomy.min_samples", a.min_samples.into());
    c.positive("autonomy.window_actions", a.window_actions.into());
    c.positive("autonomy.window_days", a.window_days.into());
    c.within(
        "autonomy.widen_correction_rate_max",
        a.widen_correction_rate_max,
        0.0,
        1.0,
    );
    c.within(
        "autonomy.tighten_correction_rate_min",
        a.tighten_correction_rate_min,
        0.0,
        1.0,
    );
    c.within("autonomy.hysteresis_delta", a.hysteresis_delta, 0.0, 1.0);
    c.within(
        "autonomy.min_high_confidence",
        a.min_high_confidence,
        0.0,
        1.0,
    );

    // Gates.
    let mut names = BTreeSet::new();
    for (i, gate) in cfg.gates.system.iter().enumerate() {
        match gate.get("name").and_then(|n| n.as_str()) {
            Some(name) if !name.trim().is_empty() => {
                if !names.insert(name) {
                    c.fail(
                        format!("gates.system[{i}].name"),
                        format!("duplicate gate name {name:?}"),
                    );
                }
            }
            _ => c.fail(
                format!("gates.system[{i}].name"),
                "every system gate needs a non-empty string name",
            ),
        }
    }
    // Keystore.
    let ks = &cfg.keystore;
    if !is_env_var_name(&ks.kek_env) {
        c.fail(
            "keystore.kek_env",
            format!(
                "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got {:?}",
                ks.kek_env
            ),
        );
    }
    // A credential name is joined to $CREDENTIALS_DIRECTORY: anything but a
    // plain file name could read outside it.
    let cred = ks.kek_credential.as_str();
    if cred.is_empty() || cred == "." || cred == ".." || cred.contains(['/', '\\', '\0']) {
        c.fail(
            "keystore.kek_credential",
            format!("must be a plain file name (no '/', not '.' or '..'), got {cred:?}"),
        );
    }
    if ks.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
        c.fail(
            "keystore.path",
            "must not be empty (use null for {data_dir}/keys/owner.key)",
        );
    }

    let llm = &cfg.gates.llm_defaults;
    c.within("gates.llm_defaults.temperature", llm.temperature, 0.0, 2.0);
    c.positive("gates.llm_defaults.timeout_seconds", llm.timeout_seconds);
    c.positive("gates.llm_defaults.max_tokens", llm.max_tokens.into());
}

/// `llm:`: positive limits, an ordered backoff window, well-formed price keys
/// and finite, non-negative prices.
fn llm_rules(llm: &super::operations::LlmConfig, c: &mut Checker) {
    c.positive("llm.timeout_seconds", llm.timeout_seconds);
    c.positive("llm.backoff_initial_ms", llm.backoff_initial_ms);
    c.positive("llm.max_tool_rounds", llm.max_tool_rounds.into());
    c.positive("llm.breaker_failures", llm.breaker_failures.into());
    c.positive("llm.breaker_open_seconds", llm.breaker_open_seconds);
    if llm.backoff_max_ms < llm.backoff_initial_ms {
        c.fail(
            "llm.backoff_max_ms",
            format!(
                "must be at least llm.backoff_initial_ms ({})",
                llm.backoff_initial_ms
            ),
        );
    }
    for (spec, price) in &llm.prices {
        let key = format!("llm.prices.{spec}");
        if !spec
            .split_once(':')
            .is_some_and(|(p, m)| !p.is_empty() && !m.is_empty())
        {
            c.fail(&key, "price keys are \"provider:model\" strings");
        }
        for (field, v) in [
            ("input_per_mtok_usd", price.input_per_mtok_usd),
            ("output_per_mtok_usd", price.output_per_mtok_usd),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                c.fail(
                    format!("{key}.{field}"),
                    format!("must be a finite number >= 0, got {v}"),
                );
            }
        }
    }
}
