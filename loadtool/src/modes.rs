//! The four load shapes and the run around them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Barrier, Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;

use crate::BenchError;
use crate::client::{self, Chat, ClientFrame, Seen, Ws};
use crate::daemon::{Daemon, DaemonOpts, raise_open_files};
use crate::limits::{self, check};
use crate::report::{Report, Round, RssSample, RssSummary, Settled, Tally};

/// How long one turn may take before its reply counts as lost.
const REPLY_WAIT: Duration = Duration::from_secs(30);
/// How long after the last turn a client keeps listening for duplicates.
const DUPLICATE_WAIT: Duration = Duration::from_millis(500);
/// How long the daemon is left alone before an RSS reading that compares.
const SETTLE: Duration = Duration::from_secs(2);
/// Concurrent connection attempts (the daemon bounds pre-auth sockets).
const CONNECTS_AT_ONCE: usize = 64;
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// How long a closing client waits for the daemon's close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A load shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// `clients` chatbot customers, each its own scope, each `turns`
    /// sequential turns, all at once.
    ManyScopes { clients: usize, turns: usize },
    /// The owner pipelining `turns` messages into one scope with up to
    /// `in_flight` unanswered: the per-scope queue bound at work.
    HotScope { turns: usize, in_flight: usize },
    /// `connections` idle owner-authenticated connections.
    Idle { connections: usize },
    /// `rounds` of `visitors` fresh customers, each `turns` turns, then gone;
    /// with `settle_seconds`, one more reading after that long without any
    /// visitor (past the per-minute windows the last visitors left behind).
    Churn {
        rounds: usize,
        visitors: usize,
        turns: usize,
        settle_seconds: u64,
    },
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::ManyScopes { .. } => "many-scopes",
            Mode::HotScope { .. } => "hot-scope",
            Mode::Idle { .. } => "idle",
            Mode::Churn { .. } => "churn",
        }
    }

    fn chatbot(&self) -> bool {
        matches!(self, Mode::ManyScopes { .. } | Mode::Churn { .. })
    }

    /// Every count within its ceiling.
    pub fn check(&self) -> Result<(), BenchError> {
        match *self {
            Mode::ManyScopes { clients, turns } => {
                check("clients", clients, limits::MAX_CLIENTS)?;
                check("turns", turns, limits::MAX_TURNS_PER_CLIENT)
            }
            Mode::HotScope { turns, in_flight } => {
                check("turns", turns, limits::MAX_TURNS_PER_CLIENT)?;
                check("in-flight", in_flight, limits::MAX_IN_FLIGHT)
            }
            Mode::Idle { connections } => check("connections", connections, limits::MAX_CLIENTS),
            Mode::Churn {
                rounds,
                visitors,
                turns,
                settle_seconds,
            } => {
                check("rounds", rounds, limits::MAX_ROUNDS)?;
                check("visitors", visitors, limits::MAX_CLIENTS)?;
                check("turns", turns, limits::MAX_TURNS_PER_CLIENT)?;
                limits::at_most("settle-seconds", settle_seconds, limits::MAX_SETTLE_SECONDS)
            }
        }
    }
}

