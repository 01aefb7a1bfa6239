//! Secret isolation for inbound updates (§0.5, issue #14 item 5): a message
//! whose text or caption trips the secret detector is redacted *before* the
//! update is recorded, so the store never holds the secret; the handler then
//! deletes the message from the chat and tells the owner.

use silas_core::secrets::redact_conversation;

use crate::types::{Message, Update};

fn redact_field(field: &mut Option<String>, kinds: &mut Vec<String>) {
    if let Some(text) = field.as_mut() {
        let (clean, findings) = redact_conversation(text);
        if !findings.is_empty() {
            *text = clean;
            for f in findings {
                if !kinds.iter().any(|k| k == f.kind) {
                    kinds.push(f.kind.to_string());
                }
            }
        }
    }
}

fn redact_message(m: &mut Message) -> bool {
    let mut kinds = std::mem::take(&mut m.redacted);
    redact_field(&mut m.text, &mut kinds);
    redact_field(&mut m.caption, &mut kinds);
    m.redacted = kinds;
    !m.redacted.is_empty()
}

/// Redact every user-written text of `update` in place; true if anything was
/// removed. (Callback data is ours — MAC-bound — and carries no user text.)
pub fn redact_update(update: &mut Update) -> bool {
    let a = update.message.as_mut().is_some_and(redact_message);
    let b = update.edited_message.as_mut().is_some_and(redact_message);
    a || b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Chat, ChatKind};

    const KEY: &str = "sk-ant-api03-Zx9Qm2Lp7Rt4Vw8Ny3Kb6Hd1Fg5Js0Ac2Ee4Gi6Ko8Mq0Su2Wy4";

    fn update(text: &str) -> Update {
        Update {
            update_id: 3,
            message: Some(Message {
                message_id: 9,
                from: None,
                chat: Chat {
                    id: 1,
                    kind: ChatKind::Private,
                },
                date: 1,
                text: Some(text.into()),
                caption: Some(format!("caption {text}")),
                reply_to_message: None,
                redacted: Vec::new(),
            }),
            edited_message: None,
            callback_query: None,
        }
    }

    #[test]
    fn a_pasted_key_is_gone_from_the_update_and_marked() {
        let mut u = update(&format!("my key is {KEY} thanks"));
        assert!(redact_update(&mut u));
        let stored = serde_json::to_string(&u).unwrap();
        assert!(!stored.contains(KEY), "{stored}");
        let m = u.message.unwrap();
        assert!(!m.redacted.is_empty());
        assert!(m.text.unwrap().contains("thanks"));
        // The mark survives the store round trip.
        let back: Update = serde_json::from_str(&stored).unwrap();
        assert!(!back.message.unwrap().redacted.is_empty());
    }

    #[test]
    fn ordinary_text_is_untouched_and_unmarked() {
        let mut u = update("please fix the login bug in auth.py");
        let before = u.clone();
        assert!(!redact_update(&mut u));
        assert_eq!(u, before);
        assert!(
            !serde_json::to_string(&u)
                .unwrap()
                .contains("silas_redacted")
        );
    }
}
