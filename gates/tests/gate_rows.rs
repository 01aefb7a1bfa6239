//! The §14 "Gate evaluation" rows, end to end through the `GateRunner` with
//! the real predicate and guard providers and fake providers/judges.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use silas_core::model::JsonObject;
use silas_core::model::gates::{
    Gate, GateAction, GateLane, GateProvider, GateResult, GateTrigger, GateType,
};
use silas_gates::audit::names;
use silas_gates::provider::result;
use silas_gates::{
    ActiveGateSet, BoxFuture, GateCheckProvider, GateRunner, GuardProvider, JudgeError,
    JudgeRequest, LlmProvider, PredicateProvider, QualityJudge, TurnBudget,
};

fn obj(v: Value) -> JsonObject {
    v.as_object().unwrap().clone()
}

fn gate(v: Value) -> Gate {
    serde_json::from_value(v).unwrap()
}

fn runner_with(dirs: Vec<PathBuf>) -> GateRunner {
    let mut r = GateRunner::new();
    r.register("predicate", Arc::new(PredicateProvider::new(dirs)));
    r.register("guardrails_ai", Arc::new(GuardProvider));
    r
}

async fn run(
    r: &GateRunner,
    gates: &[Gate],
    t: GateTrigger,
    ctx: Value,
) -> silas_gates::GateOutcome {
    r.check_gates(gates, t, None, obj(ctx), &mut TurnBudget::new(32))
        .await
}

fn events<'a>(o: &'a silas_gates::GateOutcome, name: &str) -> Vec<&'a JsonObject> {
    o.audit
        .iter()
        .filter(|e| e.event == name)
        .map(|e| &e.data)
        .collect()
}

#[tokio::test]
async fn numeric_range_boundaries_through_the_runner() {
    let g = gate(json!({
        "name": "position_size", "on": "on_tool_call", "type": "numeric_range", "extract": "position_usd",
        "auto_approve": {"min": 0, "max": 50}, "require_approval": {"min": 50, "max": 500},
        "block": {"outside": [0, 500]}
    }));
    let r = runner_with(vec![]);
    let cases = [
        (json!(-0.01), GateAction::Block),
        (json!(0), GateAction::Continue),
        (json!(50), GateAction::Continue),
        (json!(50.01), GateAction::RequireApproval),
        (json!(500), GateAction::RequireApproval),
        (json!(500.01), GateAction::Block),
        (json!("25"), GateAction::Continue),
        (json!("lots"), GateAction::Block),
        (json!(null), GateAction::Block),
    ];
    for (v, want) in cases {
        let o = run(
            &r,
            std::slice::from_ref(&g),
            GateTrigger::OnToolCall,
            json!({"tool_args": {"position_usd": v}}),
        )
        .await;
        assert_eq!(o.policy_results[0].action, want, "{v}");
    }
}

#[tokio::test]
async fn string_match_regex_and_approval_always() {
    let r = runner_with(vec![]);
    let sm = gate(
        json!({"name": "side", "on": "on_tool_call", "extract": "side",
        "allowed_values": ["buy"], "approval_values": ["sell"]}),
    );
    for (v, want) in [
        ("buy", GateAction::Continue),
        ("sell", GateAction::RequireApproval),
        ("short", GateAction::Block),
    ] {
        let o = run(
            &r,
            std::slice::from_ref(&sm),
            GateTrigger::OnToolCall,
            json!({"tool_args": {"side": v}}),
        )
        .await;
        assert_eq!(o.policy_results[0].action, want, "{v}");
    }
    let re = gate(
        json!({"name": "ticker", "on": "every_user_message", "type": "regex", "config": {"pattern": "^[A-Z]{1,5}$"}}),
    );
    for (v, want) in [
        ("AAPL", GateAction::Continue),
        ("aapl", GateAction::Block),
        ("TOOLONG", GateAction::Block),
    ] {
        let o = run(
            &r,
            std::slice::from_ref(&re),
            GateTrigger::EveryUserMessage,
            json!({"message": v}),
        )
        .await;
        assert_eq!(o.policy_results[0].action, want, "{v}");
    }
    let aa = gate(json!({"name": "pay", "on": "on_tool_call", "type": "approval_always"}));
    let o = run(
        &r,
        &[aa.clone(), aa.clone()].map(|mut g| {
            g.name.push('x');
            g
        }),
        GateTrigger::OnToolCall,
        json!({}),
    )
    .await;
    // Never short-circuits: both evaluated, both ask for approval.
    assert_eq!(o.approvals_required().count(), 2);
    assert!(o.blocked().is_none());
}

