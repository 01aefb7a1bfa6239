//! The web channel's card renderer (§8.1): a typed card
//! ([`silas_core::cards::CardPayload`]) becomes its server frame, and a
//! client answer frame becomes the typed answer the card lifecycle or the
//! ApprovalEngine takes. Pure: no store, no string keys — everything a frame
//! shows is in the card. A new card type is one arm here (and one in each
//! other channel's renderer).

use serde_json::Value;
use silas_core::cards::{CardKind, CardPayload, CardResponse};
use silas_core::model::approval::ApprovalVerdict;

use crate::protocol::{ClientFrame, ProtocolError, ServerFrame};

/// The server frame that shows `card` (whose request id is `request_id`).
pub fn card_frame(request_id: &str, card: &CardPayload) -> ServerFrame {
    let rid = request_id.to_string();
    let level = card.risk().map(|r| r.level);
    match card {
        CardPayload::Plan(p) => ServerFrame::ApprovalRequest {
            request_id: rid,
            title: p.plan.title.clone(),
            body: p.plan.body.clone(),
            budget: serde_json::to_value(&p.plan.budget).unwrap_or(Value::Null),
            verify: serde_json::to_value(&p.verify).unwrap_or(Value::Null),
            risk_level: p.plan.risk.level,
            risk_reasons: p.plan.risk.reasons.clone(),
            plan: Some(p.plan.clone()),
            from_scope: p.from_scope.clone(),
        },
        // A paused tool call is a plan-style approval: same frame, same answer.
        CardPayload::Tool(t) => {
            let risk = silas_core::risk::tool_call_risk(&t.tool_name);
            ServerFrame::ApprovalRequest {
                request_id: rid,
                title: format!("Allow {} for '{}'?", t.tool_name, t.title),
                body: format!(
                    "{}\n\nArguments: {}",
                    t.reason,
                    serde_json::to_string(&t.arguments).unwrap_or_default()
                ),
                budget: Value::Null,
                verify: Value::Null,
                risk_level: risk.level,
                risk_reasons: risk.reasons,
                plan: None,
                from_scope: None,
            }
        }
        CardPayload::Changes(c) => {
            let risk = silas_core::risk::changes_risk(c);
            ServerFrame::ApplyChanges {
                request_id: rid,
                title: c.title.clone(),
                phase: c.phase,
                workspace: c.workspace.clone(),
                path: c.path.clone(),
                files: c.files.clone(),
                total_added: c.total_added,
                total_removed: c.total_removed,
                protected_edits: c
                    .protected_edits()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                protected_note: c.protected_note(),
                refused: c.refused.clone(),
                diff: c.diff.clone(),
                diff_truncated: c.diff_truncated,
                commit_message: c.commit_message.clone(),
                undo_until: c.undo_until.map(|t| t.to_string()),
                risk_level: risk.level,
                risk_reasons: risk.reasons,
            }
        }
        CardPayload::SkillInstall(c) => {
            let risk = silas_core::risk::skill_install_risk(c);
            ServerFrame::SkillInstall {
                request_id: rid,
                skill: c.skill.clone(),
                content_hash: c.content_hash.clone(),
                source: c.source,
                description: c.description.clone(),
                scripts: c.scripts.clone(),
                network: c.network.clone(),
                credentials: c.credentials.clone(),
                warnings: c.warnings,
                findings: c.findings.clone(),
                transformation: c.transformation.clone(),
                mcp_server: c.mcp_server.clone(),
                risk_level: risk.level,
                risk_reasons: risk.reasons,
            }
        }
        CardPayload::Gate(g) => ServerFrame::GateApproval {
            request_id: rid,
            gate_name: g.gate_name.clone(),
            value: g.value.clone(),
            context: g.context.clone(),
            risk_level: level,
        },
        CardPayload::Checkpoint(c) => ServerFrame::Checkpoint {
            request_id: rid,
            message: c.message.clone(),
            options: c.options.clone(),
            risk_level: level,
        },
        CardPayload::BatchReview(b) => ServerFrame::BatchReview {
            request_id: rid,
            batch: b.batch.clone(),
            risk_level: level,
        },
        CardPayload::DraftReview(d) => ServerFrame::DraftReview {
            request_id: rid,
            context: d.context.clone(),
            draft: d.draft.clone(),
            metadata: d.metadata.clone(),
            risk_level: level,
        },
        CardPayload::Decision(d) => ServerFrame::Decision {
            request_id: rid,
            question: d.question.clone(),
            options: d.options.clone(),
            allow_freetext: d.allow_freetext,
            risk_level: level,
        },
        CardPayload::Suggestion(s) => ServerFrame::Suggestion {
            request_id: rid,
            suggestion: s.suggestion.clone(),
            options: s.options.clone(),
            risk_level: level,
        },
        CardPayload::AutonomyThreshold(a) => ServerFrame::AutonomyThresholdReview {
            request_id: rid,
            proposal: a.proposal.clone(),
            risk_level: level,
        },
        CardPayload::SecureInput(s) => ServerFrame::SecureInputRequest {
            ref_id: rid,
            label: s.label.clone(),
            input_hint: s.input_hint.clone(),
            guidance: s.guidance.clone(),
        },
        CardPayload::ConnectionSetup(c) => {
            let mut fields = c.fields.clone();
            // The server's level replaces whatever the payload said.
            fields.remove("risk_level");
            if let Some(r) = level {
                fields.insert("risk_level".into(), Value::from(r.as_str()));
            }
            ServerFrame::ConnectionSetupStep {
                request_id: rid,
                step_type: c.step_type.clone(),
                fields,
            }
        }
        CardPayload::PermissionEscalation(p) => ServerFrame::PermissionEscalation {
            request_id: rid,
            connection_name: p.connection_name.clone(),
            current_permissions: p.current_permissions.clone(),
            requested_permissions: p.requested_permissions.clone(),
            reason: p.reason.clone(),
            risk_level: level.map_or("high", |r| r.as_str()).to_string(),
        },
        CardPayload::ConnectionFailure(f) => ServerFrame::ConnectionFailure {
            request_id: rid,
            failure_type: f.failure_type.clone(),
            service: f.service.clone(),
            message: f.message.clone(),
            recovery_options: f.recovery_options.clone(),
            risk_level: level,
        },
    }
}

