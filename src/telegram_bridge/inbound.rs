//! Updates in: the [`Handler`] the poller calls for each recorded update.
//! Every path returns the transport actions to carry out; nothing here
//! trusts what the update says about who sent it beyond what `admit`
//! checked (the owner's chat and user id).

use serde_json::json;
use silas_actors::approval::AnswerOrigin;
use silas_actors::cards::{CardRejection, CardResponse};
use silas_actors::stream::{InboundMessage, StreamHandle, SubmitOutcome};
use silas_core::model::approval::{ApprovalDecision, ApprovalStrength};
use silas_core::{Coded, ErrorCode};
use silas_storage::{PendingCard, TelegramCardMessage};
use silas_telegram::cards::{
    CardAnswer, answer_for_button, answer_for_text, approvable_here, is_affirmative, outcome_line,
};
use silas_telegram::types::{CallbackQuery, Message};
use silas_telegram::{Action, Admission, Delivery, HandleError, Handler, Text, admit};

use super::{OWNER_CONNECTION, TELEGRAM_CHANNEL, TelegramBridge};

/// What the owner is told after a secret was removed from the chat.
pub const SECRET_DELETED_NOTICE: &str = "I deleted your last message from this chat because it looked like a secret (an API key, token or password). It was redacted before Silas stored it and no model saw it. To give Silas a secret, send /secret <what it is> and use the secure form in the web app.";
/// Added to a caption sent as a message: the attachment itself is not read.
pub const ATTACHMENT_NOTE: &str = "[sent with a photo or file, which Silas cannot open here]";
/// What the owner is told after editing a message they had sent.
pub const EDIT_IGNORED: &str = "I saw your edit, but I act on messages as they were first sent. Please send the change as a new message.";
/// What a customer is told when their conversation's queue is full.
pub const CUSTOMER_BUSY: &str = "I'm still working on your earlier messages, so I couldn't take this one. Please send it again in a moment.";
/// The longest text read from a message: four times Telegram's own limit
/// (4,096 characters for a message, 1,024 for a caption).
pub const MAX_TEXT_CHARS: usize = 16 * 1024;
/// What the sender of a longer text is told.
pub const TOO_LONG: &str =
    "That message is longer than Telegram allows, so I did not read it. Please send it in parts.";
/// The chat command that opens a secure input card.
pub const SECRET_COMMAND: &str = "/secret";

fn retry(code: ErrorCode, message: impl Into<String>) -> HandleError {
    HandleError {
        code,
        message: message.into(),
        retry: true,
    }
}

fn callback_reply(q: &CallbackQuery, text: &str) -> Action {
    Action::AnswerCallback {
        callback_query_id: q.id.clone(),
        text: Some(text.to_string()),
    }
}

/// What a typed message means for the cards open in its chat.
enum Typed {
    Answer(Box<(TelegramCardMessage, PendingCard, CardAnswer)>),
    /// It reads as an answer, but this many cards are open and it replies
    /// to none of them.
    Ambiguous(usize),
    NotAnAnswer,
}

/// The reply to a typed answer that could be meant for several cards.
pub fn ambiguous_answer(open: usize) -> String {
    format!(
        "{open} cards are waiting here, so I did not guess which one you meant. Tap a button on that card, or reply to it with your answer."
    )
}

fn say(chat_id: i64, text: impl Into<String>) -> Action {
    Action::Send {
        chat_id,
        text: Text::Plain(text.into()),
        keyboard: None,
    }
}

impl Handler for TelegramBridge {
    async fn handle(&self, d: &Delivery) -> Result<Vec<Action>, HandleError> {
        let admission = admit(
            &self.args.store.telegram_updates(),
            &self.args.settings.owner,
            &d.update,
            self.args.chatbot_active,
        )
        .map_err(|e| retry(e.code(), e.to_string()))?;
        let owner = match admission {
            Admission::Owner => true,
            Admission::Customer { .. } => false,
            Admission::Refused { chat_id, reply } => {
                let what = if d.update.callback_query.is_some() {
                    "button"
                } else {
                    "message"
                };
                // Who and where, never what they wrote.
                let from = d
                    .update
                    .callback_query
                    .as_ref()
                    .map(|q| q.from.id)
                    .or_else(|| {
                        d.update
                            .message
                            .as_ref()
                            .and_then(|m| m.from.as_ref().map(|u| u.id))
                    });
                self.audit(
                    "telegram.refused",
                    json!({"chat_id": chat_id, "user_id": from, "what": what,
                           "update_id": d.update.update_id}),
                );
                return Ok(reply);
            }
            Admission::Ignored => {
                self.audit("telegram.ignored", json!({"update_id": d.update.update_id}));
                return Ok(Vec::new());
            }
        };
        if let Some(q) = &d.update.callback_query {
            return Ok(self.press(q, owner).await);
        }
        if let Some(m) = &d.update.message {
            return self.message(m, owner, d.update.update_id).await;
        }
        // An edited message: its secret matters (already redacted); the
        // owner is told an edit changes nothing (the original was answered
        // as sent), rather than left waiting for a reply that never comes.
        if let Some(m) = &d.update.edited_message {
            if !m.redacted.is_empty() {
                return Ok(self.secret_removed(m));
            }
            if owner {
                return Ok(vec![say(m.chat.id, EDIT_IGNORED)]);
            }
        }
        Ok(Vec::new())
    }

