//! The ConnectionManager over a real store with scripted connection skills:
//! it works with no connections, refreshes tokens inside the ahead window,
//! recovers in the §5.10.4 order (refresh, recover, surface) at most once
//! each, and its health checks are scheduled by the Scheduler from the
//! connection's own cron.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, call_t};
use silas_actors::connection::{
    ConnectionArgs, ConnectionEvent, ConnectionManager, ConnectionMsg, ConnectionScripts,
    RefreshPolicy, RefreshResult, ScriptError, ScriptFuture,
};
use silas_actors::scheduler::{
    JobAction, ManualClock, Scheduler, SchedulerArgs, SchedulerConfigJobs, SchedulerMsg,
    parse_timezone,
};
use silas_core::Timestamp;
use silas_core::model::connections::{
    AuthStrategy, Connection, ConnectionFailure, ConnectionFailureType, ConnectionStatus,
    HealthCheckResult,
};
use silas_storage::Store;
use tokio::sync::broadcast;

/// Scripted skill: fixed answers, every call recorded.
struct Scripted {
    health: HealthCheckResult,
    refresh_ok: bool,
    recover_ok: bool,
    calls: Arc<Mutex<Vec<String>>>,
}

impl ConnectionScripts for Scripted {
    fn health_check(&self, c: &Connection) -> ScriptFuture<Result<HealthCheckResult, ScriptError>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("health:{}", c.connection_id));
        let h = self.health.clone();
        Box::pin(async move { Ok(h) })
    }
    fn refresh_token(&self, c: &Connection) -> ScriptFuture<Result<RefreshResult, ScriptError>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("refresh:{}", c.connection_id));
        let ok = self.refresh_ok;
        Box::pin(async move {
            if ok {
                Ok(RefreshResult {
                    new_expires_at: Some(Timestamp::now().plus(chrono::Duration::hours(1))),
                })
            } else {
                Err(ScriptError::Unavailable("refresh refused".into()))
            }
        })
    }
    fn recover(&self, c: &Connection) -> ScriptFuture<Result<(), ScriptError>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("recover:{}", c.connection_id));
        let ok = self.recover_ok;
        Box::pin(async move {
            if ok {
                Ok(())
            } else {
                Err(ScriptError::Failed(ConnectionFailure {
                    failure_type: ConnectionFailureType::TokenRevoked,
                    service: "Outlook".into(),
                    message: String::new(),
                    recovery_options: vec![],
                }))
            }
        })
    }
}

fn conn(id: &str) -> Connection {
    Connection {
        connection_id: id.into(),
        name: "Outlook".into(),
        domain: "personal".into(),
        skill_name: "outlook".into(),
        auth_strategy: AuthStrategy::DeviceCode,
        permissions: vec![],
        permissions_granted: vec!["Mail.Read".into()],
        permissions_available: vec![],
        initial_permissions: vec!["Mail.Read".into()],
        status: ConnectionStatus::Active,
        health_check: "*/20 * * * *".into(),
        token_expires_at: None,
        refresh_token_expires_at: None,
        last_health_check: None,
        last_refresh: None,
        settings: Default::default(),
    }
}

