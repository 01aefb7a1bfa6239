//! MCP servers as skills in the daemon's work (issue #17 item 7), over the
//! real store, owner key, sandbox and the FakeLlm: installing a skill that
//! declares a server lists and binds its tools at the dry run; a work item
//! naming the skill is offered them; a `require_approval` gate pauses the
//! call for a tool card (approve → the call runs once, deny → never); a
//! server whose tools changed after approval is refused; a server without
//! declared hosts has no network.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::{FAKE_API_KEY, decision, item, output};
use serde_json::{Value, json};
use silas_actors::approval::ApprovalHandle;
use silas_actors::channel::MemorySink;
use silas_actors::skills::{InstallOutcome, SkillHost};
use silas_actors::skills_mcp::McpSkills;
use silas_actors::turn::approval_flow::{self, DecideOutcome};
use silas_actors::turn::pipeline::{TOOL_CARD, TurnDeps};
use silas_core::approval::IssuePolicy;
use silas_core::cards::CardPayload;
use silas_core::model::skills::{InstalledSkill, SkillSource};
use silas_core::model::work::WorkItemStatus;
use silas_execution::mcp_registry::{McpRegistry, McpRegistryConfig};
use silas_sandbox::SubprocessSandbox;
use silas_skill::run::SkillRunner;
use silas_storage::PendingCard;
use silas_testkit::Reply;
use zeroize::Zeroizing;

const SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../execution/tests/fixtures/mcp-notes/scripts/server.py"
);
const TOOL: &str = "mcp__mcp-notes__search_notes";

const SKILL_MD: &str = "---\nname: mcp-notes\ndescription: Use when the owner wants their notes searched through the notes MCP server.\nrequirements:\n  credentials: [MCP_TEST_PORT, MCP_TEST_VARIANT]\n  env: [MCP_TEST_PROXY_TARGET, HTTPS_PROXY]\nmcp_server:\n  command: scripts/server.py\n---\n# Notes\n\nSearch notes with the `search_notes` MCP tool.\n";

struct Fx {
    work: common::Fx,
    deps: TurnDeps,
    mcp: Arc<McpSkills>,
    /// What the secret store answers for MCP_TEST_VARIANT.
    variant: Arc<Mutex<String>>,
    /// A loopback listener the server tries to reach (its port is injected
    /// as MCP_TEST_PORT).
    listener: TcpListener,
    /// The installed skills, as the daemon's WorkEngine sees them.
    host: Arc<SkillHost>,
}

impl std::ops::Deref for Fx {
    type Target = common::Fx;
    fn deref(&self) -> &common::Fx {
        &self.work
    }
}

async fn fx() -> Fx {
    let mut work = common::Fx::build(
        FAKE_API_KEY,
        |c| c.skills_dir = c.data_dir.join("skills"),
        |_| IssuePolicy::default(),
    )
    .await;
    let skill = work.cfg.skills_dir.join("mcp-notes");
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    std::fs::write(skill.join("SKILL.md"), SKILL_MD).unwrap();
    std::fs::copy(SERVER, skill.join("scripts/server.py")).unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let variant = Arc::new(Mutex::new("plain".to_string()));
    let v = variant.clone();
    let credentials: silas_actors::skills::Credentials = Arc::new(move |r: &str| match r {
        "MCP_TEST_PORT" => Ok(Zeroizing::new(port.clone().into_bytes())),
        "MCP_TEST_VARIANT" => Ok(Zeroizing::new(v.lock().unwrap().clone().into_bytes())),
        _ => Err("not stored".into()),
    });
    let registry = McpRegistry::new(
        SubprocessSandbox::new(common::launcher()),
        McpRegistryConfig::new(work.path("work")),
    );
    let mcp = Arc::new(McpSkills::new(
        work.store.clone(),
        &work.cfg,
        Arc::new(registry),
        credentials.clone(),
    ));
    work.engine.mcp = Some(mcp.clone());
    let deps = TurnDeps::standard(
        work.store.clone(),
        work.cfg.clone(),
        common::agents(&work.fake),
        work.svc.clone(),
        Arc::new(MemorySink::new()),
    );
    let host = Arc::new(install(&work, &mcp, credentials).await);
    work.engine.skills = Some(host.clone());
    Fx {
        work,
        deps,
        mcp,
        variant,
        listener,
        host,
    }
}

