//! Skills used in background work (issue #17 items 1 and 3) over the real
//! sandbox, store, ApprovalService and FakeLlm: a plan bound to a skill's
//! content hash, the executor given the skill's instructions and the
//! `run_skill_script` tool, the hash checked again at use, and a skill that
//! declares hosts reaching exactly those through its own egress proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use common::{Fx, audit_data, item, output, system_of};
use serde_json::{Value, json};
use silas_actors::approval::ApprovalHandle;
use silas_actors::skills::{InstallOutcome, SkillHost};
use silas_core::cards::CardPayload;
use silas_core::config::Config;
use silas_core::model::skills::SkillSource;
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_netguard::{NetworkGuard, NetworkGuardConfig, ScriptedResolver};
use silas_sandbox::SubprocessSandbox;
use silas_skill::run::SkillRunner;
use silas_testkit::Reply;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const COUNT: &str = "import sys\nargs = sys.argv[1:]\nif args == ['--help'] or not args:\n    print('usage: count.py --text TEXT')\n    sys.exit(0)\ntext = args[args.index('--text') + 1]\nprint('lines:', len(text.splitlines()))\n";

const COUNT_FRONT: &str =
    "script_args:\n  scripts/count.py:\n    text: {type: string, max_length: 1000}\n";

fn write_skill(root: &Path, name: &str, script: &str, front: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: Use when the owner wants the lines of a text counted.\n{front}---\n# Count lines\n\nRun scripts/count.py with the text.\n"),
    )
    .unwrap();
    std::fs::write(dir.join("scripts/count.py"), script).unwrap();
}

fn host(f: &Fx) -> SkillHost {
    let cfg = Config {
        skills_dir: f.path("skills"),
        ..Config::default()
    };
    std::fs::create_dir_all(f.path("skills")).unwrap();
    let runner = SkillRunner::new(SubprocessSandbox::new(common::launcher()), f.path("work"));
    SkillHost::new(f.store.clone(), &cfg).with_runner(runner)
}

/// Offer and approve `name` as the owner; its installed hash.
async fn install(f: &Fx, host: &SkillHost, name: &str) -> String {
    let card = host.offer(name, SkillSource::Discovered, vec![]).unwrap();
    let engine = ApprovalHandle::standalone(f.svc.clone());
    let out = host
        .decide(
            &engine,
            &card,
            common::approved(),
            &common::owner_origin(&f.svc),
        )
        .await
        .unwrap();
    match out {
        InstallOutcome::Installed { content_hash, .. } => content_hash,
        other => panic!("{other:?}"),
    }
}

/// A task naming `skills`, bound as the turn binds a plan, then approved.
fn bound_task(f: &Fx, host: &SkillHost, id: &str, skills: &[&str]) -> WorkItem {
    let mut t = item(json!({
        "id": id, "type": "task", "title": "Count", "body": "Count the lines of a\\nb\\nc.",
        "skills": skills,
    }));
    silas_actors::turn::skill_context::bind(Some(host), &mut t).unwrap();
    f.approve(&mut t);
    t
}

fn run_call(skill: &str, args: Value) -> Reply {
    Reply::tool_call(
        "run_skill_script",
        &json!({"skill": skill, "script": "scripts/count.py", "args": args}),
    )
}

#[tokio::test]
async fn a_bound_skill_is_offered_to_the_executor_and_run_with_its_hash_audited() {
    let mut f = Fx::new().await;
    let h = host(&f);
    write_skill(&f.path("skills"), "count-lines", COUNT, COUNT_FRONT);
    let hash = install(&f, &h, "count-lines").await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());

    let t = bound_task(&f, &h, "t-count", &["count-lines"]);
    assert_eq!(
        t.skill_hashes.as_ref().unwrap()["count-lines"],
        hash,
        "the plan binds the installed hash"
    );
    f.fake.push(run_call(
        "count-lines",
        json!({"text": "a\nb\n$(touch /tmp/pwned)"}),
    ));
    f.fake.push(output("counted"));
    let r = f.engine.run_task("t-count", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");

    // The executor saw the skill's instructions and the tool, narrowed to it.
    let reqs = f.fake.requests();
    let system = system_of(&reqs[0]);
    assert!(system.contains("## Skill `count-lines`"), "{system}");
    assert!(system.contains("Run scripts/count.py with the text."));
    let tools = serde_json::to_string(&reqs[0].body["tools"]).unwrap();
    assert!(tools.contains("run_skill_script"), "{tools}");
    assert!(tools.contains("\"enum\":[\"count-lines\"]"), "{tools}");
    // The argument reached the script as one argv element, never a shell.
    let results = f.tool_results();
    assert!(
        results.iter().any(|c| c.contains("lines: 3")),
        "{results:?}"
    );
    assert!(!Path::new("/tmp/pwned").exists());
    // The audit shows the content hash at use.
    let runs = audit_data(&f.store, "skill_script_run");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["content_hash"], json!(hash));
    let tool = audit_data(&f.store, "tool_executed");
    let skill_run = tool
        .iter()
        .find(|d| d["tool_name"] == json!("run_skill_script"))
        .expect("the skill run is a tool execution");
    assert_eq!(skill_run["content_hash"], json!(hash));
    assert_eq!(skill_run["taint"], json!("external"));
}

