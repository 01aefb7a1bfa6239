//! Context subscriptions (§3.5, §5.7 render step 1; issue #18 item 2): live
//! references — a whole file, a line range, a memory query — materialised
//! on each render instead of copied into the conversation once.
//!
//! * Change detection by SHA-256 of what was read. A whole file shows its
//!   current text and when it last changed; a line range whose lines no
//!   longer match the text it was subscribed with is flagged
//!   `[stale — file changed since turn N]` (its lines may have moved).
//! * A whole-file subscription supersedes line ranges of the same file;
//!   overlapping or touching ranges are merged.
//! * A file over `max_subscription_tokens` is deactivated (with a warning
//!   for the caller to log); one not referenced in the agent's replies for
//!   `subscription_ttl_turns` is deactivated; deactivated ones cost nothing
//!   and can be reactivated.
//! * Within one turn a file is read once (the materialisation cache);
//!   memory queries always re-run (memory ops of the same turn may have
//!   changed the store), and skip memories already in the memory zone.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};
use silas_core::Timestamp;
use silas_core::model::context::{
    ContextItem, ContextItemKind, ContextSubscription, ContextZone, SubscriptionType,
};
use silas_core::model::messages::TaintLevel;

use crate::tokens::TokenCounter;

/// Reads what subscriptions point at. The implementation decides which
/// files may be read at all (e.g. only inside registered workspaces).
pub trait Materializer {
    fn read_file(&self, path: &str) -> Result<String, String>;
    /// `(memory id, content, taint)` of the scope's memories matching
    /// `query`.
    fn memory_query(&self, query: &str) -> Vec<(String, String, TaintLevel)>;
}

/// A subscription and what the harness tracks about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracked {
    pub sub: ContextSubscription,
    /// The last turn whose agent reply named the target.
    pub last_referenced_turn: u64,
    /// The turn the materialised content last changed.
    pub last_changed_turn: u64,
    /// For line ranges: the turn since which the lines differ from the ones
    /// subscribed to.
    pub stale_since: Option<u64>,
}

/// Something a render noticed for the caller to log or audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscriptionNote {
    /// Deactivated: the file is larger than `max_subscription_tokens`.
    TooLarge { sub_id: String, tokens: u64 },
    /// Deactivated: not referenced for `subscription_ttl_turns` turns.
    Expired { sub_id: String },
    /// The target could not be read this turn (it stays subscribed).
    Unreadable { sub_id: String, error: String },
}

/// A scope's subscriptions.
#[derive(Clone, Debug, Default)]
pub struct Subscriptions {
    subs: Vec<Tracked>,
    /// `(turn, path) → text`: one read per file per turn.
    cache: BTreeMap<String, (u64, Result<String, String>)>,
    next_id: u64,
}

