//! §18.5 rate limits through the real runtime (Stream → TurnProcessor →
//! pipeline, with the fake LLM on 127.0.0.1): each limit refuses
//! deterministically, writes a `security_rate_limited` audit entry naming
//! the limit, and nothing beyond the limit happens — no model request (the
//! fake's request counter), no memory write, the card unchanged / never
//! opened.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Fx, Turns, agents_with_key, approvals, audit_data, direct, file_check, item, launcher, output,
    pending_card, spawn_stream, to_planner, wait_for_card,
};
use serde_json::{Value, json};
use silas_actors::cards::{CardKind, CardRejection, CardResponse, CardTimeouts};
use silas_actors::channel::{MemorySink, Outbound};
use silas_actors::limits::{
    LLM_RATE_LIMITED_MESSAGE, RuntimeLimits, WEB_SEARCH_RATE_LIMITED_MESSAGE, WORK_LLM_WAIT_MAX,
};
use silas_actors::restart::RestartPolicy;
use silas_actors::turn::pipeline::{TurnDeps, TurnError};
use silas_core::config::{Config, LimitsConfig};
use silas_core::model::approval::{ApprovalDecision, ApprovalStrength, ApprovalVerdict};
use silas_core::model::memory::MemoryItem;
use silas_core::{Coded, ErrorCode};
use silas_execution::executors::ExecutorRegistry;
use silas_sandbox::SubprocessSandbox;
use silas_storage::{PendingCard, Store};
use silas_testkit::{FakeLlm, Reply};

struct Rt {
    turns: Turns,
    sink: MemorySink,
    store: Store,
    fake: FakeLlm,
    timeouts: CardTimeouts,
    _dir: tempfile::TempDir,
}

async fn start(limits: impl FnOnce(&mut LimitsConfig)) -> Rt {
    start_with(|c| limits(&mut c.limits)).await
}

async fn start_with(config: impl FnOnce(&mut Config)) -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("silas.redb")).unwrap();
    let mut cfg = Config {
        data_dir: dir.path().to_path_buf(),
        ..Config::default()
    };
    config(&mut cfg);
    let cfg = Arc::new(cfg);
    let fake = FakeLlm::start().await.unwrap();
    let sink = MemorySink::new();
    let deps = TurnDeps::standard(
        store.clone(),
        cfg.clone(),
        agents_with_key(&fake, "sk-test-limits"),
        approvals(&store, &cfg),
        Arc::new(sink.clone()),
    );
    let turns = spawn_stream(deps, RestartPolicy::default()).await;
    Rt {
        turns,
        sink,
        store,
        fake,
        timeouts: CardTimeouts::from_config(&cfg),
        _dir: dir,
    }
}

impl Rt {
    async fn turn(&self, scope: &str, text: &str) -> String {
        self.turns.turn(&self.sink, scope, text).await
    }

    /// `security_rate_limited` entries (data), in order.
    fn limited(&self) -> Vec<serde_json::Map<String, Value>> {
        audit_data(&self.store, "security_rate_limited")
    }

    fn memories_with(&self, needle: &str) -> usize {
        self.store
            .records::<MemoryItem>()
            .list()
            .unwrap()
            .into_iter()
            .filter(|m| m.content.contains(needle))
            .count()
    }

    fn card_stored(&self, id: &str) -> bool {
        self.store
            .records::<PendingCard>()
            .get(id)
            .unwrap()
            .is_some()
    }
}

fn card(kind: CardKind, id: &str, scope: &str) -> PendingCard {
    pending_card(kind, id, scope, json!({}))
}

#[tokio::test]
async fn llm_calls_per_scope_over_the_limit_get_the_safe_reply_and_no_model_call() {
    let rt = start(|l| l.llm_calls_per_minute_per_scope = 1).await;
    rt.fake.push(direct(json!({"message": "first answer"})));
    rt.fake
        .push(direct(json!({"message": "must never be served"})));
    assert_eq!(rt.turn("owner", "hello").await, "first answer");
    assert_eq!(rt.fake.served(), 1);

    assert_eq!(rt.turn("owner", "again").await, LLM_RATE_LIMITED_MESSAGE);
    assert_eq!(rt.fake.served(), 1, "no model request past the limit");
    let limited = rt.limited();
    assert_eq!(limited.len(), 1, "{limited:?}");
    assert_eq!(limited[0]["limit"], "llm_scope");
    assert_eq!(limited[0]["scope_id"], "owner");
    assert_eq!(limited[0]["agent"], "proxy");
    // The refusal is deterministic: the same text again, still no request.
    assert_eq!(rt.turn("owner", "third").await, LLM_RATE_LIMITED_MESSAGE);
    assert_eq!(rt.fake.served(), 1);
}

