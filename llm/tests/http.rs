//! The model layer over real HTTP: async-openai → reqwest → the fake
//! OpenAI-compatible server of `silas-testkit` on 127.0.0.1. Nothing here
//! reaches the internet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use silas_core::config::{Config, MapEnv, ModelEndpoint, ModelPrice};
use silas_core::model::agents::{InteractionMode, InteractionRegister, Route};
use silas_core::model::work::{Budget, BudgetUsed};
use silas_core::{Coded, ErrorCode};
use silas_llm::LlmError;
use silas_llm::agents::{Agent, Agents, ExecutorOutcome};
use silas_llm::openai::OpenAiProvider;
use silas_llm::prompts::RenderedContext;
use silas_llm::provider::{BoxFuture, ChatRequest, Provider, RetryPolicy, ToolCall};
use silas_llm::schema::ScorerOutput;
use silas_llm::structured::{
    EXECUTOR_INVALID_OUTPUT, FallbackCause, HeuristicEviction, PLANNER_FALLBACK_MESSAGE,
    PROXY_FALLBACK_MESSAGE, REPAIR_MARKER, Structured, StructuredContext,
};
use silas_llm::tool_loop::{ApprovalResolution, ToolExecutor, ToolOutput};
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, PYTHON_EXEC, Preparation, SHELL_EXEC, SkillToolset,
    ToolDef, WEB_SEARCH, build_chain, core_tools,
};
use silas_testkit::{FakeLlm, Reply};

fn policy() -> RetryPolicy {
    RetryPolicy {
        timeout: Duration::from_secs(5),
        max_retries: 2,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(40),
    }
}

