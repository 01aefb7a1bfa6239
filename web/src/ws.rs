//! WebSocket sessions (`/ws`, spec §8.1) and the secure-input endpoint.
//!
//! Before the upgrade: the `Host` header must name this server (loopback
//! names or the configured host, with its port) and an `Origin`, when present,
//! must be this server too — so a malicious page (including one using DNS
//! rebinding to point its own name at 127.0.0.1) cannot open a socket.
//! Authentication is always required (issue #12, loopback included), with an
//! owner credential of [`crate::auth`]: `Sec-WebSocket-Protocol: silas.v1,
//! bearer.<token>` or a first frame `{"type":"auth","token":…}` within 5 s;
//! otherwise close code 4001 (also for a device revoked while connected).
//! [`admit`] decides before the upgrade: a header credential is checked
//! there, so the owner never needs one of the few unauthenticated slots
//! (a wrong one is upgraded only to be closed 4001 at once — the close code
//! is all a browser can read — holding no slot); a throttled address gets
//! HTTP 429 and no upgrade; only a socket that is to authenticate in-band
//! holds a slot, capped per address and in all, until it has. Never a
//! query-string token. A frame over
//! 64 KiB, before or after authentication, closes the socket with 1009. Then
//! `auth_ok`, and frames flow: each client frame is parsed and validated; a
//! bad one gets an `error` frame and the connection stays open. Outbound
//! frames go through a bounded per-connection queue.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use warp::http::StatusCode;

use crate::HealthState;
use crate::auth::{AuthOutcome, Credential, OwnerAuth, UnauthSlot};
use crate::customers::{CapRefusal, CustomerSlot};
use crate::protocol::{ClientFrame, ProtocolError, ServerFrame, parse_client_frame};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Close code for a connection that did not authenticate.
pub const CLOSE_UNAUTHORIZED: u16 = 4001;
/// Close code for a frame over the size limit (RFC 6455 "message too big").
pub const CLOSE_TOO_BIG: u16 = 1009;
/// Close code when the server shuts down.
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Outbound frames queued per connection before the connection is dropped.
pub const OUTBOUND_QUEUE: usize = 256;
pub const SUBPROTOCOL: &str = "silas.v1";

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub connection_id: String,
    pub remote_ip: Option<std::net::IpAddr>,
    /// Presented a valid owner credential (a device's or the configured
    /// `auth_token`). False for chatbot customers. Nothing else sets it.
    pub owner: bool,
    /// The owner device whose credential was presented, if a device's.
    pub device_id: Option<String>,
}

/// The runtime side of the web channel (implemented by the Stream wiring).
pub trait WebBackend: Send + Sync + 'static {
    /// A connection authenticated: remember its outbound queue, return its scope id.
    fn connected(
        &self,
        conn: ConnectionInfo,
        outbound: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>>;
    /// A validated client frame (never `auth`).
    fn frame(
        &self,
        connection_id: &str,
        frame: ClientFrame,
    ) -> BoxFuture<'_, Result<(), ProtocolError>>;
    fn disconnected(&self, connection_id: &str) -> BoxFuture<'_, ()>;
    /// `auth_ok` goes out first: the backend may now send what a fresh
    /// connection needs (pending cards, the Activity timeline).
    fn ready(&self, _connection_id: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Queue pressure for `/health` (§18.6), if the runtime is attached.
    fn queue_pressure(&self) -> BoxFuture<'_, Option<QueuePressure>> {
        Box::pin(async { None })
    }
    /// Model providers' circuit-breaker states (`closed`/`open`/`half_open`)
    /// for `/health` and `silas status`; empty before any model call.
    fn providers(&self) -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::new()
    }
    /// Other channels' states (`telegram` → "ok", "paused: …") for
    /// `/health` and `silas status`; empty when none is configured.
    fn channels(&self) -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::new()
    }
}

/// Turn-queue pressure as `/health` reports it (§18.6): depths and
/// capacities only — no scope ids, the endpoint is unauthenticated.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuePressure {
    /// Whether the runtime accepts new messages (false while draining).
    pub accepting: bool,
    pub pending_total: u32,
    pub capacity_total: u32,
    pub capacity_per_scope: u32,
    /// Scopes with at least one pending turn.
    pub scopes_waiting: u32,
    /// Depth of the deepest scope queue.
    pub deepest_scope: u32,
    /// Cards waiting for an answer.
    pub pending_cards: u32,
    /// `ok`, `high` (a queue ≥ 80 % full) or `full` (a queue at capacity).
    pub pressure: String,
}

