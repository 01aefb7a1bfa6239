//! Is a configured endpoint there, and does it speak the OpenAI API? Asked
//! with `GET {base_url}/models` only (what `silas doctor` uses): no prompt is
//! sent, so nothing is billed and no data leaves. The key, when the provider
//! names one, goes in the `Authorization` header and nowhere else.

use std::time::Duration;

use serde::Deserialize;
use silas_core::config::{EnvSource, ModelEndpoint};

/// What the endpoint answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// An OpenAI-style model list (`{"object": "list", "data": [...]}`);
    /// `named`: the endpoint's configured model is among them.
    Listed { models: usize, named: bool },
    /// 401 / 403: the key was refused (or is needed and missing).
    Refused { status: u16 },
    /// It answered, but not with a model list.
    NotOpenAi { detail: String },
    /// No connection, or a TLS failure.
    Unreachable { error: String },
    /// Connected, but no answer within the timeout: a local model server
    /// busy with a completion answers nothing else meanwhile.
    Silent { seconds: u64 },
}

/// The OpenAI list shape; only what proves the dialect is read.
#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

/// Each entry must carry an `id`, as OpenAI's do.
#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

/// `GET {base_url}/models` within `timeout`.
pub async fn probe_models(
    endpoint: &ModelEndpoint,
    env: &dyn EnvSource,
    timeout: Duration,
) -> ProbeOutcome {
    crate::tls::ensure_crypto_provider();
    let client = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => {
            return ProbeOutcome::Unreachable {
                error: format!("cannot build the HTTP client: {e}"),
            };
        }
    };
    let url = format!("{}/models", endpoint.base_url.trim_end_matches('/'));
    let mut req = client.get(&url);
    if let Some(key) = endpoint
        .api_key_env
        .as_deref()
        .and_then(|v| env.var(v))
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
    {
        req = req.bearer_auth(key);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            // reqwest's message names the URL, never the header.
            if e.is_timeout() && !e.is_connect() {
                return ProbeOutcome::Silent {
                    seconds: timeout.as_secs(),
                };
            }
            let error = if e.is_timeout() {
                format!("no connection within {} s", timeout.as_secs())
            } else if e.is_connect() {
                "connection refused or unreachable".to_owned()
            } else {
                e.without_url().to_string()
            };
            return ProbeOutcome::Unreachable { error };
        }
    };
    let status = resp.status().as_u16();
    if status == 401 || status == 403 {
        return ProbeOutcome::Refused { status };
    }
    if !resp.status().is_success() {
        return ProbeOutcome::NotOpenAi {
            detail: format!("HTTP {status} for GET /models"),
        };
    }
    match resp.json::<ModelList>().await {
        Ok(list) => ProbeOutcome::Listed {
            models: list.data.len(),
            named: list.data.iter().any(|m| m.id == endpoint.model),
        },
        Err(e) => ProbeOutcome::NotOpenAi {
            detail: format!("GET /models is not a model list: {}", e.without_url()),
        },
    }
}

