//! Run supervision: each running item is a linked child actor; a panic in
//! a run surfaces as that child's failure and is handled by the
//! WorkExecutor (module doc of `work_executor`): resumed from redb up to the
//! per-item limit, then ended `failed` — never taking the executor or other
//! runs down, never consuming an approval again. Split from
//! `work_executor.rs` along this seam.

use super::*;

/// A provider with a bug: its first completion panics (inside the run,
/// after step 0 has verified and attempt 1 is persisted), later ones are
/// served by the real provider.
struct PanicOnce {
    inner: Arc<dyn Provider>,
    armed: std::sync::atomic::AtomicBool,
}

impl Provider for PanicOnce {
    fn name(&self) -> &str {
        "panic-once"
    }

    fn complete<'a>(
        &'a self,
        request: &'a silas_llm::provider::ChatRequest,
    ) -> silas_llm::provider::BoxFuture<
        'a,
        Result<silas_llm::provider::ChatResponse, silas_llm::LlmError>,
    > {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("injected provider bug");
        }
        self.inner.complete(request)
    }
}

type Attempts = Arc<std::sync::Mutex<Vec<RunAttempt>>>;

/// A fault hook recording every run start; `crash(attempt)` decides
/// whether that run panics.
fn hook(
    attempts: &Attempts,
    crash: impl Fn(&RunAttempt) -> bool + Send + Sync + 'static,
) -> RunSupervision {
    let attempts = attempts.clone();
    let fault: RunFault = Arc::new(move |a: RunAttempt| {
        attempts.lock().unwrap().push(a.clone());
        let crash = crash(&a);
        Box::pin(async move {
            if crash {
                panic!("injected run panic for {}", a.work_item_id);
            }
        })
    });
    RunSupervision {
        fault: Some(fault),
        ..RunSupervision::default()
    }
}

async fn executor(f: &Fx, supervision: RunSupervision) -> ractor::ActorRef<WorkExecutorMsg> {
    let (actor, _handle) = spawn_executor(&f.engine, None, supervision).await;
    actor
}

fn dispatch(actor: &ractor::ActorRef<WorkExecutorMsg>, id: &str, scope: &str) {
    actor
        .cast(WorkExecutorMsg::Dispatch(DispatchRequest {
            work_item_id: id.into(),
            scope_id: scope.into(),
        }))
        .unwrap();
}

async fn running(actor: &ractor::ActorRef<WorkExecutorMsg>) -> Vec<String> {
    ractor::call_t!(actor, WorkExecutorMsg::Running, 2000).unwrap()
}

async fn until_idle(actor: &ractor::ActorRef<WorkExecutorMsg>) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !running(actor).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("runs are booked out");
}

