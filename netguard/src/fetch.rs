//! `GuardedFetcher`: HTTP(S) requests whose every hop passed
//! [`NetworkGuard::check`] and whose connection goes to exactly the address
//! that was validated.
//!
//! Per hop a fresh reqwest client is built with:
//! * a pinned DNS resolver that answers only the validated host, only with
//!   the validated addresses, and refuses any other name — there is no second
//!   lookup, so a rebinding DNS answer is never used (IP-literal hosts are
//!   connected to directly);
//! * no proxy (`no_proxy()`: `HTTP_PROXY` & co. are ignored), no automatic
//!   redirects, no retries, no referer, connect and request timeouts;
//! * rustls with the `ring` provider (no native-tls/openssl, no aws-lc) and
//!   the platform's trust store.
//!
//! Redirects (301/302/303/307/308 with a `Location`) are followed by hand up
//! to `max_redirects`, each target checked again (allowlist, method, DNS,
//! ranges); an https→http downgrade is refused. 303, and 301/302 after a
//! POST, continue as GET without a body. The response body is read up to
//! `max_response_bytes`; the rest is never downloaded. As a belt-and-braces
//! check, the peer address the client reports must be a validated one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::error::FetchError;
use crate::guard::{NetworkGuard, ValidatedTarget};
use crate::policy::{Method, normalize_host};

/// Response headers kept (for metadata); everything else, notably
/// `set-cookie`, is dropped.
pub const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "content-language",
    "last-modified",
    "etag",
    "cache-control",
    "date",
    "location",
];

/// One request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    pub method: Method,
    pub url: String,
    pub body: Option<String>,
    /// `Content-Type` for `body`; defaults to `text/plain; charset=utf-8`.
    pub content_type: Option<String>,
    /// Shortens (never extends) the configured request timeout.
    pub timeout: Option<Duration>,
}

impl FetchRequest {
    pub fn get(url: &str) -> Self {
        FetchRequest {
            method: Method::Get,
            url: url.to_string(),
            body: None,
            content_type: None,
            timeout: None,
        }
    }
}

/// One request/response exchange of a fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub method: Method,
    pub url: String,
    /// The validated address the connection was pinned to.
    pub pinned: SocketAddr,
    /// The peer address the client reports having connected to.
    pub remote: Option<SocketAddr>,
    pub status: u16,
}

/// A completed fetch (the final hop's response).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchResponse {
    pub status: u16,
    pub final_url: Url,
    /// [`KEPT_HEADERS`] only, lowercase names, non-UTF-8 values dropped.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body was longer than `max_response_bytes` and was cut.
    pub body_truncated: bool,
    /// Every exchange, redirects included, in order.
    pub hops: Vec<Hop>,
}

impl FetchResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A failed fetch and the exchanges completed before it failed.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct FetchFailure {
    pub error: FetchError,
    pub hops: Vec<Hop>,
}

/// Resolves only the validated host, only to the validated addresses.
struct PinnedDns {
    host: String,
    addrs: Vec<SocketAddr>,
}

impl reqwest::dns::Resolve for PinnedDns {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let result: Result<reqwest::dns::Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if normalize_host(name.as_str()) == self.host {
                Ok(Box::new(self.addrs.clone().into_iter()))
            } else {
                Err(format!(
                    "name {} was not validated by the network guard",
                    name.as_str()
                )
                .into())
            };
        Box::pin(std::future::ready(result))
    }
}

/// Makes guarded HTTP requests.
#[derive(Clone, Debug)]
pub struct GuardedFetcher {
    guard: NetworkGuard,
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

impl GuardedFetcher {
    pub fn new(guard: NetworkGuard) -> Self {
        GuardedFetcher { guard }
    }

    pub fn guard(&self) -> &NetworkGuard {
        &self.guard
    }

