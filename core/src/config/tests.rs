use std::path::{Path, PathBuf};

use super::env::interpolate_str;
use super::*;
use crate::error::{Coded, ErrorCode};
use crate::model::agents::{InteractionMode, InteractionRegister};

fn empty() -> MapEnv {
    MapEnv::new()
}

fn load(yaml: &str) -> Config {
    Config::from_yaml_str(yaml, &empty()).unwrap()
}

fn load_err(yaml: &str, env: &MapEnv) -> ConfigError {
    Config::from_yaml_str(yaml, env).unwrap_err()
}

/// A cwd that does not exist, so relative paths resolve lexically and
/// deterministically.
const FAKE_CWD: &str = "/silas-config-test-cwd";

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "silas-config-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn errors(cfg: &Config) -> Vec<ConfigError> {
    cfg.validation_errors_in(Path::new(FAKE_CWD))
}

// ---------------------------------------------------------------------------
// defaults

#[test]
fn shipped_file_loads_validates_and_equals_defaults() {
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &empty()).unwrap();
    assert_eq!(cfg, Config::default());
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));
    cfg.validate().unwrap();

    // Spot checks against §11.
    assert_eq!(cfg.owner_id, "owner");
    assert_eq!(cfg.data_dir, PathBuf::from("./data"));
    assert_eq!(cfg.models.proxy, "openrouter:anthropic/claude-haiku-4-5");
    assert_eq!(cfg.models.planner, "openrouter:anthropic/claude-sonnet-4-5");
    assert_eq!(cfg.search.provider.as_deref(), Some("tavily"));
    assert_eq!(cfg.search.api_key, None);
    assert_eq!(cfg.search.timeout_seconds, 8);
    assert!(cfg.search.allowed_domains.is_empty());
    assert!(!cfg.web_search_enabled());
    assert_eq!(cfg.context.total_tokens, 180_000);
    assert_eq!(cfg.context.system_max, 8_000);
    assert_eq!(cfg.context.skill_metadata_budget_pct, 0.02);
    assert_eq!(cfg.context.default_profile, "conversation");
    assert_eq!(cfg.context.profiles.len(), 4);
    let coding = &cfg.context.profiles["coding"];
    assert_eq!(coding.name, "coding");
    assert_eq!(coding.workspace_pct, 0.40);
    assert_eq!(cfg.default_context_profile().unwrap().chronicle_pct, 0.45);
    assert_eq!(cfg.rehydration.max_chronicle_entries, 50);
    assert_eq!(cfg.memory.embedding_dim, 384);
    assert_eq!(cfg.memory.raw_reingestion_default_tier, "low_reingestion");
    assert_eq!(cfg.personality.baseline.assertiveness, 0.75);
    assert_eq!(cfg.personality.contexts["crisis"]["humor"], -0.50);
    assert_eq!(cfg.personality.mood.neutral.curiosity, 0.50);
    assert_eq!(
        cfg.personality.mood.event_weights["compliment"].axes["warmth"],
        0.05
    );
    assert!(
        cfg.personality.mood.event_weights["ci_failure"]
            .axes
            .is_empty()
    );
    assert_eq!(cfg.personality.constitution.len(), 4);
    assert_eq!(cfg.personality.voice.anti_patterns.len(), 3);
    assert!(cfg.personality.presets["default"].is_empty());
    assert_eq!(cfg.personality.presets["review"]["certainty"], 0.85);
    assert_eq!(
        cfg.interaction.default_mode_by_register[&InteractionRegister::Execution],
        InteractionMode::ActAndReport
    );
    assert_eq!(cfg.suggestions.heartbeat_cron, "*/15 * * * *");
    assert_eq!(cfg.behavior_preferences.max_new_inferences_per_day, 20);
    assert!(cfg.channels.web.enabled);
    assert_eq!(cfg.channels.web.host, "127.0.0.1");
    assert_eq!(cfg.channels.web.port, 8420);
    assert_eq!(cfg.channels.web.auth_token, None);
    assert!(!cfg.channels.telegram.enabled);
    assert_eq!(cfg.channels.telegram.token, None);
    assert_eq!(cfg.channels.telegram.owner_chat_id, None);
    assert!(!cfg.channels.cli.enabled);
    assert_eq!(cfg.limits.max_gate_evals_per_turn, 32);
    assert_eq!(cfg.backpressure.max_pending_turns_total, 500);
    assert_eq!(cfg.sandbox.backend, SandboxBackend::Subprocess);
    assert_eq!(cfg.sandbox.base_image, "python:3.12-slim");
    assert_eq!(cfg.sandbox.verify_dir, None);
    assert_eq!(cfg.verify_dir(), PathBuf::from("./data/sandbox/verify"));
    assert_eq!(
        cfg.customer_context_dir(),
        PathBuf::from("./data/customer_context")
    );
    assert_eq!(cfg.approval.default_ttl_minutes, 30);
    assert_eq!(cfg.approval.scope_min_strength.len(), 5);
    assert!(cfg.approval.scope_min_strength.values().all(|s| s == "tap"));
    assert_eq!(cfg.nonce_store.ttl_minutes, 40);
    assert_eq!(cfg.connections.recovery_max_attempts, 3);
    assert_eq!(cfg.batch_review.confidence.high_min, 0.85);
    assert_eq!(cfg.autonomy.tighten_correction_rate_min, 0.20);
    assert_eq!(cfg.gates.system.len(), 2);
    assert_eq!(cfg.gates.system[0]["name"], "input_guard");
    assert_eq!(cfg.gates.system[0]["on"], "every_user_message");
    assert_eq!(cfg.gates.system[1]["on_block"], "report");
    assert_eq!(cfg.gates.llm_defaults.max_tokens, 256);
    assert_eq!(cfg.active_goal, None);
    assert_eq!(cfg.scheduler.timezone, "local");
    assert_eq!(cfg.skills.validation.description_max_chars, 1024);
    assert_eq!(cfg.skills.import.allowed_sources, ["github", "local_path"]);
    assert_eq!(cfg.skills_dir, PathBuf::from("./skills"));
    assert_eq!(cfg.providers.len(), 3);
}

