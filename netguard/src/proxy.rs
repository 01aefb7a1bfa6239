//! The egress proxy: the only way out for a sandboxed command that was
//! granted network (an approved verification check with `network: true`; the
//! skills work reuses it).
//!
//! A loopback HTTP proxy on `127.0.0.1:0`. It accepts `CONNECT host:port`
//! (tunnels, for HTTPS) and plain-HTTP absolute-form requests
//! (`GET http://host/path HTTP/1.1`). Every target goes through
//! [`NetworkGuard::check_destination`]: blocked ports refused, the host
//! resolved **once**, every answer classified by `policy.rs` (loopback,
//! link-local, private, CGNAT, multicast, metadata … refused), and the
//! connection made only to those validated addresses — never re-resolved, so
//! DNS rebinding cannot redirect it. Anything else is answered `403` with a
//! short reason and nothing is connected.
//!
//! Host policy: any *public* host. The approved plan says "network" for the
//! check and the approval card shows it; the web_fetch allowlist governs the
//! model's own fetches, not an owner-approved check, so it is not applied.
//! The guard's trusted CIDRs and extra blocked ports are honoured.
//!
//! Bounded: at most `max_tunnels` connections at once (more get `503`), a
//! header limit (`431`), an idle timeout on reads and tunnels. Each refusal
//! is kept as an [`EgressRefusal`] for the caller to audit: this crate never
//! writes the audit itself.
//!
//! The sandbox side (landlock allows TCP connect only to the proxy's port)
//! makes the proxy unavoidable for TCP; landlock cannot restrict UDP, which
//! the launcher documents.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_core::{Coded, ErrorCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::GuardError;
use crate::guard::{Destination, NetworkGuard};
use crate::policy::HostRule;

/// Resource bounds of one proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressLimits {
    /// Connections (tunnels or forwarded requests) open at once.
    pub max_tunnels: usize,
    /// A read or tunnel with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// Request line plus headers, bytes.
    pub max_header_bytes: usize,
    /// Connecting to one validated address.
    pub connect_timeout: Duration,
    /// Refusals kept for the caller; later ones are only counted.
    pub max_refusals: usize,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits {
            max_tunnels: 32,
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 16 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_refusals: 100,
        }
    }
}

/// One request the proxy refused, for the caller's audit. `target` is what
/// the client asked for (host:port or URL authority, never a resolved IP of
/// a name; no path, query or header values, so no secret rides along).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRefusal {
    pub target: String,
    /// HTTP status sent back (403, 400, 431, 502, 503).
    pub status: u16,
    pub reason: String,
    pub code: ErrorCode,
}

#[derive(Debug, Default)]
struct Refusals {
    kept: Vec<EgressRefusal>,
    dropped: u64,
}

/// A running proxy; dropping it stops the listener and every open tunnel.
pub struct EgressProxy {
    addr: SocketAddr,
    refusals: Arc<Mutex<Refusals>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        // The accept task owns the JoinSet of connections: aborting it drops
        // (and so aborts) every tunnel too.
        self.task.abort();
    }
}

/// Test-only dial redirect: the *decision* is made on `from` (a public
/// address an injected resolver returned); the socket goes to `to` (a
/// loopback test server). Only [`EgressProxy::start_redirecting_dials_for_tests`]
/// sets it; no configuration can.
type DialRedirect = Option<(SocketAddr, SocketAddr)>;

#[derive(Clone)]
struct Shared {
    guard: NetworkGuard,
    limits: EgressLimits,
    refusals: Arc<Mutex<Refusals>>,
    redirect: DialRedirect,
    /// `Some`: only these hosts (a skill's declared `requirements.network`);
    /// `None`: any public host (an approved verification check).
    hosts: Option<Arc<Vec<HostRule>>>,
}

impl EgressProxy {
    /// Listen on `127.0.0.1:0` and serve until dropped.
    pub async fn start(guard: NetworkGuard, limits: EgressLimits) -> std::io::Result<Self> {
        Self::start_inner(guard, limits, None, None).await
    }

