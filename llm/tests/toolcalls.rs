//! Tool calls without native tool support, over real HTTP against the
//! loopback fake server (issue #16, item 3): a server that rejects `tools`
//! makes an `auto` provider offer them in the prompt (audited once,
//! remembered) and the executor's tool loop still runs the call end to end
//! through the same toolset and approval path; a native server that writes
//! the call as `<tool_call>` text is read the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use silas_core::config::{Config, MapEnv, ModelEndpoint, ToolCallingMode};
use silas_core::model::work::{Budget, BudgetUsed};
use silas_llm::agents::{Agent, Agents, ExecutorOutcome};
use silas_llm::negotiate::LlmEvent;
use silas_llm::openai::OpenAiProvider;
use silas_llm::provider::{BoxFuture, RetryPolicy, ToolCall};
use silas_llm::structured::{Structured, StructuredContext};
use silas_llm::tool_loop::{ToolExecutor, ToolOutput};
use silas_llm::toolprompt::{ToolModeDowngrade, ToolWire};
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, ApprovalRequiredToolset, PYTHON_EXEC, Preparation,
    SHELL_EXEC, SkillToolset, ToolDef, build_chain, core_tools,
};
use silas_testkit::{FakeLlm, RecordedRequest, Reply};

type Events = Arc<Mutex<Vec<LlmEvent>>>;

fn provider(fake: &FakeLlm, mode: ToolCallingMode) -> (Arc<OpenAiProvider>, Events) {
    let endpoint = ModelEndpoint {
        provider: "local".into(),
        base_url: fake.base_url(),
        api_key_env: None,
        model: "smol".into(),
        structured_output: Default::default(),
        tool_calling: mode,
        ..Default::default()
    };
    let policy = RetryPolicy {
        timeout: std::time::Duration::from_secs(5),
        max_retries: 2,
        backoff_initial: std::time::Duration::from_millis(5),
        backoff_max: std::time::Duration::from_millis(20),
    };
    let events: Events = Arc::default();
    let sink = events.clone();
    let p = OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy)
        .unwrap()
        .with_events(Arc::new(move |e| sink.lock().unwrap().push(e)));
    (Arc::new(p), events)
}

fn agents(p: Arc<OpenAiProvider>) -> Agents {
    let agent = Agent {
        provider: p,
        model: "smol".into(),
        price: None,
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

/// Records every call it runs (name, arguments).
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(String, Value)>>,
}

impl ToolExecutor for Recorder {
    fn execute<'a>(&'a self, call: &'a ToolCall, _tool: &'a ToolDef) -> BoxFuture<'a, ToolOutput> {
        self.calls
            .lock()
            .unwrap()
            .push((call.name.clone(), call.arguments_json()));
        Box::pin(async move {
            ToolOutput {
                success: true,
                content: format!("ran {}: 1", call.name),
            }
        })
    }
}

fn chain() -> ApprovalRequiredToolset {
    build_chain(
        SkillToolset::new(core_tools(true)),
        Preparation {
            role: AgentRole::Executor,
            work_item_skills: Default::default(),
        },
        AllowedTools::only([SHELL_EXEC, PYTHON_EXEC]),
        Arc::new(ApprovalByName::new([SHELL_EXEC])),
    )
}

async fn execute(a: &Agents, recorder: &Recorder) -> ExecutorOutcome {
    a.execute(
        "print one",
        &[],
        &chain(),
        recorder,
        &Budget::default(),
        &mut BudgetUsed::default(),
    )
    .await
}

fn done() -> Reply {
    Reply::json(&json!({"summary": "printed 1", "artifact_refs": []}))
}

fn messages(r: &RecordedRequest) -> &Vec<Value> {
    r.body["messages"].as_array().unwrap()
}

