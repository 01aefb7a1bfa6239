//! The WebSocket protocol of spec §8.1: one typed enum per direction
//! (`#[serde(tag = "type")]`, snake_case names exactly as in the spec's two
//! tables) plus `auth_ok`, `work_status` and `error` frames. Parsing is strict
//! about types and the two validation rules the spec states, and every
//! failure becomes a typed [`ProtocolError`] that is sent back as an `error`
//! frame — the connection stays open.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use silas_core::cards::ChangedFile;
use silas_core::model::JsonObject;
use silas_core::model::approval::ChangesAction;
use silas_core::model::workspace::Workspace;
use silas_core::risk::{PlanView, RiskLevel};

fn cautious_risk() -> RiskLevel {
    RiskLevel::High
}

/// Client → server frames.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    Auth {
        token: String,
    },
    Message {
        text: String,
        #[serde(default)]
        sender_id: Option<String>,
        /// The client's own id for this message ([`MAX_CLIENT_ID`] letters,
        /// digits, `-` or `_`): a message sent again under the same id (a
        /// reconnect before `accepted` arrived) is recorded once and
        /// answered once. Echoed on `accepted`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
    },
    ApprovalResponse {
        request_id: String,
        verdict: String,
    },
    GateResponse {
        request_id: String,
        verdict: String,
    },
    Checkpoint {
        request_id: String,
        verdict: String,
    },
    BatchReviewResponse {
        request_id: String,
        verdict: String,
        #[serde(default)]
        selected_item_ids: Option<Vec<String>>,
    },
    DraftReviewResponse {
        request_id: String,
        verdict: String,
        #[serde(default)]
        edited_text: Option<String>,
    },
    DecisionResponse {
        request_id: String,
        #[serde(default)]
        selected_value: Option<String>,
        #[serde(default)]
        freetext: Option<String>,
    },
    SuggestionResponse {
        request_id: String,
        #[serde(default)]
        selected_value: Option<String>,
        #[serde(default)]
        freetext: Option<String>,
    },
    AutonomyThresholdResponse {
        request_id: String,
        verdict: String,
    },
    SecureInputCompleted {
        ref_id: String,
        success: bool,
    },
    ConnectionSetupResponse {
        request_id: String,
        step_type: String,
        action: String,
    },
    PermissionEscalationResponse {
        request_id: String,
        verdict: String,
    },
    ConnectionFailureResponse {
        request_id: String,
        selected_action: String,
    },
    /// Owner only (issue #15): the registered workspaces, answered with a
    /// `workspaces` frame. Anyone else gets an `E_CHANNEL_AUTH` error frame.
    /// Braced, so `deny_unknown_fields` applies (a unit variant of a tagged
    /// enum takes any fields).
    WorkspaceList {},
    /// Owner only: register `path` (absolute) as `name`.
    WorkspaceAdd {
        name: String,
        path: String,
        #[serde(default)]
        writable: bool,
    },
    /// Owner only: forget `name` (the directory is untouched).
    WorkspaceRemove {
        name: String,
    },
    /// Owner only (issue #18): the owner conversation's memories matching
    /// `query` (the most recent when empty), answered with `memories`.
    MemoryList {
        #[serde(default)]
        query: String,
    },
    /// Owner only: erase one memory from the store, the index and every
    /// later export (audited without its content).
    MemoryForget {
        memory_id: String,
    },
    /// The client has shown the `message` with this `id` (issue #19 item 6):
    /// it is not sent again on the next connection. Only this connection's
    /// own conversation's replies can be acknowledged; any other id gets an
    /// `E_CHANNEL_AUTH` error frame and changes nothing.
    Ack {
        id: String,
    },
}

impl ClientFrame {
    /// An owner-only memory frame (issue #18).
    pub fn is_memory_op(&self) -> bool {
        matches!(
            self,
            ClientFrame::MemoryList { .. } | ClientFrame::MemoryForget { .. }
        )
    }

    /// An owner-only registry frame (issue #15).
    pub fn is_workspace_op(&self) -> bool {
        matches!(
            self,
            ClientFrame::WorkspaceList {}
                | ClientFrame::WorkspaceAdd { .. }
                | ClientFrame::WorkspaceRemove { .. }
        )
    }

