//! Hash projections: field classification is complete, included fields bind,
//! excluded fields do not, and the spawn-policy/batch normalisation rules hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use silas_core::model::approval::ApprovalToken;
use silas_core::model::work::WorkItem;
use silas_core::projections::{
    self, PLAN_HASH_EXCLUDED, PLAN_HASH_INCLUDED, PLAN_HASH_INCLUDED_WHEN_SET,
};
use silas_core::{Timestamp, canonical};

mod common;
use common::{base_goal, mutate_excluded, mutate_included, token_json};

fn item(v: &Value) -> WorkItem {
    serde_json::from_value(v.clone()).unwrap()
}

fn plan_hash(v: &Value) -> String {
    projections::plan_hash(&item(v)).unwrap()
}

#[test]
fn every_work_item_field_is_classified_exactly_once() {
    let dumped = serde_json::to_value(item(&base_goal())).unwrap();
    let keys: BTreeSet<&str> = dumped
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let inc: BTreeSet<&str> = PLAN_HASH_INCLUDED.iter().copied().collect();
    let exc: BTreeSet<&str> = PLAN_HASH_EXCLUDED.iter().copied().collect();
    let when_set: BTreeSet<&str> = PLAN_HASH_INCLUDED_WHEN_SET.iter().copied().collect();
    assert!(inc.is_disjoint(&exc));
    assert!(when_set.is_disjoint(&exc) && when_set.is_disjoint(&inc));
    let all: BTreeSet<&str> = inc.union(&exc).copied().collect();
    assert_eq!(
        keys,
        all.union(&when_set).copied().collect(),
        "a WorkItem field is unclassified"
    );
}

#[test]
fn every_token_field_is_signed_or_runtime_managed() {
    let dumped =
        serde_json::to_value(serde_json::from_value::<ApprovalToken>(token_json()).unwrap())
            .unwrap();
    let keys: BTreeSet<&str> = dumped
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let signed: BTreeSet<&str> = projections::TOKEN_SIGNED_FIELDS.iter().copied().collect();
    let unsigned: BTreeSet<&str> = projections::TOKEN_UNSIGNED_FIELDS.iter().copied().collect();
    assert!(signed.is_disjoint(&unsigned));
    assert_eq!(keys, signed.union(&unsigned).copied().collect());
}

#[test]
fn plan_hash_is_sha256_of_the_canonical_projection() {
    let wi = item(&base_goal());
    let bytes = projections::plan_hash_bytes(&wi).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.starts_with("{\"access_levels\":{},\"agent\":\"ephemeral\",\"body\":"),
        "{text}"
    );
    for excluded in PLAN_HASH_EXCLUDED {
        assert!(
            !text.contains(&format!("\"{excluded}\":")),
            "{excluded} leaked into projection"
        );
    }
    assert_eq!(
        projections::plan_hash(&wi).unwrap(),
        canonical::sha256_hex(&bytes)
    );
}

/// The plan hash of `base_goal()`, pinned from before workspaces existed:
/// an unset `workspace` must leave every existing plan hash byte-identical.
const BASE_GOAL_PLAN_HASH: &str =
    "94b44cbdb6378a273c6cbd64853dae32369502389e734f4234cbcb588fa8b3a7";

#[test]
fn a_plan_without_a_workspace_keeps_its_hash() {
    assert_eq!(plan_hash(&base_goal()), BASE_GOAL_PLAN_HASH);
    let mut explicit_null = base_goal();
    explicit_null["workspace"] = Value::Null;
    assert_eq!(plan_hash(&explicit_null), BASE_GOAL_PLAN_HASH);
    let text =
        String::from_utf8(projections::plan_hash_bytes(&item(&base_goal())).unwrap()).unwrap();
    assert!(!text.contains("\"workspace\""), "{text}");
}

#[test]
fn every_workspace_field_is_bound_by_the_plan_hash() {
    let mut with = base_goal();
    with["workspace"] = json!({"name": "proj"});
    let base = plan_hash(&with);
    assert_ne!(
        base, BASE_GOAL_PLAN_HASH,
        "naming a workspace changes the hash"
    );
    let changes = [
        ("name", json!("other")),
        ("access", json!("write")),
        ("extra_paths", json!(["/opt/venv"])),
        ("protected", json!(["*.lock"])),
        ("allow_protected_edits", json!(true)),
        ("apply", json!("direct")),
        ("commit_message", json!("fix: tests")),
    ];
    let mut seen = BTreeSet::new();
    for (field, value) in changes {
        let mut changed = with.clone();
        changed["workspace"][field] = value;
        let h = plan_hash(&changed);
        assert_ne!(h, base, "workspace.{field} is not bound");
        assert!(seen.insert(h), "workspace.{field} collides");
    }
    // Every field of the use is in the table above.
    let dumped = serde_json::to_value(item(&with).workspace.unwrap()).unwrap();
    assert_eq!(dumped.as_object().unwrap().len(), seen.len());
}