impl QueuePressure {
    /// The pressure label for these numbers.
    pub fn label(&self) -> &'static str {
        let full = |n: u32, cap: u32| cap > 0 && n >= cap;
        let high = |n: u32, cap: u32| cap > 0 && u64::from(n) * 5 >= u64::from(cap) * 4;
        if full(self.pending_total, self.capacity_total)
            || full(self.deepest_scope, self.capacity_per_scope)
        {
            "full"
        } else if high(self.pending_total, self.capacity_total)
            || high(self.deepest_scope, self.capacity_per_scope)
        {
            "high"
        } else {
            "ok"
        }
    }
}

/// Used until the runtime is attached: authenticated connections get an
/// error frame for every message rather than silence.
pub struct Unattached;

impl WebBackend for Unattached {
    fn connected(
        &self,
        _: ConnectionInfo,
        _: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        Box::pin(async { Ok("owner".to_string()) })
    }
    fn frame(&self, _: &str, _: ClientFrame) -> BoxFuture<'_, Result<(), ProtocolError>> {
        Box::pin(async {
            Err(ProtocolError::new(
                "E_CHANNEL_UNAVAILABLE",
                "the assistant runtime is not attached to this server",
                None,
            ))
        })
    }
    fn disconnected(&self, _: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Outcome of storing a secret via `POST /secrets/{ref_id}`.
#[derive(Debug, PartialEq, Eq)]
pub enum SecretStoreError {
    UnknownRef,
    AlreadyFulfilled,
    Failed,
}

/// Where secrets submitted over HTTP go (the keystore). Implementations must
/// not log, echo or keep the value.
pub trait SecretSink: Send + Sync + 'static {
    fn store(
        &self,
        ref_id: &str,
        value: zeroize::Zeroizing<String>,
    ) -> Result<(), SecretStoreError>;
}

/// Refuses every ref: no secure-input request is pending without a runtime.
pub struct NoSecrets;

impl SecretSink for NoSecrets {
    fn store(&self, _: &str, _: zeroize::Zeroizing<String>) -> Result<(), SecretStoreError> {
        Err(SecretStoreError::UnknownRef)
    }
}

/// Shared state of the web channel.
pub struct WebState {
    /// The owner's credentials, the pairing codes and the failure throttle.
    pub auth: Arc<OwnerAuth>,
    /// `host:port` strings this server answers to.
    pub own_hosts: Vec<String>,
    pub backend: Arc<dyn WebBackend>,
    pub secrets: Arc<dyn SecretSink>,
    pub health: Arc<HealthState>,
    pub shutdown: watch::Receiver<bool>,
    /// Announced in `auth_ok` (e.g. the offline responder label).
    pub model: Option<crate::protocol::ModelInfo>,
    /// Chatbot deployment (§5.1 isolation model): a connection that does
    /// not present an owner credential in `Sec-WebSocket-Protocol` is a
    /// customer with its own scope instead of being refused.
    pub customer_scopes: bool,
    /// `http://host:port/` for pairing links.
    pub base_url: String,
    /// Open chatbot customer connections and their caps.
    pub customers: Arc<crate::customers::CustomerConnections>,
}

/// 64 random bits as hex. Without the OS generator (never expected) the
/// clock's nanoseconds and the pid still differ from one call to the next.
fn random_hex() -> String {
    let n = getrandom::u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    });
    format!("{n:016x}")
}

impl WebState {
    pub fn new(
        auth: Arc<OwnerAuth>,
        own_hosts: Vec<String>,
        backend: Arc<dyn WebBackend>,
        secrets: Arc<dyn SecretSink>,
        health: Arc<HealthState>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        WebState {
            auth,
            own_hosts,
            backend,
            secrets,
            health,
            shutdown,
            model: None,
            customer_scopes: false,
            base_url: String::new(),
            customers: crate::customers::CustomerConnections::with_defaults(),
        }
    }
}