fn provider(fake: &FakeLlm, policy: RetryPolicy) -> Arc<dyn Provider> {
    let endpoint = ModelEndpoint {
        provider: "fake".into(),
        base_url: fake.base_url(),
        api_key_env: Some("FAKE_API_KEY".into()),
        model: "fake-model".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    let env = MapEnv::new().with("FAKE_API_KEY", "sk-fake-123");
    Arc::new(OpenAiProvider::from_endpoint(&endpoint, &env, policy).unwrap())
}

fn agents(fake: &FakeLlm) -> Agents {
    let agent = Agent {
        provider: provider(fake, policy()),
        model: "fake-model".into(),
        price: Some(ModelPrice {
            input_per_mtok_usd: 1.0,
            output_per_mtok_usd: 2.0,
        }),
    };
    Agents {
        proxy: agent.clone(),
        planner: agent.clone(),
        executor: agent.clone(),
        scorer: agent,
        ctx: StructuredContext::from_config(&Config::default()),
        max_tool_rounds: 6,
        scorer_breaker: Default::default(),
        gate_model: silas_llm::judge::GateModelBinding::Unavailable("none in this test".into()),
    }
}

fn context() -> RenderedContext {
    RenderedContext {
        access_level: "owner".into(),
        profiles: vec!["conversation".into(), "coding".into()],
        ..RenderedContext::default()
    }
}

fn direct_route() -> Value {
    json!({"route": "direct", "reason": "greeting", "response": {"message": "Hello!"},
           "interaction_register": "status", "interaction_mode": "default_and_offer",
           "context_profile": "conversation"})
}

/// A small model that answers a plain question with a planner route and
/// its reply, and again after the repair: the reply is used (direct, the
/// route coerced and reported), not an apology; nothing is planned.
#[tokio::test]
async fn a_planner_route_with_a_reply_twice_is_answered_with_the_reply() {
    let fake = FakeLlm::start().await.unwrap();
    let slip = json!({"route": "planner", "reason": "r",
        "response": {"message": "Paris is the capital of France."},
        "interaction_register": "status", "context_profile": "conversation"});
    fake.push(Reply::json(&slip));
    fake.push(Reply::json(&slip));
    let a = agents(&fake);
    let mut used = BudgetUsed::default();
    let run = a
        .route(&context(), "What is the capital of France?", &mut used)
        .await;
    let Structured::Valid { value, repaired } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert!(repaired);
    assert_eq!(value.route, Route::Direct);
    assert_eq!(
        value.response.unwrap().message,
        "Paris is the capital of France."
    );
    assert!(
        run.coerced.iter().any(|c| c.field == "route"),
        "{:?}",
        run.coerced
    );
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn proxy_schema_failure_then_repair_succeeds() {
    let fake = FakeLlm::start().await.unwrap();
    // A reply on a planner route: a validator failure, not a JSON one.
    fake.push(Reply::json(&json!({"route": "planner", "reason": "r",
        "response": {"message": "I will plan"},
        "interaction_register": "status", "context_profile": "conversation"})));
    fake.push(Reply::json(&direct_route()));
    let a = agents(&fake);
    let mut used = BudgetUsed::default();
    let run = a.route(&context(), "hello there", &mut used).await;
    let Structured::Valid { value, repaired } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert!(repaired);
    assert_eq!(value.route, Route::Direct);
    assert_eq!(value.response.unwrap().message, "Hello!");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    // The schema is sent as the response format.
    let rf = &reqs[0].body["response_format"];
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "RouteDecision");
    // One object at the root (OpenAI strict mode refuses a root anyOf).
    assert!(rf["json_schema"]["schema"]["properties"]["route"].is_object());
    // The repair prompt is the prompt plus the validation summary.
    assert_eq!(reqs[0].last_message_text(), "hello there");
    let repair = reqs[1].last_message_text();
    assert!(
        repair.starts_with(&format!("hello there{REPAIR_MARKER}")),
        "{repair}"
    );
    assert!(repair.contains("response"), "{repair}");
    // Same model, same system prompt, same limits.
    assert_eq!(reqs[0].body["model"], reqs[1].body["model"]);
    assert_eq!(reqs[0].body["messages"][0], reqs[1].body["messages"][0]);
    // The key is sent to this endpoint only as a bearer token.
    assert_eq!(reqs[0].authorization.as_deref(), Some("Bearer sk-fake-123"));
    // Usage and cost reach the budget: 2 × (10 + 5) tokens at $1/$2 per Mtok.
    assert_eq!(used.tokens, 30);
    assert!((used.cost_usd - 2.0 * (10.0 + 10.0) / 1e6).abs() < 1e-12);
}

/// Small local models often route `direct` and stop before writing the
/// reply: the same model is asked for the reply alone (a strictly checked
/// `AgentResponse`), and the turn keeps the model's own answer.
#[tokio::test]
async fn a_direct_route_without_its_reply_asks_the_model_for_the_reply() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::json(&json!({"route": "direct", "reason": "r",
        "interaction_register": "status", "context_profile": "conversation"})));
    fake.push(Reply::json(&json!({"message": "Paris."})));
    let a = agents(&fake);
    let mut used = BudgetUsed::default();
    let run = a.route(&context(), "capital of France?", &mut used).await;
    let Structured::Valid { value, repaired } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert!(!repaired);
    assert_eq!(value.route, Route::Direct);
    assert_eq!(value.response.unwrap().message, "Paris.");
    assert_eq!(run.requests, 2);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let rf = &reqs[1].body["response_format"];
    assert_eq!(rf["json_schema"]["name"], "AgentResponse");
    assert_eq!(reqs[1].last_message_text(), "capital of France?");
    let system = reqs[1].body["messages"][0]["content"].to_string();
    assert!(system.contains("Role: Proxy (reply)"), "{system}");
    // Both calls are charged.
    assert_eq!(used.tokens, 30);

    // A reply that never validates is the proxy's honest fallback, not a
    // guess: two invalid replies after the route.
    fake.push_all([
        Reply::json(&json!({"route": "direct", "reason": "r",
            "interaction_register": "status", "context_profile": "conversation"})),
        Reply::json(&json!({"text": "no message field"})),
        Reply::invalid_json(),
    ]);
    let run = a.route(&context(), "hi", &mut used).await;
    let Structured::Fallback { value, .. } = run.outcome else {
        panic!("{:?}", run.outcome)
    };
    assert_eq!(value.reason, "structured_output_fallback");
    assert_eq!(run.requests, 3);
}