#[tokio::test]
async fn the_global_llm_cap_covers_every_scope() {
    let rt = start(|l| {
        l.llm_calls_per_minute_per_scope = 1;
        l.llm_calls_per_minute_global = 1;
    })
    .await;
    rt.fake.push(direct(json!({"message": "owner answer"})));
    rt.fake
        .push(direct(json!({"message": "must never be served"})));
    assert_eq!(rt.turn("owner", "hello").await, "owner answer");
    // Another scope has its own allowance, but the global cap is used up.
    assert_eq!(rt.turn("conn-2", "hi").await, LLM_RATE_LIMITED_MESSAGE);
    assert_eq!(rt.fake.served(), 1);
    let limited = rt.limited();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["limit"], "llm_global");
    assert_eq!(limited[0]["scope_id"], "conn-2");
}

#[tokio::test]
async fn a_planner_call_is_a_second_model_call() {
    let rt = start(|l| l.llm_calls_per_minute_per_scope = 1).await;
    rt.fake.push(to_planner());
    rt.fake
        .push(Reply::json(&json!({"message": "must never be served"})));
    assert_eq!(
        rt.turn("owner", "plan something").await,
        LLM_RATE_LIMITED_MESSAGE
    );
    assert_eq!(rt.fake.served(), 1, "the proxy ran, the planner did not");
    let limited = rt.limited();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["limit"], "llm_scope");
    assert_eq!(limited[0]["agent"], "planner");
    assert!(
        rt.store.records::<PendingCard>().list().unwrap().is_empty(),
        "no plan card"
    );
}

#[tokio::test]
async fn memory_ops_over_the_per_minute_limit_are_dropped_and_audited() {
    let rt = start(|l| l.memory_ops_per_minute_per_scope = 2).await;
    let store = |c: &str| json!({"op": "store", "content": c, "memory_type": "fact"});
    rt.fake.push(direct(json!({"message": "noted",
        "memory_ops": [store("limited-a"), store("limited-b"), store("limited-c")]})));
    rt.fake.push(direct(
        json!({"message": "noted again", "memory_ops": [store("limited-d")]}),
    ));
    assert_eq!(rt.turn("owner", "remember three things").await, "noted");
    assert_eq!(rt.memories_with("limited-a"), 1);
    assert_eq!(rt.memories_with("limited-b"), 1);
    assert_eq!(rt.memories_with("limited-c"), 0, "third op over the limit");
    // The next turn in the same minute gets no memory ops at all, but its
    // reply is unaffected.
    assert_eq!(rt.turn("owner", "and one more").await, "noted again");
    assert_eq!(rt.memories_with("limited-d"), 0);
    let limited = rt.limited();
    assert_eq!(limited.len(), 2, "{limited:?}");
    assert_eq!(limited[0]["limit"], "memory_ops");
    assert_eq!(limited[0]["requested"], 3);
    assert_eq!(limited[0]["allowed"], 2);
    assert_eq!(limited[1]["requested"], 1);
    assert_eq!(limited[1]["allowed"], 0);
}

