//! The fakes' (and other tests' fake servers') HTTP/1.1 server loop under warp's routes — what
//! `warp::serve` did, without warp's `server` feature. That feature turns on
//! hyper-util's HTTP/2 server, and cargo's feature unification then
//! compiled HTTP/2 (h2) into the daemon's own HTTP client as well, although
//! nothing Silas talks to speaks it (issue #19 item 4, footprint). The fakes
//! only ever serve HTTP/1.1 on loopback.

use std::convert::Infallible;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use warp::http::Request;

/// Serves `svc` (a `warp::service(routes)`) on `listener` until `stop`
/// fires or its sender is dropped; then stops accepting and ends the open
/// connections (a fake is dropped at the end of its test).
pub fn spawn<S>(listener: TcpListener, svc: S, stop: oneshot::Receiver<()>)
where
    S: tower_service::Service<
            Request<hyper::body::Incoming>,
            Response = warp::reply::Response,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        let mut stop = std::pin::pin!(stop);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.as_mut() => break,
            };
            let Ok((stream, _)) = accepted else {
                // Transient (e.g. out of descriptors): back off, do not spin.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            while conns.try_join_next().is_some() {}
            let svc = hyper_util::service::TowerToHyperService::new(svc.clone());
            conns.spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
        conns.abort_all();
    });
}
