//! `silas-testkit`: test support shared by the workspace's integration tests.
//!
//! [`FakeLlm`] is a scriptable OpenAI-compatible chat-completions server on
//! `127.0.0.1` (port 0, so tests run in parallel). Each test queues the
//! replies it wants — plain content, JSON content, tool calls, invalid JSON,
//! HTTP errors such as 429, slow replies — and afterwards asserts on the
//! recorded request bodies. It speaks real HTTP, so the code under test goes
//! through its real client (async-openai/reqwest) end to end.
//!
//! For load tests and benchmarks, [`FakeLlm::zero_latency`] answers every
//! request with one fixed reply, immediately, and records nothing.
//!
//! [`telegram::FakeBotApi`] is a scriptable Telegram Bot API server (updates
//! for long polling, recorded calls, 429/5xx on demand).
//!
//! **Architecture invariant:** binds loopback only; nothing here can reach
//! the network, and no test that uses it needs to.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod serve;
pub mod telegram;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use warp::Filter;
use warp::http::StatusCode;

/// Token usage reported by a scripted reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FakeUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl Default for FakeUsage {
    fn default() -> Self {
        FakeUsage {
            prompt_tokens: 10,
            completion_tokens: 5,
        }
    }
}

/// What the server sends back for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyBody {
    /// An assistant message with this text content.
    Content(String),
    /// An assistant message whose only content is tool calls:
    /// `(call id, function name, arguments JSON text)`.
    ToolCalls(Vec<(String, String, String)>),
    /// A non-2xx status with an OpenAI-style `{"error": {...}}` body.
    Error { status: u16, message: String },
    /// This raw body with status 200 (for malformed-response tests).
    Raw(String),
    /// A non-2xx status with this exact body (a real server's error shape).
    RawError { status: u16, body: String },
}

/// One scripted reply: a body, the usage it reports and how long the server
/// waits before answering.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub body: ReplyBody,
    pub usage: FakeUsage,
    pub delay: Duration,
    /// Extra response headers (e.g. `retry-after` on a 429).
    pub headers: Vec<(String, String)>,
}

impl Reply {
    fn new(body: ReplyBody) -> Self {
        Reply {
            body,
            usage: FakeUsage::default(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// Plain text content.
    pub fn content(text: impl Into<String>) -> Self {
        Reply::new(ReplyBody::Content(text.into()))
    }

    /// JSON content: `value` serialised as the message text.
    pub fn json(value: &Value) -> Self {
        Reply::new(ReplyBody::Content(value.to_string()))
    }

    /// Content that is not JSON at all.
    pub fn invalid_json() -> Self {
        Reply::content("this is {not json")
    }

    /// One tool call (id `call_1`).
    pub fn tool_call(name: &str, arguments: &Value) -> Self {
        Reply::tool_calls(&[(name, arguments.clone())])
    }

    /// Several tool calls in one message, ids `call_1`, `call_2`, …
    pub fn tool_calls(calls: &[(&str, Value)]) -> Self {
        Reply::new(ReplyBody::ToolCalls(
            calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    (
                        format!("call_{}", i + 1),
                        (*name).to_owned(),
                        args.to_string(),
                    )
                })
                .collect(),
        ))
    }

    /// An HTTP error with an OpenAI-style body.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        Reply::new(ReplyBody::Error {
            status,
            message: message.into(),
        })
    }

    /// `429 Too Many Requests`.
    pub fn rate_limited() -> Self {
        Reply::status(429, "rate limited")
    }

    /// A non-2xx status with this exact JSON body.
    pub fn raw_error(status: u16, body: impl Into<String>) -> Self {
        Reply::new(ReplyBody::RawError {
            status,
            body: body.into(),
        })
    }

    /// A raw 200 body.
    pub fn raw(body: impl Into<String>) -> Self {
        Reply::new(ReplyBody::Raw(body.into()))
    }

    /// The same reply, sent after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same reply with one more response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same reply, reporting this usage.
    pub fn with_usage(mut self, prompt_tokens: u32, completion_tokens: u32) -> Self {
        self.usage = FakeUsage {
            prompt_tokens,
            completion_tokens,
        };
        self
    }
}

