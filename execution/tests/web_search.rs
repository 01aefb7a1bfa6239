//! `web_search` against a fake provider on 127.0.0.1 (nothing here contacts
//! a non-loopback address: the production base URL is only parsed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use silas_core::config::Config;
use silas_core::model::execution::{ExecutionEnvelope, ExecutionResult, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_execution::executors::ExecutorRegistry;
use silas_execution::web_search::{
    SearchProvider, TAVILY_BASE_URL, WEB_SEARCH, WebSearch, WebSearchSettings,
};
use silas_netguard::ScriptedResolver;
use silas_sandbox::{Launcher, SubprocessSandbox};
use warp::Filter;

const KEY: &str = "tvly-CANARYkey0123456789abcdefQRST";

/// What the fake provider answers.
#[derive(Clone)]
struct Script {
    status: u16,
    body: Value,
    delay: Duration,
}

struct Fake {
    base_url: String,
    requests: Arc<AtomicUsize>,
    last_body: Arc<Mutex<Option<Value>>>,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

async fn fake_provider(script: Script) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let last_body = Arc::new(Mutex::new(None));
    let (r, b) = (requests.clone(), last_body.clone());
    let route = warp::post()
        .and(warp::path("search"))
        .and(warp::path::end())
        .and(warp::body::json())
        .then(move |body: Value| {
            let (r, b, script) = (r.clone(), b.clone(), script.clone());
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                *b.lock().unwrap() = Some(body);
                tokio::time::sleep(script.delay).await;
                warp::reply::with_status(
                    warp::reply::json(&script.body),
                    warp::http::StatusCode::from_u16(script.status).unwrap(),
                )
            }
        });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    silas_testkit::serve::spawn(listener, warp::service(route), rx);
    Fake {
        base_url: format!("http://{addr}"),
        requests,
        last_body,
        _shutdown: tx,
    }
}

fn ok(results: Value) -> Script {
    Script {
        status: 200,
        body: json!({"query": "q", "results": results}),
        delay: Duration::ZERO,
    }
}

fn settings(base_url: &str) -> WebSearchSettings {
    WebSearchSettings {
        provider: SearchProvider::Tavily,
        api_key: KEY.into(),
        base_url: base_url.into(),
        timeout_seconds: 5,
        max_results: 5,
        max_query_chars: 50,
        allowed_domains: Vec::new(),
        trusted_private_cidrs: vec!["127.0.0.0/8".into()],
    }
}

/// A registry whose sandbox is never started (web_search does not use it).
fn registry(search: Option<WebSearch>) -> ExecutorRegistry {
    let sandbox = SubprocessSandbox::new(Launcher {
        program: "/nonexistent/silas-sandbox-exec".into(),
        args: Vec::new(),
    });
    let reg = ExecutorRegistry::new(sandbox, std::env::temp_dir().join("silas-ws-unused"));
    match search {
        Some(s) => reg.with_web_search(s),
        None => reg,
    }
}

fn searcher(s: WebSearchSettings) -> WebSearch {
    WebSearch::new(s, Arc::new(ScriptedResolver::new())).unwrap()
}

fn envelope(args: Value, max_output_bytes: u64) -> ExecutionEnvelope {
    serde_json::from_value(json!({
        "execution_id": "exec-ws", "step_index": 0, "task_description": "t",
        "action": WEB_SEARCH, "args": args,
        "timeout_seconds": 20, "max_output_bytes": max_output_bytes,
    }))
    .unwrap()
}

fn md_num(r: &ExecutionResult, k: &str) -> u64 {
    match r.metadata.get(k) {
        Some(MetadataValue::Number(n)) => n.as_u64().unwrap(),
        other => panic!("metadata {k}: {other:?}"),
    }
}

fn assert_no_key(r: &ExecutionResult) {
    let all = serde_json::to_string(r).unwrap();
    assert!(!all.contains(KEY), "API key leaked: {all}");
    assert!(!all.contains("CANARYkey"), "API key fragment leaked: {all}");
}

fn result(title: &str, url: &str, content: &str) -> Value {
    json!({"title": title, "url": url, "content": content, "score": 0.9})
}