    /// The card this frame answers, if any.
    pub fn request_id(&self) -> Option<&str> {
        use ClientFrame::*;
        match self {
            ApprovalResponse { request_id, .. }
            | GateResponse { request_id, .. }
            | Checkpoint { request_id, .. }
            | BatchReviewResponse { request_id, .. }
            | DraftReviewResponse { request_id, .. }
            | DecisionResponse { request_id, .. }
            | SuggestionResponse { request_id, .. }
            | AutonomyThresholdResponse { request_id, .. }
            | ConnectionSetupResponse { request_id, .. }
            | PermissionEscalationResponse { request_id, .. }
            | ConnectionFailureResponse { request_id, .. } => Some(request_id),
            Auth { .. }
            | Message { .. }
            | SecureInputCompleted { .. }
            | WorkspaceList {}
            | WorkspaceAdd { .. }
            | WorkspaceRemove { .. }
            | MemoryList { .. }
            | MemoryForget { .. }
            | Ack { .. } => None,
        }
    }
}

impl ClientFrame {
    /// The server-issued id this frame refers to (a card's `request_id`, an
    /// acknowledged reply's `id`), for rewriting a customer's opaque alias
    /// back into it ([`crate::aliases`]).
    pub fn referenced_id_mut(&mut self) -> Option<&mut String> {
        use ClientFrame::*;
        match self {
            ApprovalResponse { request_id, .. }
            | GateResponse { request_id, .. }
            | Checkpoint { request_id, .. }
            | BatchReviewResponse { request_id, .. }
            | DraftReviewResponse { request_id, .. }
            | DecisionResponse { request_id, .. }
            | SuggestionResponse { request_id, .. }
            | AutonomyThresholdResponse { request_id, .. }
            | ConnectionSetupResponse { request_id, .. }
            | PermissionEscalationResponse { request_id, .. }
            | ConnectionFailureResponse { request_id, .. } => Some(request_id),
            Ack { id } => Some(id),
            // A secure input's ref is posted to `/secrets/{ref_id}` as
            // issued: never aliased (only the owner is sent one).
            Auth { .. }
            | SecureInputCompleted { .. }
            | Message { .. }
            | WorkspaceList {}
            | WorkspaceAdd { .. }
            | WorkspaceRemove { .. }
            | MemoryList { .. }
            | MemoryForget { .. } => None,
        }
    }
}

/// One memory as the owner's Memory panel shows it: a bounded preview,
/// never more.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryView {
    pub memory_id: String,
    /// The first 200 characters.
    pub preview: String,
    pub memory_type: String,
    pub trust_level: String,
    pub taint: String,
    pub created_at: String,
}

