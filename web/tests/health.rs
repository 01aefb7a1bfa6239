//! The health endpoint over real HTTP with a real client, and bind policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use silas_web::{HealthState, WebError, WebSettings, bind};

fn settings(host: &str, token: Option<&str>) -> WebSettings {
    WebSettings {
        host: host.into(),
        port: 0,
        auth_token: token.map(str::to_string),
    }
}

#[tokio::test]
async fn health_reports_ok_and_connection_count() {
    let health = Arc::new(HealthState::default());
    let server = bind(&settings("127.0.0.1", None), health.clone())
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = server.serve(async {
        let _ = rx.await;
    });
    let client = http_client();
    let url = format!("http://{addr}/health");
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"status": "ok", "service": "silas", "connections": 0})
    );

    health.connection_opened();
    let body: serde_json::Value = client.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["connections"], 1);

    let missing = client
        .get(format!("http://{addr}/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let wrong_method = client.post(&url).send().await.unwrap();
    assert_eq!(wrong_method.status(), 405);

    tx.send(()).unwrap();
    handle.await.unwrap();
    assert!(
        client.get(&url).send().await.is_err(),
        "server still answering after shutdown"
    );
}

#[tokio::test]
async fn non_loopback_bind_requires_a_token() {
    let err = match bind(&settings("0.0.0.0", None), Arc::default()).await {
        Err(e) => e,
        Ok(_) => panic!("bound 0.0.0.0 without a token"),
    };
    assert!(matches!(err, WebError::RemoteBindWithoutToken { .. }));
    assert!(
        err.to_string().starts_with("channels.web.auth_token:"),
        "{err}"
    );
    assert!(
        bind(&settings("0.0.0.0", Some("")), Arc::default())
            .await
            .is_err()
    );
}

/// A plain-HTTP loopback client. When reqwest is built together with
/// netguard/llm it carries `rustls-no-provider`, whose `Client::new()`
/// panics unless a process crypto provider is installed: install ring first.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
