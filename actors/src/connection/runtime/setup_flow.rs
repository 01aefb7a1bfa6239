//! The setup conversation of a connection (§5.10.1, §5.10.2): the
//! `scripts/setup.py` process run to its end, each step it prints shown to
//! the owner as a card (device code, browser redirect, secure input), and
//! the connection's record written from the outcome — active with its
//! permissions on `done`, back to `proposed` otherwise. Split from
//! `runtime.rs` (script staging and the one-shot scripts) along that seam.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::json;
use silas_core::cards::{CardPayload, CardResponse, ConnectionSetupCard};
use silas_core::model::connections::{AuthStrategy, Connection, ConnectionStatus};
use silas_core::{Coded, Timestamp};
use silas_execution::connection_setup::{self as setup, SecretSink, SecureAnswer, SetupStep};
use silas_skill::manifest::AuthStrategy as SkillAuth;
use silas_storage::{CardAudience, PendingCard};
use tokio::sync::{mpsc, watch};

use super::{
    ConnectionRuntime, ConnectionSetupError, SETUP_SCRIPT, connection_id_for, not_completed, obj,
};
use crate::connection::ConnectionMsg;
use crate::stream::StreamHandle;

impl ConnectionRuntime {
    /// Start a setup conversation for the installed connection skill
    /// `skill` (§5.10.1). Checks everything that can be checked now, then
    /// runs the conversation in the background; returns the connection id.
    pub async fn start_setup(
        self: &Arc<Self>,
        skill: &str,
        settings: BTreeMap<String, String>,
    ) -> Result<String, ConnectionSetupError> {
        let checked = self.connection_skill(skill)?;
        Self::settings_env(&checked, &settings)?;
        let auth = match checked.manifest.auth_strategy {
            Some(SkillAuth::DeviceCode) => AuthStrategy::DeviceCode,
            Some(SkillAuth::BrowserRedirect) => AuthStrategy::BrowserRedirect,
            Some(SkillAuth::SecureInput) => AuthStrategy::SecureInput,
            None => {
                return Err(ConnectionSetupError::Invalid(format!(
                    "connection skill {skill} declares no auth_strategy"
                )));
            }
        };
        let stream = (self.args.stream)()
            .ok_or_else(|| ConnectionSetupError::Unavailable("the Stream is not running".into()))?;
        let id = connection_id_for(skill);
        {
            let mut running = self
                .running
                .lock()
                .map_err(|_| ConnectionSetupError::Unavailable("setup registry poisoned".into()))?;
            if !running.insert(id.clone()) {
                return Err(ConnectionSetupError::Invalid(format!(
                    "a setup of {skill} is already running"
                )));
            }
        }
        let m = &checked.manifest;
        let conn = Connection {
            connection_id: id.clone(),
            name: m
                .ui
                .as_ref()
                .and_then(|u| u.display_name.clone())
                .unwrap_or_else(|| skill.to_string()),
            domain: "personal".into(),
            skill_name: skill.to_string(),
            auth_strategy: auth,
            permissions: Vec::new(),
            permissions_granted: Vec::new(),
            permissions_available: m.available_permissions.clone(),
            initial_permissions: m.initial_permissions.clone(),
            status: ConnectionStatus::Connecting,
            // Empty: `connections.health_check_default` applies.
            health_check: String::new(),
            token_expires_at: None,
            refresh_token_expires_at: None,
            last_health_check: None,
            last_refresh: None,
            settings,
        };
        if let Err(e) = self.register(conn.clone()).await {
            self.finish(&id);
            return Err(e);
        }
        self.audit(
            "connection.setup_started",
            json!({"connection_id": id, "skill": skill, "content_hash": checked.content_hash}),
        );
        let this = self.clone();
        tokio::spawn(async move { this.conversation(conn, stream, Vec::new()).await });
        Ok(id)
    }

