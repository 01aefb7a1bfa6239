//! `silas-web`: the web channel's HTTP/WebSocket server (warp, spec §8.1).
//!
//! Routes: `GET /health`, `GET /ws` (the typed protocol of [`protocol`], with
//! the session rules of [`ws`]), `POST /secrets/{ref_id}` (secure input that
//! never touches the WebSocket or the agent), the owner-device routes of
//! [`auth`] (`POST /pair` exchanges a one-time pairing code for a device
//! credential; `GET /devices`, `POST /devices/pair`, `POST
//! /devices/{id}/revoke` take an owner credential as `Authorization: Bearer`),
//! and the PWA shell embedded by
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
use warp::http::StatusCode;
use warp::{Filter, Reply};

pub mod aliases;
pub mod assets;
pub mod auth;
mod body;
pub mod cards;
pub mod control;
pub mod customers;
pub mod protocol;
mod server;
pub mod ws;

use auth::{AuthOutcome, Credential, OwnerAuth, RedeemError};
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
    /// Names the server (`silas doctor` tells a port held by a Silas daemon
    /// from one held by something else, without a credential).
    service: &'static str,
    connections: usize,
    /// Turn-queue pressure (§18.6); absent until a runtime is attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<ws::QueuePressure>,
    /// Model providers' circuit breakers (issue #16): names and states only.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    providers: std::collections::BTreeMap<String, String>,
    /// Other channels (Telegram): a state line each.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    channels: std::collections::BTreeMap<String, String>,
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
    /// `None`: the configuration's defaults.
    customer_caps: Option<(u32, u32)>,
    auth: Option<Arc<OwnerAuth>>,
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
        customer_caps: None,
        auth: None,
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

    /// `limits.customer_connections_per_ip` and `_total` (see
    /// [`customers`]).
    pub fn with_customer_caps(mut self, per_ip: u32, total: u32) -> Self {
        self.customer_caps = Some((per_ip, total));
        self
    }

    /// The owner credentials (devices, pairing codes, throttle). Without
    /// it the server knows only the configured `auth_token`, if any.
    pub fn with_auth(mut self, auth: Arc<OwnerAuth>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// `http://host:port/` as a browser on this machine (or, for a
    /// non-loopback bind, on the network) reaches this server.
    pub fn base_url(&self) -> String {
        let port = self
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(self.settings.port);
        let host = self.settings.host.to_ascii_lowercase();
        let unspecified = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        let host = if unspecified || host.is_empty() {
            "127.0.0.1".to_string()
        } else {
            host
        };
        format!("http://{host}:{port}/")
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
        let auth = self
            .auth
            .clone()
            .unwrap_or_else(|| Arc::new(OwnerAuth::ephemeral(self.settings.auth_token.clone())));
        let base_url = self.base_url();
        let mut state = WebState::new(
            auth,
            own_hosts,
            self.backend,
            self.secrets,
            self.health,
            rx.clone(),
        );
        state.model = self.model;
        state.customer_scopes = self.customer_scopes;
        if let Some((per_ip, total)) = self.customer_caps {
            state.customers = customers::CustomerConnections::new(per_ip, total);
        }
        state.base_url = base_url;
        let state = Arc::new(state);
        let routes = routes(state);
        let listener = self.listener;
        tokio::spawn(async move {
            let trigger = async move {
                shutdown.await;
                let _ = tx.send(true);
            };
            let header_timeout = server::HEADER_READ_TIMEOUT;
            tokio::join!(
                server::run(listener, warp::service(routes), rx, header_timeout),
                trigger
            );
            // Upgraded connections are sessions now: wait for them here.
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

type JsonReply = warp::reply::WithStatus<warp::reply::Json>;

/// The largest pairing request body (a code and a label).
const PAIR_BODY_MAX: usize = 4 * 1024;
/// The largest secure-input body.
const SECRET_BODY_MAX: usize = 16 * 1024;

/// The reply to a body that was not read.
fn body_refused(e: &body::BodyError) -> JsonReply {
    json_status(e.status(), serde_json::json!({"error": e.message()}))
}

/// `Authorization: Bearer <owner credential>`, checked like a socket's:
/// Host/Origin first, then the throttle, then the comparison.
fn owner_http(
    state: &WebState,
    host: Option<String>,
    origin: Option<String>,
    authorization: Option<String>,
    remote: Option<SocketAddr>,
    channel: &str,
) -> Result<Credential, JsonReply> {
    if let Err(why) = ws::request_allowed(&state.own_hosts, host.as_deref(), origin.as_deref()) {
        return Err(json_status(
            StatusCode::FORBIDDEN,
            serde_json::json!({"error": why}),
        ));
    }
    let token = authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "));
    match state.auth.check(remote.map(|r| r.ip()), token, channel) {
        AuthOutcome::Owner(c) => Ok(c),
        AuthOutcome::Throttled => Err(json_status(
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({"error": "too many failed attempts; try again in a minute"}),
        )),
        AuthOutcome::Refused => Err(json_status(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": "unauthorized"}),
        )),
    }
}

#[derive(Deserialize)]
struct PairBody {
    code: String,
    #[serde(default)]
    label: Option<String>,
}

/// A pairing link: the code rides in the fragment, which browsers never
/// send to a server (nor put in a Referer).
pub fn pairing_link(base_url: &str, code: &str) -> String {
    format!("{base_url}#pair={code}")
}

fn device_json(d: &silas_core::model::devices::OwnerDevice) -> serde_json::Value {
    // Never the token hash: nothing a client needs.
    serde_json::json!({
        "device_id": d.device_id,
        "label": d.label,
        "created_at": d.created_at,
        "last_seen": d.last_seen,
        "revoked": d.revoked,
    })
}

/// `POST /pair`, `GET /devices`, `POST /devices/pair`, `POST /devices/{id}/revoke`.
fn device_routes(
    with_state: impl Filter<Extract = (Arc<WebState>,), Error = std::convert::Infallible>
    + Clone
    + Send
    + Sync
    + 'static,
) -> impl Filter<Extract = (JsonReply,), Error = warp::Rejection> + Clone {
    let guard = warp::header::optional::<String>("host")
        .and(warp::header::optional::<String>("origin"))
        .and(warp::header::optional::<String>("authorization"))
        .and(server::client_addr());
    let pair = warp::path("pair")
        .and(warp::path::end())
        .and(warp::post())
        .and(warp::header::optional::<String>("host"))
        .and(warp::header::optional::<String>("origin"))
        .and(server::client_addr())
        .and(warp::body::stream())
        .and(with_state.clone())
        .then(
            |host: Option<String>,
             origin: Option<String>,
             remote: Option<SocketAddr>,
             body,
             state: Arc<WebState>| async move {
                if let Err(why) =
                    ws::request_allowed(&state.own_hosts, host.as_deref(), origin.as_deref())
                {
                    return json_status(StatusCode::FORBIDDEN, serde_json::json!({"error": why}));
                }
                let body: PairBody =
                    match body::read_json(body, PAIR_BODY_MAX, body::BODY_TIMEOUT).await {
                        Ok(b) => b,
                        Err(e) => return body_refused(&e),
                    };
                let label = body.label.unwrap_or_else(|| "browser".into());
                match state.auth.redeem(remote.map(|r| r.ip()), &body.code, &label) {
                    Ok((device, token)) => json_status(
                        StatusCode::OK,
                        serde_json::json!({"token": token, "device_id": device.device_id}),
                    ),
                    Err(RedeemError::Throttled) => json_status(
                        StatusCode::TOO_MANY_REQUESTS,
                        serde_json::json!({"error": "too many failed attempts; try again in a minute"}),
                    ),
                    Err(RedeemError::Refused(_)) => json_status(
                        StatusCode::UNAUTHORIZED,
                        serde_json::json!({"error": "invalid, used or expired pairing code"}),
                    ),
                    Err(RedeemError::Internal(e)) => {
                        tracing::error!("pairing failed: {e}");
                        json_status(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            serde_json::json!({"error": "could not create the device"}),
                        )
                    }
                }
            },
        );
    let list = warp::path("devices")
        .and(warp::path::end())
        .and(warp::get())
        .and(guard.clone())
        .and(with_state.clone())
        .map(|host, origin, authz, remote, state: Arc<WebState>| {
            if let Err(reply) = owner_http(&state, host, origin, authz, remote, "devices") {
                return reply;
            }
            let devices: Vec<_> = state.auth.list().iter().map(device_json).collect();
            json_status(StatusCode::OK, serde_json::json!({"devices": devices}))
        });
    let new_code = warp::path!("devices" / "pair")
        .and(warp::post())
        .and(guard.clone())
        .and(with_state.clone())
        .map(|host, origin, authz, remote, state: Arc<WebState>| {
            let credential = match owner_http(&state, host, origin, authz, remote, "devices") {
                Ok(c) => c,
                Err(reply) => return reply,
            };
            match state.auth.issue_pairing_code(Some(&credential)) {
                Ok(code) => json_status(
                    StatusCode::OK,
                    serde_json::json!({
                        "link": pairing_link(&state.base_url, &code),
                        "expires_in_seconds": auth::PAIRING_CODE_TTL.as_secs(),
                    }),
                ),
                Err(e) => {
                    tracing::error!("cannot issue a pairing code: {e}");
                    json_status(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        serde_json::json!({"error": "could not issue a pairing code"}),
                    )
                }
            }
        });
    let revoke = warp::path!("devices" / String / "revoke")
        .and(warp::post())
        .and(guard)
        .and(with_state)
        .map(
            |device_id: String, host, origin, authz, remote, state: Arc<WebState>| {
                if let Err(reply) = owner_http(&state, host, origin, authz, remote, "devices") {
                    return reply;
                }
                if state.auth.is_local_device(&device_id) {
                    return json_status(
                        StatusCode::FORBIDDEN,
                        serde_json::json!({"error": "the local CLI's credential is not revoked \
                            over the web: remove cli.token from the data dir and restart the \
                            daemon to replace it"}),
                    );
                }
                match state.auth.revoke(&device_id) {
                    Ok(r @ (auth::Revocation::Revoked | auth::Revocation::AlreadyRevoked)) => {
                        json_status(
                            StatusCode::OK,
                            serde_json::json!({"revoked": device_id,
                                "already": r == auth::Revocation::AlreadyRevoked}),
                        )
                    }
                    Ok(auth::Revocation::NoSuchDevice) => json_status(
                        StatusCode::NOT_FOUND,
                        serde_json::json!({"error": "no such device"}),
                    ),
                    Err(e) => {
                        tracing::error!("cannot revoke {device_id}: {e}");
                        json_status(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            serde_json::json!({"error": "could not revoke the device"}),
                        )
                    }
                }
            },
        );
    pair.or(list)
        .unify()
        .or(new_code)
        .unify()
        .or(revoke)
        .unify()
}

fn routes(
    state: Arc<WebState>,
) -> impl Filter<Extract = (impl warp::Reply,), Error = std::convert::Infallible> + Clone {
    let with_state = {
        let s = state.clone();
        warp::any().map(move || s.clone())
    };
    // Liveness for anyone; the counts only when `Host` names this server: a
    // page on another site that rebinds its name to this address (DNS
    // rebinding) could otherwise read how many connections, queued turns
    // and failing providers the owner has. In a chatbot deployment the
    // server is public, so the counts also need the owner's credential
    // (`Authorization: Bearer`): a visitor could read the owner's comings
    // and goings, the review queue and the model provider from them.
    let health = warp::path("health")
        .and(warp::path::end())
        .and(warp::get())
        .and(warp::header::optional::<String>("host"))
        .and(warp::header::optional::<String>("authorization"))
        .and(server::client_addr())
        .and(with_state.clone())
        .then(
            |host: Option<String>,
             authorization: Option<String>,
             remote: Option<SocketAddr>,
             state: Arc<WebState>| async move {
                let liveness =
                    || warp::reply::json(&serde_json::json!({"status": "ok", "service": "silas"}));
                if ws::request_allowed(&state.own_hosts, host.as_deref(), None).is_err() {
                    return liveness();
                }
                if state.customer_scopes {
                    // No header, no check: a liveness probe is not a failed sign-in.
                    let token = authorization
                        .as_deref()
                        .and_then(|a| a.strip_prefix("Bearer "));
                    let owner = token.is_some()
                        && matches!(
                            state.auth.check(remote.map(|r| r.ip()), token, "health"),
                            AuthOutcome::Owner(_)
                        );
                    if !owner {
                        return liveness();
                    }
                }
                let queue = state.backend.queue_pressure().await;
                warp::reply::json(&HealthBody {
                    status: "ok",
                    service: "silas",
                    connections: state.health.connections(),
                    queue,
                    providers: state.backend.providers(),
                    channels: state.backend.channels(),
                })
            },
        );

    let ws = warp::path("ws")
        .and(warp::path::end())
        .and(warp::get())
        .and(warp::header::headers_cloned())
        .and(server::client_addr())
        .and(server::upgrade_slot())
        .and(with_state.clone())
        .map(
            |headers: warp::http::HeaderMap,
             remote: Option<SocketAddr>,
             upgrade: Option<server::UpgradeSlot>,
             state: Arc<WebState>| {
                let text = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                if let Err(why) = ws::request_allowed(
                    &state.own_hosts,
                    text("host").as_deref(),
                    text("origin").as_deref(),
                ) {
                    return json_status(StatusCode::FORBIDDEN, serde_json::json!({"error": why}))
                        .into_response();
                }
                let accept = match server::accept_key(&headers) {
                    Ok(a) => a,
                    Err(why) => {
                        return json_status(
                            StatusCode::BAD_REQUEST,
                            serde_json::json!({"error": why}),
                        )
                        .into_response();
                    }
                };
                let Some(on_upgrade) = upgrade.and_then(|u| u.take()) else {
                    return json_status(
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({"error": "connection cannot be upgraded"}),
                    )
                    .into_response();
                };
                let (token, ours) =
                    ws::subprotocol_token(text("sec-websocket-protocol").as_deref());
                let ip = remote.map(|r| r.ip());
                // Decided before the upgrade: a header credential is checked
                // now and needs no unauthenticated slot; a throttled address
                // or a full cap is refused here (429/503), holding nothing.
                let admission = match ws::admit(&state, token.as_deref(), ip) {
                    Ok(a) => a,
                    Err(why) => {
                        let (status, message) = why.status_and_message();
                        tracing::debug!(?remote, "websocket refused: {message}");
                        return json_status(status, serde_json::json!({"error": message}))
                            .into_response();
                    }
                };
                tokio::spawn(async move {
                    match on_upgrade.await {
                        Ok(upgraded) => {
                            let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
                                hyper_util::rt::TokioIo::new(upgraded),
                                tokio_tungstenite::tungstenite::protocol::Role::Server,
                                Some(server::ws_config()),
                            )
                            .await;
                            ws::session(socket, state, admission, ip).await;
                        }
                        Err(e) => tracing::debug!("websocket upgrade failed: {e}"),
                    }
                });
                let mut res = warp::http::Response::builder()
                    .status(StatusCode::SWITCHING_PROTOCOLS)
                    .header("connection", "upgrade")
                    .header("upgrade", "websocket")
                    .header("sec-websocket-accept", accept);
                if ours {
                    // Browsers drop a socket whose offered subprotocol is not echoed.
                    res = res.header("sec-websocket-protocol", ws::SUBPROTOCOL);
                }
                match res.body(hyper::body::Bytes::new()) {
                    Ok(r) => r.into_response(),
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            },
        );

    let secrets = warp::path!("secrets" / String)
        .and(warp::post())
        .and(warp::header::optional::<String>("host"))
        .and(warp::header::optional::<String>("origin"))
        .and(warp::header::optional::<String>("authorization"))
        .and(server::client_addr())
        .and(warp::body::stream())
        .and(with_state.clone())
        .then(
            |ref_id: String,
             host: Option<String>,
             origin: Option<String>,
             auth: Option<String>,
             remote: Option<SocketAddr>,
             body,
             state: Arc<WebState>| async move {
                // Checked before the body is read: a stranger's request
                // never waits on the server for a body.
                if let Err(reply) = owner_http(&state, host, origin, auth, remote, "secrets") {
                    return reply;
                }
                let body: SecretBody =
                    match body::read_json(body, SECRET_BODY_MAX, body::BODY_TIMEOUT).await {
                        Ok(b) => b,
                        Err(e) => return body_refused(&e),
                    };
                // Consumed into a zeroizing buffer at once; never logged or echoed.
                let value = zeroize::Zeroizing::new(body.value);
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
        .or(device_routes(with_state))
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
