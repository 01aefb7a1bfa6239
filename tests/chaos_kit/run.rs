//! The chaos loop: start the real daemon over one data dir, let it settle
//! (everything owed from before is answered or finished), send a seeded
//! random workload (chat messages and one plan the client approves), SIGKILL
//! it after a seeded random delay, read what it left and check. A last,
//! quiet round stops it cleanly and checks that everything accepted was
//! answered exactly once and every approved item finished.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use silas_testkit::FakeLlm;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::checker::{self, Violation};
use super::observe::{self, Seen, SentMessage};
use crate::support::{self, Daemon, silas, start_daemon};

/// How a run went.
#[derive(Debug, Default)]
pub struct Summary {
    pub seed: u64,
    pub iterations: u32,
    /// Kills that found an accepted message's turn unfinished (a chat
    /// unanswered, or the plan's card not yet shown).
    pub kills_in_turns: u32,
    /// Kills that found approved work unfinished.
    pub kills_in_work: u32,
    /// Kills with neither in flight as far as the client knew (before
    /// any acceptance, or after everything was answered).
    pub kills_elsewhere: u32,
    pub messages_sent: u32,
    /// Plans whose approval was consumed (a kill before the approval
    /// landed leaves the card declined), and of those, done.
    pub plans_approved: u32,
    pub plans_done: u32,
    /// Items whose command ran in more than one (counted) attempt: an
    /// attempt a kill interrupted is redone by design (§5.2.1 a).
    pub items_rerun: u32,
    /// Reply frames the client dropped because it had shown their id: sent
    /// again on a reconnect (not acknowledged before the kill).
    pub replies_resent: u32,
    /// `(iteration, violation)`; the last round is `iterations`.
    pub violations: Vec<(u32, Violation)>,
}

impl Summary {
    pub fn line(&self) -> String {
        format!(
            "chaos: seed={} iterations={} kills_in_turns={} kills_in_work={} kills_elsewhere={} messages={} plans_approved={} plans_done={} items_rerun={} replies_resent={} violations={}",
            self.seed,
            self.iterations,
            self.kills_in_turns,
            self.kills_in_work,
            self.kills_elsewhere,
            self.messages_sent,
            self.plans_approved,
            self.plans_done,
            self.items_rerun,
            self.replies_resent,
            self.violations.len()
        )
    }
}

/// The data dir, the workspace the plans write, and the fake model.
pub struct Rig {
    pub dir: PathBuf,
    pub ws: PathBuf,
    /// Kept alive for the daemon (dropping it stops the server).
    _fake: FakeLlm,
}