    /// Like [`Self::start`], but only `hosts` may be reached (exact names or
    /// `*.example.org` patterns, any method): the per-run proxy of a skill
    /// script, which gets exactly the network its approved skill declares.
    /// Anything else is refused `403` before it is resolved.
    pub async fn start_for_hosts(
        guard: NetworkGuard,
        limits: EgressLimits,
        hosts: &[String],
    ) -> std::io::Result<Self> {
        let rules: Vec<HostRule> = hosts.iter().map(|h| HostRule::new(h, &[])).collect();
        if let Some(bad) = rules.iter().find_map(|r| r.validate().err()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                bad.to_string(),
            ));
        }
        Self::start_inner(guard, limits, None, Some(Arc::new(rules))).await
    }

    /// For tests only: like [`Self::start`], but a connection to the
    /// validated address `from` actually dials `to`. Lets a test prove an
    /// allowed decision end to end against a loopback server while the guard
    /// still sees (and validates) a public address.
    #[doc(hidden)]
    pub async fn start_redirecting_dials_for_tests(
        guard: NetworkGuard,
        limits: EgressLimits,
        from: SocketAddr,
        to: SocketAddr,
    ) -> std::io::Result<Self> {
        Self::start_inner(guard, limits, Some((from, to)), None).await
    }

    async fn start_inner(
        guard: NetworkGuard,
        limits: EgressLimits,
        redirect: DialRedirect,
        hosts: Option<Arc<Vec<HostRule>>>,
    ) -> std::io::Result<Self> {
        let listener =
            TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).await?;
        let addr = listener.local_addr()?;
        let refusals = Arc::new(Mutex::new(Refusals::default()));
        let shared = Shared {
            guard,
            limits,
            refusals: refusals.clone(),
            redirect,
            hosts,
        };
        let task = tokio::spawn(accept_loop(listener, shared));
        Ok(EgressProxy {
            addr,
            refusals,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The refusals so far (emptied), and how many more were only counted.
    pub fn take_refusals(&self) -> (Vec<EgressRefusal>, u64) {
        match self.refusals.lock() {
            Ok(mut r) => (std::mem::take(&mut r.kept), std::mem::take(&mut r.dropped)),
            Err(_) => (Vec::new(), 0),
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Shared) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_tunnels));
    let mut conns = JoinSet::new();
    loop {
        // Reap finished connections so the set stays small.
        while conns.try_join_next().is_some() {}
        let Ok((mut client, _)) = listener.accept().await else {
            // Out of fds or similar: back off briefly instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                conns.spawn(async move {
                    handle(client, &shared).await;
                    drop(permit);
                });
            }
            Err(_) => {
                conns.spawn(async move {
                    let r = Refusal::new(503, "too many open connections", ErrorCode::EGateBlocked);
                    shared.refuse(&mut client, "-", r).await;
                });
            }
        }
    }
}