#[test]
fn minimal_documents_yield_defaults() {
    for doc in ["silas: {}", "silas:", "", "# only a comment\n"] {
        assert_eq!(load(doc), Config::default(), "{doc:?}");
    }
}

#[test]
fn load_without_path_uses_embedded_default() {
    // Tests run in core/, which has no config/silas.yaml.
    assert!(!Path::new(DEFAULT_CONFIG_PATH).exists());
    assert_eq!(Config::load(None, &empty()).unwrap(), Config::default());
}

#[test]
fn load_missing_file_is_io_error() {
    let e = Config::load(Some(Path::new("/nonexistent/silas.yaml")), &empty()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ECfgIo);
    assert!(
        e.to_string().starts_with("/nonexistent/silas.yaml: "),
        "{e}"
    );
}

#[test]
fn load_reads_the_given_file() {
    let dir = temp_dir("load");
    let path = dir.join("silas.yaml");
    std::fs::write(&path, "silas:\n  channels:\n    web:\n      port: 9100\n").unwrap();
    let cfg = Config::load(Some(&path), &empty()).unwrap();
    assert_eq!(cfg.channels.web.port, 9100);
    std::fs::write(&path, "silas: [unclosed").unwrap();
    let e = Config::load(Some(&path), &empty()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ECfgParse);
    assert!(
        e.to_string().starts_with(&path.display().to_string()),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serialized_config_loads_back_identically() {
    let mut cfg = Config::default();
    cfg.channels.web.auth_token = Some("t".into());
    cfg.sandbox.verify_dir = Some(PathBuf::from("/v"));
    let yaml = serde_yaml_ng::to_string(&serde_yaml_ng::Mapping::from_iter([(
        "silas".into(),
        serde_yaml_ng::to_value(&cfg).unwrap(),
    )]))
    .unwrap();
    assert_eq!(load(&yaml), cfg);
}

// ---------------------------------------------------------------------------
// interpolation

#[test]
fn interpolation_rules() {
    let env = MapEnv::new().with("A", "alpha").with("EMPTY", "");
    let i = |s: &str| interpolate_str(s, &env);
    assert_eq!(i("${A}"), Ok(Some("alpha".into())));
    assert_eq!(i("${UNSET}"), Ok(None));
    assert_eq!(i("${EMPTY}"), Ok(Some(String::new())));
    assert_eq!(i("x-${A}-y"), Ok(Some("x-alpha-y".into())));
    assert_eq!(i("x-${UNSET}-y"), Ok(Some("x--y".into())));
    assert_eq!(i("${A}${A}"), Ok(Some("alphaalpha".into())));
    assert_eq!(i("$${A}"), Ok(Some("${A}".into())));
    assert_eq!(i("cost $5 and $$"), Ok(Some("cost $5 and $$".into())));
    assert_eq!(i("$${A} and ${A}"), Ok(Some("${A} and alpha".into())));
    assert!(i("oops ${A").unwrap_err().contains("unterminated"));
    assert!(
        i("${not-valid}")
            .unwrap_err()
            .contains("invalid environment variable reference")
    );
}

#[test]
fn interpolation_in_config() {
    let env = MapEnv::new()
        .with("TZ_CITY", "Berlin")
        .with("SEARCH_API_KEY", "k-123");
    let yaml = "silas:\n  scheduler:\n    timezone: \"Europe/${TZ_CITY}\"\n  search:\n    api_key: \"${SEARCH_API_KEY}\"\n  skills:\n    import:\n      allowed_sources: [\"${UNSET_SRC}x\", \"$${literal}\"]\n";
    let cfg = Config::from_yaml_str(yaml, &env).unwrap();
    assert_eq!(cfg.scheduler.timezone, "Europe/Berlin");
    assert_eq!(cfg.search.api_key.as_deref(), Some("k-123"));
    assert!(cfg.web_search_enabled());
    assert_eq!(cfg.skills.import.allowed_sources, ["x", "${literal}"]);

    // Exact ${VAR} unset → null, so a required string field reports its key.
    let e = load_err("silas:\n  owner_id: \"${NO_SUCH_OWNER}\"\n", &empty());
    assert_eq!(e.key(), Some("owner_id"), "{e}");

    let e = load_err(
        "silas:\n  gates:\n    system:\n      - name: \"${broken\"\n",
        &empty(),
    );
    assert_eq!(e.code(), ErrorCode::ECfgParse);
    assert!(
        e.to_string()
            .starts_with("gates.system[0].name: unterminated"),
        "{e}"
    );
}

#[test]
fn telegram_credentials_from_env() {
    let env = MapEnv::new()
        .with("SILAS_TELEGRAM_TOKEN", "123456:ABC-def")
        .with("SILAS_TELEGRAM_OWNER_ID", "987654321")
        .with("SILAS__CHANNELS__TELEGRAM__ENABLED", "true");
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &env).unwrap();
    assert!(cfg.channels.telegram.enabled);
    assert_eq!(
        cfg.channels.telegram.token.as_deref(),
        Some("123456:ABC-def")
    );
    assert_eq!(
        cfg.channels.telegram.owner_chat_id.as_deref(),
        Some("987654321")
    );
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));

    // Enabled without the variables: both keys are reported.
    let env = MapEnv::new().with("SILAS__CHANNELS__TELEGRAM__ENABLED", "true");
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &env).unwrap();
    let keys: Vec<_> = errors(&cfg)
        .iter()
        .map(|e| e.key().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        ["channels.telegram.token", "channels.telegram.owner_chat_id"]
    );

    // A numeric chat id written unquoted, or overridden, is accepted as text.
    let cfg = load("silas:\n  channels:\n    telegram:\n      owner_chat_id: 42\n");
    assert_eq!(cfg.channels.telegram.owner_chat_id.as_deref(), Some("42"));
}