    fn finish(&self, id: &str) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(id);
        }
    }

    async fn register(&self, conn: Connection) -> Result<(), ConnectionSetupError> {
        let cell = ractor::registry::where_is(self.args.manager.clone()).ok_or_else(|| {
            ConnectionSetupError::Unavailable("the connection manager is not running".into())
        })?;
        let actor: ractor::ActorRef<ConnectionMsg> = cell.into();
        ractor::call_t!(actor, |r| ConnectionMsg::Register(conn, r), 10_000)
            .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?
            .map_err(|e| ConnectionSetupError::Invalid(e.to_string()))
    }

    /// The conversation to its end, then the record: active with its
    /// permissions on `done`, back to `proposed` otherwise.
    async fn conversation(
        self: Arc<Self>,
        mut conn: Connection,
        stream: StreamHandle,
        incremental_scopes: Vec<String>,
    ) -> Result<(), ConnectionSetupError> {
        let result = self
            .run_setup_flow(&conn, &stream, &incremental_scopes)
            .await;
        self.finish(&conn.connection_id);
        match result {
            Ok(stored) => {
                conn.status = ConnectionStatus::Active;
                let mut granted: BTreeSet<String> =
                    conn.permissions_granted.iter().cloned().collect();
                granted.extend(conn.initial_permissions.iter().cloned());
                granted.extend(incremental_scopes.iter().cloned());
                conn.permissions_granted = granted.into_iter().collect();
                self.register(conn.clone()).await?;
                self.audit(
                    "connection.setup_completed",
                    json!({"connection_id": conn.connection_id, "skill": conn.skill_name,
                           "secrets_stored": stored.len(),
                           "permissions_granted": conn.permissions_granted}),
                );
                Ok(())
            }
            Err(e) => {
                let (reason, detail, said) = match &e {
                    ConnectionSetupError::NotCompleted { kind, detail, said } => {
                        (*kind, detail.clone(), said.clone())
                    }
                    _ => ("refused", None, None),
                };
                if incremental_scopes.is_empty() {
                    conn.status = ConnectionStatus::Proposed;
                    let _ = self.register(conn.clone()).await;
                }
                self.audit(
                    "connection.setup_failed",
                    json!({"connection_id": conn.connection_id, "skill": conn.skill_name,
                           "reason": reason, "detail": detail, "code": e.code().as_str()}),
                );
                // The setup ran in the background: without this the owner
                // saw its cards stop and nothing else.
                let told = detail.or(said.map(|s| format!("it said: {s}")));
                stream.notify_owner(format!(
                    "{}. No token was kept; `silas connection add {}` starts it again.",
                    crate::activity::outside::setup_failed_text(
                        &conn.skill_name,
                        Some(reason),
                        told.as_deref()
                    ),
                    conn.skill_name
                ));
                Err(e)
            }
        }
    }

    async fn run_setup_flow(
        self: &Arc<Self>,
        conn: &Connection,
        stream: &StreamHandle,
        incremental_scopes: &[String],
    ) -> Result<Vec<String>, ConnectionSetupError> {
        let staged = self.stage(&conn.skill_name, "setup")?;
        let mut env = Self::settings_env(&staged.skill, &conn.settings)?;
        env.push(("CONNECTION_ID".into(), conn.connection_id.clone()));
        if !incremental_scopes.is_empty() {
            env.push((
                "CONNECTION_INCREMENTAL_SCOPES".into(),
                incremental_scopes.join(" "),
            ));
        }
        let (launch, proxy) = self
            .launch(&staged, SETUP_SCRIPT, env, self.args.setup_timeout)
            .await?;
        let (step_tx, mut step_rx) = mpsc::channel::<SetupStep>(8);
        let (answer_tx, answer_rx) = mpsc::channel::<SecureAnswer>(4);
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let cancel_tx = Arc::new(cancel_tx);
        // The owner's side: each step becomes a card, answered on its own
        // task; their ids, to withdraw what is still open when it ends.
        let shown: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let owner = {
            let this = self.clone();
            let stream = stream.clone();
            let cancel = cancel_tx.clone();
            let service = conn.name.clone();
            let shown = shown.clone();
            tokio::spawn(async move {
                while let Some(step) = step_rx.recv().await {
                    if let Some(id) = this.show_step(step, &service, &stream, &cancel, &answer_tx)
                        && let Ok(mut ids) = shown.lock()
                    {
                        ids.push(id);
                    }
                }
            })
        };
        // The daemon stopping or the setup timeout cancels.
        // Set when the watchdog's cancel is the setup timeout (the owner is
        // told it timed out, not that it was cancelled).
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchdog = {
            let mut stop = self.args.stop.clone();
            let cancel = cancel_tx.clone();
            let timeout = self.args.setup_timeout;
            let timed_out = timed_out.clone();
            tokio::spawn(async move {
                let stopped = async {
                    // A dropped sender is no stop signal (the guard is
                    // released before waiting on).
                    let signalled = stop.wait_for(|s| *s).await.is_ok();
                    if !signalled {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    _ = stopped => {}
                    _ = tokio::time::sleep(timeout) => {
                        timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                let _ = cancel.send(true);
            })
        };
        let secrets: &dyn SecretSink = &*self.args.secrets;
        let result = setup::run_setup(
            &self.args.sandbox,
            &launch,
            secrets,
            step_tx,
            answer_rx,
            cancel_rx,
        )
        .await;
        watchdog.abort();
        owner.abort();
        self.audit_refused_egress(conn, SETUP_SCRIPT, proxy.as_ref());
        // Done, failed, timed out or cancelled: its steps no longer need
        // answers (before, a device-code card was shown again, with a
        // fresh countdown, on every reconnect until a restart).
        let open = shown.lock().map(|ids| ids.clone()).unwrap_or_default();
        stream.withdraw_cards(open);
        let timed_out = timed_out.load(std::sync::atomic::Ordering::SeqCst);
        let stored = result.map_err(|e| not_completed(&e, timed_out))?;
        // Every auth strategy hands over a credential: a first setup that
        // says `done` without one would be an active connection whose every
        // call fails. A re-authorisation (more scopes) may keep the token
        // it has.
        if stored.is_empty() && incremental_scopes.is_empty() && self.access_token(conn).is_none() {
            return Err(ConnectionSetupError::NotCompleted {
                kind: "no_credential",
                detail: Some("its script said done without handing over a credential".into()),
                said: None,
            });
        }
        Ok(stored)
    }

    fn card(&self, request_id: String, payload: CardPayload) -> PendingCard {
        let now = Timestamp::now();
        let ttl = chrono::Duration::from_std(self.args.timeouts.plan)
            .unwrap_or(chrono::Duration::seconds(300));
        PendingCard {
            request_id,
            scope_id: crate::turn::OWNER_SCOPE.to_string(),
            card: payload,
            created_at: now,
            expires_at: now.plus(ttl),
            audience: CardAudience::Owner,
        }
    }

    /// One step to the owner. A card answered `cancel` (also its safe
    /// default on timeout, disconnect or shutdown) cancels the setup.
    fn show_step(
        self: &Arc<Self>,
        step: SetupStep,
        service: &str,
        stream: &StreamHandle,
        cancel: &Arc<watch::Sender<bool>>,
        answers: &mpsc::Sender<SecureAnswer>,
    ) -> Option<String> {
        let Ok(id) = crate::approval::random_id() else {
            let _ = cancel.send(true);
            return None;
        };
        let (step_type, fields) = match step {
            SetupStep::DeviceCode {
                verification_uri,
                user_code,
                expires_in,
            } => (
                "device_code",
                json!({"verification_url": verification_uri, "user_code": user_code,
                       "expires_in": expires_in, "service": service}),
            ),
            SetupStep::BrowserRedirect { url } => (
                "browser_redirect",
                json!({"auth_url": url, "listening_on": "", "service": service}),
            ),
            SetupStep::SecureInput { field, prompt } => {
                let request_id = format!("sec-{id}");
                self.ask_secret(request_id.clone(), field, prompt, stream, cancel, answers);
                return Some(request_id);
            }
            SetupStep::Progress { .. } => {
                // Script text: not logged (it may quote service output).
                tracing::debug!(%service, "connection setup progress");
                return None;
            }
        };
        let request_id = format!("conn-step-{id}");
        let card = self.card(
            request_id.clone(),
            CardPayload::ConnectionSetup(ConnectionSetupCard {
                step_type: step_type.into(),
                fields: obj(fields),
            }),
        );
        let (stream, cancel, timeouts) = (stream.clone(), cancel.clone(), self.args.timeouts);
        tokio::spawn(async move {
            let cancelled = match stream.ask(card, &timeouts).await {
                Ok(a) => {
                    matches!(a.response, CardResponse::SetupAction { ref action, .. } if action == "cancel")
                }
                Err(e) => {
                    tracing::warn!("connection setup card not shown: {e}");
                    true
                }
            };
            if cancelled {
                let _ = cancel.send(true);
            }
        });
        Some(request_id)
    }

    /// A secure input step: the owner stores the value through
    /// `/secrets/{ref_id}`; it is read from the store once, handed to the
    /// script on its stdin, and the temporary ref removed.
    fn ask_secret(
        self: &Arc<Self>,
        ref_id: String,
        field: String,
        prompt: String,
        stream: &StreamHandle,
        cancel: &Arc<watch::Sender<bool>>,
        answers: &mpsc::Sender<SecureAnswer>,
    ) {
        let timeouts = self.args.timeouts;
        let card = crate::cards::secure_input_card(
            &ref_id,
            crate::turn::OWNER_SCOPE,
            &prompt,
            None,
            json!({"instructions": prompt}),
            Timestamp::now(),
            &timeouts,
        );
        let (this, stream, cancel, answers) = (
            self.clone(),
            stream.clone(),
            cancel.clone(),
            answers.clone(),
        );
        tokio::spawn(async move {
            let stored = matches!(
                stream.ask(card, &timeouts).await,
                Ok(a) if a.response == CardResponse::SecureInput { success: true }
            );
            let value = if stored {
                this.args.secrets.get(&ref_id).ok()
            } else {
                None
            };
            this.args.secrets.remove(&ref_id);
            match value {
                Some(v) => {
                    let value = String::from_utf8_lossy(&v).into_owned();
                    if answers.send(SecureAnswer { field, value }).await.is_err() {
                        let _ = cancel.send(true);
                    }
                }
                None => {
                    let _ = cancel.send(true);
                }
            }
        });
    }

    /// §5.10.2 re-authorisation with more scopes: the setup conversation
    /// again with `CONNECTION_INCREMENTAL_SCOPES`; on `done` the scopes
    /// join `permissions_granted`.
    pub(crate) async fn reauthorise(
        self: &Arc<Self>,
        conn: Connection,
        scopes: Vec<String>,
    ) -> Result<(), ConnectionSetupError> {
        let stream = (self.args.stream)()
            .ok_or_else(|| ConnectionSetupError::Unavailable("the Stream is not running".into()))?;
        {
            let mut running = self
                .running
                .lock()
                .map_err(|_| ConnectionSetupError::Unavailable("setup registry poisoned".into()))?;
            if !running.insert(conn.connection_id.clone()) {
                return Err(ConnectionSetupError::Invalid(format!(
                    "a setup of {} is already running",
                    conn.skill_name
                )));
            }
        }
        self.clone().conversation(conn, stream, scopes).await
    }
}