/// Issue #17: skill content hashes join the plan hash only when a plan
/// binds them; the pinned hash above (a goal naming skills, bound to none)
/// is unchanged, and each bound hash is covered.
#[test]
fn skill_hashes_are_bound_only_when_set() {
    let mut explicit_null = base_goal();
    explicit_null["skill_hashes"] = Value::Null;
    assert_eq!(plan_hash(&explicit_null), BASE_GOAL_PLAN_HASH);
    let text =
        String::from_utf8(projections::plan_hash_bytes(&item(&base_goal())).unwrap()).unwrap();
    assert!(!text.contains("skill_hashes"), "{text}");
    let mut bound = base_goal();
    bound["skill_hashes"] = json!({"coding": "a".repeat(64), "ops": "b".repeat(64)});
    let h = plan_hash(&bound);
    assert_ne!(h, BASE_GOAL_PLAN_HASH, "binding skills changes the hash");
    let mut changed = bound.clone();
    changed["skill_hashes"]["ops"] = json!("c".repeat(64));
    assert_ne!(
        plan_hash(&changed),
        h,
        "a skill's new content is a new plan"
    );
}

#[test]
fn mutation_tables_cover_every_field() {
    for f in PLAN_HASH_INCLUDED {
        let mut v = base_goal();
        mutate_included(&mut v, f, "x");
        item(&v);
    }
    for f in PLAN_HASH_EXCLUDED {
        let mut v = base_goal();
        mutate_excluded(&mut v, f, 1);
        item(&v);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn changing_an_included_field_changes_the_plan_hash(
        idx in 0..PLAN_HASH_INCLUDED.len(),
        s in "[a-zA-Z0-9 é日🙂_.-]{0,24}",
    ) {
        let base = base_goal();
        let mut changed = base.clone();
        mutate_included(&mut changed, PLAN_HASH_INCLUDED[idx], &s);
        prop_assert_ne!(plan_hash(&base), plan_hash(&changed), "field {}", PLAN_HASH_INCLUDED[idx]);
    }

    #[test]
    fn changing_excluded_fields_keeps_the_plan_hash(
        picks in proptest::collection::vec(0..PLAN_HASH_EXCLUDED.len(), 1..8),
        n in 0u64..1_000_000,
    ) {
        let base = base_goal();
        let mut changed = base.clone();
        for i in picks {
            mutate_excluded(&mut changed, PLAN_HASH_EXCLUDED[i], n);
        }
        prop_assert_eq!(plan_hash(&base), plan_hash(&changed));
    }

    #[test]
    fn batch_hash_binds_order_membership_and_action(
        ids in proptest::collection::vec("[a-z0-9]{1,6}", 2..10),
    ) {
        let h = projections::batch_hash("g", "archive", &ids).unwrap();
        prop_assert_eq!(&h, &projections::batch_hash("g", "archive", &ids).unwrap());
        prop_assert_ne!(&h, &projections::batch_hash("g", "delete", &ids).unwrap());
        prop_assert_ne!(&h, &projections::batch_hash("g2", "archive", &ids).unwrap());
        let mut fewer = ids.clone();
        fewer.pop();
        prop_assert_ne!(&h, &projections::batch_hash("g", "archive", &fewer).unwrap());
        let mut rotated = ids.clone();
        rotated.rotate_left(1);
        if rotated != ids {
            prop_assert_ne!(&h, &projections::batch_hash("g", "archive", &rotated).unwrap());
        }
    }
}

#[test]
fn spawn_policy_hash_normalises_lists_and_ignores_unreferenced_escalations() {
    let base = base_goal();
    let h = projections::spawn_policy_hash(&item(&base)).unwrap();

    let mut reordered = base.clone();
    reordered["skills"] = json!(["ops", "coding", "ops"]);
    let gates = reordered["gates"].as_array().unwrap().clone();
    reordered["gates"] = json!([gates[1], gates[0]]);
    let verify = reordered["verify"].as_array().unwrap().clone();
    reordered["verify"] = json!([verify[1], verify[0]]);
    assert_eq!(
        projections::spawn_policy_hash(&item(&reordered)).unwrap(),
        h
    );

    // Escalations nobody references, and plan fields outside the policy, do not bind.
    let mut unrelated = base.clone();
    unrelated["escalation"]["unused"]["max_retries"] = json!(9);
    unrelated["title"] = json!("renamed");
    unrelated["body"] = json!("another briefing");
    assert_eq!(
        projections::spawn_policy_hash(&item(&unrelated)).unwrap(),
        h
    );

    for change in [
        json!({"failure_context": "Fix: $failed_checks now"}),
        json!({"skills": ["coding"]}),
    ] {
        let mut v = base.clone();
        for (k, val) in change.as_object().unwrap() {
            v[k] = val.clone();
        }
        assert_ne!(
            projections::spawn_policy_hash(&item(&v)).unwrap(),
            h,
            "{change}"
        );
    }
    let mut esc = base.clone();
    esc["escalation"]["page_owner"]["message"] = json!("changed"); // referenced by a gate's on_block
    assert_ne!(projections::spawn_policy_hash(&item(&esc)).unwrap(), h);
    let mut esc = base.clone();
    esc["escalation"]["report"]["message"] = json!("changed"); // referenced by on_failure
    assert_ne!(projections::spawn_policy_hash(&item(&esc)).unwrap(), h);
    let mut gate = base.clone();
    gate["gates"][0]["auto_approve"]["max"] = json!(50.0);
    assert_ne!(projections::spawn_policy_hash(&item(&gate)).unwrap(), h);
    let mut check = base;
    check["verify"][0]["expect"] = json!({"exit_code": 1});
    assert_ne!(projections::spawn_policy_hash(&item(&check)).unwrap(), h);
}

#[test]
fn spawn_policy_projection_shape() {
    let bytes = projections::spawn_policy_bytes(&item(&base_goal())).unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        v["failure_context_template"],
        "Fix these failures: $failed_checks"
    );
    assert_eq!(v["skills"], json!(["coding", "ops"]));
    assert_eq!(v["gates"].as_array().unwrap().len(), 2);
    assert!(
        v["gates"][0].is_string(),
        "gates are canonical JSON strings"
    );
    let esc: Vec<&String> = v["escalation_config"].as_object().unwrap().keys().collect();
    assert_eq!(esc, vec!["page_owner", "report"]);
}