#[test]
fn telegram_transport_keys_default_and_validate() {
    use crate::risk::RiskLevel;
    let cfg = load("silas: {}\n");
    let tg = &cfg.channels.telegram;
    assert_eq!(tg.api_url, "https://api.telegram.org");
    assert_eq!(tg.max_approval_risk, RiskLevel::Medium);
    assert_eq!(tg.owner_user_id, None);

    let cfg = load(
        "silas:\n  channels:\n    telegram:\n      api_url: http://127.0.0.1:8081\n      \
         owner_chat_id: -1001\n      owner_user_id: 42\n      max_approval_risk: low\n",
    );
    let tg = &cfg.channels.telegram;
    assert_eq!(tg.api_url, "http://127.0.0.1:8081");
    assert_eq!(tg.owner_user_id.as_deref(), Some("42"));
    assert_eq!(tg.max_approval_risk, RiskLevel::Low);
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));

    for ok in [
        "https://tg.example.org/",
        "http://localhost:9000",
        "http://[::1]:1",
    ] {
        let mut c = cfg.clone();
        c.channels.telegram.api_url = ok.into();
        assert!(errors(&c).is_empty(), "{ok}: {:?}", errors(&c));
    }
    let env = MapEnv::new();
    let err = Config::from_yaml_str(
        "silas:\n  channels:\n    telegram:\n      max_approval_risk: extreme\n",
        &env,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("channels.telegram.max_approval_risk"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// overrides

#[test]
fn override_sets_typed_values() {
    let env = MapEnv::new()
        .with("SILAS__CHANNELS__WEB__PORT", "9000")
        .with("SILAS__CHANNELS__CLI__ENABLED", "true")
        .with("SILAS__SEARCH__PROVIDER", "null")
        .with(
            "SILAS__SEARCH__ALLOWED_DOMAINS",
            "[example.com, example.org]",
        )
        .with("SILAS__DATA_DIR", "/var/lib/silas")
        .with("SILAS__CONTEXT__SKILL_METADATA_BUDGET_PCT", "0.05")
        .with("SILAS__PERSONALITY__PRESETS__WORK__HUMOR", "0.2")
        .with("SILAS__CHANNELS__WEB__AUTH_TOKEN", "tok # not a comment")
        .with("SILAS__OWNER_ID", "12345")
        .with("SILAS_TELEGRAM_TOKEN", "ignored: single underscore");
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &env).unwrap();
    assert_eq!(cfg.channels.web.port, 9000);
    assert!(cfg.channels.cli.enabled);
    assert_eq!(cfg.search.provider, None);
    assert_eq!(cfg.search.allowed_domains, ["example.com", "example.org"]);
    assert_eq!(cfg.data_dir, PathBuf::from("/var/lib/silas"));
    assert_eq!(cfg.context.skill_metadata_budget_pct, 0.05);
    assert_eq!(cfg.personality.presets["work"]["humor"], 0.2);
    assert_eq!(cfg.personality.presets["work"]["formality"], 0.70);
    assert_eq!(
        cfg.channels.web.auth_token.as_deref(),
        Some("tok # not a comment")
    );
    assert_eq!(cfg.owner_id, "12345");
    // Overrides reach keys the file leaves out.
    let cfg = Config::from_yaml_str("silas: {}", &env).unwrap();
    assert_eq!(cfg.channels.web.port, 9000);
}

#[test]
fn override_value_parsing() {
    use super::env::parse_override_value as p;
    use serde_yaml_ng::Value;
    assert_eq!(p(""), Value::Null);
    assert_eq!(p("~"), Value::Null);
    assert_eq!(p("false"), Value::Bool(false));
    assert_eq!(p("9000"), Value::from(9000));
    assert_eq!(p("-1.5"), Value::from(-1.5));
    assert_eq!(p("\"9000\""), Value::from("9000"));
    assert_eq!(p("123:abc"), Value::from("123:abc"));
    assert_eq!(p("#secret"), Value::from("#secret"));
    assert_eq!(p("a: b"), Value::from("a: b"));
    assert_eq!(p("[unclosed"), Value::from("[unclosed"));
}

#[test]
fn override_of_unknown_key_names_it() {
    let env = MapEnv::new().with("SILAS__CHANNELS__WEB__PROT", "9000");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.code(), ErrorCode::ECfgUnknownKey);
    assert_eq!(e.key(), Some("channels.web.prot"));
    let text = e.to_string();
    assert!(text.starts_with("channels.web.prot: unknown key"), "{text}");
    assert!(text.contains("SILAS__CHANNELS__WEB__PROT"), "{text}");

    let env = MapEnv::new().with("SILAS__NO_SUCH_SECTION__X", "1");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.key(), Some("no_such_section"));
    assert!(e.to_string().contains("SILAS__NO_SUCH_SECTION__X"), "{e}");
}

