//! Approval engine and nonce store (spec §4.4, §4.5, §5.11, §5.12; §14
//! "Approval engine" and "Nonce store" rows), attacked from the outside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::Duration;
use ractor::{Actor, call_t};
use serde_json::{Value, json};
use silas_actors::approval::{
    AnswerOrigin, ApprovalEngine, ApprovalError, ApprovalMsg, ApprovalService, OwnedSubject,
};
use silas_core::approval::{Denial, IssuePolicy, Subject};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalToken};
use silas_core::model::messages::{ChannelMessage, SignedMessage, TaintLevel};
use silas_core::model::review::{AutonomyThresholdProposal, BatchProposal};
use silas_core::model::work::WorkItem;
use silas_core::taint::{Classification, ExternalReason};
use silas_core::{Base64Bytes, Timestamp, projections};
use silas_keys::OwnerKey;
use silas_storage::{NonceDomain, Store};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    key: Arc<OwnerKey>,
    svc: ApprovalService,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let key = Arc::new(OwnerKey::generate().unwrap());
    let svc = ApprovalService::new(store.clone(), key.clone(), IssuePolicy::default());
    Fixture {
        _dir: dir,
        store,
        key,
        svc,
    }
}

fn task(id: &str) -> WorkItem {
    serde_json::from_value(json!({
        "id": id, "type": "task", "title": "Fix the login bug", "body": "Run the tests, fix auth.py.",
        "verify": [{"name": "tests", "run": "pytest -q", "expect": {"exit_code": 0}}],
        "skills": ["coding"],
    }))
    .unwrap()
}

fn goal_json() -> Value {
    json!({
        "id": "goal-1", "type": "goal", "title": "Keep CI green", "body": "Watch CI.",
        "schedule": "*/30 * * * *",
        "verify": [{"name": "ci", "run": "./ci-status", "expect": {"equals": "green"}}],
        "gates": [{"name": "spend", "on": "on_tool_call", "type": "numeric_range",
                   "auto_approve": {"min": 0.0, "max": 5.0}, "on_block": "report"}],
        "skills": ["coding"],
        "escalation": {"report": {"action": "report", "message": "CI broke"}},
        "failure_context": "Fix these failures: $failed_checks",
    })
}

fn goal() -> WorkItem {
    serde_json::from_value(goal_json()).unwrap()
}

/// A fix task spawned from the goal's policy template (§5.2.3).
fn spawned(goal: &WorkItem, id: &str, failures: &str) -> WorkItem {
    let mut v = serde_json::to_value(goal).unwrap();
    let o = v.as_object_mut().unwrap();
    o.insert("id".into(), json!(id));
    o.insert("type".into(), json!("task"));
    o.insert("agent".into(), json!("ephemeral"));
    o.insert("parent".into(), json!(goal.id));
    o.insert("spawned_by".into(), json!(goal.id));
    o.insert("schedule".into(), Value::Null);
    let body = goal
        .failure_context
        .clone()
        .unwrap()
        .replace("$failed_checks", failures);
    o.insert("body".into(), json!(body));
    serde_json::from_value(v).unwrap()
}

fn approve() -> ApprovalDecision {
    serde_json::from_value(json!({"verdict": "approved", "approval_strength": "tap"})).unwrap()
}

