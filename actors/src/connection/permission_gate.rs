//! §5.10.2 "Gate integration" (issue #17): the `connection_permission`
//! policy check. Before a connection skill's script runs, the permissions
//! the skill declares for it (`script_permissions` in SKILL.md) are compared
//! with the connection's `permissions_granted`; anything beyond pauses the
//! call for the owner's escalation card ([`super::escalation`]):
//!
//! * `approve` — re-authorisation with the extra scopes; the record's
//!   `permissions_granted` grows; the call runs.
//! * `just_this_once` — a single-use approval token (scope
//!   `connection_act`, `max_executions = 1`) is minted for the owner's
//!   answer, bound to the connection, the permissions and this one script
//!   call ([`ConnectionPermissionApproval`]), and consumed by the
//!   ApprovalEngine right before the call runs; the record is not changed,
//!   so the next call asks again (and a replay of the token is refused).
//! * `deny` (and every safe default) — the call fails with
//!   `E_GATE_BLOCKED`, nothing runs.
//!
//! The card's risk is deterministic ([`risk_level`]): `medium` when every
//! requested permission is on a resource type the connection already has
//! (read → write on the same resource), `high` for a new resource type.

use std::sync::Arc;

use crate::approval::{AnswerOrigin, ApprovalError, ApprovalService};
use crate::channel::BoxFuture;
use silas_core::approval::Subject;
use silas_core::model::JsonObject;
use silas_core::model::approval::{
    ApprovalDecision, ApprovalScope, ApprovalStrength, ApprovalToken, ApprovalVerdict,
    ConnectionPermissionApproval,
};
use silas_core::model::connections::Connection;
use silas_core::risk::RiskLevel;
use silas_core::{Coded, ErrorCode, Timestamp};

use super::escalation::{EscalationAnswer, EscalationDecision, escalate_permission};
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
    ) -> BoxFuture<'_, Result<EscalationAnswer, ConnectionSetupError>>;
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
    ) -> BoxFuture<'_, Result<EscalationAnswer, ConnectionSetupError>> {
        Box::pin(
            async move { escalate_permission(self, &conn.connection_id, missing, &reason).await },
        )
    }
}

/// The one script call the gate decides about.
#[derive(Clone, Copy, Debug)]
pub struct ScriptCall<'a> {
    pub work_item_id: &'a str,
    pub execution_id: &'a str,
    pub skill: &'a str,
    pub script: &'a str,
    pub arguments: &'a JsonObject,
}

impl ScriptCall<'_> {
    /// The subject a grant for this call binds.
    pub fn grant(
        &self,
        connection_id: &str,
        permissions: &[String],
    ) -> ConnectionPermissionApproval {
        ConnectionPermissionApproval {
            connection_id: connection_id.to_string(),
            permissions: permissions.to_vec(),
            work_item_id: self.work_item_id.to_string(),
            execution_id: self.execution_id.to_string(),
            skill: self.skill.to_string(),
            script: self.script.to_string(),
            arguments: serde_json::Value::Object(self.arguments.clone()),
        }
    }
}

fn owner_approved() -> ApprovalDecision {
    ApprovalDecision {
        verdict: ApprovalVerdict::Approved,
        approval_strength: ApprovalStrength::Tap,
        conditions: JsonObject::new(),
    }
}

/// `[Just this once]`: mint the single-use token for the owner's answer
/// (the engine checks `origin` is a live owner connection) and consume its
/// one execution now, for exactly `grant`. A second consumption of the same
/// token — a replay — is refused by the engine (`executions_used` is
/// already `max_executions`).
pub fn grant_once(
    approvals: &ApprovalService,
    grant: &ConnectionPermissionApproval,
    origin: &AnswerOrigin,
) -> Result<ApprovalToken, ApprovalError> {
    let now = Timestamp::now();
    let subject = Subject::ConnectionPermission(grant);
    let token = approvals.issue_token(
        subject,
        &owner_approved(),
        ApprovalScope::ConnectionAct,
        origin,
        now,
    )?;
    approvals.verify_subject(&token, subject, now)
}

