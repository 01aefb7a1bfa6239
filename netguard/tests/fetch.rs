//! `GuardedFetcher` and the `web_fetch` executor against a local HTTP server
//! on 127.0.0.1 (reached through `trusted_private_cidrs = ["127.0.0.1/32"]`
//! and a scripted resolver). Every other destination in these tests is
//! refused by the guard before any connection: no traffic leaves loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use serde_json::json;
use silas_core::model::execution::{ExecutionEnvelope, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_core::{Coded, ErrorCode};
use silas_netguard::{
    FetchError, FetchRequest, GuardError, GuardedFetcher, HostRule, Method, NetworkGuard,
    NetworkGuardConfig, RangeKind, ScriptedResolver, web_fetch,
};
use support::{Canned, TestServer, ip};

const TOKEN: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";

fn cfg() -> NetworkGuardConfig {
    NetworkGuardConfig {
        allowlist: vec![
            HostRule::new("fetch.test", &[Method::Get, Method::Head, Method::Post]),
            HostRule::new("evil.test", &[]),
            // Literal destinations allowlisted on purpose, so that only the
            // range check stands between a redirect and them.
            HostRule::new("10.0.0.1", &[]),
            HostRule::new("169.254.169.254", &[]),
        ],
        trusted_private_cidrs: vec!["127.0.0.1/32".into()],
        connect_timeout_seconds: 2,
        request_timeout_seconds: 10,
        ..Default::default()
    }
}

fn resolver() -> ScriptedResolver {
    ScriptedResolver::new().with("fetch.test", &[&[ip("127.0.0.1")]])
}

fn fetcher(cfg: &NetworkGuardConfig, resolver: Arc<ScriptedResolver>) -> GuardedFetcher {
    GuardedFetcher::new(NetworkGuard::new(cfg, resolver).unwrap())
}

fn envelope(args: serde_json::Value) -> ExecutionEnvelope {
    let mut e: ExecutionEnvelope = serde_json::from_value(json!({
        "execution_id": "x1", "step_index": 3, "task_description": "read a page",
        "action": "web_fetch"
    }))
    .unwrap();
    e.args = args.as_object().unwrap().clone();
    e
}

#[tokio::test]
async fn fetch_goes_to_the_validated_address() {
    let srv = TestServer::start(|_| vec![("/hello", Canned::ok("text/plain", "hi there"))]).await;
    let r = Arc::new(resolver());
    let f = fetcher(&cfg(), r.clone());
    let resp = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/hello")))
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"hi there");
    assert_eq!(resp.header("content-type"), Some("text/plain"));
    assert_eq!(resp.hops.len(), 1);
    let pinned: std::net::SocketAddr = format!("127.0.0.1:{}", srv.port).parse().unwrap();
    assert_eq!(resp.hops[0].pinned, pinned);
    assert_eq!(resp.hops[0].remote, Some(pinned));
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].host.as_deref(),
        Some(format!("fetch.test:{}", srv.port).as_str())
    );
    assert_eq!(r.calls("fetch.test"), 1);
}

#[tokio::test]
async fn dns_rebinding_between_check_and_connect_is_never_used() {
    // The first answer is validated; any later lookup would get 127.0.0.2,
    // which is not trusted (and where nothing listens). The fetch must reach
    // the server on 127.0.0.1 with exactly one lookup: the connection uses
    // the validated address, never a second resolution. (A loopback address
    // is used as the rebound answer so that even a broken implementation
    // could not send traffic off the machine.)
    let srv = TestServer::start(|_| vec![("/", Canned::ok("text/plain", "pinned"))]).await;
    let r = Arc::new(
        ScriptedResolver::new().with("fetch.test", &[&[ip("127.0.0.1")], &[ip("127.0.0.2")]]),
    );
    let f = fetcher(&cfg(), r.clone());
    let resp = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/")))
        .await
        .unwrap();
    assert_eq!(resp.body, b"pinned");
    assert_eq!(r.calls("fetch.test"), 1, "resolved once, at check time");
    assert_eq!(srv.requests().len(), 1);
    assert_eq!(resp.hops[0].remote.unwrap().ip(), ip("127.0.0.1"));
    // The rebound answer is what a second lookup would have returned.
    let e = f
        .guard()
        .check(Method::Get, &srv.url("fetch.test", "/"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, GuardError::BlockedAddress { range, .. } if range.kind == RangeKind::Loopback)
    );
}