fn denial(r: Result<impl std::fmt::Debug, ApprovalError>) -> Denial {
    match r {
        Err(ApprovalError::Denied(d)) => d,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

#[test]
fn tokens_issue_for_all_twelve_scopes_with_tap_strength_and_configured_ttl() {
    let f = fixture();
    let t = task("t-1");
    let g = goal();
    let batch: BatchProposal = serde_json::from_value(json!({
        "batch_id": "b-1", "goal_id": "goal-1", "action": "archive", "reason_summary": "old newsletters",
        "confidence_min": 0.9,
        "items": [{"item_id": "m1", "title": "a", "actor": "x", "occurred_at": "2026-11-01T00:00:00Z", "reason": "r", "confidence": 0.9}],
    }))
    .unwrap();
    let proposal: AutonomyThresholdProposal = serde_json::from_value(json!({
        "proposal_id": "ap-1", "scope_id": "owner", "goal_id": "goal-1",
        "changes": [{"key": "batch_review.default_size", "current_value": "10", "proposed_value": "15", "direction": "widen"}],
        "sample_size": 50, "correction_rate": 0.02, "evidence_window": "last 50", "rationale": "r", "risk_level": "medium",
    }))
    .unwrap();
    // skill_install binds one skill at one content hash, never a work item.
    let skill = silas_core::model::skills::SkillInstallApproval {
        skill: "count-lines".into(),
        content_hash: "ab".repeat(32),
    };
    let issued_at = now();
    let mut seen = BTreeSet::new();
    for scope in ApprovalScope::ALL {
        let subject = match scope {
            ApprovalScope::SkillInstall => Subject::SkillInstall(&skill),
            ApprovalScope::Standing => Subject::WorkItem(&g),
            ApprovalScope::AutonomyThreshold => Subject::AutonomyThreshold(&proposal),
            ApprovalScope::Budget => Subject::Batch(&batch),
            _ => Subject::WorkItem(&t),
        };
        let tok = f
            .svc
            .issue_token(
                subject,
                &approve(),
                *scope,
                &owner_origin(&f.svc),
                issued_at,
            )
            .unwrap();
        seen.insert(tok.scope.as_str());
        assert_eq!(tok.approval_strength.as_str(), "tap");
        assert_eq!(tok.executions_used, 0);
        // Standing (goal) tokens last approval.standing_ttl_minutes.
        let ttl = if *scope == ApprovalScope::Standing {
            Duration::days(30)
        } else {
            Duration::minutes(30)
        };
        assert_eq!(tok.expires_at, issued_at.plus(ttl));
        assert_eq!(tok.signature.as_slice().len(), 64);
        let payload = projections::token_signing_payload(&tok).unwrap();
        assert!(silas_keys::verify(
            &f.key.verifying_key(),
            &payload,
            tok.signature.as_slice()
        ));
        match scope {
            ApprovalScope::Standing => {
                assert_eq!(
                    tok.conditions["spawn_policy_hash"],
                    projections::spawn_policy_hash(&g).unwrap()
                );
                assert_eq!(tok.max_executions, 100);
            }
            ApprovalScope::AutonomyThreshold => {
                assert_eq!(
                    tok.plan_hash,
                    projections::autonomy_threshold_hash(&proposal).unwrap()
                );
            }
            ApprovalScope::Budget => assert_eq!(
                tok.plan_hash,
                projections::batch_proposal_hash(&batch).unwrap()
            ),
            ApprovalScope::SkillInstall => {
                assert_eq!(tok.work_item_id, "skill:count-lines");
                assert_eq!(
                    tok.plan_hash,
                    projections::skill_install_hash(&skill).unwrap()
                );
            }
            _ => {
                assert_eq!(tok.plan_hash, projections::plan_hash(&t).unwrap());
                assert_eq!(tok.max_executions, 1);
                assert!(!tok.conditions.contains_key("spawn_policy_hash"));
            }
        }
        assert!(f.store.approvals().get(&tok.token_id).unwrap().is_some());
    }
    assert_eq!(seen.len(), 12);
}

#[test]
fn issuance_refusals() {
    let f = fixture();
    let declined: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "declined"})).unwrap();
    assert!(matches!(
        f.svc.issue_token(
            Subject::WorkItem(&task("t")),
            &declined,
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now()
        ),
        Err(ApprovalError::Issue(_))
    ));
    // Standing needs a goal; single-use tokens cannot smuggle a spawn policy or extra uses.
    assert!(
        f.svc
            .issue_token(
                Subject::WorkItem(&task("t")),
                &approve(),
                ApprovalScope::Standing,
                &owner_origin(&f.svc),
                now()
            )
            .is_err()
    );
    let sneaky: ApprovalDecision = serde_json::from_value(
        json!({"verdict": "approved", "conditions": {"spawn_policy_hash": "x"}}),
    )
    .unwrap();
    assert!(
        f.svc
            .issue_token(
                Subject::WorkItem(&task("t")),
                &sneaky,
                ApprovalScope::FullPlan,
                &owner_origin(&f.svc),
                now()
            )
            .is_err()
    );
    let greedy: ApprovalDecision = serde_json::from_value(
        json!({"verdict": "approved", "conditions": {"max_executions": 50}}),
    )
    .unwrap();
    assert!(
        f.svc
            .issue_token(
                Subject::WorkItem(&task("t")),
                &greedy,
                ApprovalScope::FullPlan,
                &owner_origin(&f.svc),
                now()
            )
            .is_err()
    );
    let too_many: ApprovalDecision = serde_json::from_value(
        json!({"verdict": "approved", "conditions": {"max_executions": 101}}),
    )
    .unwrap();
    assert!(
        f.svc
            .issue_token(
                Subject::WorkItem(&goal()),
                &too_many,
                ApprovalScope::Standing,
                &owner_origin(&f.svc),
                now()
            )
            .is_err()
    );
}