#[test]
fn override_wrong_type_names_key_and_variable() {
    let env = MapEnv::new().with("SILAS__CHANNELS__WEB__PORT", "http");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.code(), ErrorCode::ECfgInvalid);
    assert_eq!(e.key(), Some("channels.web.port"));
    assert!(e.to_string().contains("SILAS__CHANNELS__WEB__PORT"), "{e}");
}

#[test]
fn override_malformed_names() {
    let env = MapEnv::new().with("SILAS__CHANNELS____PORT", "1");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.code(), ErrorCode::ECfgParse);
    assert!(e.to_string().contains("SILAS__CHANNELS____PORT"), "{e}");

    // Descending through a scalar.
    let env = MapEnv::new().with("SILAS__OWNER_ID__X", "1");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.key(), Some("owner_id"), "{e}");
}

// ---------------------------------------------------------------------------
// schema errors

#[test]
fn unknown_yaml_key_names_full_path() {
    let cases = [
        (
            "silas:\n  channels:\n    web:\n      prot: 1\n",
            "channels.web.prot",
        ),
        ("silas:\n  keystore:\n    kek: x\n", "keystore.kek"),
        ("silas: {}\nextra: 1\n", "extra"),
        (
            "silas:\n  context:\n    profiles:\n      coding: { chronicle_pct: 0.1, memory_pct: 0.1, workspace_pct: 0.1, name: x }\n",
            "context.profiles.coding.name",
        ),
        (
            "silas:\n  providers:\n    openrouter: { bse_url: x }\n",
            "providers.openrouter.bse_url",
        ),
        (
            "silas:\n  personality:\n    mood:\n      event_weights:\n        x: { mood: {}, axis: {} }\n",
            "personality.mood.event_weights.x.axis",
        ),
    ];
    for (yaml, key) in cases {
        let e = load_err(yaml, &empty());
        assert_eq!(e.code(), ErrorCode::ECfgUnknownKey, "{e}");
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(
            e.to_string().starts_with(&format!("{key}: unknown key")),
            "{e}"
        );
    }
}

