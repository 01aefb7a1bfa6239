//! The chaos run's checker: a pure function from what was observed from
//! outside the daemon (the client's frames, the side-effect lines the
//! executed work left in the workspace, the inbox records, work items and
//! audit entries read from the store after the daemon stopped) to the
//! invariants it broke. It knows nothing about how the observation was
//! gathered, so it is tested here with fabricated observations, and
//! `tests/chaos.rs` checks it against a real, deliberately injected fault.

use std::collections::{BTreeMap, BTreeSet};

/// One chat or plan message the client sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The unique text marker the message carries (`chat-3-1`, `chaos-3`).
    pub marker: String,
    /// The client saw its acceptance (the probe after it was answered).
    pub acked: bool,
    /// A quiet, fully restarted daemon has had its chance to answer it: it
    /// must be answered exactly once by now (else at most once).
    pub settled: bool,
    /// A chat message answered by a reply that names its marker (plan
    /// messages are answered by a card, counted through their work item).
    pub expects_reply: bool,
}

/// An inbox record read from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxSeen {
    pub inbox_id: String,
    /// The marker found in the recorded text, if any.
    pub marker: Option<String>,
    pub delivered: bool,
    /// The reply the turn recorded (what the client should have seen).
    pub reply: Option<String>,
    /// Times the daemon found no client connected for its reply
    /// (`delivery_no_connection`, kind `reply`). Not an answer: such a
    /// reply stays unacknowledged and is sent to the next connection.
    pub undelivered_replies: u32,
}

/// A work item the client approved, as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemSeen {
    pub id: String,
    /// Attempts counted durably (each is counted before it runs).
    pub attempts: u32,
    /// done / failed / stuck / blocked.
    pub terminal: bool,
    pub done: bool,
    /// The approval token's execution nonces and its limit.
    pub execution_nonces: Vec<String>,
    pub max_executions: u32,
}

/// One line the executed work appended: `<item> call <n>`, where `n` is
/// unique per tool call the model issued.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SideEffect {
    pub item_id: String,
    pub call: u64,
}

/// An `approval.verified` audit entry: one consumed execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub token_id: String,
    pub work_item_id: String,
    pub executions_used: u32,
    pub max_executions: u32,
}

/// Everything observed up to one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub sent: Vec<Sent>,
    /// The marker answered by each reply the client showed, over every
    /// connection (a reply sent again under an id already shown is
    /// dropped by the client and not listed).
    pub reply_frames: Vec<String>,
    pub inbox: Vec<InboxSeen>,
    /// Work item ids whose plan cards the client approved, and which of
    /// those must be finished by now (see [`Sent::settled`]).
    pub approved: BTreeSet<String>,
    pub approved_settled: BTreeSet<String>,
    pub items: Vec<ItemSeen>,
    pub side_effects: Vec<SideEffect>,
    pub verified: Vec<Verified>,
    /// `silas audit verify`: `Err` with its message when it failed.
    pub audit_chain: Result<(), String>,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    /// The client saw it accepted, yet the store has no record of it.
    AcceptedNotRecorded {
        marker: String,
    },
    /// Settled and accepted, and never answered; with what the store says
    /// about it (stage delivered: the daemon handed the reply to a live
    /// connection; the reply it recorded), to tell a frame lost on the
    /// wire from a turn that never answered.
    ReplyLost {
        marker: String,
        delivered: bool,
        recorded_reply: Option<String>,
        /// Times its delivery found nobody connected.
        undelivered: u32,
    },
    /// Shown more than once: replies under distinct ids, or the message
    /// recorded more than once.
    ReplyDuplicated {
        marker: String,
        answers: u32,
    },
    /// One tool call's side effect happened more than once.
    ExecutedTwice {
        item_id: String,
        call: u64,
        times: u32,
    },
    /// More distinct runs than attempts counted: a run nobody counted.
    AttemptUncounted {
        item_id: String,
        runs: u32,
        attempts: u32,
    },
    /// One plan message ran as more than one work item (a replayed plan
    /// turn files its plan again as `<id>-<inbox id>`).
    MessageExecutedTwice {
        marker: String,
        items: Vec<String>,
    },
    /// Work ran that the client never approved.
    ExecutedWithoutApproval {
        item_id: String,
    },
    /// Approved, settled, and not finished.
    WorkNotFinished {
        item_id: String,
    },
    /// `done`, but its side effect is nowhere.
    DoneWithoutEffect {
        item_id: String,
    },
    /// One execution nonce recorded twice (on one token or two).
    NonceReused {
        nonce: String,
    },
    /// A token consumed past its limit, or the same use consumed twice.
    TokenOverused {
        token_id: String,
        uses: u32,
        max: u32,
    },
    /// One single-use work item's approval consumed more than once.
    ItemConsumedTwice {
        work_item_id: String,
        verifications: u32,
    },
    AuditChainBroken {
        detail: String,
    },
}