#[tokio::test]
async fn a_skill_changed_since_the_plan_was_approved_blocks_the_item() {
    let mut f = Fx::new().await;
    let h = host(&f);
    write_skill(&f.path("skills"), "count-lines", COUNT, COUNT_FRONT);
    let old = install(&f, &h, "count-lines").await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());
    bound_task(&f, &h, "t-old", &["count-lines"]);

    // Changed and even re-approved for install: the plan approved the old bytes.
    std::fs::write(
        f.path("skills/count-lines/scripts/count.py"),
        COUNT.replace("'lines:'", "'n:'"),
    )
    .unwrap();
    let new = install(&f, &h, "count-lines").await;
    assert_ne!(old, new);
    let r = f.engine.run_task("t-old", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked, "{r:?}");
    assert!(r.summary.contains("E_APPROVAL_HASH"), "{}", r.summary);
    assert!(
        f.fake.requests().is_empty(),
        "nothing was sent to the model"
    );
    let refused = audit_data(&f.store, "skill_bound_refused");
    assert_eq!(refused[0]["approved"], json!(old));
    assert_eq!(refused[0]["current"], json!(new));

    // Changed after install, not approved again: refused too (not installed
    // at its current hash), before the model is asked anything.
    bound_task(&f, &h, "t-new", &["count-lines"]);
    std::fs::write(f.path("skills/count-lines/extra.md"), "more\n").unwrap();
    let r = f.engine.run_task("t-new", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked, "{r:?}");
    assert!(r.summary.contains("E_APPROVAL_HASH"), "{}", r.summary);
    assert!(f.fake.requests().is_empty());

    // A plan naming a skill that is not installed is not bound at all.
    let mut t = item(
        json!({"id": "t-x", "type": "task", "title": "x", "body": "x",
                            "skills": ["missing"]}),
    );
    let err = silas_actors::turn::skill_context::bind(Some(&h), &mut t).unwrap_err();
    assert!(err.contains("not installed"), "{err}");
}

#[tokio::test]
async fn without_the_skill_in_its_plan_the_executor_cannot_run_its_scripts() {
    let mut f = Fx::new().await;
    let h = host(&f);
    write_skill(&f.path("skills"), "count-lines", COUNT, COUNT_FRONT);
    install(&f, &h, "count-lines").await;
    let h = Arc::new(h);
    f.engine.skills = Some(h.clone());
    bound_task(&f, &h, "t-plain", &[]);
    f.fake.push(run_call("count-lines", json!({"text": "a"})));
    f.fake.push(output("tried"));
    let r = f.engine.run_task("t-plain", "owner").await.unwrap();
    // Its only call was to a tool it was not offered: nothing ran.
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(
        r.summary.contains("did not run: run_skill_script."),
        "{r:?}"
    );
    let tools = serde_json::to_string(&f.fake.requests()[0].body["tools"]).unwrap();
    assert!(!tools.contains("run_skill_script"), "{tools}");
    assert!(audit_data(&f.store, "skill_script_run").is_empty());
    let system = system_of(&f.fake.requests()[0]);
    assert!(!system.contains("Count lines"), "{system}");
}

/// A loopback "origin" answering every request with `pong`.
async fn origin() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let resp = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong";
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

const FETCH: &str = "import sys, urllib.request, urllib.error\nif sys.argv[1:] == ['--help'] or not sys.argv[1:]:\n    print('usage: fetch.py --url URL')\n    sys.exit(0)\nfor url in ['http://api.skill.test/ping', 'http://other.test/ping']:\n    try:\n        print(url, urllib.request.urlopen(url, timeout=5).read().decode())\n    except urllib.error.HTTPError as e:\n        print(url, 'STATUS', e.code)\n";