#[test]
fn wrong_type_names_path() {
    let cases = [
        (
            "silas:\n  channels:\n    web:\n      port: eighty\n",
            "channels.web.port",
        ),
        (
            "silas:\n  channels:\n    web:\n      port: 70000\n",
            "channels.web.port",
        ),
        (
            "silas:\n  personality:\n    baseline:\n      warmth: high\n",
            "personality.baseline.warmth",
        ),
        (
            "silas:\n  sandbox:\n    backend: podman\n",
            "sandbox.backend",
        ),
        ("silas:\n  gates:\n    system: [1]\n", "gates.system[0]"),
        (
            "silas:\n  context:\n    profiles:\n      x: { chronicle_pct: 0.1 }\n",
            "context.profiles.x",
        ),
        (
            "silas:\n  skills:\n    import:\n      allowed_sources: github\n",
            "skills.import.allowed_sources",
        ),
        ("silas: 3\n", "silas"),
    ];
    for (yaml, key) in cases {
        let e = load_err(yaml, &empty());
        assert_eq!(e.code(), ErrorCode::ECfgInvalid, "{e}");
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[test]
fn invalid_yaml_is_parse_error() {
    let e = load_err("silas: [unclosed", &empty());
    assert_eq!(e.code(), ErrorCode::ECfgParse);
    assert!(!e.to_string().contains('\n'));
    let e = load_err("- a\n- b\n", &empty());
    assert_eq!(e.code(), ErrorCode::ECfgParse);
}

// ---------------------------------------------------------------------------
// validation

type Mutation = fn(&mut Config);

#[test]
fn every_validation_rule_names_its_key() {
    let cases: Vec<(&str, Mutation)> = vec![
        // §11 rules
        ("channels.web.auth_token", |c| {
            c.channels.web.host = "0.0.0.0".into()
        }),
        ("channels.web.auth_token", |c| {
            c.channels.web.host = "192.168.1.10".into()
        }),
        ("channels.web.auth_token", |c| {
            c.channels.web.host = "example.com".into();
            c.channels.web.auth_token = Some("  ".into());
        }),
        ("sandbox.verify_dir", |c| {
            c.sandbox.verify_dir = Some("./data/x/../shared".into());
            c.sandbox.customer_context_dir = Some("data/./shared".into());
        }),
        ("sandbox.verify_dir", |c| {
            c.sandbox.verify_dir = Some("./data/customer_context/v".into())
        }),
        ("sandbox.customer_context_dir", |c| {
            c.sandbox.customer_context_dir = Some("/elsewhere".into())
        }),
        ("sandbox.customer_context_dir", |c| {
            c.sandbox.customer_context_dir = Some("./data".into())
        }),
        ("sandbox.customer_context_dir", |c| {
            c.sandbox.customer_context_dir = Some("./data/../cc".into())
        }),
        ("context.profiles.coding", |c| {
            c.context.profiles.get_mut("coding").unwrap().workspace_pct = 0.9
        }),
        ("context.profiles.research", |c| {
            c.context.profiles.get_mut("research").unwrap().memory_pct = -0.1
        }),
        ("context.skill_metadata_budget_pct", |c| {
            c.context.skill_metadata_budget_pct = 0.11
        }),
        ("interaction.default_mode_by_register", |c| {
            c.interaction
                .default_mode_by_register
                .remove(&InteractionRegister::Status);
        }),
        ("autonomy.widen_correction_rate_max", |c| {
            c.autonomy.widen_correction_rate_max = 0.20
        }),
        ("autonomy.max_batch_review_size", |c| {
            c.autonomy.max_batch_review_size = 9
        }),
        ("suggestions.enabled", |c| c.scheduler.enabled = false),
        ("skills.import.require_transform_report", |c| {
            c.skills.import.require_transform_report = false
        }),
        ("skills.validation.description_min_chars", |c| {
            c.skills.validation.description_min_chars = 2000
        }),
        // additional rules
        ("owner_id", |c| c.owner_id = " ".into()),
        ("context.default_profile", |c| {
            c.context.default_profile = "nope".into()
        }),
        ("context.total_tokens", |c| c.context.total_tokens = 0),
        ("context.system_max", |c| c.context.system_max = 180_000),
        ("context.max_subscription_tokens", |c| {
            c.context.max_subscription_tokens = 0
        }),
        ("context.eviction_threshold_pct", |c| {
            c.context.eviction_threshold_pct = 0.0
        }),
        ("context.scorer_threshold_pct", |c| {
            c.context.scorer_threshold_pct = 0.5
        }),
        ("channels.telegram.token", |c| {
            c.channels.telegram.enabled = true;
            c.channels.telegram.owner_chat_id = Some("1".into());
        }),
        ("channels.telegram.owner_chat_id", |c| {
            c.channels.telegram.enabled = true;
            c.channels.telegram.token = Some("1:t".into());
        }),
        ("channels.telegram.token", |c| {
            c.channels.telegram.token = Some("abc-not-a-token".into());
        }),
        ("channels.telegram.owner_chat_id", |c| {
            c.channels.telegram.owner_chat_id = Some("@owner".into())
        }),
        ("channels.telegram.owner_user_id", |c| {
            c.channels.telegram.owner_user_id = Some("-5".into())
        }),
        ("channels.telegram.owner_user_id", |c| {
            c.channels.telegram.enabled = true;
            c.channels.telegram.token = Some("1:t".into());
            c.channels.telegram.owner_chat_id = Some("-1001".into());
        }),
        ("channels.telegram.api_url", |c| {
            c.channels.telegram.api_url = "http://api.example.org".into()
        }),
        ("channels.telegram.api_url", |c| {
            c.channels.telegram.api_url = "ftp://api.example.org".into()
        }),
        ("channels.telegram.api_url", |c| {
            c.channels.telegram.api_url = "https://u:p@api.example.org".into()
        }),
        ("channels.web.host", |c| {
            c.channels.web.host = String::new();
            c.channels.web.auth_token = Some("t".repeat(32));
        }),
        ("channels.web.auth_token", |c| {
            c.channels.web.auth_token = Some("t".repeat(31));
        }),
        ("limits.ws_messages_per_minute_per_scope", |c| {
            c.limits.ws_messages_per_minute_per_scope = 0
        }),
        ("limits.max_gate_evals_per_turn", |c| {
            c.limits.max_gate_evals_per_turn = 0
        }),
        ("limits.card_submissions_per_minute_per_scope", |c| {
            c.limits.card_submissions_per_minute_per_scope = 0
        }),
        ("limits.llm_calls_per_minute_global", |c| {
            c.limits.llm_calls_per_minute_global = 0
        }),
        ("limits.llm_calls_per_minute_global", |c| {
            c.limits.llm_calls_per_minute_per_scope = 31;
            c.limits.llm_calls_per_minute_global = 30;
        }),
        ("backpressure.max_pending_turns_per_scope", |c| {
            c.backpressure.max_pending_turns_per_scope = 0
        }),
        ("backpressure.max_pending_turns_total", |c| {
            c.backpressure.max_pending_turns_total = 0
        }),
        ("backpressure.max_pending_turns_per_scope", |c| {
            c.backpressure.max_pending_turns_per_scope = 501
        }),
        ("sandbox.default_memory_mb", |c| {
            c.sandbox.default_memory_mb = 0
        }),
        ("sandbox.default_cpu_seconds", |c| {
            c.sandbox.default_cpu_seconds = 0
        }),
        ("approval.default_ttl_minutes", |c| {
            c.approval.default_ttl_minutes = 0
        }),
        ("approval.max_executions", |c| c.approval.max_executions = 0),
        ("approval.auto_approve_risk_levels[0]", |c| {
            c.approval.auto_approve_risk_levels = vec!["trivial".into()]
        }),
        ("approval.scope_min_strength.skill_install", |c| {
            c.approval
                .scope_min_strength
                .insert("skill_install".into(), "wave".into());
        }),
        ("nonce_store.ttl_minutes", |c| {
            c.nonce_store.ttl_minutes = 29
        }),
        ("nonce_store.prune_interval_minutes", |c| {
            c.nonce_store.prune_interval_minutes = 0
        }),
        ("connections.recovery_max_attempts", |c| {
            c.connections.recovery_max_attempts = 0
        }),
        ("connections.setup_timeout_seconds", |c| {
            c.connections.setup_timeout_seconds = 0
        }),
        ("connections.host_pins.oauth.example.com", |c| {
            c.connections
                .host_pins
                .insert("oauth.example.com".into(), vec!["localhost".into()]);
        }),
        ("connections.host_pins.a b", |c| {
            c.connections
                .host_pins
                .insert("a b".into(), vec!["127.0.0.1".into()]);
        }),
        ("connections.trusted_private_cidrs", |c| {
            c.connections.trusted_private_cidrs = vec!["10.0.0.0".into()]
        }),
        ("models.planner", |c| {
            c.models.planner = "anthropic/claude".into()
        }),
        ("models.proxy", |c| c.models.proxy = "nowhere:model".into()),
        ("models.executor", |c| c.models.executor = "openai:".into()),
        ("models.scorer", |c| c.models.scorer = ":gpt".into()),
        ("gates.llm_defaults.model", |c| {
            c.gates.llm_defaults.model = "x".into()
        }),
        ("providers.local.base_url", |c| {
            c.providers.insert(
                "local".into(),
                ProviderConfig {
                    base_url: String::new(),
                    api_key_env: None,
                    structured_output: Default::default(),
                    tool_calling: Default::default(),
                    ..Default::default()
                },
            );
        }),
        ("providers.local.base_url", |c| {
            c.providers.insert(
                "local".into(),
                ProviderConfig {
                    base_url: "ftp://x".into(),
                    api_key_env: None,
                    structured_output: Default::default(),
                    tool_calling: Default::default(),
                    ..Default::default()
                },
            );
        }),
        ("providers.ollama.context_window", |c| {
            c.providers.get_mut("ollama").unwrap().context_window = Some(100);
        }),
        ("providers.ollama.timeout_seconds", |c| {
            c.providers.get_mut("ollama").unwrap().timeout_seconds = Some(0);
        }),
        ("providers.openai.api_key_env", |c| {
            c.providers.get_mut("openai").unwrap().api_key_env = Some("NOT-A-NAME".into());
        }),
        ("search.timeout_seconds", |c| c.search.timeout_seconds = 0),
        ("search.max_results", |c| c.search.max_results = 0),
        ("search.max_query_chars", |c| c.search.max_query_chars = 0),
        ("memory.embedding_dim", |c| c.memory.embedding_dim = 0),
        ("memory.consolidation_interval_minutes", |c| {
            c.memory.consolidation_interval_minutes = 0
        }),
        ("memory.raw_reingestion_default_tier", |c| {
            c.memory.raw_reingestion_default_tier = "hot".into()
        }),
        ("memory.portability_bundle_format", |c| {
            c.memory.portability_bundle_format = "zip".into()
        }),
        ("personality.directive_tokens_min", |c| {
            c.personality.directive_tokens_min = 500
        }),
        ("personality.decay_rate_per_hour", |c| {
            c.personality.decay_rate_per_hour = -0.1
        }),
        ("personality.baseline.humor", |c| {
            c.personality.baseline.humor = 1.5
        }),
        ("personality.mood.neutral.energy", |c| {
            c.personality.mood.neutral.energy = f64::NAN
        }),
        ("personality.contexts.crisis.humor", |c| {
            c.personality
                .contexts
                .get_mut("crisis")
                .unwrap()
                .insert("humor".into(), -1.5);
        }),
        ("personality.contexts.crisis.charm", |c| {
            c.personality
                .contexts
                .get_mut("crisis")
                .unwrap()
                .insert("charm".into(), 0.1);
        }),
        ("personality.presets.work.humor", |c| {
            c.personality
                .presets
                .get_mut("work")
                .unwrap()
                .insert("humor".into(), -0.1);
        }),
        ("personality.mood.event_weights.blocked.mood.anger", |c| {
            c.personality
                .mood
                .event_weights
                .get_mut("blocked")
                .unwrap()
                .mood
                .insert("anger".into(), 0.1);
        }),
        ("personality.mood.event_weights.blocked.axes.warmth", |c| {
            c.personality
                .mood
                .event_weights
                .get_mut("blocked")
                .unwrap()
                .axes
                .insert("warmth".into(), 2.0);
        }),
        ("interaction.high_initiative_min", |c| {
            c.interaction.high_initiative_min = 1.1
        }),
        ("batch_review.default_size", |c| {
            c.batch_review.default_size = 0
        }),
        ("batch_review.confidence.high_min", |c| {
            c.batch_review.confidence.high_min = 1.2
        }),
        ("batch_review.confidence.medium_min", |c| {
            c.batch_review.confidence.medium_min = 0.9
        }),
        ("autonomy.min_samples", |c| c.autonomy.min_samples = 0),
        ("autonomy.window_actions", |c| c.autonomy.window_actions = 0),
        ("autonomy.window_days", |c| c.autonomy.window_days = 0),
        ("autonomy.tighten_correction_rate_min", |c| {
            c.autonomy.tighten_correction_rate_min = 1.5
        }),
        ("autonomy.hysteresis_delta", |c| {
            c.autonomy.hysteresis_delta = -0.01
        }),
        ("autonomy.min_high_confidence", |c| {
            c.autonomy.min_high_confidence = 2.0
        }),
        ("gates.system[1].name", |c| {
            c.gates.system[1].insert("name".into(), "input_guard".into());
        }),
        ("gates.system[0].name", |c| {
            c.gates.system[0].remove("name");
        }),
        ("gates.llm_defaults.temperature", |c| {
            c.gates.llm_defaults.temperature = 3.0
        }),
        ("gates.llm_defaults.timeout_seconds", |c| {
            c.gates.llm_defaults.timeout_seconds = 0
        }),
        ("gates.llm_defaults.max_tokens", |c| {
            c.gates.llm_defaults.max_tokens = 0
        }),
    ];
    assert!(errors(&Config::default()).is_empty());
    for (key, mutate) in cases {
        let mut cfg = Config::default();
        mutate(&mut cfg);
        let errs = errors(&cfg);
        let hit = errs.iter().find(|e| e.key() == Some(key));
        let Some(e) = hit else {
            panic!(
                "expected an error for {key}, got {:?}",
                errs.iter().map(|e| e.to_string()).collect::<Vec<_>>()
            );
        };
        let text = e.to_string();
        assert!(text.starts_with(&format!("{key}: ")), "{text}");
        assert!(!text.contains('\n'), "{text}");
        assert!(matches!(
            e.code(),
            ErrorCode::ECfgInvalid | ErrorCode::ECfgUnknownKey
        ));
    }
}

#[test]
fn validation_messages_read_well() {
    let mut cfg = Config::default();
    cfg.channels.web.host = "0.0.0.0".into();
    let e = cfg.validation_errors_in(Path::new(FAKE_CWD)).remove(0);
    assert_eq!(
        e.to_string(),
        "channels.web.auth_token: required when channels.web.host is not a loopback address (got \"0.0.0.0\")"
    );
    assert_eq!(e.code(), ErrorCode::ECfgInvalid);

    let mut cfg = Config::default();
    cfg.models.planner = "acme:big".into();
    let e = cfg.validation_errors_in(Path::new(FAKE_CWD)).remove(0);
    assert_eq!(
        e.to_string(),
        "models.planner: unknown provider \"acme\" in \"acme:big\" (configured providers: ollama, openai, openrouter)"
    );
}

#[test]
fn non_loopback_host_with_token_is_valid() {
    let mut cfg = Config::default();
    cfg.channels.web.host = "0.0.0.0".into();
    cfg.channels.web.auth_token = Some("s".repeat(32));
    assert!(errors(&cfg).is_empty());
}

#[test]
fn loopback_hosts() {
    for h in [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "[::1]",
        "localhost",
        "LOCALHOST",
        "::ffff:127.0.0.1",
    ] {
        assert!(is_loopback_host(h), "{h}");
    }
    for h in ["0.0.0.0", "::", "10.0.0.1", "example.com", "", "128.0.0.1"] {
        assert!(!is_loopback_host(h), "{h}");
    }
}

#[test]
fn search_without_key_disables_web_search_but_validates() {
    let mut cfg = Config::default();
    assert!(!cfg.web_search_enabled());
    cfg.search.api_key = Some(String::new());
    assert!(!cfg.web_search_enabled());
    cfg.search.api_key = Some("k".into());
    assert!(cfg.web_search_enabled());
    cfg.search.provider = None;
    assert!(!cfg.web_search_enabled());
    assert!(errors(&cfg).is_empty());
}

#[test]
fn validate_returns_first_error() {
    let mut cfg = Config::default();
    cfg.channels.web.host = "0.0.0.0".into();
    cfg.limits.max_memory_ops_per_turn = 0;
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.key(), Some("channels.web.auth_token"));
}

#[test]
fn profile_yaml_checked_at_validation_with_key() {
    let cfg = load(
        "silas:\n  context:\n    default_profile: big\n    profiles:\n      big: { chronicle_pct: 0.5, memory_pct: 0.3, workspace_pct: 0.2 }\n",
    );
    assert_eq!(cfg.context.profiles["big"].name, "big");
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.key(), Some("context.profiles.big"));
    assert!(e.to_string().contains("0.8"), "{e}");
}