#[tokio::test]
async fn happy_path_formats_numbered_results_and_keeps_diagnostics_in_metadata() {
    let fake = fake_provider(ok(json!([
        result(
            "Rust  Book",
            "https://doc.rust-lang.org/book/",
            "The Rust\nProgramming   Language."
        ),
        result("Tokio", "https://tokio.rs/", "An async runtime."),
    ])))
    .await;
    let reg = registry(Some(searcher(settings(&fake.base_url))));
    assert!(reg.names().contains(&WEB_SEARCH));
    let r = reg
        .execute(&envelope(json!({"query": "  rust async  "}), 4000))
        .await;
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.taint, TaintLevel::External);
    assert_eq!(
        r.return_value,
        "Web search results for \"rust async\":\n\
         \n1. Rust Book\n   https://doc.rust-lang.org/book/\n   The Rust Programming Language.\n\
         \n2. Tokio\n   https://tokio.rs/\n   An async runtime.\n"
    );
    // Diagnostics only in metadata.
    assert_eq!(md_num(&r, "status"), 200);
    assert_eq!(md_num(&r, "results_returned"), 2);
    assert_eq!(md_num(&r, "results_kept"), 2);
    assert_eq!(md_num(&r, "dropped_by_domain"), 0);
    assert!(r.metadata.contains_key("latency_ms"));
    assert!(!r.return_value.contains("200") && !r.return_value.contains("latency"));
    // The request the provider saw.
    assert_eq!(fake.requests.load(Ordering::SeqCst), 1);
    let body = fake.last_body.lock().unwrap().clone().unwrap();
    assert_eq!(body["api_key"], KEY);
    assert_eq!(body["query"], "rust async");
    assert_eq!(body["max_results"], 5);
    assert!(body.get("include_domains").is_none());
    assert_no_key(&r);
}

#[tokio::test]
async fn empty_result_list_is_a_successful_no_results_answer() {
    let fake = fake_provider(ok(json!([]))).await;
    let r = searcher(settings(&fake.base_url))
        .execute(&envelope(json!({"query": "nothing"}), 4000))
        .await;
    assert!(r.success);
    assert_eq!(r.return_value, "No web search results for \"nothing\".");
}

