//! The `web_fetch` executor: `ExecutionEnvelope` in, `ExecutionResult` out
//! (spec §3.7, §9.3), and the output rules that keep the channels apart.
//!
//! * `return_value` (model-facing) is the response body as text, passed
//!   through `silas_core::secrets::redact` **before** it is cut to the
//!   envelope's `max_output_bytes`, so a secret straddling the cut is still
//!   redacted. When the body itself was cut at `max_response_bytes`, the
//!   trailing partial token is dropped first, so a secret cut in half by the
//!   read limit cannot slip past the detector as an unrecognisable prefix.
//!   Non-text bodies are replaced by a fixed placeholder.
//! * `metadata` (application-only, never model context) holds the protocol
//!   details: status, kept headers, final URL, hops with pinned and peer
//!   addresses, sizes, truncation flags, redaction kinds, error code. Its
//!   strings are redacted too, since headers and URLs can carry tokens.
//! * `taint` is always `external`.
//!
//! Arguments: `url` (required), `method` (default `GET`), `body`,
//! `content_type`. Anything else is refused (no caller-set headers: the
//! envelope never carries secret values, and headers are where they would go).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use silas_core::Coded;
use silas_core::model::JsonObject;
use silas_core::model::execution::{ExecutionEnvelope, ExecutionResult, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_core::secrets;

use crate::error::{FetchError, GuardError};
use crate::fetch::{FetchFailure, FetchRequest, FetchResponse, GuardedFetcher, Hop};
use crate::policy::Method;

/// The executor name in the registry.
pub const WEB_FETCH: &str = "web_fetch";

/// What replaces a body that is not text.
pub const NON_TEXT_PLACEHOLDER: &str = "[web_fetch: non-text response body omitted]";

/// Parse `envelope.args` for web_fetch.
pub fn parse_args(args: &JsonObject) -> Result<FetchRequest, FetchError> {
    let bad = |m: &str| FetchError::InvalidArgs(m.to_string());
    for k in args.keys() {
        if !matches!(k.as_str(), "url" | "method" | "body" | "content_type") {
            return Err(FetchError::InvalidArgs(format!("unknown argument {k:?}")));
        }
    }
    let string = |k: &str| -> Result<Option<String>, FetchError> {
        match args.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(FetchError::InvalidArgs(format!("{k} must be a string"))),
        }
    };
    let url = string("url")?.ok_or_else(|| bad("url is required"))?;
    let method = match string("method")? {
        None => Method::Get,
        Some(m) => Method::parse(&m).ok_or_else(|| bad("unsupported method"))?,
    };
    let body = string("body")?;
    let content_type = string("content_type")?;
    if let Some(ct) = &content_type
        && !ct.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(bad("content_type must be visible ASCII"));
    }
    if body.is_some() && matches!(method, Method::Get | Method::Head) {
        return Err(bad("GET and HEAD take no body"));
    }
    Ok(FetchRequest {
        method,
        url,
        body,
        content_type,
        timeout: None,
    })
}

/// Model-facing text produced from a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelText {
    pub text: String,
    /// Kinds of the secrets redacted (never their values).
    pub redactions: Vec<&'static str>,
    /// The redacted text was cut to `max_output_bytes`.
    pub output_truncated: bool,
}

/// Characters that can be part of a secret token (see `secrets.rs`
/// patterns); anything else is a safe place to cut.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./+=~:@%".contains(c)
}

/// Drop a trailing run of token characters: the part of a token the read
/// limit may have cut in half.
pub fn trim_partial_token(text: &str) -> &str {
    match text.char_indices().rev().find(|(_, c)| !token_char(*c)) {
        Some((i, c)) => &text[..i + c.len_utf8()],
        None => "",
    }
}

/// Cut to at most `max` bytes on a char boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Body bytes → model text: lossy UTF-8, partial tail token dropped if the
/// read was cut, secrets redacted, then cut to `max_output_bytes`.
pub fn model_text(body: &[u8], body_truncated: bool, max_output_bytes: usize) -> ModelText {
    let text = String::from_utf8_lossy(body);
    let text = if body_truncated {
        trim_partial_token(&text)
    } else {
        &text
    };
    let (redacted, findings) = secrets::redact(text);
    let cut = truncate_utf8(&redacted, max_output_bytes);
    ModelText {
        output_truncated: cut.len() < redacted.len(),
        text: cut.to_string(),
        redactions: findings.iter().map(|f| f.kind).collect(),
    }
}