/// The `action` of every `work_run_crashed` entry for `id`, in order.
fn crash_actions(f: &Fx, id: &str) -> Vec<String> {
    audit_data(&f.store, "work_run_crashed")
        .into_iter()
        .filter(|d| d.get("work_item_id").and_then(Value::as_str) == Some(id))
        .map(|d| d["action"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn executions_used(f: &Fx, t: &WorkItem) -> u64 {
    let id = &t.approval_token.as_ref().unwrap().token_id;
    f.store
        .approvals()
        .get(id)
        .unwrap()
        .unwrap()
        .executions_used
}

#[tokio::test]
async fn a_run_that_panics_mid_run_is_resumed_and_ends_done_with_one_nonce() {
    let mut f = Fx::new().await;
    let out = f.artifact("t-crash", "out.txt");
    let mut t = item(json!({
        "id": "t-crash", "type": "task", "title": "c", "body": "c",
        "verify": [file_check("out", &out)],
    }));
    // Every agent goes through the buggy provider; the first model call of
    // attempt 1 panics.
    let mut agents = (*f.engine.agents).clone();
    let buggy: Arc<dyn Provider> = Arc::new(PanicOnce {
        inner: agents.executor.provider.clone(),
        armed: true.into(),
    });
    for a in [
        &mut agents.proxy,
        &mut agents.planner,
        &mut agents.executor,
        &mut agents.scorer,
    ] {
        a.provider = buggy.clone();
    }
    f.engine.agents = Arc::new(agents);
    f.fake.push(shell("echo ok > out.txt"));
    f.fake.push(output("done"));

    let mut events = f.engine.events.subscribe();
    let actor = executor(&f, RunSupervision::default()).await;
    // Approved once the executor runs (one found approved and verified at
    // start would be resumed by the start itself).
    f.approve(&mut t);
    assert_eq!(f.store.nonces().len().unwrap(), 1);
    dispatch(&actor, "t-crash", "s");
    let ev = wait_for_event(&mut events, "t-crash").await;
    assert_eq!(ev.status, WorkStatusKind::Done, "{ev:?}");
    assert_eq!(ev.scope_id, "s");

    let stored = f.get("t-crash");
    assert_eq!(stored.status, WorkItemStatus::Done);
    assert_eq!(stored.attempts, 2, "the crashed attempt counts");
    assert!(out.exists());
    assert_eq!(f.store.nonces().len().unwrap(), 1, "no second nonce");
    assert_eq!(executions_used(&f, &t), 1);
    assert_eq!(crash_actions(&f, "t-crash"), ["resumed"]);
    let verified = f
        .audit_events()
        .into_iter()
        .filter(|e| e == "approval.verified")
        .count();
    assert_eq!(verified, 1, "verified once, before dispatch; never again");
    until_idle(&actor).await;
    f.drain();
    actor.stop(None);
}

#[tokio::test]
async fn a_run_that_panics_every_time_ends_failed_after_the_restart_limit() {
    let mut f = Fx::new().await;
    let mut t = item(json!({"id": "t-bad", "type": "task", "title": "b", "body": "b"}));
    let attempts = Attempts::default();
    let sup = hook(&attempts, |a| a.work_item_id == "t-bad");
    let max = sup.restart.max_restarts;
    assert_eq!(max, 2);

    let mut events = f.engine.events.subscribe();
    let actor = executor(&f, sup).await;
    // Approved once the executor runs (one found approved and verified at
    // start would be resumed by the start itself).
    f.approve(&mut t);
    dispatch(&actor, "t-bad", "s");
    let ev = wait_for_event(&mut events, "t-bad").await;
    assert_eq!(ev.status, WorkStatusKind::Failed, "{ev:?}");
    assert!(
        ev.summary.starts_with("E_SANDBOX_FAILED:"),
        "{}",
        ev.summary
    );
    assert_eq!(ev.scope_id, "s");

    assert_eq!(f.get("t-bad").status, WorkItemStatus::Failed);
    let restarts: Vec<u32> = attempts.lock().unwrap().iter().map(|a| a.restart).collect();
    assert_eq!(restarts, [0, 1, 2], "the first run and {max} restarts");
    assert_eq!(crash_actions(&f, "t-bad"), ["resumed", "resumed", "failed"]);
    assert!(f.audit_events().contains(&"work_item.failed".to_owned()));
    assert_eq!(
        f.store.nonces().len().unwrap(),
        1,
        "no approval consumed again"
    );
    assert_eq!(executions_used(&f, &t), 1);
    assert_eq!(f.fake.served(), 0, "nothing ran");
    until_idle(&actor).await;
    // A later dispatch of the failed item never re-runs it.
    dispatch(&actor, "t-bad", "s");
    wait_for("the later run", || attempts.lock().unwrap().len() == 4).await;
    until_idle(&actor).await;
    assert_eq!(f.get("t-bad").status, WorkItemStatus::Failed);
    f.drain();
    actor.stop(None);
}

#[tokio::test]
async fn a_crashing_run_leaves_other_runs_and_the_mailbox_alone() {
    let mut f = Fx::new().await;
    let mut bad = item(json!({"id": "t-bad", "type": "task", "title": "b", "body": "b"}));
    let mut ok = item(json!({"id": "t-ok", "type": "task", "title": "o", "body": "o"}));
    f.fake
        .push(output("ok done").delayed(Duration::from_millis(600)));
    let attempts = Attempts::default();
    let mut events = f.engine.events.subscribe();
    let actor = executor(&f, hook(&attempts, |a| a.work_item_id == "t-bad")).await;
    // Approved once the executor runs (one found approved and verified at
    // start would be resumed by the start itself).
    f.approve(&mut bad);
    f.approve(&mut ok);
    dispatch(&actor, "t-ok", "s");
    dispatch(&actor, "t-bad", "s");

    // t-bad crashes (three times, 50 + 100 ms apart) while t-ok's model
    // call is still in flight; the executor keeps answering throughout.
    wait_for("t-bad crashing", || {
        attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.work_item_id == "t-bad")
            .count()
            >= 2
    })
    .await;
    let now = running(&actor).await;
    assert!(now.contains(&"t-ok".to_owned()), "{now:?}");

    let mut seen = BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.len() < 2 {
            let e = events.recv().await.unwrap();
            if e.status != WorkStatusKind::Running {
                seen.insert(e.work_item_id.clone(), e);
            }
        }
    })
    .await
    .expect("both items end");
    assert_eq!(seen["t-ok"].status, WorkStatusKind::Done, "{seen:?}");
    assert_eq!(seen["t-bad"].status, WorkStatusKind::Failed, "{seen:?}");
    assert_eq!(f.get("t-ok").status, WorkItemStatus::Done);
    assert_eq!(f.get("t-bad").status, WorkItemStatus::Failed);
    assert_eq!(f.fake.served(), 1);
    until_idle(&actor).await;
    assert_eq!(actor.get_status(), ractor::ActorStatus::Running);
    f.drain();
    actor.stop(None);
}