#[tokio::test]
async fn over_long_query_is_refused_before_any_request() {
    let fake = fake_provider(ok(json!([]))).await;
    let ws = searcher(settings(&fake.base_url));
    // 51 characters (multi-byte: the limit counts characters, not bytes).
    let r = ws
        .execute(&envelope(json!({"query": "é".repeat(51)}), 4000))
        .await;
    assert!(!r.success);
    assert!(r.error.as_deref().unwrap().starts_with("E_GATE_BLOCKED"));
    assert!(r.error.as_deref().unwrap().contains("limit is 50"));
    assert_eq!(md_num(&r, "requests"), 0);
    // Exactly at the limit is fine.
    let ok50 = ws
        .execute(&envelope(json!({"query": "é".repeat(50)}), 4000))
        .await;
    assert!(ok50.success, "{:?}", ok50.error);
    assert_eq!(fake.requests.load(Ordering::SeqCst), 1);
    // Malformed arguments are refused without a request too.
    for bad in [
        json!({}),
        json!({"query": 5}),
        json!({"query": "   "}),
        json!({"query": "x", "max_results": 0}),
        json!({"query": "x", "max_results": "3"}),
        json!({"query": "x", "url": "https://evil.example/"}),
    ] {
        let r = ws.execute(&envelope(bad.clone(), 4000)).await;
        assert!(!r.success, "{bad}");
        assert!(r.error.unwrap().starts_with("E_SANDBOX_FAILED"), "{bad}");
    }
    assert_eq!(fake.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn max_results_is_enforced_and_can_only_be_lowered() {
    let many: Vec<Value> = (1..=8)
        .map(|i| result(&format!("T{i}"), &format!("https://r{i}.example.org/"), "s"))
        .collect();
    let fake = fake_provider(ok(Value::Array(many))).await;
    let ws = searcher(WebSearchSettings {
        max_results: 3,
        ..settings(&fake.base_url)
    });
    let r = ws.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(r.success);
    assert!(r.return_value.contains("\n3. T3\n") && !r.return_value.contains("4. T4"));
    assert_eq!(md_num(&r, "results_returned"), 8);
    assert_eq!(md_num(&r, "results_kept"), 3);
    assert_eq!(md_num(&r, "dropped_over_limit"), 5);
    assert_eq!(
        fake.last_body.lock().unwrap().clone().unwrap()["max_results"],
        3
    );

    let r = ws
        .execute(&envelope(json!({"query": "q", "max_results": 2}), 4000))
        .await;
    assert_eq!(md_num(&r, "results_kept"), 2);
    assert_eq!(
        fake.last_body.lock().unwrap().clone().unwrap()["max_results"],
        2
    );
    let r = ws
        .execute(&envelope(json!({"query": "q", "max_results": 50}), 4000))
        .await;
    assert_eq!(md_num(&r, "results_kept"), 3, "cannot raise the limit");
    assert_eq!(
        fake.last_body.lock().unwrap().clone().unwrap()["max_results"],
        3
    );
}

#[tokio::test]
async fn domain_allowlist_drops_other_hosts() {
    let fake = fake_provider(ok(json!([
        result("A", "https://docs.example.org/a", "kept: subdomain"),
        result("B", "https://badexample.org/b", "not a subdomain"),
        result("C", "https://example.org.evil.com/c", "suffix trick"),
        result("D", "https://EXAMPLE.org/d", "kept: exact"),
        result("E", "https://evil.com/?u=example.org", "other host"),
        result("F", "javascript:alert(1)", "not http"),
        json!({"title": "G", "content": "no url"}),
    ])))
    .await;
    let ws = searcher(WebSearchSettings {
        allowed_domains: vec!["Example.org".into()],
        ..settings(&fake.base_url)
    });
    let r = ws.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(r.success, "{:?}", r.error);
    assert!(
        r.return_value
            .contains("1. A\n   https://docs.example.org/a")
    );
    assert!(r.return_value.contains("2. D\n   https://example.org/d"));
    for gone in ["badexample", "evil.com", "javascript", "no url", "3."] {
        assert!(!r.return_value.contains(gone), "{gone}: {}", r.return_value);
    }
    assert_eq!(md_num(&r, "results_kept"), 2);
    assert_eq!(md_num(&r, "dropped_by_domain"), 3);
    assert_eq!(md_num(&r, "dropped_invalid_url"), 2);
    let body = fake.last_body.lock().unwrap().clone().unwrap();
    assert_eq!(body["include_domains"], json!(["example.org"]));
}

#[tokio::test]
async fn slow_provider_times_out() {
    let fake = fake_provider(Script {
        delay: Duration::from_secs(5),
        ..ok(json!([]))
    })
    .await;
    let ws = searcher(WebSearchSettings {
        timeout_seconds: 1,
        ..settings(&fake.base_url)
    });
    let started = Instant::now();
    let r = ws.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(!r.success);
    let err = r.error.clone().unwrap();
    assert!(err.starts_with("E_SANDBOX_TIMEOUT"), "{err}");
    assert!(
        matches!(r.metadata.get("error_code"), Some(MetadataValue::Text(c)) if c == "E_SANDBOX_TIMEOUT")
    );
    assert_eq!(r.taint, TaintLevel::External);
    assert_no_key(&r);
}

#[tokio::test]
async fn non_2xx_is_a_failure_without_the_provider_body() {
    let fake = fake_provider(Script {
        status: 401,
        body: json!({"detail": {"error": format!("Unauthorized: invalid API key {KEY}")}}),
        delay: Duration::ZERO,
    })
    .await;
    let r = searcher(settings(&fake.base_url))
        .execute(&envelope(json!({"query": "q"}), 4000))
        .await;
    assert!(!r.success);
    assert!(r.return_value.is_empty());
    let err = r.error.clone().unwrap();
    assert!(
        err.starts_with("E_SANDBOX_FAILED") && err.contains("HTTP 401"),
        "{err}"
    );
    assert_eq!(md_num(&r, "status"), 401);
    assert_no_key(&r);
}

#[tokio::test]
async fn api_key_canary_never_leaves_in_any_channel() {
    // A provider that echoes the key in every field.
    let fake = fake_provider(ok(json!([result(
        &format!("title {KEY}"),
        &format!("https://example.org/?k={KEY}"),
        &format!("snippet {KEY} end"),
    )])))
    .await;
    let ws = searcher(settings(&fake.base_url));
    let r = ws
        .execute(&envelope(json!({"query": format!("q {KEY}")}), 4000))
        .await;
    assert!(r.success, "{:?}", r.error);
    assert!(r.return_value.contains("[REDACTED:search_api_key]"));
    assert_no_key(&r);
    // Refusal paths.
    let r = ws
        .execute(&envelope(json!({"query": KEY, "bogus": KEY}), 4000))
        .await;
    assert_no_key(&r);
    let r = ws
        .execute(&envelope(json!({"query": KEY.repeat(3)}), 4000))
        .await;
    assert_no_key(&r);
    // Guard refusal (loopback not trusted) and a refused connection.
    let untrusted = searcher(WebSearchSettings {
        trusted_private_cidrs: Vec::new(),
        ..settings(&fake.base_url)
    });
    let r = untrusted
        .execute(&envelope(json!({"query": "q"}), 4000))
        .await;
    assert!(!r.success);
    assert_no_key(&r);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = searcher(settings(&format!("http://{closed}")))
        .execute(&envelope(json!({"query": "q"}), 4000))
        .await;
    assert!(!r.success);
    assert_no_key(&r);
    assert!(!format!("{ws:?}").contains(KEY));
}

#[tokio::test]
async fn provider_connection_goes_through_the_network_guard() {
    let fake = fake_provider(ok(json!([]))).await;
    // Without the test-only loopback exemption the guard refuses 127.0.0.1.
    let ws = searcher(WebSearchSettings {
        trusted_private_cidrs: Vec::new(),
        ..settings(&fake.base_url)
    });
    let r = ws.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(!r.success);
    assert!(r.error.unwrap().starts_with("E_GATE_BLOCKED"));
    assert_eq!(fake.requests.load(Ordering::SeqCst), 0);
    // The key never travels in clear text to a non-loopback host.
    for bad in ["http://search.example.org", "http://10.1.2.3:8080"] {
        assert!(WebSearch::new(settings(bad), Arc::new(ScriptedResolver::new())).is_err());
    }
}

#[tokio::test]
async fn secrets_in_results_are_redacted_before_truncation() {
    let token = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
    let fake = fake_provider(ok(json!([result(
        "Leaky page",
        "https://example.org/leak",
        &format!("config dump: {token} more text after the token"),
    )])))
    .await;
    let ws = searcher(settings(&fake.base_url));
    let full = ws.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(full.success);
    assert!(full.return_value.contains("[REDACTED:github_token]"));
    assert!(!full.return_value.contains("ghp_"));
    assert_eq!(md_num(&full, "secrets_redacted"), 1);
    // Cap the output in the middle of where the token was.
    let at = full.return_value.find("config dump: ").unwrap() + "config dump: ".len() + 10;
    let cut = ws
        .execute(&envelope(json!({"query": "q"}), at as u64))
        .await;
    assert!(cut.success);
    assert!(!cut.return_value.contains("ghp_"), "{}", cut.return_value);
    assert!(!cut.return_value.contains("aBcDeF"), "{}", cut.return_value);
    assert!(cut.return_value.contains("[output truncated"));
    assert!(md_num(&cut, "output_truncated_bytes") > 0);
}

#[tokio::test]
async fn unconfigured_search_is_not_registered() {
    // Default config: provider tavily, no key → disabled.
    let mut cfg = Config::default();
    assert!(!cfg.web_search_enabled());
    assert!(WebSearch::from_config(&cfg).unwrap().is_none());
    cfg.search.api_key = Some(String::new());
    assert!(WebSearch::from_config(&cfg).unwrap().is_none());

    let reg = registry(None);
    assert!(!reg.names().contains(&WEB_SEARCH));
    let r = reg.execute(&envelope(json!({"query": "q"}), 4000)).await;
    assert!(!r.success);
    assert!(r.error.unwrap().contains("web_search is not configured"));
    assert_eq!(r.taint, TaintLevel::External);

    // Configured: built against the production URL, which is only parsed.
    cfg.search.api_key = Some(KEY.into());
    let ws = WebSearch::from_config(&cfg).unwrap().unwrap();
    assert_eq!(ws.settings().base_url, TAVILY_BASE_URL);
    assert!(ws.settings().trusted_private_cidrs.is_empty());
    assert!(registry(Some(ws)).names().contains(&WEB_SEARCH));
    cfg.search.provider = Some("bing".into());
    assert!(WebSearch::from_config(&cfg).is_err());
}