/// The gate's verdict on one script run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermissionVerdict {
    /// Nothing beyond the grant (or the owner approved it for good).
    Granted,
    /// `just_this_once`: this run only, the record unchanged; the
    /// single-use token that authorised it (already consumed).
    GrantedOnce {
        permissions: Vec<String>,
        token_id: String,
    },
    /// Refused: the reason carries its `E_` code.
    Refused(String),
}

/// The `connection_permission` check for `call`, whose script requires
/// `required`. `approvals` mints and consumes `[Just this once]` tokens
/// (`None`: such an answer is refused).
pub async fn check(
    escalator: Option<&dyn PermissionEscalator>,
    approvals: Option<&ApprovalService>,
    call: &ScriptCall<'_>,
    required: &[String],
) -> PermissionVerdict {
    let (skill, script) = (call.skill, call.script);
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
    let connection_id = conn.connection_id.clone();
    let answer = escalator.escalate(conn, missing.clone(), reason).await;
    match answer.as_ref().map(|a| a.decision) {
        Ok(EscalationDecision::Approve) => {
            // §5.10.2 step 3: a `connection_manage` token for the owner's
            // answer is logged (issued, audited). The grant itself is the
            // completed re-authorisation, so a failure here only logs.
            if let (
                Some(approvals),
                Ok(EscalationAnswer {
                    origin: Some(o), ..
                }),
            ) = (approvals, &answer)
                && let Err(e) = approvals.issue_token(
                    Subject::ConnectionPermission(&call.grant(&connection_id, &missing)),
                    &owner_approved(),
                    ApprovalScope::ConnectionManage,
                    o,
                    Timestamp::now(),
                )
            {
                tracing::warn!(code = %e.code(), "connection_manage token not logged: {e}");
            }
            PermissionVerdict::Granted
        }
        Ok(EscalationDecision::JustThisOnce) => {
            let (
                Some(approvals),
                Ok(EscalationAnswer {
                    origin: Some(o), ..
                }),
            ) = (approvals, &answer)
            else {
                return blocked(format!(
                    "just this once for {skill} needs an owner's answer and the approval engine; the script did not run"
                ));
            };
            match grant_once(approvals, &call.grant(&connection_id, &missing), o) {
                Ok(t) => PermissionVerdict::GrantedOnce {
                    permissions: missing,
                    token_id: t.token_id,
                },
                Err(e) => PermissionVerdict::Refused(format!(
                    "{}: connection_permission: the single-use grant was refused ({e}); the script did not run",
                    e.code()
                )),
            }
        }
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

    /// A connection layer answering with `decision` from the owner's
    /// connection, recording what it was asked.
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
        ) -> BoxFuture<'_, Result<EscalationAnswer, ConnectionSetupError>> {
            self.asked.lock().unwrap().push(missing);
            let decision = self.decision;
            Box::pin(async move {
                Ok(EscalationAnswer {
                    decision,
                    origin: Some(AnswerOrigin::new("test", "owner-device")),
                })
            })
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

    /// A real ApprovalService over a fresh store; `owner` registers the
    /// fixtures' owner connection.
    fn approvals(owner: bool) -> (tempfile::TempDir, silas_storage::Store, ApprovalService) {
        let dir = tempfile::tempdir().unwrap();
        let store = silas_storage::Store::open_in(dir.path()).unwrap();
        let svc = ApprovalService::new(
            store.clone(),
            Arc::new(silas_keys::OwnerKey::generate().unwrap()),
            silas_core::approval::IssuePolicy::default(),
        );
        if owner {
            svc.owner_sessions().authenticated("test", "owner-device");
        }
        (dir, store, svc)
    }

    fn call<'a>(script: &'a str, args: &'a JsonObject) -> ScriptCall<'a> {
        ScriptCall {
            work_item_id: "t1",
            execution_id: "t1-exec-1",
            skill: "mail",
            script,
            arguments: args,
        }
    }

    #[tokio::test]
    async fn a_script_beyond_the_grant_asks_and_the_answer_decides() {
        let need = v(&["Mail.Read", "Mail.ReadWrite"]);
        let args = JsonObject::new();
        let send = call("send.py", &args);
        let (_d, store, svc) = approvals(true);
        let s = scripted(EscalationDecision::Deny);
        let PermissionVerdict::Refused(why) = check(Some(&s), Some(&svc), &send, &need).await
        else {
            panic!("deny must refuse")
        };
        assert!(
            why.starts_with("E_GATE_BLOCKED: connection_permission:"),
            "{why}"
        );
        assert_eq!(*s.asked.lock().unwrap(), vec![v(&["Mail.ReadWrite"])]);
        let s = scripted(EscalationDecision::JustThisOnce);
        let PermissionVerdict::GrantedOnce {
            permissions,
            token_id,
        } = check(Some(&s), Some(&svc), &send, &need).await
        else {
            panic!("just this once must grant once")
        };
        assert_eq!(permissions, v(&["Mail.ReadWrite"]));
        // A real single-use token, already consumed for this call.
        let t = store.approvals().get(&token_id).unwrap().unwrap();
        assert_eq!(t.scope, ApprovalScope::ConnectionAct);
        assert_eq!((t.executions_used, t.max_executions), (1, 1));
        let s = scripted(EscalationDecision::Approve);
        assert_eq!(
            check(Some(&s), Some(&svc), &send, &need).await,
            PermissionVerdict::Granted
        );
        // Within the grant: nobody is asked.
        let s = scripted(EscalationDecision::Deny);
        assert_eq!(
            check(
                Some(&s),
                Some(&svc),
                &call("read.py", &args),
                &v(&["Mail.Read"])
            )
            .await,
            PermissionVerdict::Granted
        );
        assert!(s.asked.lock().unwrap().is_empty());
        // No connection set up, or no connection layer: refused, unasked.
        let other = ScriptCall {
            skill: "other",
            ..send
        };
        assert!(matches!(
            check(Some(&s), Some(&svc), &other, &need).await,
            PermissionVerdict::Refused(_)
        ));
        assert!(matches!(
            check(None, Some(&svc), &send, &need).await,
            PermissionVerdict::Refused(_)
        ));
        assert!(s.asked.lock().unwrap().is_empty());
        // Just this once without an approval engine: refused, not run.
        let s = scripted(EscalationDecision::JustThisOnce);
        assert!(matches!(
            check(Some(&s), None, &send, &need).await,
            PermissionVerdict::Refused(_)
        ));
    }

    #[test]
    fn a_just_this_once_token_runs_one_call_and_its_replay_is_refused() {
        let (_d, _store, svc) = approvals(true);
        let args = JsonObject::new();
        let grant = call("send.py", &args).grant("c1", &v(&["Mail.ReadWrite"]));
        let owner = AnswerOrigin::new("test", "owner-device");
        let used = grant_once(&svc, &grant, &owner).unwrap();
        assert_eq!(used.executions_used, 1);
        // The same token (the stored one or the caller's copy) again: refused.
        let subject = Subject::ConnectionPermission(&grant);
        for replay in [used.clone(), {
            let mut t = used.clone();
            t.executions_used = 0;
            t
        }] {
            let e = svc
                .verify_subject(&replay, subject, Timestamp::now())
                .unwrap_err();
            assert_eq!(e.code(), ErrorCode::EApprovalExhausted, "{e}");
        }
        // Nor does it authorise another call (other arguments).
        let mut other_args = JsonObject::new();
        other_args.insert("to".into(), serde_json::Value::from("x"));
        let other = call("send.py", &other_args).grant("c1", &v(&["Mail.ReadWrite"]));
        assert!(
            svc.verify_subject(
                &used,
                Subject::ConnectionPermission(&other),
                Timestamp::now()
            )
            .is_err()
        );
        // An answer from a connection that is not the owner's mints nothing.
        let (_d2, _s2, svc2) = approvals(false);
        let e = grant_once(&svc2, &grant, &AnswerOrigin::new("web", "customer-1")).unwrap_err();
        assert_eq!(e.code(), ErrorCode::EChannelAuth);
    }
}
