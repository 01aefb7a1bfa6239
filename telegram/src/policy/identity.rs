//! Who a Telegram update speaks for (issue #14 item 3, spec §4.1).
//!
//! Only the owner's own messages and button presses count as the owner's:
//! the owner's private chat with the bot, and in the group `owner_chat_id`
//! (when it is one) only what the owner's user (`owner_user_id`) sends or
//! taps — never another member of that group. The owner's user in any other
//! group is not the owner there: the bot's replies would be read by that
//! group's members. For the same reason, with a group configured the owner's
//! private chat is not the owner's channel either (every owner reply goes to
//! the group): it is told where the conversation is. Every other chat is a
//! stranger: it gets one
//! polite refusal (the caller records it durably so a restart does not
//! repeat it) and an audit entry — unless a chatbot goal is active, when each
//! such chat is its own customer scope with customer rights only.

use silas_core::risk::RiskLevel;

use crate::types::{Chat, ChatKind, Update, User};

/// The owner's Telegram identity, from `channels.telegram`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerIdentity {
    pub chat_id: i64,
    /// Defaults to `chat_id` when that is a private chat (positive id: in a
    /// private chat the chat id is the user id).
    pub user_id: Option<i64>,
}

impl OwnerIdentity {
    fn user_id(&self) -> Option<i64> {
        self.user_id.or((self.chat_id > 0).then_some(self.chat_id))
    }
}

/// Where an update came from: the chat it belongs to and the user who acted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub chat: Chat,
    pub from: Option<User>,
}

impl Origin {
    /// The origin of a message or a button press; `None` for updates that
    /// carry neither (nothing to attribute).
    pub fn of(update: &Update) -> Option<Origin> {
        if let Some(m) = update.message.as_ref().or(update.edited_message.as_ref()) {
            return Some(Origin {
                chat: m.chat.clone(),
                from: m.from.clone(),
            });
        }
        let q = update.callback_query.as_ref()?;
        // A press on a message we cannot see has no chat: it is attributed
        // to the presser's private chat, which is what it is for the owner.
        let chat = q.message.as_ref().map_or(
            Chat {
                id: q.from.id,
                kind: ChatKind::Private,
            },
            |m| m.chat.clone(),
        );
        Some(Origin {
            chat,
            from: Some(q.from.clone()),
        })
    }
}

/// The verdict for one update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The owner: owner rights, the owner's scope.
    Owner,
    /// A chatbot customer: customer rights only, in this chat's own scope.
    Customer { scope_id: String },
    /// Not the owner and no chatbot goal: refuse (once per chat) and audit.
    Stranger { chat_id: i64 },
    /// The owner, writing privately while `owner_chat_id` is a group: the
    /// reply would be posted in the group, so nothing is read here and the
    /// owner is told so (once per chat).
    OwnerElsewhere { chat_id: i64 },
    /// Not attributable (a channel post, a bot, no sender): dropped, audited.
    Ignored,
}

/// Decide who `origin` is. `chatbot_active`: a chatbot goal is running.
pub fn classify(owner: &OwnerIdentity, origin: &Origin, chatbot_active: bool) -> Identity {
    let Some(from) = origin.from.as_ref() else {
        return Identity::Ignored;
    };
    if from.is_bot || matches!(origin.chat.kind, ChatKind::Channel | ChatKind::Other(_)) {
        return Identity::Ignored;
    }
    let owner_user = owner.user_id();
    let is_owner = owner_user == Some(from.id)
        && match origin.chat.kind {
            // A private chat's id is its user's id: only the owner's own.
            ChatKind::Private => origin.chat.id == from.id,
            // Only the configured group, never any group the owner is in.
            _ => origin.chat.id == owner.chat_id,
        };
    if is_owner && owner.chat_id != origin.chat.id {
        Identity::OwnerElsewhere {
            chat_id: origin.chat.id,
        }
    } else if is_owner {
        Identity::Owner
    } else if chatbot_active {
        Identity::Customer {
            scope_id: customer_scope(origin.chat.id),
        }
    } else {
        Identity::Stranger {
            chat_id: origin.chat.id,
        }
    }
}

/// The scope of one customer chat.
pub fn customer_scope(chat_id: i64) -> String {
    format!("telegram:{chat_id}")
}

/// The one refusal a stranger's chat gets.
pub const REFUSAL_TEXT: &str =
    "Hello! This is a private assistant and it only answers its owner. Sorry I can't help here.";

/// What the owner's private chat is told while `owner_chat_id` is a group.
pub const OWNER_ELSEWHERE_TEXT: &str = "I talk with you in the group set as \
     channels.telegram.owner_chat_id, and my replies go there, so I don't read this chat. \
     To talk here instead, set owner_chat_id to this chat's id.";