/// Server → client frames.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The owner's registered workspaces, after any registry frame.
    Workspaces { workspaces: Vec<Workspace> },
    /// Memories for the owner's Memory panel (after `memory_list` or
    /// `memory_forget`); `forgotten` names what a forget erased.
    Memories {
        memories: Vec<MemoryView>,
        #[serde(default)]
        forgotten: Vec<String>,
    },
    AuthOk {
        scope_id: String,
        /// Which model serves this assistant; present when the runtime says,
        /// so the UI can label the offline responder (never an LLM).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<ModelInfo>,
    },
    Message {
        text: String,
        sender: String,
        timestamp: String,
        /// A reply's stable id: the inbox id of the message it answers
        /// (issue #19 item 6). The same reply sent again — after a
        /// reconnect, or replayed after a crash — carries the same id; a
        /// client shows an id once and acknowledges it with `ack`. Absent
        /// on notices, which are not acknowledged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// The message this connection just sent was durably recorded as
    /// `id`; the reply that answers it carries the same `id`. A scripted
    /// client tells its own replies from earlier sessions' by it. A chatbot
    /// customer is shown an opaque alias for it ([`crate::aliases`]).
    Accepted {
        id: String,
        /// The message's `client_id`, when it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
    },
    /// The answer to the message `reply_to` is still being worked on (a
    /// slow model); replaced by the `message` that answers it.
    Progress {
        reply_to: String,
        text: String,
        elapsed_seconds: u64,
    },
    ApprovalRequest {
        request_id: String,
        title: String,
        body: String,
        budget: Value,
        verify: Value,
        /// Decided by the server (§0.5.2, `silas_core::risk`); every
        /// channel renders it and none decides it. Absent (an older
        /// server) reads as `high`.
        #[serde(default = "cautious_risk")]
        risk_level: RiskLevel,
        #[serde(default)]
        risk_reasons: Vec<String>,
        /// Everything the plan hash covers that changes what runs (plan
        /// and fix-task cards; `None` for a paused tool call).
        #[serde(default)]
        plan: Option<Box<PlanView>>,
        /// A chatbot customer's request: the conversation it came from.
        #[serde(default)]
        from_scope: Option<String>,
    },
    /// A verified workspace change set to apply (`phase: apply`), or an
    /// apply that can still be undone (`phase: undo`, until `undo_until`).
    /// Answered with `approval_response` (approved = apply / undo).
    ApplyChanges {
        request_id: String,
        title: String,
        phase: ChangesAction,
        workspace: String,
        path: String,
        files: Vec<ChangedFile>,
        total_added: u64,
        total_removed: u64,
        /// Check-defining files the executor edited.
        protected_edits: Vec<String>,
        /// What the card says of them: whether the checks saw the edits.
        #[serde(default)]
        protected_note: Option<String>,
        /// Result paths reported but never applied, with why.
        refused: Vec<String>,
        /// The unified diff (cut at 64 KiB; the whole one is the
        /// `changes.diff` artifact).
        diff: String,
        diff_truncated: bool,
        #[serde(default)]
        commit_message: Option<String>,
        #[serde(default)]
        undo_until: Option<String>,
        risk_level: RiskLevel,
        #[serde(default)]
        risk_reasons: Vec<String>,
    },
    /// A skill waiting for its `skill_install` approval (§10.4): the
    /// validation report's findings and the content hash the approval
    /// binds. Answered with `approval_response` (approved = install).
    SkillInstall {
        request_id: String,
        skill: String,
        content_hash: String,
        source: silas_core::model::skills::SkillSource,
        description: String,
        scripts: Vec<String>,
        network: Vec<String>,
        credentials: Vec<String>,
        warnings: usize,
        findings: Vec<String>,
        transformation: Vec<String>,
        /// The MCP server it declares (`command args…`); its tools are
        /// listed by the dry run and bound to the install.
        #[serde(default)]
        mcp_server: Option<String>,
        risk_level: RiskLevel,
        #[serde(default)]
        risk_reasons: Vec<String>,
    },
    GateApproval {
        request_id: String,
        gate_name: String,
        value: Value,
        context: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    Checkpoint {
        request_id: String,
        message: String,
        options: Vec<String>,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    BatchReview {
        request_id: String,
        batch: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    DraftReview {
        request_id: String,
        context: String,
        draft: String,
        metadata: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    Decision {
        request_id: String,
        question: String,
        options: Value,
        allow_freetext: bool,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    Suggestion {
        request_id: String,
        suggestion: Value,
        /// Choices beyond the built-in `do_it` / `not_now` (strings or
        /// `{value, label}`), answered as `selected_value`.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        options: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    AutonomyThresholdReview {
        request_id: String,
        proposal: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    SecureInputRequest {
        ref_id: String,
        label: String,
        input_hint: Option<String>,
        guidance: Value,
    },
    ConnectionSetupStep {
        request_id: String,
        step_type: String,
        #[serde(flatten)]
        fields: JsonObject,
    },
    PermissionEscalation {
        request_id: String,
        connection_name: String,
        current_permissions: Vec<String>,
        requested_permissions: Vec<String>,
        reason: String,
        risk_level: String,
    },
    ConnectionFailure {
        request_id: String,
        failure_type: String,
        service: String,
        message: String,
        recovery_options: Value,
        /// The server's risk level (§0.5.2, `silas_core::risk::card_risk`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_level: Option<RiskLevel>,
    },
    WorkStatus {
        work_item_id: String,
        status: String,
        summary: String,
        verification: Value,
    },
    /// Post-execution undo offer (spec §0.5.5), sent only when the runtime
    /// recorded the reverse actions of a finished, reversible execution. The
    /// PWA shows a one-tap Undo on that work item's result card until
    /// `expires_at` (RFC 3339). The spec's client table has no undo frame, so
    /// the answer is a one-option decision: `decision_response` with this
    /// `request_id` and `selected_value: "undo"`. Without this frame the PWA
    /// never shows an Undo button.
    UndoOffer {
        request_id: String,
        work_item_id: String,
        summary: String,
        expires_at: String,
    },
    Error {
        code: String,
        message: String,
        request_id: Option<String>,
    },
    /// The Activity surface (§0.5.1): a plain-language timeline built from
    /// the audit log, sent only to the owner's connections — once right
    /// after `auth_ok` (`initial: true`, the latest items, oldest first) and
    /// then whenever new audit entries produce items (`initial: false`,
    /// only the new ones). Shape:
    ///
    /// ```json
    /// {"type": "activity", "initial": true, "items": [
    ///   {"seq": 41, "at": "2026-01-01T09:00:00.123456Z", "kind": "work",
    ///    "text": "Approved and ran 'Create notes.txt' — 2 checks passed"}]}
    /// ```
    ///
    /// `seq` is the audit sequence number (unique, increasing: order and
    /// de-duplicate by it); `kind` is one of `work`, `approval`, `card`,
    /// `security`, `system`, `other`; `text` is display text (render with
    /// `textContent`). Never carries message text or secrets.
    Activity {
        initial: bool,
        items: Vec<ActivityItem>,
    },
}

impl ServerFrame {
    /// The server-issued id a client answers or acknowledges this frame by
    /// (a reply's `id`, `accepted`'s `id`, progress's `reply_to`, a card's
    /// `request_id`; not a secure input's `ref_id`, which the client posts
    /// to `/secrets/` as issued), for showing a customer an
    /// opaque alias instead ([`crate::aliases`]). An `error`'s `request_id`
    /// is not one: it quotes what the client sent.
    pub fn issued_id_mut(&mut self) -> Option<&mut String> {
        use ServerFrame::*;
        match self {
            Message { id, .. } => id.as_mut(),
            Accepted { id, .. } => Some(id),
            Progress { reply_to, .. } => Some(reply_to),
            ApprovalRequest { request_id, .. }
            | ApplyChanges { request_id, .. }
            | SkillInstall { request_id, .. }
            | GateApproval { request_id, .. }
            | Checkpoint { request_id, .. }
            | BatchReview { request_id, .. }
            | DraftReview { request_id, .. }
            | Decision { request_id, .. }
            | Suggestion { request_id, .. }
            | AutonomyThresholdReview { request_id, .. }
            | ConnectionSetupStep { request_id, .. }
            | PermissionEscalation { request_id, .. }
            | ConnectionFailure { request_id, .. }
            | UndoOffer { request_id, .. } => Some(request_id),
            Workspaces { .. }
            | SecureInputRequest { .. }
            | Memories { .. }
            | AuthOk { .. }
            | WorkStatus { .. }
            | Error { .. }
            | Activity { .. } => None,
        }
    }
}

/// One line of the Activity timeline (see [`ServerFrame::Activity`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityItem {
    pub seq: u64,
    pub at: String,
    pub kind: String,
    pub text: String,
}

/// The model behind the assistant, as shown to the owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The labelled rule-based responder, not an LLM.
    pub offline: bool,
    /// One line for the UI, e.g. why the offline responder is in use.
    pub description: String,
}

/// Why a frame was refused. Sent back as an `error` frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ProtocolError {
    pub code: &'static str,
    pub message: String,
    pub request_id: Option<String>,
}

impl ProtocolError {
    pub fn new(code: &'static str, message: impl Into<String>, request_id: Option<String>) -> Self {
        ProtocolError {
            code,
            message: message.into(),
            request_id,
        }
    }

    /// The `error` frame. What it quotes of the client's frame — the
    /// `request_id`, and any quoted value in the message (a verdict, a card
    /// id, serde's `unknown variant`) — is cut to [`ECHO_MAX_CHARS`]: a
    /// 60 KB `request_id` came back verbatim, twice.
    pub fn frame(&self) -> ServerFrame {
        ServerFrame::Error {
            code: self.code.to_string(),
            message: bounded_message(&self.message),
            request_id: self.request_id.as_deref().map(clip),
        }
    }
}

/// Longest client-supplied value an `error` frame quotes back.
pub const ECHO_MAX_CHARS: usize = 64;
/// Longest `error` message (a backstop for an unquoted echo).
pub const ERROR_MESSAGE_MAX_CHARS: usize = 1024;

/// `s` as at most [`ECHO_MAX_CHARS`] characters and "…" when longer.
pub fn clip(s: &str) -> String {
    clip_to(s, ECHO_MAX_CHARS)
}

fn clip_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// `message` with every quoted run (between `"…"`, as `{:?}` writes a
/// string, or `` `…` ``, as serde does) cut to [`ECHO_MAX_CHARS`], and the
/// whole to [`ERROR_MESSAGE_MAX_CHARS`]. Server-written messages quote only
/// short things, so only an echoed client value is ever cut.
fn bounded_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(ERROR_MESSAGE_MAX_CHARS));
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' && c != '`' {
            continue;
        }
        // Inside a quoted run: keep ECHO_MAX_CHARS, skip the rest up to the
        // closing quote (a `\"` escape does not close a `{:?}` string).
        let mut kept = 0;
        let mut escaped = false;
        let mut cut = false;
        let mut closing = None;
        for q in chars.by_ref() {
            if q == c && !escaped {
                closing = Some(q);
                break;
            }
            escaped = c == '"' && q == '\\' && !escaped;
            if kept < ECHO_MAX_CHARS {
                out.push(q);
                kept += 1;
            } else {
                cut = true;
            }
        }
        if cut {
            out.push('…');
        }
        out.extend(closing);
    }
    clip_to(&out, ERROR_MESSAGE_MAX_CHARS)
}