/// Every invariant `obs` breaks, sorted (empty: none).
pub fn check(obs: &Observation) -> Vec<Violation> {
    let mut out = Vec::new();
    check_replies(obs, &mut out);
    check_executions(obs, &mut out);
    check_nonces(obs, &mut out);
    if let Err(detail) = &obs.audit_chain {
        out.push(Violation::AuditChainBroken {
            detail: detail.clone(),
        });
    }
    out.sort();
    out
}

fn check_replies(obs: &Observation, out: &mut Vec<Violation>) {
    let mut frames: BTreeMap<&str, u32> = BTreeMap::new();
    for m in &obs.reply_frames {
        *frames.entry(m.as_str()).or_default() += 1;
    }
    let mut recorded: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    let mut last_record: BTreeMap<&str, &InboxSeen> = BTreeMap::new();
    for r in &obs.inbox {
        if let Some(m) = &r.marker {
            let e = recorded.entry(m.as_str()).or_default();
            e.0 += 1;
            e.1 += r.undelivered_replies;
            last_record.insert(m.as_str(), r);
        }
    }
    for s in &obs.sent {
        let (records, undelivered) = recorded.get(s.marker.as_str()).copied().unwrap_or_default();
        if s.acked && records == 0 {
            out.push(Violation::AcceptedNotRecorded {
                marker: s.marker.clone(),
            });
        }
        if !s.expects_reply {
            continue;
        }
        // Only what the client showed answers: a reply delivered to nobody,
        // or lost on the wire at a kill, is sent again on reconnect until
        // acknowledged (issue #19 item 6), so by the time a message is
        // settled its reply must have been shown.
        let answers = frames.get(s.marker.as_str()).copied().unwrap_or_default();
        // A message the store holds was accepted even if the client did
        // not live to see the acknowledgement.
        let accepted = s.acked || records > 0;
        if answers > 1 || records > 1 {
            out.push(Violation::ReplyDuplicated {
                marker: s.marker.clone(),
                answers: answers.max(records),
            });
        } else if answers == 0 && accepted && s.settled {
            let r = last_record.get(s.marker.as_str());
            out.push(Violation::ReplyLost {
                marker: s.marker.clone(),
                delivered: r.is_some_and(|r| r.delivered),
                recorded_reply: r.and_then(|r| r.reply.clone()),
                undelivered,
            });
        }
    }
}

