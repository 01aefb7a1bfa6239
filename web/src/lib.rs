//! `silas-web`: the web channel's HTTP/WebSocket server (warp, spec §8.1).
//!
//! Routes: `GET /health`, `GET /ws` (the typed protocol of [`protocol`], with
//! the session rules of [`ws`]), `POST /secrets/{ref_id}` (secure input that
//! never touches the WebSocket or the agent), and the PWA shell embedded by
//! [`assets`] (`GET /`, `/app.js`, …). Every HTTP response, errors included,
//! carries the security headers of [`assets::SECURITY_HEADERS`]. It binds loopback by default,
//! refuses a non-loopback bind without an auth token (defence in depth behind
//! config validation), refuses requests whose `Host`/`Origin` are not this
//! server, and on shutdown closes every session with 1001. The runtime plugs
//! in through [`ws::WebBackend`] and [`ws::SecretSink`].
//!
//! **Architecture invariant:** no business logic here — the server reads
//! shared counters and forwards frames; decisions live in the actors.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use silas_core::{Coded, ErrorCode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warp::Filter;
use warp::http::StatusCode;

pub mod assets;
pub mod protocol;
pub mod ws;

use ws::{NoSecrets, SecretSink, SecretStoreError, Unattached, WebBackend, WebState};

/// What the server needs from the configuration.
#[derive(Clone, Debug)]
pub struct WebSettings {
    pub host: String,
    pub port: u16,
    pub auth_token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("channels.web.auth_token: required to bind non-loopback address {host}")]
    RemoteBindWithoutToken { host: String },
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

impl Coded for WebError {
    fn code(&self) -> ErrorCode {
        match self {
            WebError::RemoteBindWithoutToken { .. } => ErrorCode::ECfgInvalid,
            WebError::Bind { .. } => ErrorCode::EChannelProtocol,
        }
    }
}

/// Live counters the health endpoint reports.
#[derive(Debug, Default)]
pub struct HealthState {
    connections: AtomicUsize,
}

impl HealthState {
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        // Saturating: a stray close never wraps the counter.
        let _ = self
            .connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }
}

#[derive(Serialize)]
struct HealthBody {
    status: &'static str,
    connections: usize,
    /// Turn-queue pressure (§18.6); absent until a runtime is attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<ws::QueuePressure>,
}

/// Whether a configured host is a loopback address (`localhost`, 127/8, ::1).
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// A bound, not yet serving, server.
pub struct BoundServer {
    listener: TcpListener,
    health: Arc<HealthState>,
    settings: WebSettings,
    backend: Arc<dyn WebBackend>,
    secrets: Arc<dyn SecretSink>,
    model: Option<protocol::ModelInfo>,
    customer_scopes: bool,
}

/// Bind the listener (port 0 picks a free port).
pub async fn bind(
    settings: &WebSettings,
    health: Arc<HealthState>,
) -> Result<BoundServer, WebError> {
    let has_token = settings
        .auth_token
        .as_deref()
        .is_some_and(|t| !t.is_empty());
    if !is_loopback_host(&settings.host) && !has_token {
        return Err(WebError::RemoteBindWithoutToken {
            host: settings.host.clone(),
        });
    }
    let host = if settings.host.eq_ignore_ascii_case("localhost") {
        "127.0.0.1"
    } else {
        settings.host.trim_start_matches('[').trim_end_matches(']')
    };
    let addr = format!("{host}:{}", settings.port);
    let listener = TcpListener::bind(addr.as_str())
        .await
        .map_err(|source| WebError::Bind { addr, source })?;
    Ok(BoundServer {
        listener,
        health,
        settings: settings.clone(),
        backend: Arc::new(Unattached),
        secrets: Arc::new(NoSecrets),
        model: None,
        customer_scopes: false,
    })
}

impl BoundServer {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Attach the runtime behind the WebSocket and the secure-input endpoint.
    pub fn attach(mut self, backend: Arc<dyn WebBackend>, secrets: Arc<dyn SecretSink>) -> Self {
        self.backend = backend;
        self.secrets = secrets;
        self
    }

    /// Announce the serving model in every `auth_ok` (the UI labels offline mode).
    pub fn with_model(mut self, model: protocol::ModelInfo) -> Self {
        self.model = Some(model);
        self
    }

    /// Chatbot deployment: connections without the owner token (in the
    /// subprotocol header) are accepted as customers, each in its own scope.
    pub fn with_customer_scopes(mut self, on: bool) -> Self {
        self.customer_scopes = on;
        self
    }

    /// `host:port` names this server answers to.
    fn own_hosts(&self) -> Vec<String> {
        let port = self
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(self.settings.port);
        let mut hosts = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        let configured = self.settings.host.to_ascii_lowercase();
        if !is_loopback_host(&configured) {
            hosts.push(format!("{configured}:{port}"));
        }
        hosts
    }