#[tokio::test]
async fn a_skill_reaches_exactly_its_declared_hosts_through_its_own_proxy() {
    let f = Fx::new().await;
    let server = origin().await;
    let public: std::net::IpAddr = "93.184.216.34".parse().unwrap();
    let resolver = Arc::new(
        ScriptedResolver::new()
            .with("api.skill.test", &[&[public]])
            .with("other.test", &[&[public]]),
    );
    let guard = NetworkGuard::new(&NetworkGuardConfig::default(), resolver).unwrap();
    let h = host(&f)
        .with_egress_guard(guard)
        .with_egress_redirect_for_tests(SocketAddr::new(public, 80), server);
    let dir = f.path("skills/fetch-status");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: fetch-status\ndescription: Use when the owner asks whether the status API answers.\nrequirements:\n  network: [api.skill.test]\nscript_args:\n  scripts/fetch.py:\n    url: {type: string, max_length: 200}\n---\n# Fetch status\n",
    )
    .unwrap();
    std::fs::write(dir.join("scripts/fetch.py"), FETCH).unwrap();
    let card = h
        .offer("fetch-status", SkillSource::Discovered, vec![])
        .unwrap();
    let CardPayload::SkillInstall(c) = &card.card else {
        panic!()
    };
    assert_eq!(c.network, ["api.skill.test"]);
    install_from(&f, &h, &card).await;
    let args = json!({"url": "x"});
    let out = h
        .run_script(
            "fetch-status",
            "scripts/fetch.py",
            args.as_object().unwrap(),
            "net-1",
        )
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout.contains("http://api.skill.test/ping pong"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("http://other.test/ping STATUS 403"),
        "{}",
        out.stdout
    );
    let refused = audit_data(&f.store, "skill_egress_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["refused"][0]["target"], json!("other.test:80"));
}

async fn install_from(f: &Fx, h: &SkillHost, card: &silas_storage::PendingCard) {
    let engine = ApprovalHandle::standalone(f.svc.clone());
    h.decide(
        &engine,
        card,
        common::approved(),
        &common::owner_origin(&f.svc),
    )
    .await
    .unwrap();
}

fn planner_reply(id: &str, skills: &str) -> Reply {
    let md = format!(
        "---\nid: {id}\ntype: task\ntitle: \"Count\"\nskills: {skills}\n---\n\nCount the lines.\n"
    );
    Reply::json(&json!({
        "message": "Here is a plan.",
        "plan_action": {"action": "propose", "plan_markdown": md},
        "needs_approval": true,
    }))
}

/// The turn: the Proxy and Planner see the installed skill's metadata; a
/// plan naming it gets a card for a work item bound to its hash; a plan
/// naming a skill that is not installed gets no card.
#[tokio::test]
async fn turns_show_installed_skills_and_bind_the_plans_that_name_them() {
    let f = Fx::new().await;
    let h = host(&f);
    write_skill(&f.path("skills"), "count-lines", COUNT, COUNT_FRONT);
    let hash = install(&f, &h, "count-lines").await;
    // Present but not installed: never shown.
    write_skill(&f.path("skills"), "not-yet", COUNT, COUNT_FRONT);
    let sink = silas_actors::channel::MemorySink::new();
    let deps = silas_actors::turn::pipeline::TurnDeps {
        skills: Some(Arc::new(h)),
        ..silas_actors::turn::pipeline::TurnDeps::standard(
            f.store.clone(),
            f.cfg.clone(),
            common::agents(&f.fake),
            f.svc.clone(),
            Arc::new(sink.clone()),
        )
    };
    let turns = common::spawn_stream(deps, common::fast_restarts()).await;
    f.fake
        .push(common::to_planner())
        .push(planner_reply("t-bound", "[count-lines]"));
    turns
        .turn(&sink, "owner", "count the lines of my notes")
        .await;
    let reqs = f.fake.requests();
    for r in &reqs[..2] {
        let system = system_of(r);
        assert!(
            system.contains("- count-lines: Use when the owner wants the lines"),
            "{system}"
        );
        assert!(!system.contains("not-yet"), "{system}");
    }
    let stored = f.get("t-bound");
    assert_eq!(stored.skill_hashes.unwrap()["count-lines"], hash);
    let cards = f
        .store
        .records::<silas_storage::PendingCard>()
        .list()
        .unwrap();
    assert!(
        cards
            .iter()
            .any(|c| c.card.work_item_id() == Some("t-bound")),
        "{cards:?}"
    );

    f.fake
        .push(common::to_planner())
        .push(planner_reply("t-unbound", "[not-yet]"));
    let reply = turns.turn(&sink, "owner", "use the other one").await;
    assert!(reply.contains("not installed"), "{reply}");
    assert!(f.store.work_items().get("t-unbound").unwrap().is_none());
    let refused = audit_data(&f.store, "plan_refused_skill");
    assert_eq!(refused[0]["skills"], json!(["not-yet"]));
    turns.stop().await;
}