/// One request the server received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    pub path: String,
    /// The `Authorization` header, if any (tests check keys are sent, and
    /// that none is sent for key-less providers).
    pub authorization: Option<String>,
    pub body: Value,
}

impl RecordedRequest {
    /// Names of the tools offered in this request (`tools[].function.name`).
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The text of the last message (usually the user prompt).
    pub fn last_message_text(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    }
}

/// Computes a reply from the request body (see [`FakeLlm::set_responder`]);
/// `None` falls through to the script.
pub type Responder = Arc<dyn Fn(&Value) -> Option<Reply> + Send + Sync>;

#[derive(Default)]
struct State {
    /// Consulted before the script: a model whose answer depends on what it
    /// is asked (the chaos test's, where kills make the call order unknowable).
    responder: Option<Responder>,
    queue: VecDeque<Reply>,
    fallback: Option<Reply>,
    /// `(top-level body key, reply)`: a request whose JSON body has the key
    /// gets the reply, without consuming the script.
    when_key: Option<(String, Reply)>,
    requests: Vec<RecordedRequest>,
    record: bool,
    /// What `GET …/models` answers (404 when unset).
    models: Option<Value>,
}

struct Shared {
    state: Mutex<State>,
    served: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not wedge the server for the others.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running fake OpenAI-compatible server. Stops when dropped.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl FakeLlm {
    /// Starts a recording server with an empty script. A request that finds
    /// the script empty gets `500 no scripted reply` (so an unexpected extra
    /// call fails loudly).
    pub async fn start() -> std::io::Result<FakeLlm> {
        FakeLlm::spawn(State {
            record: true,
            ..State::default()
        })
        .await
    }

    /// Starts a server for load tests: every request gets `reply` at once and
    /// nothing is recorded.
    pub async fn zero_latency(reply: Reply) -> std::io::Result<FakeLlm> {
        FakeLlm::spawn(State {
            fallback: Some(Reply {
                delay: Duration::ZERO,
                ..reply
            }),
            record: false,
            ..State::default()
        })
        .await
    }

    async fn spawn(state: State) -> std::io::Result<FakeLlm> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            served: AtomicU64::new(0),
        });
        let (tx, rx) = oneshot::channel::<()>();
        let routes = routes(shared.clone());
        crate::serve::spawn(listener, warp::service(routes), rx);
        Ok(FakeLlm {
            addr,
            shared,
            shutdown: Some(tx),
        })
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues one reply (served in FIFO order).
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.lock().queue.push_back(reply);
        self
    }

    /// Queues several replies.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) -> &Self {
        self.shared.lock().queue.extend(replies);
        self
    }

    /// The reply used whenever the queue is empty (instead of a 500).
    pub fn set_fallback(&self, reply: Reply) -> &Self {
        self.shared.lock().fallback = Some(reply);
        self
    }

    /// Answers every request `responder` returns `Some` for (the script is
    /// neither consulted nor consumed for those).
    pub fn set_responder(
        &self,
        responder: impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static,
    ) -> &Self {
        self.shared.lock().responder = Some(Arc::new(responder));
        self
    }

    /// Serves `listing` at `GET …/models` (the OpenAI model listing).
    pub fn set_models(&self, listing: Value) -> &Self {
        self.shared.lock().models = Some(listing);
        self
    }

    /// Answers every request whose JSON body has the top-level `key` with
    /// `reply` (the script is not consumed), e.g. a server that rejects any
    /// request carrying `tools`.
    pub fn when_body_has(&self, key: &str, reply: Reply) -> &Self {
        self.shared.lock().when_key = Some((key.to_owned(), reply));
        self
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many requests were answered (recorded or not).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        self.shared.lock().queue.len()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn routes(
    shared: Arc<Shared>,
) -> impl Filter<Extract = (warp::reply::Response,), Error = warp::Rejection> + Clone {
    let listing = shared.clone();
    let models = warp::get()
        .and(warp::path::full())
        .map(move |path: warp::path::FullPath| {
            let models = listing.lock().models.clone();
            match models {
                Some(m) if path.as_str().ends_with("/models") => ok_response(m.to_string()),
                _ => error_response(404, &format!("no route {}", path.as_str())),
            }
        });
    let chat = warp::post()
        .and(warp::path::full())
        .and(warp::header::optional::<String>("authorization"))
        .and(warp::body::bytes())
        .and_then(
            move |path: warp::path::FullPath, auth, bytes: hyper::body::Bytes| {
                let shared = shared.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        handle(&shared, path.as_str(), auth, &bytes).await,
                    )
                }
            },
        );
    models.or(chat).unify()
}

