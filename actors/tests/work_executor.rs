//! The WorkExecutor (§5.2) over real components: the real sandbox launcher,
//! the redb store in a tempdir, a real owner key and ApprovalService, and
//! the executor/planner agents over HTTP against testkit's FakeLlm.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Duration as ChronoDuration;
use common::{
    Fx, approved, audit_data, file_check, item, output_with, shell, spawn_executor, system_of,
    wait_for, wait_for_event,
};
use serde_json::{Value, json};
use silas_actors::work::{DispatchRequest, WorkStatusKind};
use silas_actors::work_executor::engine::GoalCycleOutcome;
use silas_actors::work_executor::policy::{self, BatchStep};
use silas_actors::work_executor::{RunAttempt, RunFault, RunSupervision, WorkExecutorMsg};
use silas_core::Timestamp;
use silas_core::approval::Subject;
use silas_core::model::approval::ApprovalScope;
use silas_core::model::review::{BatchActionDecision, BatchProposal};
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_llm::provider::Provider;
use silas_testkit::Reply;
use tokio::sync::mpsc;

/// The executor's final output; every attempt here suggests `look` next.
fn output(summary: &str) -> Reply {
    output_with(summary, &["look"])
}

#[tokio::test]
async fn fail_retry_planner_consulted_then_succeed() {
    let mut f = Fx::new().await;
    let done = f.artifact("t-retry", "done.txt");
    let mut t = item(json!({
        "id": "t-retry", "type": "task", "title": "Make done.txt", "body": "Create done.txt.",
        "verify": [file_check("done", &done)],
        "budget": {"max_attempts": 5},
    }));
    f.approve(&mut t);
    for n in 1..=3 {
        f.fake.push(shell(&format!("echo attempt {n}")));
        f.fake.push(output("tried"));
    }
    f.fake.push(Reply::json(
        &json!({"message": "Write the file: echo ok > done.txt", "needs_approval": false}),
    ));
    f.fake.push(shell("echo ok > done.txt"));
    f.fake.push(output("wrote done.txt"));

    let r = f.engine.run_task("t-retry", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert!(r.artifacts.contains_key("done.txt"));
    // Four attempts ran a command each; none left its work dir behind.
    let left: Vec<_> = std::fs::read_dir(f.path("work"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "work dirs left behind: {left:?}");
    assert_eq!(r.next_steps, vec!["look".to_owned()]);
    let stored = f.get("t-retry");
    assert_eq!(stored.status, WorkItemStatus::Done);
    assert_eq!(stored.attempts, 4);
    assert_eq!(stored.budget_used.planner_calls, 1);
    assert_eq!(stored.budget_used.attempts, 4);
    assert!(stored.verification_results[0]["passed"].as_bool().unwrap());

    let reqs = f.fake.requests();
    assert_eq!(reqs.len(), 9);
    // Attempt 2's briefing carries attempt 1's failure; no guidance yet.
    let a2 = system_of(&reqs[2]);
    assert!(a2.contains("Previous attempt 1 failed"), "{a2}");
    assert!(!a2.contains("Planner guidance"));
    // The planner was asked after the third failure, then guided attempt 4.
    assert!(
        reqs[6]
            .last_message_text()
            .contains("failed external verification 3 times")
    );
    let a4 = system_of(&reqs[7]);
    assert!(a4.contains("Previous attempt 3 failed"), "{a4}");
    assert!(a4.contains("## Planner guidance\nWrite the file"), "{a4}");

    let kinds: Vec<WorkStatusKind> = f.drain().into_iter().map(|e| e.status).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == WorkStatusKind::VerificationFailed)
            .count(),
        3
    );
    assert_eq!(kinds.last(), Some(&WorkStatusKind::Done));
    let audit = f.audit_events();
    assert!(audit.contains(&"planner_consulted".to_owned()));
    assert!(audit.contains(&"work_item.done".to_owned()));
}