/// A model's context window from an OpenAI-style model listing, when the
/// server gives one. Servers name it differently: `context_length`
/// (OpenRouter, LM Studio), `max_model_len` (vLLM), `context_window`,
/// `max_context_length`, or llama.cpp's `meta.n_ctx` / `meta.n_ctx_train`.
/// The entry whose `id` is `model` is used, or the only entry of a
/// one-model server (llama.cpp serves one model under its file path).
pub fn context_window_from_listing(listing: &serde_json::Value, model: &str) -> Option<u64> {
    let data = listing.get("data")?.as_array()?;
    let entry = data
        .iter()
        .find(|e| e.get("id").and_then(serde_json::Value::as_str) == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    const KEYS: &[&[&str]] = &[
        &["context_length"],
        &["max_model_len"],
        &["context_window"],
        &["max_context_length"],
        &["meta", "n_ctx"],
        &["meta", "n_ctx_train"],
    ];
    KEYS.iter().find_map(|path| {
        path.iter()
            .try_fold(entry, |v, k| v.get(*k))
            .and_then(serde_json::Value::as_u64)
            .filter(|n| *n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::config::MapEnv;
    use std::io::{Read, Write};

    /// A one-shot loopback HTTP server answering `body` with `status`; the
    /// request head it saw comes back on the join handle.
    fn serve_once(status: &str, body: &str) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let task = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            s.write_all(reply.as_bytes()).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        (base, task)
    }

    fn endpoint(base: &str, key_env: Option<&str>) -> ModelEndpoint {
        ModelEndpoint {
            provider: "p".into(),
            base_url: base.into(),
            api_key_env: key_env.map(Into::into),
            model: "m".into(),
            structured_output: Default::default(),
            tool_calling: Default::default(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_model_list_passes_and_the_key_is_sent_as_bearer() {
        let (base, seen) = serve_once(
            "200 OK",
            r#"{"object":"list","data":[{"id":"a"},{"id":"b"}]}"#,
        );
        let env = MapEnv::new().with("K", "sk-test");
        let out = probe_models(&endpoint(&base, Some("K")), &env, Duration::from_secs(5)).await;
        assert_eq!(
            out,
            ProbeOutcome::Listed {
                models: 2,
                named: false
            }
        );
        let head = seen.join().unwrap();
        assert!(head.starts_with("GET /v1/models "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer sk-test"),
            "{head}"
        );
    }

    /// A server that accepts and says nothing (a local model busy with a
    /// completion) is silent, not unreachable.
    #[tokio::test]
    async fn a_connected_but_silent_server_is_silent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let out = probe_models(
            &endpoint(&base, None),
            &MapEnv::new(),
            Duration::from_millis(500),
        )
        .await;
        drop(listener);
        assert_eq!(out, ProbeOutcome::Silent { seconds: 0 });
    }

    #[tokio::test]
    async fn refusal_other_dialect_and_closed_port() {
        let (base, _) = serve_once("401 Unauthorized", r#"{"error":{}}"#);
        let out = probe_models(
            &endpoint(&base, None),
            &MapEnv::new(),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(out, ProbeOutcome::Refused { status: 401 });

        let (base, _) = serve_once("200 OK", r#"{"hello":"world"}"#);
        let out = probe_models(
            &endpoint(&base, None),
            &MapEnv::new(),
            Duration::from_secs(5),
        )
        .await;
        assert!(matches!(out, ProbeOutcome::NotOpenAi { .. }), "{out:?}");

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}/v1");
        let out = probe_models(
            &endpoint(&base, None),
            &MapEnv::new(),
            Duration::from_secs(5),
        )
        .await;
        assert!(matches!(out, ProbeOutcome::Unreachable { .. }), "{out:?}");
    }

    #[test]
    fn context_windows_are_read_from_each_servers_listing() {
        use serde_json::json;
        let one = |entry: serde_json::Value| json!({"object": "list", "data": [entry]});
        let table = [
            (
                one(json!({"id": "m", "context_length": 131072})),
                Some(131072),
            ),
            (one(json!({"id": "m", "max_model_len": 32768})), Some(32768)),
            (one(json!({"id": "m", "context_window": 8192})), Some(8192)),
            (
                one(json!({"id": "m", "max_context_length": 4096})),
                Some(4096),
            ),
            (
                one(json!({"id": "/x.gguf", "meta": {"n_ctx_train": 8192}})),
                Some(8192),
            ),
            (
                one(json!({"id": "m", "meta": {"n_ctx": 2048, "n_ctx_train": 8192}})),
                Some(2048),
            ),
            // llama-cpp-python: no size at all.
            (
                one(json!({"id": "/x.gguf", "object": "model", "owned_by": "me"})),
                None,
            ),
            (one(json!({"id": "m", "context_length": 0})), None),
            (one(json!({"id": "m", "context_length": "big"})), None),
            (json!({"data": []}), None),
            (json!({"error": "x"}), None),
        ];
        for (listing, want) in table {
            assert_eq!(
                context_window_from_listing(&listing, "m"),
                want,
                "{listing}"
            );
        }
        // Several models: only the named one counts.
        let many = json!({"data": [{"id": "a", "context_length": 1000},
                                   {"id": "m", "context_length": 200000}]});
        assert_eq!(context_window_from_listing(&many, "m"), Some(200000));
        assert_eq!(context_window_from_listing(&many, "zzz"), None);
    }
}