impl Rig {
    /// A fresh data dir with the config and the `chaos` workspace.
    pub async fn new(dir: &Path, seed: u64) -> Rig {
        let fake = FakeLlm::start().await.unwrap();
        super::model::install(&fake, seed);
        let yaml = format!(
            "silas:\n  models: {{proxy: \"fake:proxy\", planner: \"fake:planner\", executor: \"fake:executor\", scorer: \"fake:scorer\"}}\n  providers:\n    fake: {{base_url: \"{}\", api_key_env: null}}\n  llm: {{max_retries: 0}}\n",
            fake.base_url()
        );
        std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
        let ws = dir.join("chaos-ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("README"), "chaos workspace\n").unwrap();
        let rig = Rig {
            dir: dir.to_path_buf(),
            ws,
            _fake: fake,
        };
        // Registered over the running daemon's control socket.
        let (daemon, _) = rig.start();
        let d = rig.dir.clone();
        let out = tokio::task::spawn_blocking(move || {
            silas(&d)
                .args(["workspace", "add", "chaos", "chaos-ws", "--write"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        daemon.stop().await;
        rig
    }

    pub fn start(&self) -> (Daemon, String) {
        let mut cmd = silas(&self.dir);
        cmd.arg("--config").arg(self.dir.join("silas.yaml"));
        let (daemon, addr, _) = start_daemon(cmd, Stdio::null());
        (daemon, addr)
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
}

/// The client: one task owning the socket, recording every frame into
/// `seen` and approving plan cards; `tx` sends frames.
pub struct Client {
    pub tx: mpsc::UnboundedSender<Value>,
    task: tokio::task::JoinHandle<()>,
}

impl Client {
    pub async fn connect(addr: &str, seen: Arc<Mutex<Seen>>) -> Client {
        let (mut ws, _) = support::connect(addr, Duration::from_secs(10)).await;
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    f = ws.next() => {
                        let Some(Ok(msg)) = f else { break };
                        let Message::Text(t) = msg else { continue };
                        let Ok(v) = serde_json::from_str::<Value>(&t) else { continue };
                        let answer = seen.lock().unwrap().record(&v);
                        if let Some(a) = answer
                            && ws.send(Message::text(a.to_string())).await.is_err()
                        {
                            break;
                        }
                    }
                    out = rx.recv() => {
                        let Some(v) = out else { break };
                        if ws.send(Message::text(v.to_string())).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Client { tx, task }
    }

    /// Lets frames already on the wire arrive, then ends the task.
    pub async fn finish(self, within: Duration) {
        drop(self.tx);
        let abort = self.task.abort_handle();
        if tokio::time::timeout(within, self.task).await.is_err() {
            abort.abort();
        }
    }
}

/// Sends `text` with `marker`, then the probe whose error frame tells the
/// client it was accepted (the session answers frames in order).
pub fn send_marked(tx: &mpsc::UnboundedSender<Value>, text: String, marker: &str) {
    let _ = tx.send(json!({"type": "message", "text": text}));
    let _ = tx.send(json!({"type": "approval_response",
        "request_id": format!("probe-{marker}"), "verdict": "declined"}));
}

/// Whether work item `id` is the plan sent under `marker`: its own id, or
/// `<marker>-<inbox id>` when a replayed plan turn filed it again.
fn is_plan_item(marker: &str, id: &str) -> bool {
    id == marker || id.strip_prefix(marker).is_some_and(|r| r.starts_with('-'))
}

/// Waits until every accepted chat message has a reply, every accepted plan
/// its approved card and every approved item finished, or nothing happened
/// for `quiet` (what is left was answered while no client was connected:
/// the store says), at most `cap`.
pub async fn settle(seen: &Arc<Mutex<Seen>>, sent: &[SentMessage], quiet: Duration, cap: Duration) {
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = seen.lock().unwrap();
        let answered = sent
            .iter()
            .filter(|m| m.marker.starts_with("chat-") && s.acked.contains(&m.marker))
            .all(|m| s.replies.contains(&m.marker));
        // An accepted plan message is owed its card: on a loaded box the
        // card can trail the chat replies by more than the idle spell, and
        // settling before it arrives leaves approved work unrun.
        let planned = sent
            .iter()
            .filter(|m| m.marker.starts_with("chaos-") && s.acked.contains(&m.marker))
            .all(|m| s.approved.iter().any(|id| is_plan_item(&m.marker, id)));
        let finished = s.approved.iter().all(|id| s.finished.contains(id));
        let idle = s.last_activity.unwrap_or(start).elapsed();
        if (answered && planned && finished && idle > Duration::from_millis(500))
            || idle > quiet
            || start.elapsed() > cap
        {
            return;
        }
    }
}

/// `iterations` kill rounds and the quiet last round.
pub async fn run(rig: &Rig, iterations: u32, seed: u64) -> Summary {
    let mut rng = fastrand::Rng::with_seed(seed);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut sent: Vec<SentMessage> = Vec::new();
    let mut summary = Summary {
        seed,
        iterations,
        ..Summary::default()
    };
    // Items durably approved, per observation so far.
    let mut approved_at: Vec<BTreeSet<String>> = Vec::new();
    for i in 0..=iterations {
        let last = i == iterations;
        let (mut daemon, addr) = rig.start();
        let client = Client::connect(&addr, seen.clone()).await;
        // The last round waits longer: it is the final word on liveness.
        let quiet = Duration::from_secs(if last { 10 } else { 3 });
        settle(&seen, &sent, quiet, Duration::from_secs(120)).await;
        // Owed by now: what two settles have passed over (one settle can
        // end on a quiet spell while a loaded box is merely slow), and
        // everything once the last, long one is over.
        for m in &mut sent {
            m.settled = last || m.round + 2 <= i;
        }
        let settled_items = match i.checked_sub(2) {
            Some(r) => approved_at[r as usize].clone(),
            None => BTreeSet::new(),
        };
        if last {
            daemon.stop().await;
            client.finish(Duration::from_secs(1)).await;
        } else {
            // The workload: a few chats and one plan, in random order and
            // spacing, while the kill timer runs.
            let chats = rng.u32(2..5);
            let plan_at = rng.u32(0..=chats);
            let tx = client.tx.clone();
            let mut gaps: Vec<u64> = (0..=chats).map(|_| rng.u64(0..400)).collect();
            let mut markers = Vec::new();
            for k in 0..=chats {
                if k == plan_at {
                    markers.push(format!("chaos-{i}"));
                }
                if k < chats {
                    markers.push(format!("chat-{i}-{k}"));
                }
            }
            sent.extend(markers.iter().map(|m| SentMessage {
                marker: m.clone(),
                round: i,
                settled: false,
            }));
            summary.messages_sent += markers.len() as u32;
            let workload = tokio::spawn(async move {
                for m in markers {
                    let text = if m.starts_with("chaos-") {
                        format!("please run {m}")
                    } else {
                        format!("hello {m}")
                    };
                    send_marked(&tx, text, &m);
                    let gap = gaps.pop().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(gap)).await;
                }
            });
            let kill_after = Duration::from_millis(rng.u64(0..4500));
            tokio::time::sleep(kill_after).await;
            {
                // Where this round's kill landed (earlier rounds' leftovers
                // may have been answered while nobody listened).
                let s = seen.lock().unwrap();
                let turn = sent.iter().any(|m| {
                    m.round == i
                        && m.marker.starts_with("chat-")
                        && s.acked.contains(&m.marker)
                        && !s.replies.contains(&m.marker)
                });
                let plan = format!("chaos-{i}");
                let approved: Vec<&String> = s
                    .approved
                    .iter()
                    .filter(|id| is_plan_item(&plan, id))
                    .collect();
                // The plan's own turn: accepted, its card not seen yet.
                let planning = s.acked.contains(&plan) && approved.is_empty();
                let work = approved.iter().any(|id| !s.finished.contains(*id));
                summary.kills_in_turns += u32::from(turn || planning);
                summary.kills_in_work += u32::from(work);
                summary.kills_elsewhere += u32::from(!(turn || planning || work));
            }
            daemon.child.kill().unwrap(); // SIGKILL
            daemon.child.wait().unwrap();
            workload.abort();
            client.finish(Duration::from_millis(500)).await;
        }
        let durable = observe::read_durable(&rig.data(), &rig.ws);
        let now_approved: BTreeSet<String> = durable
            .items
            .iter()
            .filter(|it| !it.execution_nonces.is_empty())
            .map(|it| it.id.clone())
            .collect();
        let settled_items = if last {
            now_approved.clone()
        } else {
            settled_items
        };
        approved_at.push(now_approved);
        let chain = observe::audit_chain(&rig.dir);
        let obs = {
            let s = seen.lock().unwrap();
            observe::observation(&sent, &s, durable, &settled_items, chain)
        };
        let found = checker::check(&obs);
        for v in &found {
            eprintln!("chaos: seed={seed} iteration {i}: {v:?}");
        }
        if last {
            summary.replies_resent = seen.lock().unwrap().redelivered;
            summary.plans_approved = settled_items.len() as u32;
            summary.plans_done = obs.items.iter().filter(|it| it.done).count() as u32;
            summary.items_rerun = obs
                .items
                .iter()
                .filter(|it| {
                    let calls: BTreeSet<u64> = obs
                        .side_effects
                        .iter()
                        .filter(|e| e.item_id == it.id)
                        .map(|e| e.call)
                        .collect();
                    calls.len() > 1
                })
                .count() as u32;
        }
        // A violation persists in every later observation: report each once.
        for v in found {
            if !summary.violations.iter().any(|(_, seen)| *seen == v) {
                summary.violations.push((i, v));
            }
        }
    }
    summary
}