/// A system gate that cannot be read, or can never pass a tool call, is a
/// config error naming it (before, the daemon started and blocked every
/// turn, or every call, at run time).
#[test]
fn system_gates_are_checked_with_the_config() {
    let cases = [
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: on_every_moon}\n",
            "gates.system[0].on",
            "unknown variant",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: every_user_message, provider: oracle}\n",
            "gates.system[0].provider",
            "unknown variant",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: after_step, after_step: two}\n",
            "gates.system[0].after_step",
            "invalid type",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, type: regex, check: x}\n",
            "gates.system[0].on",
            "missing field",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: every_user_message, type: numeric_range, auto_approve: {mn: 0, max: 5}}\n",
            "gates.system[0].auto_approve.mn",
            "unknown gate key",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: every_user_message, provider: script, check_command: ./t, check_expect: {exit_code: 0, exitcode: 0}}\n",
            "gates.system[0].check_expect.exitcode",
            "unknown gate key",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: ok, on: on_tool_call, provider: guard, check: pii}\n      - {name: ls-only, on: on_tool_call, type: regex, check: '^ls'}\n",
            "gates.system[1].extract",
            "names no argument",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: on_tool_call, type: regex, pattern: '^ls', extract: command}\n",
            "gates.system[0].pattern",
            "unknown gate key",
        ),
        (
            "silas:\n  gates:\n    system:\n      - {name: g, on: on_tool_call, type: regex, check: '^ls', extract: ''}\n",
            "gates.system[0].extract",
            "names no argument",
        ),
    ];
    for (yaml, key, why) in cases {
        let e = load(yaml).validate().unwrap_err();
        assert!(
            matches!(e.code(), ErrorCode::ECfgInvalid | ErrorCode::ECfgUnknownKey),
            "{e}"
        );
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // The same gates, well formed, load.
    let cfg = load(
        "silas:\n  gates:\n    system:\n      - {name: ok, on: on_tool_call, provider: guard, check: pii}\n      - {name: ls-only, on: on_tool_call, type: regex, check: '^ls', extract: command}\n      - {name: ask, on: on_tool_call, type: approval_always}\n",
    );
    assert_eq!(cfg.gates.system.len(), 3);
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));
}

// Paths: `tests/paths.rs`; providers, models, the keystore and the llm
// section: `tests/providers.rs` (split along the file's own sections).
mod paths;
mod providers;
