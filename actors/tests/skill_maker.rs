//! The skill-maker end to end (issue #17 item 5) over the real store,
//! Stream, ApprovalEngine, sandbox and FakeLlm: "make a skill that counts
//! lines" → the Planner's plan names `skill-maker` (bound to its hash) →
//! approved → the executor writes `skills/count-lines/` in its sandboxed
//! work dir → done → a `skill_install` card with the report and content
//! hash (nothing in `skills_dir` yet) → approved → dry run → installed →
//! a later task runs it, the audit showing its content hash. And the
//! refusals: a produced folder with a link out, a credential literal or a
//! taken name never gets a card.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{Fx, audit_data, item, output};
use serde_json::json;
use silas_actors::approval::{AnswerOrigin, ApprovalHandle};
use silas_actors::skills::{InstallOutcome, SkillHost};
use silas_actors::turn::approval_flow::DecideOutcome;
use silas_actors::turn::pipeline::TurnDeps;
use silas_core::cards::CardPayload;
use silas_core::config::Config;
use silas_core::model::skills::SkillSource;
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_sandbox::SubprocessSandbox;
use silas_skill::run::SkillRunner;
use silas_storage::PendingCard;
use silas_testkit::Reply;

const COUNT: &str = "import sys\nargs = sys.argv[1:]\nif args == ['--help'] or not args:\n    print('usage: count.py --text TEXT')\n    sys.exit(0)\ntext = args[args.index('--text') + 1]\nprint('lines:', len(text.splitlines()))\n";

fn skill_md(name: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: Use when the owner wants the lines of a text counted.\nscript_args:\n  scripts/count.py:\n    text: {{type: string, max_length: 1000}}\n---\n# Count lines\n\nRun scripts/count.py with the text.\n"
    )
}

/// The repo's bundled skill-maker.
fn bundled_skill_maker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills/skill-maker")
}

fn host(f: &Fx) -> SkillHost {
    let cfg = Config {
        skills_dir: f.path("skills"),
        data_dir: f.dir.path().to_path_buf(),
        ..Config::default()
    };
    std::fs::create_dir_all(f.path("skills")).unwrap();
    let runner = SkillRunner::new(SubprocessSandbox::new(common::launcher()), f.path("work"));
    SkillHost::new(f.store.clone(), &cfg).with_runner(runner)
}

fn owner(f: &Fx) -> AnswerOrigin {
    common::owner_origin(&f.svc)
}

/// The skill-maker installed the normal way (card → approval → dry run).
async fn install_skill_maker(f: &Fx, h: &SkillHost) -> String {
    silas_skill::install::copy_into(&bundled_skill_maker(), &f.path("skills")).unwrap();
    let card = h
        .offer("skill-maker", SkillSource::Discovered, vec![])
        .unwrap();
    let engine = ApprovalHandle::standalone(f.svc.clone());
    match h
        .decide(&engine, &card, common::approved(), &owner(f))
        .await
        .unwrap()
    {
        InstallOutcome::Installed { content_hash, .. } => content_hash,
        other => panic!("{other:?}"),
    }
}

/// Python that writes `files` (path → content) under the run's work dir,
/// plus any extra statements.
fn writer(files: &[(&str, String)], extra: &str) -> Reply {
    let mut code = String::from("import os\n");
    for (path, content) in files {
        let path_lit = serde_json::to_string(path).unwrap();
        code.push_str(&format!(
            "os.makedirs(os.path.dirname({path_lit}), exist_ok=True)\nopen({path_lit}, 'w').write({})\n",
            serde_json::to_string(content).unwrap()
        ));
    }
    code.push_str(extra);
    code.push_str("print('written')\n");
    Reply::tool_call("python_exec", &json!({ "code": code }))
}

fn planner_reply(id: &str, skills: &str, body: &str) -> Reply {
    let md = format!(
        "---\nid: {id}\ntype: task\ntitle: \"Make a skill\"\nskills: {skills}\n---\n\n{body}\n"
    );
    Reply::json(&json!({
        "message": "Here is a plan.",
        "plan_action": {"action": "propose", "plan_markdown": md},
        "needs_approval": true,
    }))
}

fn skill_cards(f: &Fx) -> Vec<PendingCard> {
    f.store
        .records::<PendingCard>()
        .list()
        .unwrap()
        .into_iter()
        .filter(|c| matches!(c.card, CardPayload::SkillInstall(_)))
        .collect()
}