/// Whether a `Content-Type` is text the model can read. A missing type is
/// treated as text.
pub fn is_textual(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return true };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/ecmascript"
                | "application/x-www-form-urlencoded"
                | "application/x-ndjson"
                | "application/yaml"
                | "application/toml"
                | ""
        )
}

fn text(s: &str) -> MetadataValue {
    MetadataValue::Text(secrets::redact(s).0)
}

fn num(n: u64) -> MetadataValue {
    MetadataValue::Number(n.into())
}

fn hops_value(hops: &[Hop]) -> MetadataValue {
    MetadataValue::List(
        hops.iter()
            .map(|h| {
                json!({
                    "method": h.method.as_str(),
                    "url": secrets::redact(&h.url).0,
                    "pinned_addr": h.pinned.to_string(),
                    "remote_addr": h.remote.map(|r| r.to_string()),
                    "status": h.status,
                })
            })
            .collect(),
    )
}

/// The `ExecutionResult` for a completed fetch.
pub fn result_from_response(
    envelope: &ExecutionEnvelope,
    resp: &FetchResponse,
    duration: Duration,
) -> ExecutionResult {
    let max_out = usize::try_from(envelope.max_output_bytes).unwrap_or(usize::MAX);
    let content_type = resp.header("content-type");
    let textual = is_textual(content_type);
    let out = if textual {
        model_text(&resp.body, resp.body_truncated, max_out)
    } else {
        ModelText {
            text: truncate_utf8(NON_TEXT_PLACEHOLDER, max_out).to_string(),
            redactions: Vec::new(),
            output_truncated: false,
        }
    };
    let mut md: BTreeMap<String, MetadataValue> = BTreeMap::new();
    md.insert("status".into(), num(u64::from(resp.status)));
    md.insert("final_url".into(), text(resp.final_url.as_str()));
    let mut headers = JsonObject::new();
    for (k, v) in &resp.headers {
        headers.insert(k.clone(), Value::String(secrets::redact(v).0));
    }
    md.insert("headers".into(), MetadataValue::Object(headers));
    md.insert("hops".into(), hops_value(&resp.hops));
    md.insert(
        "redirects".into(),
        num(resp.hops.len().saturating_sub(1) as u64),
    );
    md.insert("body_bytes".into(), num(resp.body.len() as u64));
    md.insert(
        "body_truncated".into(),
        MetadataValue::Bool(resp.body_truncated),
    );
    md.insert("body_textual".into(), MetadataValue::Bool(textual));
    md.insert(
        "output_truncated".into(),
        MetadataValue::Bool(out.output_truncated),
    );
    md.insert(
        "redactions".into(),
        MetadataValue::List(out.redactions.iter().map(|k| json!(k)).collect()),
    );
    let success = (200..300).contains(&resp.status);
    ExecutionResult {
        execution_id: envelope.execution_id.clone(),
        step_index: envelope.step_index,
        success,
        return_value: out.text,
        content: Vec::new(),
        metadata: md,
        artifacts: BTreeMap::new(),
        taint: TaintLevel::External,
        error: (!success).then(|| format!("web_fetch: HTTP status {}", resp.status)),
        duration_seconds: duration.as_secs_f64(),
        tokens_used: 0,
        cost_usd: 0.0,
    }
}

/// The `ExecutionResult` for a failed or refused fetch.
pub fn result_from_failure(
    envelope: &ExecutionEnvelope,
    failure: &FetchFailure,
    duration: Duration,
) -> ExecutionResult {
    let code = failure.error.code();
    let mut md: BTreeMap<String, MetadataValue> = BTreeMap::new();
    md.insert(
        "error_code".into(),
        MetadataValue::Text(code.as_str().into()),
    );
    md.insert("hops".into(), hops_value(&failure.hops));
    if let FetchError::Http { detail, .. } = &failure.error {
        md.insert("error_detail".into(), text(detail));
    }
    if let Some(GuardError::BlockedAddress { addr, range, .. }) = failure.error.guard_error() {
        md.insert("blocked_addr".into(), MetadataValue::Text(addr.to_string()));
        md.insert(
            "blocked_range".into(),
            MetadataValue::Text(range.cidr.into()),
        );
        md.insert(
            "blocked_kind".into(),
            MetadataValue::Text(range.kind.as_str().into()),
        );
    }
    ExecutionResult::failure(
        envelope,
        secrets::redact(&format!("{code}: {}", failure.error)).0,
        md,
        duration.as_secs_f64(),
    )
}

