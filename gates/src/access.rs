//! The access controller (§4.11, §5.6, ADR-005): a per-connection state
//! machine from gate results to tool access. Fully deterministic; the model
//! cannot influence it.
//!
//! * The owner connection bypasses goal access levels ([`AllowedTools::All`]).
//! * `gate_passed` adds the gate to the verified set and moves to the
//!   highest level whose `requires` are *all* verified. Levels are ranked by
//!   how many gates they require (more = higher), ties by name; a level with
//!   no `requires` is never reached by transition (the default `public` is
//!   the start).
//! * `expires_after` (seconds) demotes to `public` on the next
//!   `allowed_tools`; the verified set and customer context are cleared too
//!   (resolution of a spec gap: keeping them would let the next passed gate
//!   silently restore the expired level without re-verification).
//! * Customer context is read only from `customer_context_dir`, as
//!   `<customer_id>.json`, with a strict id syntax, no symlinks, and a
//!   directory that group/others cannot write.
//!
//! Transitions and refusals are returned as audit events.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use silas_core::model::JsonObject;
use silas_core::model::gates::AccessLevel;

use crate::audit::{AuditEvent, names};

/// The default level every non-owner connection starts at.
pub const PUBLIC: &str = "public";
/// Largest customer context file read.
pub const MAX_CONTEXT_BYTES: u64 = 1024 * 1024;

/// Tools a connection may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedTools {
    /// The owner: every tool, access levels do not apply.
    All,
    Only(Vec<String>),
}

/// A connection's access state (§5.6 "State").
#[derive(Clone, Debug, PartialEq)]
pub struct AccessState {
    pub level: String,
    pub verified: BTreeSet<String>,
    pub customer_id: Option<String>,
    pub customer_context: Option<JsonObject>,
    pub granted_at: Option<DateTime<Utc>>,
}

impl Default for AccessState {
    fn default() -> Self {
        AccessState {
            level: PUBLIC.to_owned(),
            verified: BTreeSet::new(),
            customer_id: None,
            customer_context: None,
            granted_at: None,
        }
    }
}

/// Rank of a level: number of required gates (public and unknown: 0).
pub fn rank(levels: &BTreeMap<String, AccessLevel>, name: &str) -> usize {
    levels.get(name).map_or(0, |l| l.requires.len())
}

/// The highest level whose requirements are all in `verified`.
pub fn best_level<'a>(
    levels: &'a BTreeMap<String, AccessLevel>,
    verified: &BTreeSet<String>,
) -> Option<&'a str> {
    levels
        .iter()
        .filter(|(_, l)| !l.requires.is_empty() && l.requires.iter().all(|g| verified.contains(g)))
        .max_by(|(an, a), (bn, b)| a.requires.len().cmp(&b.requires.len()).then(bn.cmp(an)))
        .map(|(n, _)| n.as_str())
}

/// A level change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: String,
    pub to: String,
    pub reason: &'static str,
}

/// Pure `gate_passed` step: records the gate and transitions upward if a
/// higher level is now satisfied.
pub fn apply_gate_passed(
    state: &mut AccessState,
    levels: &BTreeMap<String, AccessLevel>,
    gate: &str,
    now: DateTime<Utc>,
) -> Option<Transition> {
    state.verified.insert(gate.to_owned());
    let best = best_level(levels, &state.verified)?;
    if best == state.level || rank(levels, best) <= rank(levels, &state.level) {
        return None;
    }
    let t = Transition {
        from: std::mem::replace(&mut state.level, best.to_owned()),
        to: best.to_owned(),
        reason: "gates_passed",
    };
    state.granted_at = Some(now);
    Some(t)
}

/// Pure expiry step: demotes to public if the current level has expired.
pub fn apply_expiry(
    state: &mut AccessState,
    levels: &BTreeMap<String, AccessLevel>,
    now: DateTime<Utc>,
) -> Option<Transition> {
    let secs = levels.get(&state.level)?.expires_after?;
    let granted = state.granted_at?;
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    // Expired at exactly `expires_after` seconds.
    if now < granted + Duration::try_seconds(secs).unwrap_or(Duration::MAX) {
        return None;
    }
    let from = std::mem::take(state).level;
    Some(Transition {
        from,
        to: PUBLIC.to_owned(),
        reason: "expired",
    })
}

