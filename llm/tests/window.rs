//! Small, slow models (issue #16 item 5) over real HTTP against loopback
//! fake servers: the context window is taken from the server's model
//! listing when the configuration does not give one (a configured value
//! wins), a chain is bounded by its smallest member, and a provider's own
//! `timeout_seconds` bounds its calls instead of `llm.timeout_seconds`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use silas_core::config::{Config, MapEnv};
use silas_llm::Agents;
use silas_llm::LlmError;
use silas_llm::prompts::RenderedContext;
use silas_llm::select::{build_agents, choose_provider};
use silas_llm::structured::{FallbackCause, Structured};
use silas_testkit::{FakeLlm, Reply};

fn agents(yaml: &str) -> Agents {
    let cfg = Config::from_yaml_str(yaml, &MapEnv::new()).unwrap();
    let choice = choose_provider(&cfg, &MapEnv::new()).unwrap();
    build_agents(&cfg, &MapEnv::new(), &choice).unwrap()
}

fn one_provider(base: &str, extra: &str) -> String {
    format!(
        "silas:\n  models: {{proxy: \"local:m\", planner: \"local:m\", executor: \"local:m\", scorer: \"local:m\"}}\n  providers:\n    local: {{base_url: \"{base}\", api_key_env: null{extra}}}\n  llm: {{max_retries: 0, timeout_seconds: 30}}\n"
    )
}

#[tokio::test]
async fn the_window_comes_from_the_model_listing_unless_configured() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_models(json!({"object": "list", "data": [
        {"id": "other", "max_model_len": 128000},
        {"id": "m", "object": "model", "max_model_len": 4096}]}));
    let a = agents(&one_provider(&fake.base_url(), ""));
    assert_eq!(
        a.context_window(),
        None,
        "unknown before the listing is read"
    );
    a.discover_context_windows().await;
    assert_eq!(a.context_window(), Some(4096));

    // A configured window is used as is (the listing is not asked).
    let a = agents(&one_provider(&fake.base_url(), ", context_window: 8192"));
    assert_eq!(a.context_window(), Some(8192));
    a.discover_context_windows().await;
    assert_eq!(a.context_window(), Some(8192));

    // A server whose listing has no size (llama-cpp-python) leaves it
    // unknown, and so does one without a listing at all.
    let quiet = FakeLlm::start().await.unwrap();
    quiet.set_models(json!({"object": "list", "data": [{"id": "/m.gguf", "object": "model"}]}));
    let a = agents(&one_provider(&quiet.base_url(), ""));
    a.discover_context_windows().await;
    assert_eq!(a.context_window(), None);
    let none = FakeLlm::start().await.unwrap();
    let a = agents(&one_provider(&none.base_url(), ""));
    a.discover_context_windows().await;
    assert_eq!(a.context_window(), None);
}

#[tokio::test]
async fn a_chain_is_bounded_by_its_smallest_window() {
    let (big, small) = (
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
    );
    big.set_models(json!({"data": [{"id": "m", "context_length": 200000}]}));
    small.set_models(json!({"data": [{"id": "m", "context_length": 8192}]}));
    let yaml = format!(
        "silas:\n  models: {{proxy: [\"big:m\", \"small:m\"], planner: \"big:m\", executor: \"big:m\", scorer: \"big:m\"}}\n  providers:\n    big: {{base_url: \"{}\", api_key_env: null}}\n    small: {{base_url: \"{}\", api_key_env: null}}\n",
        big.base_url(),
        small.base_url()
    );
    let a = agents(&yaml);
    a.discover_context_windows().await;
    assert_eq!(a.context_window(), Some(8192));
}

#[tokio::test]
async fn a_providers_own_timeout_bounds_its_calls() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::content("late").delayed(Duration::from_secs(3)));
    let a = agents(&one_provider(&fake.base_url(), ", timeout_seconds: 1"));
    let started = Instant::now();
    let run = a
        .route(
            &RenderedContext::default(),
            "hello",
            &mut Default::default(),
        )
        .await;
    let Structured::Fallback { cause, .. } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert_eq!(
        cause,
        FallbackCause::Provider(LlmError::Timeout { seconds: 1 })
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

/// `providers.<name>.temperature` goes with every request that sets none
/// (a local model answers repeatably at 0); without it no temperature is
/// sent, and the gate model keeps its own (`gates.llm_defaults`).
#[tokio::test]
async fn a_providers_temperature_is_sent_with_its_requests() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "hi"}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let sent = |extra: &str| {
        let fake = &fake;
        let yaml = one_provider(&fake.base_url(), extra)
            + "  gates: {llm_defaults: {model: \"local:judge\", temperature: 0.5}}\n";
        async move {
            let cfg = Config::from_yaml_str(&yaml, &MapEnv::new()).unwrap();
            cfg.validate().unwrap();
            let choice = choose_provider(&cfg, &MapEnv::new()).unwrap();
            let a = build_agents(&cfg, &MapEnv::new(), &choice).unwrap();
            a.route(
                &RenderedContext::default(),
                "hello",
                &mut Default::default(),
            )
            .await;
            let _ = a
                .gate_model
                .judge("p".into(), "gate_quality", std::sync::Arc::new(json!({})))
                .await;
            let reqs = fake.requests();
            let n = reqs.len();
            (
                reqs[n - 2].body.get("temperature").cloned(),
                reqs[n - 1].body["temperature"].clone(),
            )
        }
    };
    let (route, judge) = sent(", temperature: 0").await;
    assert_eq!(route, Some(json!(0.0)));
    assert_eq!(judge, json!(0.5));
    let (route, judge) = sent("").await;
    assert_eq!(route, None);
    assert_eq!(judge, json!(0.5));
    let bad = Config::from_yaml_str(
        &one_provider("http://127.0.0.1:9/v1", ", temperature: 3"),
        &MapEnv::new(),
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert!(
        bad.to_string().contains("providers.local.temperature"),
        "{bad}"
    );
}