/// The less trusted of two taints.
fn worse(a: TaintLevel, b: TaintLevel) -> TaintLevel {
    let rank = |t: TaintLevel| match t {
        TaintLevel::Owner => 0,
        TaintLevel::Auth => 1,
        TaintLevel::External => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `path:start-end` → (path, start, end), 1-based inclusive.
pub fn parse_range(target: &str) -> Option<(&str, usize, usize)> {
    let (path, range) = target.rsplit_once(':')?;
    let (a, b) = range.split_once('-')?;
    let (start, end) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (start >= 1 && end >= start && !path.is_empty()).then_some((path, start, end))
}

fn lines(text: &str, start: usize, end: usize) -> String {
    text.lines()
        .skip(start - 1)
        .take(end + 1 - start)
        .collect::<Vec<_>>()
        .join("\n")
}

fn file_of(sub: &ContextSubscription) -> Option<&str> {
    match sub.sub_type {
        SubscriptionType::File => Some(sub.target.as_str()),
        SubscriptionType::FileLines => parse_range(&sub.target).map(|(p, _, _)| p),
        SubscriptionType::MemoryQuery => None,
    }
}

impl Subscriptions {
    pub fn all(&self) -> &[Tracked] {
        &self.subs
    }

    pub fn active(&self) -> impl Iterator<Item = &Tracked> {
        self.subs.iter().filter(|t| t.sub.active)
    }

    /// Subscribes, applying the dedup rules; returns the id now covering
    /// `target` (an existing whole-file subscription, a merged range, or a
    /// new one). `None` for a line range that does not parse.
    pub fn subscribe(
        &mut self,
        sub_type: SubscriptionType,
        target: &str,
        turn: u64,
    ) -> Option<String> {
        match sub_type {
            SubscriptionType::File => {
                // The whole file supersedes its ranges.
                self.subs.retain(|t| {
                    !(t.sub.sub_type == SubscriptionType::FileLines
                        && file_of(&t.sub) == Some(target))
                });
                if let Some(t) = self.find(SubscriptionType::File, target, turn) {
                    return Some(t);
                }
            }
            SubscriptionType::FileLines => {
                let (path, mut start, mut end) = parse_range(target)?;
                if let Some(t) = self.find(SubscriptionType::File, path, turn) {
                    return Some(t);
                }
                // Merge every overlapping or touching range into one.
                self.subs.retain(|t| {
                    let Some((p, s, e)) = (t.sub.sub_type == SubscriptionType::FileLines)
                        .then(|| parse_range(&t.sub.target))
                        .flatten()
                    else {
                        return true;
                    };
                    if p == path && s <= end + 1 && start <= e + 1 {
                        start = start.min(s);
                        end = end.max(e);
                        return false;
                    }
                    true
                });
                return Some(self.push(
                    SubscriptionType::FileLines,
                    format!("{path}:{start}-{end}"),
                    turn,
                ));
            }
            SubscriptionType::MemoryQuery => {
                if let Some(t) = self.find(SubscriptionType::MemoryQuery, target, turn) {
                    return Some(t);
                }
            }
        }
        Some(self.push(sub_type, target.to_owned(), turn))
    }

    /// An existing subscription to `target`, reactivated: asking for it
    /// again counts as a reference (its TTL starts again).
    fn find(&mut self, sub_type: SubscriptionType, target: &str, turn: u64) -> Option<String> {
        self.subs
            .iter_mut()
            .find(|t| t.sub.sub_type == sub_type && t.sub.target == target)
            .map(|t| {
                t.sub.active = true;
                t.last_referenced_turn = t.last_referenced_turn.max(turn);
                t.sub.sub_id.clone()
            })
    }

    /// The subscriptions as the spec's records, to persist (§5.1.3 step 4).
    pub fn export(&self) -> Vec<ContextSubscription> {
        self.subs.iter().map(|t| t.sub.clone()).collect()
    }

    /// Restores persisted subscriptions after a restart, at `turn`: each
    /// keeps its state and content hash (a range that changed meanwhile is
    /// flagged stale at the next render), and its TTL counts from `turn`.
    /// Replaces whatever this set held.
    pub fn restore(&mut self, subs: Vec<ContextSubscription>, turn: u64) {
        self.next_id = subs
            .iter()
            .filter_map(|s| s.sub_id.strip_prefix("sub-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        self.cache.clear();
        self.subs = subs
            .into_iter()
            .map(|sub| Tracked {
                last_changed_turn: sub.turn_created,
                sub,
                last_referenced_turn: turn,
                stale_since: None,
            })
            .collect();
    }

    fn push(&mut self, sub_type: SubscriptionType, target: String, turn: u64) -> String {
        self.next_id += 1;
        let sub_id = format!("sub-{}", self.next_id);
        self.subs.push(Tracked {
            sub: ContextSubscription {
                sub_id: sub_id.clone(),
                sub_type,
                target,
                zone: ContextZone::Workspace,
                created_at: Timestamp::now(),
                turn_created: turn,
                content_hash: String::new(),
                active: true,
                token_count: 0,
            },
            last_referenced_turn: turn,
            last_changed_turn: turn,
            stale_since: None,
        });
        sub_id
    }

    /// Reactivates a deactivated subscription (e.g. the scorer found it
    /// relevant again).
    pub fn reactivate(&mut self, sub_id: &str) -> bool {
        self.subs
            .iter_mut()
            .find(|t| t.sub.sub_id == sub_id)
            .is_some_and(|t| {
                t.sub.active = true;
                true
            })
    }

    /// Deactivates one subscription (the eviction system's way to drop it:
    /// zero tokens, can be reactivated).
    pub fn deactivate(&mut self, sub_id: &str) {
        if let Some(t) = self.subs.iter_mut().find(|t| t.sub.sub_id == sub_id) {
            t.sub.active = false;
            t.sub.token_count = 0;
        }
    }

    /// Notes the targets an agent reply names (a file's path, a query's
    /// text): their TTL starts again.
    pub fn note_reply(&mut self, reply: &str, turn: u64) {
        for t in &mut self.subs {
            let named = match t.sub.sub_type {
                SubscriptionType::MemoryQuery => reply.contains(&t.sub.target),
                _ => file_of(&t.sub).is_some_and(|p| reply.contains(p)),
            };
            if named {
                t.last_referenced_turn = turn;
            }
        }
    }

    /// Deactivates subscriptions not referenced for `ttl` turns.
    pub fn deactivate_stale(&mut self, turn: u64, ttl: u64) -> Vec<SubscriptionNote> {
        let mut notes = Vec::new();
        for t in self.subs.iter_mut().filter(|t| t.sub.active) {
            if t.last_referenced_turn + ttl <= turn {
                t.sub.active = false;
                t.sub.token_count = 0;
                notes.push(SubscriptionNote::Expired {
                    sub_id: t.sub.sub_id.clone(),
                });
            }
        }
        notes
    }

    fn read(&mut self, m: &dyn Materializer, path: &str, turn: u64) -> Result<String, String> {
        if let Some((t, text)) = self.cache.get(path)
            && *t == turn
        {
            return text.clone();
        }
        let text = m.read_file(path);
        self.cache.insert(path.to_owned(), (turn, text.clone()));
        text
    }

    /// Materialises every active subscription for this turn: items for the
    /// workspace zone (`kind = subscription`, ids `sub:{sub_id}`) and notes.
    /// `memory_ids` are the memories already in the memory zone.
    pub fn materialize(
        &mut self,
        m: &dyn Materializer,
        turn: u64,
        max_tokens: u64,
        counter: &dyn TokenCounter,
        memory_ids: &BTreeSet<String>,
    ) -> (Vec<ContextItem>, Vec<SubscriptionNote>) {
        let mut items = Vec::new();
        let mut notes = Vec::new();
        self.cache.retain(|_, (t, _)| *t == turn);
        for i in 0..self.subs.len() {
            if !self.subs[i].sub.active {
                continue;
            }
            let sub = self.subs[i].sub.clone();
            // Files are the owner's (the materializer reads nothing else);
            // a query's block carries the worst taint among its memories.
            let mut taint = TaintLevel::Owner;
            let content = match sub.sub_type {
                SubscriptionType::File => self.read(m, &sub.target, turn),
                SubscriptionType::FileLines => match parse_range(&sub.target) {
                    Some((p, s, e)) => self.read(m, p, turn).map(|t| lines(&t, s, e)),
                    None => Err("not a path:start-end range".to_owned()),
                },
                SubscriptionType::MemoryQuery => {
                    // Best first, as many as fit in `max_tokens` (a
                    // query's result is cut, not deactivated: the next
                    // render may find less).
                    let mut shown: Vec<String> = Vec::new();
                    let mut used = 0;
                    for (_, c, t) in m
                        .memory_query(&sub.target)
                        .into_iter()
                        .filter(|(id, _, _)| !memory_ids.contains(id))
                    {
                        let cost = counter.count(&c) + 1;
                        if used + cost > max_tokens {
                            break;
                        }
                        used += cost;
                        taint = worse(taint, t);
                        shown.push(c);
                    }
                    Ok(shown.join("\n"))
                }
            };
            let content = match content {
                Ok(c) => c,
                Err(error) => {
                    notes.push(SubscriptionNote::Unreadable {
                        sub_id: sub.sub_id.clone(),
                        error,
                    });
                    continue;
                }
            };
            let tokens = counter.count(&content);
            let t = &mut self.subs[i];
            if sub.sub_type == SubscriptionType::MemoryQuery && content.is_empty() {
                // Nothing new to show (all in the memory zone already, or
                // no match): no empty block.
                t.sub.token_count = 0;
                continue;
            }
            if sub.sub_type != SubscriptionType::MemoryQuery && tokens > max_tokens {
                t.sub.active = false;
                t.sub.token_count = 0;
                notes.push(SubscriptionNote::TooLarge {
                    sub_id: sub.sub_id.clone(),
                    tokens,
                });
                continue;
            }
            let hash = sha256(&content);
            if t.sub.content_hash.is_empty() {
                t.sub.content_hash = hash;
                t.last_changed_turn = turn;
            } else if t.sub.content_hash != hash {
                match sub.sub_type {
                    // The anchor stays: the range no longer holds what was
                    // subscribed to.
                    SubscriptionType::FileLines => {
                        t.stale_since.get_or_insert(t.last_changed_turn);
                    }
                    _ => {
                        t.sub.content_hash = hash;
                        t.last_changed_turn = turn;
                    }
                }
            } else {
                t.stale_since = None;
            }
            t.sub.token_count = tokens;
            let state = match t.stale_since {
                Some(n) => format!("[stale — file changed since turn {n}]"),
                None => "live".to_owned(),
            };
            items.push(ContextItem {
                ctx_id: format!("sub:{}", sub.sub_id),
                zone: sub.zone,
                content,
                token_count: tokens,
                created_at: Timestamp::now(),
                turn_number: turn,
                source: format!(
                    "subscription:{} | {} | {state} | last_changed: turn {}",
                    sub.sub_type.as_str(),
                    sub.target,
                    t.last_changed_turn
                ),
                taint,
                kind: ContextItemKind::Subscription,
                relevance: 1.0,
                masked: false,
                pinned: false,
            });
        }
        (items, notes)
    }
}

#[cfg(test)]
#[path = "subscriptions_tests.rs"]
mod tests;