/// A customer id usable as a file name: 1–128 of `[A-Za-z0-9_-]`.
pub fn customer_id_ok(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads `<dir>/<customer_id>.json` under the §5.6 constraints.
pub fn load_customer_context(dir: &Path, customer_id: &str) -> Result<JsonObject, String> {
    use std::os::unix::fs::PermissionsExt;
    if !customer_id_ok(customer_id) {
        return Err("invalid customer id".into());
    }
    let dmeta = std::fs::symlink_metadata(dir).map_err(|e| format!("customer_context_dir: {e}"))?;
    if !dmeta.is_dir() {
        return Err("customer_context_dir is not a directory".into());
    }
    if dmeta.permissions().mode() & 0o022 != 0 {
        return Err("customer_context_dir is writable by group or others".into());
    }
    let path = dir.join(format!("{customer_id}.json"));
    let fmeta = std::fs::symlink_metadata(&path).map_err(|e| format!("customer context: {e}"))?;
    if !fmeta.is_file() {
        return Err("customer context is not a regular file".into());
    }
    if fmeta.len() > MAX_CONTEXT_BYTES {
        return Err("customer context too large".into());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("customer context: {e}"))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err("customer context is not a JSON object".into()),
    }
}

/// One connection's controller.
#[derive(Clone, Debug)]
pub struct AccessController {
    connection_id: String,
    is_owner: bool,
    levels: BTreeMap<String, AccessLevel>,
    customer_context_dir: PathBuf,
    state: AccessState,
}

impl AccessController {
    /// `is_owner`: `connection_id == owner_id` or the message taint is
    /// verified `owner` (the caller decides; see [`Self::is_owner_connection`]).
    pub fn new(
        connection_id: impl Into<String>,
        is_owner: bool,
        levels: BTreeMap<String, AccessLevel>,
        customer_context_dir: PathBuf,
    ) -> Self {
        AccessController {
            connection_id: connection_id.into(),
            is_owner,
            levels,
            customer_context_dir,
            state: AccessState::default(),
        }
    }

    pub fn is_owner_connection(connection_id: &str, owner_id: &str) -> bool {
        !owner_id.is_empty() && connection_id == owner_id
    }

    pub fn state(&self) -> &AccessState {
        &self.state
    }

    /// Records a passed gate (§4.11). `customer_id` (if the gate verified an
    /// identity) selects the customer context loaded on a transition.
    pub fn gate_passed(
        &mut self,
        gate_name: &str,
        customer_id: Option<&str>,
        now: DateTime<Utc>,
    ) -> Vec<AuditEvent> {
        if self.is_owner {
            return Vec::new();
        }
        let mut audit = Vec::new();
        // A level that expired meanwhile must not be the base of a transition.
        audit.extend(self.expire(now));
        if let Some(id) = customer_id {
            self.state.customer_id = Some(id.to_owned());
        }
        if let Some(t) = apply_gate_passed(&mut self.state, &self.levels, gate_name, now) {
            if let Some(id) = self.state.customer_id.clone() {
                match load_customer_context(&self.customer_context_dir, &id) {
                    Ok(c) => self.state.customer_context = Some(c),
                    Err(e) => audit.push(AuditEvent::new(
                        names::ACCESS_CONTEXT_REFUSED,
                        [
                            ("connection_id", Value::from(self.connection_id.as_str())),
                            ("error", Value::from(e)),
                        ],
                    )),
                }
            }
            audit.push(self.transition_event(&t));
        }
        audit
    }

    /// Tools at the current level, after applying expiry (§4.11).
    pub fn allowed_tools(&mut self, now: DateTime<Utc>) -> (AllowedTools, Vec<AuditEvent>) {
        if self.is_owner {
            return (AllowedTools::All, Vec::new());
        }
        let audit: Vec<AuditEvent> = self.expire(now).into_iter().collect();
        let tools = self
            .levels
            .get(&self.state.level)
            .map(|l| l.tools.clone())
            .unwrap_or_default();
        (AllowedTools::Only(tools), audit)
    }