fn check_executions(obs: &Observation, out: &mut Vec<Violation>) {
    let mut calls: BTreeMap<&SideEffect, u32> = BTreeMap::new();
    for e in &obs.side_effects {
        *calls.entry(e).or_default() += 1;
    }
    let mut runs: BTreeMap<&str, u32> = BTreeMap::new();
    for (e, times) in &calls {
        *runs.entry(e.item_id.as_str()).or_default() += 1;
        if *times > 1 {
            out.push(Violation::ExecutedTwice {
                item_id: e.item_id.clone(),
                call: e.call,
                times: *times,
            });
        }
    }
    // Item ids are the plan's marker, or the marker and a suffix.
    let mut per_message: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for id in runs.keys() {
        let marker = obs
            .sent
            .iter()
            .map(|s| s.marker.as_str())
            .find(|m| *id == *m || id.strip_prefix(m).is_some_and(|r| r.starts_with('-')))
            .unwrap_or(id);
        per_message
            .entry(marker)
            .or_default()
            .push((*id).to_string());
    }
    for (marker, items) in per_message {
        if items.len() > 1 {
            out.push(Violation::MessageExecutedTwice {
                marker: marker.to_string(),
                items,
            });
        }
    }
    let items: BTreeMap<&str, &ItemSeen> = obs.items.iter().map(|i| (i.id.as_str(), i)).collect();
    for (id, n) in &runs {
        if !obs.approved.contains(*id) {
            out.push(Violation::ExecutedWithoutApproval {
                item_id: (*id).to_string(),
            });
        }
        let attempts = items.get(id).map_or(0, |i| i.attempts);
        if *n > attempts {
            out.push(Violation::AttemptUncounted {
                item_id: (*id).to_string(),
                runs: *n,
                attempts,
            });
        }
    }
    for id in &obs.approved_settled {
        match items.get(id.as_str()) {
            Some(i) if i.terminal => {
                if i.done && !runs.contains_key(id.as_str()) {
                    out.push(Violation::DoneWithoutEffect {
                        item_id: id.clone(),
                    });
                }
            }
            _ => out.push(Violation::WorkNotFinished {
                item_id: id.clone(),
            }),
        }
    }
}

