//! Issue #18 end to end through the turn runtime: the `context_inspection`
//! tool's answer in the Proxy's request, memory-query subscriptions (made
//! from the agent's `memory_queries`, re-run each turn, restored after a
//! restart) and retrieval bumping `access_count`. Model: testkit's
//! FakeLlm with scripted replies; memory: the real tantivy-backed store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Fx, Turns, agents_with_key, direct, fast_restarts, spawn_stream, system_of};
use serde_json::json;
use silas_actors::channel::MemorySink;
use silas_actors::gate_runner::GateHandle;
use silas_actors::memory::{MemoryIndex, new_item};
use silas_actors::turn::pipeline::{TraceObserver, TurnDeps, standard_gate_runner};
use silas_core::approval::IssuePolicy;
use silas_core::model::memory::{MemoryItem, MemoryType, ReingestionTier};
use silas_core::model::messages::TaintLevel;
use silas_memory::Memory;

const API_KEY: &str = "sk-context-memory";

struct Rt {
    turns: Turns,
    sink: MemorySink,
}

impl Rt {
    async fn turn(&self, scope: &str, text: &str) -> String {
        self.turns.turn(&self.sink, scope, text).await
    }
}

async fn fx() -> Fx {
    Fx::build(API_KEY, |_| {}, IssuePolicy::from_config).await
}

fn open_memory(f: &Fx) -> Memory {
    let m = Memory::open(f.store.clone(), &f.dir.path().join("memory-index")).unwrap();
    assert!(m.wait_ready(std::time::Duration::from_secs(30)));
    m
}

async fn runtime(f: &Fx, memory: Memory) -> Rt {
    let sink = MemorySink::new();
    let gates = standard_gate_runner(&f.cfg, None);
    let memory: Arc<dyn MemoryIndex> = Arc::new(memory);
    let deps = TurnDeps {
        skills: None,
        store: f.store.clone(),
        config: f.cfg.clone(),
        agents: agents_with_key(&f.fake, API_KEY),
        gates: GateHandle::from_runner(gates),
        approvals: f.svc.clone(),
        approval_engine: silas_actors::approval::ApprovalHandle::standalone(f.svc.clone()),
        memory,
        sink: Arc::new(sink.clone()),
        observer: Arc::new(TraceObserver),
        limits: Arc::new(silas_actors::limits::RuntimeLimits::from_config(
            &f.cfg.limits,
        )),
    };
    Rt {
        turns: spawn_stream(deps, fast_restarts()).await,
        sink,
    }
}

fn fact(id: &str, scope: &str, content: &str) -> MemoryItem {
    new_item(
        id,
        scope,
        content,
        MemoryType::Fact,
        ReingestionTier::Active,
        TaintLevel::Owner,
        "test",
    )
}

/// The block the `context_inspection` tool answers with, from the last
/// Proxy request.
fn inspection_block(f: &Fx) -> Option<String> {
    let system = system_of(f.fake.requests().last().unwrap());
    let start = system.find("--- context_inspection | read-only ---")?;
    let rest = &system[start..];
    let end = rest.find("--- end ---")?;
    Some(rest[..end].to_owned())
}

/// `context_inspection` (§5.7 core retrieval tool): the Proxy is offered it
/// and its answer — this scope's zones, item ids with token counts,
/// eviction so far — travels with the request. Read-only and scope-bound:
/// another scope's items never show, and no content does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_sees_its_own_context_inspection_and_no_other_scopes() {
    let f = fx().await;
    let rt = runtime(&f, open_memory(&f)).await;
    f.fake.push(direct(json!({"message": "noted"})));
    rt.turn("alice", "alice-canary-7731 is my locker").await;
    f.fake.push(direct(json!({"message": "hello"})));
    rt.turn("owner", "hello there").await;
    let system = system_of(f.fake.requests().last().unwrap());
    let tools = system
        .lines()
        .find(|l| l.starts_with("Available tools:"))
        .unwrap();
    assert!(tools.contains("context_inspection"), "{tools}");
    // The proxy picks a context profile from the configured ones.
    assert!(
        system.contains("`context_profile` (one of: coding, conversation,"),
        "{}",
        system
            .lines()
            .find(|l| l.contains("context_profile"))
            .unwrap_or_default()
    );
    let block = inspection_block(&f).expect("inspection block");
    assert!(block.contains("chronicle: 1 items"), "{block}");
    assert!(block.contains(":in (message, turn 0"), "{block}");
    assert!(block.contains("evicted so far: 0 items"), "{block}");
    // Content stays in its own block; the other scope is never listed.
    assert!(!block.contains("hello there"), "{block}");
    assert!(!system.contains("alice-canary-7731"), "{system}");
    // A customer scope's access level decides whether it is offered; when
    // it is not, no inspection travels either.
    f.fake.push(direct(json!({"message": "ok"})));
    rt.turn("alice", "what do you hold?").await;
    let system = system_of(f.fake.requests().last().unwrap());
    let tools = system
        .lines()
        .find(|l| l.starts_with("Available tools:"))
        .unwrap();
    // (A customer's default access level offers no tools.)
    assert_eq!(tools, "Available tools: (none)");
    assert!(inspection_block(&f).is_none());
    rt.turns.stop().await;
}

