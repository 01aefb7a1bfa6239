//! §5.10.2 "Gate integration" (issue #17): the `connection_permission`
//! policy check. Before a connection skill's script runs, the permissions
//! the skill declares for it (`script_permissions` in SKILL.md) are compared
//! with the connection's `permissions_granted`; anything beyond pauses the
//! call for the owner's escalation card ([`super::escalation`]):
//!
//! * `approve` — re-authorisation with the extra scopes; the record's
//!   `permissions_granted` grows; the call runs.
//! * `just_this_once` — the call runs; the record is not changed, so the
//!   next call asks again.
//! * `deny` (and every safe default) — the call fails with
//!   `E_GATE_BLOCKED`, nothing runs.
//!
//! The card's risk is deterministic ([`risk_level`]): `medium` when every
//! requested permission is on a resource type the connection already has
//! (read → write on the same resource), `high` for a new resource type.

use std::sync::Arc;

use crate::channel::BoxFuture;
use silas_core::ErrorCode;
use silas_core::model::connections::Connection;
use silas_core::risk::RiskLevel;

use super::escalation::{EscalationDecision, escalate_permission};
use super::runtime::{ConnectionRuntime, ConnectionSetupError};

/// A permission's resource type: what comes before its first `.` or `:`
/// (`Mail.ReadWrite` → `Mail`, `profile.read` → `profile`).
pub fn resource_of(permission: &str) -> &str {
    permission.split(['.', ':']).next().unwrap_or(permission)
}

/// The escalation card's risk (§5.10.2 table).
pub fn risk_level(granted: &[String], requested: &[String]) -> RiskLevel {
    let same_resource = requested.iter().all(|r| {
        granted
            .iter()
            .any(|g| resource_of(g).eq_ignore_ascii_case(resource_of(r)))
    });
    if same_resource {
        RiskLevel::Medium
    } else {
        RiskLevel::High
    }
}

/// What the gate needs from the connection layer (the daemon's
/// [`ConnectionRuntime`]; tests script it).
pub trait PermissionEscalator: Send + Sync {
    /// The connection set up with `skill`, if any.
    fn connection_of(&self, skill: &str) -> Result<Option<Connection>, ConnectionSetupError>;
    /// Ask the owner for `missing` on `conn` and act on the answer
    /// (`Approve` only once the re-authorisation completed).
    fn escalate(
        &self,
        conn: Connection,
        missing: Vec<String>,
        reason: String,
    ) -> BoxFuture<'_, Result<EscalationDecision, ConnectionSetupError>>;
}

impl PermissionEscalator for Arc<ConnectionRuntime> {
    fn connection_of(&self, skill: &str) -> Result<Option<Connection>, ConnectionSetupError> {
        let all = self
            .store()
            .records::<Connection>()
            .list()
            .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
        Ok(all.into_iter().find(|c| c.skill_name == skill))
    }

    fn escalate(
        &self,
        conn: Connection,
        missing: Vec<String>,
        reason: String,
    ) -> BoxFuture<'_, Result<EscalationDecision, ConnectionSetupError>> {
        Box::pin(
            async move { escalate_permission(self, &conn.connection_id, missing, &reason).await },
        )
    }
}

/// The gate's verdict on one script run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermissionVerdict {
    /// Nothing beyond the grant (or the owner approved it for good).
    Granted,
    /// `just_this_once`: this run only, the record unchanged.
    GrantedOnce(Vec<String>),
    /// Refused: the reason carries its `E_` code.
    Refused(String),
}