    /// Fetch, following re-validated redirects. Never connects anywhere
    /// `NetworkGuard::check` did not approve.
    pub async fn fetch(&self, req: FetchRequest) -> Result<FetchResponse, FetchFailure> {
        let cfg = self.guard.config();
        let total = req
            .timeout
            .map_or(cfg.request_timeout, |t| t.min(cfg.request_timeout));
        let mut hops = Vec::new();
        let outcome = tokio::time::timeout(total, self.fetch_hops(req, total, &mut hops)).await;
        match outcome {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(error)) => Err(FetchFailure { error, hops }),
            Err(_) => Err(FetchFailure {
                error: FetchError::Timeout,
                hops,
            }),
        }
    }

    async fn fetch_hops(
        &self,
        req: FetchRequest,
        total: Duration,
        hops: &mut Vec<Hop>,
    ) -> Result<FetchResponse, FetchError> {
        let cfg = self.guard.config();
        let mut method = req.method;
        let mut body = req.body;
        let mut target = self
            .guard
            .check(method, &req.url)
            .await
            .map_err(FetchError::Guard)?;
        loop {
            let client = self.client_for(&target, total)?;
            let mut rb = client.request(to_reqwest(method), target.url.clone());
            if let Some(b) = &body {
                let ct = req
                    .content_type
                    .as_deref()
                    .unwrap_or("text/plain; charset=utf-8");
                rb = rb.header(reqwest::header::CONTENT_TYPE, ct).body(b.clone());
            }
            let mut resp = rb
                .send()
                .await
                .map_err(|e| FetchError::http("request", &e))?;
            let remote = resp.remote_addr();
            if let Some(r) = remote
                && !target.addrs.iter().any(|a| a.ip() == r.ip())
            {
                return Err(FetchError::PinViolation);
            }
            let status = resp.status().as_u16();
            hops.push(Hop {
                method,
                url: target.url.to_string(),
                pinned: target.addr,
                remote,
                status,
            });
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|v| v.to_str().map(str::to_string));
            if is_redirect(status)
                && let Some(location) = location
            {
                let location = location.map_err(|_| FetchError::BadRedirect)?;
                if hops.len() > cfg.max_redirects {
                    return Err(FetchError::TooManyRedirects(cfg.max_redirects));
                }
                let (next, next_method) = plan_redirect(&target.url, status, &location, method)?;
                if next_method != method {
                    body = None;
                }
                method = next_method;
                drop(resp);
                target = self
                    .guard
                    .check_url(method, next)
                    .await
                    .map_err(FetchError::RedirectRefused)?;
                continue;
            }
            let headers = resp
                .headers()
                .iter()
                .filter(|(k, _)| KEPT_HEADERS.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            let cap = cfg.max_response_bytes;
            let mut buf: Vec<u8> = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| FetchError::http("reading the body", &e))?
            {
                let room = cap - buf.len();
                if chunk.len() > room {
                    buf.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                buf.extend_from_slice(&chunk);
            }
            return Ok(FetchResponse {
                status,
                final_url: target.url,
                headers,
                body: buf,
                body_truncated: truncated,
                hops: std::mem::take(hops),
            });
        }
    }

    fn client_for(
        &self,
        target: &ValidatedTarget,
        total: Duration,
    ) -> Result<reqwest::Client, FetchError> {
        let cfg = self.guard.config();
        // reqwest has no crypto backend of its own (`rustls-no-provider`).
        crate::tls::ensure_crypto_provider();
        reqwest::Client::builder()
            .tls_backend_rustls()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .referer(false)
            .pool_max_idle_per_host(0)
            .connect_timeout(cfg.connect_timeout)
            .timeout(total)
            .user_agent(cfg.user_agent.clone())
            .dns_resolver(Arc::new(PinnedDns {
                host: target.host.clone(),
                addrs: target.addrs.clone(),
            }))
            .build()
            .map_err(|e| FetchError::Client(e.to_string()))
    }
}