/// A client frame that answers a card, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardAnswerFrame {
    /// `approval_response` to a plan or tool card: for the ApprovalEngine.
    Approval {
        request_id: String,
        verdict: ApprovalVerdict,
    },
    /// Any other card: for the card lifecycle, which checks it against the
    /// stored card.
    Card {
        request_id: String,
        kind: CardKind,
        response: CardResponse,
    },
}

/// The approval verdicts the PWA and the spec's synonyms send.
fn approval_verdict(v: &str) -> Option<ApprovalVerdict> {
    match v {
        "approved" | "approve" => Some(ApprovalVerdict::Approved),
        "declined" | "decline" | "rejected" | "reject" => Some(ApprovalVerdict::Declined),
        "edit_requested" | "edit" => Some(ApprovalVerdict::EditRequested),
        _ => None,
    }
}

/// Maps a client frame to the card answer it carries: `Ok(None)` for a frame
/// that answers no card (`auth`, `message`), an error for an approval
/// verdict nobody knows.
pub fn answer(frame: ClientFrame) -> Result<Option<CardAnswerFrame>, ProtocolError> {
    use CardResponse::*;
    let card = |request_id: String, kind: CardKind, response: CardResponse| {
        Ok(Some(CardAnswerFrame::Card {
            request_id,
            kind,
            response,
        }))
    };
    match frame {
        ClientFrame::Auth { .. }
        | ClientFrame::Message { .. }
        | ClientFrame::WorkspaceList {}
        | ClientFrame::WorkspaceAdd { .. }
        | ClientFrame::WorkspaceRemove { .. }
        | ClientFrame::MemoryList { .. }
        | ClientFrame::MemoryForget { .. }
        | ClientFrame::Ack { .. } => Ok(None),
        ClientFrame::ApprovalResponse {
            request_id,
            verdict,
        } => match approval_verdict(&verdict) {
            Some(verdict) => Ok(Some(CardAnswerFrame::Approval {
                request_id,
                verdict,
            })),
            None => Err(ProtocolError::new(
                "E_CHANNEL_PROTOCOL",
                format!("unknown verdict {verdict:?}"),
                Some(request_id),
            )),
        },
        ClientFrame::GateResponse {
            request_id,
            verdict,
        } => card(request_id, CardKind::Gate, Verdict { verdict }),
        ClientFrame::Checkpoint {
            request_id,
            verdict,
        } => card(request_id, CardKind::Checkpoint, Verdict { verdict }),
        ClientFrame::BatchReviewResponse {
            request_id,
            verdict,
            selected_item_ids,
        } => card(
            request_id,
            CardKind::BatchReview,
            Batch {
                verdict,
                selected_item_ids: selected_item_ids.unwrap_or_default(),
            },
        ),
        ClientFrame::DraftReviewResponse {
            request_id,
            verdict,
            edited_text,
        } => card(
            request_id,
            CardKind::DraftReview,
            Draft {
                verdict,
                edited_text,
            },
        ),
        ClientFrame::DecisionResponse {
            request_id,
            selected_value,
            freetext,
        } => card(
            request_id,
            CardKind::Decision,
            Choice {
                selected_value,
                freetext,
            },
        ),
        ClientFrame::SuggestionResponse {
            request_id,
            selected_value,
            freetext,
        } => card(
            request_id,
            CardKind::Suggestion,
            Choice {
                selected_value,
                freetext,
            },
        ),
        ClientFrame::AutonomyThresholdResponse {
            request_id,
            verdict,
        } => card(request_id, CardKind::AutonomyThreshold, Verdict { verdict }),
        ClientFrame::ConnectionSetupResponse {
            request_id,
            step_type,
            action,
        } => card(
            request_id,
            CardKind::ConnectionSetup,
            SetupAction { step_type, action },
        ),
        ClientFrame::PermissionEscalationResponse {
            request_id,
            verdict,
        } => card(
            request_id,
            CardKind::PermissionEscalation,
            Verdict { verdict },
        ),
        ClientFrame::ConnectionFailureResponse {
            request_id,
            selected_action,
        } => card(
            request_id,
            CardKind::ConnectionFailure,
            Recovery { selected_action },
        ),
        ClientFrame::SecureInputCompleted { ref_id, success } => {
            card(ref_id, CardKind::SecureInput, SecureInput { success })
        }
    }
}

#[cfg(test)]
#[path = "cards_tests.rs"]
mod tests;
