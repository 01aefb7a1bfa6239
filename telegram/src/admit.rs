//! The identity gate a handler runs first: [`identity::classify`] plus the
//! durable "refused once" record, turned into what to do.

use silas_core::Timestamp;
use silas_storage::TelegramUpdates;

use crate::error::TelegramError;
use crate::outbox::{Action, Text};
use crate::policy::identity::{
    self, Identity, OWNER_ELSEWHERE_TEXT, Origin, OwnerIdentity, REFUSAL_TEXT,
};
use crate::types::Update;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Handle with owner rights.
    Owner,
    /// Handle with customer rights in this scope.
    Customer { scope_id: String },
    /// Not handled. `reply` is the one polite refusal (the first time this
    /// chat is refused) and/or the answer that stops a pressed button's
    /// spinner. The caller audits `chat_id` (no message content).
    Refused { chat_id: i64, reply: Vec<Action> },
    /// Not attributable to a person; dropped (the caller may audit it).
    Ignored,
}

/// Decide what `update` is, recording a stranger's refusal durably so each
/// chat is refused once across restarts.
pub fn admit(
    updates: &TelegramUpdates,
    owner: &OwnerIdentity,
    update: &Update,
    chatbot_active: bool,
) -> Result<Admission, TelegramError> {
    let Some(origin) = Origin::of(update) else {
        return Ok(Admission::Ignored);
    };
    Ok(match identity::classify(owner, &origin, chatbot_active) {
        Identity::Owner => Admission::Owner,
        Identity::Customer { scope_id } => Admission::Customer { scope_id },
        Identity::Ignored => Admission::Ignored,
        Identity::Stranger { chat_id } => refuse(updates, update, chat_id, REFUSAL_TEXT)?,
        Identity::OwnerElsewhere { chat_id } => {
            refuse(updates, update, chat_id, OWNER_ELSEWHERE_TEXT)?
        }
    })
}

/// Refused: the pressed button's spinner stopped, and `text` sent the first
/// time this chat is refused.
fn refuse(
    updates: &TelegramUpdates,
    update: &Update,
    chat_id: i64,
    text: &str,
) -> Result<Admission, TelegramError> {
    let mut reply = Vec::new();
    if let Some(q) = &update.callback_query {
        reply.push(Action::AnswerCallback {
            callback_query_id: q.id.clone(),
            text: None,
        });
    }
    if updates.note_refused(chat_id, Timestamp::now())? {
        reply.push(Action::Send {
            chat_id,
            text: Text::Plain(text.to_string()),
            keyboard: None,
        });
    }
    Ok(Admission::Refused { chat_id, reply })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Chat, ChatKind, Message, User};

    fn msg(chat: i64, from: i64) -> Update {
        Update {
            update_id: 1,
            message: Some(Message {
                message_id: 1,
                from: Some(User {
                    id: from,
                    is_bot: false,
                    first_name: "x".into(),
                    username: None,
                }),
                chat: Chat {
                    id: chat,
                    kind: if chat > 0 {
                        ChatKind::Private
                    } else {
                        ChatKind::Group
                    },
                },
                date: 1,
                text: Some("hi".into()),
                caption: None,
                reply_to_message: None,
                redacted: Vec::new(),
            }),
            edited_message: None,
            callback_query: None,
        }
    }

    #[test]
    fn strangers_are_refused_once_per_chat_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let owner = OwnerIdentity {
            chat_id: 10,
            user_id: None,
        };
        {
            let store = silas_storage::Store::open_in(dir.path()).unwrap();
            let u = store.telegram_updates();
            assert_eq!(
                admit(&u, &owner, &msg(10, 10), false).unwrap(),
                Admission::Owner
            );
            match admit(&u, &owner, &msg(77, 77), false).unwrap() {
                Admission::Refused { chat_id: 77, reply } => {
                    assert!(matches!(&reply[..], [Action::Send { chat_id: 77, .. }]));
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(
                admit(&u, &owner, &msg(77, 77), false).unwrap(),
                Admission::Refused {
                    chat_id: 77,
                    reply: vec![]
                }
            );
        }
        let store = silas_storage::Store::open_in(dir.path()).unwrap();
        let u = store.telegram_updates();
        assert_eq!(
            admit(&u, &owner, &msg(77, 77), false).unwrap(),
            Admission::Refused {
                chat_id: 77,
                reply: vec![]
            }
        );
        // A chatbot goal turns the same chat into a customer scope.
        assert_eq!(
            admit(&u, &owner, &msg(77, 77), true).unwrap(),
            Admission::Customer {
                scope_id: "telegram:77".into()
            }
        );
        // The owner's group: another member is refused, the owner is not.
        let group = OwnerIdentity {
            chat_id: -5,
            user_id: Some(10),
        };
        assert!(matches!(
            admit(&u, &group, &msg(-5, 78), false).unwrap(),
            Admission::Refused { chat_id: -5, .. }
        ));
        assert_eq!(
            admit(&u, &group, &msg(-5, 10), false).unwrap(),
            Admission::Owner
        );
        // The owner writing privately while the group is configured is told
        // where the conversation is, once, and nothing is read.
        match admit(&u, &group, &msg(10, 10), false).unwrap() {
            Admission::Refused { chat_id: 10, reply } => match &reply[..] {
                [
                    Action::Send {
                        chat_id: 10,
                        text: Text::Plain(t),
                        ..
                    },
                ] => {
                    assert_eq!(t, OWNER_ELSEWHERE_TEXT)
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        assert_eq!(
            admit(&u, &group, &msg(10, 10), true).unwrap(),
            Admission::Refused {
                chat_id: 10,
                reply: vec![]
            }
        );
        // The owner's user in some other group is not the owner there.
        assert!(matches!(
            admit(&u, &owner, &msg(-6, 10), false).unwrap(),
            Admission::Refused { chat_id: -6, .. }
        ));
    }
}
