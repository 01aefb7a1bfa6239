//! Turn-runtime benchmarks (issue #5): the harness overhead of one turn with
//! a zero-latency in-process model — Stream admission, durable inbox record,
//! the §5.1 pipeline (gates, chronicle, memory, routing, response commit),
//! delivery — so the figure is Silas, not HTTP or a model. Also turns/s with
//! 1,000 scopes active at once.
//!
//! Run: `cargo bench -p silas-actors --bench turns -- --noplot`
//! (figures go to BENCHMARKS.md; the p50/p99 and turns/s lines are printed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ractor::Actor;
use serde_json::json;
use silas_actors::approval::ApprovalService;
use silas_actors::channel::{BoxFuture as ChannelFuture, ChannelError, ChannelSink, Outbound};
use silas_actors::restart::RestartPolicy;
use silas_actors::stream::{InboundMessage, Stream, StreamArgs, StreamHandle, SubmitOutcome};
use silas_actors::turn::pipeline::TurnDeps;
use silas_core::config::Config;
use silas_keys::OwnerKey;
use silas_llm::provider::{BoxFuture, ChatRequest, ChatResponse, Provider, Usage};
use silas_llm::{Agents, LlmError};
use silas_storage::Store;
use tokio::sync::{broadcast, mpsc};

/// Answers every request at once with one fixed direct-route reply.
struct ZeroLatency(String);

impl Provider for ZeroLatency {
    fn name(&self) -> &str {
        "bench"
    }
    fn complete<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            Ok(ChatResponse {
                content: Some(self.0.clone()),
                tool_calls: Vec::new(),
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 5,
                },
            })
        })
    }
}

/// Reports each delivered reply's `reply_to`.
struct Replies(mpsc::UnboundedSender<String>);

impl ChannelSink for Replies {
    fn send(&self, out: Outbound) -> ChannelFuture<'_, Result<(), ChannelError>> {
        if let Outbound::Reply { reply_to, .. } = out {
            let _ = self.0.send(reply_to);
        }
        Box::pin(async { Ok(()) })
    }
}

struct Rt {
    stream: StreamHandle,
    replies: mpsc::UnboundedReceiver<String>,
    _dir: tempfile::TempDir,
}