/// Run web_fetch for an envelope (args `url`, `method`, `body`,
/// `content_type`); `timeout_seconds` bounds the whole fetch.
pub async fn web_fetch(fetcher: &GuardedFetcher, envelope: &ExecutionEnvelope) -> ExecutionResult {
    let started = Instant::now();
    let mut req = match parse_args(&envelope.args) {
        Ok(r) => r,
        Err(error) => {
            let failure = FetchFailure {
                error,
                hops: Vec::new(),
            };
            return result_from_failure(envelope, &failure, started.elapsed());
        }
    };
    req.timeout = Some(Duration::from_secs(envelope.timeout_seconds.max(1)));
    match fetcher.fetch(req).await {
        Ok(resp) => result_from_response(envelope, &resp, started.elapsed()),
        Err(failure) => result_from_failure(envelope, &failure, started.elapsed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_partial_token_only() {
        assert_eq!(trim_partial_token("hello world ghp_abc"), "hello world ");
        assert_eq!(trim_partial_token("a \"api_key=ABCDEF"), "a \"");
        assert_eq!(trim_partial_token("x https://user:pa"), "x ");
        assert_eq!(trim_partial_token("{\"k\": 1}"), "{\"k\": 1}");
        assert_eq!(trim_partial_token("onlytoken"), "");
        assert_eq!(trim_partial_token("é token"), "é ");
        assert_eq!(trim_partial_token(""), "");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("abc", 10), "abc");
        assert_eq!(truncate_utf8("abc", 0), "");
    }

    const TOKEN: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";

    #[test]
    fn redaction_happens_before_truncation() {
        let body = format!("{}{TOKEN} tail", "x ".repeat(50));
        // Cut in the middle of the token: truncating first would leave a
        // 20-character prefix the detector no longer recognises.
        let out = model_text(body.as_bytes(), false, 100 + 20);
        assert!(out.output_truncated);
        assert!(!out.text.contains(&TOKEN[..8]), "{}", out.text);
        assert_eq!(out.redactions, vec!["github_token"]);
        let full = model_text(body.as_bytes(), false, 10_000);
        assert!(full.text.contains("[REDACTED:github_token] tail"));
        assert!(!full.output_truncated);
    }

    #[test]
    fn partial_secret_at_read_limit_is_dropped() {
        let body = format!("intro {}", &TOKEN[..20]);
        let out = model_text(body.as_bytes(), true, 10_000);
        assert_eq!(out.text, "intro ");
        let out = model_text(body.as_bytes(), false, 10_000);
        assert!(out.text.contains(&TOKEN[..20]), "not cut: kept as is");
    }

    #[test]
    fn textual_types() {
        for t in [
            None,
            Some("text/html; charset=utf-8"),
            Some("application/json"),
            Some("application/ld+json"),
            Some("TEXT/PLAIN"),
        ] {
            assert!(is_textual(t), "{t:?}");
        }
        for t in [
            Some("image/png"),
            Some("application/octet-stream"),
            Some("application/pdf"),
        ] {
            assert!(!is_textual(t), "{t:?}");
        }
    }

    #[test]
    fn args() {
        let parse = |v: Value| parse_args(v.as_object().unwrap());
        let r = parse(json!({"url": "https://x.org/"})).unwrap();
        assert_eq!((r.method, r.body), (Method::Get, None));
        let r = parse(json!({"url": "https://x.org/", "method": "post", "body": "{}", "content_type": "application/json"})).unwrap();
        assert_eq!(r.method, Method::Post);
        for bad in [
            json!({}),
            json!({"url": 5}),
            json!({"url": "https://x.org/", "method": "CONNECT"}),
            json!({"url": "https://x.org/", "headers": {"Authorization": "x"}}),
            json!({"url": "https://x.org/", "body": "x"}),
            json!({"url": "https://x.org/", "method": "POST", "content_type": "a\r\nb"}),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code(), silas_core::ErrorCode::ESandboxFailed, "{bad}");
        }
    }
}
