//! The `web_search` executor (spec §9.2–9.3): provider-backed web retrieval
//! with deterministic limits, registered only when `search.provider` and
//! `search.api_key` are configured ([`silas_core::config::Config::web_search_enabled`]).
//!
//! **Provider.** `tavily`: `POST {base_url}/search` with the JSON body
//! `{api_key, query, max_results, include_domains?, search_depth: "basic"}`,
//! answering `{results: [{title, url, content}]}`. The key travels in the
//! JSON body (Tavily accepts it there), because the guarded fetcher takes no
//! caller-set headers. [`TAVILY_BASE_URL`] is the production default;
//! `base_url` is injectable ([`WebSearchSettings::base_url`]) so tests talk to
//! a fake provider on 127.0.0.1.
//!
//! **Connection.** Through the [`silas_netguard::GuardedFetcher`] with a
//! guard of its own whose allowlist is exactly the provider host, `POST`
//! only: one DNS lookup, every answer classified (private/loopback/metadata
//! refused unless [`WebSearchSettings::trusted_private_cidrs`] exempts them —
//! empty in production, `127.0.0.0/8` in tests), pinned addresses, no proxy,
//! no automatic redirects (a redirect off the provider host is refused by the
//! guard), the request timeout, and a response size cap. The base URL must be
//! `https`, except `http` to a loopback IP literal (tests, local relays), so
//! the key never travels in clear text over a network.
//!
//! **Limits** (all enforced here, before or after the one request):
//! * a query longer than `max_query_chars` characters (Unicode scalar
//!   values, after trimming) is refused with `E_GATE_BLOCKED` before any
//!   request; an empty query or unknown argument with `E_SANDBOX_FAILED`;
//! * at most `max_results` results are kept (the `max_results` argument
//!   may lower, never raise, the configured value), and no more are asked for;
//! * the whole request is bounded by `timeout_seconds` (the envelope's
//!   `timeout_seconds` can only shorten it); running out is `E_SANDBOX_TIMEOUT`;
//! * when `allowed_domains` is non-empty, results whose URL host is not one
//!   of those domains or a subdomain of one (`example.org` allows
//!   `docs.example.org`, not `badexample.org`) are dropped, and the list is
//!   also sent to the provider as `include_domains`; results without a
//!   parsable http(s) URL are always dropped;
//! * the provider response is read up to [`MAX_RESPONSE_BYTES`]; a longer
//!   one is a failure (never a silently half-parsed list).
//!
//! **Output.** `return_value` is a compact numbered list (title, URL,
//! snippet). Every field has the API key scrubbed and passes
//! `silas_core::secrets::redact` *before* it is capped, and the assembled
//! text is redacted again before it is cut to the envelope's
//! `max_output_bytes`. Taint is always `external`. Provider diagnostics
//! (HTTP status, counts, dropped-by-domain, latency, error code) go only to
//! `metadata`, which never reaches model context. The API key never appears
//! in results, metadata, errors or `Debug` output; this module logs nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use silas_core::config::Config;
use silas_core::model::execution::{ExecutionEnvelope, ExecutionResult, MetadataValue};
use silas_core::model::messages::TaintLevel;
use silas_core::{Coded, ErrorCode, secrets};
use silas_netguard::{
    FetchError, FetchRequest, GuardedFetcher, HostRule, Method, NetworkGuard, NetworkGuardConfig,
    Resolver, SystemResolver,
};
use url::{Host, Url};

/// The executor name in the registry.
pub const WEB_SEARCH: &str = "web_search";

/// Tavily's production API. Never contacted by tests.
pub const TAVILY_BASE_URL: &str = "https://api.tavily.com";

/// Provider response bytes read at most.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Per-result caps (characters), applied after redaction.
const MAX_TITLE_CHARS: usize = 200;
const MAX_SNIPPET_CHARS: usize = 500;
const MAX_URL_CHARS: usize = 500;

