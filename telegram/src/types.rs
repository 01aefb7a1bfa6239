//! The Bot API types Silas uses, and only those (https://core.telegram.org/bots/api).
//! Unknown fields are ignored, so a newer Bot API does not break decoding.

use serde::{Deserialize, Serialize};

/// The envelope of every Bot API reply.
#[derive(Clone, Debug, Deserialize)]
pub struct ApiResponse<T> {
    pub ok: bool,
    pub result: Option<T>,
    pub description: Option<String>,
    pub error_code: Option<u16>,
    pub parameters: Option<ResponseParameters>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ResponseParameters {
    pub retry_after: Option<u64>,
    pub migrate_to_chat_id: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

/// `Chat.type`; anything Telegram adds later decodes as `Other`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ChatKind {
    Private,
    Group,
    Supergroup,
    Channel,
    Other(String),
}

impl From<String> for ChatKind {
    fn from(s: String) -> Self {
        match s.as_str() {
            "private" => ChatKind::Private,
            "group" => ChatKind::Group,
            "supergroup" => ChatKind::Supergroup,
            "channel" => ChatKind::Channel,
            _ => ChatKind::Other(s),
        }
    }
}

impl From<ChatKind> for String {
    fn from(k: ChatKind) -> String {
        match k {
            ChatKind::Private => "private".into(),
            ChatKind::Group => "group".into(),
            ChatKind::Supergroup => "supergroup".into(),
            ChatKind::Channel => "channel".into(),
            ChatKind::Other(s) => s,
        }
    }
}

impl ChatKind {
    pub fn is_group(&self) -> bool {
        matches!(self, ChatKind::Group | ChatKind::Supergroup)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chat {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: ChatKind,
}

/// A message (or, in a callback query, an inaccessible message: `date` 0
/// and no text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub message_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<User>,
    pub chat: Chat,
    #[serde(default)]
    pub date: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// The message this one replies to (only its id is kept): a typed
    /// answer that replies to a card answers that card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_message: Option<RepliedTo>,
    /// Silas's own mark, set when the update is recorded: the kinds of
    /// secret removed from `text`/`caption` before the first durable copy
    /// (the handler deletes the message from the chat and tells the owner).
    #[serde(
        rename = "silas_redacted",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub redacted: Vec<String>,
}

/// The message a reply answers; Telegram sends it whole, only the id is
/// read (and stored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepliedTo {
    pub message_id: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackQuery {
    pub id: String,
    pub from: User,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub update_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_query: Option<CallbackQuery>,
}

/// Just the id of an update, for one Silas cannot decode (it is recorded and
/// skipped rather than wedging the poll loop).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct UpdateId {
    pub update_id: u64,
}

/// A button: exactly one of `callback_data` (a press comes back as a
/// callback query) or `url` (the client opens the link) is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineKeyboardButton {
    pub text: String,
    /// At most 64 bytes (see `policy::callback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl InlineKeyboardButton {
    pub fn callback(text: impl Into<String>, data: impl Into<String>) -> Self {
        InlineKeyboardButton {
            text: text.into(),
            callback_data: Some(data.into()),
            url: None,
        }
    }

    pub fn url(text: impl Into<String>, url: impl Into<String>) -> Self {
        InlineKeyboardButton {
            text: text.into(),
            callback_data: None,
            url: Some(url.into()),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineKeyboardMarkup {
    pub inline_keyboard: Vec<Vec<InlineKeyboardButton>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParseMode {
    MarkdownV2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LinkPreviewOptions {
    pub is_disabled: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct GetUpdates {
    pub offset: u64,
    pub timeout: u32,
    pub allowed_updates: Vec<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SendMessage {
    pub chat_id: i64,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_mode: Option<ParseMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<InlineKeyboardMarkup>,
    /// Previews would fetch links the model wrote; never wanted.
    pub link_preview_options: LinkPreviewOptions,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EditMessageText {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_mode: Option<ParseMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<InlineKeyboardMarkup>,
    pub link_preview_options: LinkPreviewOptions,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EditMessageReplyMarkup {
    pub chat_id: i64,
    pub message_id: i64,
    /// `None` removes the keyboard (a card that was answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<InlineKeyboardMarkup>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnswerCallbackQuery {
    pub callback_query_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub show_alert: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DeleteMessage {
    pub chat_id: i64,
    pub message_id: i64,
}

/// `editMessage*` returns the message, or `true` for inline messages.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum MessageOrTrue {
    Message(Box<Message>),
    True(bool),
}
