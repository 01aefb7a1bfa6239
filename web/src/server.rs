//! The HTTP server loop under warp's routes, and the WebSocket upgrade
//! (issue #19 item 2, lean connections).
//!
//! warp's `ws()` filter cannot set tungstenite's read buffer, which is
//! allocated eagerly at 128 KiB per socket — most of an idle connection's
//! memory. So the daemon serves HTTP/1.1 itself (hyper, with upgrades) and
//! hands warp each request with two extensions: [`ClientAddr`] (warp's own
//! remote-address extension is private to its server) and [`UpgradeSlot`]
//! (hyper's `OnUpgrade`, which the `/ws` route takes to build the stream
//! with [`ws_config`]). The handshake checks are [`accept_key`], pure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::upgrade::OnUpgrade;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use warp::Filter;
use warp::http::{HeaderMap, Request};

use crate::protocol::MAX_FRAME_BYTES;

/// The peer of the connection a request came on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddr(pub SocketAddr);

/// hyper's upgrade handle for this request, taken at most once.
#[derive(Clone)]
pub(crate) struct UpgradeSlot(Arc<Mutex<Option<OnUpgrade>>>);

impl UpgradeSlot {
    pub(crate) fn take(&self) -> Option<OnUpgrade> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// The remote address, from [`ClientAddr`].
pub(crate) fn client_addr()
-> impl Filter<Extract = (Option<SocketAddr>,), Error = std::convert::Infallible> + Clone {
    warp::ext::optional::<ClientAddr>().map(|a: Option<ClientAddr>| a.map(|c| c.0))
}

pub(crate) fn upgrade_slot()
-> impl Filter<Extract = (Option<UpgradeSlot>,), Error = std::convert::Infallible> + Clone {
    warp::ext::optional::<UpgradeSlot>()
}

/// A session's stream settings. Client frames are still bounded to
/// [`MAX_FRAME_BYTES`] (refused from the header); the read buffer only sets
/// the chunk read per syscall, and writes go out as they are sent.
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
}

fn header_has_token(headers: &HeaderMap, name: &str, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// RFC 6455 §4.2.1 checks of an upgrade request; the `Sec-WebSocket-Accept`
/// value for it, or why it is not one.
pub(crate) fn accept_key(headers: &HeaderMap) -> Result<String, &'static str> {
    if !header_has_token(headers, "connection", "upgrade") {
        return Err("expected Connection: upgrade");
    }
    if !header_has_token(headers, "upgrade", "websocket") {
        return Err("expected Upgrade: websocket");
    }
    if headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        != Some("13")
    {
        return Err("expected Sec-WebSocket-Version: 13");
    }
    let key = headers
        .get("sec-websocket-key")
        .ok_or("missing Sec-WebSocket-Key")?;
    // A valid key is 16 random bytes in base64: 24 characters.
    if key.len() != 24 {
        return Err("malformed Sec-WebSocket-Key");
    }
    Ok(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// The tower service warp's routes become, with this connection's
/// [`ClientAddr`] and each request's [`UpgradeSlot`] added.
#[derive(Clone)]
pub(crate) struct WithConn<S> {
    pub inner: S,
    pub remote: SocketAddr,
}

/// The first header of `names` that `headers` carries more than once. The
/// routes read one value of `Host` and `Origin` (the DNS-rebinding and
/// cross-site checks), so a request carrying two could have the one
/// checked differ from the one a proxy in front acted on: no request may
/// be ambiguous about either.
pub(crate) fn repeated_header(headers: &HeaderMap) -> Option<&'static str> {
    ["host", "origin"]
        .into_iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())
}

impl<S, B> tower_service::Service<Request<B>> for WithConn<S>
where
    S: tower_service::Service<Request<B>, Response = warp::reply::Response>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        futures_util::future::Either<std::future::Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(name) = repeated_header(req.headers()) {
            let body = serde_json::json!({"error": format!("more than one {name} header")});
            let reply = warp::reply::with_status(
                warp::reply::json(&body),
                warp::http::StatusCode::BAD_REQUEST,
            );
            return futures_util::future::Either::Left(std::future::ready(Ok(
                crate::assets::with_security_headers(reply),
            )));
        }
        let ext = req.extensions_mut();
        ext.insert(ClientAddr(self.remote));
        if let Some(up) = ext.remove::<OnUpgrade>() {
            ext.insert(UpgradeSlot(Arc::new(Mutex::new(Some(up)))));
        }
        futures_util::future::Either::Right(self.inner.call(req))
    }
}

