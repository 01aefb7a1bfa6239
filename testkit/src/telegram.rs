//! [`FakeBotApi`]: a scriptable Telegram Bot API server on `127.0.0.1`.
//!
//! It serves `POST /bot<token>/<method>` like the real API: `getUpdates`
//! returns the queued updates with `update_id >= offset` (and drops the ones
//! below it, as Telegram does once an offset confirms them), long-polling up
//! to its `timeout` (capped at one second) when there are none. Other methods
//! succeed with a plausible result (`sendMessage` returns a message with a
//! fresh `message_id`). A test can queue failures per method — 502 with an
//! HTML body, 429 with `retry_after`, any Bot API error — and afterwards read
//! every call made, in order, with the token the client used.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};
use warp::Filter;
use warp::http::StatusCode;

/// A scripted reply to one call.
#[derive(Clone, Debug)]
pub enum BotReply {
    /// `{"ok": true, "result": …}`.
    Ok(Value),
    /// A Bot API error (`{"ok": false, "error_code", "description"}`).
    Error { status: u16, description: String },
    /// 429 with `parameters.retry_after`.
    RateLimited { retry_after: u64 },
    /// A bare status with a non-JSON body (a proxy's error page).
    Raw { status: u16, body: String },
}

/// One call the server received.
#[derive(Clone, Debug)]
pub struct BotCall {
    pub method: String,
    /// The token segment of the path (what the client sent).
    pub token: String,
    pub body: Value,
    pub at: std::time::Instant,
    /// The `message_id` this call's reply carries: assigned when the call is
    /// recorded (for an unscripted `sendMessage`; the edited message's id for
    /// an edit), so a test can press a button on the message it sent.
    pub message_id: Option<i64>,
}

#[derive(Default)]
struct State {
    updates: Vec<Value>,
    scripted: HashMap<String, VecDeque<BotReply>>,
    calls: Vec<BotCall>,
    next_message_id: i64,
    /// Offsets from here on belong to a sequence Telegram has left behind
    /// ([`FakeBotApi::restart_sequence`]): they filter nothing.
    old_offsets_from: Option<u64>,
    /// Replies to these methods wait this long after the call is recorded
    /// (a slow Bot API: the client sees its message late).
    delays: HashMap<String, Duration>,
}