/// Largest client frame accepted (a chat message is far smaller).
pub const MAX_FRAME_BYTES: usize = 64 * 1024;

/// Parse and validate one client text frame.
pub fn parse_client_frame(text: &str) -> Result<ClientFrame, ProtocolError> {
    if text.len() > MAX_FRAME_BYTES {
        return Err(ProtocolError::new(
            "E_CHANNEL_PROTOCOL",
            format!("frame larger than {MAX_FRAME_BYTES} bytes"),
            None,
        ));
    }
    let raw: Value = serde_json::from_str(text)
        .map_err(|e| ProtocolError::new("E_CHANNEL_PROTOCOL", format!("not JSON: {e}"), None))?;
    let request_id = raw
        .get("request_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    // serde_json keeps the last of two equal keys; a proxy, a log or the
    // client's own code may read the first. A frame that says two things
    // (two `type`s, two `decision`s) is refused, not guessed.
    if let Some(dup) = silas_core::strict_json::duplicate_key(text) {
        return Err(ProtocolError::new(
            "E_CHANNEL_PROTOCOL",
            format!("a key appears twice: {dup}"),
            request_id,
        ));
    }
    let kind = raw.get("type").and_then(Value::as_str).map(str::to_string);
    let frame: ClientFrame = serde_json::from_value(raw).map_err(|e| {
        let what = match &kind {
            Some(k) => format!("invalid {k:?} frame: {e}"),
            None => "frame has no string `type`".to_string(),
        };
        ProtocolError::new("E_CHANNEL_PROTOCOL", what, request_id.clone())
    })?;
    validate(&frame).map_err(|m| ProtocolError::new("E_CHANNEL_PROTOCOL", m, request_id))?;
    Ok(frame)
}

/// The longest `client_id` a message may carry.
pub const MAX_CLIENT_ID: usize = 64;

fn valid_client_id(id: &str) -> bool {
    (1..=MAX_CLIENT_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn validate(frame: &ClientFrame) -> Result<(), String> {
    match frame {
        ClientFrame::BatchReviewResponse {
            verdict,
            selected_item_ids,
            ..
        } => {
            let selected = selected_item_ids.as_ref().is_some_and(|v| !v.is_empty());
            match verdict.as_str() {
                "edit_selection" if !selected => {
                    Err("edit_selection requires selected_item_ids".into())
                }
                "approve" | "decline" if selected => Err(format!(
                    "selected_item_ids must be omitted or empty for {verdict}"
                )),
                "approve" | "decline" | "edit_selection" => Ok(()),
                other => Err(format!("unknown batch verdict {other:?}")),
            }
        }
        ClientFrame::AutonomyThresholdResponse { verdict, .. } => match verdict.as_str() {
            "approve" | "decline" | "tighten_now" => Ok(()),
            other => Err(format!(
                "verdict must be approve, decline or tighten_now, got {other:?}"
            )),
        },
        ClientFrame::ConnectionSetupResponse { action, .. } => match action.as_str() {
            "done" | "cancel" | "trouble" | "retry" => Ok(()),
            other => Err(format!("unknown setup action {other:?}")),
        },
        ClientFrame::PermissionEscalationResponse { verdict, .. } => match verdict.as_str() {
            "approve" | "just_this_once" | "deny" => Ok(()),
            other => Err(format!("unknown permission verdict {other:?}")),
        },
        ClientFrame::Message { text, .. } if text.trim().is_empty() => Err("empty message".into()),
        ClientFrame::Message {
            client_id: Some(id),
            ..
        } if !valid_client_id(id) => Err(format!(
            "client_id must be 1 to {MAX_CLIENT_ID} letters, digits, - or _"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
