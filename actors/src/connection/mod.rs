//! The ConnectionManager (spec §2.5, §4.19, §5.10): the lifecycle
//! coordinator of service connections. It owns the `connections` records in
//! redb (status, token expiry metadata, last health check / refresh) and
//! what happens on a health check: proactive refresh (§5.10.3), automatic
//! recovery, and surfacing failures (§5.10.4). *When* checks run belongs to
//! the Scheduler: it derives one `health:{connection_id}` job from every
//! active connection's `health_check` cron, and this actor registers one-shot
//! `refresh:{connection_id}` jobs at `token_expires_at - refresh_ahead`.
//!
//! * [`policy`] — refresh timing and recovery decisions. Pure.
//! * [`ConnectionScripts`] — the connection skill's scripts
//!   (`health_check.py`, `refresh_token.py`, `recover.py`, §10.6). Secrets
//!   stay with the scripts and the keyring: nothing here ever holds one.
//! * [`ConnectionManager`] — the actor: one message enum
//!   ([`ConnectionMsg`]), one state struct ([`ConnectionState`]).
//!
//! * [`runtime`] — the daemon's scripts (the installed, hash-checked
//!   connection skill's, in the sandbox) and setup conversations (§5.10.1:
//!   device code, browser redirect, secure input as cards), which end with
//!   [`ConnectionMsg::Register`] (§5.10.1 step 5).
//! * [`escalation`] — permission escalation (§5.10.2).
//!
//! Failures go to the owner as [`ConnectionEvent::Failure`] (the
//! ConnectionFailureCard's content) and to the audit log; re-authentication
//! suggestions as [`ConnectionEvent::ReauthSuggested`].
//!
//! **Restart policy:** permanent child of the root supervisor. The state is
//! the store: every decision reads the connection record, so a restart loses
//! at most the health check that was running (the next scheduled one runs).

pub mod escalation;
pub mod permission_gate;
pub mod policy;
pub mod runtime;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use silas_core::model::connections::{
    Connection, ConnectionFailure, ConnectionFailureType, ConnectionStatus, HealthCheckResult,
};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::{Store, StoreError};
use tokio::sync::broadcast;

pub use policy::{RecoveryStep, RefreshPlan, RefreshPolicy};

use crate::scheduler::{JobAction, JobSpec, SchedulerHandle, Trigger};

/// Registered name of the daemon's ConnectionManager.
pub const CONNECTIONS_NAME: &str = "silas.connections";

pub type ScriptFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A script that could not produce its structured answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScriptError {
    /// The script ran and reported a structured failure (§3.12).
    #[error("{}: {}", .0.failure_type, .0.message)]
    Failed(ConnectionFailure),
    /// The script could not be run at all.
    #[error("connection script unavailable: {0}")]
    Unavailable(String),
}

/// A successful token refresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefreshResult {
    pub new_expires_at: Option<Timestamp>,
}

/// The connection skill's scripts (§10.6). Implementations run them
/// sandboxed and parse their JSON; the manager only sees structured results.
pub trait ConnectionScripts: Send + Sync + 'static {
    fn health_check(
        &self,
        conn: &Connection,
    ) -> ScriptFuture<Result<HealthCheckResult, ScriptError>>;
    fn refresh_token(&self, conn: &Connection) -> ScriptFuture<Result<RefreshResult, ScriptError>>;
    fn recover(&self, conn: &Connection) -> ScriptFuture<Result<(), ScriptError>>;
}

/// What the owner should see.
#[derive(Clone, Debug, PartialEq)]
pub enum ConnectionEvent {
    /// Recovery failed: render a ConnectionFailureCard.
    Failure {
        connection_id: String,
        failure: ConnectionFailure,
    },
    /// The refresh token expires soon and the connection is in use (§5.10.3 step 2).
    ReauthSuggested { connection_id: String, days: i64 },
    /// A health check finished.
    Checked {
        connection_id: String,
        healthy: bool,
        status: ConnectionStatus,
    },
}

/// Why a connection request failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("connection store: {0}")]
    Store(#[from] StoreError),
    #[error("no connection {0:?}")]
    NotFound(String),
    #[error("invalid connection: {0}")]
    Invalid(String),
}

impl Coded for ConnectionError {
    fn code(&self) -> ErrorCode {
        match self {
            ConnectionError::Store(e) => e.code(),
            ConnectionError::NotFound(_) => ErrorCode::EDbNotFound,
            ConnectionError::Invalid(_) => ErrorCode::ECfgInvalid,
        }
    }
}