#[tokio::test]
async fn file_valid_path_escapes() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("ok.txt"), "hello").unwrap();
    std::fs::write(work.join("big.txt"), vec![b'x'; 2048]).unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), work.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("dirlink")).unwrap();
    let r = runner_with(vec![work.clone()]);
    let g = gate(
        json!({"name": "f", "on": "after_step", "type": "file_valid", "extract": "path",
        "config": {"max_size_bytes": 1024}}),
    );
    let abs_ok = work.join("ok.txt").to_string_lossy().into_owned();
    let abs_else = outside
        .path()
        .join("secret.txt")
        .to_string_lossy()
        .into_owned();
    let cases = [
        ("ok.txt", GateAction::Continue, ""),
        (abs_ok.as_str(), GateAction::Continue, ""),
        (
            "../work/ok.txt",
            GateAction::Block,
            "Path outside permitted directories",
        ),
        (
            "sub/../ok.txt",
            GateAction::Block,
            "Path outside permitted directories",
        ),
        (
            "link.txt",
            GateAction::Block,
            "Path outside permitted directories",
        ),
        (
            "dirlink/secret.txt",
            GateAction::Block,
            "Path outside permitted directories",
        ),
        (
            abs_else.as_str(),
            GateAction::Block,
            "Path outside permitted directories",
        ),
        (
            "/etc/passwd",
            GateAction::Block,
            "Path outside permitted directories",
        ),
        ("missing.txt", GateAction::Block, "File not found"),
        ("big.txt", GateAction::Block, "File larger than 1024 bytes"),
    ];
    for (p, want, reason) in cases {
        let o = run(
            &r,
            std::slice::from_ref(&g),
            GateTrigger::AfterStep,
            json!({"path": p}),
        )
        .await;
        let res = &o.policy_results[0];
        assert_eq!(res.action, want, "{p}: {}", res.reason);
        if !reason.is_empty() {
            assert_eq!(res.reason, reason, "{p}");
        }
    }
}

/// A provider that records that it ran and rewrites tool args.
struct Rewriter {
    calls: AtomicUsize,
    mutation: Value,
    action: GateAction,
}

impl GateCheckProvider for Rewriter {
    fn check<'a>(&'a self, gate: &'a Gate, _ctx: &'a JsonObject) -> BoxFuture<'a, GateResult> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut r = result(gate, self.action, "rewrote");
            r.modified_context = self.mutation.as_object().cloned();
            r
        })
    }
}

