//! The skill-maker on the real binary, from the client's side (issue #17
//! item 5, spec §10.4): the bundled `skill-maker` installed through its card
//! over the WebSocket; the owner asks for "a skill that counts lines"; the
//! scripted fake model routes to the Planner, whose plan binds
//! `skill-maker`; approved, the executor writes `skills/count-lines/` in its
//! sandboxed work dir; the `skill_install` card for it reaches the owner's
//! socket and not a customer's; nothing in `skills_dir` changes before the
//! approval; a chatbot customer answering that card id is refused (socket
//! kept, still nothing installed); the owner approves → the skill is in
//! `skills_dir` at the card's content hash and a later plan runs it
//! (`lines: 3` reaches the model); the approval replayed is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{
    Ws, audit_events, frame_of_type, install_card, next_frame, send, silas, wait_installed,
};

const WITHIN: Duration = Duration::from_secs(60);
const MADE: &str = "count-lines";

const COUNT: &str = "import sys\nargs = sys.argv[1:]\nif args == ['--help'] or not args:\n    print('usage: count.py --text TEXT')\n    sys.exit(0)\ntext = args[args.index('--text') + 1]\nprint('lines:', len(text.splitlines()))\n";
const SKILL_MD: &str = "---\nname: count-lines\ndescription: Use when the owner wants the lines of a text counted.\nscript_args:\n  scripts/count.py:\n    text: {type: string, max_length: 1000}\n---\n# Count lines\n\nRun scripts/count.py with the text.\n";

/// Every file under `root` (relative path → bytes).
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The executor's tool call that writes the new skill in its work dir, as
/// the skill-maker's instructions say (`skills/<name>/`).
fn writer() -> Reply {
    let mut code = String::from("import os\n");
    for (path, content) in [
        ("skills/count-lines/SKILL.md", SKILL_MD),
        ("skills/count-lines/scripts/count.py", COUNT),
    ] {
        let path = serde_json::to_string(path).unwrap();
        code.push_str(&format!(
            "os.makedirs(os.path.dirname({path}), exist_ok=True)\nopen({path}, 'w').write({})\n",
            serde_json::to_string(content).unwrap()
        ));
    }
    code.push_str("print('written')\n");
    Reply::tool_call("python_exec", &json!({ "code": code }))
}

fn output(summary: &str) -> Reply {
    Reply::json(&json!({"summary": summary, "artifact_refs": [], "next_steps": []}))
}

/// Waits for the `work_status` frame that ends item `id`.
async fn finished(ws: &mut Ws, id: &str, log: &mut Vec<Value>) -> Value {
    let ends = |f: &Value| {
        f["type"] == "work_status"
            && f.to_string().contains(id)
            && ["done", "failed", "stuck", "blocked"]
                .contains(&f["status"].as_str().unwrap_or_default())
    };
    // It may have arrived while waiting for the install card.
    if let Some(f) = log.iter().find(|f| ends(f)) {
        return f.clone();
    }
    loop {
        let f = frame_of_type(ws, "work_status", WITHIN, log).await;
        if ends(&f) {
            return f;
        }
    }
}