#[derive(Clone)]
pub struct ConnectionArgs {
    pub store: Store,
    pub scripts: Arc<dyn ConnectionScripts>,
    pub refresh: RefreshPolicy,
    /// `connections.auto_recovery_enabled`.
    pub auto_recovery: bool,
    /// Registered name of the Scheduler (refresh jobs, re-sync on register).
    pub scheduler: Option<String>,
    pub events: broadcast::Sender<ConnectionEvent>,
}

/// Messages to the ConnectionManager.
// Moved once into a message that ractor boxes anyway; boxing again buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum ConnectionMsg {
    /// A scheduled health check (§4.19 `run_health_checks`, one connection).
    HealthCheck(String),
    /// A scheduled proactive refresh (§4.19 `refresh_token`).
    Refresh(String),
    /// Health-check every active connection now (Stream startup step 3);
    /// replies with the results by connection id.
    CheckAll(RpcReplyPort<Vec<(String, HealthCheckResult)>>),
    /// Create or update a connection record (§5.10.1 step 5).
    Register(Connection, RpcReplyPort<Result<(), ConnectionError>>),
    /// §4.19 `list_connections`, optionally for one domain.
    List(Option<String>, RpcReplyPort<Vec<Connection>>),
    /// Fault injection for supervision tests: panics in the handler.
    InjectPanic,
}

pub struct ConnectionState {
    args: ConnectionArgs,
}

pub struct ConnectionManager;