#[test]
fn verify_consumes_exactly_one_nonce_and_check_none() {
    let f = fixture();
    let mut t = task("t-1");
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(&t),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    t.approval_token = Some(tok.clone());
    f.store.work_items().save(&t).unwrap();

    assert_eq!(
        denial(f.svc.check(&tok, &t, now())),
        Denial::NotYetVerified,
        "check before verify"
    );
    assert_eq!(f.store.nonces().len().unwrap(), 0);
    let updated = f.svc.verify(&tok, &t, None, now()).unwrap();
    assert_eq!(f.store.nonces().len().unwrap(), 1);
    assert_eq!(updated.executions_used, 1);
    assert_eq!(updated.execution_nonces.len(), 1);
    // Token state persisted on the ledger and mirrored on the work item.
    assert_eq!(
        f.store
            .approvals()
            .get(&tok.token_id)
            .unwrap()
            .unwrap()
            .executions_used,
        1
    );
    let stored = f
        .store
        .work_items()
        .get("t-1")
        .unwrap()
        .unwrap()
        .approval_token
        .unwrap();
    assert_eq!(stored.execution_nonces, updated.execution_nonces);

    for _ in 0..3 {
        f.svc.check(&updated, &t, now()).unwrap();
        f.svc.check(&tok, &t, now()).unwrap(); // counters come from the ledger, not the caller
    }
    assert_eq!(f.store.nonces().len().unwrap(), 1, "check consumed a nonce");
    assert_eq!(
        denial(f.svc.verify(&tok, &t, None, now())),
        Denial::Exhausted { used: 1, max: 1 }
    );
    assert_eq!(f.store.nonces().len().unwrap(), 1);
}

#[test]
fn standing_token_path_spends_one_nonce_per_spawned_task() {
    let f = fixture();
    let g = goal();
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(&g),
            &approve(),
            ApprovalScope::Standing,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    let fix = spawned(&g, "fix-1", "ci: red");

    assert_eq!(
        denial(f.svc.verify(&tok, &g, None, now())),
        Denial::StandingRequiresSpawnedTask
    );
    assert_eq!(
        denial(f.svc.verify(&tok, &g, None, now())).to_string(),
        "Standing verification requires spawned_task"
    );
    let used = f.svc.verify(&tok, &g, Some(&fix), now()).unwrap(); // §5.2.3
    f.svc.check(&used, &fix, now()).unwrap(); // §5.2.1 step 0
    assert_eq!(
        f.store.nonces().len().unwrap(),
        1,
        "verify + check = one nonce"
    );

    // A second spawned task needs its own verify; check alone is refused.
    let fix2 = spawned(&g, "fix-2", "ci: still red");
    assert_eq!(
        denial(f.svc.check(&used, &fix2, now())),
        Denial::NotYetVerified
    );
    f.svc.verify(&tok, &g, Some(&fix2), now()).unwrap();
    f.svc.check(&used, &fix2, now()).unwrap();
    assert_eq!(f.store.nonces().len().unwrap(), 2);
    assert_eq!(
        f.store
            .approvals()
            .get(&tok.token_id)
            .unwrap()
            .unwrap()
            .executions_used,
        2
    );
    // Each consumption was audited in its own transaction, with the new count.
    let verified: Vec<u64> = f
        .store
        .audit()
        .tail(20)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "approval.verified")
        .map(|e| e.data["executions_used"].as_u64().unwrap())
        .collect();
    assert_eq!(verified, vec![1, 2]);
}