#[tokio::test]
async fn a_dispatch_queued_for_a_crashed_run_is_not_lost() {
    let mut f = Fx::new().await;
    let mut t = item(json!({"id": "t-q", "type": "task", "title": "q", "body": "q"}));
    f.fake.push(output("q done"));
    let attempts = Attempts::default();
    // The first run waits in flight until released, then panics.
    let release = Arc::new(tokio::sync::Notify::new());
    let fault: RunFault = {
        let attempts = attempts.clone();
        let release = release.clone();
        Arc::new(move |a: RunAttempt| {
            let first = {
                let mut v = attempts.lock().unwrap();
                v.push(a.clone());
                v.len() == 1
            };
            let release = release.clone();
            Box::pin(async move {
                if first {
                    release.notified().await;
                    panic!("injected run panic");
                }
            })
        })
    };
    let sup = RunSupervision {
        fault: Some(fault),
        ..RunSupervision::default()
    };
    let mut events = f.engine.events.subscribe();
    let actor = executor(&f, sup).await;
    // Approved once the executor runs (one found approved and verified at
    // start would be resumed by the start itself).
    f.approve(&mut t);
    dispatch(&actor, "t-q", "s1");
    wait_for("the first run", || attempts.lock().unwrap().len() == 1).await;
    // Dispatched again while running (e.g. a card answered meanwhile):
    // queued, not started twice.
    dispatch(&actor, "t-q", "s2");
    assert_eq!(running(&actor).await, ["t-q"]);
    assert_eq!(attempts.lock().unwrap().len(), 1);
    release.notify_one();

    let ev = wait_for_event(&mut events, "t-q").await;
    assert_eq!(ev.status, WorkStatusKind::Done, "{ev:?}");
    assert_eq!(ev.scope_id, "s1", "the resumed run reports where it began");
    // The queued dispatch runs after the resumed run ended.
    wait_for("the queued run", || attempts.lock().unwrap().len() == 3).await;
    until_idle(&actor).await;
    let seen: Vec<(u32, bool)> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|a| (a.restart, a.goal_cycle))
        .collect();
    assert_eq!(seen, [(0, false), (1, false), (0, false)]);
    assert_eq!(crash_actions(&f, "t-q"), ["resumed"]);
    assert_eq!(f.get("t-q").status, WorkItemStatus::Done);
    assert_eq!(
        f.fake.served(),
        1,
        "the queued dispatch did not re-run a done item"
    );
    assert_eq!(f.store.nonces().len().unwrap(), 1);
    assert_eq!(executions_used(&f, &t), 1);
    f.drain();
    actor.stop(None);
}

#[tokio::test]
async fn a_crashed_goal_cycle_is_reported_not_rerun() {
    let mut f = Fx::new().await;
    let mut g = goal(&f);
    standing(&f, &mut g);
    let before = f.get("goal-1").status;
    let attempts = Attempts::default();
    let mut events = f.engine.events.subscribe();
    let actor = executor(&f, hook(&attempts, |a| a.work_item_id == "goal-1")).await;
    actor
        .cast(WorkExecutorMsg::RunGoalCycle(DispatchRequest {
            work_item_id: "goal-1".into(),
            scope_id: "s".into(),
        }))
        .unwrap();
    let ev = wait_for_event(&mut events, "goal-1").await;
    assert_eq!(ev.status, WorkStatusKind::Failed, "{ev:?}");
    assert!(
        ev.summary.starts_with("E_SANDBOX_FAILED:"),
        "{}",
        ev.summary
    );
    until_idle(&actor).await;
    let seen: Vec<(u32, bool)> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|a| (a.restart, a.goal_cycle))
        .collect();
    assert_eq!(seen, [(0, true)], "a crashed cycle is not re-run");
    assert_eq!(crash_actions(&f, "goal-1"), ["cycle_dropped"]);
    assert_eq!(f.get("goal-1").status, before, "the goal keeps its status");
    assert_eq!(executions_used(&f, &g), 0, "no spawn, no nonce");
    f.drain();
    actor.stop(None);
}
