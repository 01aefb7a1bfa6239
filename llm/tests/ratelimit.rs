//! 429 and `retry-after` over real HTTP against loopback fake servers
//! (issue #16, item 4): a short `retry-after` is waited on the same
//! provider; one too long (or past the call's time) gives up at once so a
//! chain's next provider answers without delay; no header keeps the
//! bounded backoff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use silas_core::config::{MapEnv, ModelEndpoint};
use silas_core::{Coded, ErrorCode};
use silas_llm::LlmError;
use silas_llm::chain::{BreakerBoard, BreakerPolicy, ChainProvider, Member};
use silas_llm::openai::OpenAiProvider;
use silas_llm::provider::{ChatRequest, Provider, RetryPolicy};
use silas_testkit::{FakeLlm, Reply};

fn policy(timeout: Duration, backoff_ms: u64) -> RetryPolicy {
    RetryPolicy {
        timeout,
        max_retries: 2,
        backoff_initial: Duration::from_millis(backoff_ms),
        backoff_max: Duration::from_millis(backoff_ms * 4),
    }
}

fn provider(name: &str, fake: &FakeLlm, policy: RetryPolicy) -> Arc<dyn Provider> {
    let endpoint = ModelEndpoint {
        provider: name.into(),
        base_url: fake.base_url(),
        api_key_env: None,
        model: "m".into(),
        structured_output: Default::default(),
        tool_calling: Default::default(),
        ..Default::default()
    };
    Arc::new(OpenAiProvider::from_endpoint(&endpoint, &MapEnv::new(), policy).unwrap())
}

fn request() -> ChatRequest {
    ChatRequest::new("m", "sys", "hello")
}

fn limited(after: &str) -> Reply {
    Reply::rate_limited().with_header("retry-after", after)
}

#[tokio::test]
async fn a_short_retry_after_is_waited_then_the_same_provider_answers() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([limited("1"), Reply::content("ok")]);
    // Backoff of 1 ms: the wait measured below is the server's, not ours.
    let p = provider("a", &fake, policy(Duration::from_secs(5), 1));
    let t = Instant::now();
    let resp = p.complete(&request()).await.unwrap();
    let took = t.elapsed();
    assert_eq!(resp.content.as_deref(), Some("ok"));
    assert_eq!(fake.served(), 2);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(3), "one wait only: {took:?}");
}

#[tokio::test]
async fn an_http_date_retry_after_in_the_past_retries_at_once() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        limited("Wed, 21 Oct 2015 07:28:00 GMT"),
        Reply::content("ok"),
    ]);
    // A large backoff: an immediate retry shows the header, not the
    // backoff, decided the delay.
    let p = provider("a", &fake, policy(Duration::from_secs(5), 2000));
    let t = Instant::now();
    assert_eq!(
        p.complete(&request()).await.unwrap().content.as_deref(),
        Some("ok")
    );
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn a_long_retry_after_moves_a_chain_to_the_next_provider_at_once() {
    let (a, b) = (
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
    );
    a.set_fallback(limited("60"));
    b.push(Reply::content("from b"));
    let pol = policy(Duration::from_secs(30), 200);
    let chain = ChainProvider::new(
        vec![
            Member {
                provider: provider("a", &a, pol),
                model: "m".into(),
            },
            Member {
                provider: provider("b", &b, pol),
                model: "m".into(),
            },
        ],
        Arc::new(BreakerBoard::new(BreakerPolicy::default(), None)),
    );
    let t = Instant::now();
    let resp = chain.complete(&request()).await.unwrap();
    let took = t.elapsed();
    assert_eq!(resp.content.as_deref(), Some("from b"));
    assert_eq!(a.served(), 1, "no retry and no backoff on a");
    assert!(took < Duration::from_millis(500), "{took:?}");
}

#[tokio::test]
async fn a_retry_after_past_the_calls_time_gives_up_at_once() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(limited("3"));
    // Under the cap, but the call has only 2 s.
    let p = provider("a", &fake, policy(Duration::from_secs(2), 200));
    let t = Instant::now();
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(e.code(), ErrorCode::ELlmRateLimited);
    assert!(
        matches!(&e, LlmError::RateLimited { attempts: 1, message } if message == "rate limited"),
        "{e:?}"
    );
    assert_eq!(fake.served(), 1);
}

#[tokio::test]
async fn a_429_without_the_header_keeps_the_bounded_backoff() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_fallback(Reply::rate_limited());
    // Backoff 150 ms then 300 ms: three attempts, ≥ 450 ms in all.
    let p = provider("a", &fake, policy(Duration::from_secs(5), 150));
    let t = Instant::now();
    let e = p.complete(&request()).await.unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(e, LlmError::RateLimited { attempts: 3, .. }),
        "{e:?}"
    );
    assert_eq!(fake.served(), 3);
    assert!(took >= Duration::from_millis(450), "{took:?}");
}

/// A reply past `MAX_RESPONSE_BYTES` (a hostile or broken endpoint's 200 MB
/// answer grew the daemon to 1.9 GB and was stored whole) is refused where
/// the bound is crossed, once, not retried; one under it is read whole.
#[tokio::test]
async fn a_reply_larger_than_the_bound_is_refused_unread() {
    let limit = silas_llm::ratelimit::MAX_RESPONSE_BYTES;
    let fake = FakeLlm::start().await.unwrap();
    fake.push_all([
        Reply::content("B".repeat(limit + 1)),
        Reply::content("b".repeat(limit / 2)),
    ]);
    let p = provider("big", &fake, policy(Duration::from_secs(20), 1));
    let err = p.complete(&request()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::ELlmParse, "{err}");
    assert!(err.to_string().contains("larger than"), "{err}");
    assert_eq!(
        fake.served(),
        1,
        "an oversized reply is not asked for again"
    );
    let ok = p.complete(&request()).await.unwrap();
    assert_eq!(ok.content.map(|c| c.len()), Some(limit / 2));
}