/// Whether a card of `risk` may be approved with a tap in Telegram; above
/// `channels.telegram.max_approval_risk` the owner is sent to the web UI.
pub fn approvable_in_telegram(risk: RiskLevel, max: RiskLevel) -> bool {
    risk <= max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CallbackQuery, Message};

    const OWNER: i64 = 1001;
    const GROUP: i64 = -5005;

    fn user(id: i64) -> User {
        User {
            id,
            is_bot: false,
            first_name: "u".into(),
            username: None,
        }
    }

    fn origin(chat: i64, kind: ChatKind, from: Option<i64>) -> Origin {
        Origin {
            chat: Chat { id: chat, kind },
            from: from.map(user),
        }
    }

    fn owner() -> OwnerIdentity {
        OwnerIdentity {
            chat_id: OWNER,
            user_id: None,
        }
    }

    #[test]
    fn owner_private_chat_is_owner() {
        let o = origin(OWNER, ChatKind::Private, Some(OWNER));
        assert_eq!(classify(&owner(), &o, false), Identity::Owner);
        assert_eq!(classify(&owner(), &o, true), Identity::Owner);
    }

    fn group_owner() -> OwnerIdentity {
        OwnerIdentity {
            chat_id: GROUP,
            user_id: Some(OWNER),
        }
    }

    #[test]
    fn owner_user_in_the_owner_group_is_owner_other_members_are_not() {
        for kind in [ChatKind::Group, ChatKind::Supergroup] {
            let me = origin(GROUP, kind.clone(), Some(OWNER));
            assert_eq!(classify(&group_owner(), &me, false), Identity::Owner);
            let member = origin(GROUP, kind, Some(2002));
            assert_eq!(
                classify(&group_owner(), &member, false),
                Identity::Stranger { chat_id: GROUP }
            );
            assert_eq!(
                classify(&group_owner(), &member, true),
                Identity::Customer {
                    scope_id: "telegram:-5005".into()
                }
            );
        }
        // With a group configured, the owner's private chat is not read:
        // every owner reply goes to the group, whose members would read it.
        let dm = origin(OWNER, ChatKind::Private, Some(OWNER));
        for chatbot in [false, true] {
            assert_eq!(
                classify(&group_owner(), &dm, chatbot),
                Identity::OwnerElsewhere { chat_id: OWNER }
            );
        }
    }

    #[test]
    fn the_owner_in_another_group_is_not_the_owner_there() {
        // Replies there would be read by that group's members.
        let elsewhere = origin(-777, ChatKind::Supergroup, Some(OWNER));
        assert_eq!(
            classify(&owner(), &elsewhere, false),
            Identity::Stranger { chat_id: -777 }
        );
        assert_eq!(
            classify(&group_owner(), &elsewhere, false),
            Identity::Stranger { chat_id: -777 }
        );
    }

    #[test]
    fn without_an_owner_user_a_group_grants_nobody_owner_rights() {
        let no_user = OwnerIdentity {
            chat_id: GROUP,
            user_id: None,
        };
        assert_eq!(
            classify(
                &no_user,
                &origin(GROUP, ChatKind::Group, Some(OWNER)),
                false
            ),
            Identity::Stranger { chat_id: GROUP }
        );
    }

    #[test]
    fn strangers_in_private_chats() {
        let o = origin(3003, ChatKind::Private, Some(3003));
        assert_eq!(
            classify(&owner(), &o, false),
            Identity::Stranger { chat_id: 3003 }
        );
        assert_eq!(
            classify(&owner(), &o, true),
            Identity::Customer {
                scope_id: "telegram:3003".into()
            }
        );
        // Each customer chat is its own scope.
        let other = origin(4004, ChatKind::Private, Some(4004));
        assert_ne!(
            classify(&owner(), &o, true),
            classify(&owner(), &other, true)
        );
    }

    #[test]
    fn a_different_sender_in_the_owner_private_chat_is_not_the_owner() {
        let o = origin(OWNER, ChatKind::Private, Some(9));
        assert_eq!(
            classify(&owner(), &o, false),
            Identity::Stranger { chat_id: OWNER }
        );
    }

    #[test]
    fn bots_channels_and_senderless_updates_are_ignored() {
        let mut bot = origin(OWNER, ChatKind::Private, Some(OWNER));
        if let Some(f) = bot.from.as_mut() {
            f.is_bot = true;
        }
        assert_eq!(classify(&owner(), &bot, true), Identity::Ignored);
        let chan = origin(-100, ChatKind::Channel, Some(OWNER));
        assert_eq!(classify(&owner(), &chan, true), Identity::Ignored);
        let anon = origin(GROUP, ChatKind::Group, None);
        assert_eq!(classify(&owner(), &anon, false), Identity::Ignored);
        let odd = origin(1, ChatKind::Other("sender".into()), Some(OWNER));
        assert_eq!(classify(&owner(), &odd, false), Identity::Ignored);
    }

    #[test]
    fn button_presses_are_attributed_to_the_presser_not_the_message_author() {
        let msg = Message {
            message_id: 1,
            from: Some(user(OWNER)),
            chat: Chat {
                id: GROUP,
                kind: ChatKind::Group,
            },
            date: 0,
            text: None,
            caption: None,
            reply_to_message: None,
            redacted: Vec::new(),
        };
        let press = |by: i64| Update {
            update_id: 1,
            message: None,
            edited_message: None,
            callback_query: Some(CallbackQuery {
                id: "q".into(),
                from: user(by),
                message: Some(msg.clone()),
                data: Some("x".into()),
            }),
        };
        let o = Origin::of(&press(2002)).unwrap();
        assert_eq!(
            classify(&group_owner(), &o, false),
            Identity::Stranger { chat_id: GROUP }
        );
        let o = Origin::of(&press(OWNER)).unwrap();
        assert_eq!(classify(&group_owner(), &o, false), Identity::Owner);
        let empty = Update {
            update_id: 2,
            message: None,
            edited_message: None,
            callback_query: None,
        };
        assert_eq!(Origin::of(&empty), None);
    }

    #[test]
    fn approval_risk_ceiling() {
        use RiskLevel::*;
        assert!(approvable_in_telegram(Low, Medium));
        assert!(approvable_in_telegram(Medium, Medium));
        assert!(!approvable_in_telegram(High, Medium));
        assert!(!approvable_in_telegram(Irreversible, High));
        assert!(!approvable_in_telegram(Medium, Low));
    }
}
