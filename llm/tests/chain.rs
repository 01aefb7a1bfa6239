//! Provider fallback chains and circuit breakers over real HTTP against
//! loopback fake servers (issue #16 item 4): a chain of three providers
//! with the first two failing answers from the third; the failing ones'
//! breakers open (audited), are skipped while open, let one probe through
//! after the interval and close on its success; when every provider of a
//! role is open the call fails at once (the role's deterministic fallback).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use silas_core::config::{Config, MapEnv};
use silas_llm::chain::BreakerState;
use silas_llm::negotiate::LlmEvent;
use silas_llm::offline::OFFLINE_LABEL;
use silas_llm::prompts::RenderedContext;
use silas_llm::select::{build_agents_with_board, choose_provider};
use silas_llm::structured::Structured;
use silas_testkit::{FakeLlm, Reply};

fn direct(text: &str) -> Reply {
    Reply::json(
        &json!({"route": "direct", "reason": "greeting", "response": {"message": text},
        "interaction_register": "status", "interaction_mode": "default_and_offer",
        "context_profile": "conversation"}),
    )
}

fn config(a: &FakeLlm, b: &FakeLlm, c: &FakeLlm, open_seconds: u64) -> Config {
    let yaml = format!(
        "silas:\n  models:\n    proxy: [\"a:m\", \"b:m\", \"c:m\"]\n    planner: \"c:m\"\n    executor: \"c:m\"\n    scorer: \"c:m\"\n  providers:\n    a: {{base_url: \"{}\", api_key_env: null}}\n    b: {{base_url: \"{}\", api_key_env: null}}\n    c: {{base_url: \"{}\", api_key_env: null}}\n  llm:\n    max_retries: 0\n    breaker_failures: 1\n    breaker_open_seconds: {open_seconds}\n",
        a.base_url(),
        b.base_url(),
        c.base_url()
    );
    Config::from_yaml_str(&yaml, &MapEnv::new()).unwrap()
}

fn context() -> RenderedContext {
    RenderedContext::default()
}

#[tokio::test]
async fn a_chain_falls_through_to_the_working_provider_and_breakers_skip_probe_and_close() {
    let (a, b, c) = (
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
    );
    a.set_fallback(Reply::status(503, "overloaded"));
    b.set_fallback(Reply::status(500, "boom"));
    c.set_fallback(direct("from c"));
    let cfg = config(&a, &b, &c, 1);
    let choice = choose_provider(&cfg, &MapEnv::new()).unwrap();
    let events: Arc<Mutex<Vec<LlmEvent>>> = Arc::default();
    let sink = events.clone();
    let (agents, board) = build_agents_with_board(
        &cfg,
        &MapEnv::new(),
        &choice,
        Some(Arc::new(move |e| sink.lock().unwrap().push(e))),
    )
    .unwrap();
    let mut used = Default::default();
    let run = agents.route(&context(), "hello", &mut used).await;
    let Structured::Valid { value: d, .. } = run.outcome else {
        panic!("no answer through the chain: {:?}", run.outcome)
    };
    assert_eq!(d.response.unwrap().message, "from c");
    assert_eq!((a.served(), b.served(), c.served()), (1, 1, 1));
    let snap = board.snapshot();
    assert_eq!(snap["a"], BreakerState::Open);
    assert_eq!(snap["b"], BreakerState::Open);
    assert_eq!(snap["c"], BreakerState::Closed);
    // While open, a and b are not called at all.
    agents.route(&context(), "again", &mut used).await;
    assert_eq!((a.served(), b.served(), c.served()), (1, 1, 2));
    // After the interval one probe each; a has recovered and closes.
    a.set_fallback(direct("from a"));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let run = agents.route(&context(), "later", &mut used).await;
    let Structured::Valid { value: d, .. } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert_eq!(d.response.unwrap().message, "from a");
    assert_eq!(board.snapshot()["a"], BreakerState::Closed);
    assert_eq!(
        board.snapshot()["b"],
        BreakerState::Open,
        "b was not needed"
    );
    let changes: Vec<(String, BreakerState, BreakerState)> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            LlmEvent::BreakerChanged { provider, from, to } => Some((provider.clone(), *from, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            ("a".into(), BreakerState::Closed, BreakerState::Open),
            ("b".into(), BreakerState::Closed, BreakerState::Open),
            ("a".into(), BreakerState::Open, BreakerState::HalfOpen),
            ("a".into(), BreakerState::HalfOpen, BreakerState::Closed),
        ]
    );
    let e = &events.lock().unwrap()[0];
    assert_eq!(e.name(), "llm_breaker_changed");
    assert_eq!(e.data()["to"], "open");
}

/// With every provider of the proxy open, no provider is called: the
/// labelled offline responder answers where `llm.offline_fallback` allows
/// it, and otherwise the call fails at once (the proxy's honest fallback).
#[tokio::test]
async fn when_every_provider_of_a_role_is_open_no_call_is_made() {
    for offline_fallback in [true, false] {
        let (a, b, c) = (
            FakeLlm::start().await.unwrap(),
            FakeLlm::start().await.unwrap(),
            FakeLlm::start().await.unwrap(),
        );
        for f in [&a, &b, &c] {
            f.set_fallback(Reply::status(502, "down"));
        }
        let mut cfg = config(&a, &b, &c, 600);
        cfg.llm.offline_fallback = offline_fallback;
        let choice = choose_provider(&cfg, &MapEnv::new()).unwrap();
        let (agents, board) = build_agents_with_board(&cfg, &MapEnv::new(), &choice, None).unwrap();
        let mut used = Default::default();
        // Providers asked and failing: the proxy's own fallback, never the
        // offline responder.
        let run = agents.route(&context(), "hello", &mut used).await;
        assert!(!matches!(run.outcome, Structured::Valid { .. }));
        assert!(board.snapshot().values().all(|s| *s == BreakerState::Open));
        let served = (a.served(), b.served(), c.served());
        let t = std::time::Instant::now();
        let run = agents.route(&context(), "hello", &mut used).await;
        assert_eq!(
            (a.served(), b.served(), c.served()),
            served,
            "no call while all are open"
        );
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        match (offline_fallback, run.outcome) {
            (true, Structured::Valid { value, .. }) => {
                let text = value.response.unwrap().message;
                assert!(text.starts_with(OFFLINE_LABEL), "{text}");
            }
            (false, outcome) => assert!(!matches!(outcome, Structured::Valid { .. })),
            (true, other) => panic!("the offline responder did not answer: {other:?}"),
        }
    }
}

#[test]
fn a_chain_member_without_its_key_is_left_out_and_an_empty_list_is_refused() {
    let yaml = "silas:\n  models:\n    proxy: [\"openrouter:x\", \"ollama:llama3\"]\n    planner: \"ollama:llama3\"\n    executor: \"ollama:llama3\"\n    scorer: \"ollama:llama3\"\n";
    let cfg = Config::from_yaml_str(yaml, &MapEnv::new()).unwrap();
    let choice = choose_provider(&cfg, &MapEnv::new()).unwrap();
    assert!(!choice.is_offline(), "ollama needs no key: {choice:?}");
    assert!(build_agents_with_board(&cfg, &MapEnv::new(), &choice, None).is_ok());
    let bad = "silas:\n  models:\n    proxy: []\n";
    let e = Config::from_yaml_str(bad, &MapEnv::new()).unwrap_err();
    assert!(
        e.to_string().contains("models.proxy") || e.to_string().contains("empty list"),
        "{e}"
    );
}
