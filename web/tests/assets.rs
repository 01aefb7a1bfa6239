//! The embedded PWA shell over real HTTP: content types, the security
//! headers on every response (assets, API, errors), and 404 for the rest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use silas_web::{HealthState, WebSettings, bind};

const CSP: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   style-src 'self'; script-src 'self'; frame-ancestors 'none'";

fn assert_security_headers(resp: &reqwest::Response, what: &str) {
    let h = resp.headers();
    assert_eq!(h["content-security-policy"], CSP, "{what}");
    assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
    assert_eq!(h["referrer-policy"], "no-referrer", "{what}");
    assert_eq!(h["cross-origin-resource-policy"], "same-origin", "{what}");
}

#[tokio::test]
async fn shell_is_served_with_types_and_security_headers() {
    let server = bind(
        &WebSettings {
            host: "127.0.0.1".into(),
            port: 0,
            auth_token: None,
        },
        Arc::new(HealthState::default()),
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = server.serve(async {
        let _ = rx.await;
    });
    let client = http_client();

    let cases = [
        ("/", "text/html; charset=utf-8", "<!doctype html>"),
        ("/index.html", "text/html; charset=utf-8", "<!doctype html>"),
        (
            "/app.js",
            "text/javascript; charset=utf-8",
            "approval_response",
        ),
        ("/app.css", "text/css; charset=utf-8", ".card"),
        (
            "/manifest.json",
            "application/manifest+json",
            "\"start_url\"",
        ),
        ("/sw.js", "text/javascript; charset=utf-8", "caches"),
        ("/icon.svg", "image/svg+xml", "<svg"),
    ];
    for (path, ty, needle) in cases {
        let resp = client
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], ty, "{path}");
        assert_security_headers(&resp, path);
        let body = resp.text().await.unwrap();
        assert!(body.contains(needle), "{path} lacks {needle}");
    }
    let manifest: serde_json::Value = client
        .get(format!("http://{addr}/manifest.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(manifest["display"], "standalone");

    // The API and the error paths carry the headers too.
    let health = client
        .get(format!("http://{addr}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_security_headers(&health, "/health");
    for path in ["/nope", "/app.js/x", "/assets/app.js", "/../Cargo.toml"] {
        let resp = client
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        assert_security_headers(&resp, path);
    }
    let wrong = client
        .post(format!("http://{addr}/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
    assert_security_headers(&wrong, "POST /app.js");

    tx.send(()).unwrap();
    handle.await.unwrap();
}

/// A plain-HTTP loopback client. When reqwest is built together with
/// netguard/llm it carries `rustls-no-provider`, whose `Client::new()`
/// panics unless a process crypto provider is installed: install ring first.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