impl ConnectionManager {
    /// The daemon's child spec: permanent, registered as [`CONNECTIONS_NAME`].
    pub fn child_spec(args: ConnectionArgs) -> crate::supervisor::ChildSpec {
        crate::supervisor::ChildSpec {
            label: "connection_manager".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: Arc::new(move |parent| {
                let args = args.clone();
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(CONNECTIONS_NAME.into()),
                        ConnectionManager,
                        args,
                        parent,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

impl ConnectionState {
    fn audit(&self, event: &str, data: serde_json::Value) -> Result<(), StoreError> {
        let data = match data {
            serde_json::Value::Object(o) => o,
            _ => Default::default(),
        };
        self.args.store.audit().log(event, data).map(|_| ())
    }

    fn load(&self, id: &str) -> Result<Option<Connection>, StoreError> {
        self.args.store.records::<Connection>().get(id)
    }

    fn save(&self, conn: &Connection) -> Result<(), StoreError> {
        self.args.store.records::<Connection>().put(conn)
    }

    /// Ask the scheduler to check `conn` again at `at` (§5.10.3 step 4).
    async fn schedule_refresh(&self, connection_id: &str, at: Timestamp) {
        let Some(name) = &self.args.scheduler else {
            return;
        };
        let Some(s) = SchedulerHandle::find_named(name) else {
            tracing::warn!(%connection_id, "scheduler not running; refresh not scheduled");
            return;
        };
        let spec = JobSpec {
            job_id: format!("refresh:{connection_id}"),
            action: JobAction::ConnectionRefresh {
                connection_id: connection_id.to_owned(),
            },
            schedule: Trigger::at(at),
        };
        if let Err(e) = s.register(spec).await {
            tracing::warn!(%connection_id, code = %e.code(), "refresh not scheduled: {e}");
        }
    }

    fn sync_scheduler(&self) {
        if let Some(s) = self
            .args
            .scheduler
            .as_deref()
            .and_then(SchedulerHandle::find_named)
        {
            s.sync();
        }
    }

    /// Run `refresh_token.py` and record the result. Returns success.
    async fn refresh(&self, conn: &mut Connection, dormant: bool) -> Result<bool, StoreError> {
        let now = Timestamp::now();
        match self.args.scripts.refresh_token(conn).await {
            Ok(r) => {
                conn.token_expires_at = r.new_expires_at.or(conn.token_expires_at);
                conn.last_refresh = Some(now);
                self.save(conn)?;
                let event = if dormant {
                    "proactive_refresh_dormant"
                } else {
                    "connection.refreshed"
                };
                self.audit(event, json!({"connection_id": conn.connection_id}))?;
                if let Some(at) =
                    policy::next_refresh_check(conn.token_expires_at, now, &self.args.refresh)
                {
                    self.schedule_refresh(&conn.connection_id, at).await;
                }
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(connection_id = %conn.connection_id, "token refresh failed: {e}");
                Ok(false)
            }
        }
    }

    /// One health check with refresh planning and recovery (§5.10.3–4).
    async fn health_check(&self, id: &str) -> Result<Option<HealthCheckResult>, StoreError> {
        let Some(mut conn) = self.load(id)? else {
            return Ok(None);
        };
        if conn.status != ConnectionStatus::Active {
            return Ok(None);
        }
        let now = Timestamp::now();
        let result = self.args.scripts.health_check(&conn).await;
        let health = match result {
            Ok(h) => h,
            Err(e) => HealthCheckResult {
                healthy: false,
                token_expires_at: conn.token_expires_at,
                refresh_token_expires_at: conn.refresh_token_expires_at,
                latency_ms: 0,
                error: Some(e.to_string()),
                warnings: Vec::new(),
            },
        };
        // A failed check is a check too: `connection list` said "last health
        // check never" beside a connection that had just failed one.
        conn.last_health_check = Some(now);
        if health.healthy {
            conn.token_expires_at = health.token_expires_at;
            conn.refresh_token_expires_at = health.refresh_token_expires_at;
            self.save(&conn)?;
            // Usage is not tracked yet (no action uses a connection), so
            // every connection counts as dormant: keep its window alive.
            let plan = policy::plan_refresh(&health, None, now, &self.args.refresh);
            if let Some(days) = plan.reauth_in_days {
                let _ = self.args.events.send(ConnectionEvent::ReauthSuggested {
                    connection_id: id.to_owned(),
                    days,
                });
            }
            if plan.refresh_now {
                self.refresh(&mut conn, plan.dormant_refresh).await?;
            } else if let Some(at) = plan.next_check {
                self.schedule_refresh(id, at).await;
            }
        } else {
            self.save(&conn)?;
            self.recover(&mut conn, &health).await?;
        }
        let _ = self.args.events.send(ConnectionEvent::Checked {
            connection_id: id.to_owned(),
            healthy: health.healthy,
            status: conn.status,
        });
        Ok(Some(health))
    }

    /// §5.10.4 auto-recovery: refresh (token errors), then recover, then
    /// surface — each at most once.
    async fn recover(
        &self,
        conn: &mut Connection,
        health: &HealthCheckResult,
    ) -> Result<(), StoreError> {
        let (mut tried_refresh, mut tried_recover) = (false, false);
        let mut last_failure: Option<ConnectionFailure> = None;
        loop {
            match policy::next_recovery_step(
                health.error.as_deref(),
                tried_refresh,
                tried_recover,
                self.args.auto_recovery,
            ) {
                RecoveryStep::Refresh => {
                    tried_refresh = true;
                    if self.refresh(conn, false).await? {
                        self.audit(
                            "connection.recovered",
                            json!({"connection_id": conn.connection_id, "by": "refresh"}),
                        )?;
                        return Ok(());
                    }
                }
                RecoveryStep::Recover => {
                    tried_recover = true;
                    match self.args.scripts.recover(conn).await {
                        Ok(()) => {
                            self.audit(
                                "connection.recovered",
                                json!({"connection_id": conn.connection_id, "by": "recover"}),
                            )?;
                            return Ok(());
                        }
                        // A structured failure is what the owner should
                        // read; a script that could not run (a skill with no
                        // recover.py) leaves the health check's own error.
                        Err(ScriptError::Failed(f)) => last_failure = Some(f),
                        Err(e) => tracing::warn!(
                            connection_id = %conn.connection_id, "recovery not run: {e}"
                        ),
                    }
                }
                RecoveryStep::Surface => break,
            }
        }
        let mut failure = last_failure.unwrap_or_else(|| ConnectionFailure {
            failure_type: ConnectionFailureType::Unknown,
            service: conn.name.clone(),
            message: health
                .error
                .clone()
                .unwrap_or_else(|| "health check failed".into()),
            recovery_options: Vec::new(),
        });
        if failure.recovery_options.is_empty() {
            let (message, options) = policy::failure_card(failure.failure_type, &conn.name, None);
            failure.recovery_options = options;
            if failure.message.is_empty() {
                failure.message = message;
            }
        }
        conn.status = ConnectionStatus::Failed;
        self.save(conn)?;
        // The failure type only: script messages may quote service text.
        self.audit(
            "connection.failed",
            json!({"connection_id": conn.connection_id, "failure_type": failure.failure_type}),
        )?;
        let _ = self.args.events.send(ConnectionEvent::Failure {
            connection_id: conn.connection_id.clone(),
            failure,
        });
        // Its health job goes away with the `active` status.
        self.sync_scheduler();
        Ok(())
    }
}

impl Actor for ConnectionManager {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ConnectionArgs,
    ) -> Result<ConnectionState, ActorProcessingErr> {
        // Nothing to rebuild but a readable registry: fail (and be
        // restarted) if the store cannot be read.
        let n = args.store.records::<Connection>().len()?;
        tracing::info!(connections = n, "connection manager started");
        Ok(ConnectionState { args })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: ConnectionMsg,
        state: &mut ConnectionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ConnectionMsg::HealthCheck(id) => {
                state.health_check(&id).await?;
            }
            ConnectionMsg::Refresh(id) => {
                if let Some(mut conn) = state.load(&id)?
                    && conn.status == ConnectionStatus::Active
                {
                    let plan = policy::plan_refresh(
                        &HealthCheckResult {
                            healthy: true,
                            token_expires_at: conn.token_expires_at,
                            refresh_token_expires_at: conn.refresh_token_expires_at,
                            latency_ms: 0,
                            error: None,
                            warnings: Vec::new(),
                        },
                        None,
                        Timestamp::now(),
                        &state.args.refresh,
                    );
                    if plan.refresh_now {
                        state.refresh(&mut conn, plan.dormant_refresh).await?;
                    } else if let Some(at) = plan.next_check {
                        state.schedule_refresh(&id, at).await;
                    }
                }
            }
            ConnectionMsg::CheckAll(reply) => {
                let mut out = Vec::new();
                for conn in state.args.store.records::<Connection>().list()? {
                    if let Some(h) = state.health_check(&conn.connection_id).await? {
                        out.push((conn.connection_id, h));
                    }
                }
                let _ = reply.send(out);
            }
            ConnectionMsg::Register(conn, reply) => {
                let r = if conn.connection_id.trim().is_empty() {
                    Err(ConnectionError::Invalid("connection_id is empty".into()))
                } else if !conn.health_check.trim().is_empty()
                    && let Err(e) = Trigger::parse(&conn.health_check)
                {
                    Err(ConnectionError::Invalid(e.to_string()))
                } else {
                    // `initial_permissions` is immutable after first setup.
                    let mut conn = conn;
                    if let Some(old) = state.load(&conn.connection_id)? {
                        conn.initial_permissions = old.initial_permissions;
                    }
                    state.save(&conn)?;
                    state.audit(
                        "connection.registered",
                        json!({"connection_id": conn.connection_id, "skill": conn.skill_name,
                               "status": conn.status}),
                    )?;
                    state.sync_scheduler();
                    if let Some(at) = policy::next_refresh_check(
                        conn.token_expires_at,
                        Timestamp::now(),
                        &state.args.refresh,
                    ) {
                        state.schedule_refresh(&conn.connection_id, at).await;
                    }
                    Ok(())
                };
                let _ = reply.send(r);
            }
            ConnectionMsg::List(domain, reply) => {
                let all = state.args.store.records::<Connection>().list()?;
                let _ = reply.send(
                    all.into_iter()
                        .filter(|c| domain.as_deref().is_none_or(|d| c.domain == d))
                        .collect(),
                );
            }
            ConnectionMsg::InjectPanic => panic!("injected connection manager panic"),
        }
        Ok(())
    }
}

/// Surfaces every [`ConnectionEvent::Failure`] to the owner as a
/// `connection_failure` card through the Stream (§5.10.4: failures reach
/// the owner, not a log). Each card is asked on its own task, so a slow
/// answer never holds up the next failure; the answer is audited
/// (`connection_failure_answered`, the chosen action only). `stream` looks
/// the Stream up per failure (the daemon's `StreamHandle::find`), so its
/// restarts are followed. Ends when the event
/// channel closes.
pub async fn surface_failures(
    mut events: broadcast::Receiver<ConnectionEvent>,
    stream: impl Fn() -> Option<crate::stream::StreamHandle> + Send + 'static,
    store: Store,
    timeouts: crate::cards::CardTimeouts,
) {
    loop {
        let (connection_id, failure) = match events.recv().await {
            Ok(ConnectionEvent::Failure {
                connection_id,
                failure,
            }) => (connection_id, failure),
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "connection events lagged");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let request_id = match crate::approval::random_id() {
            Ok(id) => format!("conn-fail-{id}"),
            Err(e) => {
                tracing::error!("no id for a connection failure card: {e}");
                continue;
            }
        };
        let card = crate::cards::connection_failure_card(
            &request_id,
            &connection_id,
            &failure,
            Timestamp::now(),
            &timeouts,
        );
        let Some(stream) = stream() else {
            tracing::error!(%connection_id, "connection failure not shown: the Stream is not running");
            continue;
        };
        let store = store.clone();
        tokio::spawn(async move {
            match stream.ask(card, &timeouts).await {
                Ok(answer) => {
                    let action = match &answer.response {
                        silas_core::cards::CardResponse::Recovery { selected_action } => {
                            selected_action.clone()
                        }
                        _ => "skip".into(),
                    };
                    let data = json!({"connection_id": connection_id, "request_id": request_id,
                                      "action": action});
                    if let serde_json::Value::Object(o) = data
                        && let Err(e) = store.audit().log("connection_failure_answered", o)
                    {
                        tracing::error!("audit write failed: {e}");
                    }
                }
                Err(e) => tracing::warn!(%connection_id, "connection failure card not shown: {e}"),
            }
        });
    }
}