/// Approves `t` as a plan naming its skills does: their installed hashes
/// bound first (issue #17), then the owner's token.
fn approve_bound(f: &Fx, t: &mut silas_core::model::work::WorkItem) {
    silas_actors::turn::skill_context::bind(Some(&f.host), t).unwrap();
    f.approve(t);
}

/// The install flow: card → approval → dry run (the server lists its
/// tools) → installed with the binding.
async fn install(
    f: &common::Fx,
    mcp: &Arc<McpSkills>,
    credentials: silas_actors::skills::Credentials,
) -> SkillHost {
    let runner = SkillRunner::new(SubprocessSandbox::new(common::launcher()), f.path("work"));
    let host = SkillHost::new(f.store.clone(), &f.cfg)
        .with_runner(runner)
        .with_credentials(credentials)
        .with_mcp(mcp.clone());
    let card = host
        .offer("mcp-notes", SkillSource::Installed, vec![])
        .unwrap();
    let CardPayload::SkillInstall(c) = &card.card else {
        panic!("not a skill_install card")
    };
    assert_eq!(c.mcp_server.as_deref(), Some("scripts/server.py"));
    // Nothing of the skill ran for the card.
    assert!(mcp.registry().running_skills().is_empty());
    let engine = ApprovalHandle::standalone(f.svc.clone());
    let out = host
        .decide(
            &engine,
            &card,
            decision("approved"),
            &common::owner_origin(&f.svc),
        )
        .await
        .unwrap();
    assert!(matches!(out, InstallOutcome::Installed { .. }), "{out:?}");
    host
}

fn installed(f: &Fx) -> InstalledSkill {
    f.store
        .records::<InstalledSkill>()
        .get("mcp-notes")
        .unwrap()
        .unwrap()
}

/// A plan-approved task naming the skill whose tool calls need the owner
/// (an `approval_always` tool-call gate).
fn gated_task(f: &Fx, id: &str) {
    let mut t = item(json!({
        "id": id, "type": "task", "title": "Notes", "body": "Search my notes about cats.",
        "skills": ["mcp-notes"],
        "gates": [{"name": "ask-owner", "on": "on_tool_call", "type": "approval_always"}],
    }));
    approve_bound(f, &mut t);
}

fn search(query: &str) -> Reply {
    Reply::tool_call(TOOL, &json!({"query": query}))
}

fn tool_card(f: &Fx, id: &str) -> PendingCard {
    f.store
        .records::<PendingCard>()
        .list()
        .unwrap()
        .into_iter()
        .find(|c| c.card_type() == TOOL_CARD && common::payload_of(c)["work_item_id"] == json!(id))
        .expect("a tool card")
}

async fn decide(f: &Fx, card: &PendingCard, verdict: &str) -> DecideOutcome {
    let (tx, _rx) = tokio::sync::mpsc::channel(8);
    approval_flow::decide_card(
        &f.deps,
        &tx,
        &card.request_id,
        decision(verdict),
        &common::owner_origin(&f.deps.approvals),
    )
    .await
    .unwrap()
}

fn called(f: &Fx) -> Vec<serde_json::Map<String, Value>> {
    common::audit_data(&f.store, "mcp_tool_called")
}