/// Samples the daemon's RSS every 200 ms until dropped.
struct RssSampler {
    samples: Arc<Mutex<Vec<RssSample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let out = samples.clone();
        let t0 = Instant::now();
        let task = tokio::spawn(async move {
            loop {
                if let Some(kib) = crate::daemon::rss_kib(pid)
                    && let Ok(mut s) = out.lock()
                {
                    s.push(RssSample {
                        at_s: t0.elapsed().as_secs_f64(),
                        kib,
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        RssSampler { samples, task }
    }

    fn finish(self) -> RssSummary {
        self.task.abort();
        let samples = self.samples.lock().map(|s| s.clone()).unwrap_or_default();
        RssSummary::from_samples(&samples)
    }
}

/// Starts the daemon for `mode`, runs it within `max_seconds`, reports.
pub async fn run(
    silas: &std::path::Path,
    mode: Mode,
    max_seconds: u64,
) -> Result<Report, BenchError> {
    mode.check()?;
    check(
        "max-seconds",
        max_seconds as usize,
        limits::MAX_SECONDS as usize,
    )?;
    raise_open_files();
    let mut daemon = Daemon::start(&DaemonOpts {
        silas: silas.to_path_buf(),
        chatbot: mode.chatbot(),
    })
    .await?;
    let sampler = RssSampler::start(daemon.pid());
    let outcome =
        tokio::time::timeout(Duration::from_secs(max_seconds), drive(&daemon, &mode)).await;
    let rss = sampler.finish();
    let mut report = match outcome {
        Ok(r) => r?,
        Err(_) => {
            return Err(BenchError::new(format!(
                "{} did not finish within --max-seconds {max_seconds}",
                mode.name()
            )));
        }
    };
    report.rss = rss;
    report.daemon_alive = daemon.alive();
    Ok(report)
}

/// Runs `mode` against a started daemon (no deadline, no RSS sampling:
/// [`run`] adds those).
pub async fn drive(d: &Daemon, mode: &Mode) -> Result<Report, BenchError> {
    match *mode {
        Mode::ManyScopes { clients, turns } => many_scopes(d, clients, turns).await,
        Mode::HotScope { turns, in_flight } => hot_scope(d, turns, in_flight).await,
        Mode::Idle { connections } => idle(d, connections).await,
        Mode::Churn {
            rounds,
            visitors,
            turns,
            settle_seconds,
        } => churn(d, rounds, visitors, turns, settle_seconds).await,
    }
}

/// `n` connections opened at most [`CONNECTS_AT_ONCE`] at a time; failures
/// are counted, not fatal.
async fn open_many(addr: &str, token: Option<&str>, n: usize) -> (Vec<Ws>, u64) {
    let gate = Arc::new(Semaphore::new(CONNECTS_AT_ONCE));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let gate = gate.clone();
        let addr = addr.to_string();
        let token = token.map(str::to_string);
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.ok()?;
            client::connect(&addr, token.as_deref(), CONNECT_WAIT)
                .await
                .ok()
                .map(|(ws, _)| ws)
        }));
    }
    let mut out = Vec::with_capacity(n);
    let mut failed = 0;
    for t in tasks {
        match t.await {
            Ok(Some(ws)) => out.push(ws),
            _ => failed += 1,
        }
    }
    (out, failed)
}

/// `turns` sequential turns on one socket, then a listen for duplicates.
/// Each reply is acknowledged by id once counted (after its latency is
/// taken, so the figure stays submit → reply); a reply whose id was already
/// seen is a duplicate, not the turn's answer.
pub(crate) async fn converse(ws: &mut Ws, tag: &str, turns: usize) -> Tally {
    let mut t = Tally::default();
    let mut seen = Seen::default();
    for i in 0..turns {
        let started = Instant::now();
        if client::send_message(ws, &format!("hello from {tag}, turn {i}"))
            .await
            .is_err()
        {
            t.lost += (turns - i) as u64;
            return t;
        }
        t.sent += 1;
        let deadline = started + REPLY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match client::next_chat(ws, left).await {
                Some(Chat::Reply { id }) => {
                    let latency = started.elapsed();
                    if !seen.first(id.as_deref()) {
                        t.duplicated += 1;
                        continue;
                    }
                    t.replies += 1;
                    t.latencies.push(latency);
                    if let Some(id) = id {
                        // A failed ack means the socket is gone: the next
                        // send fails and counts the loss.
                        let _ = client::send_ack(ws, &id).await;
                    }
                    break;
                }
                Some(Chat::Refused(code)) => {
                    t.refuse(&code);
                    break;
                }
                // A late reply would be taken for the next turn's: stop here.
                None => {
                    t.lost += 1;
                    return t;
                }
            }
        }
    }
    for extra in client::drain_chat(ws, DUPLICATE_WAIT).await {
        match extra {
            Chat::Reply { id } => {
                t.duplicated += 1;
                // Unasked for, but a reply all the same: acknowledged the
                // first time its id is seen, so none is left waiting.
                if seen.first(id.as_deref())
                    && let Some(id) = id
                {
                    let _ = client::send_ack(ws, &id).await;
                }
            }
            Chat::Refused(code) => t.refuse(&code),
        }
    }
    t
}

async fn many_scopes(d: &Daemon, clients: usize, turns: usize) -> Result<Report, BenchError> {
    let (sockets, failed) = open_many(d.addr(), None, clients).await;
    if sockets.is_empty() {
        return Err(BenchError::new("no customer could connect"));
    }
    // Every client starts at once, after all have connected: connection
    // set-up is not in the figures.
    let start = Arc::new(Barrier::new(sockets.len() + 1));
    let mut tasks = Vec::with_capacity(sockets.len());
    for (i, mut ws) in sockets.into_iter().enumerate() {
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let t = converse(&mut ws, &format!("customer {i}"), turns).await;
            (t, Instant::now())
        }));
    }
    start.wait().await;
    let t0 = Instant::now();
    let mut tally = Tally {
        connect_failures: failed,
        ..Tally::default()
    };
    let mut last = t0;
    for task in tasks {
        let (t, done) = task
            .await
            .map_err(|e| BenchError::new(format!("client task: {e}")))?;
        tally.merge(t);
        last = last.max(done);
    }
    // The duplicate listen is not throughput time.
    let elapsed = last.duration_since(t0).saturating_sub(DUPLICATE_WAIT);
    Ok(Report::new("many-scopes", clients, tally, elapsed))
}

