//! Structured-output negotiation over real HTTP against the loopback fake
//! server (issue #16, item 1): the step-down on each kind of rejection, the
//! memory of the working mode, the audit of each downgrade once, and that a
//! rejected `response_format` is never resent unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use silas_core::config::{Config, MapEnv, ModelEndpoint, StructuredOutputMode};
use silas_core::model::agents::{Route, RouteDecision};
use silas_llm::negotiate::{LlmEvent, ModeDowngrade, WireMode};
use silas_llm::openai::OpenAiProvider;
use silas_llm::provider::{ChatRequest, RetryPolicy};
use silas_llm::structured::{Structured, StructuredContext, run_structured_agent};
use silas_testkit::{FakeLlm, Reply};

/// The body llama-cpp-python's server (0.3.x) sent for `type: json_schema`,
/// captured from the real server in `tests/local_model.rs` (HTTP 500).
const LLAMA_CPP_PYTHON_500: &str = r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"/var/cache/silas-test/llama-venv/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions","type":"internal_server_error","param":null,"code":null}}"#;

fn policy() -> RetryPolicy {
    RetryPolicy {
        timeout: Duration::from_secs(5),
        max_retries: 3,
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
    }
}

type Events = Arc<Mutex<Vec<LlmEvent>>>;

fn provider(fake: &FakeLlm, mode: StructuredOutputMode) -> (OpenAiProvider, Events) {
    let endpoint = ModelEndpoint {
        provider: "local".into(),
        base_url: fake.base_url(),
        api_key_env: None,
        model: "smol".into(),
        structured_output: mode,
        tool_calling: Default::default(),
        ..Default::default()
    };
    let events: Events = Arc::default();
    let sink = events.clone();
    let p = OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy())
        .unwrap()
        .with_events(Arc::new(move |e| sink.lock().unwrap().push(e)));
    (p, events)
}

fn direct() -> Value {
    json!({"route": "direct", "reason": "greeting", "response": {"message": "Hi!"},
           "interaction_register": "status", "interaction_mode": "default_and_offer",
           "context_profile": "conversation"})
}

fn ctx() -> StructuredContext {
    StructuredContext::from_config(&Config::default())
}

async fn route(p: &OpenAiProvider) -> Structured<RouteDecision> {
    let req = ChatRequest::new("smol", "You are the proxy.", "hello");
    run_structured_agent::<RouteDecision>(p, req, &ctx())
        .await
        .outcome
}

fn rf_type(body: &Value) -> Option<&str> {
    body.get("response_format")?.get("type")?.as_str()
}

fn downgrade(from: WireMode, to: WireMode, status: Option<u16>) -> LlmEvent {
    LlmEvent::StructuredModeDowngraded(ModeDowngrade {
        provider: "local".into(),
        from,
        to,
        status,
    })
}

#[tokio::test]
async fn llama_cpp_python_500_steps_down_to_json_object_and_is_remembered() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::raw_error(500, LLAMA_CPP_PYTHON_500));
    fake.push(Reply::json(&direct()));
    fake.push(Reply::json(&direct()));
    let (p, events) = provider(&fake, StructuredOutputMode::Auto);
    let Structured::Valid { value, repaired } = route(&p).await else {
        panic!("fallback")
    };
    assert_eq!((value.route, repaired), (Route::Direct, false));
    // A second call starts in the remembered mode: no new rejection.
    assert!(!route(&p).await.is_fallback());
    let reqs = fake.requests();
    let types: Vec<_> = reqs.iter().map(|r| rf_type(&r.body)).collect();
    assert_eq!(
        types,
        [
            Some("json_schema"),
            Some("json_object"),
            Some("json_object")
        ],
        "the 500 is not retried unchanged"
    );
    // json_object carries the schema (llama-cpp-python makes it a grammar)
    // and the prompt states it too.
    let rf = &reqs[1].body["response_format"];
    assert_eq!(rf["schema"]["title"], "RouteDecision");
    let sys = reqs[1].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        sys.contains("# Output format") && sys.contains("RouteDecision"),
        "{sys}"
    );
    assert_eq!(p.structured_mode(), WireMode::JsonObject);
    assert_eq!(
        *events.lock().unwrap(),
        [downgrade(
            WireMode::JsonSchema,
            WireMode::JsonObject,
            Some(500)
        )],
        "audited once"
    );
}