/// Constant-time comparison (length is not secret).
pub fn token_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// `Host` must name this server; `Origin`, when sent, must be this server.
pub fn request_allowed(
    own_hosts: &[String],
    host: Option<&str>,
    origin: Option<&str>,
) -> Result<(), &'static str> {
    let Some(host) = host else {
        return Err("missing Host header");
    };
    let host = host.to_ascii_lowercase();
    if !own_hosts.contains(&host) {
        return Err("Host header does not name this server");
    }
    if let Some(origin) = origin {
        let origin = origin.to_ascii_lowercase();
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .ok_or("Origin is not an http(s) origin")?;
        if !own_hosts.iter().any(|h| *h == authority) {
            return Err("cross-site request refused (Origin is not this server)");
        }
    }
    Ok(())
}

/// A bearer token offered as `bearer.<token>` in `Sec-WebSocket-Protocol`.
pub fn subprotocol_token(header: Option<&str>) -> (Option<String>, bool) {
    let Some(h) = header else {
        return (None, false);
    };
    let mut token = None;
    let mut ours = false;
    for p in h.split(',').map(str::trim) {
        if let Some(t) = p.strip_prefix("bearer.") {
            token = Some(t.to_string());
        } else if p == SUBPROTOCOL {
            ours = true;
        }
    }
    (token, ours)
}

async fn send(tx: &mpsc::Sender<ServerFrame>, frame: ServerFrame) -> bool {
    tx.send(frame).await.is_ok()
}

/// Whether a read error is a frame or message over the configured limit.
fn too_big(e: &tokio_tungstenite::tungstenite::Error) -> bool {
    matches!(e, tokio_tungstenite::tungstenite::Error::Capacity(_))
}

/// The RFC 6455 close code for a read error that is the client breaking
/// the protocol (1002; 1007 for a text frame that is not UTF-8), so the
/// client learns why; `None` for the connection simply going away.
fn violation(e: &tokio_tungstenite::tungstenite::Error) -> Option<(u16, &'static str)> {
    use tokio_tungstenite::tungstenite::Error;
    match e {
        Error::Utf8(_) => Some((1007, "text frame is not UTF-8")),
        Error::Protocol(_) | Error::AttackAttempt => Some((1002, "WebSocket protocol error")),
        _ => None,
    }
}

/// A close frame with `code` and `why`.
fn close_with(code: u16, why: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: why.into(),
    }))
}

/// The text of a text frame.
fn text_of(msg: &Message) -> Option<&str> {
    match msg {
        Message::Text(t) => Some(t.as_str()),
        _ => None,
    }
}

/// Resolves when `device` is revoked; never for other connections.
async fn revoked(
    rx: &mut Option<tokio::sync::broadcast::Receiver<String>>,
    device: Option<&str>,
    auth: &OwnerAuth,
) {
    use tokio::sync::broadcast::error::RecvError;
    let (Some(rx), Some(device)) = (rx.as_mut(), device) else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(id) if id == device => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) if auth.is_revoked(device) => return,
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

/// Why the reader loop ended: decides the close code the writer sends.
enum Ending {
    /// The client went away (or the server is shutting down: the writer
    /// sends 1001 itself).
    Normal,
    Close(u16, &'static str),
}

/// How a `/ws` request is let in, decided before the upgrade by [`admit`].
pub enum Admission {
    /// A valid owner credential in the subprotocol header. `revocations`
    /// was subscribed before the check: a revocation racing it is seen.
    Owner {
        credential: Credential,
        revocations: tokio::sync::broadcast::Receiver<String>,
    },
    /// A chatbot customer, holding its slot for the connection's life.
    Customer(CustomerSlot),
    /// A header credential that was refused (failure recorded): the socket
    /// is closed with 4001 at once, never read, and holds no slot.
    Refused,
    /// No header credential: a first `auth` frame within [`AUTH_TIMEOUT`],
    /// holding an unauthenticated slot until then.
    InBand(UnauthSlot),
}

/// Why a `/ws` request is refused before the upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The address is over its failed-authentication budget (HTTP 429).
    Throttled,
    /// A chatbot customer cap is reached (HTTP 429).
    Customers(CapRefusal),
    /// An unauthenticated-socket cap is reached: this address's (HTTP 429)
    /// or everyone's (HTTP 503).
    Unauthenticated(CapRefusal),
}

