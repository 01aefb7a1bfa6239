//! Configuration tests, continued (see `config/tests.rs`).

use super::*;

#[test]
fn resolve_builtin_providers() {
    let cfg = Config::default();
    let e = cfg
        .resolve_model("openrouter:anthropic/claude-haiku-4-5")
        .unwrap();
    assert_eq!(
        e,
        ModelEndpoint {
            provider: "openrouter".into(),
            base_url: "https://openrouter.ai/api/v1".into(),
            api_key_env: Some("OPENROUTER_API_KEY".into()),
            model: "anthropic/claude-haiku-4-5".into(),
            structured_output: Default::default(),
            tool_calling: Default::default(),
            ..Default::default()
        }
    );
    let e = cfg.resolve_model("openai:gpt-4o-mini").unwrap();
    assert_eq!(e.base_url, "https://api.openai.com/v1");
    assert_eq!(e.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(e.model, "gpt-4o-mini");
    // Split at the first ':' only.
    let e = cfg.resolve_model("ollama:llama3.2:3b").unwrap();
    assert_eq!(e.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(e.api_key_env, None);
    assert_eq!(e.model, "llama3.2:3b");
}

/// Small, slow servers (issue #16 item 5): a provider's own call timeout
/// and context window reach its endpoint; a built-in keeps its URL.
#[test]
fn provider_timeout_and_window_reach_the_endpoint() {
    let yaml = "silas:\n  providers:\n    ollama: {timeout_seconds: 600, context_window: 8192}\n";
    let cfg = Config::from_yaml_str(yaml, &MapEnv::new()).unwrap();
    let e = cfg.resolve_model("ollama:qwen2.5:3b").unwrap();
    assert_eq!(e.timeout_seconds, Some(600));
    assert_eq!(e.context_window, Some(8192));
    assert_eq!(e.base_url, "http://127.0.0.1:11434/v1");
    let e = cfg.resolve_model("openai:gpt-4o-mini").unwrap();
    assert_eq!((e.timeout_seconds, e.context_window), (None, None));
    let bad = "silas:\n  providers:\n    ollama: {context_window: 512}\n";
    let err = Config::from_yaml_str(bad, &MapEnv::new())
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        err.to_string().contains("providers.ollama.context_window"),
        "{err}"
    );
}

#[test]
fn resolve_errors() {
    let cfg = Config::default();
    let e = cfg.resolve_model("acme:model").unwrap_err();
    assert_eq!(e.code(), ErrorCode::ECfgInvalid);
    let text = e.to_string();
    assert!(
        text.starts_with("model \"acme:model\": unknown provider \"acme\""),
        "{text}"
    );
    assert!(cfg.resolve_model("no-colon").is_err());
    assert!(cfg.resolve_model("openai:").is_err());
}

#[test]
fn providers_merge_with_builtins() {
    let cfg = load(
        "silas:\n  providers:\n    openrouter: { base_url: \"https://proxy.local/v1\" }\n    ollama: { base_url: \"http://gpu:11434/v1\" }\n    openai: { api_key_env: null }\n    vllm: { base_url: \"http://10.0.0.5:8000/v1\", api_key_env: VLLM_KEY }\n  models:\n    planner: \"vllm:qwen\"\n",
    );
    assert_eq!(cfg.providers.len(), 4);
    let or = &cfg.providers["openrouter"];
    assert_eq!(or.base_url, "https://proxy.local/v1");
    assert_eq!(or.api_key_env.as_deref(), Some("OPENROUTER_API_KEY"));
    assert_eq!(cfg.providers["openai"].api_key_env, None);
    assert_eq!(
        cfg.providers["openai"].base_url,
        "https://api.openai.com/v1"
    );
    assert_eq!(cfg.providers["ollama"].base_url, "http://gpu:11434/v1");
    let e = cfg.resolve_model(&cfg.models.planner).unwrap();
    assert_eq!(e.api_key_env.as_deref(), Some("VLLM_KEY"));
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));

    // A custom provider without base_url fails validation by key.
    let cfg = load("silas:\n  providers:\n    custom: { api_key_env: K }\n");
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.key(), Some("providers.custom.base_url"));
}

#[test]
fn error_codes() {
    let parse = load_err("a: [", &empty());
    assert_eq!(parse.code(), ErrorCode::ECfgParse);
    let unknown = load_err("silas: { bogus: 1 }", &empty());
    assert_eq!(unknown.code(), ErrorCode::ECfgUnknownKey);
    let invalid = load_err("silas: { owner_id: [] }", &empty());
    assert_eq!(invalid.code(), ErrorCode::ECfgInvalid);
}

