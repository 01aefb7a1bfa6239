//! `WorkExecutorMsg::Cancel` (the owner's `silas work cancel`): a run in
//! flight is stopped and its item ends `failed`, audited; ended or unknown
//! items are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Fx, audit_data, item, spawn_executor, wait_for, wait_for_event};
use serde_json::json;
use silas_actors::work::{DispatchRequest, WorkStatusKind};
use silas_actors::work_executor::{
    CancelError, Cancelled, RunAttempt, RunFault, RunSupervision, WorkExecutorMsg,
};
use silas_core::model::work::WorkItemStatus;

/// A workspace copy and a tool call's dir of `id`, as a run leaves them.
fn leave_run_dirs(f: &Fx, id: &str) -> Vec<std::path::PathBuf> {
    let dirs = vec![
        f.path(&format!("work/ws-{id}/result")),
        f.path(&format!("work/{id}-a1-0-call_1")),
    ];
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("out.txt"), "x").unwrap();
    }
    vec![f.path(&format!("work/ws-{id}")), dirs[1].clone()]
}

async fn cancel(
    actor: &ractor::ActorRef<WorkExecutorMsg>,
    id: &str,
) -> Result<Cancelled, CancelError> {
    ractor::call_t!(
        actor,
        |reply| WorkExecutorMsg::Cancel {
            id: id.into(),
            by: "dev-test".into(),
            reply
        },
        10_000
    )
    .unwrap()
}