/// Plan `id` (binding `skills`) requested with `text` and approved.
async fn approved_plan(
    ws: &mut Ws,
    fake: &FakeLlm,
    id: &str,
    skills: &str,
    text: &str,
    log: &mut Vec<Value>,
) {
    support::plan_replies(fake, id, "task", &format!("skills: [{skills}]"));
    let plan = support::request_plan(ws, text, WITHIN, log).await;
    assert!(plan["plan"].to_string().contains(skills), "{plan}");
    send(
        ws,
        json!({"type": "approval_response", "request_id": plan["request_id"], "verdict": "approved"}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_made_on_request_waits_for_the_owners_approval_then_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    assert!(silas(d).arg("init").output().unwrap().status.success());
    // The owner asks for the bundled skill-maker's card (`init` placed it).
    let ask = silas(d)
        .args(["skill", "install", "skill-maker"])
        .output()
        .unwrap();
    assert!(ask.status.success(), "{ask:?}");

    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "Hello."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let (daemon, addr, mut ws) = support::start_chatbot_on_fake(d, &fake).await;
    let mut log = Vec::new();

    let maker = install_card(&mut ws, "skill-maker", WITHIN, &mut log).await;
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": maker["request_id"], "verdict": "approved"}),
    )
    .await;
    wait_installed(d, "skill-maker").await;
    let skills_dir = d.join("skills");
    let before = tree(&skills_dir);
    assert!(before.keys().all(|k| !k.starts_with(MADE)), "{before:?}");

    let (mut customer, auth) = support::connect_anonymous(&addr, Duration::from_secs(10)).await;
    assert_ne!(auth["scope_id"], "owner", "{auth}");
    let mut customer_log = Vec::new();

    // 1. The owner asks; the plan binds the skill-maker; approved; the
    //    executor writes the folder in its sandboxed work dir.
    approved_plan(
        &mut ws,
        &fake,
        "t-make",
        "skill-maker",
        "make a skill that counts lines",
        &mut log,
    )
    .await;
    fake.push(writer())
        .push(output("wrote the count-lines skill"));
    let card = install_card(&mut ws, MADE, WITHIN, &mut log).await;
    let done = finished(&mut ws, "t-make", &mut log).await;
    assert_eq!(done["status"], "done", "{done}");
    assert!(
        log.iter()
            .any(|f| f.to_string().contains("waits for your install approval")),
        "the owner is told: {log:?}"
    );
    // The executor was given the skill-maker's instructions.
    let told = fake
        .requests()
        .iter()
        .any(|r| r.body.to_string().contains("## Skill `skill-maker`"));
    assert!(
        told,
        "the executor never saw the skill-maker's instructions"
    );

    // 2. The card: what the made skill is, and nothing installed yet.
    assert_eq!(card["source"], "created", "{card}");
    assert_eq!(card["scripts"], json!(["scripts/count.py"]));
    assert!(
        card["description"].as_str().unwrap().contains("lines"),
        "{card}"
    );
    let hash = card["content_hash"].as_str().unwrap().to_string();
    assert_eq!(
        tree(&skills_dir),
        before,
        "skills_dir changed before approval"
    );

    // 3. A customer answers the owner's install card: refused, kept, nothing
    //    installed; the card never reached the customer.
    let approve = json!({"type": "approval_response", "request_id": card["request_id"], "verdict": "approved"});
    for _ in 0..2 {
        send(&mut customer, approve.clone()).await;
        let err = frame_of_type(
            &mut customer,
            "error",
            Duration::from_secs(10),
            &mut customer_log,
        )
        .await;
        assert_eq!(err["request_id"], card["request_id"], "{err}");
        // Refused at the channel: a customer may only name ids it was shown.
        assert_eq!(err["code"], "E_CHANNEL_AUTH", "{err}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        tree(&skills_dir),
        before,
        "a customer's answer installed it"
    );
    assert!(
        !customer_log.iter().any(|f| f["type"] == "skill_install"),
        "{customer_log:?}"
    );

    // 4. The owner approves: in skills_dir at the card's hash.
    send(&mut ws, approve.clone()).await;
    wait_installed(d, MADE).await;
    let after = tree(&skills_dir);
    assert_eq!(
        after.get("count-lines/scripts/count.py").map(Vec::as_slice),
        Some(COUNT.as_bytes())
    );
    assert_eq!(
        after.get("count-lines/SKILL.md").map(Vec::as_slice),
        Some(SKILL_MD.as_bytes())
    );
    let shown = silas(d).args(["skill", "show", MADE]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(&hash),
        "{shown:?}"
    );
    // The approval replayed: refused.
    send(&mut ws, approve).await;
    let err = frame_of_type(&mut ws, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(err["request_id"], card["request_id"], "{err}");

    // 5. Usable: a later plan names it and its script runs.
    approved_plan(
        &mut ws,
        &fake,
        "t-use",
        MADE,
        "count the lines of my text",
        &mut log,
    )
    .await;
    fake.push(Reply::tool_call(
        "run_skill_script",
        &json!({"skill": MADE, "script": "scripts/count.py", "args": {"text": "a\nb\nc"}}),
    ))
    .push(output("counted"));
    let done = finished(&mut ws, "t-use", &mut log).await;
    assert_eq!(done["status"], "done", "{done}");
    let ran = fake
        .requests()
        .iter()
        .any(|r| r.body.to_string().contains("lines: 3"));
    assert!(
        ran,
        "the made skill's script output never reached the model"
    );
    while let Some(f) = next_frame(&mut customer, Duration::from_millis(300)).await {
        customer_log.push(f);
    }
    assert!(
        !customer_log.iter().any(|f| f["type"] == "skill_install"),
        "{customer_log:?}"
    );

    drop((ws, customer));
    daemon.stop().await;
    let events = audit_events(d);
    let of = |n: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["event"] == n && e["data"]["skill"] == MADE)
            .collect()
    };
    let offered = of("skill_install_offered");
    assert_eq!(offered.len(), 1, "{offered:?}");
    assert_eq!(offered[0]["data"]["made_by"], "t-make");
    assert_eq!(offered[0]["data"]["content_hash"], hash.as_str());
    assert_eq!(of("skill_installed").len(), 1);
    let runs = of("skill_script_run");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["data"]["content_hash"], hash.as_str());
    support::assert_audit_verifies(d);
}

/// The skills the binary ships are installable as shipped: `silas skill
/// install NAME` for each, then the owner approves its card and the dry run
/// (each script once, in the sandbox, with its schema's defaults or
/// `--help`) passes. A script that exits non-zero there is never installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bundled_skill_installs_through_its_card() {
    const BUNDLED: [&str; 2] = ["coding", "skill-maker"];
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    assert!(silas(d).arg("init").output().unwrap().status.success());
    for name in BUNDLED {
        let ask = silas(d).args(["skill", "install", name]).output().unwrap();
        assert!(ask.status.success(), "{name}: {ask:?}");
    }
    let fake = FakeLlm::start().await.unwrap();
    let (daemon, _addr, mut ws) = support::start_chatbot_on_fake(d, &fake).await;
    let mut log = Vec::new();
    for name in BUNDLED {
        let card = install_card(&mut ws, name, WITHIN, &mut log).await;
        send(
            &mut ws,
            json!({"type": "approval_response", "request_id": card["request_id"], "verdict": "approved"}),
        )
        .await;
    }
    for name in BUNDLED {
        // Fails fast on a refused dry run instead of waiting out the minute.
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let events = audit_events(d);
            let mine = |e: &&Value| e["data"]["skill"] == name;
            if events
                .iter()
                .filter(mine)
                .any(|e| e["event"] == "skill_installed")
            {
                break;
            }
            let failed: Vec<&Value> = events
                .iter()
                .filter(mine)
                .filter(|e| e["event"] == "skill_dry_run_failed")
                .collect();
            assert!(failed.is_empty(), "{name}: {failed:?}\n{log:?}");
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} was not installed: {log:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    drop(daemon);
}
