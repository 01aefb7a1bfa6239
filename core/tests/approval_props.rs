//! Property tests of the pure verification path (§5.11 steps 1–4): any
//! flipped signature byte, any changed signed token field and any changed
//! included work-item field makes `verify` fail; excluded fields do not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use proptest::prelude::*;
use serde_json::{Value, json};
use silas_core::approval::{self, Denial, IssuePolicy, Subject};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalToken};
use silas_core::model::work::WorkItem;
use silas_core::projections::{self, PLAN_HASH_EXCLUDED, PLAN_HASH_INCLUDED, TOKEN_SIGNED_FIELDS};
use silas_core::{Base64Bytes, Timestamp};

mod common;
use common::{base_goal, mutate_excluded, mutate_included};

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

fn sig_ok(vk: VerifyingKey) -> impl Fn(&[u8], &[u8]) -> bool {
    move |payload, sig| {
        <[u8; 64]>::try_from(sig).is_ok_and(|b| {
            vk.verify(payload, &ed25519_dalek::Signature::from_bytes(&b))
                .is_ok()
        })
    }
}

fn now() -> Timestamp {
    Timestamp::parse("2026-11-22T12:00:00Z").unwrap()
}

/// A goal (so `agent` can vary) approved with a single-use `full_plan` token.
fn signed(v: &Value) -> (WorkItem, ApprovalToken) {
    let item: WorkItem = serde_json::from_value(v.clone()).unwrap();
    let decision: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "approved"})).unwrap();
    let mut tok = approval::unsigned_token(
        Subject::WorkItem(&item),
        &decision,
        ApprovalScope::FullPlan,
        &IssuePolicy::default(),
        now(),
        "tok-1".into(),
        "nonce-1".into(),
    )
    .unwrap();
    let payload = projections::token_signing_payload(&tok).unwrap();
    tok.signature = Base64Bytes(key().sign(&payload).to_bytes().to_vec());
    (item, tok)
}

fn verify(tok: &ApprovalToken, item: &WorkItem) -> Result<(), Denial> {
    approval::authorize_execution(tok, item, None, now(), &sig_ok(key().verifying_key()))
        .map(|_| ())
}

/// One change per signed field; each keeps the token well-formed.
fn mutate_signed(tok: &mut ApprovalToken, field: &str, s: &str) {
    let s = format!("{s}~");
    match field {
        "token_id" => tok.token_id.push_str(&s),
        "plan_hash" => tok.plan_hash = format!("{}{s}", &tok.plan_hash[..8]),
        "work_item_id" => tok.work_item_id.push_str(&s),
        "scope" => tok.scope = ApprovalScope::SingleStep,
        "verdict" => tok.verdict = silas_core::model::approval::ApprovalVerdict::Conditional,
        "nonce" => tok.nonce.push_str(&s),
        "issued_at" => {
            tok.issued_at = tok
                .issued_at
                .minus(chrono::Duration::seconds(1 + s.len() as i64))
        }
        "expires_at" => {
            tok.expires_at = tok
                .expires_at
                .plus(chrono::Duration::seconds(1 + s.len() as i64))
        }
        "max_executions" => tok.max_executions += 1 + s.len() as u64,
        "conditions" => {
            tok.conditions.insert(s, json!(true));
        }
        other => panic!("no mutation for signed field {other}"),
    }
}

/// Signed fields with a mutation. `approval_strength` has a single valid
/// value (`tap`), so it is covered by `approval_strength_is_signed` instead.
fn mutable_signed_fields() -> Vec<&'static str> {
    TOKEN_SIGNED_FIELDS
        .iter()
        .copied()
        .filter(|f| *f != "approval_strength")
        .collect()
}