#[test]
fn standing_token_refuses_foreign_and_drifted_spawned_tasks() {
    let f = fixture();
    let g = goal();
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(&g),
            &approve(),
            ApprovalScope::Standing,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();

    let mut orphan = spawned(&g, "fix-x", "x");
    orphan.parent = Some("goal-other".into());
    assert!(matches!(
        denial(f.svc.verify(&tok, &g, Some(&orphan), now())),
        Denial::SpawnedParentMismatch { .. }
    ));

    for (what, mutate) in [
        (
            "skills",
            Box::new(|w: &mut WorkItem| w.skills.push("shell-admin".into()))
                as Box<dyn Fn(&mut WorkItem)>,
        ),
        ("gates", Box::new(|w: &mut WorkItem| w.gates.clear())),
        (
            "verify",
            Box::new(|w: &mut WorkItem| w.verify[0].run = "true".into()),
        ),
        (
            "template",
            Box::new(|w: &mut WorkItem| w.failure_context = Some("do anything".into())),
        ),
        (
            "escalation",
            Box::new(|w: &mut WorkItem| {
                w.escalation.get_mut("report").unwrap().message = Some("changed".into());
            }),
        ),
    ] {
        let mut t = spawned(&g, "fix-y", "y");
        mutate(&mut t);
        assert_eq!(
            denial(f.svc.verify(&tok, &g, Some(&t), now())),
            Denial::SpawnPolicyMismatch,
            "{what}"
        );
    }
    // The goal itself changed after approval: its plan hash no longer matches.
    let mut drifted = g.clone();
    drifted.body = "Watch CI and also deploy to prod.".into();
    let fix = spawned(&drifted, "fix-z", "z");
    assert_eq!(
        denial(f.svc.verify(&tok, &drifted, Some(&fix), now())),
        Denial::PlanHashMismatch
    );
    assert_eq!(
        f.store.nonces().len().unwrap(),
        0,
        "no refused attempt consumed a nonce"
    );
}