#[tokio::test]
async fn mixed_answers_with_one_blocked_never_connect() {
    let srv = TestServer::start(|_| vec![("/", Canned::ok("text/plain", "x"))]).await;
    let r =
        Arc::new(ScriptedResolver::new().with("fetch.test", &[&[ip("127.0.0.1"), ip("fd00::1")]]));
    let f = fetcher(&cfg(), r);
    let fail = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            fail.error,
            FetchError::Guard(GuardError::BlockedAddress { .. })
        ),
        "{fail:?}"
    );
    assert!(fail.hops.is_empty());
    assert!(srv.requests().is_empty());
}

async fn redirect_refused(location: &str, r: ScriptedResolver) -> (TestServer, GuardError) {
    let loc = location.to_string();
    let srv = TestServer::start(move |_| vec![("/go", Canned::redirect(302, &loc))]).await;
    let f = fetcher(&cfg(), Arc::new(r));
    let fail = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/go")))
        .await
        .unwrap_err();
    assert_eq!(
        fail.error.code(),
        ErrorCode::EGateBlocked,
        "{location}: {:?}",
        fail.error
    );
    assert_eq!(fail.hops.len(), 1, "only the first hop was made");
    assert_eq!(srv.requests().len(), 1);
    let FetchError::RedirectRefused(g) = fail.error else {
        panic!("{:?}", fail.error)
    };
    (srv, g)
}

#[tokio::test]
async fn redirect_to_private_address_refused_without_connecting() {
    let (_srv, g) = redirect_refused("http://10.0.0.1/", resolver()).await;
    assert!(
        matches!(g, GuardError::BlockedAddress { range, .. } if range.kind == RangeKind::Private),
        "{g:?}"
    );
}

#[tokio::test]
async fn redirect_to_metadata_refused_without_connecting() {
    let (_srv, g) = redirect_refused("http://169.254.169.254/latest/meta-data", resolver()).await;
    assert!(
        matches!(g, GuardError::BlockedAddress { range, .. } if range.kind == RangeKind::CloudMetadata),
        "{g:?}"
    );
}

#[tokio::test]
async fn redirect_to_name_resolving_private_refused() {
    let r = resolver().with("evil.test", &[&[ip("192.168.1.10")]]);
    let (_srv, g) = redirect_refused("http://evil.test/", r).await;
    assert!(
        matches!(g, GuardError::BlockedAddress { ref host, .. } if host == "evil.test"),
        "{g:?}"
    );
}

#[tokio::test]
async fn redirect_to_unlisted_host_or_blocked_port_refused() {
    let (_srv, g) = redirect_refused("https://elsewhere.example/", resolver()).await;
    assert!(matches!(g, GuardError::HostNotAllowed(_)));
    let (_srv, g) = redirect_refused("http://fetch.test:22/", resolver()).await;
    assert!(matches!(g, GuardError::BlockedPort(22)));
    let (_srv, g) = redirect_refused("http://u:p@fetch.test/", resolver()).await;
    assert!(matches!(g, GuardError::UserInfo));
}

#[tokio::test]
async fn redirect_chain_is_rechecked_and_limited() {
    let srv = TestServer::start(|port| {
        let mut routes = vec![("/c0", Canned::ok("text/plain", "end"))];
        let names = ["/c0", "/c1", "/c2", "/c3", "/c4", "/c5", "/c6"];
        for i in 1..names.len() {
            // Alternate absolute and relative Locations.
            let loc = if i % 2 == 0 {
                format!("http://fetch.test:{port}{}", names[i - 1])
            } else {
                names[i - 1].to_string()
            };
            routes.push((
                names[i],
                Canned::redirect(if i % 2 == 0 { 301 } else { 307 }, &loc),
            ));
        }
        routes
    })
    .await;
    let r = Arc::new(resolver());
    let f = fetcher(&cfg(), r.clone());
    // Five redirects: allowed (max_redirects = 5); every hop checked anew.
    let resp = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/c5")))
        .await
        .unwrap();
    assert_eq!(resp.body, b"end");
    assert_eq!(resp.hops.len(), 6);
    assert_eq!(resp.final_url.path(), "/c0");
    assert_eq!(r.calls("fetch.test"), 6, "one lookup per hop");
    // Six: refused after the sixth response.
    let before = srv.requests().len();
    let fail = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/c6")))
        .await
        .unwrap_err();
    assert!(
        matches!(fail.error, FetchError::TooManyRedirects(5)),
        "{:?}",
        fail.error
    );
    assert_eq!(fail.error.code(), ErrorCode::ESandboxFailed);
    assert_eq!(srv.requests().len() - before, 6);
}

