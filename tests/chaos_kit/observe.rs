//! What the chaos run sees from outside: the client's frames (kept across
//! every connection) and, after the daemon has stopped, the store read
//! through its public API, the side-effect files and `silas audit verify`.
//! Turns both into the checker's typed [`Observation`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use silas_storage::{InboxStage, Store};

use super::checker::{InboxSeen, ItemSeen, Observation, Sent, SideEffect, Verified};
use super::model::{Marker, marker_of};

/// What the client saw, over every connection.
#[derive(Debug, Default)]
pub struct Seen {
    /// Markers whose probe came back: accepted.
    pub acked: BTreeSet<String>,
    /// The marker of each reply shown: a reply frame whose id had not been
    /// shown before (the client drops a reply sent again under an id it
    /// has shown, as the web app and `silas chat` do).
    pub replies: Vec<String>,
    /// Reply id → the marker it answered, for every reply shown.
    pub shown: BTreeMap<String, String>,
    /// Reply frames dropped because their id had been shown: sent again
    /// after a reconnect (never acknowledged, or the ack lost in a kill).
    pub redelivered: u32,
    /// Plan ids whose cards the client approved.
    pub approved: BTreeSet<String>,
    /// Work items a terminal `work_status` was seen for.
    pub finished: BTreeSet<String>,
    /// When the last chat, card or work frame arrived.
    pub last_activity: Option<std::time::Instant>,
}

impl Seen {
    /// Records one frame; returns what the client answers: the `ack` of a
    /// reply, the approval of a plan card.
    pub fn record(&mut self, f: &Value) -> Option<Value> {
        let ty = f["type"].as_str().unwrap_or_default();
        if matches!(ty, "message" | "work_status" | "approval_request") {
            self.last_activity = Some(std::time::Instant::now());
        }
        match ty {
            "error" => {
                if let Some(m) = f["request_id"]
                    .as_str()
                    .and_then(|r| r.strip_prefix("probe-"))
                {
                    self.acked.insert(m.to_string());
                }
                None
            }
            "message" => {
                let id = f["id"].as_str();
                if let Some(id) = id
                    && self.shown.contains_key(id)
                {
                    self.redelivered += 1;
                } else if let Some(m) = f["text"].as_str().and_then(|t| t.strip_prefix("re: ")) {
                    self.replies.push(m.to_string());
                    if let Some(id) = id {
                        self.shown.insert(id.to_string(), m.to_string());
                    }
                }
                // Every reply is acknowledged, shown now or before.
                id.map(|id| serde_json::json!({"type": "ack", "id": id}))
            }
            "work_status" => {
                let status = f["status"].as_str().unwrap_or_default();
                if is_terminal(status)
                    && let Some(id) = f["work_item_id"].as_str()
                {
                    self.finished.insert(id.to_string());
                }
                None
            }
            "approval_request" => {
                // Every plan card is approved, a re-served one again: the
                // daemon must not run anything twice for it.
                f["title"].as_str().filter(|t| t.starts_with("chaos-"))?;
                // The item's own id: a replayed plan turn may file the plan
                // under `<proposed id>-<inbox id>`.
                let id = f["plan"]["work_item_id"].as_str()?;
                self.approved.insert(id.to_string());
                Some(serde_json::json!({"type": "approval_response",
                    "request_id": f["request_id"], "verdict": "approved"}))
            }
            _ => None,
        }
    }
}

pub fn is_terminal(status: &str) -> bool {
    matches!(status, "done" | "failed" | "stuck" | "blocked")
}

/// One message the run sent, and whether it is owed its answer by now.
#[derive(Clone, Debug)]
pub struct SentMessage {
    pub marker: String,
    /// The round it was sent in.
    pub round: u32,
    pub settled: bool,
}

/// The durable side of one observation (read with the daemon stopped).
#[derive(Debug, Default)]
pub struct Durable {
    pub inbox: Vec<InboxSeen>,
    pub items: Vec<ItemSeen>,
    pub verified: Vec<Verified>,
    pub side_effects: Vec<SideEffect>,
}