/// Issue #12 item 6: a setuid file the sandbox made is stored as a plain
/// 0600 file in a 0700 dir (a root daemon's plain copy kept the bit and made
/// root its owner); a link to a host secret is never stored or followed.
/// The checks see the stored files read-only in `./artifacts/`.
#[tokio::test]
async fn stored_artifacts_carry_no_privileges() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    let f = Fx::new().await;
    let tool = f.artifact("t-suid", "tool");
    let secret = f.path("owner.key");
    std::fs::write(&secret, "PRIVATE").unwrap();
    let mut t = item(json!({
        "id": "t-suid", "type": "task", "title": "t", "body": "Make tool.",
        "verify": [file_check("tool", &tool),
            {"name": "staged", "expect": {"equals": "444 regular file"},
             "run": "test ! -e artifacts/shadow && test ! -e artifacts/key && stat -c '%a %F' \"$SILAS_ARTIFACTS/tool\""}],
        "budget": {"max_attempts": 1},
    }));
    f.approve(&mut t);
    f.fake.push(shell(&format!(
        "printf '#!/bin/sh\\nid\\n' > tool && chmod 4755 tool && \
         ln -s /etc/shadow shadow && ln -s {} key && stat -c 'made %a' tool",
        secret.display()
    )));
    f.fake.push(output("made tool"));

    let r = f.engine.run_task("t-suid", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert_eq!(r.artifacts.keys().collect::<Vec<_>>(), vec!["tool"]);
    // The sandbox really made a setuid file (the tool output the model saw)...
    let reqs = f.fake.requests();
    assert!(
        reqs.iter()
            .any(|r| r.last_message_text().contains("made 4755")),
        "the control failed: no setuid file was made"
    );
    // ...and its work dir is gone once the artifacts were stored.
    let left: Vec<_> = std::fs::read_dir(f.path("work"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "work dirs left behind: {left:?}");
    assert_eq!(mode(&tool), 0o600);
    assert_eq!(mode(tool.parent().unwrap()), 0o700);
    assert_eq!(std::fs::read_to_string(&tool).unwrap(), "#!/bin/sh\nid\n");
    let dir: Vec<String> = std::fs::read_dir(tool.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dir, vec!["tool"]);
}

/// Hard links the run made are not stored (their content could be a file
/// the run does not own); the item still completes and the audit log says why.
#[tokio::test]
async fn hard_linked_artifacts_are_refused_and_audited() {
    let f = Fx::new().await;
    let mut t = item(json!({
        "id": "t-hl", "type": "task", "title": "t", "body": "b",
        "budget": {"max_attempts": 1},
    }));
    f.approve(&mut t);
    f.fake
        .push(shell("echo a > a.txt && ln a.txt b.txt && echo c > c.txt"));
    f.fake.push(output("made files"));
    let r = f.engine.run_task("t-hl", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert_eq!(r.artifacts.keys().collect::<Vec<_>>(), vec!["c.txt"]);
    assert!(!f.artifact("t-hl", "a.txt").exists());
    let refused = audit_data(&f.store, "artifact_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|d| d["reason"] == "hard-linked file" && d["work_item_id"] == "t-hl")
    );
}

#[tokio::test]
async fn budget_hit_exactly_at_the_limit_stops() {
    let mut f = Fx::new().await;
    let never = f.artifact("t-budget", "never.txt");
    // Each fake reply reports 10 + 5 tokens: one attempt = 2 requests = 30.
    let mut t = item(json!({
        "id": "t-budget", "type": "task", "title": "b", "body": "b",
        "verify": [file_check("never", &never)],
        "budget": {"max_tokens": 30, "max_attempts": 5},
    }));
    f.approve(&mut t);
    f.fake.push(shell("echo hi"));
    f.fake.push(output("tried"));
    f.fake.set_fallback(output("should not be asked"));

    let r = f.engine.run_task("t-budget", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Stuck, "{r:?}");
    assert!(r.summary.contains("budget exhausted"), "{}", r.summary);
    let stored = f.get("t-budget");
    assert_eq!(stored.status, WorkItemStatus::Stuck);
    assert_eq!(stored.attempts, 1);
    assert_eq!(stored.budget_used.tokens, 30);
    assert_eq!(f.fake.served(), 2, "no request after reaching the limit");
    assert_eq!(f.drain().last().unwrap().status, WorkStatusKind::Stuck);
}

#[tokio::test]
async fn no_token_or_expired_token_blocks_with_nothing_executed() {
    let mut f = Fx::new().await;
    f.fake.set_fallback(shell("touch pwned.txt"));
    // No token at all.
    let t = item(json!({"id": "t-none", "type": "task", "title": "x", "body": "x"}));
    f.store.work_items().save(&t).unwrap();
    let r = f.engine.run_task("t-none", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked);
    assert!(r.summary.contains("no approval token"), "{}", r.summary);

    // Expired (issued and verified an hour ago, 30-minute TTL).
    let mut t = item(json!({"id": "t-expired", "type": "task", "title": "x", "body": "x"}));
    f.approve_at(
        &mut t,
        Timestamp::now().minus(ChronoDuration::hours(1)),
        true,
    );
    let r = f.engine.run_task("t-expired", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked);
    assert!(
        r.summary.contains("E_APPROVAL_EXPIRED") || r.summary.to_lowercase().contains("expired"),
        "{}",
        r.summary
    );

    // Issued but never verified at the authorization site.
    let mut t = item(json!({"id": "t-unverified", "type": "task", "title": "x", "body": "x"}));
    f.approve_at(&mut t, Timestamp::now(), false);
    let r = f.engine.run_task("t-unverified", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked);

    assert_eq!(f.fake.served(), 0, "no model request");
    assert_eq!(f.executions(), 0, "nothing reached the sandbox");
    for id in ["t-none", "t-expired", "t-unverified"] {
        assert_eq!(f.get(id).status, WorkItemStatus::Blocked);
        assert_eq!(f.get(id).attempts, 0);
    }
    let audit = f.audit_events();
    assert_eq!(
        audit
            .iter()
            .filter(|e| *e == "execution_blocked_no_approval")
            .count(),
        3
    );
    let ev = f.drain();
    assert_eq!(ev.len(), 3);
    assert!(ev.iter().all(|e| e.status == WorkStatusKind::Blocked));
}

fn goal(f: &Fx) -> WorkItem {
    let fixed = f.artifact("goal-1-fix-1", "fixed.txt");
    item(json!({
        "id": "goal-1", "type": "goal", "title": "Keep it fixed", "body": "Watch.",
        "schedule": "*/30 * * * *",
        "verify": [file_check("fixed", &fixed)],
        // No skills: a fix task inheriting an uninstalled skill is blocked
        // (skill_use.rs covers skills in runs).
        "on_failure": "spawn_task",
        "escalation": {"report": {"action": "report", "message": "broke"}},
        "failure_context": "Fix these failures: $failed_checks",
    }))
}

fn standing(f: &Fx, g: &mut WorkItem) {
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(g),
            &approved(),
            ApprovalScope::Standing,
            &common::owner_origin(&f.svc),
            Timestamp::now(),
        )
        .unwrap();
    g.approval_token = Some(tok);
    f.store.work_items().save(g).unwrap();
}

#[tokio::test]
async fn goal_check_failure_spawns_fix_task_under_standing_token() {
    let mut f = Fx::new().await;
    let mut g = goal(&f);
    standing(&f, &mut g);
    f.fake.push(shell("echo fixed > fixed.txt"));
    f.fake.push(output("fixed it"));

    let out = f.engine.run_goal_cycle("goal-1", "owner").await.unwrap();
    let GoalCycleOutcome::FixTask(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.work_item_id, "goal-1-fix-1");
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let fix = f.get("goal-1-fix-1");
    assert_eq!(fix.parent.as_deref(), Some("goal-1"));
    assert_eq!(fix.spawned_by.as_deref(), Some("goal-1"));
    assert!(!fix.needs_approval);
    assert!(
        fix.body.starts_with("Fix these failures: - fixed:"),
        "{}",
        fix.body
    );
    let tok = fix.approval_token.unwrap();
    assert_eq!(tok.scope, ApprovalScope::Standing);
    let ledger = f.store.approvals().get(&tok.token_id).unwrap().unwrap();
    assert_eq!(ledger.executions_used, 1, "exactly one nonce for the spawn");
    assert_eq!(f.store.nonces().len().unwrap(), 1);
    // The goal's own checks still fail (they look at the fix task's dir from
    // the goal's sandbox), so a second cycle spawns fix-2 under the same token.
    assert_eq!(f.get("goal-1").status, WorkItemStatus::Failed);
    let audit = f.audit_events();
    assert!(audit.contains(&"goal_cycle_checks".to_owned()));
    assert!(audit.contains(&"goal_spawned_task".to_owned()));
    let ev = f.drain();
    assert!(
        ev.iter()
            .any(|e| e.work_item_id == "goal-1-fix-1" && e.status == WorkStatusKind::Done)
    );
}

#[tokio::test]
async fn tampered_spawn_is_refused() {
    let mut f = Fx::new().await;
    let mut g = goal(&f);
    standing(&f, &mut g);
    f.fake.set_fallback(shell("touch pwned.txt"));

    // A fix task that widens the approved spawn policy (an extra skill).
    let mut tampered = policy::build_fix_task(&g, "goal-1-fix-x", "- ci: red");
    tampered.skills.push("admin".into());
    let err = f.engine.authorize_spawn(&g, tampered).unwrap_err();
    assert!(err.starts_with("E_APPROVAL"), "{err}");
    // The untampered template does match (sanity), but is not consumed here.
    assert_eq!(f.store.nonces().len().unwrap(), 0);

    // The goal itself changed after approval: the cycle's entry check
    // refuses before any check runs; the goal waits for renewal.
    let mut drifted = g.clone();
    drifted.gates = vec![
        serde_json::from_value(json!({
        "name": "extra", "on": "on_tool_call", "type": "approval_always"}))
        .unwrap(),
    ];
    f.store.work_items().save(&drifted).unwrap();
    let out = f.engine.run_goal_cycle("goal-1", "owner").await.unwrap();
    let GoalCycleOutcome::Stopped { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.starts_with("E_APPROVAL_HASH"), "{reason}");
    assert!(
        f.store
            .work_items()
            .list_by_parent("goal-1")
            .unwrap()
            .is_empty()
    );
    assert_eq!(f.fake.served(), 0);
    assert_eq!(f.executions(), 0);
    assert_eq!(f.store.nonces().len().unwrap(), 0);
    let ev = f.drain();
    let blocked = ev.iter().find(|e| e.work_item_id == "goal-1").unwrap();
    assert_eq!(blocked.status, WorkStatusKind::Blocked);

    // A plan-approved goal (no standing token) runs its checks, but its fix
    // task waits blocked for a fresh interactive approval.
    let mut planned = goal(&f);
    planned.id = "goal-2".into();
    f.approve(&mut planned);
    let out = f.engine.run_goal_cycle("goal-2", "owner").await.unwrap();
    let GoalCycleOutcome::FixTaskBlocked { task_id, reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("not standing"), "{reason}");
    let fix = f.get(&task_id);
    assert_eq!(fix.status, WorkItemStatus::Blocked);
    assert!(fix.needs_approval);
    assert!(fix.approval_token.is_none());
    assert_eq!(f.fake.served(), 0);
    let ev = f.drain();
    let blocked = ev.iter().find(|e| e.work_item_id == task_id).unwrap();
    assert!(blocked.summary.contains("needs your approval"));
}

#[tokio::test]
async fn tool_call_gate_blocks_the_call_before_the_sandbox() {
    let mut f = Fx::new().await;
    let mut t = item(json!({
        "id": "t-gated", "type": "task", "title": "g", "body": "g",
        "gates": [{"name": "echo-only", "on": "on_tool_call", "type": "string_match",
                   "extract": "command", "allowed_values": ["echo safe"], "on_block": "report"}],
    }));
    f.approve(&mut t);
    f.fake.push(shell("touch pwned.txt"));
    // Schema failure is refused before the sandbox too.
    f.fake
        .push(Reply::tool_call("shell_exec", &json!({"cmd": "echo safe"})));
    f.fake.push(output("gave up"));

    let r = f.engine.run_task("t-gated", "owner").await.unwrap();
    // Nothing ran and there is no check: not `done` on the executor's word.
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(
        r.summary
            .starts_with("E_GATE_BLOCKED: nothing ran. 2 tool calls were refused")
            && r.summary.contains("shell_exec ×2")
            && r.summary.contains("The executor reported: gave up"),
        "{}",
        r.summary
    );
    assert!(r.artifacts.is_empty());
    assert_eq!(f.executions(), 0, "nothing executed");
    let reqs = f.fake.requests();
    let refused = reqs[1].last_message_text();
    assert!(
        refused.contains("E_GATE_BLOCKED") && refused.contains("echo-only"),
        "{refused}"
    );
    let invalid = reqs[2].last_message_text();
    assert!(invalid.contains("invalid arguments"), "{invalid}");
    let audit = f.audit_events();
    assert!(audit.contains(&"gate_blocked".to_owned()), "{audit:?}");
    assert!(audit.contains(&"task_nothing_ran".to_owned()), "{audit:?}");
    f.drain();
}

/// A refused call beside one that ran: the task is done, and its result
/// names what was refused.
#[tokio::test]
async fn a_done_result_names_the_calls_that_were_refused() {
    let mut f = Fx::new().await;
    let mut t = item(json!({
        "id": "t-mixed", "type": "task", "title": "m", "body": "m",
        "gates": [{"name": "echo-only", "on": "on_tool_call", "type": "string_match",
                   "extract": "command", "allowed_values": ["echo safe"], "on_block": "report"}],
    }));
    f.approve(&mut t);
    f.fake.push(shell("touch pwned.txt"));
    // Tools that are not offered are refused before the executor sees
    // them; they are named with the others.
    f.fake.push(Reply::tool_call(
        "web_fetch",
        &json!({"url": "https://example.com"}),
    ));
    f.fake.push(Reply::tool_call("rm -rf /; x", &json!({})));
    f.fake.push(shell("echo safe"));
    f.fake.push(output("did the safe part"));
    let r = f.engine.run_task("t-mixed", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    assert_eq!(f.executions(), 1);
    assert!(
        r.summary.contains("did the safe part")
            && r.summary.contains(
                "3 tool calls were refused before the sandbox and they did not run: \
                 shell_exec, web_fetch, (an unknown tool)."
            ),
        "{}",
        r.summary
    );
    f.drain();
}

#[tokio::test]
async fn tool_call_gate_allows_and_after_step_gate_blocks() {
    let mut f = Fx::new().await;
    let mut t = item(json!({
        "id": "t-after", "type": "task", "title": "a", "body": "a",
        "verify": [file_check("x", &f.artifact("t-after", "x.txt"))],
        "gates": [
            {"name": "echo-only", "on": "on_tool_call", "type": "string_match",
             "extract": "command", "allowed_values": ["echo safe > x.txt"], "on_block": "report"},
            {"name": "summary-ok", "on": "after_step", "type": "regex", "extract": "output",
             "check": "^ok", "on_block": "report"}],
    }));
    f.approve(&mut t);
    f.fake.push(shell("echo safe > x.txt"));
    f.fake.push(output("not ok at all"));

    let r = f.engine.run_task("t-after", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked, "{r:?}");
    assert!(r.summary.contains("summary-ok"), "{}", r.summary);
    assert_eq!(f.executions(), 1, "the allowed call ran");
    let stored = f.get("t-after");
    assert!(
        stored.verification_results.is_empty(),
        "verification did not run"
    );
    assert_eq!(f.drain().last().unwrap().status, WorkStatusKind::Blocked);
}

#[tokio::test]
async fn project_runs_in_topological_order_and_stops_at_an_unmet_dependency() {
    let f = Fx::new().await;
    let mk = |id: &str, deps: &[&str]| {
        item(
            json!({"id": id, "type": "task", "title": id, "body": format!("Task {id}"),
                    "parent": "p-1", "depends_on": deps}),
        )
    };
    for (id, deps) in [("c", vec!["b"]), ("b", vec!["a"]), ("a", vec![])] {
        let mut t = mk(id, &deps);
        f.approve(&mut t);
        f.fake.push(output(&format!("did {id}")));
    }
    let mut p =
        item(json!({"id": "p-1", "type": "project", "title": "p", "tasks": ["c", "b", "a"]}));
    f.approve(&mut p);
    let r = f.engine.run_project("p-1", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Done, "{r:?}");
    let order: Vec<String> = f
        .fake
        .requests()
        .iter()
        .map(|q| {
            let s = system_of(q);
            ["a", "b", "c"]
                .into_iter()
                .find(|id| s.contains(&format!("Task {id}")))
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(order, ["a", "b", "c"]);
    assert_eq!(f.get("p-1").budget_used.executor_runs, 3);

    // y depends on an item that is not done: y and its dependent z never run.
    let ext = item(json!({"id": "ext", "type": "task", "title": "ext"}));
    f.store.work_items().save(&ext).unwrap();
    for (id, deps) in [("x", vec![]), ("y", vec!["ext"]), ("z", vec!["y"])] {
        let mut t = mk(id, &deps);
        t.parent = Some("p-2".into());
        f.approve(&mut t);
    }
    f.fake.push(output("did x"));
    let mut p =
        item(json!({"id": "p-2", "type": "project", "title": "p", "tasks": ["x", "z", "y"]}));
    f.approve(&mut p);
    let served = f.fake.served();
    let r = f.engine.run_project("p-2", "owner").await.unwrap();
    assert_eq!(r.status, WorkItemStatus::Blocked, "{r:?}");
    assert!(r.summary.contains("\"ext\""), "{}", r.summary);
    assert_eq!(f.fake.served(), served + 1, "only x ran");
    assert_eq!(f.get("x").status, WorkItemStatus::Done);
    assert_eq!(f.get("y").status, WorkItemStatus::Pending);
    assert_eq!(f.get("z").status, WorkItemStatus::Pending);
}

#[tokio::test]
async fn project_without_a_valid_token_is_refused_before_any_child_runs() {
    let mut f = Fx::new().await;
    f.fake.set_fallback(shell("touch pwned.txt"));
    let mut child = item(
        json!({"id": "pc", "type": "task", "title": "pc", "body": "Task pc",
                                "parent": "p"}),
    );
    f.approve(&mut child);
    let project =
        |id: &str| item(json!({"id": id, "type": "project", "title": "p", "tasks": ["pc"]}));
    // No token.
    f.store.work_items().save(&project("p-none")).unwrap();
    // Expired: issued and verified two hours ago (30-minute TTL).
    let mut p = project("p-expired");
    f.approve_at(
        &mut p,
        Timestamp::now().minus(ChronoDuration::hours(2)),
        true,
    );
    // Tampered: the plan changed after approval.
    let mut p = project("p-tampered");
    f.approve(&mut p);
    p.title = "p, and also wipe the disk".into();
    f.store.work_items().save(&p).unwrap();

    for (id, why) in [
        ("p-none", "no approval token"),
        ("p-expired", "token expired"),
        ("p-tampered", "plan hash mismatch"),
    ] {
        let r = f.engine.run_project(id, "owner").await.unwrap();
        assert_eq!(r.status, WorkItemStatus::Blocked, "{id}: {r:?}");
        assert!(r.summary.contains(why), "{id}: {}", r.summary);
        assert_eq!(f.get(id).status, WorkItemStatus::Blocked);
    }
    assert_eq!(
        f.get("pc").status,
        WorkItemStatus::Pending,
        "the child never ran"
    );
    assert_eq!(f.get("pc").attempts, 0);
    assert_eq!(f.fake.served(), 0, "no model request");
    assert_eq!(f.executions(), 0, "nothing reached the sandbox");
    let blocked = f
        .audit_events()
        .into_iter()
        .filter(|e| e == "execution_blocked_no_approval")
        .count();
    assert_eq!(blocked, 3);
    let codes: Vec<Value> = audit_data(&f.store, "execution_blocked_no_approval")
        .into_iter()
        .map(|d| d["code"].clone())
        .collect();
    assert_eq!(
        codes,
        [
            json!(null),
            json!("E_APPROVAL_EXPIRED"),
            json!("E_APPROVAL_HASH")
        ]
    );
    assert!(
        f.drain()
            .iter()
            .all(|e| e.status == WorkStatusKind::Blocked)
    );
}

#[tokio::test]
async fn restart_resumes_running_items_without_reverifying() {
    let mut f = Fx::new().await;
    let out = f.artifact("t-resume", "out.txt");
    let mut t = item(json!({
        "id": "t-resume", "type": "task", "title": "r", "body": "r",
        "verify": [file_check("out", &out)],
    }));
    f.approve(&mut t);
    // As left by a daemon killed during attempt 1.
    f.store
        .work_items()
        .update("t-resume", |w| {
            w.status = WorkItemStatus::Running;
            w.attempts = 1;
            w.budget_used.attempts = 1;
            Ok(())
        })
        .unwrap();
    let token_id = t.approval_token.as_ref().unwrap().token_id.clone();
    assert_eq!(f.store.nonces().len().unwrap(), 1);
    f.fake.push(shell("echo ok > out.txt"));
    f.fake.push(output("done"));

    let (tx, rx) = mpsc::channel(8);
    let inbox = silas_actors::work_executor::DispatchInbox::from(rx);
    let mut events = f.engine.events.subscribe();
    let (actor, handle) =
        spawn_executor(&f.engine, Some(inbox.clone()), RunSupervision::default()).await;
    let ev = wait_for_event(&mut events, "t-resume").await;
    assert_eq!(ev.status, WorkStatusKind::Done, "{ev:?}");
    assert_eq!(ev.scope_id, "owner");
    let stored = f.get("t-resume");
    assert_eq!(stored.status, WorkItemStatus::Done);
    assert_eq!(stored.attempts, 2, "the interrupted attempt counts");
    // ... and is on the record: the owner learns why its commands ran again.
    let cut = common::audit_data(&f.store, "work_attempt_interrupted");
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["attempt"], json!(1));
    assert_eq!(f.store.nonces().len().unwrap(), 1, "no second nonce");
    assert_eq!(
        f.store
            .approvals()
            .get(&token_id)
            .unwrap()
            .unwrap()
            .executions_used,
        1
    );

    // Dispatching the finished item again never re-runs it; a new item sent
    // through the channel runs while the mailbox stays responsive.
    let served = f.fake.served();
    let mut t2 = item(json!({"id": "t-new", "type": "task", "title": "n", "body": "n"}));
    f.approve(&mut t2);
    f.fake
        .push(output("new done").delayed(Duration::from_millis(300)));
    tx.send(DispatchRequest {
        work_item_id: "t-resume".into(),
        scope_id: "s".into(),
    })
    .await
    .unwrap();
    tx.send(DispatchRequest {
        work_item_id: "t-new".into(),
        scope_id: "s".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let running = ractor::call_t!(actor, WorkExecutorMsg::Running, 1000).unwrap();
    assert!(running.contains(&"t-new".to_owned()), "{running:?}");
    let ev = wait_for_event(&mut events, "t-new").await;
    assert_eq!(ev.status, WorkStatusKind::Done);
    assert_eq!(f.fake.served(), served + 1, "t-resume was not re-run");
    f.drain();
    actor.stop(None);
    handle.await.unwrap();

    // A restarted executor takes the same dispatch inbox over: a request
    // sent while no executor is alive waits in the channel and runs.
    let mut t3 = item(json!({"id": "t-after", "type": "task", "title": "a", "body": "a"}));
    f.approve(&mut t3);
    f.fake.push(output("after done"));
    tx.send(DispatchRequest {
        work_item_id: "t-after".into(),
        scope_id: "s".into(),
    })
    .await
    .unwrap();
    let (actor, handle) = spawn_executor(&f.engine, Some(inbox), RunSupervision::default()).await;
    let ev = wait_for_event(&mut events, "t-after").await;
    assert_eq!(ev.status, WorkStatusKind::Done, "{ev:?}");
    actor.stop(None);
    handle.await.unwrap();
}

#[tokio::test]
async fn reviewed_batches_are_bound_to_their_exact_payload() {
    let f = Fx::new().await;
    let batch: BatchProposal = serde_json::from_value(json!({
        "batch_id": "b-1", "goal_id": "goal-1", "action": "archive", "reason_summary": "old",
        "confidence_min": 0.9,
        "items": [
            {"item_id": "m1", "title": "a", "actor": "x", "occurred_at": "2026-11-01T00:00:00Z", "reason": "r", "confidence": 0.9},
            {"item_id": "m2", "title": "b", "actor": "x", "occurred_at": "2026-11-01T00:00:00Z", "reason": "r", "confidence": 0.9},
            {"item_id": "m3", "title": "c", "actor": "x", "occurred_at": "2026-11-01T00:00:00Z", "reason": "r", "confidence": 0.9}],
    }))
    .unwrap();
    let tok = f
        .svc
        .issue_token(
            Subject::Batch(&batch),
            &approved(),
            ApprovalScope::Budget,
            &common::owner_origin(&f.svc),
            Timestamp::now(),
        )
        .unwrap();
    // edit_selection rebuilds the payload in selected order: the old token
    // no longer binds it, so it needs a fresh approval.
    let edit: BatchActionDecision = serde_json::from_value(
        json!({"verdict": "edit_selection", "selected_item_ids": ["m3", "m1"]}),
    )
    .unwrap();
    let BatchStep::Reapprove(edited) = policy::batch_step(&batch, &edit, "b-1e").unwrap() else {
        panic!()
    };
    assert_eq!(
        edited
            .items
            .iter()
            .map(|i| i.item_id.as_str())
            .collect::<Vec<_>>(),
        ["m3", "m1"]
    );
    let refused = f.engine.execute_batch(&edited, &tok, |_| async { 1 }).await;
    assert!(refused.is_err());
    let all: BatchActionDecision = serde_json::from_value(
        json!({"verdict": "edit_selection", "selected_item_ids": ["m1", "m2", "m3"]}),
    )
    .unwrap();
    assert!(
        policy::batch_step(&batch, &all, "x").is_err(),
        "not a strict subset"
    );
    // approve: executes once under the batch-bound token, then it is spent.
    let ran = f
        .engine
        .execute_batch(&batch, &tok, |b| async move { b.items.len() })
        .await
        .unwrap();
    assert_eq!(ran, 3);
    assert!(
        f.engine
            .execute_batch(&batch, &tok, |_| async { 0 })
            .await
            .is_err()
    );
    let fresh = f
        .svc
        .issue_token(
            Subject::Batch(&edited),
            &approved(),
            ApprovalScope::Budget,
            &common::owner_origin(&f.svc),
            Timestamp::now(),
        )
        .unwrap();
    let ran = f
        .engine
        .execute_batch(&edited, &fresh, |b| async move { b.items.len() })
        .await
        .unwrap();
    assert_eq!(ran, 2);
}

// Run supervision (a panic in a run, the restart limit): `work_executor/supervision.rs`.
#[path = "work_executor/supervision.rs"]
mod supervision;