#[tokio::test]
async fn cancel_stops_a_run_in_flight_and_ends_the_item_failed() {
    let mut f = Fx::new().await;
    let mut t = item(json!({"id": "t-long", "type": "task", "title": "l", "body": "l"}));
    let pending = item(json!({"id": "t-wait", "type": "task", "title": "w", "body": "w"}));
    f.store.work_items().save(&pending).unwrap();
    // The run stays in flight (its fault hook never returns) until killed.
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fault: RunFault = {
        let started = started.clone();
        Arc::new(move |_: RunAttempt| {
            started.store(true, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::pending::<()>())
        })
    };
    let sup = RunSupervision {
        fault: Some(fault),
        ..RunSupervision::default()
    };
    let mut events = f.engine.events.subscribe();
    let (actor, _h) = spawn_executor(&f.engine, None, sup).await;
    f.approve(&mut t);
    actor
        .cast(WorkExecutorMsg::Dispatch(DispatchRequest {
            work_item_id: "t-long".into(),
            scope_id: "s".into(),
        }))
        .unwrap();
    wait_for("the run", || {
        started.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    let status_before = f.get("t-long").status;
    // What a run writes to the work dir: its workspace copies and a dir
    // per tool call (the names `workspace.rs` and `tools.rs` give them).
    let left = leave_run_dirs(&f, "t-long");
    let other = leave_run_dirs(&f, "t-other");
    let mut running_other =
        item(json!({"id": "t-other", "type": "task", "title": "o", "body": "o"}));
    running_other.status = WorkItemStatus::Running;
    f.store.work_items().save(&running_other).unwrap();
    let foreign = f.path("work/conn-github-1");
    std::fs::create_dir_all(&foreign).unwrap();

    let done = cancel(&actor, "t-long").await.unwrap();
    for dir in &left {
        assert!(
            !dir.exists(),
            "{} left behind by a cancelled run",
            dir.display()
        );
    }
    for dir in other.iter().chain([&foreign]) {
        assert!(
            dir.exists(),
            "{} belongs to something still running",
            dir.display()
        );
    }
    assert!(done.was_running, "{done:?}");
    assert_eq!(done.previous, status_before);
    assert_eq!(f.get("t-long").status, WorkItemStatus::Failed);
    let running: Vec<String> = ractor::call_t!(actor, WorkExecutorMsg::Running, 2000).unwrap();
    assert!(running.is_empty(), "{running:?}");
    let ev = wait_for_event(&mut events, "t-long").await;
    assert_eq!(ev.status, WorkStatusKind::Failed);
    assert_eq!(ev.summary, "cancelled by the owner");

    // An item that never ran is cancelled too, with nothing to stop.
    let waiting = cancel(&actor, "t-wait").await.unwrap();
    assert_eq!(waiting.previous, WorkItemStatus::Pending);
    assert!(!waiting.was_running);
    assert_eq!(f.get("t-wait").status, WorkItemStatus::Failed);

    // Ended and unknown items are refused.
    assert!(matches!(
        cancel(&actor, "t-long").await,
        Err(CancelError::Ended {
            status: WorkItemStatus::Failed,
            ..
        })
    ));
    assert!(matches!(
        cancel(&actor, "nope").await,
        Err(CancelError::NotFound(_))
    ));

    let audited = audit_data(&f.store, "work_item.cancelled");
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert_eq!(audited[0]["work_item_id"], "t-long");
    assert_eq!(audited[0]["by"], "dev-test");
    assert_eq!(audited[0]["was_running"], true);
    assert_eq!(audited[1]["previous_status"], "pending");
    // A later dispatch does not bring it back.
    actor
        .cast(WorkExecutorMsg::Dispatch(DispatchRequest {
            work_item_id: "t-long".into(),
            scope_id: "s".into(),
        }))
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(f.get("t-long").status, WorkItemStatus::Failed);
    f.drain();
    actor.stop(None);
}

/// A goal between cycles (`healthy`, or `failed` after a failing check) is
/// not ended: cancelling it ends it `done` with its standing approval
/// withdrawn, so the scheduler never runs another cycle. Cancelling it
/// again is refused.
#[tokio::test]
async fn cancelling_a_goal_between_cycles_stops_it_for_good() {
    let mut f = Fx::new().await;
    let (actor, _h) = spawn_executor(&f.engine, None, RunSupervision::default()).await;
    for (id, status) in [
        ("g-healthy", WorkItemStatus::Healthy),
        ("g-failing", WorkItemStatus::Failed),
    ] {
        let mut g = item(json!({
            "id": id, "type": "goal", "title": "watch", "body": "watch",
            "schedule": "*/2 * * * *",
        }));
        f.approve(&mut g);
        g.status = status;
        f.store.work_items().save(&g).unwrap();
        assert!(silas_actors::scheduler::goal_is_schedulable(&f.get(id)));

        let done = cancel(&actor, id).await.unwrap();
        assert_eq!(done.previous, status);
        let after = f.get(id);
        assert_eq!(after.status, WorkItemStatus::Done);
        assert!(
            after.approval_token.is_none(),
            "the standing approval stays"
        );
        assert!(!silas_actors::scheduler::goal_is_schedulable(&after));
        assert!(matches!(
            cancel(&actor, id).await,
            Err(CancelError::Ended {
                status: WorkItemStatus::Done,
                ..
            })
        ));
    }
    let audited = audit_data(&f.store, "work_item.cancelled");
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert_eq!(audited[1]["previous_status"], "failed");
    f.drain();
    actor.stop(None);
}

/// A daemon that died mid-run, or a cancel it did not finish, leaves run
/// dirs behind: the next start removes those of ended items and keeps
/// those of items that may still go on.
#[tokio::test]
async fn a_start_removes_what_ended_runs_left_in_the_work_dir() {
    let mut f = Fx::new().await;
    let mut kept = Vec::new();
    let mut gone = Vec::new();
    for (id, status) in [
        ("t-failed", WorkItemStatus::Failed),
        ("t-stuck", WorkItemStatus::Stuck),
        ("t-done", WorkItemStatus::Done),
        ("t-paused", WorkItemStatus::Paused),
        ("t-blocked", WorkItemStatus::Blocked),
    ] {
        let mut t = item(json!({"id": id, "type": "task", "title": "x", "body": "x"}));
        t.status = status;
        f.store.work_items().save(&t).unwrap();
        let dirs = leave_run_dirs(&f, id);
        if matches!(status, WorkItemStatus::Paused | WorkItemStatus::Blocked) {
            kept.extend(dirs);
        } else {
            gone.extend(dirs);
        }
    }
    let unknown = leave_run_dirs(&f, "never-saved");
    let (actor, _h) = spawn_executor(&f.engine, None, RunSupervision::default()).await;
    let _: Vec<String> = ractor::call_t!(actor, WorkExecutorMsg::Running, 2000).unwrap();
    for dir in &gone {
        assert!(
            !dir.exists(),
            "{} of an ended item survived the start",
            dir.display()
        );
    }
    for dir in kept.iter().chain(&unknown) {
        assert!(dir.exists(), "{} was removed", dir.display());
    }
    f.drain();
    actor.stop(None);
}

/// Processes whose command line is exactly `sleep SECONDS`.
fn sleeping(seconds: &str) -> usize {
    let want = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .count()
}

/// A goal's fix task runs inside the goal's cycle run: cancelling the fix
/// task found no run booked under its own id, said "was not running", and
/// its sandboxed command ran on to its timeout while the item came back as
/// `running`. The cycle carrying it is stopped now, command and all.
#[tokio::test]
async fn cancelling_a_goals_fix_task_stops_its_command() {
    let mut f = Fx::new().await;
    let marker = "3131";
    let mut g = item(json!({
        "id": "g-fix", "type": "goal", "title": "Keep it fixed", "body": "Watch.",
        "schedule": "*/30 * * * *",
        "verify": [common::file_check("fixed", &f.artifact("g-fix-fix-1", "fixed.txt"))],
        "on_failure": "spawn_task",
        "failure_context": "Fix these failures: $failed_checks",
    }));
    let tok = f
        .svc
        .issue_token(
            silas_core::approval::Subject::WorkItem(&g),
            &common::approved(),
            silas_core::model::approval::ApprovalScope::Standing,
            &common::owner_origin(&f.svc),
            silas_core::Timestamp::now(),
        )
        .unwrap();
    g.approval_token = Some(tok);
    f.store.work_items().save(&g).unwrap();
    f.fake.push(common::shell(&format!("sleep {marker}")));
    let (actor, _h) = spawn_executor(&f.engine, None, RunSupervision::default()).await;
    actor
        .cast(WorkExecutorMsg::RunGoalCycle(DispatchRequest {
            work_item_id: "g-fix".into(),
            scope_id: "owner".into(),
        }))
        .unwrap();
    wait_for("the fix task's command", || sleeping(marker) == 1).await;
    assert_eq!(f.get("g-fix-fix-1").status, WorkItemStatus::Running);

    let done = cancel(&actor, "g-fix-fix-1").await.unwrap();
    assert!(done.was_running, "{done:?}");
    wait_for("the command to be gone", || sleeping(marker) == 0).await;
    let running: Vec<String> = ractor::call_t!(actor, WorkExecutorMsg::Running, 2000).unwrap();
    assert!(running.is_empty(), "{running:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(f.get("g-fix-fix-1").status, WorkItemStatus::Failed);
    // The goal itself goes on: its next cycle is not refused.
    assert_ne!(f.get("g-fix").status, WorkItemStatus::Done);
    f.drain();
    actor.stop(None);
}