/// Reads the store the stopped daemon left in `data`, and the side-effect
/// lines in the workspace `ws` and in the daemon's working copies.
pub fn read_durable(data: &Path, ws: &Path) -> Durable {
    let store = Store::open(data.join(silas_storage::STORE_FILE)).expect("store opens");
    let audit = store.audit().tail(10_000_000).expect("audit reads");
    let mut undelivered: BTreeMap<String, u32> = BTreeMap::new();
    let mut verified = Vec::new();
    for e in &audit {
        let s = |k: &str| e.data.get(k).and_then(Value::as_str).unwrap_or_default();
        let n = |k: &str| e.data.get(k).and_then(Value::as_u64).unwrap_or_default() as u32;
        match e.event.as_str() {
            "delivery_no_connection" if s("kind") == "reply" => {
                *undelivered.entry(s("inbox_id").to_string()).or_default() += 1;
            }
            "approval.verified" => verified.push(Verified {
                token_id: s("token_id").to_string(),
                work_item_id: s("work_item_id").to_string(),
                executions_used: n("executions_used"),
                max_executions: n("max_executions"),
            }),
            _ => {}
        }
    }
    // Inbox ids are zero-padded sequence numbers from 0, without gaps.
    let mut inbox = Vec::new();
    for seq in 0u64.. {
        let id = format!("{seq:020}");
        let Some(r) = store.inbox().get(&id).expect("inbox reads") else {
            break;
        };
        let marker = marker_of(&r.message.text).map(|m| match m {
            Marker::Chat(m) | Marker::Plan(m) => m,
        });
        inbox.push(InboxSeen {
            undelivered_replies: undelivered.get(&id).copied().unwrap_or_default(),
            inbox_id: id,
            marker,
            delivered: r.stage == InboxStage::Delivered,
            reply: r.reply.clone(),
        });
    }
    let side_effects = side_effects(data, ws);
    let mut ids: BTreeSet<String> = side_effects.iter().map(|e| e.item_id.clone()).collect();
    ids.extend(verified.iter().map(|v| v.work_item_id.clone()));
    ids.extend(inbox.iter().filter_map(|r| {
        r.marker
            .as_ref()
            .filter(|m| m.starts_with("chaos-"))
            .cloned()
    }));
    let mut items = Vec::new();
    for id in ids {
        let Some(w) = store.work_items().get(&id).expect("work items read") else {
            continue;
        };
        let token = w.approval_token.as_ref();
        items.push(ItemSeen {
            attempts: w.attempts as u32,
            terminal: is_terminal(w.status.as_str()),
            done: w.status.as_str() == "done",
            execution_nonces: token
                .map(|t| t.execution_nonces.clone())
                .unwrap_or_default(),
            max_executions: token.map_or(0, |t| t.max_executions as u32),
            id,
        });
    }
    Durable {
        inbox,
        items,
        verified,
        side_effects,
    }
}

/// `ran-<id>.log` lines: the applied file in the workspace when there is
/// one (an apply copies the whole file), else the working copy's.
fn side_effects(data: &Path, ws: &Path) -> Vec<SideEffect> {
    let mut files: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    let work = data.join("work");
    for dir in std::fs::read_dir(&work).into_iter().flatten().flatten() {
        let result = dir.path().join("result");
        for f in std::fs::read_dir(&result).into_iter().flatten().flatten() {
            if let Some(id) = log_id(&f.path()) {
                files.insert(id, f.path());
            }
        }
    }
    for f in std::fs::read_dir(ws).into_iter().flatten().flatten() {
        if let Some(id) = log_id(&f.path()) {
            files.insert(id, f.path());
        }
    }
    let mut out = Vec::new();
    for path in files.values() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        out.extend(text.lines().filter_map(parse_line));
    }
    out
}

fn log_id(p: &Path) -> Option<String> {
    let name = p.file_name()?.to_str()?;
    Some(name.strip_prefix("ran-")?.strip_suffix(".log")?.to_string())
}

/// `<id> call <n>`.
pub fn parse_line(l: &str) -> Option<SideEffect> {
    let (id, n) = l.trim().split_once(" call ")?;
    Some(SideEffect {
        item_id: id.to_string(),
        call: n.parse().ok()?,
    })
}

/// `silas audit verify` over the stopped daemon's dir.
pub fn audit_chain(dir: &Path) -> Result<(), String> {
    let out = crate::support::silas(dir)
        .args(["audit", "verify"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The checker's input from the client's record and the durable state.
/// `settled_items`: work items owed a finish by now.
pub fn observation(
    sent: &[SentMessage],
    seen: &Seen,
    durable: Durable,
    settled_items: &BTreeSet<String>,
    audit_chain: Result<(), String>,
) -> Observation {
    Observation {
        sent: sent
            .iter()
            .map(|s| Sent {
                acked: seen.acked.contains(&s.marker),
                settled: s.settled,
                expects_reply: s.marker.starts_with("chat-"),
                marker: s.marker.clone(),
            })
            .collect(),
        reply_frames: seen.replies.clone(),
        inbox: durable.inbox,
        approved: seen.approved.clone(),
        approved_settled: settled_items.clone(),
        items: durable.items,
        side_effects: durable.side_effects,
        verified: durable.verified,
        audit_chain,
    }
}
