//! §14 "Access controller": levels reached only when all required gates
//! passed, expiry demotion, tool lists, owner bypass, customer context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use chrono::{DateTime, Duration, Utc};
use silas_core::model::gates::AccessLevel;
use silas_gates::audit::names;
use silas_gates::{AccessController, AllowedTools};

fn lvl(tools: &[&str], requires: &[&str], expires: Option<u64>) -> AccessLevel {
    AccessLevel {
        description: String::new(),
        tools: tools.iter().map(|s| s.to_string()).collect(),
        requires: requires.iter().map(|s| s.to_string()).collect(),
        expires_after: expires,
    }
}

fn levels() -> BTreeMap<String, AccessLevel> {
    let mut m = BTreeMap::new();
    m.insert("public".into(), lvl(&["faq"], &[], None));
    m.insert(
        "customer".into(),
        lvl(
            &["faq", "orders"],
            &["email_otp", "order_number"],
            Some(900),
        ),
    );
    m
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn only(tools: &[&str]) -> AllowedTools {
    AllowedTools::Only(tools.iter().map(|s| s.to_string()).collect())
}

#[test]
fn level_needs_all_gates_and_expires() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        dir.path().join("c42.json"),
        r#"{"name": "Ada", "tier": "gold"}"#,
    )
    .unwrap();
    let mut ac = AccessController::new("conn-1", false, levels(), dir.path().to_path_buf());
    assert_eq!(ac.allowed_tools(t0()).0, only(&["faq"]));

    let audit = ac.gate_passed("email_otp", Some("c42"), t0());
    assert!(audit.is_empty());
    assert_eq!(ac.allowed_tools(t0()).0, only(&["faq"]));
    assert!(ac.customer_context().is_none());

    let audit = ac.gate_passed("order_number", None, t0());
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].event, names::ACCESS_TRANSITION);
    assert_eq!(audit[0].data["to"], "customer");
    assert_eq!(audit[0].data["customer_id"], "c42");
    assert_eq!(ac.allowed_tools(t0()).0, only(&["faq", "orders"]));
    assert_eq!(ac.customer_context().unwrap()["tier"], "gold");

    let (tools, audit) = ac.allowed_tools(t0() + Duration::seconds(899));
    assert_eq!(tools, only(&["faq", "orders"]));
    assert!(audit.is_empty());
    let (tools, audit) = ac.allowed_tools(t0() + Duration::seconds(900));
    assert_eq!(tools, only(&["faq"]));
    assert_eq!(audit[0].data["reason"], "expired");
    assert!(ac.customer_context().is_none());
    // Re-verification needed: one gate is not enough after demotion.
    assert!(
        ac.gate_passed("order_number", None, t0() + Duration::seconds(901))
            .is_empty()
    );
    assert_eq!(
        ac.allowed_tools(t0() + Duration::seconds(901)).0,
        only(&["faq"])
    );
}

#[test]
fn owner_bypasses_levels() {
    let dir = tempfile::tempdir().unwrap();
    assert!(AccessController::is_owner_connection("owner", "owner"));
    assert!(!AccessController::is_owner_connection("x", "owner"));
    assert!(!AccessController::is_owner_connection("", ""));
    let mut ac = AccessController::new("owner", true, levels(), dir.path().to_path_buf());
    assert_eq!(ac.allowed_tools(t0()).0, AllowedTools::All);
    assert!(ac.gate_passed("email_otp", None, t0()).is_empty());
    assert_eq!(
        ac.allowed_tools(t0() + Duration::days(30)).0,
        AllowedTools::All
    );
}

#[test]
fn customer_context_only_from_a_safe_dir() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("evil.json"), r#"{"x": 1}"#).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("evil.json"),
        dir.path().join("link.json"),
    )
    .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    for id in ["../x", "link", "missing"] {
        let mut ac = AccessController::new("c", false, levels(), dir.path().to_path_buf());
        ac.gate_passed("email_otp", Some(id), t0());
        let audit = ac.gate_passed("order_number", None, t0());
        assert_eq!(audit[0].event, names::ACCESS_CONTEXT_REFUSED, "{id}");
        assert!(ac.customer_context().is_none(), "{id}");
        // Access itself is still granted: the gates passed.
        assert_eq!(ac.allowed_tools(t0()).0, only(&["faq", "orders"]));
    }
    // A world-writable directory is refused.
    std::fs::write(dir.path().join("ok.json"), "{}").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut ac = AccessController::new("c", false, levels(), dir.path().to_path_buf());
    ac.gate_passed("email_otp", Some("ok"), t0());
    let audit = ac.gate_passed("order_number", None, t0());
    assert!(
        audit[0].data["error"]
            .as_str()
            .unwrap()
            .contains("writable")
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn reset_clears_non_owner_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut ac = AccessController::new("c", false, levels(), dir.path().to_path_buf());
    ac.gate_passed("email_otp", None, t0());
    ac.gate_passed("order_number", None, t0());
    assert_eq!(ac.state().level, "customer");
    ac.reset(levels());
    assert_eq!(ac.state().level, "public");
    assert!(ac.state().verified.is_empty());
}