// ---------------------------------------------------------------------------
// keystore

#[test]
fn keystore_defaults() {
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &empty()).unwrap();
    assert_eq!(cfg.keystore, KeystoreConfig::default());
    assert_eq!(cfg.keystore.backend, KeystoreBackend::File);
    assert_eq!(cfg.keystore.backend.as_str(), "file");
    assert_eq!(cfg.keystore.path, None);
    assert_eq!(cfg.keystore.kek_env, "SILAS_KEYSTORE_KEK");
    assert_eq!(cfg.keystore.kek_credential, "silas-kek");
    assert_eq!(cfg.keystore_path(), PathBuf::from("./data/keys/owner.key"));
    // Missing section, and an empty one, mean the same defaults.
    assert_eq!(load("silas: {}").keystore, KeystoreConfig::default());
    assert_eq!(
        load("silas:\n  keystore: {}\n").keystore,
        KeystoreConfig::default()
    );
}

#[test]
fn keystore_keys_load() {
    let cfg = load(
        "silas:\n  data_dir: /srv/silas\n  keystore:\n    backend: keyring\n    kek_env: MY_KEK\n    kek_credential: kek.bin\n",
    );
    assert_eq!(cfg.keystore.backend, KeystoreBackend::Keyring);
    assert_eq!(cfg.keystore.kek_env, "MY_KEK");
    assert_eq!(cfg.keystore.kek_credential, "kek.bin");
    assert_eq!(
        cfg.keystore_path(),
        PathBuf::from("/srv/silas/keys/owner.key")
    );
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));

    let cfg = load("silas:\n  keystore:\n    path: /etc/silas/owner.key\n");
    assert_eq!(cfg.keystore_path(), PathBuf::from("/etc/silas/owner.key"));

    let env = MapEnv::new().with("SILAS__KEYSTORE__BACKEND", "keyring");
    let cfg = Config::from_yaml_str(DEFAULT_CONFIG_YAML, &env).unwrap();
    assert_eq!(cfg.keystore.backend, KeystoreBackend::Keyring);
}

#[test]
fn unknown_keystore_backend_names_the_key() {
    let e = load_err("silas:\n  keystore:\n    backend: tpm\n", &empty());
    assert_eq!(e.code(), ErrorCode::ECfgInvalid, "{e}");
    assert_eq!(e.key(), Some("keystore.backend"), "{e}");
    assert!(e.to_string().starts_with("keystore.backend: "), "{e}");
    assert!(e.to_string().contains("`file`"), "{e}");

    let env = MapEnv::new().with("SILAS__KEYSTORE__BACKEND", "keyutils");
    let e = load_err("silas: {}", &env);
    assert_eq!(e.key(), Some("keystore.backend"), "{e}");
    assert!(e.to_string().contains("SILAS__KEYSTORE__BACKEND"), "{e}");
}

#[test]
fn keystore_validation_names_its_keys() {
    let bad_env = ["", "1KEK", "MY-KEK", "KEK VAR", "${X}"];
    for v in bad_env {
        let mut cfg = Config::default();
        cfg.keystore.kek_env = v.into();
        let errs = errors(&cfg);
        assert_eq!(errs.len(), 1, "{v:?}: {errs:?}");
        assert_eq!(errs[0].key(), Some("keystore.kek_env"), "{v:?}");
        assert!(
            errs[0]
                .to_string()
                .starts_with("keystore.kek_env: must be an environment variable name")
        );
    }
    let bad_cred = ["", ".", "..", "../kek", "a/b", "/etc/kek", "a\\b", "a\0b"];
    for v in bad_cred {
        let mut cfg = Config::default();
        cfg.keystore.kek_credential = v.into();
        let errs = errors(&cfg);
        assert_eq!(errs.len(), 1, "{v:?}: {errs:?}");
        assert_eq!(errs[0].key(), Some("keystore.kek_credential"), "{v:?}");
        assert!(!errs[0].to_string().contains('\n'));
    }
    for ok in ["silas-kek", "kek.bin", "..kek", "KEK_1"] {
        let mut cfg = Config::default();
        cfg.keystore.kek_credential = ok.into();
        assert!(errors(&cfg).is_empty(), "{ok:?}");
    }
    let mut cfg = Config::default();
    cfg.keystore.path = Some(PathBuf::new());
    let errs = errors(&cfg);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].key(), Some("keystore.path"));
    assert_eq!(errs[0].code(), ErrorCode::ECfgInvalid);
}

