//! The validation rules beyond §11 (split from `validate.rs`, which keeps
//! the spec's thirteen rules, the goal-file check and the shared helpers):
//! what keeps an obviously broken configuration from starting, section by
//! section, and the `llm:` limits.

use super::*;

/// Rules beyond §11 that keep obviously broken configurations from starting.
pub(super) fn additional_rules(cfg: &Config, c: &mut Checker) {
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
    if cfg.sandbox.backend == crate::config::operations::SandboxBackend::Docker {
        c.fail(
            "sandbox.backend",
            "\"docker\" is not available in this build; use \"subprocess\" \
             (namespaces, landlock, seccomp and rlimits)",
        );
    }

    // Providers and model strings.
    for (name, p) in &cfg.providers {
        if name == crate::config::operations::OFFLINE_PROVIDER {
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
        if let Some(t) = p.temperature {
            c.within(&format!("providers.{name}.temperature"), t, 0.0, 2.0);
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
        let chain = crate::config::model_chain(spec);
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
    if let Some(t) = tg.token.as_deref().map(str::trim).filter(|t| !t.is_empty())
        && !looks_like_bot_token(t)
    {
        // The value itself is never echoed.
        c.fail(
            "channels.telegram.token",
            "not a bot token (expected <bot id>:<secret>, as BotFather gives it)",
        );
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
        // Checked here, not at the first turn: a gate that cannot be read
        // would block every turn, and one that can never pass every call.
        match crate::model::gates::Gate::from_definition(gate) {
            Err(why) => c.fail(
                match crate::model::gates::Gate::misread_key(gate) {
                    Some(key) => format!("gates.system[{i}].{key}"),
                    None => format!("gates.system[{i}]"),
                },
                why,
            ),
            Ok(g) => {
                // A misspelt key (`pattern:` for `check:`) would otherwise
                // be dropped, and the gate fail closed on every check.
                for key in g.unknown_keys(gate) {
                    c.errors.push(ConfigError::UnknownKey {
                        key: format!("gates.system[{i}].{key}"),
                        message:
                            "unknown gate key (see the gate fields in README \"Configuration\")"
                                .into(),
                    });
                }
                if let Some(why) = g.blocks_everything() {
                    c.fail(format!("gates.system[{i}].extract"), why);
                }
            }
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
fn llm_rules(llm: &crate::config::operations::LlmConfig, c: &mut Checker) {
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

/// `<bot id>:<secret>` as BotFather issues it: what `silas_telegram::BotToken`
/// accepts at start, checked here too so `silas config check` says what
/// `silas start` would refuse. The shape also keeps the token from changing
/// a request path (no `/`, `?`, `#`).
pub fn looks_like_bot_token(t: &str) -> bool {
    t.split_once(':').is_some_and(|(id, secret)| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && !secret.is_empty()
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}