fn check_nonces(obs: &Observation, out: &mut Vec<Violation>) {
    let mut nonces: BTreeMap<&str, u32> = BTreeMap::new();
    for i in &obs.items {
        for n in &i.execution_nonces {
            *nonces.entry(n.as_str()).or_default() += 1;
        }
        let uses = i.execution_nonces.len() as u32;
        if uses > i.max_executions {
            out.push(Violation::TokenOverused {
                token_id: format!("token of {}", i.id),
                uses,
                max: i.max_executions,
            });
        }
    }
    for (n, c) in nonces {
        if c > 1 {
            out.push(Violation::NonceReused {
                nonce: n.to_string(),
            });
        }
    }
    let mut per_token: BTreeMap<&str, (Vec<u32>, u32)> = BTreeMap::new();
    let mut per_item: BTreeMap<&str, u32> = BTreeMap::new();
    for v in &obs.verified {
        let e = per_token.entry(v.token_id.as_str()).or_default();
        e.0.push(v.executions_used);
        e.1 = e.1.max(v.max_executions);
        *per_item.entry(v.work_item_id.as_str()).or_default() += 1;
    }
    for (token, (mut used, max)) in per_token {
        let uses = used.len() as u32;
        used.sort_unstable();
        used.dedup();
        if uses > max || (used.len() as u32) < uses {
            out.push(Violation::TokenOverused {
                token_id: token.to_string(),
                uses,
                max,
            });
        }
    }
    // Every chaos plan is a single-use task: one consumed execution each,
    // whichever token carried it.
    for (item, n) in per_item {
        if n > 1 {
            out.push(Violation::ItemConsumedTwice {
                work_item_id: item.to_string(),
                verifications: n,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(marker: &str, acked: bool, settled: bool) -> Sent {
        Sent {
            marker: marker.into(),
            acked,
            settled,
            expects_reply: marker.starts_with("chat-"),
        }
    }

    fn record(id: &str, marker: &str, undelivered: u32) -> InboxSeen {
        InboxSeen {
            inbox_id: id.into(),
            marker: Some(marker.into()),
            delivered: true,
            reply: Some(format!("re: {marker}")),
            undelivered_replies: undelivered,
        }
    }

    fn item(id: &str, attempts: u32, nonces: &[&str]) -> ItemSeen {
        ItemSeen {
            id: id.into(),
            attempts,
            terminal: true,
            done: true,
            execution_nonces: nonces.iter().map(|n| n.to_string()).collect(),
            max_executions: 1,
        }
    }

    fn effect(id: &str, call: u64) -> SideEffect {
        SideEffect {
            item_id: id.into(),
            call,
        }
    }

    fn verified(token: &str, item: &str, used: u32) -> Verified {
        Verified {
            token_id: token.into(),
            work_item_id: item.into(),
            executions_used: used,
            max_executions: 1,
        }
    }

    /// Two chats (one answered on the wire, one first while nobody was
    /// connected and then sent again on reconnect) and one plan executed
    /// once: nothing to report.
    fn clean() -> Observation {
        Observation {
            sent: vec![
                sent("chat-0-0", true, true),
                sent("chat-0-1", true, true),
                sent("chaos-0", true, true),
            ],
            reply_frames: vec!["chat-0-0".into(), "chat-0-1".into()],
            inbox: vec![
                record("0", "chat-0-0", 0),
                record("1", "chat-0-1", 1),
                record("2", "chaos-0", 0),
            ],
            approved: ["chaos-0".to_string()].into(),
            approved_settled: ["chaos-0".to_string()].into(),
            items: vec![item("chaos-0", 1, &["n1"])],
            side_effects: vec![effect("chaos-0", 7)],
            verified: vec![verified("t1", "chaos-0", 1)],
            audit_chain: Ok(()),
        }
    }

    #[test]
    fn a_clean_observation_has_no_violation() {
        assert_eq!(check(&clean()), vec![]);
    }

    #[test]
    fn a_reply_shown_twice_is_a_duplicate_one_first_sent_to_nobody_is_not() {
        let mut o = clean();
        o.reply_frames.push("chat-0-0".into());
        assert_eq!(
            check(&o),
            vec![Violation::ReplyDuplicated {
                marker: "chat-0-0".into(),
                answers: 2
            }]
        );
    }

    #[test]
    fn a_reply_sent_to_nobody_and_never_shown_is_lost_once_settled() {
        // Before acknowledgements this was excused as "answered while no
        // client was connected"; now such a reply is sent on reconnect.
        let mut o = clean();
        o.reply_frames.retain(|m| m != "chat-0-1");
        assert_eq!(
            check(&o),
            vec![Violation::ReplyLost {
                marker: "chat-0-1".into(),
                delivered: true,
                recorded_reply: Some("re: chat-0-1".into()),
                undelivered: 1,
            }]
        );
    }

    #[test]
    fn an_accepted_message_recorded_twice_is_a_duplicate() {
        let mut o = clean();
        o.inbox.push(record("3", "chat-0-0", 0));
        assert_eq!(
            check(&o),
            vec![Violation::ReplyDuplicated {
                marker: "chat-0-0".into(),
                answers: 2
            }]
        );
    }

    #[test]
    fn unanswered_is_lost_only_once_settled_and_accepted() {
        let mut o = clean();
        o.reply_frames.retain(|m| m != "chat-0-0");
        assert_eq!(
            check(&o),
            vec![Violation::ReplyLost {
                marker: "chat-0-0".into(),
                delivered: true,
                recorded_reply: Some("re: chat-0-0".into()),
                undelivered: 0,
            }]
        );
        // In flight when the daemon died: not yet late.
        o.sent[0].settled = false;
        assert_eq!(check(&o), vec![]);
        // Never accepted (no ack, no record): nothing was owed.
        o.sent[0].settled = true;
        o.sent[0].acked = false;
        o.inbox.retain(|r| r.marker.as_deref() != Some("chat-0-0"));
        assert_eq!(check(&o), vec![]);
        // Not acknowledged, but the store has it: accepted, so owed.
        o.inbox.push(record("9", "chat-0-0", 0));
        assert_eq!(
            check(&o),
            vec![Violation::ReplyLost {
                marker: "chat-0-0".into(),
                delivered: true,
                recorded_reply: Some("re: chat-0-0".into()),
                undelivered: 0,
            }]
        );
    }

    #[test]
    fn an_acknowledged_message_missing_from_the_store_is_reported() {
        let mut o = clean();
        o.inbox.retain(|r| r.marker.as_deref() != Some("chat-0-0"));
        assert_eq!(
            check(&o),
            vec![Violation::AcceptedNotRecorded {
                marker: "chat-0-0".into()
            }]
        );
    }

    #[test]
    fn the_same_call_twice_is_a_double_execution() {
        let mut o = clean();
        o.side_effects.push(effect("chaos-0", 7));
        assert_eq!(
            check(&o),
            vec![Violation::ExecutedTwice {
                item_id: "chaos-0".into(),
                call: 7,
                times: 2
            }]
        );
    }

    #[test]
    fn one_plan_message_run_as_two_items_is_a_double_execution() {
        let mut o = clean();
        let twin = "chaos-0-00000000000000000002";
        o.approved.insert(twin.into());
        o.items.push(item(twin, 1, &["n2"]));
        o.side_effects.push(effect(twin, 8));
        // Another round's plan is not a twin.
        o.sent.push(sent("chaos-01", true, true));
        o.inbox.push(record("3", "chaos-01", 0));
        o.approved.insert("chaos-01".into());
        o.items.push(item("chaos-01", 1, &["n3"]));
        o.side_effects.push(effect("chaos-01", 9));
        assert_eq!(
            check(&o),
            vec![Violation::MessageExecutedTwice {
                marker: "chaos-0".into(),
                items: vec!["chaos-0".into(), twin.into()]
            }]
        );
    }

    #[test]
    fn a_rerun_is_fine_when_counted_and_reported_when_not() {
        let mut o = clean();
        o.side_effects.push(effect("chaos-0", 8));
        assert_eq!(
            check(&o),
            vec![Violation::AttemptUncounted {
                item_id: "chaos-0".into(),
                runs: 2,
                attempts: 1
            }]
        );
        o.items[0].attempts = 2;
        assert_eq!(check(&o), vec![]);
    }

    #[test]
    fn unapproved_unfinished_and_effectless_work_are_reported() {
        let mut o = clean();
        o.side_effects.push(effect("rogue", 9));
        o.items.push(item("rogue", 1, &[]));
        assert_eq!(
            check(&o),
            vec![Violation::ExecutedWithoutApproval {
                item_id: "rogue".into()
            }]
        );
        let mut o = clean();
        o.items[0].terminal = false;
        assert_eq!(
            check(&o),
            vec![Violation::WorkNotFinished {
                item_id: "chaos-0".into()
            }]
        );
        o.approved_settled.clear();
        assert_eq!(check(&o), vec![], "unsettled work may still run");
        let mut o = clean();
        o.side_effects.clear();
        assert_eq!(
            check(&o),
            vec![Violation::DoneWithoutEffect {
                item_id: "chaos-0".into()
            }]
        );
    }

    #[test]
    fn nonces_and_tokens_consumed_twice_are_reported() {
        let mut o = clean();
        o.items.push(item("chaos-1", 1, &["n1"]));
        assert_eq!(
            check(&o),
            vec![Violation::NonceReused { nonce: "n1".into() }]
        );
        let mut o = clean();
        o.items[0].execution_nonces.push("n2".into());
        assert_eq!(
            check(&o),
            vec![Violation::TokenOverused {
                token_id: "token of chaos-0".into(),
                uses: 2,
                max: 1
            }]
        );
        let mut o = clean();
        o.verified.push(verified("t1", "chaos-0", 1));
        assert_eq!(
            check(&o),
            vec![
                Violation::TokenOverused {
                    token_id: "t1".into(),
                    uses: 2,
                    max: 1
                },
                Violation::ItemConsumedTwice {
                    work_item_id: "chaos-0".into(),
                    verifications: 2
                },
            ]
        );
        // A second token for the same item, each used once.
        let mut o = clean();
        o.verified.push(verified("t2", "chaos-0", 1));
        assert_eq!(
            check(&o),
            vec![Violation::ItemConsumedTwice {
                work_item_id: "chaos-0".into(),
                verifications: 2
            }]
        );
    }

    #[test]
    fn a_broken_audit_chain_is_reported() {
        let mut o = clean();
        o.audit_chain = Err("entry 4: hash mismatch".into());
        assert_eq!(
            check(&o),
            vec![Violation::AuditChainBroken {
                detail: "entry 4: hash mismatch".into()
            }]
        );
    }
}