#[tokio::test]
async fn each_kind_of_rejection_steps_down_to_prompt_mode() {
    // (reply for json_schema, reply for json_object, statuses reported)
    let cases: Vec<(Reply, Reply, [Option<u16>; 2])> = vec![
        (
            Reply::status(
                400,
                "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
            ),
            Reply::status(400, "'response_format.type' must be 'text'"),
            [Some(400), Some(400)],
        ),
        (
            // FastAPI's own validation shape (not OpenAI-shaped JSON).
            Reply::raw_error(
                422,
                r#"{"detail":[{"type":"literal_error","loc":["body","response_format","type"],"msg":"Input should be 'text'"}]}"#,
            ),
            // Ollama-style bare error string.
            Reply::raw_error(400, r#"{"error":"invalid response_format"}"#),
            // Their statuses are known now (they were read as unparsable).
            [Some(422), Some(400)],
        ),
        (
            Reply::raw_error(500, LLAMA_CPP_PYTHON_500),
            Reply::raw_error(
                503,
                r#"{"error": {"message": "grammar for response_format failed"}}"#,
            ),
            [Some(500), Some(503)],
        ),
    ];
    for (first, second, statuses) in cases {
        let fake = FakeLlm::start().await.unwrap();
        fake.push_all([
            first,
            second,
            Reply::content(format!("Sure:\n```json\n{}\n```", direct())),
        ]);
        let (p, events) = provider(&fake, StructuredOutputMode::Auto);
        let out = route(&p).await;
        assert!(!out.is_fallback(), "{out:?}");
        let reqs = fake.requests();
        let types: Vec<_> = reqs.iter().map(|r| rf_type(&r.body)).collect();
        assert_eq!(types, [Some("json_schema"), Some("json_object"), None]);
        let sys = reqs[2].body["messages"][0]["content"].as_str().unwrap();
        assert!(
            sys.contains("# Output format"),
            "prompt mode carries the schema"
        );
        assert_eq!(p.structured_mode(), WireMode::Prompt);
        assert_eq!(
            *events.lock().unwrap(),
            [
                downgrade(WireMode::JsonSchema, WireMode::JsonObject, statuses[0]),
                downgrade(WireMode::JsonObject, WireMode::Prompt, statuses[1]),
            ]
        );
    }
}

#[tokio::test]
async fn a_fixed_mode_never_steps_down_nor_resends_the_rejected_request() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::raw_error(500, LLAMA_CPP_PYTHON_500));
    let (p, events) = provider(&fake, StructuredOutputMode::JsonSchema);
    assert!(route(&p).await.is_fallback());
    assert_eq!(fake.served(), 1, "one request: not retried unchanged");
    assert!(events.lock().unwrap().is_empty());
    assert_eq!(p.structured_mode(), WireMode::JsonSchema);
}

#[tokio::test]
async fn other_server_errors_keep_the_mode_and_the_bounded_retries() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        Reply::status(500, "CUDA out of memory"),
        Reply::json(&direct()),
    ]);
    let (p, events) = provider(&fake, StructuredOutputMode::Auto);
    assert!(!route(&p).await.is_fallback());
    let types: Vec<_> = fake
        .requests()
        .iter()
        .map(|r| rf_type(&r.body).map(str::to_owned))
        .collect();
    assert_eq!(
        types,
        [
            Some("json_schema".to_owned()),
            Some("json_schema".to_owned())
        ]
    );
    assert!(events.lock().unwrap().is_empty());
}

#[tokio::test]
async fn configured_modes_send_their_shape_from_the_first_request() {
    for (mode, want) in [
        (StructuredOutputMode::JsonObject, Some("json_object")),
        (StructuredOutputMode::Prompt, None),
    ] {
        let fake = FakeLlm::start().await.unwrap();
        fake.push(Reply::content(format!("Here you go: {}", direct())));
        let (p, _) = provider(&fake, mode);
        assert!(!route(&p).await.is_fallback(), "{mode:?}");
        assert_eq!(rf_type(&fake.requests()[0].body), want, "{mode:?}");
    }
}