fn install_card(card: &PendingCard) -> &silas_core::cards::SkillInstallCard {
    match &card.card {
        CardPayload::SkillInstall(c) => c,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_a_skill_that_counts_lines_then_use_it_in_a_later_task() {
    let mut f = Fx::new().await;
    let h = host(&f);
    let maker_hash = install_skill_maker(&f, &h).await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());
    let sink = silas_actors::channel::MemorySink::new();
    let deps = TurnDeps {
        skills: Some(h.clone()),
        ..TurnDeps::standard(
            f.store.clone(),
            f.cfg.clone(),
            common::agents(&f.fake),
            f.svc.clone(),
            Arc::new(sink.clone()),
        )
    };
    let mut turns = common::spawn_stream(deps, common::fast_restarts()).await;

    // 1. The owner asks; the Planner's plan names the skill-maker.
    f.fake.push(common::to_planner()).push(planner_reply(
        "t-make",
        "[skill-maker]",
        "Write a skill count-lines that counts the lines of a text.",
    ));
    turns
        .turn(&sink, "owner", "make a skill that counts lines")
        .await;
    let planned = f.get("t-make");
    assert_eq!(
        planned.skill_hashes.as_ref().unwrap()["skill-maker"],
        maker_hash
    );
    let plan_card = f
        .store
        .records::<PendingCard>()
        .list()
        .unwrap()
        .into_iter()
        .find(|c| c.card.work_item_id() == Some("t-make"))
        .expect("a plan card");

    // 2. Approved on the card: the item is dispatched.
    let out = turns
        .stream
        .decide_card(&plan_card.request_id, common::approved(), owner(&f))
        .await
        .unwrap();
    assert!(matches!(out, DecideOutcome::Dispatched { .. }), "{out:?}");
    let dispatched = turns.dispatched.recv().await.unwrap();
    assert_eq!(dispatched.work_item_id, "t-make");

    // 3. The executor (with the skill-maker's instructions) writes the
    //    folder in its sandboxed work dir.
    f.fake.push(writer(
        &[
            ("skills/count-lines/SKILL.md", skill_md("count-lines")),
            ("skills/count-lines/scripts/count.py", COUNT.to_string()),
        ],
        "",
    ));
    f.fake.push(output("wrote the count-lines skill"));
    let r = f.engine.run_task("t-make", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let system = common::system_of(&f.fake.requests()[2]);
    assert!(system.contains("## Skill `skill-maker`"), "{system}");
    assert!(
        r.summary
            .contains("Skill count-lines waits for your install approval"),
        "{}",
        r.summary
    );
    // Nothing activated: not in skills_dir, not installed, not usable.
    assert!(!f.path("skills/count-lines").exists());
    assert!(h.installed("count-lines").unwrap().is_none());

    // 4. The install card: report, content hash, the item that made it;
    //    delivered with the item's result.
    let cards = skill_cards(&f);
    assert_eq!(cards.len(), 1);
    let card = cards[0].clone();
    let c = install_card(&card);
    assert_eq!(c.skill, "count-lines");
    assert_eq!(c.source, SkillSource::Created);
    assert_eq!(c.made_by.as_deref(), Some("t-make"));
    assert_eq!(c.scripts, ["scripts/count.py"]);
    let staged = h.staging_dir("t-make").unwrap().join("count-lines");
    let staged_hash = silas_skill::Skill::load(&staged).unwrap().content_hash;
    assert_eq!(c.content_hash, staged_hash);
    let open = silas_actors::work_executor::cards::open_cards_for(
        f.store.records::<PendingCard>().list().unwrap(),
        "t-make",
    );
    assert!(open.iter().any(|o| o.request_id == card.request_id));
    let offered = audit_data(&f.store, "skill_install_offered");
    let last = offered.last().unwrap();
    assert_eq!(last["made_by"], json!("t-make"));
    assert_eq!(last["content_hash"], json!(c.content_hash));

    // 5. Approved: dry run, then placed in skills_dir at that hash.
    let out = turns
        .stream
        .decide_card(&card.request_id, common::approved(), owner(&f))
        .await
        .unwrap();
    let DecideOutcome::SkillInstalled { content_hash, .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!(content_hash, staged_hash);
    let rec = h.installed("count-lines").unwrap().expect("installed");
    assert_eq!(rec.content_hash, staged_hash);
    assert_eq!(rec.source, SkillSource::Created);
    let placed = silas_skill::Skill::load(&f.path("skills/count-lines")).unwrap();
    assert_eq!(placed.content_hash, staged_hash);
    assert!(!staged.exists(), "the staging copy is gone");
    let dry_runs = f.audit_events();
    assert!(dry_runs.contains(&"skill_installed".to_string()));

    // 6. A later task names it: run through run_skill_script, the audit
    //    showing the content hash at use.
    let mut later: WorkItem = item(json!({
        "id": "t-use", "type": "task", "title": "Count", "body": "Count the lines of a\\nb.",
        "skills": ["count-lines"],
    }));
    silas_actors::turn::skill_context::bind(Some(&h), &mut later).unwrap();
    f.approve(&mut later);
    f.fake.push(Reply::tool_call(
        "run_skill_script",
        &json!({"skill": "count-lines", "script": "scripts/count.py",
                "args": {"text": "a\nb\nc"}}),
    ));
    f.fake.push(output("counted"));
    let r = f.engine.run_task("t-use", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert!(f.tool_results().iter().any(|t| t.contains("lines: 3")));
    let runs = audit_data(&f.store, "skill_script_run");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["skill"], json!("count-lines"));
    assert_eq!(runs[0]["content_hash"], json!(staged_hash));
    turns.stop().await;
}

/// Approved and verified item naming `skills` (bound as the turn binds).
fn made_task(f: &Fx, h: &SkillHost, id: &str, skills: &[&str]) {
    let mut t: WorkItem = item(json!({
        "id": id, "type": "task", "title": "Make", "body": "Make skills.", "skills": skills,
    }));
    silas_actors::turn::skill_context::bind(Some(h), &mut t).unwrap();
    f.approve(&mut t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produced_folders_with_a_link_out_a_credential_or_a_taken_name_get_no_card() {
    let mut f = Fx::new().await;
    let h = host(&f);
    install_skill_maker(&f, &h).await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());
    made_task(&f, &h, "t-bad", &["skill-maker"]);
    let cred = "KEY = 'AKIAIOSFODNN7EXAMPLE'\nprint(KEY)\n".to_string();
    f.fake.push(writer(
        &[
            ("skills/link-out/SKILL.md", skill_md("link-out")),
            ("skills/link-out/scripts/count.py", COUNT.to_string()),
            ("skills/leaky/SKILL.md", skill_md("leaky")),
            ("skills/leaky/scripts/count.py", cred),
            // The skill-maker's own name: it would replace an installed skill.
            ("skills/skill-maker/SKILL.md", skill_md("skill-maker")),
            ("skills/skill-maker/scripts/count.py", COUNT.to_string()),
            ("skills/good-one/SKILL.md", skill_md("good-one")),
            ("skills/good-one/scripts/count.py", COUNT.to_string()),
        ],
        "os.symlink('/etc/passwd', 'skills/link-out/scripts/passwd')\n",
    ));
    f.fake.push(output("wrote skills"));
    let r = f.engine.run_task("t-bad", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");

    // Only the clean one is offered.
    let cards = skill_cards(&f);
    let names: Vec<&str> = cards
        .iter()
        .map(|c| install_card(c).skill.as_str())
        .collect();
    assert_eq!(names, ["good-one"], "{cards:?}");
    let refused = audit_data(&f.store, "skill_install_refused");
    let reason = |name: &str| -> String {
        refused
            .iter()
            .find(|r| r["skill"] == json!(name))
            .unwrap_or_else(|| panic!("{name} not refused: {refused:?}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        reason("link-out").contains("[symlink]"),
        "{}",
        reason("link-out")
    );
    assert!(
        reason("leaky").contains("credential_literal"),
        "{}",
        reason("leaky")
    );
    assert!(
        reason("skill-maker").contains("[name_taken]"),
        "{}",
        reason("skill-maker")
    );
    for r in &refused {
        assert_eq!(r["made_by"], json!("t-bad"));
    }
    // The owner is told, with the rule.
    assert!(
        r.summary.contains("Skill leaky was refused"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("[name_taken]"), "{}", r.summary);
    // The installed skill-maker is untouched; nothing of the refused ones
    // reached skills_dir.
    assert!(h.check_use("skill-maker").is_ok());
    for name in ["link-out", "leaky", "good-one"] {
        assert!(!f.path("skills").join(name).exists(), "{name}");
    }

    // Declined: recorded, the staged copy removed, nothing installed.
    let engine = ApprovalHandle::standalone(f.svc.clone());
    let out = h
        .decide(&engine, &cards[0], common::decision("declined"), &owner(&f))
        .await
        .unwrap();
    assert!(matches!(out, InstallOutcome::Declined { .. }));
    assert!(h.installed("good-one").unwrap().is_none());
    assert!(
        h.declined("good-one")
            .unwrap()
            .unwrap()
            .covers(&install_card(&cards[0]).content_hash)
    );
    assert!(!h.staging_dir("t-bad").unwrap().join("good-one").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_the_skill_maker_offers_nothing_it_writes() {
    let mut f = Fx::new().await;
    let h = host(&f);
    install_skill_maker(&f, &h).await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());
    made_task(&f, &h, "t-plain", &[]);
    f.fake.push(writer(
        &[
            ("skills/sneaky/SKILL.md", skill_md("sneaky")),
            ("skills/sneaky/scripts/count.py", COUNT.to_string()),
        ],
        "",
    ));
    f.fake.push(output("done"));
    let r = f.engine.run_task("t-plain", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert!(skill_cards(&f).is_empty());
    assert!(!h.staging_dir("t-plain").unwrap().exists());
}