/// Why one request is refused (before anything is connected).
struct Refusal {
    status: u16,
    reason: String,
    code: ErrorCode,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>, code: ErrorCode) -> Self {
        Refusal {
            status,
            reason: reason.into(),
            code,
        }
    }

    fn bad(reason: impl Into<String>) -> Self {
        Refusal::new(400, reason, ErrorCode::EGateBlocked)
    }

    fn from_guard(e: &GuardError) -> Self {
        // Display names host and range, never a resolved address.
        Refusal::new(403, e.to_string(), e.code())
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

impl Shared {
    async fn refuse(&self, client: &mut TcpStream, target: &str, r: Refusal) {
        let body = format!("silas egress proxy: {}\n", r.reason);
        let head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            r.status,
            status_text(r.status),
            body.len()
        );
        // The client may already be gone; the refusal is recorded regardless.
        let _ = tokio::time::timeout(self.limits.idle_timeout, async {
            client.write_all(head.as_bytes()).await?;
            client.write_all(body.as_bytes()).await?;
            client.shutdown().await
        })
        .await;
        if let Ok(mut list) = self.refusals.lock() {
            if list.kept.len() < self.limits.max_refusals {
                list.kept.push(EgressRefusal {
                    target: target.chars().take(300).collect(),
                    status: r.status,
                    reason: r.reason,
                    code: r.code,
                });
            } else {
                list.dropped += 1;
            }
        }
    }

    /// The host restriction, checked before anything is resolved.
    fn host_allowed(&self, host: &str) -> Result<(), Refusal> {
        match &self.hosts {
            Some(rules) if !rules.iter().any(|r| r.matches_host(host)) => Err(Refusal::new(
                403,
                format!("{host} is not a host this skill declares"),
                ErrorCode::EGateBlocked,
            )),
            _ => Ok(()),
        }
    }

    async fn dial(&self, dest: &Destination) -> Result<TcpStream, Refusal> {
        let mut last = String::from("no address");
        for addr in &dest.addrs {
            let to = match self.redirect {
                Some((from, to)) if from == *addr => to,
                _ => *addr,
            };
            match tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(to)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = e.kind().to_string(),
                Err(_) => last = "connect timed out".into(),
            }
        }
        Err(Refusal::new(
            502,
            format!("cannot connect to {}:{}: {last}", dest.host, dest.port),
            ErrorCode::ESandboxFailed,
        ))
    }
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head (request body or early TLS bytes).
    rest: Vec<u8>,
}

enum ReadHead {
    Ok(Head),
    Closed,
    Refused(Refusal),
}

/// The whole head must arrive within one idle period, so a client dripping
/// a byte at a time cannot hold a slot for long.
async fn read_head(client: &mut TcpStream, limits: &EgressLimits) -> ReadHead {
    tokio::time::timeout(limits.idle_timeout, read_head_inner(client, limits))
        .await
        .unwrap_or(ReadHead::Closed)
}

async fn read_head_inner(client: &mut TcpStream, limits: &EgressLimits) -> ReadHead {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return ReadHead::Closed,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let head = Head {
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    version: req.version.unwrap_or(1),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                    rest: buf.get(len..).unwrap_or_default().to_vec(),
                };
                if len > limits.max_header_bytes {
                    return ReadHead::Refused(Refusal::new(
                        431,
                        "request head too large",
                        ErrorCode::EGateBlocked,
                    ));
                }
                return ReadHead::Ok(head);
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() > limits.max_header_bytes {
                    return ReadHead::Refused(Refusal::new(
                        431,
                        "request head too large",
                        ErrorCode::EGateBlocked,
                    ));
                }
            }
            Err(httparse::Error::TooManyHeaders) => {
                return ReadHead::Refused(Refusal::new(
                    431,
                    "too many headers",
                    ErrorCode::EGateBlocked,
                ));
            }
            Err(e) => return ReadHead::Refused(Refusal::bad(format!("malformed request: {e}"))),
        }
    }
}

/// `host:port` of a CONNECT request (`[v6]:port` for IPv6); the port is
/// mandatory.
pub fn parse_authority(authority: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, rest) = v6.split_once(']')?;
        (h, rest.strip_prefix(':')?)
    } else {
        authority.rsplit_once(':')?
    };
    if host.is_empty() || host.contains(['/', '@', '[', ']']) {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    Some((host.to_string(), port))
}

async fn handle(mut client: TcpStream, shared: &Shared) {
    let head = match read_head(&mut client, &shared.limits).await {
        ReadHead::Ok(h) => h,
        ReadHead::Closed => return,
        ReadHead::Refused(r) => return shared.refuse(&mut client, "-", r).await,
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        connect(client, shared, head).await
    } else {
        forward(client, shared, head).await
    }
}