async fn hot_scope(d: &Daemon, turns: usize, in_flight: usize) -> Result<Report, BenchError> {
    let (ws, _) = client::connect(d.addr(), Some(d.owner_token()), CONNECT_WAIT).await?;
    let tally = pipeline(ws, turns, in_flight).await?;
    let elapsed = tally.elapsed;
    Ok(Report::new("hot-scope", 1, tally.tally, elapsed))
}

/// What [`pipeline`] measured: the tally and the time to the last answer.
pub(crate) struct Pipelined {
    pub tally: Tally,
    pub elapsed: Duration,
}

/// `turns` messages pipelined into one socket's scope with up to
/// `in_flight` unanswered. Replies are acknowledged by id (the writer sends
/// the acks the reader queues, after the reader took the reply's time); a
/// reply whose id was already seen is a duplicate, not an answer.
pub(crate) async fn pipeline(
    ws: Ws,
    turns: usize,
    in_flight: usize,
) -> Result<Pipelined, BenchError> {
    let (mut sink, mut stream) = ws.split();
    let window = Arc::new(Semaphore::new(in_flight));
    // Send times of unanswered messages, oldest first: one scope's turns are
    // answered in order. (A refusal can overtake earlier replies; it is then
    // matched to an earlier send — counts stay exact, that latency is off.)
    let sent_at: Arc<Mutex<VecDeque<Instant>>> = Arc::new(Mutex::new(VecDeque::new()));
    // Unbounded, yet at most one ack per message sent (≤ `turns`).
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<String>();
    let t0 = Instant::now();
    let writer = {
        let window = window.clone();
        let sent_at = sent_at.clone();
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut broken = false;
            for i in 0..turns {
                let Ok(permit) = window.clone().acquire_owned().await else {
                    break;
                };
                permit.forget();
                // Acks queued while waiting for room go out first; the
                // reader's clock for them has already stopped.
                while let Ok(id) = ack_rx.try_recv() {
                    broken |= send_frame(&mut sink, &ClientFrame::Ack { id: &id })
                        .await
                        .is_err();
                }
                if let Ok(mut q) = sent_at.lock() {
                    q.push_back(Instant::now());
                }
                let text = format!("hot turn {i}");
                if broken
                    || send_frame(&mut sink, &ClientFrame::Message { text: &text })
                        .await
                        .is_err()
                {
                    break;
                }
                sent += 1;
            }
            // The rest, until the reader is done.
            while let Some(id) = ack_rx.recv().await {
                let _ = send_frame(&mut sink, &ClientFrame::Ack { id: &id }).await;
            }
            (sent, sink)
        })
    };
    let mut tally = Tally::default();
    let mut seen = Seen::default();
    let mut answered = 0usize;
    let mut last = t0;
    while answered < turns {
        let chat = match tokio::time::timeout(REPLY_WAIT, stream.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => client::classify_text(&t),
            Ok(Some(Ok(_))) => continue,
            _ => break,
        };
        let Some(chat) = chat else {
            continue;
        };
        let now = Instant::now();
        if let Chat::Reply { id } = &chat
            && !seen.first(id.as_deref())
        {
            tally.duplicated += 1;
            continue;
        }
        let started = sent_at.lock().ok().and_then(|mut q| q.pop_front());
        answered += 1;
        last = now;
        match chat {
            Chat::Reply { id } => {
                tally.replies += 1;
                if let Some(s) = started {
                    tally.latencies.push(now.duration_since(s));
                }
                if let Some(id) = id {
                    let _ = ack_tx.send(id);
                }
            }
            Chat::Refused(code) => tally.refuse(&code),
        }
        window.add_permits(1);
    }
    // A writer still waiting for room (replies lost) stops; the sender's
    // drop ends its ack loop once the queued acks are out.
    window.close();
    drop(ack_tx);
    let (sent, mut sink) = writer
        .await
        .map_err(|e| BenchError::new(format!("writer task: {e}")))?;
    // The daemon answers the close once it has read everything sent
    // before it, the last acks included: waited for (bounded), so the run
    // ends with nothing left unacknowledged.
    let _ = sink.close().await;
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    tally.sent = sent;
    tally.lost = sent.saturating_sub(answered as u64);
    Ok(Pipelined {
        tally,
        elapsed: last.duration_since(t0),
    })
}

async fn send_frame(
    sink: &mut futures_util::stream::SplitSink<Ws, Message>,
    frame: &ClientFrame<'_>,
) -> Result<(), BenchError> {
    sink.send(frame.to_message()?)
        .await
        .map_err(|e| BenchError::new(format!("send: {e}")))
}

