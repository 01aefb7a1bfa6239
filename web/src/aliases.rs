//! Opaque ids for chatbot customers.
//!
//! The daemon's inbox ids come from one counter over every conversation
//! (`00000000000000000017`), and card ids are built from them. Shown to a
//! chatbot customer, consecutive ids would let any visitor count everyone's
//! messages — e.g. to tell when the owner is active. A customer connection
//! therefore sees a random alias (`m-` and 16 hex digits) for every id the
//! server issues it (`accepted`, a reply's `id`, `progress`, a card's
//! `request_id`), the same alias for the same id on that connection; its
//! frames' aliases are turned back into the real ids before the runtime sees
//! them, and any other id it names is refused here. The owner sees the real ids (its own audit log names them).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::protocol::{ClientFrame, ProtocolError, ServerFrame};

/// Aliases one connection remembers; the oldest is forgotten past this
/// (its `ack` is then refused; a customer's reply is not sent again
/// anyway). A client acknowledges a reply as it shows it, so a handful are
/// in flight; the bound keeps a patient visitor's book at a few tens of KiB.
pub const MAX_ALIASES: usize = 256;

#[derive(Default)]
struct Book {
    alias_of: HashMap<String, String>,
    real_of: HashMap<String, String>,
    order: VecDeque<String>,
}

/// One customer connection's aliases, shared by its reader and writer.
#[derive(Default)]
pub struct IdAliases {
    book: Mutex<Book>,
}

fn fresh_alias() -> String {
    // Without the OS generator (never expected) the alias would be
    // guessable; an all-zero alias is still only this connection's.
    let n = getrandom::u64().unwrap_or_default();
    format!("m-{n:016x}")
}

impl IdAliases {
    pub fn new() -> Self {
        Self::default()
    }

    /// The alias `real` is shown as on this connection, made on first use.
    fn alias(&self, real: &str) -> Option<String> {
        let mut b = self.book.lock().ok()?;
        if let Some(a) = b.alias_of.get(real) {
            return Some(a.clone());
        }
        let mut alias = fresh_alias();
        while b.real_of.contains_key(&alias) {
            alias = fresh_alias();
        }
        if b.order.len() >= MAX_ALIASES
            && let Some(old) = b.order.pop_front()
            && let Some(a) = b.alias_of.remove(&old)
        {
            b.real_of.remove(&a);
        }
        b.alias_of.insert(real.to_string(), alias.clone());
        b.real_of.insert(alias.clone(), real.to_string());
        b.order.push_back(real.to_string());
        Some(alias)
    }

    fn real(&self, alias: &str) -> Option<String> {
        self.book.lock().ok()?.real_of.get(alias).cloned()
    }

    /// Rewrites the ids a server frame issues into this connection's
    /// aliases. `error` frames pass as they are: a refusal of a frame this
    /// connection sent is put back in its terms by [`Referred::restore`],
    /// and any other `request_id` in an error (a message's `client_id`) is
    /// the client's own.
    pub fn outbound(&self, frame: &mut ServerFrame) {
        if let Some(id) = frame.issued_id_mut() {
            match self.alias(id) {
                Some(a) => *id = a,
                // A poisoned book: show nothing real rather than the id.
                None => id.clear(),
            }
        }
    }

    /// Rewrites the alias a client frame refers to into the real id. An id
    /// this connection was never given is refused here, before the runtime
    /// sees it, the same for every such id: passed on, a raw id of the
    /// visitor's own reply would be acknowledged, and a card answer would
    /// take longer for a card that exists (its refusal is audited) than for
    /// one that does not — either way the visitor could probe the counter.
    /// Refused here it also costs the store nothing (one connection per
    /// visitor made the per-scope answer limit no limit).
    pub fn inbound(&self, frame: &mut ClientFrame) -> Result<Option<Referred>, ProtocolError> {
        let is_ack = matches!(frame, ClientFrame::Ack { .. });
        let Some(id) = frame.referenced_id_mut() else {
            return Ok(None);
        };
        match self.real(id) {
            Some(real) => {
                let alias = std::mem::replace(id, real.clone());
                Ok(Some(Referred { alias, real }))
            }
            None if is_ack => Err(ProtocolError::new(
                "E_CHANNEL_AUTH",
                "no reply of this conversation has that id",
                None,
            )),
            None => Err(ProtocolError::new(
                "E_CHANNEL_AUTH",
                "no card of this conversation has that id",
                Some(id.clone()),
            )),
        }
    }
}

/// The id a client frame referred to: as the client sent it, and as the
/// runtime was given it.
#[derive(Debug)]
pub struct Referred {
    alias: String,
    real: String,
}