/// The `connection_permission` check for `script` of `skill`, which
/// requires `required`.
pub async fn check(
    escalator: Option<&dyn PermissionEscalator>,
    skill: &str,
    script: &str,
    required: &[String],
) -> PermissionVerdict {
    if required.is_empty() {
        return PermissionVerdict::Granted;
    }
    let blocked = |why: String| {
        PermissionVerdict::Refused(format!(
            "{}: connection_permission: {why}",
            ErrorCode::EGateBlocked
        ))
    };
    let Some(escalator) = escalator else {
        return blocked(format!(
            "{skill} needs {required:?} and no connection manager is running"
        ));
    };
    let conn = match escalator.connection_of(skill) {
        Ok(Some(c)) => c,
        Ok(None) => return blocked(format!("{skill} has no connection set up")),
        Err(e) => return blocked(format!("connection of {skill} unreadable: {e}")),
    };
    let missing: Vec<String> = required
        .iter()
        .filter(|p| !conn.permissions_granted.contains(p))
        .cloned()
        .collect();
    if missing.is_empty() {
        return PermissionVerdict::Granted;
    }
    let reason = format!("{script} of {skill} needs {}", missing.join(", "));
    match escalator.escalate(conn, missing.clone(), reason).await {
        Ok(EscalationDecision::Approve) => PermissionVerdict::Granted,
        Ok(EscalationDecision::JustThisOnce) => PermissionVerdict::GrantedOnce(missing),
        Ok(EscalationDecision::Deny) => blocked(format!(
            "the owner denied {} for {skill}; the script did not run",
            missing.join(", ")
        )),
        Err(e) => blocked(format!(
            "escalation of {} for {skill} failed ({e}); the script did not run",
            missing.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn read_to_write_on_a_granted_resource_is_medium_a_new_resource_high() {
        assert_eq!(
            risk_level(&v(&["Mail.Read"]), &v(&["Mail.ReadWrite"])),
            RiskLevel::Medium
        );
        assert_eq!(
            risk_level(&v(&["profile.read"]), &v(&["profile.write"])),
            RiskLevel::Medium
        );
        assert_eq!(
            risk_level(&v(&["Mail.Read"]), &v(&["Mail.Send", "Calendars.Read"])),
            RiskLevel::High
        );
        assert_eq!(risk_level(&[], &v(&["Mail.Read"])), RiskLevel::High);
        assert_eq!(resource_of("repo:status"), "repo");
    }

    /// A connection layer answering with `decision`, recording what it was
    /// asked.
    struct Scripted {
        conn: Option<Connection>,
        decision: EscalationDecision,
        asked: std::sync::Mutex<Vec<Vec<String>>>,
    }

    impl PermissionEscalator for Scripted {
        fn connection_of(&self, skill: &str) -> Result<Option<Connection>, ConnectionSetupError> {
            Ok(self.conn.clone().filter(|c| c.skill_name == skill))
        }
        fn escalate(
            &self,
            _conn: Connection,
            missing: Vec<String>,
            _reason: String,
        ) -> BoxFuture<'_, Result<EscalationDecision, ConnectionSetupError>> {
            self.asked.lock().unwrap().push(missing);
            let d = self.decision;
            Box::pin(async move { Ok(d) })
        }
    }

    fn scripted(decision: EscalationDecision) -> Scripted {
        let conn: Connection = serde_json::from_value(serde_json::json!({
            "connection_id": "c1", "name": "Mail", "domain": "personal",
            "skill_name": "mail", "auth_strategy": "device_code",
            "permissions_granted": ["Mail.Read"],
            "permissions_available": ["Mail.Read", "Mail.ReadWrite"],
            "health_check": ""
        }))
        .unwrap();
        Scripted {
            conn: Some(conn),
            decision,
            asked: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_script_beyond_the_grant_asks_and_the_answer_decides() {
        let need = v(&["Mail.Read", "Mail.ReadWrite"]);
        let s = scripted(EscalationDecision::Deny);
        let PermissionVerdict::Refused(why) = check(Some(&s), "mail", "send.py", &need).await
        else {
            panic!("deny must refuse")
        };
        assert!(
            why.starts_with("E_GATE_BLOCKED: connection_permission:"),
            "{why}"
        );
        assert_eq!(*s.asked.lock().unwrap(), vec![v(&["Mail.ReadWrite"])]);
        let s = scripted(EscalationDecision::JustThisOnce);
        assert_eq!(
            check(Some(&s), "mail", "send.py", &need).await,
            PermissionVerdict::GrantedOnce(v(&["Mail.ReadWrite"]))
        );
        let s = scripted(EscalationDecision::Approve);
        assert_eq!(
            check(Some(&s), "mail", "send.py", &need).await,
            PermissionVerdict::Granted
        );
        // Within the grant: nobody is asked.
        let s = scripted(EscalationDecision::Deny);
        assert_eq!(
            check(Some(&s), "mail", "read.py", &v(&["Mail.Read"])).await,
            PermissionVerdict::Granted
        );
        assert!(s.asked.lock().unwrap().is_empty());
        // No connection set up, or no connection layer: refused, unasked.
        assert!(matches!(
            check(Some(&s), "other", "x.py", &need).await,
            PermissionVerdict::Refused(_)
        ));
        assert!(matches!(
            check(None, "mail", "send.py", &need).await,
            PermissionVerdict::Refused(_)
        ));
        assert!(s.asked.lock().unwrap().is_empty());
    }
}