    fn abandoned(&self, update_id: u64, attempts: u32) {
        self.audit(
            "telegram.update_abandoned",
            json!({"update_id": update_id, "attempts": attempts}),
        );
    }
}

impl TelegramBridge {
    fn connection_id(&self, owner: bool, chat_id: i64) -> String {
        if owner {
            OWNER_CONNECTION.to_string()
        } else {
            format!("tg:{chat_id}")
        }
    }

    /// A message that carried a secret: delete it from the chat and tell the
    /// owner (the stored copy was redacted when the update was recorded).
    fn secret_removed(&self, m: &Message) -> Vec<Action> {
        self.audit(
            "secret_redacted_inbound",
            json!({"channel": TELEGRAM_CHANNEL, "chat_id": m.chat.id, "kinds": m.redacted,
                   "deleted_from_chat": true}),
        );
        vec![
            Action::Delete {
                chat_id: m.chat.id,
                message_id: m.message_id,
            },
            say(m.chat.id, SECRET_DELETED_NOTICE),
        ]
    }

    async fn message(
        &self,
        m: &Message,
        owner: bool,
        update_id: u64,
    ) -> Result<Vec<Action>, HandleError> {
        let chat_id = m.chat.id;
        let mut actions = Vec::new();
        if !m.redacted.is_empty() {
            actions = self.secret_removed(m);
        }
        // A photo or file with a caption: the caption is what was said, and
        // the model is told there was something it cannot see.
        let said = match (m.text.as_deref(), m.caption.as_deref().map(str::trim)) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(c)) if !c.is_empty() => Some(format!("{c}\n\n{ATTACHMENT_NOTE}")),
            _ => None,
        };
        let Some(text) = said.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
            if m.redacted.is_empty() {
                actions.push(say(chat_id, "I can only read text messages here."));
            }
            return Ok(actions);
        };
        let chars = text.chars().count();
        if chars > MAX_TEXT_CHARS {
            // Telegram itself never delivers more than 4,096 characters: a
            // longer text comes from another server at `api_url`, and would
            // reach the model (and the store) whole.
            self.audit(
                "telegram.ignored",
                json!({"chat_id": chat_id, "reason": "too_long", "chars": chars}),
            );
            actions.push(say(chat_id, TOO_LONG));
            return Ok(actions);
        }
        let stream = StreamHandle::find().ok_or_else(|| {
            retry(
                ErrorCode::EChannelDisconnected,
                "the assistant is not running",
            )
        })?;
        let scope_id = self.scope_of(owner, chat_id);
        if text == "/start" {
            actions.push(say(
                chat_id,
                if owner {
                    "Silas is here. Ask for something and approve plans with the buttons."
                } else {
                    "Hello! How can I help?"
                },
            ));
            return Ok(actions);
        }
        if owner && (text == SECRET_COMMAND || text.starts_with("/secret ")) {
            let label: String = text
                .trim_start_matches(SECRET_COMMAND)
                .trim()
                .chars()
                .take(100)
                .collect();
            if label.is_empty() {
                actions.push(say(
                    chat_id,
                    "Usage: /secret <what it is, e.g. GitHub token>",
                ));
            } else {
                self.request_secret(stream, scope_id, chat_id, label);
            }
            return Ok(actions);
        }
        // §4.1 fallback: a typed answer to the one card open here, or to
        // the card the message replies to.
        let reply_to = m.reply_to_message.as_ref().map(|r| r.message_id);
        match self.typed_answer(chat_id, &scope_id, text, reply_to) {
            Typed::Answer(found) => {
                let (render, card, answer) = *found;
                let origin =
                    AnswerOrigin::new(TELEGRAM_CHANNEL, self.connection_id(owner, chat_id));
                let reply = self
                    .apply(&stream, &scope_id, origin, render, &card, answer)
                    .await;
                actions.push(say(chat_id, reply));
                return Ok(actions);
            }
            Typed::Ambiguous(open) => {
                actions.push(say(chat_id, ambiguous_answer(open)));
                return Ok(actions);
            }
            Typed::NotAnAnswer => {}
        }
        let sender_id = if owner {
            "owner".to_string()
        } else {
            format!("customer:telegram:{chat_id}")
        };
        let inbound = InboundMessage {
            scope_id,
            channel: TELEGRAM_CHANNEL.into(),
            sender_id,
            text: text.to_string(),
            signed: None,
            connection_id: self.connection_id(owner, chat_id),
            ip: None,
            // Accepted once, even if a crash makes the poller hand the
            // update over again.
            dedup_key: Some(format!("telegram:update:{update_id}")),
        };
        match stream.submit(inbound).await {
            Ok(SubmitOutcome::Accepted { .. }) => {}
            // The owner's message waits (retried, never dropped). A
            // customer's is declined with a word: updates are handled in
            // order, and waiting on one chat's full queue held up every
            // other chat's, the owner's included.
            Ok(SubmitOutcome::BusyRetry { retry_after_ms }) if owner => {
                return Err(retry(
                    silas_telegram::poller::BUSY,
                    format!("busy, retry in {retry_after_ms} ms"),
                ));
            }
            Ok(SubmitOutcome::BusyRetry { .. }) => actions.push(say(chat_id, CUSTOMER_BUSY)),
            Ok(SubmitOutcome::RateLimited { message }) => actions.push(say(chat_id, message)),
            Ok(SubmitOutcome::ShuttingDown) => {
                return Err(retry(ErrorCode::EChannelDisconnected, "shutting down"));
            }
            Err(e) => return Err(retry(e.code(), e.to_string())),
        }
        Ok(actions)
    }

    /// What `text` answers among the cards open in `chat_id` of the
    /// sender's own scope (in a chatbot-mode group a member's "no" is the
    /// member's message, not an answer to the owner's card): the card the
    /// message replies to, else the only open card. With several open and
    /// no reply it answers none: "approve" would otherwise take the newest,
    /// which a customer can time to be their own request's card.
    fn typed_answer(
        &self,
        chat_id: i64,
        scope_id: &str,
        text: &str,
        reply_to: Option<i64>,
    ) -> Typed {
        let Ok(renders) = self.args.store.records::<TelegramCardMessage>().list() else {
            return Typed::NotAnAnswer;
        };
        let cards = self.args.store.records::<PendingCard>();
        // A reply names its card: only that one is read.
        let open: Vec<(TelegramCardMessage, PendingCard)> = renders
            .into_iter()
            .filter(|r| r.chat_id == chat_id && r.outcome.is_none())
            .filter(|r| reply_to.is_none_or(|id| r.message_id == id))
            .filter_map(|r| {
                let card = cards.get(&r.request_id).ok().flatten()?;
                (card.scope_id == scope_id).then_some((r, card))
            })
            .collect();
        let answers = |c: &PendingCard| answer_for_text(&c.card, text);
        match open.len() {
            0 => Typed::NotAnAnswer,
            1 => open
                .into_iter()
                .find_map(|(render, card)| {
                    let answer = answers(&card)?;
                    Some(Typed::Answer(Box::new((render, card, answer))))
                })
                .unwrap_or(Typed::NotAnAnswer),
            n if open.iter().any(|(_, c)| answers(c).is_some()) => Typed::Ambiguous(n),
            _ => Typed::NotAnAnswer,
        }
    }

    /// A button press: verified against its render, then answered like any
    /// channel's answer. Always acknowledges the press.
    async fn press(&self, q: &CallbackQuery, owner: bool) -> Vec<Action> {
        let Some(message) = q.message.as_ref() else {
            return vec![callback_reply(q, "This button is no longer valid.")];
        };
        let chat_id = message.chat.id;
        let refuse = |reason: &str, text: &str| {
            self.audit(
                "telegram.callback_refused",
                json!({"chat_id": chat_id, "user_id": q.from.id, "reason": reason}),
            );
            vec![callback_reply(q, text)]
        };
        let Some(data) = q.data.as_deref() else {
            return refuse("no_data", "This button is not valid.");
        };
        // Foreign (another chat's button, another key) or forged.
        let Ok(payload) = self.args.signer.decode(chat_id, data) else {
            return refuse("bad_mac", "This button is not valid.");
        };
        let render = self.render_of(&payload.card_id).await;
        let Some(render) = render.filter(|r| {
            r.chat_id == chat_id && r.message_id == message.message_id && r.nonce == payload.nonce
        }) else {
            return refuse("stale", "This button is no longer valid.");
        };
        if render.outcome.is_some() {
            return refuse("replayed", "Already answered.");
        }
        let card = self
            .args
            .store
            .records::<PendingCard>()
            .get(&render.request_id)
            .ok()
            .flatten();
        let Some(card) = card else {
            let text = "Answered or closed elsewhere.";
            self.close_render(render, None, text).await;
            return vec![callback_reply(q, text)];
        };
        let Some(answer) = answer_for_button(&card.card, &payload.action) else {
            return refuse("unknown_action", "This button is not valid.");
        };
        let scope_id = self.scope_of(owner, chat_id);
        // Someone else's card in a shared chat (the owner's, seen by a
        // chatbot customer in the owner's group): refused here, the card
        // and its buttons left as they are for the one it belongs to.
        if card.scope_id != scope_id {
            return refuse("other_scope", "This button is not for you.");
        }
        let Some(stream) = StreamHandle::find() else {
            return vec![callback_reply(
                q,
                "Silas is restarting; try again in a moment.",
            )];
        };
        let origin = AnswerOrigin::new(TELEGRAM_CHANNEL, self.connection_id(owner, chat_id));
        let reply = self
            .apply(&stream, &scope_id, origin, render, &card, answer)
            .await;
        vec![callback_reply(q, &reply)]
    }

    /// Apply an answer to `card` (shown as `render`); returns what to tell
    /// the owner. The render is closed on every final outcome.
    async fn apply(
        &self,
        stream: &StreamHandle,
        scope_id: &str,
        origin: AnswerOrigin,
        render: TelegramCardMessage,
        card: &PendingCard,
        answer: CardAnswer,
    ) -> String {
        // Until the render is closed below, the sweeper must not take the
        // card's removal (by this very answer) for an answer elsewhere.
        let _answering = self.answering(&card.request_id);
        // Policy: above max_approval_risk a tap cannot approve (declining
        // always can); the card showed a Review link instead.
        if is_affirmative(&answer)
            && !approvable_here(&card.card, self.args.settings.max_approval_risk)
        {
            self.audit(
                "telegram.approval_refused_risk",
                json!({"request_id": card.request_id,
                       "max_approval_risk": self.args.settings.max_approval_risk.as_str()}),
            );
            return "This needs the web app's Review: it is above the risk Telegram may approve."
                .into();
        }
        let outcome = outcome_line(&card.card, &answer);
        let result = match answer {
            CardAnswer::Approval(verdict) => stream
                .decide_card_for(
                    scope_id,
                    &card.request_id,
                    ApprovalDecision {
                        verdict,
                        approval_strength: ApprovalStrength::Tap,
                        conditions: Default::default(),
                    },
                    origin,
                )
                .await
                .map(drop),
            CardAnswer::Card { kind, response } => {
                if matches!(response, CardResponse::SecureInput { .. }) {
                    // Only the web app's form can report a stored secret.
                    return "Use the secure form in the web app.".into();
                }
                stream
                    .answer_card(scope_id, &card.request_id, kind, response, origin)
                    .await
                    .map(drop)
            }
        };
        match result {
            Ok(()) => {
                self.close_render(render, Some(card), &outcome).await;
                outcome
            }
            Err(
                e @ (CardRejection::Unknown(_)
                | CardRejection::AlreadyAnswered(_)
                | CardRejection::Expired(_)),
            ) => {
                let text = match e {
                    CardRejection::Expired(_) => "⏱ Timed out: the safe default applies.",
                    _ => "Answered or closed elsewhere.",
                };
                self.close_render(render, Some(card), text).await;
                text.into()
            }
            Err(e) => {
                tracing::warn!(code = %e.code(), "telegram answer refused: {e}");
                format!("Not accepted: {e}")
            }
        }
    }

    /// `/secret <label>`: a secure input card (rendered here as a link to
    /// the web app's form); the outcome is reported in the chat, never the
    /// value.
    fn request_secret(&self, stream: StreamHandle, scope_id: String, chat_id: i64, label: String) {
        let timeouts = self.args.timeouts;
        let outbox = self.outbox();
        tokio::spawn(async move {
            let text = crate::channels::ask_for_secret(&stream, &scope_id, &label, &timeouts).await;
            if let Err(e) = outbox.send(chat_id, &Text::Plain(text), None).await {
                tracing::warn!(code = %e.code(), "telegram: secret outcome not sent: {e}");
            }
        });
    }
}