#[test]
fn approval_strength_is_signed() {
    let (_, tok) = signed(&base_goal());
    let payload = projections::token_signing_payload(&tok).unwrap();
    let text = String::from_utf8(payload.clone()).unwrap();
    assert!(text.contains(r#""approval_strength":"tap""#), "{text}");
    // A verifier shown another strength would check different bytes.
    let other = text.replace(
        r#""approval_strength":"tap""#,
        r#""approval_strength":"biometric""#,
    );
    let ok = sig_ok(key().verifying_key());
    assert!(ok(&payload, tok.signature.as_slice()));
    assert!(!ok(other.as_bytes(), tok.signature.as_slice()));
}

#[test]
fn baseline_verifies_and_every_table_entry_applies() {
    let (item, tok) = signed(&base_goal());
    verify(&tok, &item).unwrap();
    assert_eq!(mutable_signed_fields().len(), TOKEN_SIGNED_FIELDS.len() - 1);
    for f in mutable_signed_fields() {
        let mut t = tok.clone();
        mutate_signed(&mut t, f, "x");
        assert!(verify(&t, &item).is_err(), "changing {f} still verified");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_flipped_signature_byte_fails(idx in 0usize..64, bit in 0u8..8) {
        let (item, mut tok) = signed(&base_goal());
        tok.signature.0[idx] ^= 1 << bit;
        prop_assert_eq!(verify(&tok, &item), Err(Denial::BadSignature));
    }

    #[test]
    fn truncated_or_extended_signatures_fail(len in 0usize..80) {
        prop_assume!(len != 64);
        let (item, mut tok) = signed(&base_goal());
        tok.signature.0.resize(len, 0);
        prop_assert_eq!(verify(&tok, &item), Err(Denial::BadSignature));
    }

    #[test]
    fn any_changed_signed_field_fails(idx in 0..TOKEN_SIGNED_FIELDS.len() - 1, s in "[a-z0-9]{0,8}") {
        let field = mutable_signed_fields()[idx];
        let (item, mut tok) = signed(&base_goal());
        mutate_signed(&mut tok, field, &s);
        prop_assert_eq!(verify(&tok, &item), Err(Denial::BadSignature), "field {}", field);
    }

    #[test]
    fn any_changed_included_work_item_field_fails(idx in 0..PLAN_HASH_INCLUDED.len(), s in "[a-zA-Z0-9 é_-]{0,16}") {
        let base = base_goal();
        let (_, tok) = signed(&base);
        let mut changed = base.clone();
        mutate_included(&mut changed, PLAN_HASH_INCLUDED[idx], &s);
        let item: WorkItem = serde_json::from_value(changed).unwrap();
        let r = verify(&tok, &item);
        prop_assert!(
            matches!(r, Err(Denial::PlanHashMismatch) | Err(Denial::WrongWorkItem { .. })),
            "field {} gave {:?}", PLAN_HASH_INCLUDED[idx], r
        );
    }

    #[test]
    fn changed_excluded_fields_still_verify(
        picks in proptest::collection::vec(0..PLAN_HASH_EXCLUDED.len(), 1..8),
        n in 0u64..1_000_000,
    ) {
        let base = base_goal();
        let (_, tok) = signed(&base);
        let mut changed = base.clone();
        for i in picks {
            mutate_excluded(&mut changed, PLAN_HASH_EXCLUDED[i], n);
        }
        let item: WorkItem = serde_json::from_value(changed).unwrap();
        prop_assert_eq!(verify(&tok, &item), Ok(()));
    }

    #[test]
    fn runtime_counters_are_outside_the_signature(used in 0u64..1, nonces in proptest::collection::vec("[a-f0-9]{8}", 0..3)) {
        let (item, mut tok) = signed(&base_goal());
        tok.executions_used = used;
        tok.execution_nonces = nonces;
        prop_assert_eq!(verify(&tok, &item), Ok(()));
    }
}

#[test]
fn needs_approval_override_table() {
    // §3.2 / §5.1.2: the agent's needs_approval=false is honoured only when a
    // valid token already exists.
    let cases = [
        (true, false, true),
        (true, true, true),
        (false, false, true),
        (false, true, false),
    ];
    for (agent_says, has_valid_token, want) in cases {
        assert_eq!(
            approval::effective_needs_approval(agent_says, has_valid_token),
            want
        );
    }
}

/// `check_standing`, the per-cycle check of a goal's own standing token:
/// every refusal it must make, and no consumption needed to pass.
#[test]
fn check_standing_refuses_expired_tampered_rebound_and_overused_tokens() {
    let goal: WorkItem = serde_json::from_value(base_goal()).unwrap();
    let decision: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "approved"})).unwrap();
    let mut tok = approval::unsigned_token(
        Subject::WorkItem(&goal),
        &decision,
        ApprovalScope::Standing,
        &IssuePolicy::default(),
        now(),
        "tok-s".into(),
        "nonce-s".into(),
    )
    .unwrap();
    let payload = projections::token_signing_payload(&tok).unwrap();
    tok.signature = Base64Bytes(key().sign(&payload).to_bytes().to_vec());
    let ok = sig_ok(key().verifying_key());
    let check =
        |t: &ApprovalToken, g: &WorkItem, at: Timestamp| approval::check_standing(t, g, at, &ok);
    // Fresh and never consumed: passes (a cycle consumes nothing).
    assert_eq!(check(&tok, &goal, now()), Ok(()));
    // Expired.
    let later = tok.expires_at;
    assert!(matches!(check(&tok, &goal, later), Err(Denial::Expired(_))));
    // A signed field changed.
    let mut forged = tok.clone();
    forged.max_executions += 1;
    assert_eq!(check(&forged, &goal, now()), Err(Denial::BadSignature));
    // The goal changed since approval.
    let mut edited = goal.clone();
    edited.title.push_str(" and more");
    assert_eq!(check(&tok, &edited, now()), Err(Denial::PlanHashMismatch));
    // Another goal presenting this token.
    let mut other = goal.clone();
    other.id = "goal-other".into();
    assert!(matches!(
        check(&tok, &other, now()),
        Err(Denial::WrongWorkItem { .. })
    ));
    // Used up is still fine for the checks; past the maximum is not.
    let mut used = tok.clone();
    used.executions_used = used.max_executions;
    assert_eq!(check(&used, &goal, now()), Ok(()));
    used.executions_used += 1;
    assert!(matches!(
        check(&used, &goal, now()),
        Err(Denial::Exhausted { .. })
    ));
}