async fn runtime() -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let mut cfg = Config {
        data_dir: dir.path().to_path_buf(),
        ..Config::default()
    };
    // Load, not abuse: only the queue bounds of the real config would refuse.
    cfg.limits.ws_messages_per_minute_per_scope = u32::MAX;
    cfg.limits.ws_messages_per_minute_per_ip = u32::MAX;
    // The bench measures the runtime, not the §18.5 model-call limits.
    cfg.limits.llm_calls_per_minute_per_scope = u32::MAX;
    cfg.limits.llm_calls_per_minute_global = u32::MAX;
    cfg.limits.memory_ops_per_minute_per_scope = u32::MAX;
    cfg.backpressure.max_pending_turns_total = 100_000;
    let cfg = Arc::new(cfg);
    let reply = json!({"route": "direct", "reason": "greeting",
        "response": {"message": "Hello!"}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"});
    let p: Arc<dyn Provider> = Arc::new(ZeroLatency(reply.to_string()));
    let agents = Agents::from_config(&cfg, |_| Ok((p.clone(), "bench".into()))).unwrap();
    let (tx, replies) = mpsc::unbounded_channel();
    let approvals = ApprovalService::new(
        store.clone(),
        Arc::new(OwnerKey::generate().unwrap()),
        silas_core::approval::IssuePolicy::from_config(&cfg),
    );
    let deps = TurnDeps::standard(store, cfg, agents, approvals, Arc::new(Replies(tx)));
    let (dispatch, _) = mpsc::channel(16);
    let (status, _) = broadcast::channel(16);
    let (actor, _) = Actor::spawn(
        None,
        Stream,
        StreamArgs {
            deps: Arc::new(deps),
            dispatch,
            status,
            restart_policy: RestartPolicy::default(),
        },
    )
    .await
    .unwrap();
    Rt {
        stream: StreamHandle { actor },
        replies,
        _dir: dir,
    }
}

fn msg(scope: &str, text: &str) -> InboundMessage {
    InboundMessage {
        scope_id: scope.into(),
        channel: "web".into(),
        sender_id: scope.into(),
        text: text.into(),
        signed: None,
        connection_id: scope.into(),
        ip: Some("127.0.0.1".into()),
        dedup_key: None,
    }
}

/// Turns in flight at once in the 1,000-scope run. With every turn's redb
/// commits running on the runtime's two worker threads, ~1,000 turns in
/// flight at once starve the Stream's own task past its 5 s RPC timeout
/// (seen while writing this bench; see BENCHMARKS.md).
const WINDOW: usize = 100;

/// One turn: submit, then wait for its reply.
async fn one_turn(rt: &mut Rt, scope: &str) -> Duration {
    let t = Instant::now();
    let SubmitOutcome::Accepted { inbox_id } = rt.stream.submit(msg(scope, "hello")).await.unwrap()
    else {
        panic!("refused")
    };
    loop {
        if rt.replies.recv().await.unwrap() == inbox_id {
            return t.elapsed();
        }
    }
}

/// One message to each of `scopes` scopes, at most `WINDOW` unanswered at a
/// time (a client that waits for answers, as the channels do); returns when
/// all are answered.
async fn burst(rt: &mut Rt, scopes: usize, round: usize) -> Duration {
    let t = Instant::now();
    let (mut next, mut done, mut in_flight) = (0, 0, 0);
    while done < scopes {
        while next < scopes && in_flight < WINDOW {
            let out = rt
                .stream
                .submit(msg(&format!("scope-{next}"), &format!("hello {round}")))
                .await
                .unwrap();
            assert!(matches!(out, SubmitOutcome::Accepted { .. }), "{out:?}");
            next += 1;
            in_flight += 1;
        }
        rt.replies.recv().await.unwrap();
        done += 1;
        in_flight -= 1;
    }
    t.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn bench(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rt = tokio.block_on(runtime());

    // Latency distribution of sequential turns in one scope.
    let mut lat: Vec<Duration> = tokio.block_on(async {
        for _ in 0..50 {
            one_turn(&mut rt, "owner").await;
        }
        let mut v = Vec::with_capacity(2000);
        for _ in 0..2000 {
            v.push(one_turn(&mut rt, "owner").await);
        }
        v
    });
    lat.sort();
    println!(
        "turn latency over 2000 sequential turns (one scope): p50 {:?}, p99 {:?}, max {:?}",
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );

    let mut g = c.benchmark_group("turn");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("one_scope_sequential", |b| {
        b.iter_custom(|iters| {
            tokio.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += one_turn(&mut rt, "owner").await;
                }
                total
            })
        })
    });
    g.finish();

    // 1,000 scopes: one processor each, all turns in flight at once.
    let mut rt = tokio.block_on(runtime());
    let scopes = 1000;
    let rounds = 5;
    let elapsed = tokio.block_on(async {
        burst(&mut rt, scopes, 0).await; // spawns the 1,000 processors
        let mut total = Duration::ZERO;
        for r in 1..=rounds {
            total += burst(&mut rt, scopes, r).await;
        }
        total
    });
    println!(
        "1000 scopes x {rounds} rounds, {WINDOW} in flight: {:.0} turns/s ({:?} per 1000 turns)",
        (scopes * rounds) as f64 / elapsed.as_secs_f64(),
        elapsed / rounds as u32
    );
    let mut g = c.benchmark_group("turns_1000_scopes");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(scopes as u64));
    let mut round = rounds;
    g.bench_function("burst_one_turn_each", |b| {
        b.iter_custom(|iters| {
            tokio.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    round += 1;
                    total += burst(&mut rt, scopes, round).await;
                }
                total
            })
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
