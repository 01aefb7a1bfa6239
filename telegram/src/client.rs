//! A small typed Bot API client on the workspace's reqwest (rustls, JSON).
//!
//! Every call is `POST {api_url}/bot<token>/<method>` with a JSON body. The
//! token is part of that URL, so reqwest errors are stripped of their URL and
//! every text that came back from the request is scrubbed of the token
//! before it becomes a [`TelegramError`]. Redirects are not followed (a
//! redirect would carry the token to another host).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::TelegramError;
use crate::token::BotToken;
use crate::types::{
    AnswerCallbackQuery, ApiResponse, DeleteMessage, EditMessageReplyMarkup, EditMessageText,
    GetUpdates, Message, MessageOrTrue, SendMessage, User,
};

/// Headroom over the long-poll timeout before the HTTP request gives up.
const POLL_GRACE: Duration = Duration::from_secs(10);
/// Timeout of every other call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response read. A full `getUpdates` (100 updates of 4,096
/// characters with their entities) is well under 2 MB; unbounded, a broken
/// or hostile Bot API server's 300 MB answer was read whole on every poll.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct BotClient {
    http: reqwest::Client,
    api_url: String,
    token: BotToken,
}

impl BotClient {
    /// `api_url` is `channels.telegram.api_url` (validated by the config).
    pub fn new(api_url: &str, token: BotToken) -> Result<BotClient, TelegramError> {
        silas_netguard::ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| TelegramError::Config(format!("http client: {}", e.without_url())))?;
        Ok(BotClient {
            http,
            api_url: api_url.trim_end_matches('/').to_string(),
            token,
        })
    }

    pub fn token(&self) -> &BotToken {
        &self.token
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &'static str,
        body: &B,
        timeout: Duration,
    ) -> Result<T, TelegramError> {
        let url = format!("{}/bot{}/{method}", self.api_url, self.token.expose());
        let scrub = |e: reqwest::Error| {
            if e.is_timeout() {
                TelegramError::Timeout
            } else {
                TelegramError::Transport(self.token.scrub(&e.without_url().to_string()))
            }
        };
        let mut resp = self
            .http
            .post(url)
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(scrub)?;
        let status = resp.status().as_u16();
        let too_large = || TelegramError::Decode {
            method,
            detail: format!("the response is larger than {MAX_RESPONSE_BYTES} bytes; not read"),
        };
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(scrub)? {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let mut parsed: Result<ApiResponse<T>, _> = serde_json::from_slice(&bytes);
        if parsed.is_err()
            && let Some(mended) = crate::mend::lone_surrogates(&bytes)
        {
            parsed = serde_json::from_slice(&mended);
        }
        let description = |p: &Option<String>| {
            self.token
                .scrub(p.as_deref().unwrap_or("no description"))
                .chars()
                .take(300)
                .collect::<String>()
        };
        match parsed {
            Ok(ApiResponse {
                ok: true,
                result: Some(r),
                ..
            }) if (200..300).contains(&status) => Ok(r),
            Ok(r) => {
                let status = r.error_code.unwrap_or(status);
                let retry_after = r.parameters.as_ref().and_then(|p| p.retry_after);
                Err(classify(
                    method,
                    status,
                    retry_after,
                    description(&r.description),
                ))
            }
            // A proxy's HTML 502 page is still a 5xx.
            Err(_) if status >= 400 => Err(classify(method, status, None, "no JSON body".into())),
            Err(e) => Err(TelegramError::Decode {
                method,
                detail: self.token.scrub(&e.to_string()),
            }),
        }
    }

    pub async fn get_me(&self) -> Result<User, TelegramError> {
        self.call("getMe", &serde_json::Map::new(), CALL_TIMEOUT)
            .await
    }

    /// Long polling: waits up to `timeout_secs` on the server for updates
    /// with `update_id >= offset`. Returns them undecoded (each is decoded on
    /// its own, so one unknown shape cannot block the rest).
    pub async fn get_updates(
        &self,
        offset: u64,
        timeout_secs: u32,
    ) -> Result<Vec<serde_json::Value>, TelegramError> {
        let body = GetUpdates {
            offset,
            timeout: timeout_secs,
            // Edits too: a secret pasted by editing a message is deleted
            // from the chat like one sent new (`telegram_bridge`).
            allowed_updates: vec!["message", "edited_message", "callback_query"],
        };
        let timeout = Duration::from_secs(timeout_secs.into()) + POLL_GRACE;
        self.call("getUpdates", &body, timeout).await
    }

    pub async fn send_message(&self, req: &SendMessage) -> Result<Message, TelegramError> {
        self.call("sendMessage", req, CALL_TIMEOUT).await
    }

    pub async fn edit_message_text(&self, req: &EditMessageText) -> Result<(), TelegramError> {
        self.call::<_, MessageOrTrue>("editMessageText", req, CALL_TIMEOUT)
            .await
            .map(drop)
    }

    pub async fn edit_message_reply_markup(
        &self,
        req: &EditMessageReplyMarkup,
    ) -> Result<(), TelegramError> {
        self.call::<_, MessageOrTrue>("editMessageReplyMarkup", req, CALL_TIMEOUT)
            .await
            .map(drop)
    }

    pub async fn answer_callback_query(
        &self,
        req: &AnswerCallbackQuery,
    ) -> Result<(), TelegramError> {
        self.call::<_, bool>("answerCallbackQuery", req, CALL_TIMEOUT)
            .await
            .map(drop)
    }

    pub async fn delete_message(&self, req: &DeleteMessage) -> Result<(), TelegramError> {
        self.call::<_, bool>("deleteMessage", req, CALL_TIMEOUT)
            .await
            .map(drop)
    }
}

fn classify(
    method: &'static str,
    status: u16,
    retry_after: Option<u64>,
    description: String,
) -> TelegramError {
    match status {
        429 => TelegramError::RateLimited {
            // No hint: wait a second rather than hammer.
            retry_after: Duration::from_secs(retry_after.unwrap_or(1).max(1)),
        },
        401 | 404 => TelegramError::Unauthorized {
            status,
            description,
        },
        500..=599 => TelegramError::Server {
            status,
            description,
        },
        _ => TelegramError::Refused {
            method,
            status,
            description,
        },
    }
}