// ---------------------------------------------------------------------------
// llm / offline provider

#[test]
fn llm_defaults_and_offline_provider() {
    let cfg = Config::default();
    assert_eq!(cfg.llm.timeout_seconds, 60);
    assert_eq!(cfg.llm.max_retries, 3);
    assert!(cfg.llm.offline_fallback);
    let haiku = cfg.llm.prices["openrouter:anthropic/claude-haiku-4-5"];
    assert_eq!(haiku.input_per_mtok_usd, 1.0);
    assert_eq!(haiku.output_per_mtok_usd, 5.0);
    // `offline` resolves without a providers: entry, with no URL and no key.
    let e = cfg.resolve_model("offline:rules").unwrap();
    assert_eq!(e.provider, OFFLINE_PROVIDER);
    assert_eq!(e.base_url, "");
    assert_eq!(e.api_key_env, None);
    assert_eq!(e.model, "rules");
    let mut cfg = Config::default();
    cfg.models.proxy = "offline:rules".into();
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));
}

#[test]
fn llm_section_loads_from_yaml() {
    let cfg = load(
        "silas:\n  llm:\n    timeout_seconds: 5\n    max_retries: 0\n    offline_fallback: false\n    prices:\n      \"ollama:llama3\": { input_per_mtok_usd: 0, output_per_mtok_usd: 0.5 }\n",
    );
    assert_eq!(cfg.llm.timeout_seconds, 5);
    assert_eq!(cfg.llm.max_retries, 0);
    assert!(!cfg.llm.offline_fallback);
    assert_eq!(cfg.llm.prices.len(), 1);
    assert_eq!(cfg.llm.prices["ollama:llama3"].output_per_mtok_usd, 0.5);
    assert_eq!(cfg.llm.backoff_max_ms, 8000, "unset keys keep defaults");
    let e = load_err(
        "silas:\n  llm:\n    prices:\n      \"a:b\": { input_per_mtok_usd: 1, output: 2 }\n",
        &empty(),
    );
    assert_eq!(e.code(), ErrorCode::ECfgUnknownKey);
    let e = load_err("silas:\n  llm:\n    retries: 2\n", &empty());
    assert_eq!(e.key(), Some("llm.retries"));
}

#[test]
fn llm_validation_names_the_key() {
    type Mutate = fn(&mut Config);
    let cases: &[(&str, Mutate)] = &[
        ("llm.timeout_seconds", |c| c.llm.timeout_seconds = 0),
        ("llm.backoff_initial_ms", |c| {
            c.llm.backoff_initial_ms = 0;
        }),
        ("llm.max_tool_rounds", |c| c.llm.max_tool_rounds = 0),
        ("llm.backoff_max_ms", |c| c.llm.backoff_max_ms = 100),
        ("llm.prices.nocolon", |c| {
            c.llm.prices.insert(
                "nocolon".into(),
                ModelPrice {
                    input_per_mtok_usd: 1.0,
                    output_per_mtok_usd: 1.0,
                },
            );
        }),
        ("llm.prices.a:b.input_per_mtok_usd", |c| {
            c.llm.prices.insert(
                "a:b".into(),
                ModelPrice {
                    input_per_mtok_usd: -1.0,
                    output_per_mtok_usd: 1.0,
                },
            );
        }),
        ("llm.prices.a:b.output_per_mtok_usd", |c| {
            c.llm.prices.insert(
                "a:b".into(),
                ModelPrice {
                    input_per_mtok_usd: 1.0,
                    output_per_mtok_usd: f64::NAN,
                },
            );
        }),
        ("providers.offline", |c| {
            c.providers
                .insert(OFFLINE_PROVIDER.into(), c.providers["ollama"].clone());
        }),
    ];
    for (key, mutate) in cases {
        let mut cfg = Config::default();
        mutate(&mut cfg);
        let errs = errors(&cfg);
        assert_eq!(errs.len(), 1, "{key}: {errs:?}");
        assert_eq!(errs[0].key(), Some(*key), "{errs:?}");
        assert_eq!(errs[0].code(), ErrorCode::ECfgInvalid);
    }
}