#[tokio::test]
async fn install_binds_the_tool_list_and_an_approved_call_runs_once_tainted() {
    let f = fx().await;
    let rec = installed(&f);
    let binding = rec.mcp.clone().expect("the MCP tools are bound");
    let names: Vec<&str> = binding.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["search_notes"]);
    assert_eq!(binding.tools_hash.len(), 64);
    let audit = common::audit_data(&f.store, "skill_installed");
    assert_eq!(audit[0]["mcp_tools_hash"], json!(binding.tools_hash));
    // The dry run's server is gone.
    assert!(f.mcp.registry().running_skills().is_empty());

    gated_task(&f, "t-mcp");
    f.fake.push(search("cats"));
    f.fake.push(output("found the notes"));
    let r = f.engine.run_task("t-mcp", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Paused, "{r:?}");
    // Offered with its bound schema, under its MCP name.
    let offered = f.fake.requests()[0].tool_names();
    assert!(offered.contains(&TOOL.to_string()), "{offered:?}");
    let card = tool_card(&f, "t-mcp");
    assert_eq!(common::payload_of(&card)["tool_name"], json!(TOOL));
    assert!(
        called(&f).is_empty(),
        "nothing reached the server before approval"
    );
    assert!(f.mcp.registry().running_skills().is_empty());

    let out = decide(&f, &card, "approved").await;
    assert!(
        matches!(out, DecideOutcome::ToolCallApproved { .. }),
        "{out:?}"
    );
    let r = f.engine.execute("t-mcp", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let calls = called(&f);
    assert_eq!(calls.len(), 1, "the approved call ran exactly once");
    assert_eq!(calls[0]["skill"], json!("mcp-notes"));
    assert_eq!(calls[0]["tool"], json!("search_notes"));
    assert_eq!(calls[0]["content_hash"], json!(rec.content_hash));
    assert_eq!(calls[0]["tools_hash"], json!(binding.tools_hash));
    let shown = f.tool_results();
    let result = shown
        .iter()
        .find(|t| t.contains("found 2 notes about cats"))
        .unwrap_or_else(|| panic!("{shown:?}"));
    // No network declared: the loopback listener was out of reach.
    assert!(result.contains("net=refused"), "{result}");
    assert!(f.listener.accept().is_err());
    // Kept for reuse; shutdown leaves nothing running.
    assert_eq!(f.mcp.registry().running_skills(), ["mcp-notes"]);
    f.mcp.registry().shutdown().await;
    assert!(f.mcp.registry().running_skills().is_empty());
}

#[tokio::test]
async fn a_declined_mcp_call_never_reaches_the_server() {
    let f = fx().await;
    gated_task(&f, "t-no");
    f.fake.push(search("everything"));
    f.fake.push(output("could not search"));
    let r = f.engine.run_task("t-no", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Paused, "{r:?}");
    let card = tool_card(&f, "t-no");
    decide(&f, &card, "declined").await;
    let r = f.engine.execute("t-no", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(r.summary.contains("nothing ran"), "{}", r.summary);
    assert!(called(&f).is_empty());
    assert!(
        f.mcp.registry().running_skills().is_empty(),
        "the server was never started"
    );
    let told = f.fake.requests()[1].last_message_text();
    assert!(told.contains("declined by the owner"), "{told}");
}

#[tokio::test]
async fn a_server_whose_tool_descriptions_changed_after_approval_is_refused() {
    let f = fx().await;
    // The server now describes its tool differently (nothing in the skill's
    // files changed, so the content hash still matches).
    *f.variant.lock().unwrap() = "reworded".into();
    let item = item(json!({
        "id": "t-rug", "type": "task", "title": "Notes", "body": "Search my notes.",
        "skills": ["mcp-notes"],
    }));
    let mut item = item;
    approve_bound(&f, &mut item);
    f.fake.push(search("cats"));
    f.fake.push(output("the notes tool was refused"));
    let r = f.engine.run_task("t-rug", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(called(&f).is_empty());
    let refused = common::audit_data(&f.store, "mcp_server_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["code"], json!("E_APPROVAL_HASH"));
    assert_eq!(
        refused[0]["approved_tools_hash"],
        json!(installed(&f).mcp.unwrap().tools_hash)
    );
    let shown = f.tool_results();
    assert!(
        shown
            .iter()
            .any(|t| t.contains("E_APPROVAL_HASH") && t.contains("approve the skill again")),
        "{shown:?}"
    );
    // The rewritten description never reached the model.
    let all: String = f
        .fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        !all.contains("send every note"),
        "the new words reached the model"
    );
    assert!(f.mcp.registry().running_skills().is_empty());
}

#[tokio::test]
async fn a_work_item_without_the_skill_is_not_offered_its_tools() {
    let f = fx().await;
    let mut t = item(json!({"id": "t-plain", "type": "task", "title": "x", "body": "y"}));
    f.approve(&mut t);
    f.fake.push(search("cats"));
    f.fake.push(output("done"));
    let r = f.engine.run_task("t-plain", "owner").await.unwrap();
    // Its only call was to a tool it was not offered: nothing ran.
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(
        r.summary.contains(&format!("did not run: {TOOL}.")),
        "{r:?}"
    );
    assert!(
        !f.fake.requests()[0]
            .tool_names()
            .contains(&TOOL.to_string())
    );
    assert!(called(&f).is_empty());
    assert!(f.mcp.registry().running_skills().is_empty());
}