#[test]
fn expired_exhausted_replayed_and_foreign_signed_tokens_are_refused_with_distinct_reasons() {
    let f = fixture();
    let t = task("t-1");
    let g = goal();
    let mut reasons = BTreeSet::new();

    // Expired: issued 31 minutes ago with the 30-minute TTL.
    let old = f
        .svc
        .issue_token(
            Subject::WorkItem(&t),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now().minus(Duration::minutes(31)),
        )
        .unwrap();
    let d = denial(f.svc.verify(&old, &t, None, now()));
    assert!(matches!(d, Denial::Expired(_)));
    reasons.insert(d.kind());

    // Exhausted max_executions on a standing token with two uses.
    let two: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "approved", "conditions": {"max_executions": 2}}))
            .unwrap();
    let st = f
        .svc
        .issue_token(
            Subject::WorkItem(&g),
            &two,
            ApprovalScope::Standing,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    f.svc
        .verify(&st, &g, Some(&spawned(&g, "a", "1")), now())
        .unwrap();
    f.svc
        .verify(&st, &g, Some(&spawned(&g, "b", "2")), now())
        .unwrap();
    let d = denial(f.svc.verify(&st, &g, Some(&spawned(&g, "c", "3")), now()));
    assert_eq!(d, Denial::Exhausted { used: 2, max: 2 });
    reasons.insert(d.kind());

    // Replayed execution: the same (token, hash, nonce) binding recorded twice.
    let five: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "approved", "conditions": {"max_executions": 5}}))
            .unwrap();
    let st5 = f
        .svc
        .issue_token(
            Subject::WorkItem(&g),
            &five,
            ApprovalScope::Standing,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    let h = projections::plan_hash(&spawned(&g, "r", "r")).unwrap();
    let audit = |_: &ApprovalToken| ("approval.verified".to_string(), Default::default());
    f.store
        .approvals()
        .consume_execution(&st5, &h, "exec-nonce-1", now(), audit)
        .unwrap()
        .unwrap();
    let d = f
        .store
        .approvals()
        .consume_execution(&st5, &h, "exec-nonce-1", now(), audit)
        .unwrap()
        .unwrap_err();
    assert_eq!(d, Denial::Replay);
    reasons.insert(d.kind());
    assert_eq!(
        f.store
            .approvals()
            .get(&st5.token_id)
            .unwrap()
            .unwrap()
            .executions_used,
        1
    );

    // Signed by another key.
    let intruder = OwnerKey::generate().unwrap();
    let mut forged = f
        .svc
        .issue_token(
            Subject::WorkItem(&t),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    forged.signature = Base64Bytes(
        intruder
            .sign(&projections::token_signing_payload(&forged).unwrap())
            .to_bytes()
            .to_vec(),
    );
    let d = denial(f.svc.verify(&forged, &t, None, now()));
    assert_eq!(d, Denial::BadSignature);
    reasons.insert(d.kind());

    // A token the owner never issued, even if validly signed (e.g. ledger mismatch).
    let mut rogue = f
        .svc
        .issue_token(
            Subject::WorkItem(&t),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    rogue.token_id = "never-issued".into();
    rogue.signature = Base64Bytes(
        f.key
            .sign(&projections::token_signing_payload(&rogue).unwrap())
            .to_bytes()
            .to_vec(),
    );
    let d = denial(f.svc.verify(&rogue, &t, None, now()));
    assert_eq!(d, Denial::UnknownToken);
    reasons.insert(d.kind());

    assert_eq!(reasons.len(), 5, "reasons must be distinct: {reasons:?}");
    // Every refusal is audited with its reason.
    let denied: Vec<String> = f
        .store
        .audit()
        .tail(100)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "approval.denied")
        .map(|e| e.data["reason"].as_str().unwrap().to_string())
        .collect();
    for r in ["expired", "exhausted", "bad_signature", "unknown_token"] {
        assert!(denied.iter().any(|d| d == r), "{r} not audited: {denied:?}");
    }
}

#[test]
fn a_token_for_one_work_item_does_not_authorise_another() {
    let f = fixture();
    let a = task("t-a");
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(&a),
            &approve(),
            ApprovalScope::FullPlan,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    let mut b = a.clone();
    b.id = "t-b".into();
    assert!(matches!(
        denial(f.svc.verify(&tok, &b, None, now())),
        Denial::WrongWorkItem { .. }
    ));
    assert_eq!(
        denial(f.svc.verify(&tok, &a, Some(&b), now())),
        Denial::UnexpectedSpawnedTask
    );
}

#[test]
fn autonomy_threshold_tokens_verify_only_the_exact_proposal() {
    let f = fixture();
    let p: AutonomyThresholdProposal = serde_json::from_value(json!({
        "proposal_id": "ap-1", "scope_id": "owner",
        "changes": [{"key": "standing.max_executions", "current_value": "10", "proposed_value": "20", "direction": "widen"}],
        "sample_size": 50, "correction_rate": 0.02, "evidence_window": "last 50", "rationale": "r", "risk_level": "medium",
    }))
    .unwrap();
    let tok = f
        .svc
        .issue_token(
            Subject::AutonomyThreshold(&p),
            &approve(),
            ApprovalScope::AutonomyThreshold,
            &owner_origin(&f.svc),
            now(),
        )
        .unwrap();
    let mut changed = p.clone();
    changed.changes[0].proposed_value = "200".into();
    assert_eq!(
        denial(
            f.svc
                .verify_subject(&tok, Subject::AutonomyThreshold(&changed), now())
        ),
        Denial::PlanHashMismatch
    );
    f.svc
        .verify_subject(&tok, Subject::AutonomyThreshold(&p), now())
        .unwrap();
    assert!(matches!(
        denial(
            f.svc
                .verify_subject(&tok, Subject::AutonomyThreshold(&p), now())
        ),
        Denial::Exhausted { .. }
    ));
}

#[test]
fn nonce_domains_are_isolated_and_pruned_by_ttl() {
    let f = fixture();
    let n = f.store.nonces();
    let t0 = Timestamp::parse("2026-11-22T10:00:00Z").unwrap();
    assert!(n.record(NonceDomain::Msg, "abc", t0).unwrap());
    assert!(
        !n.record(NonceDomain::Msg, "abc", t0).unwrap(),
        "replay within a domain"
    );
    assert!(n.is_used(NonceDomain::Msg, "abc").unwrap());
    assert!(
        !n.is_used(NonceDomain::Exec, "abc").unwrap(),
        "same string, other domain"
    );
    assert!(
        n.record(NonceDomain::Exec, "abc", t0.plus(Duration::minutes(30)))
            .unwrap()
    );
    assert!(n.is_used(NonceDomain::Exec, "abc").unwrap());
    // TTL pruning: a 40-minute TTL at 10:50 removes the 10:00 record only.
    assert_eq!(n.prune_expired(t0.plus(Duration::minutes(10))).unwrap(), 1);
    assert!(!n.is_used(NonceDomain::Msg, "abc").unwrap());
    assert!(n.is_used(NonceDomain::Exec, "abc").unwrap());
    // Content-bound execution keys.
    let key = silas_storage::nonces::nonce_key(
        NonceDomain::Exec,
        &silas_storage::nonces::exec_binding("tok", "hash", "n1"),
    );
    assert_eq!(key, "exec:tok:hash:n1");
}

fn signed_message(key: &OwnerKey, text: &str, at: Timestamp, nonce: &str) -> SignedMessage {
    let payload = projections::signed_message_payload(text, &at, nonce).unwrap();
    serde_json::from_value(json!({
        "message": {"channel": "web", "sender_id": "owner", "text": text, "timestamp": at},
        "signature": Base64Bytes(key.sign(&payload).to_bytes().to_vec()),
        "nonce": nonce,
    }))
    .unwrap()
}

#[test]
fn signed_messages_are_owner_once_and_external_when_replayed_stale_or_forged() {
    let f = fixture();
    let t = now();
    let m = signed_message(&f.key, "deploy it", t, "n-1");
    let classify = |s: &SignedMessage, known: bool| {
        f.svc
            .classify_message(&s.message, Some(s), known, now())
            .unwrap()
    };

    assert_eq!(classify(&m, false), Classification::Owner);
    assert_eq!(
        classify(&m, true),
        Classification::External(ExternalReason::Replayed)
    );
    let stale = signed_message(&f.key, "old", t.minus(Duration::minutes(6)), "n-2");
    assert_eq!(
        classify(&stale, true),
        Classification::External(ExternalReason::Stale)
    );
    let future = signed_message(&f.key, "later", t.plus(Duration::minutes(6)), "n-3");
    assert_eq!(
        classify(&future, false),
        Classification::External(ExternalReason::Stale)
    );
    let intruder = OwnerKey::generate().unwrap();
    let forged = signed_message(&intruder, "rm -rf", t, "n-4");
    assert_eq!(
        classify(&forged, true),
        Classification::External(ExternalReason::BadSignature)
    );
    // Forged or stale messages do not burn nonces; the owner can still use them.
    let owner_n4 = signed_message(&f.key, "fine", t, "n-4");
    assert_eq!(classify(&owner_n4, false), Classification::Owner);
    // Tampered text under a valid signature.
    let mut tampered = signed_message(&f.key, "pay 5", t, "n-5");
    tampered.message.text = "pay 5000".into();
    assert_eq!(classify(&tampered, true).taint(), TaintLevel::External);

    let unsigned: ChannelMessage =
        serde_json::from_value(json!({"channel": "telegram", "sender_id": "42", "text": "hi"}))
            .unwrap();
    assert_eq!(
        f.svc
            .classify_message(&unsigned, None, true, now())
            .unwrap(),
        Classification::Auth
    );
    assert_eq!(
        f.svc
            .classify_message(&unsigned, None, false, now())
            .unwrap(),
        Classification::External(ExternalReason::Unsigned)
    );

    let events: Vec<String> = f
        .store
        .audit()
        .tail(50)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(events.iter().filter(|e| *e == "replay_attempt").count(), 3);
    assert!(events.iter().any(|e| e == "message.bad_signature"));
    // Audit entries carry no message text.
    let all = serde_json::to_string(&f.store.audit().tail(50).unwrap()).unwrap();
    for text in ["deploy it", "rm -rf", "pay 5000"] {
        assert!(
            !all.contains(text),
            "message text {text:?} reached the audit log"
        );
    }
}

#[tokio::test]
async fn the_engine_actor_serves_issue_verify_check() {
    let f = fixture();
    let (engine, join) = Actor::spawn(None, ApprovalEngine, f.svc.clone())
        .await
        .unwrap();
    let t = task("t-actor");
    let tok: ApprovalToken = call_t!(
        engine,
        |reply| ApprovalMsg::Issue {
            subject: OwnedSubject::WorkItem(t.clone()),
            decision: approve(),
            scope: ApprovalScope::FullPlan,
            origin: owner_origin(&f.svc),
            reply,
        },
        2000
    )
    .unwrap()
    .unwrap();
    let used = call_t!(
        engine,
        |reply| ApprovalMsg::Verify {
            token: tok.clone(),
            work_item: t.clone(),
            spawned_task: None,
            reply,
        },
        2000
    )
    .unwrap()
    .unwrap();
    assert_eq!(used.executions_used, 1);
    call_t!(
        engine,
        |reply| ApprovalMsg::Check {
            token: used.clone(),
            work_item: t.clone(),
            reply
        },
        2000
    )
    .unwrap()
    .unwrap();
    let again = call_t!(
        engine,
        |reply| ApprovalMsg::Verify {
            token: tok,
            work_item: t,
            spawned_task: None,
            reply
        },
        2000
    )
    .unwrap();
    assert!(matches!(
        again,
        Err(ApprovalError::Denied(Denial::Exhausted { .. }))
    ));
    engine.stop(None);
    join.await.unwrap();
}

/// Registers a test connection as owner-authenticated with the engine and
/// returns it as the origin of the owner's answers.
fn owner_origin(
    svc: &silas_actors::approval::ApprovalService,
) -> silas_actors::approval::AnswerOrigin {
    svc.owner_sessions().authenticated("test", "owner-device");
    silas_actors::approval::AnswerOrigin::new("test", "owner-device")
}

// ------------------------------------------- one approval authority (#12)

#[tokio::test]
async fn the_engine_mints_only_for_answers_from_owner_authenticated_connections() {
    let f = fixture();
    let handle = silas_actors::approval::ApprovalHandle::standalone(f.svc.clone());
    let t = task("t-owner-only");
    let mint = |origin: AnswerOrigin| {
        handle.issue_token(
            OwnedSubject::WorkItem(t.clone()),
            approve(),
            ApprovalScope::FullPlan,
            origin,
        )
    };
    // A customer's connection, a forged channel name, a connection id the
    // channel never registered: no token, each audited.
    for origin in [
        AnswerOrigin::new("web", "ws-7"),
        AnswerOrigin::new("test", "ws-7"),
        AnswerOrigin::new("web", "owner-device"),
    ] {
        let r = mint(origin.clone()).await;
        assert!(
            matches!(r, Err(ApprovalError::NotOwner { .. })),
            "{origin:?}: {r:?}"
        );
        assert_eq!(
            silas_core::Coded::code(&r.unwrap_err()),
            silas_core::ErrorCode::EChannelAuth
        );
    }
    let refused = f
        .store
        .audit()
        .tail(50)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "approval.refused_not_owner")
        .count();
    assert_eq!(refused, 3);
    let issued = |f: &Fixture| {
        f.store
            .audit()
            .tail(50)
            .unwrap()
            .iter()
            .filter(|e| e.event == "approval.issued")
            .count()
    };
    assert_eq!(issued(&f), 0, "nothing issued");
    // Registered: minted. Closed again: refused again.
    let owner = owner_origin(&f.svc);
    let tok = mint(owner.clone()).await.unwrap();
    assert_eq!(tok.work_item_id, t.id);
    assert_eq!(issued(&f), 1);
    f.svc
        .owner_sessions()
        .closed(&owner.channel, &owner.connection_id);
    assert!(matches!(
        mint(owner).await,
        Err(ApprovalError::NotOwner { .. })
    ));
}