fn health(healthy: bool, expires_in_min: Option<i64>, error: Option<&str>) -> HealthCheckResult {
    HealthCheckResult {
        healthy,
        token_expires_at: expires_in_min
            .map(|m| Timestamp::now().plus(chrono::Duration::minutes(m))),
        refresh_token_expires_at: None,
        latency_ms: 40,
        error: error.map(str::to_owned),
        warnings: vec![],
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    store: Store,
    calls: Arc<Mutex<Vec<String>>>,
    events: broadcast::Sender<ConnectionEvent>,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        Fx {
            store: Store::open_in(dir.path()).unwrap(),
            _dir: dir,
            calls: Arc::default(),
            events: broadcast::channel(16).0,
        }
    }

    fn args(&self, h: HealthCheckResult, refresh_ok: bool, recover_ok: bool) -> ConnectionArgs {
        ConnectionArgs {
            store: self.store.clone(),
            scripts: Arc::new(Scripted {
                health: h,
                refresh_ok,
                recover_ok,
                calls: self.calls.clone(),
            }),
            refresh: RefreshPolicy::default(),
            auto_recovery: true,
            scheduler: None,
            events: self.events.clone(),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn audit(&self) -> Vec<String> {
        self.store
            .audit()
            .tail(1000)
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect()
    }
}

#[tokio::test]
async fn works_with_no_connections() {
    let f = Fx::new();
    let (cm, _j) = Actor::spawn(
        None,
        ConnectionManager,
        f.args(health(true, None, None), true, true),
    )
    .await
    .unwrap();
    assert!(
        call_t!(cm, ConnectionMsg::CheckAll, 2000)
            .unwrap()
            .is_empty()
    );
    assert!(
        call_t!(cm, ConnectionMsg::List, 2000, None)
            .unwrap()
            .is_empty()
    );
    // A check for an unknown id is a no-op, not a crash.
    cm.cast(ConnectionMsg::HealthCheck("nope".into())).unwrap();
    assert!(
        call_t!(cm, ConnectionMsg::List, 2000, None)
            .unwrap()
            .is_empty()
    );
    assert!(f.calls().is_empty());
    cm.stop(None);
}

#[tokio::test]
async fn token_inside_the_ahead_window_is_refreshed() {
    let f = Fx::new();
    let (cm, _j) = Actor::spawn(
        None,
        ConnectionManager,
        f.args(health(true, Some(5), None), true, true),
    )
    .await
    .unwrap();
    let mut c = conn("c1");
    c.initial_permissions = vec!["Mail.Read".into()];
    call_t!(cm, ConnectionMsg::Register, 2000, c.clone())
        .unwrap()
        .unwrap();
    // initial_permissions is immutable after first setup.
    let mut changed = c.clone();
    changed.initial_permissions = vec!["Mail.ReadWrite".into()];
    call_t!(cm, ConnectionMsg::Register, 2000, changed)
        .unwrap()
        .unwrap();
    let results = call_t!(cm, ConnectionMsg::CheckAll, 2000).unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(f.calls(), ["health:c1", "refresh:c1"]);
    let stored = f.store.records::<Connection>().get("c1").unwrap().unwrap();
    assert_eq!(stored.initial_permissions, ["Mail.Read"]);
    assert!(stored.last_refresh.is_some() && stored.last_health_check.is_some());
    // The refreshed expiry (an hour out) was stored.
    assert!(
        stored.token_expires_at.unwrap() > Timestamp::now().plus(chrono::Duration::minutes(50))
    );
    // No refresh-token window is closing: a plain refresh, not the dormant one.
    assert!(f.audit().contains(&"connection.refreshed".to_string()));
    cm.stop(None);
}

#[tokio::test]
async fn unhealthy_connection_recovers_in_order_then_surfaces_once() {
    let f = Fx::new();
    let mut events = f.events.subscribe();
    let (cm, _j) = Actor::spawn(
        None,
        ConnectionManager,
        f.args(health(false, None, Some("401 token expired")), false, false),
    )
    .await
    .unwrap();
    call_t!(cm, ConnectionMsg::Register, 2000, conn("c2"))
        .unwrap()
        .unwrap();
    call_t!(cm, ConnectionMsg::CheckAll, 2000).unwrap();
    // Refresh, then recover, each once; no loop.
    assert_eq!(f.calls(), ["health:c2", "refresh:c2", "recover:c2"]);
    let stored = f.store.records::<Connection>().get("c2").unwrap().unwrap();
    assert_eq!(stored.status, ConnectionStatus::Failed);
    // The failed check is recorded as the last one (the list said "never").
    assert!(stored.last_health_check.is_some());
    assert!(f.audit().contains(&"connection.failed".to_string()));
    let failure = loop {
        if let ConnectionEvent::Failure { failure, .. } = events.recv().await.unwrap() {
            break failure;
        }
    };
    assert_eq!(failure.failure_type, ConnectionFailureType::TokenRevoked);
    let actions: Vec<&str> = failure
        .recovery_options
        .iter()
        .map(|o| o.action.as_str())
        .collect();
    assert_eq!(actions, ["reconnect", "skip"]);
    // A failed connection is no longer checked.
    call_t!(cm, ConnectionMsg::CheckAll, 2000).unwrap();
    assert_eq!(f.calls().len(), 3);
    cm.stop(None);
}

#[tokio::test]
async fn recover_script_success_keeps_the_connection_active() {
    let f = Fx::new();
    let (cm, _j) = Actor::spawn(
        None,
        ConnectionManager,
        f.args(health(false, None, Some("connection reset")), true, true),
    )
    .await
    .unwrap();
    call_t!(cm, ConnectionMsg::Register, 2000, conn("c3"))
        .unwrap()
        .unwrap();
    call_t!(cm, ConnectionMsg::CheckAll, 2000).unwrap();
    // Not a token error: straight to recover.
    assert_eq!(f.calls(), ["health:c3", "recover:c3"]);
    let stored = f.store.records::<Connection>().get("c3").unwrap().unwrap();
    assert_eq!(stored.status, ConnectionStatus::Active);
    assert!(f.audit().contains(&"connection.recovered".to_string()));
    cm.stop(None);
}

#[tokio::test]
async fn scheduler_runs_health_checks_on_the_connection_cron() {
    let f = Fx::new();
    f.store.records::<Connection>().put(&conn("c4")).unwrap();
    let mut paused = conn("c5");
    paused.status = ConnectionStatus::Paused;
    f.store.records::<Connection>().put(&paused).unwrap();
    let (_cm, _j) = Actor::spawn(
        Some("test.connections".into()),
        ConnectionManager,
        f.args(health(true, None, None), true, true),
    )
    .await
    .unwrap();
    let clock = ManualClock::new(Timestamp::parse("2026-06-17T12:00:00Z").unwrap());
    let day = Duration::from_secs(86_400);
    let (s, _sj) = Actor::spawn(
        None,
        Scheduler,
        SchedulerArgs {
            store: f.store.clone(),
            timezone: parse_timezone("UTC").unwrap(),
            clock: clock.clone(),
            config_jobs: SchedulerConfigJobs {
                heartbeat: None,
                nonce_prune_every: day,
                retention_every: day,
                checkpoint_every: day,
                sync_every: day,
                default_health_check: "*/30 * * * *".into(),
            },
            dispatch: None,
            housekeeper: None,
            connections: Some("test.connections".into()),
            events: broadcast::channel(16).0,
        },
    )
    .await
    .unwrap();
    let jobs = call_t!(s, SchedulerMsg::List, 2000).unwrap();
    let health_jobs: Vec<_> = jobs
        .iter()
        .filter(|j| matches!(j.action, JobAction::ConnectionHealth { .. }))
        .collect();
    // Only the active connection, on its own cron.
    assert_eq!(health_jobs.len(), 1);
    assert_eq!(health_jobs[0].job_id, "health:c4");
    assert_eq!(health_jobs[0].schedule, "*/20 * * * *");
    clock.set(Timestamp::parse("2026-06-17T12:20:00Z").unwrap());
    for _ in 0..100 {
        if !f.calls().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.calls(), ["health:c4"]);
    s.stop(None);
}
