//! §5.10.2 permission escalation: a connection needs service permissions
//! it was not granted. The owner gets a `permission_escalation` card
//! ([Approve] [Just this once] [Deny]); the answer decides:
//!
//! * `approve` — re-authorisation with the extra scopes (the connection
//!   skill's setup with `CONNECTION_INCREMENTAL_SCOPES`); on success they
//!   join `permissions_granted`.
//! * `just_this_once` — granted for the one action that asked, through a
//!   single-use `connection_act` token minted for the owner's answer
//!   ([`super::permission_gate`]); the record is not changed.
//! * `deny` (also the safe default on timeout/disconnect) — the action fails.
//!
//! Every outcome is audited (`connection.permission_escalation`).

use std::sync::Arc;

use serde_json::json;
use silas_core::cards::{CardPayload, CardResponse, PermissionEscalationCard};
use silas_core::model::connections::Connection;
use silas_core::{Coded, Timestamp};
use silas_storage::{CardAudience, PendingCard, Store};

use super::runtime::{ConnectionRuntime, ConnectionSetupError};
use crate::cards::CardTimeouts;
use crate::stream::StreamHandle;

/// The owner's decision on an escalation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EscalationDecision {
    Approve,
    JustThisOnce,
    Deny,
}

impl EscalationDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            EscalationDecision::Approve => "approve",
            EscalationDecision::JustThisOnce => "just_this_once",
            EscalationDecision::Deny => "deny",
        }
    }
}

/// The owner's decision and where it arrived (`None` for a safe default):
/// a `[Just this once]` grant is minted as a token for that answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationAnswer {
    pub decision: EscalationDecision,
    pub origin: Option<crate::approval::AnswerOrigin>,
}

impl EscalationAnswer {
    fn unasked(decision: EscalationDecision) -> Self {
        EscalationAnswer {
            decision,
            origin: None,
        }
    }
}

/// The requested permissions `conn` may ask for (its skill's
/// `available_permissions`) and does not have yet.
pub fn missing_permissions(
    conn: &Connection,
    requested: &[String],
) -> Result<Vec<String>, ConnectionSetupError> {
    if let Some(p) = requested
        .iter()
        .find(|p| !conn.permissions_available.contains(p))
    {
        return Err(ConnectionSetupError::Invalid(format!(
            "{p} is not a permission connection {} can request",
            conn.connection_id
        )));
    }
    Ok(requested
        .iter()
        .filter(|p| !conn.permissions_granted.contains(p))
        .cloned()
        .collect())
}

/// Show the card and wait for the owner's decision.
pub async fn ask_escalation(
    stream: &StreamHandle,
    store: &Store,
    timeouts: &CardTimeouts,
    conn: &Connection,
    requested: Vec<String>,
    reason: &str,
) -> Result<EscalationAnswer, ConnectionSetupError> {
    let id = crate::approval::random_id()
        .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
    let now = Timestamp::now();
    let ttl = chrono::Duration::from_std(timeouts.plan).unwrap_or(chrono::Duration::seconds(300));
    let card = PendingCard {
        request_id: format!("conn-perm-{id}"),
        scope_id: crate::turn::OWNER_SCOPE.to_string(),
        card: CardPayload::PermissionEscalation(PermissionEscalationCard {
            connection_name: conn.name.clone(),
            current_permissions: conn.permissions_granted.clone(),
            requested_permissions: requested.clone(),
            reason: reason.to_string(),
            // Deterministic (§5.10.2): medium for read → write on a granted
            // resource type, high for a new one.
            risk_level: Some(super::permission_gate::risk_level(
                &conn.permissions_granted,
                &requested,
            )),
        }),
        created_at: now,
        expires_at: now.plus(ttl),
        audience: CardAudience::Owner,
    };
    let answer = stream
        .ask(card, timeouts)
        .await
        .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?;
    let decision = match &answer.response {
        CardResponse::Verdict { verdict } if answer.answered() => match verdict.as_str() {
            "approve" => EscalationDecision::Approve,
            "just_this_once" => EscalationDecision::JustThisOnce,
            _ => EscalationDecision::Deny,
        },
        _ => EscalationDecision::Deny,
    };
    let data = json!({"connection_id": conn.connection_id, "requested": requested,
                      "decision": decision.as_str()});
    if let serde_json::Value::Object(o) = data
        && let Err(e) = store.audit().log("connection.permission_escalation", o)
    {
        tracing::error!(code = %e.code(), "audit write failed: {e}");
    }
    let origin = if answer.answered() {
        answer.origin
    } else {
        None
    };
    Ok(EscalationAnswer { decision, origin })
}

/// §4.19 `escalate_permission`: ask, then act on the answer. Returns the
/// answer (`Approve` only once the re-authorisation completed).
pub async fn escalate_permission(
    rt: &Arc<ConnectionRuntime>,
    connection_id: &str,
    requested: Vec<String>,
    reason: &str,
) -> Result<EscalationAnswer, ConnectionSetupError> {
    let conn = rt
        .store()
        .records::<Connection>()
        .get(connection_id)
        .map_err(|e| ConnectionSetupError::Unavailable(e.to_string()))?
        .ok_or_else(|| ConnectionSetupError::Invalid(format!("no connection {connection_id}")))?;
    let missing = missing_permissions(&conn, &requested)?;
    if missing.is_empty() {
        return Ok(EscalationAnswer::unasked(EscalationDecision::Approve));
    }
    let stream = rt
        .stream()
        .ok_or_else(|| ConnectionSetupError::Unavailable("the Stream is not running".into()))?;
    let answer = ask_escalation(
        &stream,
        rt.store(),
        &rt.timeouts(),
        &conn,
        missing.clone(),
        reason,
    )
    .await?;
    if answer.decision == EscalationDecision::Approve {
        rt.reauthorise(conn, missing).await?;
    }
    Ok(answer)
}
