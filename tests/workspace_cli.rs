//! Workspaces over the real binary (issue #15): `silas workspace
//! add|list|remove` writes the store directly without a daemon and goes
//! over the control socket with one; the owner's refusals (data dir, `/`, system dirs,
//! a file, a path registered twice, a bad name); every change audited; and
//! the plan side — a plan naming an unknown workspace, or asking write on a
//! read-only one, is refused before any card, while a registered one's card
//! shows the workspace, its path and the access asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::FakeLlm;
use support::{Daemon, audit_events, next_frame, plan_replies, send, silas, start_daemon};

fn run(dir: &Path, args: &[&str]) -> Output {
    silas(dir).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(
        o.status.success(),
        "silas {args:?}: {:?}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Runs `args`, which must fail; its stderr.
fn refused(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(
        !o.status.success(),
        "silas {args:?} succeeded: {}",
        text(&o.stdout)
    );
    text(&o.stderr)
}

fn listed(dir: &Path) -> Vec<Value> {
    ok(dir, &["workspace", "list", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn events_named(dir: &Path, name: &str) -> Vec<Value> {
    audit_events(dir)
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

/// The registry refusals, the same with and without a daemon.
fn assert_refusals(dir: &Path) {
    let e = refused(dir, &["workspace", "add", "rooted", "/"]);
    assert!(
        e.contains("E_CFG_INVALID") && e.contains("filesystem root"),
        "{e}"
    );
    let e = refused(dir, &["workspace", "add", "etc", "/etc", "--write"]);
    assert!(
        e.contains("E_CFG_INVALID") && e.contains("system directory"),
        "{e}"
    );
    let e = refused(dir, &["workspace", "add", "homes", "/home"]);
    assert!(e.contains("system directory"), "{e}");
    // A home whole, or a credentials directory: a task would work on a copy
    // of its keys.
    std::fs::create_dir_all(dir.join("proj/.ssh")).unwrap();
    let e = refused(dir, &["workspace", "add", "keys", "proj/.ssh"]);
    assert!(e.contains("holds credentials"), "{e}");
    if Path::new("/root").is_dir() {
        let e = refused(dir, &["workspace", "add", "home", "/root", "--write"]);
        assert!(e.contains("home directory"), "{e}");
    }
    let e = refused(dir, &["workspace", "add", "data", "data"]);
    assert!(e.contains("data dir"), "{e}");
    let e = refused(dir, &["workspace", "add", "inside", "data/keys"]);
    assert!(e.contains("data dir"), "{e}");
    // A directory containing the data dir is refused too.
    let e = refused(dir, &["workspace", "add", "parent", "."]);
    assert!(e.contains("data dir"), "{e}");
    let e = refused(dir, &["workspace", "add", "file", "proj/readme.txt"]);
    assert!(e.contains("not a directory"), "{e}");
    let e = refused(dir, &["workspace", "add", "gone", "nowhere"]);
    assert!(e.contains("not an existing directory"), "{e}");
    let e = refused(dir, &["workspace", "add", "bad name", "other"]);
    assert!(e.contains("workspace name"), "{e}");
    let e = refused(dir, &["workspace", "add", "twice", "proj"]);
    assert!(
        e.contains("already registered as workspace \"proj\""),
        "{e}"
    );
    let e = refused(dir, &["workspace", "remove", "never"]);
    assert!(e.contains("E_DB_NOT_FOUND"), "{e}");
}

fn layout(dir: &Path) {
    std::fs::create_dir(dir.join("proj")).unwrap();
    std::fs::write(dir.join("proj/readme.txt"), "hi").unwrap();
    std::fs::create_dir(dir.join("other")).unwrap();
}

#[test]
fn workspace_commands_without_a_daemon_write_the_store_and_audit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    layout(dir);
    ok(dir, &["init"]);
    assert!(ok(dir, &["workspace", "list"]).contains("no workspaces"));

    // Relative to the CLI's cwd, stored canonical.
    let out = ok(dir, &["workspace", "add", "proj", "proj"]);
    let canon = std::fs::canonicalize(dir.join("proj")).unwrap();
    assert!(out.contains(&canon.display().to_string()), "{out}");
    assert!(out.contains("read-only"), "{out}");
    ok(
        dir,
        &["workspace", "add", "other", "./other/../other", "--write"],
    );
    let all = listed(dir);
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["name"], "other");
    assert_eq!(all[0]["writable"], true);
    assert_eq!(all[1]["path"], canon.display().to_string());
    assert_eq!(all[1]["writable"], false);
    let table = ok(dir, &["workspace", "list"]);
    assert!(table.contains("proj") && table.contains("read-only") && table.contains("writable"));

    assert_refusals(dir);

    // A quoted `~/…` (the shell did not expand it) is the home directory
    // (HOME is the scratch dir here), never a directory named `~`.
    ok(dir, &["workspace", "remove", "other"]);
    let out = ok(dir, &["workspace", "add", "other", "~/other"]);
    let other = std::fs::canonicalize(dir.join("other")).unwrap();
    assert!(out.contains(&other.display().to_string()), "{out}");
    let e = refused(dir, &["workspace", "add", "x", "~root/x"]);
    assert!(e.contains("full path"), "{e}");

    ok(dir, &["workspace", "remove", "other"]);
    assert_eq!(listed(dir).len(), 1);
    assert!(dir.join("other").is_dir(), "the directory itself stays");

    let added = events_named(dir, "workspace_added");
    assert_eq!(added.len(), 3);
    assert_eq!(added[0]["data"]["name"], "proj");
    assert_eq!(added[0]["data"]["path"], canon.display().to_string());
    assert_eq!(added[0]["data"]["writable"], false);
    let removed = events_named(dir, "workspace_removed");
    assert_eq!(removed.len(), 2);
    assert_eq!(removed[0]["data"]["name"], "other");
    assert_eq!(removed[0]["data"]["writable"], true);
}

// ------------------------------------------------------------------ daemon

fn write_config(dir: &Path, fake: &FakeLlm) {
    let yaml = format!(
        "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
}

fn start(dir: &Path) -> (Daemon, String) {
    let mut cmd = silas(dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    (daemon, addr)
}

/// Sends `text`; the chat reply, and the plan card if one arrives before
/// the reply or within a second after it (the card may follow the reply).
async fn ask(ws: &mut support::Ws, text: &str) -> (String, Option<Value>) {
    send(ws, json!({"type": "message", "text": text})).await;
    let mut card = None;
    let mut reply = None;
    loop {
        let within = if reply.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(20)
        };
        let Some(f) = next_frame(ws, within).await else {
            break;
        };
        match f["type"].as_str() {
            Some("approval_request") => card = Some(f),
            Some("message") => reply = Some(f["text"].as_str().unwrap_or_default().to_string()),
            _ => {}
        }
        if card.is_some() && reply.is_some() {
            break;
        }
    }
    (reply.expect("a reply"), card)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_daemon_the_cli_uses_the_socket_and_plans_are_checked_before_any_card() {
    let fake = FakeLlm::start().await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    layout(&dir);
    write_config(&dir, &fake);
    ok(&dir, &["init"]);
    let (daemon, addr) = start(&dir);

    // The store is the daemon's: these go over the control socket.
    let d = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        let out = ok(&d, &["workspace", "add", "proj", "proj"]);
        ok(&d, &["workspace", "add", "site", "other", "--write"]);
        assert_refusals(&d);
        out
    })
    .await
    .unwrap();
    assert!(out.contains("added workspace proj"), "{out}");
    let d = dir.clone();
    let all = tokio::task::spawn_blocking(move || listed(&d))
        .await
        .unwrap();
    assert_eq!(all.len(), 2, "{all:?}");

    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;

    // An unregistered workspace: refused, no card.
    plan_replies(
        &fake,
        "plan-ghost",
        "task",
        "verify:\n  - name: ok\n    run: \"true\"\n    expect: {exit_code: 0}\nworkspace: {name: ghost}",
    );
    let (reply, card) = ask(&mut ws, "tidy ghost").await;
    assert!(card.is_none(), "a card for an unknown workspace: {card:?}");
    assert!(
        reply.contains("\"ghost\", which is not registered"),
        "{reply}"
    );

    // Write on a read-only one: refused, no card.
    plan_replies(
        &fake,
        "plan-ro",
        "task",
        "verify:\n  - name: ok\n    run: \"true\"\n    expect: {exit_code: 0}\nworkspace: {name: proj, access: write}",
    );
    let (reply, card) = ask(&mut ws, "change proj").await;
    assert!(card.is_none(), "a card for write on read-only: {card:?}");
    assert!(reply.contains("registered read-only"), "{reply}");

    // The planner was told the names (never the paths).
    let planner_prompt = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("Role: Planner"))
        .expect("a planner request");
    assert!(
        planner_prompt.contains("proj (read-only)"),
        "{planner_prompt}"
    );
    assert!(planner_prompt.contains("site (writable)"));
    let canon_other = std::fs::canonicalize(dir.join("other")).unwrap();
    assert!(!planner_prompt.contains(&canon_other.display().to_string()));

    // A registered, writable one: the card shows workspace, path, access.
    plan_replies(
        &fake,
        "plan-site",
        "task",
        "verify:\n  - name: ok\n    run: \"true\"\n    expect: {exit_code: 0}\nworkspace: {name: site, access: write, apply: direct, extra_paths: [\"/usr\"]}",
    );
    let (_, card) = ask(&mut ws, "change site").await;
    let card = card.expect("a card for a registered workspace");
    let view = &card["plan"]["workspace"];
    assert_eq!(view["name"], "site");
    assert_eq!(view["path"], canon_other.display().to_string());
    assert_eq!(view["access"], "write");
    assert_eq!(view["apply"], "direct");
    assert_eq!(view["extra_paths"], json!(["/usr"]));
    assert_eq!(card["risk_level"], "high", "apply: direct is high: {card}");

    // Removing it while the card is open: the approval is refused.
    let d = dir.clone();
    tokio::task::spawn_blocking(move || ok(&d, &["workspace", "remove", "site"]))
        .await
        .unwrap();
    send(
        &mut ws,
        json!({"type": "approval_response", "request_id": card["request_id"],
               "verdict": "approved"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    daemon.stop().await;

    let events = audit_events(&dir);
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "plan_refused_workspace")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(refused[0]["data"]["reason"], "unknown_workspace");
    assert_eq!(refused[1]["data"]["reason"], "write_on_read_only");
    assert!(
        events.iter().any(|e| e["event"] == "plan_card_refused"
            && e["data"]["reason"] == "workspace"
            && e["data"]["work_item_id"] == "plan-site"),
        "approval after removal was not refused"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "approval_issued" && e["data"]["work_item_id"] == "plan-site")
    );
    let added = events_named(&dir, "workspace_added");
    assert_eq!(added.len(), 2);
    assert_eq!(events_named(&dir, "workspace_removed").len(), 1);
}

// ------------------------------------------------------------------ web

/// Next frame of type `ty` (or an `error`), skipping feeds.
async fn reply_of(ws: &mut support::Ws, ty: &str) -> Value {
    loop {
        let f = next_frame(ws, Duration::from_secs(10))
            .await
            .expect("an answer");
        if f["type"] == ty || f["type"] == "error" {
            return f;
        }
    }
}

/// The registry over the web channel: the owner lists, adds and removes;
/// a chatbot customer's connection gets a typed `E_CHANNEL_AUTH` error for
/// each frame and nothing changes (no entry, no audit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_manages_workspaces_over_the_web() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    layout(&dir);
    let goal = dir.join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let mut cmd = silas(&dir);
    cmd.env("SILAS__ACTIVE_GOAL", &goal);
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let proj = std::fs::canonicalize(dir.join("proj")).unwrap();
    let proj = proj.display().to_string();

    let (mut customer, auth) = support::connect_anonymous(&addr, Duration::from_secs(5)).await;
    assert_ne!(auth["scope_id"], "owner");
    for frame in [
        json!({"type": "workspace_add", "name": "stolen", "path": proj, "writable": true}),
        json!({"type": "workspace_list"}),
        json!({"type": "workspace_remove", "name": "stolen"}),
    ] {
        send(&mut customer, frame.clone()).await;
        let f = reply_of(&mut customer, "workspaces").await;
        assert_eq!(f["type"], "error", "{frame} → {f}");
        assert_eq!(f["code"], "E_CHANNEL_AUTH", "{f}");
    }

    let (mut owner, _) = support::connect(&addr, Duration::from_secs(5)).await;
    send(
        &mut owner,
        json!({"type": "workspace_add", "name": "proj", "path": proj, "writable": true}),
    )
    .await;
    let f = reply_of(&mut owner, "workspaces").await;
    assert_eq!(f["type"], "workspaces", "{f}");
    assert_eq!(f["workspaces"][0]["name"], "proj");
    assert_eq!(f["workspaces"][0]["path"], proj);
    assert_eq!(f["workspaces"][0]["writable"], true);
    // A refusal is a typed error frame too.
    send(
        &mut owner,
        json!({"type": "workspace_add", "name": "data", "path": dir.join("data")}),
    )
    .await;
    let f = reply_of(&mut owner, "workspaces").await;
    assert_eq!(f["code"], "E_CFG_INVALID", "{f}");
    send(
        &mut owner,
        json!({"type": "workspace_remove", "name": "proj"}),
    )
    .await;
    let f = reply_of(&mut owner, "workspaces").await;
    assert_eq!(f["workspaces"], json!([]), "{f}");
    daemon.stop().await;

    let added = events_named(&dir, "workspace_added");
    assert_eq!(added.len(), 1, "the customer added nothing: {added:?}");
    assert!(added[0]["data"]["by"].as_str().unwrap().starts_with("web:"));
    assert_eq!(events_named(&dir, "workspace_removed").len(), 1);
}