#[tokio::test]
async fn card_answers_over_the_limit_are_refused_and_the_card_stays() {
    let rt = start(|l| l.card_submissions_per_minute_per_scope = 1).await;
    let stream = rt.turns.stream.clone();
    let timeouts = rt.timeouts;
    let asked = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Decision, "dec-1", "owner"), &timeouts)
            .await
    });
    wait_for_card(&rt.sink, "dec-1").await;
    // A bogus answer uses the scope's one submission...
    let bogus = rt
        .turns
        .stream
        .answer_card(
            "owner",
            "no-such-card",
            CardKind::Decision,
            CardResponse::Choice {
                selected_value: Some("a".into()),
                freetext: None,
            },
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(bogus, Err(CardRejection::Unknown(_))), "{bogus:?}");
    // ...so the real answer is refused, typed, and changes nothing.
    let refused = rt
        .turns
        .stream
        .answer_card(
            "owner",
            "dec-1",
            CardKind::Decision,
            CardResponse::Choice {
                selected_value: Some("a".into()),
                freetext: None,
            },
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, CardRejection::RateLimited { request_id } if request_id == "dec-1"),
        "{refused:?}"
    );
    assert_eq!(refused.code(), ErrorCode::EChannelRateLimited);
    assert_eq!(refused.request_id(), Some("dec-1"));
    assert!(rt.card_stored("dec-1"), "card unchanged");
    assert!(!asked.is_finished(), "the asker still waits");
    // The plan-decision path counts against the same allowance.
    let decision = ApprovalDecision {
        verdict: ApprovalVerdict::Approved,
        approval_strength: ApprovalStrength::Tap,
        conditions: Default::default(),
    };
    let plan = rt
        .turns
        .stream
        .decide_card_for(
            "owner",
            "dec-1",
            decision.clone(),
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(plan, CardRejection::RateLimited { .. }),
        "{plan:?}"
    );
    let internal = rt
        .turns
        .stream
        .decide_card(
            "dec-1",
            decision,
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(internal, TurnError::RateLimited(_)),
        "{internal:?}"
    );
    assert_eq!(internal.code(), ErrorCode::EChannelRateLimited);
    assert!(rt.card_stored("dec-1"));
    // The first refusal of the minute is audited; the other two are
    // counted (written as `refused_since` with the next entry).
    let limited = rt.limited();
    assert_eq!(limited.len(), 1, "{limited:?}");
    assert_eq!(limited[0]["limit"], "card");
    assert_eq!(limited[0]["request_id"], "dec-1");
    // A flood of refused answers with long made-up ids, as a customer
    // could send: still one entry per scope a minute, the id quoted short.
    let long = "R".repeat(60_000);
    for scope in ["owner", "conn-9"] {
        for i in 0..200 {
            let _ = rt
                .turns
                .stream
                .answer_card(
                    scope,
                    &format!("{i}-{long}"),
                    CardKind::Decision,
                    CardResponse::Choice {
                        selected_value: Some("a".into()),
                        freetext: None,
                    },
                    silas_actors::approval::AnswerOrigin::new("test", scope),
                )
                .await;
        }
    }
    let limited = rt.limited();
    assert_eq!(limited.len(), 2, "one more entry, for conn-9");
    let quoted = limited[1]["request_id"].as_str().unwrap();
    assert_eq!(limited[1]["scope_id"], "conn-9");
    assert!(
        quoted.starts_with("1-RRR") && quoted.ends_with('…'),
        "{quoted}"
    );
    assert!(quoted.chars().count() <= 65, "{quoted}");
    // Another scope is not affected by the owner's allowance.
    let other = rt
        .turns
        .stream
        .answer_card(
            "conn-2",
            "dec-1",
            CardKind::Decision,
            CardResponse::Choice {
                selected_value: Some("a".into()),
                freetext: None,
            },
            silas_actors::approval::AnswerOrigin::new("test", "owner-device"),
        )
        .await;
    assert!(matches!(other, Err(CardRejection::Unknown(_))), "{other:?}");
    asked.abort();
}

#[tokio::test]
async fn suggestion_cards_per_hour_are_limited_when_opened() {
    let rt = start(|l| l.suggestions_per_hour_per_scope = 1).await;
    let stream = rt.turns.stream.clone();
    let timeouts = rt.timeouts;
    let first = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Suggestion, "sug-1", "owner"), &timeouts)
            .await
    });
    wait_for_card(&rt.sink, "sug-1").await;
    let second = rt
        .turns
        .stream
        .ask(card(CardKind::Suggestion, "sug-2", "owner"), &rt.timeouts)
        .await
        .unwrap_err();
    assert!(
        matches!(
            second,
            TurnError::RateLimited(silas_actors::limits::LimitKind::Suggestion)
        ),
        "{second:?}"
    );
    assert!(!rt.card_stored("sug-2"), "never stored");
    assert!(
        !rt.sink
            .sent()
            .iter()
            .any(|o| matches!(o, Outbound::Card { card } if card.request_id == "sug-2")),
        "never shown"
    );
    // Other card types are not limited when opened.
    let stream = rt.turns.stream.clone();
    let timeouts = rt.timeouts;
    let decision = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Decision, "dec-2", "owner"), &timeouts)
            .await
    });
    wait_for_card(&rt.sink, "dec-2").await;
    let limited = rt.limited();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["limit"], "suggestion");
    assert_eq!(limited[0]["card_type"], "suggestion");
    first.abort();
    decision.abort();
}