#[tokio::test]
async fn see_other_after_post_continues_as_get_without_body() {
    let srv = TestServer::start(|_| {
        vec![
            ("/form", Canned::redirect(303, "/done")),
            ("/done", Canned::ok("text/plain", "thanks")),
        ]
    })
    .await;
    let f = fetcher(&cfg(), Arc::new(resolver()));
    let req = FetchRequest {
        method: Method::Post,
        body: Some("a=1".into()),
        ..FetchRequest::get(&srv.url("fetch.test", "/form"))
    };
    let resp = f.fetch(req).await.unwrap();
    assert_eq!(resp.body, b"thanks");
    let reqs = srv.requests();
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].body.as_str()),
        ("POST", "a=1")
    );
    assert_eq!(
        (reqs[1].method.as_str(), reqs[1].body.as_str()),
        ("GET", "")
    );
}

#[tokio::test]
async fn response_body_is_capped() {
    let srv =
        TestServer::start(|_| vec![("/big", Canned::ok("text/plain", vec![b'a'; 50_000]))]).await;
    let cfg = NetworkGuardConfig {
        max_response_bytes: 1000,
        ..cfg()
    };
    let f = fetcher(&cfg, Arc::new(resolver()));
    let resp = f
        .fetch(FetchRequest::get(&srv.url("fetch.test", "/big")))
        .await
        .unwrap();
    assert_eq!(resp.body.len(), 1000);
    assert!(resp.body_truncated);
}

fn metadata_json(r: &silas_core::model::execution::ExecutionResult) -> String {
    serde_json::to_string(&r.metadata).unwrap()
}

#[tokio::test]
async fn web_fetch_redacts_secrets_and_keeps_protocol_details_in_metadata() {
    let body = format!("config dump\ntoken = {TOKEN}\nbye\n");
    let srv = TestServer::start(move |_| {
        vec![(
            "/page",
            Canned::ok("text/plain; charset=utf-8", body.clone())
                .header("ETag", &format!("\"{TOKEN}\""))
                .header("Set-Cookie", &format!("session={TOKEN}"))
                .header("X-Internal", "secret-ish"),
        )]
    })
    .await;
    let f = fetcher(&cfg(), Arc::new(resolver()));
    let env = envelope(json!({"url": srv.url("fetch.test", "/page")}));
    let r = web_fetch(&f, &env).await;
    assert!(r.success, "{:?}", r.error);
    assert_eq!((r.execution_id.as_str(), r.step_index), ("x1", 3));
    assert_eq!(r.taint, TaintLevel::External);
    assert_eq!(
        r.return_value,
        "config dump\ntoken = [REDACTED:github_token]\nbye\n"
    );
    // Protocol details are in metadata only; no secret anywhere.
    let md = metadata_json(&r);
    assert!(!md.contains(TOKEN), "{md}");
    assert!(!md.contains("session="), "set-cookie is dropped: {md}");
    assert!(!md.contains("X-Internal") && !md.contains("x-internal"));
    assert!(matches!(&r.metadata["status"], MetadataValue::Number(n) if n.as_u64() == Some(200)));
    assert!(
        md.contains("127.0.0.1"),
        "pinned/remote addresses recorded: {md}"
    );
    assert!(
        md.contains("github_token"),
        "redaction kinds recorded: {md}"
    );
    for leak in ["127.0.0.1", "200", "content-type", "etag"] {
        assert!(
            !r.return_value.contains(leak),
            "{leak} leaked into return_value"
        );
    }
    assert!(r.content.is_empty() && r.error.is_none());
}

#[tokio::test]
async fn web_fetch_truncates_after_redaction() {
    // The secret straddles max_output_bytes: redaction first, then the cut.
    let body = format!("{}{TOKEN} and more text after it", "x".repeat(90) + " ");
    let srv =
        TestServer::start(move |_| vec![("/p", Canned::ok("text/plain", body.clone()))]).await;
    let f = fetcher(&cfg(), Arc::new(resolver()));
    let mut env = envelope(json!({"url": srv.url("fetch.test", "/p")}));
    env.max_output_bytes = 91 + 20;
    let r = web_fetch(&f, &env).await;
    assert!(r.success);
    assert_eq!(r.return_value.len(), 111);
    assert!(!r.return_value.contains("ghp_aBcD"), "{}", r.return_value);
    assert!(
        r.return_value.ends_with("[REDACTED:github_tok"),
        "{}",
        r.return_value
    );
    assert_eq!(r.metadata["output_truncated"], MetadataValue::Bool(true));
    assert!(!metadata_json(&r).contains(TOKEN));
}