#[tokio::test]
async fn proxy_two_failures_fall_back() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([Reply::invalid_json(), Reply::content("")]);
    let run = agents(&fake)
        .route(&context(), "hi", &mut BudgetUsed::default())
        .await;
    assert_eq!(run.requests, 2);
    let Structured::Fallback { value, cause } = run.outcome else {
        panic!()
    };
    assert!(matches!(cause, FallbackCause::InvalidOutput(_)));
    assert_eq!(value.route, Route::Direct);
    assert_eq!(value.interaction_register, InteractionRegister::Status);
    assert_eq!(
        value.interaction_mode,
        InteractionMode::ConfirmOnlyWhenRequired
    );
    assert_eq!(
        value.context_profile,
        Config::default().context.default_profile
    );
    assert_eq!(value.response.unwrap().message, PROXY_FALLBACK_MESSAGE);
    assert_eq!(fake.requests().len(), 2, "exactly one retry, no loop");
}

#[tokio::test]
async fn planner_two_failures_fall_back() {
    let fake = FakeLlm::start().await.unwrap();
    // Four memory queries break the fixed cap of three, twice.
    let bad = json!({"message": "m", "memory_queries": [
        {"strategy": "keyword", "query": "a"}, {"strategy": "keyword", "query": "b"},
        {"strategy": "keyword", "query": "c"}, {"strategy": "keyword", "query": "d"}]});
    fake.push_all([Reply::json(&bad), Reply::json(&bad)]);
    let mut used = BudgetUsed::default();
    let run = agents(&fake).plan(&context(), "plan it", &mut used).await;
    let Structured::Fallback { value, .. } = run.outcome else {
        panic!()
    };
    assert_eq!(value.message, PLANNER_FALLBACK_MESSAGE);
    assert!(value.plan_action.is_none());
    assert_eq!(used.planner_calls, 1);
    assert!(fake.requests()[1].last_message_text().contains("memory"));
}

#[tokio::test]
async fn scorer_two_failures_fall_back_and_repair_works() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        Reply::json(&json!({"keep_groups": []})),
        Reply::json(&json!({"keep": 1})),
    ]);
    let a = agents(&fake);
    let run = a
        .score("goal", "turns", "b1", &mut BudgetUsed::default())
        .await;
    assert!(matches!(
        run.outcome,
        Structured::Fallback {
            value: HeuristicEviction,
            ..
        }
    ));
    fake.push_all([
        Reply::invalid_json(),
        Reply::json(
            &json!({"keep_groups": [], "evict_groups": [{"reason": "stale", "block_ids": ["b1"]}]}),
        ),
    ]);
    let run = a
        .score("goal", "turns", "b1", &mut BudgetUsed::default())
        .await;
    let Structured::Valid { value, repaired } = run.outcome else {
        panic!()
    };
    assert!(repaired);
    assert_eq!(
        value,
        ScorerOutput {
            keep_groups: vec![],
            evict_groups: vec![silas_llm::schema::ScorerGroup {
                reason: "stale".into(),
                block_ids: vec!["b1".into()],
            }],
        }
    );
    assert_eq!(
        fake.requests()[2].body["response_format"]["json_schema"]["name"],
        "ScorerOutput"
    );
}

#[tokio::test]
async fn scorer_hard_timeout_falls_back() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(
        Reply::json(&json!({"keep_groups": [], "evict_groups": []}))
            .delayed(Duration::from_secs(3)),
    );
    let run = agents(&fake)
        .score("g", "t", "b", &mut BudgetUsed::default())
        .await;
    let Structured::Fallback { cause, .. } = run.outcome else {
        panic!()
    };
    assert_eq!(
        cause,
        FallbackCause::Provider(LlmError::Timeout { seconds: 2 })
    );
}

