//! `silas-web`: the web channel's HTTP server (warp).
//!
//! At this stage it serves `GET /health`; the WebSocket protocol and the PWA
//! arrive with the web-channel work. What this crate guarantees already:
//! it binds loopback by default and refuses a non-loopback bind without an
//! auth token (defence in depth behind the config validation), and it shuts
//! down gracefully on the signal it is given.
//!
//! **Architecture invariant:** no business logic here — the server reads
//! shared counters and forwards frames; decisions live in the actors.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use silas_core::{Coded, ErrorCode};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use warp::Filter;

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
    Ok(BoundServer { listener, health })
}

impl BoundServer {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serve until `shutdown` resolves; in-flight requests finish first.
    pub fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let routes = routes(self.health);
        tokio::spawn(
            warp::serve(routes)
                .incoming(self.listener)
                .graceful(shutdown)
                .run(),
        )
    }
}

fn routes(
    health: Arc<HealthState>,
) -> impl Filter<Extract = (impl warp::Reply,), Error = warp::Rejection> + Clone {
    warp::path("health")
        .and(warp::path::end())
        .and(warp::get())
        .map(move || {
            warp::reply::json(&HealthBody {
                status: "ok",
                connections: health.connections(),
            })
        })
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
