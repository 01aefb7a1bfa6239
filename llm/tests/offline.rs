//! The offline responder drives the whole loop without any network:
//! greeting → direct; create-file → planner → plan with a shell_exec step and
//! file_exists/contains checks → executor calls shell_exec (paused for
//! approval) → result summarised.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use silas_core::config::{Config, MapEnv};
use silas_core::model::agents::Route;
use silas_core::model::work::{Budget, BudgetUsed};
use silas_llm::agents::ExecutorOutcome;
use silas_llm::offline::OFFLINE_LABEL;
use silas_llm::prompts::RenderedContext;
use silas_llm::provider::{BoxFuture, ToolCall};
use silas_llm::select::{build_agents, choose_provider};
use silas_llm::structured::Structured;
use silas_llm::tool_loop::{ApprovalResolution, ToolExecutor, ToolOutput};
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, Preparation, SHELL_EXEC, SkillToolset, ToolDef,
    build_chain, core_tools,
};

#[derive(Default)]
struct Shell(Mutex<Vec<String>>);

impl ToolExecutor for Shell {
    fn execute<'a>(&'a self, call: &'a ToolCall, _: &'a ToolDef) -> BoxFuture<'a, ToolOutput> {
        self.0.lock().unwrap().push(
            call.arguments_json()["command"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
        Box::pin(async {
            ToolOutput {
                success: true,
                content: "exit 0".into(),
            }
        })
    }
}

#[tokio::test]
async fn offline_full_loop() {
    let cfg = Config::default();
    let env = MapEnv::new();
    let choice = choose_provider(&cfg, &env).unwrap();
    assert!(choice.is_offline());
    let agents = build_agents(&cfg, &env, &choice).unwrap();
    assert!(agents.is_offline());
    let ctx = RenderedContext::default();
    let mut used = BudgetUsed::default();

    let Structured::Valid { value: d, .. } = agents.route(&ctx, "hello", &mut used).await.outcome
    else {
        panic!()
    };
    assert_eq!(d.route, Route::Direct);
    assert!(d.response.unwrap().message.starts_with(OFFLINE_LABEL));

    let msg = "create a file notes.txt containing hello";
    let Structured::Valid { value: d, .. } = agents.route(&ctx, msg, &mut used).await.outcome
    else {
        panic!()
    };
    assert_eq!(d.route, Route::Planner);
    let Structured::Valid { value: plan, .. } = agents.plan(&ctx, msg, &mut used).await.outcome
    else {
        panic!()
    };
    let md = plan.plan_action.unwrap().plan_markdown.unwrap();
    assert!(md.contains("file_exists") && md.contains("contains: \"hello\""));

    // The plan body is the executor's briefing.
    let briefing = md.split("\n---\n").nth(1).unwrap();
    let chain = build_chain(
        SkillToolset::new(core_tools(false)),
        Preparation {
            role: AgentRole::Executor,
            work_item_skills: Default::default(),
        },
        AllowedTools::All,
        Arc::new(ApprovalByName::new([SHELL_EXEC])),
    );
    let shell = Shell::default();
    let out = agents
        .execute(briefing, &[], &chain, &shell, &Budget::default(), &mut used)
        .await;
    let ExecutorOutcome::ApprovalRequired(paused) = out else {
        panic!("{out:?}")
    };
    assert!(shell.0.lock().unwrap().is_empty(), "paused, not run");
    let out = agents
        .resume_executor(
            *paused,
            ApprovalResolution::Approved,
            &chain,
            &shell,
            &Budget::default(),
            &mut used,
        )
        .await;
    let ExecutorOutcome::Completed(Structured::Valid { value, .. }) = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        *shell.0.lock().unwrap(),
        ["printf '%s' 'hello' > 'notes.txt'"]
    );
    assert!(value.summary.starts_with(OFFLINE_LABEL));
    assert_eq!(used.tokens, 0, "the offline responder reports no usage");
}