fn subscription_block(system: &str, query: &str) -> Option<String> {
    let header = format!("--- subscription:memory_query | {query} |");
    let start = system.find(&header)?;
    let rest = &system[start..];
    Some(rest[..rest.find("--- end ---")?].to_owned())
}

/// The agent's memory query becomes a `memory_query` subscription of its
/// scope: re-run at each render (a memory stored later shows up), deduped
/// against the memory zone, another scope's memories never shown, and
/// restored after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_queries_become_subscriptions_that_survive_a_restart() {
    use silas_core::model::context::ScopeSubscriptions;
    let f = fx().await;
    let memory = open_memory(&f);
    memory
        .put(
            &fact("m-tomato", "owner", "garden tomatoes need water"),
            true,
        )
        .unwrap();
    memory
        .put(
            &fact("m-bob", "bob", "garden bob-canary-5512 gate code"),
            true,
        )
        .unwrap();
    let rt = runtime(&f, memory.clone()).await;
    f.fake.push(direct(json!({"message": "let me check",
        "memory_queries": [{"strategy": "keyword", "query": "garden"}]})));
    rt.turn("owner", "what was that about plants?").await;
    let saved = f
        .store
        .records::<ScopeSubscriptions>()
        .get("owner")
        .unwrap()
        .expect("subscriptions persisted");
    assert_eq!(saved.subscriptions.len(), 1);
    assert_eq!(saved.subscriptions[0].target, "garden");
    // The retrieval counted (§3.8 access_count, read by the consolidator's
    // promotion proposals); another scope's memory did not.
    let tomato = memory.get("m-tomato").unwrap().unwrap();
    assert_eq!(tomato.access_count, 1);
    assert!(tomato.last_accessed.is_some());
    assert_eq!(memory.get("m-bob").unwrap().unwrap().access_count, 0);
    // A memory stored after the query: the next render re-runs it. The
    // tomato memory is in the memory zone already (step 9), so it is not
    // repeated in the subscription's block.
    memory
        .put(
            &fact("m-shed", "owner", "garden shed key under the pot"),
            true,
        )
        .unwrap();
    f.fake.push(direct(json!({"message": "hi"})));
    rt.turn("owner", "hello").await;
    let system = system_of(f.fake.requests().last().unwrap());
    let block = subscription_block(&system, "garden").expect("subscription block");
    assert!(block.contains("garden shed key"), "{block}");
    assert!(!block.contains("tomatoes"), "{block}");
    assert!(!system.contains("bob-canary-5512"), "{system}");
    rt.turns.stop().await;

    // After a restart the subscription is back; nothing of it is in the
    // memory zone now, so both memories show.
    let rt = runtime(&f, memory.clone()).await;
    f.fake.push(direct(json!({"message": "hi again"})));
    rt.turn("owner", "good morning").await;
    let system = system_of(f.fake.requests().last().unwrap());
    let block = subscription_block(&system, "garden").expect("restored subscription");
    assert!(
        block.contains("garden shed key") && block.contains("tomatoes"),
        "{block}"
    );
    assert!(!system.contains("bob-canary-5512"), "{system}");

    // Another scope asking the same words sees only its own memories.
    f.fake.push(direct(json!({"message": "looking",
        "memory_queries": [{"strategy": "keyword", "query": "garden"}]})));
    rt.turn("alice", "garden?").await;
    f.fake.push(direct(json!({"message": "ok"})));
    rt.turn("alice", "and now?").await;
    for r in f.fake.requests() {
        let system = system_of(&r);
        if system.contains("garden?") {
            assert!(!system.contains("bob-canary-5512"), "{system}");
            assert!(!system.contains("tomatoes"), "{system}");
        }
    }
    let alice = f
        .store
        .records::<ScopeSubscriptions>()
        .get("alice")
        .unwrap()
        .unwrap();
    assert_eq!(alice.subscriptions[0].target, "garden");
    rt.turns.stop().await;
}

fn profile(id: &str, scope: &str, content: &str) -> MemoryItem {
    let mut m = fact(id, scope, content);
    m.memory_type = MemoryType::Profile;
    m
}

fn notices(sink: &MemorySink, scope: &str) -> usize {
    sink.sent()
        .iter()
        .filter(|o| {
            matches!(o, silas_actors::channel::Outbound::OwnerNotice { scope_id, text }
                if scope_id == scope && text == silas_actors::turn::rehydrate::REHYDRATED_NOTICE)
        })
        .count()
}