impl Refusal {
    /// The HTTP status and the body's `error`.
    pub fn status_and_message(self) -> (StatusCode, &'static str) {
        match self {
            Refusal::Throttled => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many failed attempts; try again in a minute",
            ),
            Refusal::Customers(why) => (StatusCode::TOO_MANY_REQUESTS, why.message()),
            Refusal::Unauthenticated(CapRefusal::PerAddress) => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many unauthenticated connections from this address",
            ),
            Refusal::Unauthenticated(CapRefusal::Total) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "too many unauthenticated connections",
            ),
        }
    }
}

/// Decide, before the upgrade, how a `/ws` request from `ip` offering
/// `header_token` is let in. A header credential is checked here, so the
/// owner never waits for an unauthenticated slot (a flood of silent sockets
/// used to hold all of them and lock the owner out with 503); owner sockets
/// are bounded by holding a credential. A throttled address is refused
/// before it could take a slot (a live device credential still passes it,
/// see [`OwnerAuth::check`]). Chatbot customers are counted by their own
/// caps, as before, and never throttled: they present no credential.
pub fn admit(
    state: &WebState,
    header_token: Option<&str>,
    ip: Option<std::net::IpAddr>,
) -> Result<Admission, Refusal> {
    if let Some(token) = header_token {
        let revocations = state.auth.revocations();
        return match state.auth.check(ip, Some(token), "ws") {
            AuthOutcome::Owner(credential) => Ok(Admission::Owner {
                credential,
                revocations,
            }),
            AuthOutcome::Throttled => Err(Refusal::Throttled),
            AuthOutcome::Refused => Ok(Admission::Refused),
        };
    }
    if state.customer_scopes {
        return state
            .customers
            .acquire(ip)
            .map(Admission::Customer)
            .map_err(Refusal::Customers);
    }
    if state.auth.throttled_now(ip, "ws") {
        return Err(Refusal::Throttled);
    }
    state
        .auth
        .unauthenticated_slot(ip)
        .map(Admission::InBand)
        .map_err(Refusal::Unauthenticated)
}