#[tokio::test]
async fn the_raw_engine_message_cannot_skip_the_owner_check() {
    let f = fixture();
    let (engine, join) = Actor::spawn(None, ApprovalEngine, f.svc.clone())
        .await
        .unwrap();
    let r: Result<ApprovalToken, ApprovalError> = call_t!(
        engine,
        |reply| ApprovalMsg::Issue {
            subject: OwnedSubject::WorkItem(task("t-raw")),
            decision: approve(),
            scope: ApprovalScope::FullPlan,
            origin: AnswerOrigin::new("web", "ws-anonymous"),
            reply,
        },
        2000
    )
    .unwrap();
    assert!(matches!(r, Err(ApprovalError::NotOwner { .. })), "{r:?}");
    engine.stop(None);
    join.await.unwrap();
}

/// Issue #14: the token records the channel the owner approved on, signed
/// with the rest; a client cannot claim another channel through conditions,
/// and changing the recorded channel breaks the signature.
#[tokio::test]
async fn the_token_records_the_channel_it_was_approved_on_under_the_signature() {
    let f = fixture();
    f.svc
        .owner_sessions()
        .authenticated("telegram", "owner:1001");
    let origin = AnswerOrigin::new("telegram", "owner:1001");
    let t = task("t-channel");
    let mut claim = approve();
    claim.conditions.insert(
        silas_core::model::approval::APPROVED_VIA_KEY.into(),
        Value::from("web"),
    );
    let tok = f
        .svc
        .issue_token(
            Subject::WorkItem(&t),
            &claim,
            ApprovalScope::FullPlan,
            &origin,
            Timestamp::now(),
        )
        .unwrap();
    assert_eq!(
        tok.conditions
            .get(silas_core::model::approval::APPROVED_VIA_KEY),
        Some(&Value::from("telegram"))
    );
    assert_eq!(tok.approval_strength.as_str(), "tap");
    let issued = f.store.audit().tail(5).unwrap();
    let entry = issued
        .iter()
        .find(|e| e.event == "approval.issued")
        .unwrap();
    assert_eq!(entry.data.get("channel"), Some(&Value::from("telegram")));
    // The recorded channel is signed: rewriting it fails verification.
    let mut forged = tok.clone();
    forged.conditions.insert(
        silas_core::model::approval::APPROVED_VIA_KEY.into(),
        Value::from("web"),
    );
    assert!(matches!(
        f.svc.verify(&forged, &t, None, Timestamp::now()),
        Err(ApprovalError::Denied(_))
    ));
    f.svc.verify(&tok, &t, None, Timestamp::now()).unwrap();
}