/// Rehydration (§5.1.3) after a real restart of the runtime over the same
/// store: the system zone comes back pinned, then the chronicle; the
/// scope's `profile` memory is pinned in the memory zone and survives a
/// turn whose retrieved memories overflow the zone and are evicted; the
/// "session rehydrated" message is in the context, audited once and shown
/// once on the scope's channel; another scope's profile never appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehydration_pins_the_scopes_profile_and_says_so_once() {
    // A small window: the memory zone holds ~400 tokens, less than the
    // five memories a turn retrieves and less than the profile alone — an
    // unpinned profile would be the first thing evicted.
    let f = Fx::build(
        API_KEY,
        |c| {
            c.context.total_tokens = 3000;
            c.context.system_max = 1000;
        },
        IssuePolicy::from_config,
    )
    .await;
    let memory = open_memory(&f);
    memory
        .put(
            &profile(
                "p-owner",
                "owner",
                &format!(
                    "owner-profile-4417: prefers metric units; {}",
                    "likes long walks by the sea ".repeat(55)
                ),
            ),
            true,
        )
        .unwrap();
    memory
        .put(
            &profile("p-bob", "bob", "bob-profile-8830: allergic to nuts"),
            true,
        )
        .unwrap();
    for i in 0..12 {
        let filler = "compost and mulch and seedlings ".repeat(12);
        memory
            .put(
                &fact(
                    &format!("g{i:02}"),
                    "owner",
                    &format!("garden note {i}: {filler}"),
                ),
                true,
            )
            .unwrap();
    }
    let rt = runtime(&f, memory.clone()).await;
    f.fake.push(direct(json!({"message": "hello"})));
    rt.turn("owner", "hello").await;
    f.fake.push(direct(json!({"message": "hello bob"})));
    rt.turn("bob", "hello").await;
    // A new scope is not a rehydrated session: no notice.
    assert_eq!(notices(&rt.sink, "owner"), 0);
    rt.turns.stop().await;

    // The restart.
    let rt = runtime(&f, memory.clone()).await;
    f.fake.push(direct(json!({"message": "about the garden"})));
    rt.turn("owner", "tell me about the garden").await;
    let system = system_of(f.fake.requests().last().unwrap());
    // The pinned system zone renders first, the rehydration message in it.
    let sys = system
        .find("--- system ---\nScope owner")
        .expect("system zone");
    let msg = system
        .find("--- system ---\n[SYSTEM] Session rehydrated after restart.")
        .expect("rehydration message");
    let chronicle = system.find("--- turn 0 | user").expect("chronicle");
    assert!(sys < chronicle && msg < chronicle, "{system}");
    assert!(system.contains("owner-profile-4417"), "{system}");
    assert!(!system.contains("bob-profile-8830"), "{system}");
    // The turn's retrievals overflowed the memory zone: memories were
    // evicted, the pinned profile was not.
    let evicted = common::audit_data(&f.store, "context_evicted");
    assert!(
        evicted
            .iter()
            .any(|d| d["scope_id"] == "owner" && d["kept_as_memory"].as_u64() > Some(0)),
        "{evicted:?}"
    );
    assert_eq!(
        system.matches("--- memory |").count(),
        1,
        "only the pinned profile is left: {system}"
    );
    // Another turn: the profile is still there; the notice is not repeated.
    f.fake.push(direct(json!({"message": "more garden"})));
    rt.turn("owner", "more garden mulch seedlings please").await;
    let system = system_of(f.fake.requests().last().unwrap());
    assert!(system.contains("owner-profile-4417"), "{system}");
    assert_eq!(notices(&rt.sink, "owner"), 1);
    let rehydrated = common::audit_data(&f.store, "session_rehydrated");
    assert_eq!(rehydrated.len(), 1, "{rehydrated:?}");
    assert_eq!(rehydrated[0]["scope_id"], "owner");
    assert_eq!(rehydrated[0]["profile_memories"], 1);
    assert!(
        !serde_json::to_string(&rehydrated)
            .unwrap()
            .contains("metric"),
        "counts only, no content"
    );
    // Bob's scope gets bob's profile and never the owner's.
    f.fake.push(direct(json!({"message": "hi bob"})));
    rt.turn("bob", "hello, what do you know about me?").await;
    let system = system_of(f.fake.requests().last().unwrap());
    assert!(system.contains("bob-profile-8830"), "{system}");
    assert!(!system.contains("owner-profile-4417"), "{system}");
    // Bob's session was restored too (the model is told), but a customer
    // is never told of the daemon's restarts.
    assert!(
        system.contains("[SYSTEM] Session rehydrated after restart."),
        "{system}"
    );
    let rehydrated = common::audit_data(&f.store, "session_rehydrated");
    assert!(
        rehydrated.iter().any(|d| d["scope_id"] == "bob"),
        "{rehydrated:?}"
    );
    assert_eq!(notices(&rt.sink, "bob"), 0);
    rt.turns.stop().await;
}