/// §5.7: after 3 consecutive scorer failures the breaker opens and the
/// scorer is not called (the caller evicts heuristically); a success
/// closes it again only after the open interval (5 minutes, not waited
/// here).
#[tokio::test]
async fn the_scorers_breaker_opens_after_three_failures() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::invalid_json());
    let a = agents(&fake);
    for _ in 0..3 {
        let run = a.score("g", "t", "b", &mut BudgetUsed::default()).await;
        assert!(run.outcome.is_fallback());
    }
    assert_eq!(
        a.scorer_breaker.state(),
        silas_llm::chain::BreakerState::Open
    );
    let served = fake.served();
    let run = a.score("g", "t", "b", &mut BudgetUsed::default()).await;
    assert!(run.outcome.is_fallback());
    assert_eq!(run.requests, 0);
    assert_eq!(fake.served(), served, "no call while open");
    // Clones share it (one breaker for every scope).
    assert_eq!(
        a.clone().scorer_breaker.state(),
        silas_llm::chain::BreakerState::Open
    );
}

/// A tool executor double: records calls, returns a canned result.
#[derive(Default)]
struct RecordingExecutor {
    calls: Mutex<Vec<String>>,
}

impl ToolExecutor for RecordingExecutor {
    fn execute<'a>(&'a self, call: &'a ToolCall, _tool: &'a ToolDef) -> BoxFuture<'a, ToolOutput> {
        self.calls.lock().unwrap().push(call.name.clone());
        Box::pin(async move {
            ToolOutput {
                success: true,
                content: format!("ran {} {}", call.name, call.arguments),
            }
        })
    }
}

fn executor_chain() -> silas_llm::toolset::ApprovalRequiredToolset {
    build_chain(
        SkillToolset::new(core_tools(true)),
        Preparation {
            role: AgentRole::Executor,
            work_item_skills: Default::default(),
        },
        // web_search is configured but not allowed at this access level.
        AllowedTools::only([SHELL_EXEC, PYTHON_EXEC]),
        Arc::new(ApprovalByName::new([SHELL_EXEC])),
    )
}

#[tokio::test]
async fn executor_two_failures_fail_the_attempt() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([Reply::content("done!"), Reply::json(&json!({"summary": 5}))]);
    let tools = RecordingExecutor::default();
    let out = agents(&fake)
        .execute(
            "brief",
            &[],
            &executor_chain(),
            &tools,
            &Budget::default(),
            &mut BudgetUsed::default(),
        )
        .await;
    let ExecutorOutcome::Completed(Structured::Fallback { value, .. }) = out else {
        panic!("{out:?}")
    };
    assert_eq!(value.last_error, EXECUTOR_INVALID_OUTPUT);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1]
            .last_message_text()
            .starts_with("[SCHEMA VALIDATION ERROR]")
    );
    assert_eq!(
        reqs[1].tool_names(),
        reqs[0].tool_names(),
        "same tools on repair"
    );
}

