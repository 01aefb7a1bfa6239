//! The consolidator's promotion card through a running daemon (issue #18,
//! §6.4 step 3): memories the owner's turns keep retrieving are proposed
//! for `verified` on an owner `decision` card at the consolidator's round
//! (`memory.consolidation_interval_minutes: 1`, the smallest the config
//! allows — this test waits one round); the card reaches the owner's
//! WebSocket and never a chatbot customer's, whose answer is refused;
//! approving makes the memory `verified`, declining leaves it `working`
//! (read back with `silas memory export`); a replayed answer is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use silas_testkit::{FakeLlm, Reply};
use support::{Ws, audit_json, frame_of_type, next_frame, send, silas, start_daemon};

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = silas(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bundle(records: &[(&str, &str, &str)]) -> String {
    let now = silas_core::Timestamp::now().to_string();
    let mut out = json!({"format": "silas-memory", "version": 1,
        "exported_at": now, "records": records.len()})
    .to_string();
    out.push('\n');
    for (id, scope, content) in records {
        let r = json!({"memory_id": id, "content": content, "memory_type": "fact",
            "reingestion_tier": "active", "trust_level": "working", "taint": "owner",
            "created_at": now, "updated_at": now, "session_id": scope,
            "source_kind": "memory_op"});
        out.push_str(&r.to_string());
        out.push('\n');
    }
    out
}

/// The trust level of each exported memory, by id.
fn trust_levels(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let path = dir.join(format!(
        "out-{}.jsonl",
        silas_core::Timestamp::now().as_micros()
    ));
    ok(dir, &["memory", "export", path.to_str().unwrap()]);
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["memory_id"].as_str().unwrap().to_owned(),
                v["trust_level"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The next `decision` card frame, skipping everything else.
async fn decision(ws: &mut Ws, within: Duration) -> Value {
    let mut log = Vec::new();
    frame_of_type(ws, "decision", within, &mut log).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_card_reaches_the_owner_only_and_its_answer_decides_the_trust_level() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::json(&json!({"route": "direct", "reason": "chat",
        "response": {"message": "Noted."}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"})));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    ok(&dir, &["init"]);
    std::fs::write(
        dir.join("in.jsonl"),
        bundle(&[
            ("cat", "owner", "The owner's cat is called Miso"),
            ("tea", "owner", "The owner drinks green tea"),
        ]),
    )
    .unwrap();
    ok(&dir, &["memory", "import", "in.jsonl"]);
    let goal = dir.join("goal.md");
    std::fs::write(&goal, "customer support goal\n").unwrap();
    let yaml = format!(
        "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n  memory:\n    consolidation_interval_minutes: 1\n",
        fake.base_url()
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
    let mut cmd = silas(&dir);
    cmd.arg("--config")
        .arg(dir.join("silas.yaml"))
        .env("SILAS__ACTIVE_GOAL", &goal);
    let (daemon, addr, _) = start_daemon(cmd, Stdio::null());

    // Three owner turns retrieve both memories (access_count 3 each: the
    // consolidator's threshold).
    let (mut owner, _) = support::connect(&addr, Duration::from_secs(5)).await;
    for _ in 0..3 {
        send(
            &mut owner,
            json!({"type": "message", "text": "my cat and my green tea?"}),
        )
        .await;
        let mut log = Vec::new();
        frame_of_type(&mut owner, "message", Duration::from_secs(20), &mut log).await;
    }
    let (mut customer, auth) = support::connect_anonymous(&addr, Duration::from_secs(5)).await;
    assert_ne!(auth["scope_id"], "owner");

    // The round (one minute after start) proposes both, to the owner.
    let mut cards = Vec::new();
    for _ in 0..2 {
        cards.push(decision(&mut owner, Duration::from_secs(120)).await);
    }
    let card_for = |word: &str| -> String {
        cards
            .iter()
            .find(|c| c["question"].as_str().unwrap().contains(word))
            .unwrap_or_else(|| panic!("no card about {word}: {cards:?}"))["request_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (cat, tea) = (card_for("Miso"), card_for("green tea"));

    // The customer never saw them and cannot answer them.
    while let Some(f) = next_frame(&mut customer, Duration::from_millis(300)).await {
        assert_ne!(f["type"], "decision", "a customer saw an owner card: {f}");
    }
    send(
        &mut customer,
        json!({"type": "decision_response", "request_id": cat, "selected_value": "promote"}),
    )
    .await;
    let mut log = Vec::new();
    let err = frame_of_type(&mut customer, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(err["request_id"], cat.as_str(), "{err}");
    let levels = {
        let d = dir.clone();
        tokio::task::spawn_blocking(move || trust_levels(&d))
            .await
            .unwrap()
    };
    assert_eq!(levels["cat"], "working", "the customer's answer counted");

    // The owner approves one and declines the other.
    send(
        &mut owner,
        json!({"type": "decision_response", "request_id": cat, "selected_value": "promote"}),
    )
    .await;
    send(
        &mut owner,
        json!({"type": "decision_response", "request_id": tea, "selected_value": "keep_working"}),
    )
    .await;
    let mut levels = Default::default();
    for _ in 0..100 {
        let d = dir.clone();
        levels = tokio::task::spawn_blocking(move || trust_levels(&d))
            .await
            .unwrap();
        if levels["cat"] == "verified" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(levels["cat"], "verified", "{levels:?}");
    assert_eq!(levels["tea"], "working", "{levels:?}");
    // A replayed answer is refused.
    send(
        &mut owner,
        json!({"type": "decision_response", "request_id": tea, "selected_value": "promote"}),
    )
    .await;
    let mut log = Vec::new();
    let err = frame_of_type(&mut owner, "error", Duration::from_secs(10), &mut log).await;
    assert_eq!(err["request_id"], tea.as_str(), "{err}");
    drop((owner, customer));
    daemon.stop().await;
    let levels = trust_levels(&dir);
    assert_eq!(levels["cat"], "verified");
    assert_eq!(levels["tea"], "working");
    let audit = audit_json(&dir);
    assert!(
        audit.contains("\"promoted\"") && audit.contains("\"declined\""),
        "{audit}"
    );
    assert!(!audit.contains("Miso"), "memory content reached the audit");
}
