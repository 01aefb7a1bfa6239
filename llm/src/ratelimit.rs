//! 429 and `retry-after` (issue #16, item 4).
//!
//! async-openai reads an error response's body into `OpenAIError::ApiError`
//! and drops its headers, so [`RateLimitService`] — the HTTP service handed
//! to async-openai — looks at the response first: a 429 becomes
//! [`RateLimitResponse`] carrying the server's `retry-after` (seconds or an
//! HTTP date) next to its error text.
//!
//! [`wait_for`] decides what the provider does with it: wait when the delay
//! is at most [`RETRY_AFTER_CAP`] and fits the call's remaining time,
//! otherwise give up at once (`E_LLM_RATE_LIMITED`) so a fallback chain
//! moves to its next provider without sleeping. A 429 without the header
//! keeps the provider's bounded exponential backoff.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;

/// The longest `retry-after` a call waits; a longer one moves on at once.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(10);

/// A 429 answer: the server's error text and its `retry-after`, if any.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RateLimitResponse {
    /// The error body's `error.message` (or the body itself, truncated).
    pub message: String,
    /// How long the server asked us to wait (an HTTP date in the past is 0).
    pub retry_after: Option<Duration>,
}

/// `retry-after` as sent: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
/// Anything else is treated as absent.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(seconds) = v.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// How long to wait before retrying a rate-limited call, or `None` to give
/// up now: the server's delay must be at most the cap and leave the call
/// time to finish before its deadline (`remaining`).
pub fn wait_for(retry_after: Duration, remaining: Duration) -> Option<Duration> {
    (retry_after <= RETRY_AFTER_CAP && retry_after < remaining).then_some(retry_after)
}

/// The error text of a 429 body: OpenAI's `{"error": {"message"}}`, a bare
/// `{"error": "…"}`, else the body itself (truncated).
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let e = v.get("error").or_else(|| v.get("detail"))?;
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_owned)
    });
    from_json.unwrap_or_else(|| body.chars().take(2000).collect())
}

/// An answer async-openai would only report as "failed deserialization"
/// (and log whole): a success that is no chat completion, or an error whose
/// body is not OpenAI's `{"error": {…}}` (FastAPI's `{"detail": …}`, an
/// HTML 404 page). Said here, with the status, so the owner learns that
/// `base_url` is wrong rather than that the model "sent a response I could
/// not read".
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum UnusualAnswer {
    #[error("{0}")]
    NotChat(String),
    #[error("HTTP {status}: {message}")]
    Status { status: u16, message: String },
}

/// Whether `body` is what async-openai reads: for a success, a JSON object
/// with `choices`; for an error, OpenAI's `{"error": {…}}`. Cheap on the
/// turn path: a byte scan, no parse, for a well-formed completion.
pub fn screen_answer(status: u16, content_type: &str, body: &[u8]) -> Result<(), UnusualAnswer> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let is_object = first == Some(b'{');
    if (200..300).contains(&status) {
        if !is_object {
            let what = if content_type.contains("html") || first == Some(b'<') {
                "an HTML page"
            } else if body.iter().all(u8::is_ascii_whitespace) {
                "an empty body"
            } else {
                "something that is not JSON"
            };
            return Err(UnusualAnswer::NotChat(format!("HTTP {status} with {what}")));
        }
        if !contains(body, b"\"choices\"") {
            return Err(UnusualAnswer::NotChat(format!(
                "HTTP {status} with JSON that has no `choices`"
            )));
        }
        return Ok(());
    }
    let openai_shaped = is_object
        && serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .is_some_and(|v| v.get("error").is_some_and(serde_json::Value::is_object));
    if openai_shaped {
        return Ok(());
    }
    let text = String::from_utf8_lossy(body);
    let message = if first == Some(b'<') {
        "an HTML page".to_owned()
    } else if text.trim().is_empty() {
        "no body".to_owned()
    } else {
        error_message(&text)
    };
    Err(UnusualAnswer::Status { status, message })
}