#[tokio::test]
async fn tool_calls_execute_or_pause_for_approval_and_filtered_tools_are_never_offered() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::tool_call(PYTHON_EXEC, &json!({"code": "print(1)"})));
    fake.push(Reply::tool_call(SHELL_EXEC, &json!({"command": "touch x"})));
    let a = agents(&fake);
    let tools = RecordingExecutor::default();
    let chain = executor_chain();
    let budget = Budget::default();
    let mut used = BudgetUsed::default();
    let out = a
        .execute("brief", &[], &chain, &tools, &budget, &mut used)
        .await;
    // python_exec ran; shell_exec paused, not executed.
    assert_eq!(*tools.calls.lock().unwrap(), [PYTHON_EXEC]);
    let ExecutorOutcome::ApprovalRequired(paused) = out else {
        panic!("{out:?}")
    };
    assert_eq!(paused.call.name, SHELL_EXEC);
    // The filtered tool never reached the model; the allowed ones did.
    for r in fake.requests() {
        let names = r.tool_names();
        assert!(!names.contains(&WEB_SEARCH.to_owned()), "{names:?}");
        assert_eq!(names, [SHELL_EXEC, PYTHON_EXEC]);
    }
    // The python result went back to the model as a tool message.
    let second = &fake.requests()[1].body["messages"];
    let tool_msg = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool_msg["tool_call_id"], "call_1");
    assert!(
        tool_msg["content"]
            .as_str()
            .unwrap()
            .starts_with("ran python_exec")
    );
    assert_eq!(used.executor_runs, 1);
    assert_eq!(used.tokens, 30);

    // Approved: the call runs, the loop continues to a valid answer.
    fake.push(Reply::json(
        &json!({"summary": "touched x", "artifact_refs": ["x"]}),
    ));
    let out = a
        .resume_executor(
            *paused,
            ApprovalResolution::Approved,
            &chain,
            &tools,
            &budget,
            &mut used,
        )
        .await;
    let ExecutorOutcome::Completed(Structured::Valid { value, .. }) = out else {
        panic!("{out:?}")
    };
    assert_eq!(value.summary, "touched x");
    assert_eq!(*tools.calls.lock().unwrap(), [PYTHON_EXEC, SHELL_EXEC]);
}

#[tokio::test]
async fn declined_call_is_not_executed_and_hallucinated_tools_are_refused() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::tool_calls(&[
        (WEB_SEARCH, json!({"query": "x"})),
        (SHELL_EXEC, json!({"command": "rm -rf /"})),
    ]));
    let a = agents(&fake);
    let tools = RecordingExecutor::default();
    let chain = executor_chain();
    let mut used = BudgetUsed::default();
    let out = a
        .execute("b", &[], &chain, &tools, &Budget::default(), &mut used)
        .await;
    let ExecutorOutcome::ApprovalRequired(paused) = out else {
        panic!()
    };
    fake.push(Reply::json(&json!({"summary": "stopped"})));
    let out = a
        .resume_executor(
            *paused,
            ApprovalResolution::Declined {
                reason: "no".into(),
            },
            &chain,
            &tools,
            &Budget::default(),
            &mut used,
        )
        .await;
    assert!(matches!(
        out,
        ExecutorOutcome::Completed(Structured::Valid { .. })
    ));
    assert!(tools.calls.lock().unwrap().is_empty(), "nothing ran");
    let msgs = fake.requests()[1].body["messages"].clone();
    let contents: Vec<String> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        contents[0].starts_with("refused: tool \"web_search\" is not available"),
        "{contents:?}"
    );
    assert!(
        contents[1].starts_with("declined by the owner"),
        "{contents:?}"
    );
}

#[tokio::test]
async fn tool_loop_stops_at_budget_and_request_limit() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::tool_call(PYTHON_EXEC, &json!({"code": "1"})).with_usage(100, 100));
    let a = agents(&fake);
    let tools = RecordingExecutor::default();
    let budget = Budget {
        max_tokens: 450,
        ..Budget::default()
    };
    let mut used = BudgetUsed::default();
    let out = a
        .execute("b", &[], &executor_chain(), &tools, &budget, &mut used)
        .await;
    assert_eq!(out, ExecutorOutcome::BudgetExhausted);
    assert_eq!(fake.requests().len(), 3, "checked before each request (>=)");
    assert_eq!(used.tokens, 600);

    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::tool_call(PYTHON_EXEC, &json!({"code": "1"})));
    let a = agents(&fake);
    let out = a
        .execute(
            "b",
            &[],
            &executor_chain(),
            &tools,
            &Budget::default(),
            &mut BudgetUsed::default(),
        )
        .await;
    assert_eq!(out, ExecutorOutcome::RequestLimit);
    assert_eq!(fake.requests().len(), 6);
}

