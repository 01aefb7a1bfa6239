//! MCP servers as skills: the fixture skill's stdio server (Python) runs in
//! the sandbox, its tools pass the wrapper chain (an approval-required tool
//! pauses before anything reaches the server), results come back tainted
//! `external`, and a server whose tool list changed after approval is
//! refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use silas_core::Coded;
use silas_core::ErrorCode;
use silas_core::model::messages::TaintLevel;
use silas_execution::mcp::{McpError, McpLaunch, McpSession};
use silas_llm::provider::ToolCall;
use silas_llm::toolset::{
    AgentRole, AllowedTools, ApprovalByName, CallDecision, Preparation, SkillToolset, build_chain,
    core_tools, mcp_tool_name, parse_mcp_tool_name,
};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp-notes");

/// The fixture copied where the sandbox user can read it.
fn install(base: &Path) -> PathBuf {
    let dir = base.join("mcp-notes");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    for f in ["SKILL.md", "scripts/server.py"] {
        std::fs::copy(Path::new(FIXTURE).join(f), dir.join(f)).unwrap();
    }
    for d in [base, &dir, &dir.join("scripts")] {
        std::fs::set_permissions(d, PermissionsExt::from_mode(0o755)).unwrap();
    }
    dir
}

fn launch(skill_dir: &Path, work: PathBuf, env: Vec<(String, String)>) -> McpLaunch {
    McpLaunch {
        skill: "mcp-notes".into(),
        skill_dir: skill_dir.to_path_buf(),
        command: "scripts/server.py".into(),
        args: Vec::new(),
        work_dir: work,
        env,
        egress_proxy_port: None,
        lifetime: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn an_mcp_tool_is_offered_through_the_chain_paused_for_approval_and_tainted() {
    let skills = tempfile::tempdir().unwrap();
    let skill_dir = install(skills.path());
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let work = sandbox.fresh_work_dir(base.path(), "mcp-1").unwrap();
    let env = vec![("MCP_TEST_PORT".to_string(), port)];
    let session = McpSession::start(&sandbox, &launch(&skill_dir, work, env), None)
        .await
        .unwrap();
    let names: Vec<&str> = session.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["search_notes"]);

    // Registered on the skill stage of the chain; the owner's policy says
    // this tool needs approval, so the Executor's call pauses.
    let mut set = SkillToolset::new(core_tools(false));
    for t in session.tools() {
        set = set.with_mcp_tool(
            session.skill(),
            &t.name,
            &t.description,
            t.input_schema.clone(),
        );
    }
    let model_name = mcp_tool_name("mcp-notes", "search_notes");
    let chain = build_chain(
        set,
        Preparation {
            role: AgentRole::Executor,
            work_item_skills: ["mcp-notes".to_string()].into(),
        },
        AllowedTools::All,
        Arc::new(ApprovalByName::new([model_name.clone()])),
    );
    let call = ToolCall {
        id: "call-1".into(),
        name: model_name.clone(),
        arguments: r#"{"query":"cats"}"#.into(),
    };
    let CallDecision::ApprovalRequired(def) = chain.decide(&call) else {
        panic!("the MCP call did not pause for approval");
    };
    assert!(def.spec.description.contains("untrusted"));

    // After the owner's approval the runtime makes the call.
    let (skill, tool) = parse_mcp_tool_name(&call.name).unwrap();
    assert_eq!(skill, session.skill());
    let args: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&call.arguments).unwrap();
    let out = session
        .call(tool, args, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(out.text.contains("found 2 notes about cats"), "{out:?}");
    assert_eq!(out.taint, TaintLevel::External);
    assert!(!out.is_error);
    // From inside the sandbox: no network, not root.
    assert!(out.text.contains("net=refused"), "{out:?}");
    assert!(!out.text.contains("uid=0"), "{out:?}");
    assert!(listener.accept().is_err());
    // The skill folder is untouched (no __pycache__ changing its hash).
    assert!(!skill_dir.join("scripts/__pycache__").exists());

    // A tool the server never listed is refused before the server sees it.
    let err = session
        .call("delete_notes", Default::default(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::UnknownTool { .. }), "{err}");
}

#[tokio::test]
async fn a_server_whose_tools_changed_after_approval_is_refused() {
    let skills = tempfile::tempdir().unwrap();
    let skill_dir = install(skills.path());
    let base = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox();
    let work = sandbox.fresh_work_dir(base.path(), "mcp-1").unwrap();
    let approved = McpSession::start(&sandbox, &launch(&skill_dir, work, Vec::new()), None)
        .await
        .unwrap()
        .tools_hash()
        .to_string();

    // Same files, same hash: starts again.
    let work = sandbox.fresh_work_dir(base.path(), "mcp-2").unwrap();
    let again = McpSession::start(
        &sandbox,
        &launch(&skill_dir, work, Vec::new()),
        Some(&approved),
    )
    .await
    .unwrap();
    assert_eq!(again.tools_hash(), approved);

    // The server now offers another tool: refused, named, coded.
    let work = sandbox.fresh_work_dir(base.path(), "mcp-3").unwrap();
    let env = vec![("MCP_TEST_VARIANT".to_string(), "changed".to_string())];
    let err = McpSession::start(&sandbox, &launch(&skill_dir, work, env), Some(&approved))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::ToolsChanged { .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::EApprovalHash);
    assert!(err.to_string().contains("approve the skill again"));
}

#[test]
fn a_server_command_outside_the_skill_is_refused() {
    for command in ["/usr/bin/python3", "../other/server.py", ""] {
        let mut l = launch(Path::new("/skills/x"), PathBuf::from("/tmp"), Vec::new());
        l.command = command.into();
        assert!(l.spec().is_err(), "{command}");
    }
}