/// Where a redirect leads and with which method: `Location` resolved
/// against the current URL; https→http refused; 303 (except after HEAD), and
/// 301/302 after POST, continue as GET (the caller drops the body).
pub fn plan_redirect(
    current: &Url,
    status: u16,
    location: &str,
    method: Method,
) -> Result<(Url, Method), FetchError> {
    let next = current
        .join(location)
        .map_err(|_| FetchError::BadRedirect)?;
    if current.scheme() == "https" && next.scheme() == "http" {
        return Err(FetchError::RedirectDowngrade);
    }
    let method = if status == 303 && method != Method::Head
        || matches!(status, 301 | 302) && method == Method::Post
    {
        Method::Get
    } else {
        method
    };
    Ok((next, method))
}

fn to_reqwest(m: Method) -> reqwest::Method {
    match m {
        Method::Get => reqwest::Method::GET,
        Method::Head => reqwest::Method::HEAD,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
        Method::Options => reqwest::Method::OPTIONS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_plans() {
        let base = Url::parse("https://a.example/dir/page?q=1").unwrap();
        let plan = |status, loc: &str, m| plan_redirect(&base, status, loc, m);
        let (u, m) = plan(302, "other", Method::Get).unwrap();
        assert_eq!(
            (u.as_str(), m),
            ("https://a.example/dir/other", Method::Get)
        );
        let (u, _) = plan(301, "//b.example/x", Method::Get).unwrap();
        assert_eq!(u.as_str(), "https://b.example/x");
        assert_eq!(plan(303, "/x", Method::Post).unwrap().1, Method::Get);
        assert_eq!(plan(303, "/x", Method::Head).unwrap().1, Method::Head);
        assert_eq!(plan(303, "/x", Method::Put).unwrap().1, Method::Get);
        assert_eq!(plan(302, "/x", Method::Post).unwrap().1, Method::Get);
        assert_eq!(plan(301, "/x", Method::Put).unwrap().1, Method::Put);
        assert_eq!(plan(307, "/x", Method::Post).unwrap().1, Method::Post);
        assert_eq!(plan(308, "/x", Method::Delete).unwrap().1, Method::Delete);
        assert!(matches!(
            plan(302, "http://a.example/", Method::Get),
            Err(FetchError::RedirectDowngrade)
        ));
        assert!(matches!(
            plan(302, "http://[::1", Method::Get),
            Err(FetchError::BadRedirect)
        ));
        // Non-http schemes pass here and are refused by the guard's check.
        assert_eq!(
            plan(302, "file:///etc/passwd", Method::Get)
                .unwrap()
                .0
                .scheme(),
            "file"
        );
        let http = Url::parse("http://a.example/").unwrap();
        assert!(plan_redirect(&http, 302, "https://a.example/", Method::Get).is_ok());
    }

    /// The production per-hop client for an `https://` target builds with
    /// nothing installed beforehand (reqwest has no crypto backend of its
    /// own and would panic), and leaves `ring` as the process provider. No
    /// connection is made.
    #[test]
    fn https_client_builds_with_the_ring_provider() {
        let guard = NetworkGuard::new(
            &crate::NetworkGuardConfig::default(),
            Arc::new(crate::ScriptedResolver::new()),
        )
        .unwrap();
        let addr: SocketAddr = "192.0.2.1:443".parse().unwrap();
        let target = ValidatedTarget {
            method: Method::Get,
            url: Url::parse("https://example.org/").unwrap(),
            host: "example.org".into(),
            port: 443,
            addr,
            addrs: vec![addr],
            exempted: Vec::new(),
            ip_literal: false,
        };
        GuardedFetcher::new(guard)
            .client_for(&target, Duration::from_secs(5))
            .unwrap();
        let p = rustls::crypto::CryptoProvider::get_default().unwrap();
        assert_eq!(format!("{:?}", p.key_provider), "Ring");
    }
}