#[tokio::test]
async fn autonomy_proposals_per_week_are_limited_per_scope() {
    let rt = start(|l| l.autonomy_proposals_per_week_per_scope = 1).await;
    let stream = rt.turns.stream.clone();
    let timeouts = rt.timeouts;
    let first = tokio::spawn(async move {
        stream
            .ask(
                card(CardKind::AutonomyThreshold, "aut-1", "owner"),
                &timeouts,
            )
            .await
    });
    wait_for_card(&rt.sink, "aut-1").await;
    let second = rt
        .turns
        .stream
        .ask(
            card(CardKind::AutonomyThreshold, "aut-2", "owner"),
            &rt.timeouts,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            second,
            TurnError::RateLimited(silas_actors::limits::LimitKind::AutonomyProposal)
        ),
        "{second:?}"
    );
    assert!(!rt.card_stored("aut-2"));
    // A suggestion has its own allowance.
    let stream = rt.turns.stream.clone();
    let timeouts = rt.timeouts;
    let sug = tokio::spawn(async move {
        stream
            .ask(card(CardKind::Suggestion, "sug-9", "owner"), &timeouts)
            .await
    });
    wait_for_card(&rt.sink, "sug-9").await;
    let limited = rt.limited();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["limit"], "autonomy_proposal");
    first.abort();
    sug.abort();
}

// ------------------------------------------------- background work (§18.5)

/// A fake search provider on 127.0.0.1 that counts the requests it got.
struct FakeSearch {
    base_url: String,
    requests: Arc<std::sync::atomic::AtomicUsize>,
}

async fn fake_search() -> FakeSearch {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                // One request per connection: headers, then the body.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = json!({"query": "q", "results": [
                    {"title": "Result", "url": "https://example.com/a", "content": "found it"}
                ]})
                .to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    FakeSearch {
        base_url: format!("http://{addr}"),
        requests,
    }
}

