//! A token is verified, the process is killed (SIGKILL) and the store
//! reopened: the consumed execution cannot be replayed and a single-use token
//! stays spent, because nonce, counters and audit entry were committed in one
//! transaction before `verify` returned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::json;
use silas_actors::approval::{ApprovalError, ApprovalService};
use silas_core::approval::{Denial, IssuePolicy, Subject};
use silas_core::config::MapEnv;
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalToken};
use silas_core::model::work::WorkItem;
use silas_core::{Timestamp, projections};
use silas_keys::{FileKeystore, KekSources, OwnerKeystore};
use silas_storage::Store;

fn keystore(dir: &Path) -> OwnerKeystore {
    FileKeystore::new(
        dir.join("keys/owner.key"),
        KekSources::defaults(Arc::new(MapEnv::new())),
    )
    .into()
}

fn service(dir: &Path) -> (ApprovalService, Store) {
    let store = Store::open_in(dir).unwrap();
    let ks = keystore(dir);
    ks.init(false).unwrap();
    let key = Arc::new(ks.load().unwrap());
    (
        ApprovalService::new(store.clone(), key, IssuePolicy::default()),
        store,
    )
}

fn task() -> WorkItem {
    serde_json::from_value(json!({"id": "t-1", "type": "task", "title": "t", "body": "b"})).unwrap()
}

fn goal() -> WorkItem {
    serde_json::from_value(json!({
        "id": "g-1", "type": "goal", "title": "g", "body": "watch",
        "verify": [{"name": "ok", "run": "true", "expect": {"exit_code": 0}}],
        "skills": ["coding"], "failure_context": "Fix: $failed_checks",
    }))
    .unwrap()
}

fn fix(goal: &WorkItem) -> WorkItem {
    let mut v = serde_json::to_value(goal).unwrap();
    v["id"] = json!("fix-1");
    v["type"] = json!("task");
    v["parent"] = json!(goal.id);
    v["body"] = json!("Fix: ok failed");
    serde_json::from_value(v).unwrap()
}

fn approve() -> ApprovalDecision {
    serde_json::from_value(json!({"verdict": "approved", "conditions": {}})).unwrap()
}

/// Child half: verify two tokens, report them, then wait to be killed.
#[test]
#[ignore = "helper process for verified_execution_survives_sigkill_and_cannot_be_replayed"]
fn restart_child_verifier() {
    let Ok(dir) = std::env::var("SILAS_APPROVAL_RESTART_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let (svc, store) = service(dir);
    let now = Timestamp::now();

    let mut t = task();
    let single = svc
        .issue_token(
            Subject::WorkItem(&t),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&svc),
            now,
        )
        .unwrap();
    t.approval_token = Some(single.clone());
    store.work_items().save(&t).unwrap();
    svc.verify(&single, &t, None, now).unwrap();

    let g = goal();
    let standing = svc
        .issue_token(
            Subject::WorkItem(&g),
            &approve(),
            ApprovalScope::Standing,
            &owner_origin(&svc),
            now,
        )
        .unwrap();
    let used = svc.verify(&standing, &g, Some(&fix(&g)), now).unwrap();

    let mut out = std::io::stdout().lock();
    writeln!(out, "SINGLE {}", serde_json::to_string(&single).unwrap()).unwrap();
    writeln!(out, "STANDING {}", serde_json::to_string(&used).unwrap()).unwrap();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn verified_execution_survives_sigkill_and_cannot_be_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "restart_child_verifier",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SILAS_APPROVAL_RESTART_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut single: Option<ApprovalToken> = None;
    let mut standing: Option<ApprovalToken> = None;
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.map_while(Result::ok) {
        // libtest may print "test <name> ... " in front of the first line.
        if let Some((_, j)) = line.split_once("SINGLE ") {
            single = Some(serde_json::from_str(j).unwrap());
        } else if let Some((_, j)) = line.split_once("STANDING ") {
            standing = Some(serde_json::from_str(j).unwrap());
        } else if line.ends_with("READY") {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructors, no graceful anything
    child.wait().unwrap();
    let (single, standing) = (
        single.expect("child reported no token"),
        standing.expect("no standing token"),
    );

    let (svc, store) = service(dir.path());
    let now = Timestamp::now();
    // The single-use token stays spent.
    let t = store.work_items().get("t-1").unwrap().unwrap();
    assert_eq!(
        t.approval_token.as_ref().unwrap().executions_used,
        1,
        "mirror persisted"
    );
    match svc.verify(&single, &t, None, now) {
        Err(ApprovalError::Denied(Denial::Exhausted { used: 1, max: 1 })) => {}
        other => panic!("single-use token verified again after restart: {other:?}"),
    }
    // The exact standing execution (token, spawned-task hash, nonce) cannot be replayed.
    let g = goal();
    let exec_hash = projections::plan_hash(&fix(&g)).unwrap();
    let nonce = standing.execution_nonces[0].clone();
    let replay = store
        .approvals()
        .consume_execution(&standing, &exec_hash, &nonce, now, |_| {
            ("approval.verified".into(), Default::default())
        })
        .unwrap();
    assert_eq!(replay, Err(Denial::Replay));
    assert_eq!(
        store
            .approvals()
            .get(&standing.token_id)
            .unwrap()
            .unwrap()
            .executions_used,
        1
    );
    // A new, legitimate execution under the standing token still works.
    let again = svc.verify(&standing, &g, Some(&fix(&g)), now).unwrap();
    assert_eq!(again.executions_used, 2);
    assert_ne!(again.execution_nonces[1], nonce);
    // The audit chain written by the killed process is intact.
    assert!(store.audit().verify_chain().unwrap().valid);
}

/// Registers a test connection as owner-authenticated with the engine and
/// returns it as the origin of the owner's answers.
fn owner_origin(
    svc: &silas_actors::approval::ApprovalService,
) -> silas_actors::approval::AnswerOrigin {
    svc.owner_sessions().authenticated("test", "owner-device");
    silas_actors::approval::AnswerOrigin::new("test", "owner-device")
}