/// Issue #15: an apply (or undo) token binds the item, its plan hash, the
/// action and the exact change-set bytes; it is single-step only.
#[test]
fn a_change_set_token_authorises_exactly_its_bytes_and_action() {
    use silas_core::model::approval::{ChangesAction, ChangesApproval};
    let subject = ChangesApproval {
        work_item_id: "t1".into(),
        plan_hash: "p".repeat(64),
        action: ChangesAction::Apply,
        changes_sha256: "a".repeat(64),
    };
    let decision: ApprovalDecision =
        serde_json::from_value(json!({"verdict": "approved"})).unwrap();
    for scope in [ApprovalScope::FullPlan, ApprovalScope::Standing] {
        assert!(
            approval::unsigned_token(
                Subject::Changes(&subject),
                &decision,
                scope,
                &IssuePolicy::default(),
                now(),
                "t".into(),
                "n".into(),
            )
            .is_err(),
            "{scope:?}"
        );
    }
    let mut tok = approval::unsigned_token(
        Subject::Changes(&subject),
        &decision,
        ApprovalScope::SingleStep,
        &IssuePolicy::default(),
        now(),
        "tok-c".into(),
        "nonce-c".into(),
    )
    .unwrap();
    let payload = projections::token_signing_payload(&tok).unwrap();
    tok.signature = Base64Bytes(key().sign(&payload).to_bytes().to_vec());
    let ok = sig_ok(key().verifying_key());
    assert!(approval::authorize_subject(&tok, Subject::Changes(&subject), now(), &ok).is_ok());
    let other_bytes = ChangesApproval {
        changes_sha256: "b".repeat(64),
        ..subject.clone()
    };
    let undo = ChangesApproval {
        action: ChangesAction::Undo,
        ..subject.clone()
    };
    let other_plan = ChangesApproval {
        plan_hash: "q".repeat(64),
        ..subject.clone()
    };
    for s in [&other_bytes, &undo, &other_plan] {
        assert_eq!(
            approval::authorize_subject(&tok, Subject::Changes(s), now(), &ok),
            Err(Denial::PlanHashMismatch),
            "{s:?}"
        );
    }
    let other_item = ChangesApproval {
        work_item_id: "t2".into(),
        ..subject
    };
    assert!(matches!(
        approval::authorize_subject(&tok, Subject::Changes(&other_item), now(), &ok),
        Err(Denial::WrongWorkItem { .. })
    ));
}