/// The completion's envelope fields async-openai insists on (`id`,
/// `object`, `created`, `model`) filled in where a server leaves them out
/// (some OpenAI-compatible servers omit `created`): the reply is in
/// `choices`, and nothing here reads the rest. A body that has all four,
/// or is not a JSON object, is returned as it came.
pub fn with_envelope_fields(body: Vec<u8>) -> Vec<u8> {
    const FIELDS: [&str; 4] = ["\"id\"", "\"object\"", "\"created\"", "\"model\""];
    if FIELDS.iter().all(|k| contains(&body, k.as_bytes())) {
        return body;
    }
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_slice(&body) else {
        return body;
    };
    map.entry("id").or_insert_with(|| "".into());
    map.entry("object")
        .or_insert_with(|| "chat.completion".into());
    map.entry("created").or_insert_with(|| 0.into());
    map.entry("model").or_insert_with(|| "".into());
    serde_json::to_vec(&map).unwrap_or(body)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The most of a model server's answer that is read: far above any real
/// completion (a reply of 100,000 tokens is well under 1 MiB), far below
/// what would hurt the daemon. Unbounded, a hostile or broken endpoint's
/// 200 MB reply took the daemon from 30 MB to 1.9 GB and was stored whole.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// A model server's answer that was larger than [`MAX_RESPONSE_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("the model server's response is larger than {limit} bytes; it was not read further")]
pub struct ResponseTooLarge {
    pub limit: usize,
}

/// `response` with its body read into memory, at most `limit` bytes: a
/// `content-length` above it is refused unread, a body that grows past it
/// is dropped there. The status and headers are kept.
async fn bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<reqwest::Response, OpenAIError> {
    let too_large = || OpenAIError::Boxed(Box::new(ResponseTooLarge { limit }));
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    screen_answer(response.status().as_u16(), content_type, &body)
        .map_err(|e| OpenAIError::Boxed(Box::new(e)))?;
    if response.status().is_success() {
        body = with_envelope_fields(body);
    }
    let mut rebuilt = http::Response::builder()
        .status(response.status())
        .version(response.version());
    if let Some(headers) = rebuilt.headers_mut() {
        *headers = response.headers().clone();
    }
    rebuilt
        .body(reqwest::Body::from(body))
        .map(reqwest::Response::from)
        .map_err(|e| OpenAIError::Boxed(Box::new(e)))
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send + 'static>>;

/// The HTTP service handed to async-openai: sends each request with the
/// plain reqwest client (no retries of its own: the provider's bounded
/// policy decides) and turns a 429 into [`RateLimitResponse`], keeping the
/// `retry-after` header async-openai would drop.
#[derive(Clone, Debug)]
pub struct RateLimitService {
    client: reqwest::Client,
}

impl RateLimitService {
    pub fn new(client: reqwest::Client) -> Self {
        RateLimitService { client }
    }
}

impl tower_service::Service<HttpRequestFactory> for RateLimitService {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let request = factory.build().await?;
            let response = client.execute(request).await?;
            if response.status() != reqwest::StatusCode::TOO_MANY_REQUESTS {
                return bounded(response, MAX_RESPONSE_BYTES).await;
            }
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let body = response.text().await.unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(RateLimitResponse {
                message: error_message(&body),
                retry_after,
            })))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let table = [
            ("1", Some(1)),
            (" 120 ", Some(120)),
            ("0", Some(0)),
            ("Wed, 21 Oct 2015 07:28:05 GMT", Some(5)),
            // A date already past: retry now.
            ("Wed, 21 Oct 2015 07:27:00 GMT", Some(0)),
            ("-1", None),
            ("1.5", None),
            ("soon", None),
            ("", None),
        ];
        for (value, want) in table {
            assert_eq!(
                parse_retry_after(value, now),
                want.map(Duration::from_secs),
                "{value:?}"
            );
        }
    }

    #[test]
    fn waits_only_within_the_cap_and_the_remaining_time() {
        let s = Duration::from_secs;
        let table = [
            (s(1), s(30), Some(s(1))),
            (s(10), s(30), Some(s(10))),
            (s(11), s(30), None),
            (s(60), s(30), None),
            (s(3), s(2), None),
            (s(2), s(2), None),
            (s(0), s(1), Some(s(0))),
        ];
        for (after, remaining, want) in table {
            assert_eq!(wait_for(after, remaining), want, "{after:?} {remaining:?}");
        }
    }

    #[test]
    fn error_text_of_each_body_shape() {
        assert_eq!(
            error_message(r#"{"error": {"message": "slow down", "type": "rate_limit"}}"#),
            "slow down"
        );
        assert_eq!(error_message(r#"{"error": "too many"}"#), "too many");
        assert_eq!(error_message("plain text"), "plain text");
    }
}