async fn handle(
    shared: &Shared,
    path: &str,
    authorization: Option<String>,
    bytes: &[u8],
) -> warp::reply::Response {
    // The whole body as a tree only when something reads it (a recording,
    // a keyed reply, a responder); the load tool's zero-latency server
    // reads just the model name, so a few-KiB request costs the shared
    // cores a scan instead of a tree built and dropped (issue #19).
    let needs_body = {
        let st = shared.lock();
        st.record || st.responder.is_some() || st.when_key.is_some()
    };
    let (body, model) = if needs_body {
        let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let model = body["model"].as_str().map(str::to_owned);
        (body, model)
    } else {
        (Value::Null, model_of(bytes))
    };
    let model = model.unwrap_or_else(|| "fake-model".to_owned());
    let reply = {
        let mut st = shared.lock();
        let keyed = st
            .when_key
            .as_ref()
            .filter(|(key, _)| body.get(key.as_str()).is_some())
            .map(|(_, reply)| reply.clone());
        let computed = st.responder.as_ref().and_then(|r| r(&body));
        if st.record {
            st.requests.push(RecordedRequest {
                path: path.to_owned(),
                authorization,
                body,
            });
        }
        keyed
            .or(computed)
            .or_else(|| st.queue.pop_front().or_else(|| st.fallback.clone()))
    };
    shared.served.fetch_add(1, Ordering::Relaxed);
    if !path.ends_with("/chat/completions") {
        return error_response(404, &format!("no route {path}"));
    }
    let Some(reply) = reply else {
        return error_response(500, "no scripted reply");
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = render(&reply, &model);
    for (name, value) in &reply.headers {
        if let (Ok(n), Ok(v)) = (
            warp::http::HeaderName::from_bytes(name.as_bytes()),
            warp::http::HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(n, v);
        }
    }
    response
}

/// The top-level `model` of a JSON request body, read without building the
/// rest (serde skips the other fields).
fn model_of(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        model: Option<String>,
    }
    serde_json::from_slice::<Head>(bytes).ok()?.model
}

fn error_response(status: u16, message: &str) -> warp::reply::Response {
    let body =
        json!({"error": {"message": message, "type": "fake_error", "param": null, "code": null}});
    raw_response(status, body.to_string())
}

fn raw_response(status: u16, body: String) -> warp::reply::Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    warp::http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap_or_else(|_| warp::reply::Response::new(Vec::new().into()))
}

fn ok_response(body: String) -> warp::reply::Response {
    warp::http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap_or_else(|_| warp::reply::Response::new(Vec::new().into()))
}

