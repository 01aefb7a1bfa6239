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

mod additional;
use additional::additional_rules;
pub use additional::looks_like_bot_token;

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
                    "must not be world-writable ({:?} has mode {mode:04o}; the directory is \
                     at fault, not the configuration: run `chmod o-w {}`)",
                    dir.display().to_string(),
                    dir.display()
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