impl Referred {
    /// A refusal of the frame names the alias the client sent, never the
    /// real id — not as `request_id`, not inside the message. Only the frame's
    /// own id is rewritten: an error quoting any other id (which a client
    /// could have typed to probe) is left as it is, so it can never learn
    /// which real id an alias stands for.
    pub fn restore(&self, e: &mut ProtocolError) {
        if e.request_id.as_deref() == Some(self.real.as_str()) {
            e.request_id = Some(self.alias.clone());
        }
        if e.message.contains(&self.real) {
            e.message = e.message.replace(&self.real, &self.alias);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: &str) -> ServerFrame {
        ServerFrame::Accepted {
            id: id.into(),
            client_id: Some("c1".into()),
        }
    }

    fn reply(id: &str) -> ServerFrame {
        ServerFrame::Message {
            text: "hi".into(),
            sender: "silas".into(),
            timestamp: "t".into(),
            id: Some(id.into()),
        }
    }

    fn issued(f: &ServerFrame) -> String {
        let mut f = f.clone();
        f.issued_id_mut().map(|s| s.clone()).unwrap_or_default()
    }

    #[test]
    fn one_id_one_alias_and_nothing_of_the_counter_shows() {
        let a = IdAliases::new();
        let mut first = accepted("00000000000000000017");
        let mut answer = reply("00000000000000000017");
        let mut next = accepted("00000000000000000018");
        a.outbound(&mut first);
        a.outbound(&mut answer);
        a.outbound(&mut next);
        let (x, y, z) = (issued(&first), issued(&answer), issued(&next));
        assert_eq!(x, y, "the reply carries its message's alias");
        assert_ne!(x, z);
        for s in [&x, &z] {
            assert!(s.starts_with("m-") && s.len() == 18, "{s}");
            assert!(s[2..].bytes().all(|c| c.is_ascii_hexdigit()), "{s}");
        }
        // Another connection sees other aliases for the same ids.
        let b = IdAliases::new();
        let mut again = accepted("00000000000000000017");
        b.outbound(&mut again);
        assert_ne!(issued(&again), x);
        // The client's own client_id is left as it sent it.
        assert!(matches!(first, ServerFrame::Accepted { client_id: Some(ref c), .. } if c == "c1"));
    }

    #[test]
    fn acks_and_answers_are_translated_back_and_raw_ids_refused() {
        let a = IdAliases::new();
        let mut f = reply("00000000000000000017");
        a.outbound(&mut f);
        let alias = issued(&f);
        let mut ack = ClientFrame::Ack { id: alias.clone() };
        assert!(a.inbound(&mut ack).unwrap().is_some());
        assert_eq!(
            ack,
            ClientFrame::Ack {
                id: "00000000000000000017".into()
            }
        );
        // A raw id — this visitor's own or anyone's — never reaches the runtime.
        for raw in ["00000000000000000017", "00000000000000000016", "m-0"] {
            let mut ack = ClientFrame::Ack { id: raw.into() };
            let e = a.inbound(&mut ack).unwrap_err();
            assert_eq!(e.code, "E_CHANNEL_AUTH");
        }
        let mut card = ServerFrame::Checkpoint {
            request_id: "card-00000000000000000017".into(),
            message: "m".into(),
            options: vec!["a".into()],
            risk_level: None,
        };
        a.outbound(&mut card);
        let card_alias = issued(&card);
        assert_ne!(card_alias, alias);
        let mut answer = ClientFrame::Checkpoint {
            request_id: card_alias.clone(),
            verdict: "a".into(),
        };
        a.inbound(&mut answer).unwrap();
        assert_eq!(answer.request_id(), Some("card-00000000000000000017"));
        // A card answer under an id it was never given is refused alike.
        let mut forged = ClientFrame::Checkpoint {
            request_id: "card-00000000000000000003".into(),
            verdict: "a".into(),
        };
        let e = a.inbound(&mut forged).unwrap_err();
        assert_eq!(e.code, "E_CHANNEL_AUTH");
        assert_eq!(e.request_id.as_deref(), Some("card-00000000000000000003"));
        // A refusal of the real id comes back under the alias, message too.
        let mut answer = ClientFrame::Checkpoint {
            request_id: card_alias.clone(),
            verdict: "a".into(),
        };
        let referred = a.inbound(&mut answer).unwrap().unwrap();
        let mut refused = ProtocolError::new(
            "E_CARD_EXPIRED",
            "card \"card-00000000000000000017\" expired",
            Some("card-00000000000000000017".into()),
        );
        referred.restore(&mut refused);
        assert_eq!(refused.request_id.as_deref(), Some(card_alias.as_str()));
        assert!(!refused.message.contains("0017"), "{}", refused.message);
        assert!(refused.message.contains(&card_alias));
        // An error frame passes out untouched: a raw id a client typed is
        // never turned into the alias it stands for.
        let mut probe = ServerFrame::Error {
            code: "E_CHANNEL_AUTH".into(),
            message: "m".into(),
            request_id: Some("card-00000000000000000017".into()),
        };
        a.outbound(&mut probe);
        assert!(
            matches!(probe, ServerFrame::Error { request_id: Some(ref r), .. } if r == "card-00000000000000000017")
        );
        // Frames without an id pass untouched.
        let mut msg = ClientFrame::Message {
            text: "x".into(),
            sender_id: None,
            client_id: None,
        };
        assert!(a.inbound(&mut msg).is_ok());
    }

    #[test]
    fn the_book_is_bounded() {
        let a = IdAliases::new();
        let mut first = reply("0");
        a.outbound(&mut first);
        let first_alias = issued(&first);
        for i in 1..=MAX_ALIASES {
            a.outbound(&mut reply(&i.to_string()));
        }
        let b = a.book.lock().unwrap();
        assert_eq!(b.alias_of.len(), MAX_ALIASES);
        assert_eq!(b.real_of.len(), MAX_ALIASES);
        assert!(
            !b.real_of.contains_key(&first_alias),
            "the oldest went first"
        );
    }
}