async fn idle(d: &Daemon, connections: usize) -> Result<Report, BenchError> {
    tokio::time::sleep(SETTLE).await;
    let before = d.rss_kib().unwrap_or(0);
    let t0 = Instant::now();
    let (mut sockets, failed) = open_many(d.addr(), Some(d.owner_token()), connections).await;
    let opened = t0.elapsed();
    tokio::time::sleep(SETTLE).await;
    let after = d.rss_kib().unwrap_or(0);
    // Idle, not dead: the last connection still gets a turn answered.
    let mut tally = match sockets.last_mut() {
        Some(ws) => converse(ws, "idle probe", 1).await,
        None => Tally::default(),
    };
    tally.connect_failures = failed;
    let open = sockets.len();
    let mut report = Report::new("idle", connections, tally, opened);
    report.turns_per_second = 0.0;
    if open > 0 {
        report.per_connection_kib = Some(after.saturating_sub(before) as f64 / open as f64);
    }
    drop(sockets);
    Ok(report)
}

async fn churn(
    d: &Daemon,
    rounds: usize,
    visitors: usize,
    turns: usize,
    settle_seconds: u64,
) -> Result<Report, BenchError> {
    let gate = Arc::new(Semaphore::new(CONNECTS_AT_ONCE));
    let mut tally = Tally::default();
    let mut out_rounds = Vec::with_capacity(rounds);
    let t0 = Instant::now();
    for round in 1..=rounds {
        let mut tasks = Vec::with_capacity(visitors);
        for v in 0..visitors {
            let gate = gate.clone();
            let addr = d.addr().to_string();
            tasks.push(tokio::spawn(async move {
                let Ok(_permit) = gate.acquire_owned().await else {
                    return Tally::default();
                };
                match client::connect(&addr, None, CONNECT_WAIT).await {
                    Ok((mut ws, _)) => {
                        let t = converse(&mut ws, &format!("visitor {round}-{v}"), turns).await;
                        let _ = ws.close(None).await;
                        t
                    }
                    Err(_) => Tally {
                        connect_failures: 1,
                        ..Tally::default()
                    },
                }
            }));
        }
        for task in tasks {
            if let Ok(t) = task.await {
                tally.merge(t);
            }
        }
        tokio::time::sleep(SETTLE).await;
        out_rounds.push(reading(d, round, round * visitors));
    }
    let elapsed = t0.elapsed();
    let settled = if settle_seconds > 0 {
        tokio::time::sleep(Duration::from_secs(settle_seconds)).await;
        Some(Settled {
            after_s: settle_seconds,
            reading: reading(d, rounds, rounds * visitors),
        })
    } else {
        None
    };
    let mut report = Report::new("churn", rounds * visitors, tally, elapsed);
    report.rounds = out_rounds;
    report.settled = settled;
    Ok(report)
}

/// The daemon's resident set now, as a churn reading.
fn reading(d: &Daemon, round: usize, visitors_so_far: usize) -> Round {
    let split = d.rss_split().unwrap_or_default();
    Round {
        round,
        visitors_so_far,
        rss_kib: d.rss_kib().unwrap_or(0),
        anon_kib: split.anon_kib,
        file_kib: split.file_kib,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_refuse_counts_out_of_bounds_by_option_name() {
        assert!(
            Mode::ManyScopes {
                clients: 10,
                turns: 1
            }
            .check()
            .is_ok()
        );
        let e = Mode::ManyScopes {
            clients: 0,
            turns: 1,
        }
        .check()
        .unwrap_err();
        assert!(e.0.contains("--clients"), "{e}");
        let e = Mode::HotScope {
            turns: 5,
            in_flight: limits::MAX_IN_FLIGHT + 1,
        }
        .check()
        .unwrap_err();
        assert!(e.0.contains("--in-flight"), "{e}");
        let e = Mode::Churn {
            rounds: 1,
            visitors: 1,
            turns: 0,
            settle_seconds: 0,
        }
        .check()
        .unwrap_err();
        assert!(e.0.contains("--turns"), "{e}");
        let e = Mode::Churn {
            rounds: 1,
            visitors: 1,
            turns: 1,
            settle_seconds: limits::MAX_SETTLE_SECONDS + 1,
        }
        .check()
        .unwrap_err();
        assert!(e.0.contains("--settle-seconds"), "{e}");
    }

    #[test]
    fn customers_for_chatbot_shapes_the_owner_otherwise() {
        assert!(
            Mode::ManyScopes {
                clients: 1,
                turns: 1
            }
            .chatbot()
        );
        assert!(
            Mode::Churn {
                rounds: 1,
                visitors: 1,
                turns: 1,
                settle_seconds: 0,
            }
            .chatbot()
        );
        assert!(
            !Mode::HotScope {
                turns: 1,
                in_flight: 1
            }
            .chatbot()
        );
        assert!(!Mode::Idle { connections: 1 }.chatbot());
    }
}

#[cfg(test)]
#[path = "ack_tests.rs"]
mod ack_tests;