/// What replaces the API key wherever it would otherwise show up.
const KEY_PLACEHOLDER: &str = "[REDACTED:search_api_key]";

/// Supported search providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchProvider {
    Tavily,
}

impl SearchProvider {
    /// The provider named in `search.provider` (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "tavily" => Some(SearchProvider::Tavily),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SearchProvider::Tavily => "tavily",
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            SearchProvider::Tavily => TAVILY_BASE_URL,
        }
    }
}

/// Why web_search cannot be set up (`E_CFG_INVALID`). Never contains the key.
#[derive(Debug, thiserror::Error)]
pub enum WebSearchError {
    #[error("search.provider {0:?} is not supported (supported: tavily)")]
    UnknownProvider(String),
    #[error("search.provider and search.api_key must both be set for web_search")]
    NotConfigured,
    #[error("search base URL {0:?} is invalid: {1}")]
    BaseUrl(String, &'static str),
    #[error("search.{0} must be greater than zero")]
    Zero(&'static str),
    #[error("web_search network guard: {0}")]
    Guard(#[from] silas_netguard::ConfigError),
}

impl Coded for WebSearchError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ECfgInvalid
    }
}

/// Everything web_search needs; `Debug` never shows the key.
#[derive(Clone)]
pub struct WebSearchSettings {
    pub provider: SearchProvider,
    pub api_key: String,
    /// `https://…`, or `http://` to a loopback IP literal; `/search` is
    /// appended.
    pub base_url: String,
    pub timeout_seconds: u64,
    pub max_results: usize,
    pub max_query_chars: usize,
    /// Empty: no domain filter.
    pub allowed_domains: Vec<String>,
    /// Private ranges the provider connection may reach (tests: loopback).
    /// Empty in production.
    pub trusted_private_cidrs: Vec<String>,
}

impl std::fmt::Debug for WebSearchSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearchSettings")
            .field("provider", &self.provider)
            .field("api_key", &"<redacted>")
            .field("base_url", &self.base_url)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("max_results", &self.max_results)
            .field("max_query_chars", &self.max_query_chars)
            .field("allowed_domains", &self.allowed_domains)
            .field("trusted_private_cidrs", &self.trusted_private_cidrs)
            .finish()
    }
}

impl WebSearchSettings {
    /// Settings from the `search:` section, `None` when web_search is not
    /// enabled ([`Config::web_search_enabled`]). The base URL is the
    /// provider's default.
    pub fn from_config(cfg: &Config) -> Result<Option<Self>, WebSearchError> {
        if !cfg.web_search_enabled() {
            return Ok(None);
        }
        let s = &cfg.search;
        let (Some(name), Some(key)) = (&s.provider, &s.api_key) else {
            return Ok(None);
        };
        let provider = SearchProvider::parse(name)
            .ok_or_else(|| WebSearchError::UnknownProvider(name.clone()))?;
        Ok(Some(WebSearchSettings {
            provider,
            api_key: key.clone(),
            base_url: provider.default_base_url().to_string(),
            timeout_seconds: s.timeout_seconds,
            max_results: usize::try_from(s.max_results).unwrap_or(usize::MAX),
            max_query_chars: usize::try_from(s.max_query_chars).unwrap_or(usize::MAX),
            allowed_domains: s.allowed_domains.clone(),
            trusted_private_cidrs: Vec::new(),
        }))
    }

    /// Replace the provider base URL (tests: a fake provider on 127.0.0.1).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }
}

/// `example.org` / `*.example.org` / `.Example.org.` → `example.org`.
fn normalize_domain(d: &str) -> String {
    let d = d.trim();
    let d = d.strip_prefix("*.").unwrap_or(d);
    let d = d.strip_prefix('.').unwrap_or(d);
    let d = d.strip_suffix('.').unwrap_or(d);
    d.to_ascii_lowercase()
}