async fn connect(mut client: TcpStream, shared: &Shared, head: Head) {
    let target = head.target.clone();
    let Some((host, port)) = parse_authority(&target) else {
        let r = Refusal::bad("CONNECT needs host:port");
        return shared.refuse(&mut client, &target, r).await;
    };
    if let Err(r) = shared.host_allowed(&host) {
        return shared.refuse(&mut client, &target, r).await;
    }
    let dest = match shared.guard.check_destination(&host, port).await {
        Ok(d) => d,
        Err(e) => {
            return shared
                .refuse(&mut client, &target, Refusal::from_guard(&e))
                .await;
        }
    };
    let mut upstream = match shared.dial(&dest).await {
        Ok(s) => s,
        Err(r) => return shared.refuse(&mut client, &target, r).await,
    };
    let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if client.write_all(ok).await.is_err() {
        return;
    }
    if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
        return;
    }
    pipe(client, upstream, shared.limits.idle_timeout).await;
}

/// Hop-by-hop and proxy headers that are not forwarded (`Host` and
/// `Connection` are rewritten).
const DROPPED_HEADERS: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
    "upgrade",
];

async fn forward(mut client: TcpStream, shared: &Shared, head: Head) {
    let Ok(url) = url::Url::parse(&head.target) else {
        let r =
            Refusal::bad("a proxy request needs an absolute http:// URL (use CONNECT for https)");
        return shared.refuse(&mut client, "-", r).await;
    };
    let authority = match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        _ => String::from("-"),
    };
    if url.scheme() != "http" {
        let r = Refusal::bad("only http:// is forwarded (use CONNECT for https)");
        return shared.refuse(&mut client, &authority, r).await;
    }
    if !url.username().is_empty() || url.password().is_some() {
        let r = Refusal::from_guard(&GuardError::UserInfo);
        return shared.refuse(&mut client, &authority, r).await;
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return shared
            .refuse(&mut client, &authority, Refusal::bad("no host"))
            .await;
    };
    if let Err(r) = shared.host_allowed(host) {
        return shared.refuse(&mut client, &authority, r).await;
    }
    let dest = match shared.guard.check_destination(host, port).await {
        Ok(d) => d,
        Err(e) => {
            return shared
                .refuse(&mut client, &authority, Refusal::from_guard(&e))
                .await;
        }
    };
    let mut upstream = match shared.dial(&dest).await {
        Ok(s) => s,
        Err(r) => return shared.refuse(&mut client, &authority, r).await,
    };
    let mut path = url.path().to_string();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // One request per connection: `Connection: close` makes the origin end
    // the exchange, so a second request cannot ride this validated socket
    // to a different host.
    let mut out = format!(
        "{} {} HTTP/1.{}\r\nHost: {}\r\nConnection: close\r\n",
        head.method,
        path,
        head.version,
        url.host_str().map_or(String::new(), |h| match url.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_string(),
        })
    )
    .into_bytes();
    for (name, value) in &head.headers {
        if DROPPED_HEADERS.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head.rest);
    if upstream.write_all(&out).await.is_err() {
        return;
    }
    pipe(client, upstream, shared.limits.idle_timeout).await;
}

/// Copy both ways until both sides are done or nothing moves for `idle`.
/// An EOF from one side is passed on as a write shutdown (half-close), so a
/// client that ends its request still gets the whole response.
async fn pipe(mut a: TcpStream, mut b: TcpStream, idle: Duration) {
    let mut ab = [0u8; 16 * 1024];
    let mut ba = [0u8; 16 * 1024];
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        let step = tokio::time::timeout(idle, async {
            tokio::select! {
                r = a.read(&mut ab), if a_open => match r {
                    Ok(0) | Err(_) => {
                        a_open = false;
                        b.shutdown().await.is_ok() || !b_open
                    }
                    Ok(n) => b.write_all(&ab[..n]).await.is_ok(),
                },
                r = b.read(&mut ba), if b_open => match r {
                    Ok(0) | Err(_) => {
                        b_open = false;
                        a.shutdown().await.is_ok() || !a_open
                    }
                    Ok(n) => a.write_all(&ba[..n]).await.is_ok(),
                },
            }
        })
        .await;
        if !matches!(step, Ok(true)) {
            break;
        }
    }
    let _ = a.shutdown().await;
    let _ = b.shutdown().await;
}