/// §18.5: every `limits` key is validated on its own, and its error names
/// exactly that key.
#[test]
fn every_limit_key_must_be_positive_and_names_itself() {
    let keys: Vec<&str> = LimitsConfig::default()
        .fields()
        .iter()
        .map(|(k, _)| *k)
        .collect();
    for key in keys {
        let mut cfg = Config::default();
        let mut raw = serde_json::to_value(&cfg.limits).unwrap();
        raw[key] = serde_json::json!(0);
        cfg.limits = serde_json::from_value(raw).unwrap();
        // The global LLM cap at 0 also breaks the ">= per scope" rule; both
        // errors name the key, so this still checks the key alone.
        let errs = errors(&cfg);
        let want = format!("limits.{key}");
        assert!(!errs.is_empty(), "{key}: no error");
        for e in &errs {
            assert_eq!(e.key(), Some(want.as_str()), "{errs:?}");
            assert!(e.to_string().starts_with(&format!("{want}: ")), "{e}");
        }
    }
}

#[test]
fn new_limit_keys_have_their_defaults_and_parse_from_yaml() {
    let d = LimitsConfig::default();
    assert_eq!(d.card_submissions_per_minute_per_scope, 30);
    assert_eq!(d.llm_calls_per_minute_global, 300);
    assert_eq!(d.llm_calls_per_minute_per_scope, 30);
    assert_eq!(d.web_search_calls_per_minute_per_scope, 20);
    assert_eq!(d.memory_ops_per_minute_per_scope, 120);
    assert_eq!(d.suggestions_per_hour_per_scope, 6);
    assert_eq!(d.autonomy_proposals_per_week_per_scope, 3);
    let parsed: LimitsConfig = serde_yaml_ng::from_str(
        "card_submissions_per_minute_per_scope: 5\nllm_calls_per_minute_global: 40\n",
    )
    .unwrap();
    assert_eq!(parsed.card_submissions_per_minute_per_scope, 5);
    assert_eq!(parsed.llm_calls_per_minute_global, 40);
    assert!(serde_yaml_ng::from_str::<LimitsConfig>("llm_calls_per_minute_totl: 5\n").is_err());
}

#[test]
fn web_public_url_and_telegram_token_ref_validate_by_key() {
    let cfg = load("silas: {}\n");
    assert_eq!(cfg.channels.web.public_url, None);
    assert_eq!(cfg.channels.telegram.token_ref, None);
    let cfg = load(
        "silas:\n  channels:\n    web:\n      public_url: https://silas.home.example/\n    \
         telegram:\n      enabled: true\n      token_ref: sec-abc_1\n      owner_chat_id: 7\n",
    );
    // A stored token stands in for `token`.
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));
    for (bad, key) in [
        ("ftp://x", "channels.web.public_url"),
        ("https://user:pw@x/", "channels.web.public_url"),
        ("https://x/?a=1", "channels.web.public_url"),
        ("silas.local", "channels.web.public_url"),
    ] {
        let mut c = cfg.clone();
        c.channels.web.public_url = Some(bad.into());
        let errs = errors(&c);
        assert!(errs.iter().any(|e| e.key() == Some(key)), "{bad}: {errs:?}");
    }
    let mut c = cfg.clone();
    c.channels.telegram.token_ref = Some("../../etc/passwd".into());
    assert!(
        errors(&c)
            .iter()
            .any(|e| e.key() == Some("channels.telegram.token_ref"))
    );
    // Enabled with neither a token nor a ref: the error names `token`.
    let mut c = cfg.clone();
    c.channels.telegram.token_ref = None;
    c.channels.telegram.token = None;
    assert!(
        errors(&c)
            .iter()
            .any(|e| e.key() == Some("channels.telegram.token"))
    );
}