/// The full chat-completion body for a reply.
fn render(reply: &Reply, model: &str) -> warp::reply::Response {
    let (message, finish) = match &reply.body {
        ReplyBody::Error { status, message } => return error_response(*status, message),
        ReplyBody::Raw(raw) => return ok_response(raw.clone()),
        ReplyBody::RawError { status, body } => return raw_response(*status, body.clone()),
        ReplyBody::Content(text) => (json!({"role": "assistant", "content": text}), "stop"),
        ReplyBody::ToolCalls(calls) => (
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": calls.iter().map(|(id, name, args)| json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": args}
                })).collect::<Vec<_>>()
            }),
            "tool_calls",
        ),
    };
    let u = reply.usage;
    let body = json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000u32,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens
        }
    });
    ok_response(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(fake: &FakeLlm, body: Value) -> (u16, Value) {
        // reqwest built with netguard/llm carries `rustls-no-provider`, whose
        // `Client::new()` panics unless a process crypto provider exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resp = reqwest::Client::new()
            .post(format!("{}/chat/completions", fake.base_url()))
            .header("authorization", "Bearer k")
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    #[tokio::test]
    async fn serves_script_in_order_and_records() {
        let fake = FakeLlm::start().await.unwrap();
        fake.push(Reply::content("hi"))
            .push(Reply::tool_call("shell_exec", &json!({"command": "ls"})))
            .push(Reply::rate_limited());
        let (s, b) = post(&fake, json!({"model": "m", "messages": []})).await;
        assert_eq!(
            (s, b["choices"][0]["message"]["content"].as_str()),
            (200, Some("hi"))
        );
        let (_, b) = post(&fake, json!({"model": "m"})).await;
        let call = &b["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "shell_exec");
        assert_eq!(call["function"]["arguments"], "{\"command\":\"ls\"}");
        let (s, b) = post(&fake, json!({"model": "m"})).await;
        assert_eq!(s, 429);
        assert_eq!(b["error"]["message"], "rate limited");
        let (s, _) = post(&fake, json!({"model": "m"})).await;
        assert_eq!(s, 500, "empty script fails loudly");
        let reqs = fake.requests();
        assert_eq!(reqs.len(), 4);
        assert_eq!(reqs[0].path, "/v1/chat/completions");
        assert_eq!(reqs[0].authorization.as_deref(), Some("Bearer k"));
        assert_eq!(reqs[0].body["model"], "m");
    }

    #[tokio::test]
    async fn zero_latency_mode_repeats_and_records_nothing() {
        let fake = FakeLlm::zero_latency(Reply::content("ok")).await.unwrap();
        for _ in 0..3 {
            let (s, _) = post(&fake, json!({"model": "m"})).await;
            assert_eq!(s, 200);
        }
        assert_eq!(fake.served(), 3);
        assert!(fake.requests().is_empty());
    }

    #[tokio::test]
    async fn zero_latency_mode_echoes_the_requested_model() {
        let fake = FakeLlm::zero_latency(Reply::content("ok")).await.unwrap();
        let big = "x".repeat(4096);
        let (s, b) = post(
            &fake,
            json!({"messages": [{"role": "system", "content": big}], "model": "bench-m",
                   "response_format": {"type": "json_schema"}}),
        )
        .await;
        assert_eq!((s, b["model"].as_str()), (200, Some("bench-m")));
        let (_, b) = post(&fake, json!({"messages": []})).await;
        assert_eq!(b["model"], "fake-model", "no model named: the default");
    }

    #[test]
    fn model_of_reads_only_the_top_level_model() {
        assert_eq!(
            model_of(br#"{"messages":[{"model":"inner"}],"model":"m1","n":1}"#).as_deref(),
            Some("m1")
        );
        assert_eq!(model_of(br#"{"messages":[]}"#), None);
        assert_eq!(model_of(b"not json"), None);
    }

    #[tokio::test]
    async fn delayed_reply_waits() {
        let fake = FakeLlm::start().await.unwrap();
        fake.push(Reply::content("slow").delayed(Duration::from_millis(150)));
        let t = std::time::Instant::now();
        let (s, _) = post(&fake, json!({"model": "m"})).await;
        assert_eq!(s, 200);
        assert!(t.elapsed() >= Duration::from_millis(150));
    }

    #[tokio::test]
    async fn responder_answers_from_the_body_before_the_script() {
        let fake = FakeLlm::start().await.unwrap();
        fake.push(Reply::content("scripted"));
        fake.set_responder(|body| {
            (body["model"] == "echo").then(|| Reply::content(body["messages"][0].to_string()))
        });
        let (_, b) = post(&fake, json!({"model": "echo", "messages": ["ping"]})).await;
        assert_eq!(b["choices"][0]["message"]["content"], "\"ping\"");
        // Not the responder's: the script serves it, untouched until now.
        let (_, b) = post(&fake, json!({"model": "m"})).await;
        assert_eq!(b["choices"][0]["message"]["content"], "scripted");
        assert_eq!(fake.requests().len(), 2);
    }
}