/// Run one upgraded connection to its end, let in as `admission` says.
pub async fn session<S>(
    socket: WebSocketStream<S>,
    state: Arc<WebState>,
    admission: Admission,
    remote_ip: Option<std::net::IpAddr>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = socket.split();
    let mut shutdown = state.shutdown.clone();
    let auth = state.auth.clone();

    // Authentication (§8.1, issue #12): the owner always presents a
    // credential — the header token (checked by `admit`), or a first auth
    // frame within 5 s. In a chatbot deployment a connection without a
    // header token is a customer in its own scope, never the owner.
    let owner_of = |outcome: AuthOutcome| match outcome {
        AuthOutcome::Owner(c) => Some(c),
        AuthOutcome::Throttled | AuthOutcome::Refused => None,
    };
    let (credential, customer, mut revocations) = match admission {
        Admission::Owner {
            credential,
            revocations,
        } => (Some(credential), None, Some(revocations)),
        Admission::Customer(slot) => (None, Some(slot), None),
        Admission::Refused => (None, None, None),
        Admission::InBand(slot) => {
            // Subscribed before the check: a revocation racing it is seen.
            let revocations = auth.revocations();
            let first = tokio::time::timeout(AUTH_TIMEOUT, stream.next()).await;
            let credential = match first {
                Ok(Some(Err(e))) if too_big(&e) => {
                    auth.failed(remote_ip, "ws", "oversized_frame");
                    let _ = sink
                        .send(close_with(CLOSE_TOO_BIG, "frame too large"))
                        .await;
                    let _ = sink.close().await;
                    linger().await;
                    return;
                }
                Ok(Some(Ok(msg))) => {
                    let token = text_of(&msg)
                        .and_then(|t| parse_client_frame(t).ok())
                        .and_then(|f| match f {
                            ClientFrame::Auth { token } => Some(token),
                            _ => None,
                        });
                    match token {
                        Some(token) => owner_of(auth.check(remote_ip, Some(&token), "ws")),
                        // A socket that took an unauthenticated slot and
                        // spoke without a credential is no browser page (the
                        // Origin check refused those): counted and audited.
                        None => {
                            auth.failed(remote_ip, "ws", "no_auth_frame");
                            None
                        }
                    }
                }
                _ => {
                    auth.failed(remote_ip, "ws", "no_auth_frame");
                    None
                }
            };
            drop(slot);
            (credential, None, Some(revocations))
        }
    };
    // `customer` (a chatbot customer's slot) is held to the end.
    if credential.is_none() && customer.is_none() {
        let _ = sink
            .send(close_with(CLOSE_UNAUTHORIZED, "unauthorized"))
            .await;
        let _ = sink.close().await;
        return;
    }
    let device_id = credential
        .as_ref()
        .and_then(|c| c.device_id())
        .map(str::to_string);
    if device_id.is_none() {
        revocations = None;
    }

    // Random, not a counter: a customer's scope id is its connection id and
    // is shown to it, and a counter would tell every visitor how many came
    // before. 128 random bits, unique across restarts too (a visitor after
    // a restart must never be handed an earlier visitor's conversation),
    // with no per-start part: one shared by every id of a run would tell a
    // visitor when the daemon restarted.
    let conn = ConnectionInfo {
        connection_id: format!("ws-{}{}", random_hex(), random_hex()),
        remote_ip,
        owner: credential.is_some(),
        device_id: device_id.clone(),
    };
    let (tx, mut rx) = mpsc::channel::<ServerFrame>(OUTBOUND_QUEUE);
    let scope_id = match state.backend.connected(conn.clone(), tx.clone()).await {
        Ok(s) => s,
        Err(e) => {
            let _ = sink.send(frame_message(&e.frame())).await;
            let _ = sink.send(close_with(1011u16, "runtime unavailable")).await;
            return;
        }
    };
    state.health.connection_opened();

    // Writer: drains the bounded queue; ends on shutdown with 1001, or with
    // the code the reader hands over.
    let mut writer_shutdown = state.shutdown.clone();
    let (close_tx, mut close_rx) = tokio::sync::oneshot::channel::<(u16, &'static str)>();
    // `auth_ok` is written before anything from the queue: the connection
    // is registered (and may be sent a reply, a card, a work status) before
    // this task starts, and a client reads `auth_ok` first.
    // Which models serve the owner is the owner's business: a chatbot
    // customer is not told the provider and model names.
    let auth_ok = frame_message(&ServerFrame::AuthOk {
        scope_id,
        model: conn.owner.then(|| state.model.clone()).flatten(),
    });
    // A customer sees opaque aliases for the server's ids (`aliases`).
    let aliases = (!conn.owner).then(|| Arc::new(crate::aliases::IdAliases::new()));
    let writer_aliases = aliases.clone();
    let writer = tokio::spawn(async move {
        if sink.send(auth_ok).await.is_err() {
            let _ = sink.close().await;
            return;
        }
        loop {
            tokio::select! {
                // The reader's close code first: it is sent while the queue
                // is also ending, and must not lose to the queue's end.
                biased;
                code = &mut close_rx => {
                    if let Ok((code, why)) = code {
                        let _ = sink.send(close_with(code, why)).await;
                    }
                    break;
                }
                frame = rx.recv() => match frame {
                    Some(mut f) => {
                        if let Some(a) = &writer_aliases {
                            a.outbound(&mut f);
                        }
                        if sink.send(frame_message(&f)).await.is_err() { break }
                    }
                    None => break,
                },
                _ = async { let _ = writer_shutdown.wait_for(|s| *s).await; } => {
                    let _ = sink.send(close_with(CLOSE_GOING_AWAY, "server shutting down")).await;
                    break;
                }
            }
        }
        let _ = sink.close().await;
    });

    state.backend.ready(&conn.connection_id).await;
    let ending = loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => None,
            _ = revoked(&mut revocations, device_id.as_deref(), &auth) => {
                break Ending::Close(CLOSE_UNAUTHORIZED, "device revoked");
            }
        };
        let msg = match msg {
            Some(Ok(m)) => m,
            Some(Err(e)) if too_big(&e) => break Ending::Close(CLOSE_TOO_BIG, "frame too large"),
            Some(Err(e)) => match violation(&e) {
                Some((code, why)) => break Ending::Close(code, why),
                None => break Ending::Normal,
            },
            None => break Ending::Normal,
        };
        if msg.is_close() {
            break Ending::Normal;
        }
        if msg.is_ping() || msg.is_pong() {
            continue;
        }
        let Some(text) = text_of(&msg) else {
            send(
                &tx,
                ProtocolError::new("E_CHANNEL_PROTOCOL", "binary frames are not accepted", None)
                    .frame(),
            )
            .await;
            continue;
        };
        let result = match parse_client_frame(text) {
            Ok(ClientFrame::Auth { .. }) => Err(ProtocolError::new(
                "E_CHANNEL_PROTOCOL",
                "already authenticated",
                None,
            )),
            Ok(mut frame) => match aliases.as_ref().map(|a| a.inbound(&mut frame)).transpose() {
                Err(e) => Err(e),
                Ok(referred) => {
                    let result = state.backend.frame(&conn.connection_id, frame).await;
                    result.map_err(|mut e| {
                        if let Some(r) = referred.flatten() {
                            r.restore(&mut e);
                        }
                        e
                    })
                }
            },
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            send(&tx, e.frame()).await;
        }
    };
    let oversized = matches!(ending, Ending::Close(CLOSE_TOO_BIG, _));
    if let Ending::Close(code, why) = ending {
        let _ = close_tx.send((code, why));
    }
    state.backend.disconnected(&conn.connection_id).await;
    state.health.connection_closed();
    drop(tx);
    let _ = writer.await;
    if oversized {
        linger().await;
    }
}