#[tokio::test]
async fn a_server_rejecting_tools_gets_them_in_the_prompt_and_the_loop_still_runs_the_call() {
    let fake = FakeLlm::start().await.unwrap();
    fake.when_body_has("tools", Reply::status(400, "tools is not supported"));
    fake.push_all([
        Reply::content(
            "I'll run it.\n```json\n{\"name\": \"python_exec\", \"arguments\": {\"code\": \"print(1)\"}}\n```",
        ),
        done(),
    ]);
    let (p, events) = provider(&fake, ToolCallingMode::Auto);
    let a = agents(p.clone());
    let recorder = Recorder::default();
    let out = execute(&a, &recorder).await;
    let ExecutorOutcome::Completed(Structured::Valid { value, .. }) = out else {
        panic!("{out:?}")
    };
    assert_eq!(value.summary, "printed 1");
    assert_eq!(
        *recorder.calls.lock().unwrap(),
        [(PYTHON_EXEC.to_owned(), json!({"code": "print(1)"}))]
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].body.get("tools").is_some(), "native first");
    for r in &reqs[1..] {
        assert!(r.body.get("tools").is_none(), "never resent with tools");
        let sys = messages(r)[0]["content"].as_str().unwrap();
        assert!(sys.contains("# Tools") && sys.contains("- python_exec: "));
        assert!(!sys.contains("- web_search"), "filtered tools stay hidden");
        assert!(messages(r).iter().all(|m| m["role"] != "tool"));
    }
    // The call and its result went back to the model as text.
    let last = messages(&reqs[2]);
    assert_eq!(
        last[last.len() - 2]["content"],
        r#"{"name": "python_exec", "arguments": {"code":"print(1)"}}"#
    );
    let result = last[last.len() - 1]["content"].as_str().unwrap();
    assert!(
        result.contains("call text_call_1") && result.ends_with("ran python_exec: 1"),
        "{result}"
    );
    assert_eq!(p.tool_mode(), ToolWire::Prompt);

    // Remembered: the next run never offers native tools again, and a
    // prompted call of an approval-gated tool pauses like a native one.
    fake.push(Reply::content(
        r#"{"name": "shell_exec", "arguments": {"command": "touch x"}}"#,
    ));
    let out = execute(&a, &recorder).await;
    let ExecutorOutcome::ApprovalRequired(paused) = out else {
        panic!("{out:?}")
    };
    assert_eq!(paused.call.name, SHELL_EXEC);
    assert_eq!(paused.call.id, "text_call_1");
    assert_eq!(recorder.calls.lock().unwrap().len(), 1, "not executed");
    assert_eq!(fake.requests().len(), 4);
    assert!(fake.requests()[3].body.get("tools").is_none());
    assert_eq!(
        *events.lock().unwrap(),
        [LlmEvent::ToolModeDowngraded(ToolModeDowngrade {
            provider: "local".into(),
            from: ToolWire::Native,
            to: ToolWire::Prompt,
            status: Some(400),
        })],
        "audited once"
    );
}

#[tokio::test]
async fn an_unknown_prompted_tool_is_refused_by_the_toolset() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        Reply::content(r#"{"name": "web_search", "arguments": {"query": "x"}}"#),
        done(),
    ]);
    let (p, events) = provider(&fake, ToolCallingMode::Prompt);
    let recorder = Recorder::default();
    let out = execute(&agents(p), &recorder).await;
    assert!(
        matches!(out, ExecutorOutcome::Completed(Structured::Valid { .. })),
        "{out:?}"
    );
    assert!(recorder.calls.lock().unwrap().is_empty());
    let reqs = fake.requests();
    assert!(reqs.iter().all(|r| r.body.get("tools").is_none()));
    let last = messages(&reqs[1]);
    let result = last[last.len() - 1]["content"].as_str().unwrap();
    assert!(
        result.contains("refused: tool \"web_search\" is not available"),
        "{result}"
    );
    assert!(events.lock().unwrap().is_empty(), "configured, not stepped");
}

#[tokio::test]
async fn a_native_server_writing_the_call_as_tool_call_text_is_read_as_that_call() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        Reply::content(
            "<tool_call>\n{\"name\": \"python_exec\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call>",
        ),
        done(),
    ]);
    let (p, _) = provider(&fake, ToolCallingMode::Native);
    let recorder = Recorder::default();
    let out = execute(&agents(p), &recorder).await;
    assert!(
        matches!(out, ExecutorOutcome::Completed(Structured::Valid { .. })),
        "{out:?}"
    );
    assert_eq!(
        *recorder.calls.lock().unwrap(),
        [(PYTHON_EXEC.to_owned(), json!({"code": "print(1)"}))]
    );
    // Still native: tools on the wire, the call and result as tool turns.
    let reqs = fake.requests();
    assert!(reqs.iter().all(|r| r.body.get("tools").is_some()));
    let msgs = messages(&reqs[1]);
    let asst = &msgs[msgs.len() - 2];
    assert_eq!(asst["tool_calls"][0]["id"], "text_call_1");
    assert_eq!(asst["tool_calls"][0]["function"]["name"], PYTHON_EXEC);
    assert_eq!(msgs[msgs.len() - 1]["role"], "tool");
    assert_eq!(msgs[msgs.len() - 1]["tool_call_id"], "text_call_1");
}

#[tokio::test]
async fn a_fixed_native_provider_never_resends_a_rejected_tools_request() {
    let fake = FakeLlm::start().await.unwrap();
    fake.when_body_has("tools", Reply::status(500, "tool_choice requires --jinja"));
    let (p, events) = provider(&fake, ToolCallingMode::Native);
    let out = execute(&agents(p.clone()), &Recorder::default()).await;
    assert!(
        matches!(out, ExecutorOutcome::Completed(Structured::Fallback { .. })),
        "{out:?}"
    );
    assert_eq!(fake.served(), 1, "not retried unchanged");
    assert_eq!(p.tool_mode(), ToolWire::Native);
    assert!(events.lock().unwrap().is_empty());
}