/// A server that reports no usage (many local servers leave it out): the
/// tokens are estimated from the text sent, so a budget still stops the
/// loop; before, it ran every round at "0 of N tokens".
#[tokio::test]
async fn a_server_reporting_no_usage_still_exhausts_the_budget() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::tool_call(PYTHON_EXEC, &json!({"code": "1"})).with_usage(0, 0));
    let a = agents(&fake);
    let tools = RecordingExecutor::default();
    let budget = Budget {
        max_tokens: 400,
        ..Budget::default()
    };
    let mut used = BudgetUsed::default();
    let briefing = "b".repeat(1_000);
    let out = a
        .execute(
            &briefing,
            &[],
            &executor_chain(),
            &tools,
            &budget,
            &mut used,
        )
        .await;
    assert_eq!(out, ExecutorOutcome::BudgetExhausted);
    assert!(fake.requests().len() < 6, "{}", fake.requests().len());
    assert!(used.tokens >= 400, "{}", used.tokens);
}

#[tokio::test]
async fn rate_limit_then_success_and_exhausted_retries() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([Reply::rate_limited(), Reply::content("ok")]);
    let p = provider(&fake, policy());
    let req = ChatRequest::new("fake-model", "s", "u");
    let r = p.complete(&req).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
    assert_eq!(fake.requests().len(), 2);

    fake.push_all([
        Reply::rate_limited(),
        Reply::rate_limited(),
        Reply::rate_limited(),
    ]);
    let e = p.complete(&req).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ELlmRateLimited);
    assert!(
        matches!(e, LlmError::RateLimited { attempts: 3, .. }),
        "{e:?}"
    );

    fake.push_all([Reply::status(503, "down"), Reply::content("back")]);
    assert_eq!(
        p.complete(&req).await.unwrap().content.as_deref(),
        Some("back")
    );

    fake.push(Reply::status(400, "bad request"));
    let before = fake.requests().len();
    let e = p.complete(&req).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::ELlmApi);
    assert_eq!(fake.requests().len(), before + 1, "4xx is not retried");
}