#[tokio::test]
async fn web_fetch_refusals_are_results_not_connections() {
    let srv = TestServer::start(|_| vec![("/", Canned::ok("text/plain", "x"))]).await;
    let r = Arc::new(resolver().with("evil.test", &[&[ip("10.0.0.1")]]));
    let f = fetcher(&cfg(), r.clone());
    let port = srv.port;
    let cases = [
        (
            json!({"url": format!("http://not-listed.test:{port}/")}),
            ErrorCode::EGateBlocked,
        ),
        (
            json!({"url": srv.url("fetch.test", "/"), "method": "DELETE"}),
            ErrorCode::EGateBlocked,
        ),
        (
            json!({"url": format!("http://u:{TOKEN}@fetch.test:{port}/")}),
            ErrorCode::EGateBlocked,
        ),
        (
            json!({"url": "http://fetch.test:22/"}),
            ErrorCode::EGateBlocked,
        ),
        (json!({"url": "http://evil.test/"}), ErrorCode::EGateBlocked),
        (
            json!({"url": "http://169.254.169.254/latest/meta-data"}),
            ErrorCode::EGateBlocked,
        ),
        (
            json!({"url": "file:///etc/passwd"}),
            ErrorCode::EGateBlocked,
        ),
        (json!({"method": "GET"}), ErrorCode::ESandboxFailed),
        (
            json!({"url": srv.url("fetch.test", "/"), "headers": {"a": "b"}}),
            ErrorCode::ESandboxFailed,
        ),
    ];
    for (args, code) in cases {
        let res = web_fetch(&f, &envelope(args.clone())).await;
        assert!(!res.success, "{args}");
        assert_eq!(res.taint, TaintLevel::External);
        assert!(res.return_value.is_empty());
        let err = res.error.clone().unwrap();
        assert!(err.starts_with(code.as_str()), "{args}: {err}");
        assert!(!err.contains(TOKEN), "{err}");
        assert!(!metadata_json(&res).contains(TOKEN));
        assert_eq!(
            res.metadata["error_code"],
            MetadataValue::Text(code.as_str().into())
        );
    }
    assert!(srv.requests().is_empty(), "nothing was sent anywhere");
    // A blocked DNS answer: the IP is in metadata, not in the error text.
    let res = web_fetch(&f, &envelope(json!({"url": "http://evil.test/"}))).await;
    assert_eq!(
        res.metadata["blocked_addr"],
        MetadataValue::Text("10.0.0.1".into())
    );
    assert_eq!(
        res.metadata["blocked_range"],
        MetadataValue::Text("10.0.0.0/8".into())
    );
    assert!(!res.error.unwrap().contains("10.0.0.1"));
}

#[tokio::test]
async fn web_fetch_non_text_and_http_errors() {
    let srv = TestServer::start(|_| {
        vec![(
            "/img",
            Canned::ok("image/png", vec![0x89, b'P', b'N', b'G', 0, 1, 2]),
        )]
    })
    .await;
    let f = fetcher(&cfg(), Arc::new(resolver()));
    let r = web_fetch(&f, &envelope(json!({"url": srv.url("fetch.test", "/img")}))).await;
    assert!(r.success);
    assert_eq!(
        r.return_value,
        silas_netguard::executor::NON_TEXT_PLACEHOLDER
    );
    assert_eq!(r.metadata["body_textual"], MetadataValue::Bool(false));
    let r = web_fetch(
        &f,
        &envelope(json!({"url": srv.url("fetch.test", "/missing")})),
    )
    .await;
    assert!(!r.success);
    assert_eq!(r.return_value, "not found");
    assert_eq!(r.error.as_deref(), Some("web_fetch: HTTP status 404"));
}

#[tokio::test]
async fn web_fetch_times_out() {
    let srv = TestServer::start(|_| vec![("/slow", Canned::hang())]).await;
    let f = fetcher(&cfg(), Arc::new(resolver()));
    let mut env = envelope(json!({"url": srv.url("fetch.test", "/slow")}));
    env.timeout_seconds = 1;
    let started = std::time::Instant::now();
    let r = web_fetch(&f, &env).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(!r.success);
    assert!(r.error.unwrap().starts_with("E_SANDBOX_TIMEOUT"));
}