/// After closing over an oversized frame, hold the socket briefly: the rest
/// of that frame is never read, and closing a socket with unread data sends
/// a TCP reset that can destroy the close frame before the client reads it.
async fn linger() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn frame_message(frame: &ServerFrame) -> Message {
    Message::text(serde_json::to_string(frame).unwrap_or_else(|_| r#"{"type":"error","code":"E_CHANNEL_PROTOCOL","message":"unencodable frame","request_id":null}"#.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_origin_rules() {
        let own = vec!["127.0.0.1:8420".to_string(), "localhost:8420".to_string()];
        assert!(request_allowed(&own, Some("127.0.0.1:8420"), None).is_ok());
        assert!(
            request_allowed(&own, Some("localhost:8420"), Some("http://localhost:8420")).is_ok()
        );
        assert!(
            request_allowed(&own, Some("LOCALHOST:8420"), Some("http://127.0.0.1:8420")).is_ok()
        );
        // A malicious page, directly or through DNS rebinding.
        assert!(
            request_allowed(&own, Some("127.0.0.1:8420"), Some("https://evil.example")).is_err()
        );
        assert!(
            request_allowed(
                &own,
                Some("evil.example:8420"),
                Some("http://evil.example:8420")
            )
            .is_err()
        );
        assert!(request_allowed(&own, Some("127.0.0.1:8420"), Some("null")).is_err());
        assert!(request_allowed(&own, None, None).is_err());
        assert!(request_allowed(&own, Some("127.0.0.1:9999"), None).is_err());
    }

    #[test]
    fn queue_pressure_labels() {
        let mut q = QueuePressure {
            capacity_total: 500,
            capacity_per_scope: 20,
            ..Default::default()
        };
        assert_eq!(q.label(), "ok");
        q.deepest_scope = 16;
        assert_eq!(q.label(), "high");
        q.deepest_scope = 20;
        assert_eq!(q.label(), "full");
        q.deepest_scope = 1;
        q.pending_total = 500;
        assert_eq!(q.label(), "full");
    }

    #[test]
    fn subprotocol_parsing_and_token_compare() {
        assert_eq!(
            subprotocol_token(Some("silas.v1, bearer.abc")),
            (Some("abc".into()), true)
        );
        assert_eq!(
            subprotocol_token(Some("bearer.abc")),
            (Some("abc".into()), false)
        );
        assert_eq!(subprotocol_token(None), (None, false));
        assert!(token_eq("secret", "secret"));
        assert!(!token_eq("secret", "secreT"));
        assert!(!token_eq("secret", "secret2"));
    }
}