/// Whether `host` is one of `allowed` or a subdomain of one. An empty list
/// allows everything.
pub fn domain_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let host = normalize_domain(host);
    allowed.iter().any(|d| {
        !d.is_empty()
            && (host == *d
                || host
                    .strip_suffix(d.as_str())
                    .is_some_and(|rest| rest.ends_with('.')))
    })
}

/// The validated `/search` endpoint and its host (for the guard allowlist).
fn endpoint(base_url: &str) -> Result<(String, String), WebSearchError> {
    let bad = |why| WebSearchError::BaseUrl(base_url.to_string(), why);
    let url = Url::parse(base_url).map_err(|_| bad("not a URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("user info is not allowed"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("query and fragment are not allowed"));
    }
    let (host, loopback_literal) = match url.host() {
        Some(Host::Domain(d)) => (d.to_ascii_lowercase(), false),
        Some(Host::Ipv4(a)) => (a.to_string(), IpAddr::V4(a).is_loopback()),
        Some(Host::Ipv6(a)) => (a.to_string(), IpAddr::V6(a).is_loopback()),
        None => return Err(bad("no host")),
    };
    match url.scheme() {
        "https" => {}
        "http" if loopback_literal => {}
        "http" => return Err(bad("must be https (http only to a loopback IP)")),
        _ => return Err(bad("must be https")),
    }
    let full = format!("{}/search", url.as_str().trim_end_matches('/'));
    Ok((full, host))
}

/// The configured web_search executor.
pub struct WebSearch {
    settings: WebSearchSettings,
    allowed_domains: Vec<String>,
    endpoint: String,
    fetcher: GuardedFetcher,
}

impl std::fmt::Debug for WebSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearch")
            .field("settings", &self.settings)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Arguments of one search.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SearchArgs {
    query: String,
    max_results: usize,
}

/// A refusal before any request: message and code.
struct Refusal(ErrorCode, String);

#[derive(Debug, Deserialize)]
struct ProviderResponse {
    #[serde(default)]
    results: Vec<ProviderResult>,
}

#[derive(Debug, Deserialize)]
struct ProviderResult {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

/// Counts for metadata.
#[derive(Debug, Default)]
struct Counts {
    returned: usize,
    kept: usize,
    dropped_by_domain: usize,
    dropped_invalid_url: usize,
    dropped_over_limit: usize,
    secrets_redacted: usize,
}

fn num(n: u64) -> MetadataValue {
    MetadataValue::Number(n.into())
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn cap_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl WebSearch {
    /// Build over `resolver` ([`SystemResolver`] in production).
    pub fn new(
        settings: WebSearchSettings,
        resolver: Arc<dyn Resolver>,
    ) -> Result<Self, WebSearchError> {
        if settings.api_key.is_empty() {
            return Err(WebSearchError::NotConfigured);
        }
        for (name, v) in [
            ("timeout_seconds", settings.timeout_seconds),
            ("max_results", settings.max_results as u64),
            ("max_query_chars", settings.max_query_chars as u64),
        ] {
            if v == 0 {
                return Err(WebSearchError::Zero(name));
            }
        }
        let (endpoint, host) = endpoint(&settings.base_url)?;
        let guard_cfg = NetworkGuardConfig {
            allowlist: vec![HostRule::new(&host, &[Method::Post])],
            trusted_private_cidrs: settings.trusted_private_cidrs.clone(),
            max_redirects: 0,
            resolve_timeout_seconds: settings.timeout_seconds,
            connect_timeout_seconds: settings.timeout_seconds,
            request_timeout_seconds: settings.timeout_seconds,
            max_response_bytes: MAX_RESPONSE_BYTES,
            user_agent: format!("silas-web-search/{}", env!("CARGO_PKG_VERSION")),
            ..NetworkGuardConfig::default()
        };
        let guard = NetworkGuard::new(&guard_cfg, resolver)?;
        let allowed_domains = settings
            .allowed_domains
            .iter()
            .map(|d| normalize_domain(d))
            .filter(|d| !d.is_empty())
            .collect();
        Ok(WebSearch {
            settings,
            allowed_domains,
            endpoint,
            fetcher: GuardedFetcher::new(guard),
        })
    }

    /// The production executor for `cfg`, `None` unless
    /// [`Config::web_search_enabled`].
    pub fn from_config(cfg: &Config) -> Result<Option<Self>, WebSearchError> {
        match WebSearchSettings::from_config(cfg)? {
            Some(s) => Ok(Some(WebSearch::new(s, Arc::new(SystemResolver))?)),
            None => Ok(None),
        }
    }

    pub fn settings(&self) -> &WebSearchSettings {
        &self.settings
    }

    /// Replace the API key wherever it occurs.
    fn scrub(&self, s: &str) -> String {
        if self.settings.api_key.is_empty() {
            return s.to_string();
        }
        s.replace(&self.settings.api_key, KEY_PLACEHOLDER)
    }

    /// Key scrubbed, secrets redacted: safe for errors and metadata.
    fn clean(&self, s: &str) -> String {
        secrets::redact(&self.scrub(s)).0
    }

    fn parse_args(&self, env: &ExecutionEnvelope) -> Result<SearchArgs, Refusal> {
        let invalid = |m: String| Refusal(ErrorCode::ESandboxFailed, m);
        for k in env.args.keys() {
            if !matches!(k.as_str(), "query" | "max_results") {
                return Err(invalid(format!("web_search: unknown argument {k:?}")));
            }
        }
        let query = match env.args.get("query") {
            Some(Value::String(q)) => q.trim().to_string(),
            Some(_) => return Err(invalid("web_search: `query` must be a string".into())),
            None => return Err(invalid("web_search needs a string argument `query`".into())),
        };
        if query.is_empty() {
            return Err(invalid("web_search: `query` is empty".into()));
        }
        let chars = query.chars().count();
        if chars > self.settings.max_query_chars {
            return Err(Refusal(
                ErrorCode::EGateBlocked,
                format!(
                    "web_search: query is {chars} characters, the limit is {}",
                    self.settings.max_query_chars
                ),
            ));
        }
        let max_results = match env.args.get("max_results") {
            None | Some(Value::Null) => self.settings.max_results,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n > 0 => n.min(self.settings.max_results),
                _ => {
                    return Err(invalid(
                        "web_search: `max_results` must be a positive integer".into(),
                    ));
                }
            },
        };
        Ok(SearchArgs { query, max_results })
    }

    fn request_body(&self, args: &SearchArgs) -> String {
        let mut body = json!({
            "api_key": self.settings.api_key,
            "query": args.query,
            "max_results": args.max_results,
            "search_depth": "basic",
        });
        if !self.allowed_domains.is_empty()
            && let Some(o) = body.as_object_mut()
        {
            o.insert("include_domains".into(), json!(self.allowed_domains));
        }
        body.to_string()
    }

    /// Run one search for `env` (args `query`, optional `max_results`).
    pub async fn execute(&self, env: &ExecutionEnvelope) -> ExecutionResult {
        let started = Instant::now();
        let mut md: BTreeMap<String, MetadataValue> = BTreeMap::new();
        md.insert(
            "provider".into(),
            MetadataValue::Text(self.settings.provider.as_str().into()),
        );
        let args = match self.parse_args(env) {
            Ok(a) => a,
            Err(Refusal(code, msg)) => {
                md.insert("requests".into(), num(0));
                return self.failure(env, md, code, &msg, started);
            }
        };
        md.insert("requests".into(), num(1));
        md.insert("query_chars".into(), num(args.query.chars().count() as u64));
        let timeout = Duration::from_secs(
            self.settings
                .timeout_seconds
                .min(env.timeout_seconds.max(1)),
        );
        let req = FetchRequest {
            method: Method::Post,
            url: self.endpoint.clone(),
            body: Some(self.request_body(&args)),
            content_type: Some("application/json".into()),
            timeout: Some(timeout),
        };
        let outcome = self.fetcher.fetch(req).await;
        md.insert(
            "latency_ms".into(),
            num(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)),
        );
        let resp = match outcome {
            Ok(r) => r,
            Err(failure) => {
                let code = failure.error.code();
                if let FetchError::Http { detail, .. } = &failure.error {
                    md.insert(
                        "error_detail".into(),
                        MetadataValue::Text(self.clean(detail)),
                    );
                }
                let msg = match &failure.error {
                    FetchError::Timeout => format!(
                        "web_search: the search provider did not answer within {}s",
                        timeout.as_secs()
                    ),
                    other => format!("web_search: provider request failed: {other}"),
                };
                return self.failure(env, md, code, &msg, started);
            }
        };
        md.insert("status".into(), num(u64::from(resp.status)));
        md.insert("response_bytes".into(), num(resp.body.len() as u64));
        if !(200..300).contains(&resp.status) {
            let msg = format!(
                "web_search: the search provider answered HTTP {}",
                resp.status
            );
            return self.failure(env, md, ErrorCode::ESandboxFailed, &msg, started);
        }
        if resp.body_truncated {
            let msg =
                format!("web_search: the provider response exceeded {MAX_RESPONSE_BYTES} bytes");
            return self.failure(env, md, ErrorCode::ESandboxFailed, &msg, started);
        }
        let parsed: ProviderResponse = match serde_json::from_slice(&resp.body) {
            Ok(p) => p,
            Err(_) => {
                let msg = "web_search: the provider response is not the expected JSON";
                return self.failure(env, md, ErrorCode::ESandboxFailed, msg, started);
            }
        };
        let (text, counts) = self.format(&args, parsed.results);
        let cap = usize::try_from(env.max_output_bytes).unwrap_or(usize::MAX);
        let (return_value, final_secrets, cut) = crate::executors::model_facing_output(&text, cap);
        md.insert("results_returned".into(), num(counts.returned as u64));
        md.insert("results_kept".into(), num(counts.kept as u64));
        md.insert(
            "dropped_by_domain".into(),
            num(counts.dropped_by_domain as u64),
        );
        md.insert(
            "dropped_invalid_url".into(),
            num(counts.dropped_invalid_url as u64),
        );
        md.insert(
            "dropped_over_limit".into(),
            num(counts.dropped_over_limit as u64),
        );
        md.insert(
            "secrets_redacted".into(),
            num((counts.secrets_redacted + final_secrets) as u64),
        );
        md.insert("output_truncated_bytes".into(), num(cut as u64));
        ExecutionResult {
            execution_id: env.execution_id.clone(),
            step_index: env.step_index,
            success: true,
            return_value,
            content: Vec::new(),
            metadata: md,
            artifacts: BTreeMap::new(),
            taint: TaintLevel::External,
            error: None,
            duration_seconds: started.elapsed().as_secs_f64(),
            tokens_used: 0,
            cost_usd: 0.0,
        }
    }

    /// Filter and render the results: key scrubbed and secrets redacted
    /// per field *before* any field is capped.
    fn format(&self, args: &SearchArgs, results: Vec<ProviderResult>) -> (String, Counts) {
        let mut counts = Counts {
            returned: results.len(),
            ..Counts::default()
        };
        let mut clean = |s: &str| {
            let (r, f) = secrets::redact(&self.scrub(s));
            counts.secrets_redacted += f.len();
            collapse_ws(&r)
        };
        let mut items = Vec::new();
        let mut over = 0usize;
        let mut by_domain = 0usize;
        let mut invalid = 0usize;
        for r in results {
            let url = r.url.as_deref().and_then(|u| Url::parse(u.trim()).ok());
            let Some(url) = url.filter(|u| matches!(u.scheme(), "http" | "https")) else {
                invalid += 1;
                continue;
            };
            let Some(host) = url.host_str() else {
                invalid += 1;
                continue;
            };
            if !domain_allowed(host, &self.allowed_domains) {
                by_domain += 1;
                continue;
            }
            if items.len() >= args.max_results {
                over += 1;
                continue;
            }
            let title = cap_chars(&clean(r.title.as_deref().unwrap_or("")), MAX_TITLE_CHARS);
            let link = cap_chars(&clean(url.as_str()), MAX_URL_CHARS);
            let snippet = cap_chars(
                &clean(r.content.as_deref().unwrap_or("")),
                MAX_SNIPPET_CHARS,
            );
            items.push((title, link, snippet));
        }
        counts.kept = items.len();
        counts.dropped_by_domain = by_domain;
        counts.dropped_invalid_url = invalid;
        counts.dropped_over_limit = over;
        let query = clean(&args.query);
        if items.is_empty() {
            return (format!("No web search results for \"{query}\"."), counts);
        }
        let mut out = format!("Web search results for \"{query}\":\n");
        for (i, (title, link, snippet)) in items.iter().enumerate() {
            let title = if title.is_empty() {
                "(untitled)"
            } else {
                title
            };
            out.push_str(&format!("\n{}. {title}\n   {link}\n", i + 1));
            if !snippet.is_empty() {
                out.push_str(&format!("   {snippet}\n"));
            }
        }
        (out, counts)
    }

    fn failure(
        &self,
        env: &ExecutionEnvelope,
        mut md: BTreeMap<String, MetadataValue>,
        code: ErrorCode,
        msg: &str,
        started: Instant,
    ) -> ExecutionResult {
        md.insert(
            "error_code".into(),
            MetadataValue::Text(code.as_str().into()),
        );
        ExecutionResult::failure(
            env,
            self.clean(&format!("{}: {msg}", code.as_str())),
            md,
            started.elapsed().as_secs_f64(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_suffix_match() {
        let allowed = vec!["example.org".to_string(), "docs.rs".to_string()];
        for ok in [
            "example.org",
            "docs.example.org",
            "a.b.example.org",
            "EXAMPLE.ORG.",
            "docs.rs",
        ] {
            assert!(domain_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "badexample.org",
            "example.org.evil.com",
            "org",
            "rs",
            "x.com",
        ] {
            assert!(!domain_allowed(bad, &allowed), "{bad}");
        }
        assert!(domain_allowed("anything.com", &[]));
        assert_eq!(normalize_domain(" *.Example.Org. "), "example.org");
    }

    #[test]
    fn base_urls() {
        assert_eq!(
            endpoint(TAVILY_BASE_URL).unwrap(),
            (
                "https://api.tavily.com/search".to_string(),
                "api.tavily.com".to_string()
            )
        );
        assert_eq!(
            endpoint("http://127.0.0.1:8080/").unwrap().0,
            "http://127.0.0.1:8080/search"
        );
        assert!(endpoint("http://[::1]:9/api").is_ok());
        for bad in [
            "http://api.tavily.com",
            "http://10.0.0.1",
            "ftp://x.org",
            "https://u:p@x.org",
            "https://x.org/?k=v",
            "nonsense",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn caps_keep_char_boundaries() {
        assert_eq!(cap_chars("héllo", 2), "hé…");
        assert_eq!(cap_chars("abc", 3), "abc");
        assert_eq!(collapse_ws(" a \n\t b "), "a b");
    }

    #[test]
    fn debug_hides_the_key() {
        let s = WebSearchSettings {
            provider: SearchProvider::Tavily,
            api_key: "tvly-CANARY".into(),
            base_url: TAVILY_BASE_URL.into(),
            timeout_seconds: 1,
            max_results: 1,
            max_query_chars: 1,
            allowed_domains: Vec::new(),
            trusted_private_cidrs: Vec::new(),
        };
        assert!(!format!("{s:?}").contains("CANARY"));
        let ws = WebSearch::new(s, Arc::new(silas_netguard::ScriptedResolver::new())).unwrap();
        assert!(!format!("{ws:?}").contains("CANARY"));
    }
}