    /// Serve until `shutdown` resolves: in-flight requests finish, WebSocket
    /// sessions are closed with 1001 (given up to 2 s to say goodbye).
    pub fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let (tx, rx) = watch::channel(false);
        let own_hosts = self.own_hosts();
        let health = self.health.clone();
        let mut state = WebState::new(
            self.settings.auth_token.clone(),
            own_hosts,
            self.backend,
            self.secrets,
            self.health,
            rx.clone(),
        );
        state.model = self.model;
        state.customer_scopes = self.customer_scopes;
        let state = Arc::new(state);
        let routes = routes(state);
        let mut stop = rx;
        let server = warp::serve(routes)
            .incoming(self.listener)
            .graceful(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
        tokio::spawn(async move {
            let trigger = async move {
                shutdown.await;
                let _ = tx.send(true);
            };
            tokio::join!(server.run(), trigger);
            // warp does not track upgraded connections: wait for sessions here.
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
            while health.connections() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    }
}

#[derive(Deserialize)]
struct SecretBody {
    value: String,
}

fn json_status(
    status: StatusCode,
    body: serde_json::Value,
) -> warp::reply::WithStatus<warp::reply::Json> {
    warp::reply::with_status(warp::reply::json(&body), status)
}

fn routes(
    state: Arc<WebState>,
) -> impl Filter<Extract = (impl warp::Reply,), Error = std::convert::Infallible> + Clone {
    let with_state = {
        let s = state.clone();
        warp::any().map(move || s.clone())
    };
    let health = warp::path("health")
        .and(warp::path::end())
        .and(warp::get())
        .and(with_state.clone())
        .then(|state: Arc<WebState>| async move {
            let queue = state.backend.queue_pressure().await;
            warp::reply::json(&HealthBody {
                status: "ok",
                connections: state.health.connections(),
                queue,
            })
        });

    let ws = warp::path("ws")
        .and(warp::path::end())
        .and(warp::header::optional::<String>("host"))
        .and(warp::header::optional::<String>("origin"))
        .and(warp::header::optional::<String>("sec-websocket-protocol"))
        .and(warp::addr::remote())
        .and(warp::ws())
        .and(with_state.clone())
        .map(
            |host: Option<String>,
             origin: Option<String>,
             protocols: Option<String>,
             remote: Option<SocketAddr>,
             upgrade: warp::ws::Ws,
             state: Arc<WebState>| {
                if let Err(why) =
                    ws::request_allowed(&state.own_hosts, host.as_deref(), origin.as_deref())
                {
                    let reply =
                        json_status(StatusCode::FORBIDDEN, serde_json::json!({"error": why}));
                    return Box::new(reply) as Box<dyn warp::Reply>;
                }
                let (token, ours) = ws::subprotocol_token(protocols.as_deref());
                let reply = upgrade
                    .max_message_size(protocol::MAX_FRAME_BYTES)
                    .on_upgrade(move |socket| {
                        ws::session(socket, state, token, remote.map(|r| r.ip()))
                    });
                if ours {
                    // Browsers drop a socket whose offered subprotocol is not echoed.
                    Box::new(warp::reply::with_header(
                        reply,
                        "sec-websocket-protocol",
                        ws::SUBPROTOCOL,
                    ))
                } else {
                    Box::new(reply)
                }
            },
        );

    let secrets = warp::path!("secrets" / String)
        .and(warp::post())
        .and(warp::header::optional::<String>("host"))
        .and(warp::header::optional::<String>("origin"))
        .and(warp::header::optional::<String>("authorization"))
        .and(warp::body::content_length_limit(16 * 1024))
        .and(warp::body::json::<SecretBody>())
        .and(with_state)
        .map(
            |ref_id: String,
             host: Option<String>,
             origin: Option<String>,
             auth: Option<String>,
             body: SecretBody,
             state: Arc<WebState>| {
                // Consumed into a zeroizing buffer at once; never logged or echoed.
                let value = zeroize::Zeroizing::new(body.value);
                if let Err(why) =
                    ws::request_allowed(&state.own_hosts, host.as_deref(), origin.as_deref())
                {
                    return json_status(StatusCode::FORBIDDEN, serde_json::json!({"error": why}));
                }
                if let Some(expected) = &state.token {
                    let given = auth
                        .as_deref()
                        .and_then(|a| a.strip_prefix("Bearer "))
                        .unwrap_or("");
                    if !ws::token_eq(given, expected) {
                        return json_status(
                            StatusCode::UNAUTHORIZED,
                            serde_json::json!({"error": "unauthorized"}),
                        );
                    }
                }
                match state.secrets.store(&ref_id, value) {
                    Ok(()) => json_status(StatusCode::OK, serde_json::json!({"stored": true})),
                    Err(SecretStoreError::UnknownRef) => json_status(
                        StatusCode::NOT_FOUND,
                        serde_json::json!({"error": "unknown ref_id"}),
                    ),
                    Err(SecretStoreError::AlreadyFulfilled) => json_status(
                        StatusCode::CONFLICT,
                        serde_json::json!({"error": "already fulfilled"}),
                    ),
                    Err(SecretStoreError::Failed) => json_status(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        serde_json::json!({"error": "could not store the secret"}),
                    ),
                }
            },
        );

    health
        .or(ws)
        .or(secrets)
        .or(assets::routes())
        .recover(assets::recover)
        .map(assets::with_security_headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        for h in [
            "127.0.0.1",
            "127.8.9.10",
            "localhost",
            "::1",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["0.0.0.0", "192.168.1.10", "::", "example.org", ""] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn connection_counter_saturates() {
        let h = HealthState::default();
        h.connection_closed();
        assert_eq!(h.connections(), 0);
        h.connection_opened();
        h.connection_opened();
        h.connection_closed();
        assert_eq!(h.connections(), 1);
    }
}