struct Shared {
    state: Mutex<State>,
    arrived: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running fake Bot API. Stops when dropped.
pub struct FakeBotApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl FakeBotApi {
    pub async fn start() -> std::io::Result<FakeBotApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_message_id: 1000,
                ..State::default()
            }),
            arrived: Notify::new(),
        });
        let (tx, rx) = oneshot::channel::<()>();
        let s = shared.clone();
        let routes = warp::post()
            .and(warp::path::param::<String>())
            .and(warp::path::param::<String>())
            .and(warp::path::end())
            .and(warp::body::bytes())
            .and_then(
                move |bot: String, method: String, bytes: hyper::body::Bytes| {
                    let s = s.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(handle(&s, &bot, &method, &bytes).await)
                    }
                },
            );
        crate::serve::spawn(listener, warp::service(routes), rx);
        Ok(FakeBotApi {
            addr,
            shared,
            shutdown: Some(tx),
        })
    }

    /// The value for `channels.telegram.api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queue an update (JSON as Telegram sends it) for `getUpdates`.
    pub fn push_update(&self, update: Value) -> &Self {
        self.shared.lock().updates.push(update);
        self.shared.arrived.notify_waiters();
        self
    }

    /// Telegram picks a new, random update id after a week without updates:
    /// the offsets a client confirmed in the old sequence (`from` and above)
    /// stop filtering, so updates below them are delivered.
    pub fn restart_sequence(&self, from: u64) -> &Self {
        let mut st = self.shared.lock();
        // What the old offset confirmed is forgotten first.
        st.updates
            .retain(|u| u["update_id"].as_u64().is_none_or(|id| id >= from));
        st.old_offsets_from = Some(from);
        drop(st);
        self
    }

    /// Queue a reply for the next call of `method` (FIFO per method).
    pub fn script(&self, method: &str, reply: BotReply) -> &Self {
        self.shared
            .lock()
            .scripted
            .entry(method.to_string())
            .or_default()
            .push_back(reply);
        self
    }

    /// Answer every later call of `method` only after `delay` (the call is
    /// recorded, and visible to [`FakeBotApi::calls`], at once).
    pub fn delay(&self, method: &str, delay: Duration) -> &Self {
        self.shared.lock().delays.insert(method.to_string(), delay);
        self
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<BotCall> {
        self.shared.lock().calls.clone()
    }

    /// The calls of one method.
    pub fn calls_to(&self, method: &str) -> Vec<BotCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn handle(shared: &Shared, bot: &str, method: &str, bytes: &[u8]) -> warp::reply::Response {
    let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let Some(token) = bot.strip_prefix("bot") else {
        return respond(&BotReply::Error {
            status: 404,
            description: "Not Found".into(),
        });
    };
    let (scripted, message_id, delay) = {
        let mut st = shared.lock();
        let delay = st.delays.get(method).copied();
        let scripted = st.scripted.get_mut(method).and_then(VecDeque::pop_front);
        // Assigned under the same lock as the call is recorded, so ids follow
        // the recorded order even when calls race.
        let message_id = match method {
            _ if scripted.is_some() => None,
            "sendMessage" => {
                st.next_message_id += 1;
                Some(st.next_message_id)
            }
            "editMessageText" | "editMessageReplyMarkup" => body["message_id"].as_i64(),
            _ => None,
        };
        st.calls.push(BotCall {
            method: method.to_string(),
            token: token.to_string(),
            body: body.clone(),
            at: std::time::Instant::now(),
            message_id,
        });
        (scripted, message_id, delay)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(reply) = scripted {
        return respond(&reply);
    }
    let result = match method {
        "getUpdates" => get_updates(shared, &body).await,
        "getMe" => json!({"id": 1, "is_bot": true, "first_name": "Silas", "username": "silas_bot"}),
        "sendMessage" | "editMessageText" | "editMessageReplyMarkup" => {
            let message_id = message_id.unwrap_or(0);
            let chat_id = body["chat_id"].as_i64().unwrap_or(0);
            let kind = if chat_id < 0 { "group" } else { "private" };
            json!({
                "message_id": message_id,
                "date": 1_700_000_000,
                "chat": {"id": chat_id, "type": kind},
                "text": body["text"],
            })
        }
        "answerCallbackQuery" | "deleteMessage" => json!(true),
        _ => {
            return respond(&BotReply::Error {
                status: 404,
                description: "Not Found: method not found".into(),
            });
        }
    };
    respond(&BotReply::Ok(result))
}

async fn get_updates(shared: &Shared, body: &Value) -> Value {
    let offset = body["offset"].as_u64().unwrap_or(0);
    let wait =
        Duration::from_secs(body["timeout"].as_u64().unwrap_or(0)).min(Duration::from_secs(1));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let notified = shared.arrived.notified();
        {
            let mut st = shared.lock();
            let offset = match st.old_offsets_from {
                Some(from) if offset >= from => 0,
                _ => offset,
            };
            // An offset confirms every update below it: Telegram forgets them.
            st.updates
                .retain(|u| u["update_id"].as_u64().is_none_or(|id| id >= offset));
            if !st.updates.is_empty() {
                return Value::Array(st.updates.clone());
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return json!([]);
        }
    }
}

fn respond(reply: &BotReply) -> warp::reply::Response {
    let (status, body) = match reply {
        BotReply::Ok(result) => (200, json!({"ok": true, "result": result}).to_string()),
        BotReply::Error {
            status,
            description,
        } => (
            *status,
            json!({"ok": false, "error_code": status, "description": description}).to_string(),
        ),
        BotReply::RateLimited { retry_after } => (
            429,
            json!({
                "ok": false,
                "error_code": 429,
                "description": format!("Too Many Requests: retry after {retry_after}"),
                "parameters": {"retry_after": retry_after}
            })
            .to_string(),
        ),
        BotReply::Raw { status, body } => (*status, body.clone()),
    };
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    warp::http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap_or_else(|_| warp::reply::Response::new(Vec::new().into()))
}