/// How long a client has to send a request's whole header, on a new
/// connection and between keep-alive requests. Without it (hyper applies
/// its own only when given a timer) a connection that sends nothing, or
/// half a header, holds its descriptor for good: anyone who reaches the
/// port could exhaust them without a credential (slowloris). WebSockets
/// are past their upgrade by then and keep their own heartbeat.
pub(crate) const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes a request's head (request line and headers) may take;
/// hyper answers 431 past it. Its default (~400 KB per connection) let any
/// caller make the daemon buffer that much before a credential is looked
/// at; a browser's head, cookies included, fits well inside 16 KB.
pub(crate) const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// Accepts connections until `stop` turns true; each is served as HTTP/1.1
/// with upgrades, and must send each request's whole header within
/// `header_timeout` ([`HEADER_READ_TIMEOUT`]; the tests shorten it). On
/// stop, idle keep-alive connections close and in-flight requests finish
/// (≤ 2 s); upgraded connections are sessions by then and end themselves on
/// the same signal.
pub(crate) async fn run<S>(
    listener: TcpListener,
    svc: S,
    mut stop: watch::Receiver<bool>,
    header_timeout: std::time::Duration,
) where
    S: tower_service::Service<
            Request<hyper::body::Incoming>,
            Response = warp::reply::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        };
        let (stream, remote) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of descriptors or a transient error: back off briefly
                // rather than spin.
                tracing::debug!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        // Frames are small and written as they happen (a status, then the
        // reply): without this the second can wait on the client's delayed
        // ACK for 40 ms. A failure only costs that latency.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        // Reap finished connection tasks as we go (bounded bookkeeping).
        while conns.try_join_next().is_some() {}
        let svc = hyper_util::service::TowerToHyperService::new(WithConn {
            inner: svc.clone(),
            remote,
        });
        let mut stop = stop.clone();
        conns.spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_REQUEST_HEAD)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r { tracing::debug!("connection error: {e}"); }
                }
                _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), conn).await;
                }
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                warp::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const GOOD: &[(&str, &str)] = &[
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn the_rfc_example_key_is_accepted() {
        // RFC 6455 §1.3's worked example.
        assert_eq!(
            accept_key(&headers(GOOD)).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn each_missing_or_wrong_header_is_refused_by_name() {
        for (drop, why) in [
            ("connection", "Connection"),
            ("upgrade", "Upgrade"),
            ("sec-websocket-version", "Version"),
            ("sec-websocket-key", "Key"),
        ] {
            let h: Vec<_> = GOOD.iter().copied().filter(|(k, _)| *k != drop).collect();
            let e = accept_key(&headers(&h)).unwrap_err();
            assert!(e.contains(why), "{drop}: {e}");
        }
        let mut h = GOOD.to_vec();
        h[2] = ("sec-websocket-version", "8");
        assert!(accept_key(&headers(&h)).is_err());
        h = GOOD.to_vec();
        h[3] = ("sec-websocket-key", "short");
        assert!(accept_key(&headers(&h)).is_err());
        h = GOOD.to_vec();
        h[1] = ("upgrade", "h2c");
        assert!(accept_key(&headers(&h)).is_err());
    }

    #[test]
    fn the_read_buffer_is_small_and_frames_stay_bounded() {
        let c = ws_config();
        assert!(c.read_buffer_size <= 4 * 1024);
        assert_eq!(c.max_frame_size, Some(MAX_FRAME_BYTES));
        assert_eq!(c.max_message_size, Some(MAX_FRAME_BYTES));
    }

    /// The server loop on a loopback port, answering "ok" to anything.
    async fn serve_ok(
        header_timeout: std::time::Duration,
    ) -> (SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let routes = warp::any().map(|| "ok");
        let server = tokio::spawn(run(listener, warp::service(routes), stop, header_timeout));
        (addr, stop_tx, server)
    }

    /// Two `Host` or two `Origin` headers: 400 before any route runs, so
    /// no check reads one value while something else acts on the other.
    #[tokio::test]
    async fn requests_with_two_hosts_or_two_origins_are_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, stop_tx, server) = serve_ok(HEADER_READ_TIMEOUT).await;
        for (extra, status) in [
            ("", "200"),
            ("Origin: http://a\r\n", "200"),
            ("Host: evil.example\r\n", "400"),
            ("Origin: http://a\r\nOrigin: http://evil.example\r\n", "400"),
        ] {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req =
                format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n");
            conn.write_all(req.as_bytes()).await.unwrap();
            let mut answer = String::new();
            conn.read_to_string(&mut answer).await.unwrap();
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}")),
                "{extra:?}: {answer}"
            );
            if status == "400" {
                assert!(answer.contains("more than one"), "{answer}");
                assert!(
                    answer.contains("x-content-type-options: nosniff"),
                    "{answer}"
                );
            }
        }
        let mut h = HeaderMap::new();
        h.append("host", "a".parse().unwrap());
        assert_eq!(repeated_header(&h), None);
        h.append("host", "a".parse().unwrap());
        assert_eq!(repeated_header(&h), Some("host"));
        stop_tx.send(true).unwrap();
        server.await.unwrap();
    }

    /// A client that sends nothing, or half a header, is cut off once the
    /// header timeout passes; a whole request is still served.
    #[tokio::test]
    async fn connections_without_a_whole_header_are_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, stop_tx, server) = serve_ok(std::time::Duration::from_millis(300)).await;
        let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
        partial
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
        whole
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        whole.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        for (name, mut conn) in [("silent", silent), ("partial", partial)] {
            let mut buf = Vec::new();
            let read = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                conn.read_to_end(&mut buf),
            )
            .await;
            assert!(read.is_ok(), "{name}: still open after 5 s");
        }
        stop_tx.send(true).unwrap();
        server.await.unwrap();
    }
}