#[test]
fn plan_budget_ceiling_bounds_each_field_and_names_its_keys() {
    use crate::model::work::Budget;
    let ceiling = PlanBudgetCeiling::default();
    let budget: Budget = serde_json::from_str("{}").unwrap();
    assert!(
        ceiling.excess(&budget).is_empty(),
        "the default budget fits"
    );
    let at: Budget = serde_json::from_value(serde_json::json!({
        "max_tokens": 2_000_000, "max_cost_usd": 20.0, "max_wall_time_seconds": 14_400,
        "max_attempts": 10, "max_planner_calls": 10}))
    .unwrap();
    assert!(
        ceiling.excess(&at).is_empty(),
        "the ceiling itself is allowed"
    );
    let mut over = at.clone();
    over.max_tokens += 1;
    over.max_cost_usd = 20.01;
    over.max_wall_time_seconds += 1;
    over.max_attempts += 1;
    over.max_planner_calls += 1;
    let excess = ceiling.excess(&over);
    assert_eq!(excess.len(), 5, "{excess:?}");
    assert!(excess.contains(&"max_tokens 2000001 > 2000000".to_string()));
    let mut nan = at;
    nan.max_cost_usd = f64::NAN;
    assert_eq!(ceiling.excess(&nan).len(), 1);
    // From YAML, partially: the rest keeps its default; zero is refused by key.
    let cfg = load("silas:\n  limits:\n    plan_budget_ceiling:\n      max_tokens: 5000\n");
    assert_eq!(cfg.limits.plan_budget_ceiling.max_tokens, 5000);
    assert_eq!(cfg.limits.plan_budget_ceiling.max_attempts, 10);
    let mut bad = Config::default();
    bad.limits.plan_budget_ceiling.max_attempts = 0;
    bad.limits.plan_budget_ceiling.max_cost_usd = -1.0;
    let keys: Vec<String> = bad
        .validation_errors()
        .iter()
        .map(|e| e.to_string())
        .collect();
    for key in [
        "limits.plan_budget_ceiling.max_attempts",
        "limits.plan_budget_ceiling.max_cost_usd",
    ] {
        assert!(keys.iter().any(|k| k.contains(key)), "{key}: {keys:?}");
    }
}

#[test]
fn active_goal_must_name_a_goal_file_that_says_something() {
    let root = temp_dir("goal");
    let cfg = Config {
        active_goal: Some("goals/missing.md".into()),
        ..Config::default()
    };
    let key_of = |cfg: &Config| -> Vec<Option<String>> {
        cfg.validation_errors_in(root.as_path())
            .iter()
            .map(|e| e.key().map(str::to_owned))
            .collect()
    };
    let errs = cfg.validation_errors_in(root.as_path());
    let goal: Vec<&ConfigError> = errs
        .iter()
        .filter(|e| e.key() == Some("active_goal"))
        .collect();
    assert_eq!(goal.len(), 1, "{errs:?}");
    assert!(
        goal[0].to_string().contains("goals/missing.md"),
        "{}",
        goal[0]
    );
    assert_eq!(goal[0].code(), ErrorCode::ECfgInvalid);

    std::fs::create_dir(root.as_path().join("goals")).unwrap();
    std::fs::write(root.as_path().join("goals/missing.md"), " \n").unwrap();
    assert!(key_of(&cfg).contains(&Some("active_goal".into())));
    std::fs::write(
        root.as_path().join("goals/missing.md"),
        "help with opening hours\n",
    )
    .unwrap();
    assert!(!key_of(&cfg).contains(&Some("active_goal".into())));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn switches_this_build_cannot_honour_are_refused_naming_the_key() {
    for (yaml, key) in [
        (
            "silas:\n  channels:\n    web:\n      enabled: false\n",
            "channels.web.enabled",
        ),
        (
            "silas:\n  sandbox:\n    backend: docker\n",
            "sandbox.backend",
        ),
    ] {
        let errs = errors(&load(yaml));
        assert!(errs.iter().any(|e| e.key() == Some(key)), "{key}: {errs:?}");
    }
    assert!(errors(&Config::default()).is_empty());
}

/// The secrets the daemon registers for redaction: each provider's key
/// from its variable (unset ones skipped), the web auth token, the bot
/// token and the search key.
#[test]
fn secret_values_are_the_keys_and_tokens_the_config_hands_out() {
    let cfg = load(
        "silas:\n  providers:\n    local: {base_url: 'http://127.0.0.1:8080/v1', api_key_env: LOCAL_KEY}\n    other: {base_url: 'http://127.0.0.1:8081/v1', api_key_env: UNSET_KEY}\n  channels:\n    web: {auth_token: web-token-0123456789-0123456789-abcd}\n    telegram: {token: '123456:bot-token-zzzz'}\n  search: {provider: brave, api_key: search-key-0123}\n",
    );
    let env = MapEnv::new()
        .with("LOCAL_KEY", "local-key-0123456789")
        .with("OPENROUTER_API_KEY", "sk-or-v1-canary");
    let mut got = cfg.secret_values(&env);
    got.sort();
    assert_eq!(
        got,
        [
            "123456:bot-token-zzzz",
            "local-key-0123456789",
            "search-key-0123",
            "sk-or-v1-canary",
            "web-token-0123456789-0123456789-abcd",
        ]
    );
}