fn search(query: &str) -> Reply {
    Reply::tool_call("web_search", &json!({"query": query}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_web_search_over_the_scope_limit_never_reaches_the_provider() {
    use silas_execution::web_search::{SearchProvider, WebSearch, WebSearchSettings};
    let provider = fake_search().await;
    let mut f = Fx::new().await;
    let settings = WebSearchSettings {
        provider: SearchProvider::Tavily,
        api_key: "tvly-test-key".into(),
        base_url: provider.base_url.clone(),
        timeout_seconds: 5,
        max_results: 5,
        max_query_chars: 100,
        allowed_domains: Vec::new(),
        trusted_private_cidrs: vec!["127.0.0.0/8".into()],
    };
    let search_client = WebSearch::new(settings, Arc::new(silas_netguard::SystemResolver)).unwrap();
    f.engine.registry = Arc::new(
        ExecutorRegistry::new(SubprocessSandbox::new(launcher()), f.path("work"))
            .with_web_search(search_client),
    );
    let limits = LimitsConfig {
        web_search_calls_per_minute_per_scope: 2,
        ..LimitsConfig::default()
    };
    f.engine.config.rate_limits = Arc::new(RuntimeLimits::from_config(&limits));
    let mut t = item(json!({
        "id": "t-search", "type": "task", "title": "s", "body": "Search four times.",
    }));
    f.approve(&mut t);
    for n in 1..=4 {
        f.fake.push(search(&format!("query {n}")));
    }
    f.fake.push(output("searched"));

    let r = f.engine.run_task("t-search", "owner").await.unwrap();
    assert_eq!(
        r.status,
        silas_core::model::work::WorkItemStatus::Done,
        "{r:?}"
    );
    // Two calls went out; the third and fourth were refused before the
    // provider was contacted.
    assert_eq!(
        provider.requests.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    let reqs = f.fake.requests();
    assert_eq!(reqs.len(), 5);
    for (i, r) in reqs.iter().enumerate().skip(1).take(2) {
        let shown = r.last_message_text();
        assert!(shown.contains("found it"), "call {i}: {shown}");
    }
    for r in &reqs[3..5] {
        assert_eq!(r.last_message_text(), WEB_SEARCH_RATE_LIMITED_MESSAGE);
    }
    let limited = audit_data(&f.store, "security_rate_limited");
    assert_eq!(limited.len(), 2, "{limited:?}");
    for d in &limited {
        assert_eq!(d["limit"], json!("web_search"));
        assert_eq!(d["scope_id"], json!("owner"));
        assert_eq!(d["tool_name"], json!("web_search"));
        assert_eq!(d["work_item_id"], json!("t-search"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_model_calls_over_the_scope_limit_wait_at_most_the_bound_then_fail() {
    use silas_core::model::work::WorkItemStatus;
    let mut f = Fx::new().await;
    let limits = LimitsConfig {
        llm_calls_per_minute_per_scope: 1,
        ..LimitsConfig::default()
    };
    // The bound is injectable; the default is one full window.
    assert_eq!(
        RuntimeLimits::from_config(&limits).work_wait_max(),
        WORK_LLM_WAIT_MAX
    );
    f.engine.config.rate_limits = Arc::new(
        RuntimeLimits::from_config(&limits).with_work_wait_max(Duration::from_millis(300)),
    );
    let never = f.artifact("t-llm", "never.txt");
    let mut t = item(json!({
        "id": "t-llm", "type": "task", "title": "l", "body": "l",
        "verify": [file_check("never", &never)],
        "budget": {"max_attempts": 2},
    }));
    f.approve(&mut t);
    f.fake.push(output("tried"));
    f.fake.set_fallback(output("should not be asked"));

    let started = std::time::Instant::now();
    let r = f.engine.run_task("t-llm", "owner").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "bounded wait");
    assert_eq!(r.status, WorkItemStatus::Stuck, "{r:?}");
    // Attempt 1 had the scope's one call; attempt 2 was refused without a
    // model request.
    assert_eq!(f.fake.served(), 1);
    let stored = f.get("t-llm");
    assert_eq!(stored.attempts, 2);
    assert!(
        r.summary.contains("E_CHANNEL_RATE_LIMITED")
            && r.summary.contains("limits.llm_calls_per_minute_per_scope")
            && r.summary.contains("nothing was sent to the model"),
        "{}",
        r.summary
    );
    let limited = audit_data(&f.store, "security_rate_limited");
    assert_eq!(limited.len(), 1, "{limited:?}");
    assert_eq!(limited[0]["limit"], json!("llm_scope"));
    assert_eq!(limited[0]["agent"], json!("executor"));
    assert_eq!(limited[0]["work_item_id"], json!("t-llm"));
    assert!(limited[0]["waited_ms"].as_u64().unwrap() <= 300);
}

/// Issue #19 item 3: a visitor's scope releases its TurnProcessor once its
/// last connection has closed and the idle interval passed; the owner's
/// never does, nor a scope still connected; a returning visitor gets a
/// fresh processor rehydrated from the store (its earlier turn is in the
/// next model request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_visitors_scope_is_released_and_comes_back_whole() {
    let rt = start_with(|c| c.backpressure.idle_scope_release_seconds = 0).await;
    rt.fake.set_fallback(direct(json!({"message": "hi"})));
    for scope in ["owner", "web:a", "web:b", "web:c"] {
        assert_eq!(
            rt.turn(scope, &format!("first words of {scope}")).await,
            "hi"
        );
    }
    let active = || async { rt.turns.stream.status().await.unwrap().active_scopes };
    assert_eq!(active().await, 4);

    for scope in ["web:a", "web:b", "owner"] {
        rt.turns.stream.scope_disconnected(scope).await.unwrap();
    }
    // The card sweep (every 500 ms) releases a and b; c is connected and
    // the owner's scope stays.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while active().await != 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "scopes not released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        active().await,
        2,
        "the owner's or a connected scope was released"
    );

    // Visitor a returns: a fresh processor, the history from the store.
    assert_eq!(rt.turn("web:a", "second words").await, "hi");
    assert_eq!(active().await, 3);
    let last = rt.fake.requests().last().cloned().unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains("first words of web:a"),
        "history lost: {body}"
    );
    assert!(
        !body.contains("first words of web:b"),
        "another scope leaked in"
    );
}