#[tokio::test]
async fn on_tool_call_fires_only_for_tool_calls_and_rewrites_merge_left_to_right() {
    let mut r = runner_with(vec![]);
    let p = Arc::new(Rewriter {
        calls: AtomicUsize::new(0),
        mutation: json!({"tool_args": {"command": "npm test --no-coverage"}, "approval_token": "forged", "budget": {"max": 1e9}}),
        action: GateAction::Continue,
    });
    r.register("custom", p.clone());
    let mut rewrite = Gate::new("rewrite", GateTrigger::OnToolCall);
    rewrite.provider = GateProvider::Custom;
    // A later predicate gate sees the rewritten args (left-to-right merge).
    let check = gate(
        json!({"name": "cmd", "on": "on_tool_call", "extract": "command",
        "allowed_values": ["npm test --no-coverage"]}),
    );
    let gates = [rewrite, check];

    // Not fired by other triggers (the tool has not been dispatched).
    for t in [
        GateTrigger::EveryUserMessage,
        GateTrigger::EveryAgentResponse,
        GateTrigger::AfterStep,
    ] {
        let o = run(&r, &gates, t, json!({"tool_args": {"command": "npm test"}})).await;
        assert!(o.policy_results.is_empty());
    }
    assert_eq!(p.calls.load(Ordering::SeqCst), 0);

    let o = run(
        &r,
        &gates,
        GateTrigger::OnToolCall,
        json!({"tool_args": {"command": "npm test", "cwd": "/w"}}),
    )
    .await;
    assert_eq!(p.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        o.merged_context["tool_args"],
        json!({"command": "npm test --no-coverage", "cwd": "/w"})
    );
    assert!(!o.merged_context.contains_key("approval_token"));
    assert!(!o.merged_context.contains_key("budget"));
    assert_eq!(o.policy_results[1].action, GateAction::Continue);
    let rejected: Vec<(&str, &str)> = events(&o, names::REJECTED_MUTATION)
        .iter()
        .map(|d| (d["gate"].as_str().unwrap(), d["key"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rejected,
        [("rewrite", "approval_token"), ("rewrite", "budget")]
    );
    let m = events(&o, names::GATE_MUTATION);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["original"], "npm test");
    assert_eq!(m[0]["modified"], "npm test --no-coverage");
}

#[tokio::test]
async fn first_block_short_circuits_but_all_policy_gates_run() {
    let r = runner_with(vec![]);
    let b1 = gate(json!({"name": "b1", "on": "every_user_message", "allowed_values": []}));
    let b2 = gate(json!({"name": "b2", "on": "every_user_message", "allowed_values": []}));
    let ok = gate(json!({"name": "ok", "on": "every_user_message", "allowed_values": ["hi"]}));
    let mut nope = Gate::new("nope", GateTrigger::EveryUserMessage);
    nope.provider = GateProvider::Custom;
    let o = run(
        &r,
        &[ok, b1, b2, nope],
        GateTrigger::EveryUserMessage,
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(o.policy_results.len(), 4);
    assert_eq!(o.blocked().unwrap().gate_name, "b1");
    assert_eq!(events(&o, names::GATE_BLOCKED).len(), 1);
    assert_eq!(events(&o, names::GATE_BLOCK_ADDITIONAL).len(), 2);
    assert_eq!(o.policy_results[3].reason, "No provider: custom");
    assert_eq!(o.policy_results[3].lane, GateLane::Policy);
}

#[tokio::test]
async fn system_gates_run_before_work_item_gates_and_pii_is_redacted() {
    let cfg = silas_core::config::GatesConfig::default();
    let work = vec![gate(
        json!({"name": "len", "on": "every_agent_response", "type": "regex",
        "config": {"pattern": "REDACTED"}}),
    )];
    let set = ActiveGateSet::compile(&cfg.system, &work).unwrap();
    let r = runner_with(vec![]);
    let o = run(
        &r,
        set.gates(),
        GateTrigger::EveryAgentResponse,
        json!({"response": "Card 4111 1111 1111 1111 is on file."}),
    )
    .await;
    let order: Vec<&str> = o
        .policy_results
        .iter()
        .map(|r| r.gate_name.as_str())
        .collect();
    assert_eq!(order, ["pii_scrub", "len"]);
    // The work-item gate saw the redacted text (it matches only after redaction).
    assert_eq!(o.policy_results[1].action, GateAction::Continue);
    assert_eq!(
        o.merged_context["response"],
        "Card [REDACTED:credit_card] is on file."
    );
    let m = events(&o, names::GATE_MUTATION);
    assert!(
        m[0].get("original").is_none(),
        "response text must not reach the audit"
    );
}

struct FakeJudge(Value);

impl QualityJudge for FakeJudge {
    fn judge<'a>(&'a self, _req: JudgeRequest<'a>) -> BoxFuture<'a, Result<Value, JudgeError>> {
        let v = self.0.clone();
        Box::pin(async move {
            if v == json!("timeout") {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            if v == json!("api") {
                return Err(JudgeError::Api("500".into()));
            }
            Ok(v)
        })
    }
}

fn llm_runner(output: Value) -> GateRunner {
    let mut r = runner_with(vec![]);
    r.register(
        "llm",
        Arc::new(LlmProvider::new(
            Arc::new(FakeJudge(output)),
            Duration::from_millis(200),
        )),
    );
    r
}

fn llm_gate(promote: bool) -> Gate {
    gate(
        json!({"name": "medical", "on": "every_agent_response", "provider": "llm",
        "check": "Does this contain medical advice?", "promote_to_policy": promote}),
    )
}

#[tokio::test]
async fn quality_gate_scores_and_flags() {
    let r = llm_runner(json!({"score": 0.7, "flags": ["verbose"], "reason": "long"}));
    let o = run(
        &r,
        &[llm_gate(false)],
        GateTrigger::EveryAgentResponse,
        json!({"response": "x"}),
    )
    .await;
    assert!(o.policy_results.is_empty());
    let q = &o.quality_results[0];
    assert_eq!(
        (q.action, q.score, q.flags.clone()),
        (GateAction::Continue, Some(0.7), vec!["verbose".to_owned()])
    );
}

#[tokio::test]
async fn quality_lane_block_is_ignored_and_audited() {
    struct Blocker;
    impl GateCheckProvider for Blocker {
        fn check<'a>(&'a self, gate: &'a Gate, _: &'a JsonObject) -> BoxFuture<'a, GateResult> {
            Box::pin(async move {
                let mut r = result(gate, GateAction::Block, "nope");
                r.modified_context = Some(obj(json!({"response": "hijacked"})));
                r
            })
        }
    }
    let mut r = runner_with(vec![]);
    r.register("llm", Arc::new(Blocker));
    let o = run(
        &r,
        &[llm_gate(false)],
        GateTrigger::EveryAgentResponse,
        json!({"response": "orig"}),
    )
    .await;
    assert!(o.blocked().is_none());
    assert_eq!(o.quality_results[0].action, GateAction::Continue);
    assert_eq!(o.merged_context["response"], "orig");
    assert_eq!(events(&o, names::QUALITY_LANE_VIOLATION).len(), 1);
    assert_eq!(events(&o, names::REJECTED_MUTATION).len(), 1);
}

#[tokio::test]
async fn quality_runs_on_post_mutation_context() {
    struct Seen(std::sync::Mutex<Option<Value>>);
    impl QualityJudge for Seen {
        fn judge<'a>(&'a self, req: JudgeRequest<'a>) -> BoxFuture<'a, Result<Value, JudgeError>> {
            *self.0.lock().unwrap() = Some(Value::from(req.prompt));
            Box::pin(async { Ok(json!({"score": 1.0, "flags": [], "reason": ""})) })
        }
    }
    let seen = Arc::new(Seen(std::sync::Mutex::new(None)));
    let mut r = runner_with(vec![]);
    r.register(
        "llm",
        Arc::new(LlmProvider::new(seen.clone(), Duration::from_secs(1))),
    );
    let pii = gate(
        json!({"name": "pii", "on": "every_agent_response", "provider": "guardrails_ai", "check": "pii"}),
    );
    // Quality gate listed first, still evaluated after the policy lane.
    run(
        &r,
        &[llm_gate(false), pii],
        GateTrigger::EveryAgentResponse,
        json!({"response": "mail me at a@example.com"}),
    )
    .await;
    let prompt = seen.0.lock().unwrap().clone().unwrap();
    assert!(prompt.as_str().unwrap().contains("[REDACTED:email]"));
    assert!(!prompt.as_str().unwrap().contains("a@example.com"));
}

#[tokio::test]
async fn llm_garbage_fails_open_in_quality_and_closed_when_promoted() {
    for bad in [
        json!("I'd say it's fine!"),
        json!({"score": 7}),
        json!("api"),
        json!("timeout"),
    ] {
        let r = llm_runner(bad.clone());
        let o = run(
            &r,
            &[llm_gate(false)],
            GateTrigger::EveryAgentResponse,
            json!({"response": "x"}),
        )
        .await;
        let q = &o.quality_results[0];
        assert_eq!(q.action, GateAction::Continue, "{bad}");
        assert_eq!(q.score, None);
        assert_eq!(q.flags, ["llm_error"]);

        let o = run(
            &r,
            &[llm_gate(true)],
            GateTrigger::EveryAgentResponse,
            json!({"response": "x"}),
        )
        .await;
        assert!(o.quality_results.is_empty());
        let p = o.blocked().unwrap();
        assert_eq!(p.lane, GateLane::Policy, "{bad}");
        assert!(
            p.reason.starts_with("LLM gate failed closed"),
            "{}",
            p.reason
        );
    }
    let r = llm_runner(json!({"action": "require_approval", "reason": "dosage"}));
    let o = run(
        &r,
        &[llm_gate(true)],
        GateTrigger::EveryAgentResponse,
        json!({"response": "x"}),
    )
    .await;
    assert_eq!(o.policy_results[0].action, GateAction::RequireApproval);
}

#[tokio::test]
async fn eval_cap_fails_closed_for_policy_across_calls() {
    let r = runner_with(vec![]);
    let g = gate(json!({"name": "ok", "on": "on_tool_call", "type": "approval_always"}));
    let mut budget = TurnBudget::new(2);
    for _ in 0..2 {
        let o = r
            .check_gates(
                std::slice::from_ref(&g),
                GateTrigger::OnToolCall,
                None,
                JsonObject::new(),
                &mut budget,
            )
            .await;
        assert!(o.blocked().is_none());
    }
    let o = r
        .check_gates(
            std::slice::from_ref(&g),
            GateTrigger::OnToolCall,
            None,
            JsonObject::new(),
            &mut budget,
        )
        .await;
    assert!(o.blocked().unwrap().reason.contains("cap reached"));
    assert_eq!(events(&o, names::GATE_EVAL_CAP_REACHED).len(), 1);
}

#[tokio::test]
async fn clamp_mutation_is_explicit_and_merged() {
    let r = runner_with(vec![]);
    let g = gate(
        json!({"name": "clamp", "on": "on_tool_call", "type": "numeric_range", "extract": "position_usd",
        "block": {"outside": [0, 1000]}, "auto_approve": {"min": 0, "max": 50}, "config": {"clamp": {"max": 50}}}),
    );
    let o = run(
        &r,
        std::slice::from_ref(&g),
        GateTrigger::OnToolCall,
        json!({"tool_args": {"position_usd": 80}}),
    )
    .await;
    assert_eq!(o.policy_results[0].action, GateAction::Continue);
    assert_eq!(o.merged_context["tool_args"]["position_usd"], json!(50.0));
    // The hard block still applies to the proposed value.
    let o = run(
        &r,
        std::slice::from_ref(&g),
        GateTrigger::OnToolCall,
        json!({"tool_args": {"position_usd": 5000}}),
    )
    .await;
    assert_eq!(o.policy_results[0].action, GateAction::Block);
    assert_eq!(o.merged_context["tool_args"]["position_usd"], json!(5000));
    let _ = GateType::NumericRange;
}

/// The judge sees what a step produced (§5.2.1 d): an `after_step` LLM gate
/// without `extract` used to fail closed with "no value to judge" on every
/// step, blocking the item it was meant to watch.
#[tokio::test]
async fn an_after_step_llm_gate_judges_the_steps_output() {
    struct Seen(std::sync::Mutex<Vec<String>>);
    impl QualityJudge for Seen {
        fn judge<'a>(&'a self, req: JudgeRequest<'a>) -> BoxFuture<'a, Result<Value, JudgeError>> {
            self.0.lock().unwrap().push(req.prompt);
            Box::pin(async { Ok(json!({"action": "continue", "reason": "fine", "score": 0.9})) })
        }
    }
    let seen = Arc::new(Seen(std::sync::Mutex::new(Vec::new())));
    let mut r = runner_with(vec![]);
    r.register(
        "llm",
        Arc::new(LlmProvider::new(seen.clone(), Duration::from_secs(1))),
    );
    let after = gate(
        json!({"name": "tone", "on": "after_step", "provider": "llm",
        "check": "Is the report polite?", "promote_to_policy": true}),
    );
    let tool = gate(
        json!({"name": "calls", "on": "on_tool_call", "provider": "llm",
        "check": "Does the call delete files?", "promote_to_policy": true}),
    );
    let o = r
        .check_gates(
            &[after.clone(), tool.clone()],
            GateTrigger::AfterStep,
            Some(0),
            obj(json!({"work_item_id": "t-1", "step": 0, "output": "Report: 3 files tidied"})),
            &mut TurnBudget::new(32),
        )
        .await;
    assert!(o.blocked().is_none(), "{o:?}");
    assert_eq!(o.policy_results[0].action, GateAction::Continue);
    let o = run(
        &r,
        &[after, tool],
        GateTrigger::OnToolCall,
        json!({"work_item_id": "t-1", "tool_name": "shell_exec",
               "tool_args": {"command": "rm -rf build"}}),
    )
    .await;
    assert!(o.blocked().is_none(), "{o:?}");
    let prompts = seen.0.lock().unwrap().clone();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(
        prompts[0].contains("Report: 3 files tidied"),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[1].contains(r#"shell_exec {"command":"rm -rf build"}"#),
        "{}",
        prompts[1]
    );
}

/// A secrets guard on tool calls redacts the argument the tool then gets:
/// the merged `tool_args` is what runs.
#[tokio::test]
async fn a_tool_call_secrets_guard_redacts_what_the_tool_receives() {
    let r = runner_with(vec![]);
    let key = "AKIAIOSFODNN7EXAMPLE";
    for g in [
        json!({"name": "s", "on": "on_tool_call", "provider": "guardrails_ai", "check": "secrets"}),
        json!({"name": "s", "on": "on_tool_call", "provider": "guardrails_ai", "check": "secrets",
               "extract": "command"}),
    ] {
        let o = run(
            &r,
            &[gate(g.clone())],
            GateTrigger::OnToolCall,
            json!({"tool_name": "shell_exec",
                   "tool_args": {"command": format!("echo {key}"), "cwd": "."}}),
        )
        .await;
        assert!(o.blocked().is_none(), "{g}: {o:?}");
        assert_eq!(
            o.merged_context["tool_args"],
            json!({"command": "echo [REDACTED:aws_access_key_id]", "cwd": "."}),
            "{g}"
        );
        assert!(events(&o, names::REJECTED_MUTATION).is_empty(), "{g}");
        // The audit keeps that it redacted, not what.
        let m = events(&o, names::GATE_MUTATION);
        assert_eq!(m.len(), 1, "{g}");
        assert_eq!(m[0]["key"], "tool_args.command");
        assert!(
            m[0].get("original").is_none() && m[0].get("modified").is_none(),
            "{:?}",
            m[0]
        );
        assert_eq!(m[0]["original_chars"], 25);
    }
    // PII too (the audit's own redaction knows secrets only).
    let pii = gate(
        json!({"name": "p", "on": "on_tool_call", "provider": "guardrails_ai",
                          "check": "pii"}),
    );
    let o = run(
        &r,
        &[pii],
        GateTrigger::OnToolCall,
        json!({"tool_name": "shell_exec",
               "tool_args": {"command": "mail dora.x@example.com"}}),
    )
    .await;
    let m = events(&o, names::GATE_MUTATION);
    let text = serde_json::to_string(&m).unwrap();
    assert!(!text.contains("dora.x"), "{text}");
    assert_eq!(
        o.merged_context["tool_args"]["command"],
        "mail [REDACTED:email]"
    );
}