#[test]
fn token_payload_covers_signed_fields_only() {
    let mut t: ApprovalToken = serde_json::from_value(token_json()).unwrap();
    let p = projections::token_signing_payload(&t).unwrap();
    t.executions_used = 5;
    t.execution_nonces.push("e".into());
    t.signature = silas_core::Base64Bytes(vec![9; 64]);
    assert_eq!(projections::token_signing_payload(&t).unwrap(), p);
    t.max_executions = 11;
    assert_ne!(projections::token_signing_payload(&t).unwrap(), p);
}

#[test]
fn signed_message_payload_is_canonical_json() {
    let ts = Timestamp::parse("2026-01-15T10:00:00Z").unwrap();
    let p = projections::signed_message_payload("Deploy ✅ \"now\"", &ts, "n-1").unwrap();
    assert_eq!(
        String::from_utf8(p).unwrap(),
        r#"{"nonce":"n-1","text":"Deploy ✅ \"now\"","timestamp":"2026-01-15T10:00:00Z"}"#
    );
}

#[test]
fn autonomy_binding_covers_changes_and_evidence() {
    let p: silas_core::model::review::AutonomyThresholdProposal = serde_json::from_value(json!({
        "proposal_id": "ap-1", "scope_id": "owner", "goal_id": "g-1",
        "changes": [
            {"key": "standing.max_executions", "current_value": "10", "proposed_value": "20", "direction": "widen"},
            {"key": "batch_review.default_size", "current_value": "10", "proposed_value": "15", "direction": "widen"},
        ],
        "sample_size": 50, "correction_rate": 0.02, "evidence_window": "last 50 batches / 14 days",
        "rationale": "few corrections", "risk_level": "medium",
    }))
    .unwrap();
    let h = projections::autonomy_threshold_hash(&p).unwrap();
    let mut q = p.clone();
    q.rationale = "other words".into();
    q.proposal_id = "ap-2".into();
    assert_eq!(
        projections::autonomy_threshold_hash(&q).unwrap(),
        h,
        "metadata outside the binding"
    );
    let mut q = p.clone();
    q.changes.reverse();
    assert_ne!(
        projections::autonomy_threshold_hash(&q).unwrap(),
        h,
        "order binds"
    );
    let mut q = p.clone();
    q.changes[0].proposed_value = "21".into();
    assert_ne!(projections::autonomy_threshold_hash(&q).unwrap(), h);
    let mut q = p.clone();
    q.sample_size = 51;
    assert_ne!(projections::autonomy_threshold_hash(&q).unwrap(), h);
    let mut q = p;
    q.correction_rate = 0.03;
    assert_ne!(projections::autonomy_threshold_hash(&q).unwrap(), h);
}

#[test]
fn audit_checkpoint_payload_is_canonical_and_domain_separated() {
    let at = Timestamp::parse("2026-01-15T10:00:00.5Z").unwrap();
    let bytes = projections::audit_checkpoint_payload("cp-7-abc", 7, "ab12", &at).unwrap();
    assert_eq!(
        String::from_utf8(bytes.clone()).unwrap(),
        r#"{"checkpoint_id":"cp-7-abc","created_at":"2026-01-15T10:00:00.500000Z","head_hash":"ab12","head_seq":7,"purpose":"silas.audit_checkpoint.v1"}"#
    );
    // Every covered field binds.
    for other in [
        projections::audit_checkpoint_payload("cp-7-abd", 7, "ab12", &at),
        projections::audit_checkpoint_payload("cp-7-abc", 8, "ab12", &at),
        projections::audit_checkpoint_payload("cp-7-abc", 7, "ab13", &at),
        projections::audit_checkpoint_payload("cp-7-abc", 7, "ab12", &Timestamp::now()),
    ] {
        assert_ne!(other.unwrap(), bytes);
    }
    // No approval-token payload can equal a checkpoint payload: tokens have
    // no `purpose` field.
    assert!(!projections::TOKEN_SIGNED_FIELDS.contains(&"purpose"));
}