#[tokio::test]
async fn slow_response_times_out() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::content("late").delayed(Duration::from_millis(800)));
    let p = provider(
        &fake,
        RetryPolicy {
            timeout: Duration::from_millis(200),
            ..policy()
        },
    );
    let e = p
        .complete(&ChatRequest::new("fake-model", "s", "u"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ELlmTimeout);
    assert_eq!(fake.requests().len(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn provider_failure_falls_back_and_malformed_body_is_parse_error() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::status(401, "bad key"));
    let run = agents(&fake)
        .route(&context(), "hi", &mut BudgetUsed::default())
        .await;
    assert!(matches!(
        run.outcome,
        Structured::Fallback {
            cause: FallbackCause::Provider(LlmError::Api {
                status: Some(401),
                ..
            }),
            ..
        }
    ));
    // A server that echoes the key it was sent: the error (logged, audited,
    // told to the owner) does not carry it.
    fake.push(Reply::status(
        401,
        "Incorrect API key provided: sk-fake-123",
    ));
    let e = provider(&fake, policy())
        .complete(&ChatRequest::new("m", "s", "u"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Incorrect API key"), "{e}");
    assert!(!e.to_string().contains("sk-fake-123"), "{e}");
    fake.push(Reply::raw("{\"nope\": true}"));
    let e = provider(&fake, policy())
        .complete(&ChatRequest::new("m", "s", "u"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ELlmParse);
}

/// What a wrong `base_url` gets back — an HTML page, FastAPI's 404 (the
/// one llama-cpp-python sends without `/v1`), JSON that is not a chat
/// completion — is named as such, with the fix, instead of "a response I
/// could not read". A completion that leaves out `created` is read.
#[tokio::test]
async fn answers_that_are_no_chat_api_are_named_and_missing_envelope_fields_are_forgiven() {
    use silas_llm::structured::proxy_failure_message;
    let fake = FakeLlm::start().await.unwrap();
    let p = provider(&fake, policy());
    let request = ChatRequest::new("m", "s", "u");
    let call = || p.complete(&request);
    let told = |e: LlmError| proxy_failure_message(&FallbackCause::Provider(e));

    fake.push(Reply::raw(
        "<!doctype html><html><body>My web UI</body></html>",
    ));
    let e = call().await.unwrap_err();
    assert!(matches!(&e, LlmError::NotChatApi { .. }), "{e:?}");
    assert_eq!(e.code(), ErrorCode::ELlmParse);
    let text = told(e);
    assert!(text.contains("HTML page") && text.contains("/v1"), "{text}");

    fake.push(Reply::raw("{\"choices\": []}"));
    let text = told(call().await.unwrap_err());
    assert!(
        text.contains("`choices` is empty") && text.contains("base_url"),
        "{text}"
    );

    fake.push(Reply::raw("{\"models\": [\"m\"]}"));
    let text = told(call().await.unwrap_err());
    assert!(text.contains("no `choices`"), "{text}");

    fake.push(Reply::raw_error(404, "{\"detail\":\"Not Found\"}"));
    let e = call().await.unwrap_err();
    assert!(
        matches!(
            &e,
            LlmError::Api {
                status: Some(404),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(told(e).contains("HTTP 404: check the model name"));

    // Retried as any 5xx is (the policy allows three tries).
    fake.push_all((0..3).map(|_| Reply::raw_error(502, "<html>Bad Gateway</html>")));
    let e = call().await.unwrap_err();
    assert!(
        matches!(
            &e,
            LlmError::Api {
                status: Some(502),
                ..
            }
        ),
        "{e:?}"
    );

    fake.push(Reply::raw(
        "{\"choices\": [{\"index\": 0, \"finish_reason\": \"stop\", \
         \"message\": {\"role\": \"assistant\", \"content\": \"hello there\"}}]}",
    ));
    let r = call().await.unwrap();
    assert_eq!(r.content.as_deref(), Some("hello there"));
}

#[tokio::test]
async fn connection_refused_is_retried_then_api_error() {
    // Bind and drop to get a port nobody listens on (loopback only).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = ModelEndpoint {
        provider: "dead".into(),
        base_url: format!("http://127.0.0.1:{port}/v1"),
        api_key_env: None,
        model: "m".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    let p = OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy()).unwrap();
    let e = p
        .complete(&ChatRequest::new("m", "s", "u"))
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Api { status: None, .. }), "{e:?}");
}

/// The production provider for an `https://` endpoint builds its client
/// with nothing installed beforehand (reqwest has no crypto backend of its
/// own and would panic), and leaves `ring` as the process provider. No
/// request is sent.
#[test]
fn https_provider_builds_with_the_ring_provider() {
    let endpoint = ModelEndpoint {
        provider: "openrouter".into(),
        base_url: "https://openrouter.ai/api/v1".into(),
        api_key_env: None,
        model: "m".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy()).unwrap();
    let p = rustls::crypto::CryptoProvider::get_default().unwrap();
    assert_eq!(format!("{:?}", p.key_provider), "Ring");
    assert_eq!(
        p.cipher_suites,
        rustls::crypto::ring::default_provider().cipher_suites
    );
}

#[test]
fn missing_key_is_refused_before_any_request() {
    let endpoint = ModelEndpoint {
        provider: "openrouter".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key_env: Some("OPENROUTER_API_KEY".into()),
        model: "m".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    let e = OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "environment variable OPENROUTER_API_KEY (API key of provider openrouter) is not set"
    );
    let env = MapEnv::new().with("OPENROUTER_API_KEY", "bad\nkey");
    assert!(OpenAiProvider::from_endpoint(&endpoint, &env, policy()).is_err());
}
