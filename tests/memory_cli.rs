//! Memory over the real binary (issue #18 items 3, 5, 6): `silas memory
//! import|export|forget` write the store and its full-text index directly
//! without a daemon and go over the control socket with one (the daemon
//! holds the one index); an imported memory is retrieved into the next
//! turn's prompt through the index; a forgotten one is gone from the
//! store, the prompt and later exports; the audit names ids and counts,
//! never a memory's content.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{audit_json, frame_of_type, send, silas, start_daemon};

fn run(dir: &Path, args: &[&str]) -> Output {
    silas(dir).args(args).output().unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn record(id: &str, scope: &str, content: &str) -> Value {
    json!({"memory_id": id, "content": content, "memory_type": "fact",
           "reingestion_tier": "active", "trust_level": "working", "taint": "owner",
           "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T10:00:00Z",
           "session_id": scope, "source_kind": "memory_op"})
}

fn bundle(records: &[Value]) -> String {
    let mut out = json!({"format": "silas-memory", "version": 1,
        "exported_at": "2026-11-20T00:00:00Z", "records": records.len()})
    .to_string();
    out.push('\n');
    for r in records {
        out.push_str(&r.to_string());
        out.push('\n');
    }
    out
}

fn exported_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["memory_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn without_a_daemon_import_export_forget_work_on_the_store_and_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["init"]);
    std::fs::write(
        dir.join("in.jsonl"),
        bundle(&[
            record("m1", "owner", "The owner takes green tea, no sugar"),
            record("m2", "owner", "The car is serviced in March"),
            record("m3", "customer-7", "Customer seven prefers tea too"),
        ]),
    )
    .unwrap();
    let out = ok(dir, &["memory", "import", "in.jsonl"]);
    assert!(out.contains("imported 3 memories"), "{out}");
    assert!(
        dir.join("data/memory-index/meta.json").is_file(),
        "the index is on disk"
    );
    // Forget by query touches only the named scope.
    let out = ok(
        dir,
        &["memory", "forget", "--scope", "owner", "--query", "tea"],
    );
    assert!(out.contains("forgot 1 memory"), "{out}");
    ok(dir, &["memory", "export", "out.jsonl"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("out.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert_eq!(exported_ids(&dir.join("out.jsonl")), vec!["m2", "m3"]);
    // An export never overwrites a file.
    let again = run(dir, &["memory", "export", "out.jsonl"]);
    assert!(!again.status.success());
    // A bad bundle: named line, nothing written.
    std::fs::write(
        dir.join("bad.jsonl"),
        bundle(&[record("x", "owner", "x")]) + "{oops\n",
    )
    .unwrap();
    let bad = run(dir, &["memory", "import", "bad.jsonl", "--mode", "replace"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("line 3"), "{err}");
    ok(dir, &["memory", "export", "out2.jsonl"]);
    assert_eq!(exported_ids(&dir.join("out2.jsonl")), vec!["m2", "m3"]);
    // Saying nothing to forget is an error, not "forget everything".
    assert!(!run(dir, &["memory", "forget"]).status.success());
    // An id that names nothing: not found, and nothing audited as erased.
    let before = audit_json(dir).matches("memory_forgotten").count();
    let missing = run(dir, &["memory", "forget", "--id", "no-such-memory"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("E_DB_NOT_FOUND") && err.contains("no-such-memory"),
        "{err}"
    );
    assert_eq!(audit_json(dir).matches("memory_forgotten").count(), before);
    // A scope that holds nothing (a typo of `customer-7`) is said, not
    // reported as done; the scopes that do hold memories are named.
    for args in [
        &["memory", "forget", "--scope", "customer7"][..],
        &["memory", "forget", "--scope", "customer7", "--query", "tea"][..],
    ] {
        let typo = run(dir, args);
        assert_eq!(typo.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&typo.stderr);
        assert!(
            err.contains("E_DB_NOT_FOUND")
                && err.contains("\"customer7\"")
                && err.contains("scopes with memories: customer-7, owner"),
            "{err}"
        );
    }
    assert_eq!(audit_json(dir).matches("memory_forgotten").count(), before);
    // A known scope with nothing matching is no error.
    let none = ok(
        dir,
        &[
            "memory", "forget", "--scope", "owner", "--query", "zanzibar",
        ],
    );
    assert!(none.contains("nothing to forget"), "{none}");
    let audit = audit_json(dir);
    assert!(audit.contains("memory_forgotten") && audit.contains("memory_imported"));
    assert!(
        !audit.contains("green tea"),
        "memory content reached the audit log"
    );
}

fn write_config(dir: &Path, fake: &FakeLlm) {
    let yaml = format!(
        "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
}

/// Sends `text` and returns the proxy request the turn made.
async fn turn(ws: &mut support::Ws, fake: &FakeLlm, text: &str) -> String {
    let before = fake.requests().len();
    send(ws, json!({"type": "message", "text": text})).await;
    let mut log = Vec::new();
    frame_of_type(ws, "message", Duration::from_secs(20), &mut log).await;
    request_with(fake, before, text).await
}

/// The model request after the first `before` that carries `text`, waited
/// for (the first message after a restart is preceded by a notice frame).
async fn request_with(fake: &FakeLlm, before: usize, text: &str) -> String {
    for _ in 0..200 {
        if let Some(body) = fake.requests()[before..]
            .iter()
            .map(|r| r.body.to_string())
            .find(|b| b.contains(text))
        {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no model request with {text:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_daemon_the_index_serves_turns_and_forget_removes_from_the_prompt() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "Noted."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write_config(&dir, &fake);
    std::fs::write(
        dir.join("in.jsonl"),
        bundle(&[
            record("cat", "owner", "The owner's cat is called Miso"),
            record("other", "customer-9", "Customer nine's cat is called Pixel"),
        ]),
    )
    .unwrap();
    let mut cmd = silas(&dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let d = dir.clone();
    let out = tokio::task::spawn_blocking(move || ok(&d, &["memory", "import", "in.jsonl"]))
        .await
        .unwrap();
    assert!(out.contains("imported 2"), "{out}");
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    // "cats" finds "cat" (stemming); only the owner's own memory.
    let prompt = turn(&mut ws, &fake, "what are my cats called?").await;
    assert!(
        prompt.contains("Miso"),
        "retrieved memory not in the prompt: {prompt}"
    );
    assert!(
        !prompt.contains("Pixel"),
        "another scope's memory in the prompt"
    );
    let d = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        ok(&d, &["memory", "forget", "--id", "cat"]);
        ok(&d, &["memory", "export", "after.jsonl", "--include-raw"])
    })
    .await
    .unwrap();
    assert!(out.contains("exported"), "{out}");
    // The model provider's circuit breaker is on /health (issue #16).
    let health = {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut body = String::new();
            s.read_to_string(&mut body).unwrap();
            body
        })
        .await
        .unwrap()
    };
    assert!(
        health.contains("\"providers\":{\"fake\":\"closed\"}"),
        "{health}"
    );
    let prompt = turn(&mut ws, &fake, "and the cat's name again?").await;
    assert!(
        !prompt.contains("Miso"),
        "a forgotten memory reached the prompt"
    );
    let ids = exported_ids(&dir.join("after.jsonl"));
    assert!(
        !ids.contains(&"cat".to_string()) && ids.contains(&"other".to_string()),
        "{ids:?}"
    );

    // What was said goes with a forget too: the conversation the next
    // prompt carries, and the history a restart rehydrates from.
    turn(&mut ws, &fake, "note: my cousin Ofelia lives in Zanzibar").await;
    let prompt = turn(&mut ws, &fake, "anything else?").await;
    assert!(prompt.contains("Zanzibar"), "the turn is in the context");
    let d = dir.clone();
    tokio::task::spawn_blocking(move || {
        ok(
            &d,
            &[
                "memory", "forget", "--scope", "owner", "--query", "zanzibar",
            ],
        )
    })
    .await
    .unwrap();
    let prompt = turn(&mut ws, &fake, "what did I tell you?").await;
    assert!(
        !prompt.contains("Zanzibar"),
        "a forgotten sentence is still in the live context"
    );
    assert!(
        prompt.contains("anything else?"),
        "the rest of the conversation stays"
    );
    drop(ws);
    daemon.stop().await;
    let mut cmd = silas(&dir);
    cmd.arg("--config").arg(dir.join("silas.yaml"));
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(5)).await;
    // The first message after a restart is preceded by the rehydration
    // notice: wait for the request itself.
    let before = fake.requests().len();
    send(
        &mut ws,
        json!({"type": "message", "text": "and after the restart?"}),
    )
    .await;
    let prompt = request_with(&fake, before, "and after the restart?").await;
    assert!(
        !prompt.contains("Zanzibar"),
        "a forgotten sentence came back with the rehydrated history"
    );
    assert!(
        prompt.contains("anything else?"),
        "the history is rehydrated"
    );
    drop(ws);
    daemon.stop().await;
    let store = silas_storage::Store::open_in(dir.join("data")).unwrap();
    let left = store.chronicle().get_recent("owner", 10_000).unwrap();
    assert!(
        left.iter().all(|i| !i.content.contains("Zanzibar")),
        "{left:?}"
    );
    // Nor in the inbox, which keeps every delivered message and reply.
    let inbox = store.inbox().of_scope("owner").unwrap();
    assert!(
        inbox.iter().all(|r| !r.message.text.contains("Zanzibar")
            && !r.reply.as_deref().unwrap_or("").contains("Zanzibar")),
        "{inbox:?}"
    );
    assert!(
        inbox.iter().any(|r| r.message.text == "anything else?"),
        "the rest of the inbox stays: {inbox:?}"
    );
    drop(store);
    let audit = audit_json(&dir);
    assert!(audit.contains("memory_forgotten"));
    assert!(
        !audit.contains("Miso"),
        "memory content reached the audit log"
    );
}

async fn reply_of(ws: &mut support::Ws, ty: &str) -> Value {
    loop {
        let f = support::next_frame(ws, Duration::from_secs(10))
            .await
            .expect("an answer");
        if f["type"] == ty || f["type"] == "error" {
            return f;
        }
    }
}

fn ids_of(f: &Value) -> Vec<String> {
    f["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["memory_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Issue #18 item 5 from the web app: the owner lists the conversation's
/// memories (recent or by query, never another scope's) and forgets one —
/// gone from the list, the store and exports, audited without content; a
/// chatbot customer's connection gets `E_CHANNEL_AUTH` for both frames and
/// nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_memory_panel_lists_and_forgets_for_the_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    ok(&dir, &["init"]);
    let now = silas_core::Timestamp::now().to_string();
    let mut cat = record("cat", "owner", "The owner's cat is called Miso");
    let mut tea = record("tea", "owner", "The owner drinks green tea");
    let mut pixel = record("other", "customer-9", "Customer nine's cat is called Pixel");
    for r in [&mut cat, &mut tea, &mut pixel] {
        r["created_at"] = json!(now);
    }
    std::fs::write(dir.join("in.jsonl"), bundle(&[cat, tea, pixel])).unwrap();
    ok(&dir, &["memory", "import", "in.jsonl"]);
    let goal = dir.join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let mut cmd = silas(&dir);
    cmd.env("SILAS__ACTIVE_GOAL", &goal);
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());

    let (mut customer, auth) = support::connect_anonymous(&addr, Duration::from_secs(5)).await;
    assert_ne!(auth["scope_id"], "owner");
    for frame in [
        json!({"type": "memory_list", "query": ""}),
        json!({"type": "memory_forget", "memory_id": "cat"}),
    ] {
        send(&mut customer, frame.clone()).await;
        let f = reply_of(&mut customer, "memories").await;
        assert_eq!(f["code"], "E_CHANNEL_AUTH", "{frame} → {f}");
    }

    let (mut owner, _) = support::connect(&addr, Duration::from_secs(5)).await;
    send(&mut owner, json!({"type": "memory_list", "query": ""})).await;
    let f = reply_of(&mut owner, "memories").await;
    let mut ids = ids_of(&f);
    ids.sort();
    assert_eq!(ids, ["cat", "tea"], "{f}");
    send(&mut owner, json!({"type": "memory_list", "query": "cats"})).await;
    assert_eq!(ids_of(&reply_of(&mut owner, "memories").await), ["cat"]);
    send(
        &mut owner,
        json!({"type": "memory_forget", "memory_id": "cat"}),
    )
    .await;
    let f = reply_of(&mut owner, "memories").await;
    assert_eq!(f["forgotten"], json!(["cat"]), "{f}");
    assert_eq!(ids_of(&f), ["tea"]);
    // Forgetting it again: a typed error frame, and the socket stays.
    send(
        &mut owner,
        json!({"type": "memory_forget", "memory_id": "cat"}),
    )
    .await;
    let f = reply_of(&mut owner, "memories").await;
    assert_eq!(f["code"], "E_DB_NOT_FOUND", "{f}");
    send(&mut owner, json!({"type": "memory_list", "query": ""})).await;
    assert_eq!(ids_of(&reply_of(&mut owner, "memories").await), ["tea"]);
    daemon.stop().await;

    ok(&dir, &["memory", "export", "out.jsonl"]);
    let ids = exported_ids(&dir.join("out.jsonl"));
    assert!(
        !ids.contains(&"cat".to_owned()) && ids.contains(&"other".to_owned()),
        "{ids:?}"
    );
    let audit = audit_json(&dir);
    assert!(audit.contains("memory_forgotten") && audit.contains("owner:web:"));
    assert!(
        !audit.contains("Miso"),
        "memory content reached the audit log"
    );
}

/// A chatbot visitor's scope is its connection: after a restart, new
/// visitors get scopes no earlier visitor had, so none is handed an earlier
/// visitor's conversation ("Session rehydrated") or memories. The ids were
/// `ws-1`, `ws-2`, … from every start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitors_after_a_restart_never_inherit_an_earlier_visitors_scope() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "Noted."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["init"]);
    let (daemon, addr, _owner) = support::start_chatbot_on_fake(dir, &fake).await;
    let mut earlier = Vec::new();
    for _ in 0..3 {
        let (mut ws, auth) = support::connect_anonymous(&addr, Duration::from_secs(10)).await;
        earlier.push(auth["scope_id"].as_str().unwrap().to_string());
        turn(&mut ws, &fake, "my locker code is zx81-canary").await;
    }
    drop(_owner);
    daemon.stop().await;

    let (daemon, addr, _owner) = support::start_chatbot_on_fake(dir, &fake).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (mut ws, auth) = support::connect_anonymous(&addr, Duration::from_secs(10)).await;
        let scope = auth["scope_id"].as_str().unwrap().to_string();
        assert!(!earlier.contains(&scope), "{scope} reused: {earlier:?}");
        assert!(!seen.contains(&scope), "{scope} twice in one run");
        seen.push(scope);
        let before = fake.requests().len();
        send(&mut ws, json!({"type": "message", "text": "hi"})).await;
        let mut log = Vec::new();
        let reply = frame_of_type(&mut ws, "message", Duration::from_secs(20), &mut log).await;
        assert!(
            !reply["text"].as_str().unwrap().contains("rehydrated"),
            "{reply}"
        );
        let prompts: String = fake.requests()[before..]
            .iter()
            .map(|r| r.body.to_string())
            .collect();
        assert!(!prompts.contains("zx81-canary"), "{prompts}");
    }
    daemon.stop().await;
}