    /// Customer context, only once an identity-verifying level is held.
    pub fn customer_context(&self) -> Option<&JsonObject> {
        if self.state.level == PUBLIC {
            return None;
        }
        self.state.customer_context.as_ref()
    }

    /// Goal deactivated/changed: non-owner state starts over.
    pub fn reset(&mut self, levels: BTreeMap<String, AccessLevel>) {
        self.levels = levels;
        self.state = AccessState::default();
    }

    fn expire(&mut self, now: DateTime<Utc>) -> Option<AuditEvent> {
        let customer = self.state.customer_id.clone();
        apply_expiry(&mut self.state, &self.levels, now).map(|t| {
            let mut e = self.transition_event(&t);
            if let Some(c) = customer {
                e.data.insert("customer_id".into(), Value::from(c));
            }
            e
        })
    }

    fn transition_event(&self, t: &Transition) -> AuditEvent {
        let mut e = AuditEvent::new(
            names::ACCESS_TRANSITION,
            [
                ("connection_id", Value::from(self.connection_id.as_str())),
                ("from", Value::from(t.from.as_str())),
                ("to", Value::from(t.to.as_str())),
                ("reason", Value::from(t.reason)),
            ],
        );
        if let Some(c) = &self.state.customer_id {
            // GDPR: who was granted access to whose data.
            e.data.insert("customer_id".into(), Value::from(c.as_str()));
        }
        e
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
        m.insert(PUBLIC.into(), lvl(&["faq"], &[], None));
        m.insert(
            "verified".into(),
            lvl(&["faq", "order_status"], &["email_otp"], Some(600)),
        );
        m.insert(
            "account".into(),
            lvl(
                &["faq", "order_status", "refund"],
                &["email_otp", "sms_otp"],
                Some(300),
            ),
        );
        m
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn best_level_table() {
        let l = levels();
        let cases: &[(&[&str], Option<&str>)] = &[
            (&[], None),
            (&["sms_otp"], None),
            (&["email_otp"], Some("verified")),
            (&["email_otp", "sms_otp"], Some("account")),
            (&["email_otp", "sms_otp", "other"], Some("account")),
        ];
        for (v, want) in cases {
            assert_eq!(best_level(&l, &set(v)), *want, "{v:?}");
        }
    }

    #[test]
    fn transitions_only_upward_when_all_required_pass() {
        let l = levels();
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let mut s = AccessState::default();
        assert_eq!(apply_gate_passed(&mut s, &l, "sms_otp", t0), None);
        assert_eq!(s.level, PUBLIC);
        let t = apply_gate_passed(&mut s, &l, "email_otp", t0).unwrap();
        assert_eq!((t.from.as_str(), t.to.as_str()), (PUBLIC, "account"));
        assert_eq!(s.granted_at, Some(t0));
        // passing again changes nothing
        assert_eq!(apply_gate_passed(&mut s, &l, "email_otp", t0), None);
    }

    #[test]
    fn expiry_boundaries() {
        let l = levels();
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let mut s = AccessState::default();
        apply_gate_passed(&mut s, &l, "email_otp", t0);
        assert_eq!(s.level, "verified");
        assert_eq!(apply_expiry(&mut s, &l, t0 + Duration::seconds(599)), None);
        let t = apply_expiry(&mut s, &l, t0 + Duration::seconds(600)).unwrap();
        assert_eq!(t.reason, "expired");
        assert_eq!(s, AccessState::default());
        // public never expires
        assert_eq!(apply_expiry(&mut s, &l, t0 + Duration::days(365)), None);
    }

    #[test]
    fn customer_id_table() {
        for (id, ok) in [
            ("cust_42", true),
            ("A-b_9", true),
            ("", false),
            ("../etc/passwd", false),
            ("a/b", false),
            ("a.json", false),
            ("x y", false),
        ] {
            assert_eq!(customer_id_ok(id), ok, "{id}");
        }
        assert!(!customer_id_ok(&"a".repeat(129)));
    }
}
