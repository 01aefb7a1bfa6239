//! The card model (§8.1 server→client table, §4.1.1 `RichCardChannel`): one
//! typed payload per card type the system creates, and the builders every
//! producer uses. Every channel renders from this model (the web renderer is
//! `silas_web::cards`); adding a card type is one [`CardPayload`] variant and
//! one renderer per channel.
//!
//! Why in `silas-core`: the payload is persisted (storage, layer 1) and
//! rendered (web, layer 2), so it must sit below both. The card *lifecycle*
//! (deadlines, safe defaults, answer validation) stays in `silas_actors::cards`.
//!
//! On disk a payload is `{"card_type": "...", "payload": {...}}` (adjacently
//! tagged), the layout `PendingCard` had before the payload was typed, so
//! records of every unchanged card type decode as they are.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::model::JsonObject;
use crate::model::approval::{ApprovalToken, ChangesAction};
use crate::model::work::{VerificationCheck, WorkItem};
use crate::risk::{self, PlanView, Risk, RiskLevel};

/// Every card type of the §8.1 server→client table that waits for an answer
/// on its own response frame (a tool card is answered like a plan card, with
/// `approval_response`, so it has no kind of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardKind {
    Plan,
    Gate,
    Checkpoint,
    BatchReview,
    DraftReview,
    Decision,
    Suggestion,
    AutonomyThreshold,
    SecureInput,
    ConnectionSetup,
    PermissionEscalation,
    ConnectionFailure,
}

impl CardKind {
    pub const ALL: [CardKind; 12] = [
        CardKind::Plan,
        CardKind::Gate,
        CardKind::Checkpoint,
        CardKind::BatchReview,
        CardKind::DraftReview,
        CardKind::Decision,
        CardKind::Suggestion,
        CardKind::AutonomyThreshold,
        CardKind::SecureInput,
        CardKind::ConnectionSetup,
        CardKind::PermissionEscalation,
        CardKind::ConnectionFailure,
    ];

    /// The stored `card_type`, which is also the server frame's `type`.
    pub fn card_type(self) -> &'static str {
        match self {
            CardKind::Plan => PLAN_CARD,
            CardKind::Gate => "gate_approval",
            CardKind::Checkpoint => "checkpoint",
            CardKind::BatchReview => "batch_review",
            CardKind::DraftReview => "draft_review",
            CardKind::Decision => "decision",
            CardKind::Suggestion => "suggestion",
            CardKind::AutonomyThreshold => "autonomy_threshold_review",
            CardKind::SecureInput => "secure_input_request",
            CardKind::ConnectionSetup => "connection_setup_step",
            CardKind::PermissionEscalation => "permission_escalation",
            CardKind::ConnectionFailure => "connection_failure",
        }
    }

    /// The client frame `type` that answers this card.
    pub fn response_type(self) -> &'static str {
        match self {
            CardKind::Plan => "approval_response",
            CardKind::Gate => "gate_response",
            CardKind::Checkpoint => "checkpoint",
            CardKind::BatchReview => "batch_review_response",
            CardKind::DraftReview => "draft_review_response",
            CardKind::Decision => "decision_response",
            CardKind::Suggestion => "suggestion_response",
            CardKind::AutonomyThreshold => "autonomy_threshold_response",
            CardKind::SecureInput => "secure_input_completed",
            CardKind::ConnectionSetup => "connection_setup_response",
            CardKind::PermissionEscalation => "permission_escalation_response",
            CardKind::ConnectionFailure => "connection_failure_response",
        }
    }

    pub fn from_card_type(card_type: &str) -> Option<CardKind> {
        CardKind::ALL
            .into_iter()
            .find(|k| k.card_type() == card_type)
    }
}

/// Card type of a plan approval request (plan, fix-task and renewal cards).
pub const PLAN_CARD: &str = "approval_request";
/// Card type of a paused tool call of background work (§5.2.1 c2, §4.24).
pub const TOOL_CARD: &str = "tool_approval";
/// Card type of a workspace change set to apply, or an apply to undo (#15).
pub const CHANGES_CARD: &str = "apply_changes";
/// Card type of a skill waiting for its install approval (§10.4, #17).
pub const SKILL_INSTALL_CARD: &str = "skill_install";

/// The owner's answer to a non-plan card, typed by response shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum CardResponse {
    /// gate, checkpoint, autonomy threshold, permission escalation, plan.
    Verdict {
        verdict: String,
    },
    Batch {
        verdict: String,
        selected_item_ids: Vec<String>,
    },
    Draft {
        verdict: String,
        edited_text: Option<String>,
    },
    /// decision and suggestion cards.
    Choice {
        selected_value: Option<String>,
        freetext: Option<String>,
    },
    SetupAction {
        step_type: String,
        action: String,
    },
    Recovery {
        selected_action: String,
    },
    SecureInput {
        success: bool,
    },
}

/// Which actor created a card (the WorkExecutor re-delivers its own cards).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardOrigin {
    /// A conversation turn (a proposed plan).
    #[default]
    Turn,
    /// Background work: fix-task, renewal and tool cards.
    WorkExecutor,
}

/// A plan approval (§5.1.2): a proposed plan, a goal-spawned fix task, or a
/// goal's renewal. `plan` and `verify` are built from the same stored item
/// as `plan_hash`, at the same moment, so what the card shows is what the
/// hash covers; approving checks the hash against the item again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanCard {
    pub work_item_id: String,
    pub plan_hash: String,
    pub plan: Box<PlanView>,
    #[serde(default)]
    pub verify: Vec<VerificationCheck>,
    /// A chatbot customer's request: the conversation it came from.
    #[serde(default)]
    pub from_scope: Option<String>,
    #[serde(default)]
    pub inbox_id: Option<String>,
    /// Fix-task and renewal cards: the goal that asked.
    #[serde(default)]
    pub goal_id: Option<String>,
    /// Why the owner is asked (fix-task, renewal).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub renewal: bool,
    #[serde(default)]
    pub origin: CardOrigin,
}

/// The owner's answer to a tool card, recorded on the card until the
/// executor resumes the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum ToolDecision {
    /// Approved: the token was issued for the call and verified (one
    /// execution consumed).
    Approved { token: ApprovalToken },
    /// Declined (or not approvable): the model is told why.
    Declined { reason: String },
}

/// A paused tool call of a running work item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCard {
    pub work_item_id: String,
    pub title: String,
    pub tool_name: String,
    #[serde(default)]
    pub arguments: Value,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub attempt: u64,
    #[serde(default = "executor_origin")]
    pub origin: CardOrigin,
    /// The executor's resume state (`silas_actors::work_executor::cards::
    /// ToolPause`): opaque here because its types live above this crate; no
    /// renderer reads it.
    pub pause: Value,
    #[serde(default)]
    pub decision: Option<ToolDecision>,
}

/// One file of a change set, as a card shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub kind: String,
    pub added: u64,
    pub removed: u64,
    #[serde(default)]
    pub binary: bool,
    /// A file that defines the checks (tests, check configuration): the
    /// card flags the edit and says whether the checks saw it
    /// ([`protected_note`]).
    #[serde(default)]
    pub protected: bool,
}

/// A verified workspace change set waiting to be applied (phase `apply`),
/// or an apply that can still be undone (phase `undo`, the §0.5.5
/// post-execution card). Answered like a plan card: approving mints a
/// single-step token bound to exactly this change set (`changes_sha256`,
/// the hash of the stored `changes.json`) and the item's plan hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangesCard {
    pub work_item_id: String,
    pub title: String,
    pub phase: ChangesAction,
    pub workspace: String,
    /// The workspace's registered directory.
    pub path: String,
    pub plan_hash: String,
    pub changes_sha256: String,
    pub files: Vec<ChangedFile>,
    pub total_added: u64,
    pub total_removed: u64,
    /// Paths in the result that are reported but never applied (symlinks,
    /// special files), with why.
    #[serde(default)]
    pub refused: Vec<String>,
    /// The unified diff, cut to [`CHANGES_CARD_DIFF_MAX`] bytes for the card
    /// (the whole diff is the item's `changes.diff` artifact).
    #[serde(default)]
    pub diff: String,
    #[serde(default)]
    pub diff_truncated: bool,
    /// Commit message of the optional local commit after applying.
    #[serde(default)]
    pub commit_message: Option<String>,
    /// Undo phase: when the undo window closes.
    #[serde(default)]
    pub undo_until: Option<crate::Timestamp>,
    /// The owner's answer, recorded until the executor acts on it.
    #[serde(default)]
    pub decision: Option<ToolDecision>,
    /// The approved plan let the work edit check-defining files, so the
    /// checks ran on its edits (else without them).
    #[serde(default)]
    pub checks_saw_edits: bool,
}

/// What a change card says of edited check-defining files, `None` when
/// there are none. One sentence for every surface: it used to say "the
/// checks ran on the originals" even when the plan allowed the edits (the
/// checks then ran the work's own tests) or a new test file had no
/// original at all.
pub fn protected_note(paths: &[&str], checks_saw_edits: bool) -> Option<String> {
    if paths.is_empty() {
        return None;
    }
    let list = paths.join(", ");
    Some(if checks_saw_edits {
        format!(
            "Edits files that define the checks ({list}), as the plan allowed: the checks ran on these edits, so the work was checked against tests it wrote or changed itself."
        )
    } else {
        format!(
            "Edits files that define the checks ({list}); the checks ran without these edits (originals put back, new files left out)."
        )
    })
}

/// The largest diff a change card carries (bigger ones are cut at a line).
pub const CHANGES_CARD_DIFF_MAX: usize = 64 * 1024;

impl ChangesCard {
    /// Paths of edited check-defining files (the card's warning).
    pub fn protected_edits(&self) -> Vec<&str> {
        self.files
            .iter()
            .filter(|f| f.protected)
            .map(|f| f.path.as_str())
            .collect()
    }

    /// The card's sentence on edited check-defining files.
    pub fn protected_note(&self) -> Option<String> {
        protected_note(&self.protected_edits(), self.checks_saw_edits)
    }
}

/// `diff` cut at a line boundary to at most `max` bytes; whether it was cut.
pub fn cut_diff(diff: &str, max: usize) -> (String, bool) {
    if diff.len() <= max {
        return (diff.to_string(), false);
    }
    let mut end = max;
    while end > 0 && !diff.is_char_boundary(end) {
        end -= 1;
    }
    let head = &diff[..end];
    let head = head.rfind('\n').map_or(head, |i| &head[..=i]);
    (head.to_string(), true)
}

fn executor_origin() -> CardOrigin {
    CardOrigin::WorkExecutor
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateCard {
    #[serde(default)]
    pub gate_name: String,
    #[serde(default)]
    pub value: Value,
    #[serde(default)]
    pub context: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointCard {
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub options: Vec<String>,
}

/// The batch as the producer described it (§0.5.4: `items[].id`, `action`,
/// optional `risk_level`); free-form beyond that.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchReviewCard {
    #[serde(default)]
    pub batch: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DraftReviewCard {
    #[serde(default)]
    pub context: String,
    #[serde(default)]
    pub draft: String,
    #[serde(default)]
    pub metadata: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DecisionCard {
    #[serde(default)]
    pub question: String,
    /// Strings or `{value, label}` objects.
    #[serde(default)]
    pub options: Value,
    #[serde(default)]
    pub allow_freetext: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SuggestionCard {
    #[serde(default)]
    pub suggestion: Value,
    /// Extra choices beyond the built-in "do it" / "not now".
    #[serde(default)]
    pub options: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AutonomyThresholdCard {
    #[serde(default)]
    pub proposal: Value,
}

/// §0.5.3 `SecureInputCard`: only the request's metadata; the value itself
/// never reaches the runtime. The card's request id is the `ref_id`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecureInputCard {
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub input_hint: Option<String>,
    #[serde(default)]
    pub guidance: Value,
}

/// One step of a connection setup; the step's own fields are free-form.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSetupCard {
    #[serde(default)]
    pub step_type: String,
    #[serde(flatten)]
    pub fields: JsonObject,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PermissionEscalationCard {
    #[serde(default)]
    pub connection_name: String,
    #[serde(default)]
    pub current_permissions: Vec<String>,
    #[serde(default)]
    pub requested_permissions: Vec<String>,
    #[serde(default)]
    pub reason: String,
    /// The Connection layer's deterministic level (§5.10.2): medium for
    /// read → write on a granted resource, high for a new one; shown as
    /// is, never below medium ([`crate::risk::card_risk`]).
    #[serde(default, deserialize_with = "lenient_level")]
    pub risk_level: Option<RiskLevel>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionFailureCard {
    #[serde(default)]
    pub failure_type: String,
    #[serde(default)]
    pub service: String,
    #[serde(default)]
    pub message: String,
    /// Strings or `{action, label}` objects.
    #[serde(default)]
    pub recovery_options: Value,
}

/// A level nobody can parse is no level (the floor applies).
fn lenient_level<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RiskLevel>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

/// A skill waiting for the owner's `skill_install` approval (§10.4): the
/// validation report's summary and the content hash the approval binds.
/// Only a skill whose report has no error gets this card, so every card
/// can be approved; approving mints a token bound to `skill` +
/// `content_hash`, then each script is dry-run in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillInstallCard {
    pub skill: String,
    pub content_hash: String,
    pub source: crate::model::skills::SkillSource,
    pub description: String,
    /// The scripts the dry run will run, relative to the skill.
    pub scripts: Vec<String>,
    /// Declared network hosts and credential refs (what the skill may use).
    #[serde(default)]
    pub network: Vec<String>,
    #[serde(default)]
    pub credentials: Vec<String>,
    pub warnings: usize,
    /// The report's findings, one line each (`file:line [rule] message`).
    #[serde(default)]
    pub findings: Vec<String>,
    /// An imported skill: what the transformation changed (§10.4.1).
    #[serde(default)]
    pub transformation: Vec<String>,
    /// The MCP server the skill declares (`command args…`), if any. Its
    /// tool list is listed by the dry run after approval (nothing of the
    /// skill runs before) and bound to the installed skill by its hash.
    #[serde(default)]
    pub mcp_server: Option<String>,
    /// A skill the skill-maker wrote in this work item (issue #17 item 5):
    /// the folder waits in the item's staging area, not in `skills_dir`,
    /// and is copied there only once approved at this hash. `None`: the
    /// folder is already under `skills_dir`.
    #[serde(default)]
    pub made_by: Option<String>,
}

/// The consolidator's proposal to promote one `working` memory to
/// `verified` (§3.8 "promotion requires explicit user confirmation via a
/// decision/review card", §6.4 step 3, §5.12). It travels as a decision
/// card — rendered by every channel's decision renderer, answered by the
/// owner only (the card's audience), through the Stream's card lifecycle —
/// and binds the memory's content hash: an answer to a memory that changed
/// since it was asked promotes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPromotion {
    pub memory_id: String,
    /// The memory's scope (the owner answers for every scope).
    pub scope_id: String,
    /// SHA-256 of the memory's content when asked.
    pub content_sha256: String,
    /// The first 200 characters, for the owner to judge.
    pub preview: String,
    /// The memory came from (or was influenced by) external content.
    pub external: bool,
    pub access_count: u64,
}

/// The decision card's options for a [`MemoryPromotion`].
pub const PROMOTE: &str = "promote";
pub const KEEP_WORKING: &str = "keep_working";

impl MemoryPromotion {
    pub fn for_item(m: &crate::model::memory::MemoryItem) -> MemoryPromotion {
        MemoryPromotion {
            memory_id: m.memory_id.clone(),
            scope_id: m.session_id.clone().unwrap_or_default(),
            content_sha256: crate::canonical::sha256_hex(m.content.as_bytes()),
            preview: m.content.chars().take(200).collect(),
            external: m.taint == crate::model::messages::TaintLevel::External,
            access_count: m.access_count,
        }
    }

    /// The card the owner sees.
    pub fn card(&self) -> CardPayload {
        let source = if self.external {
            " It came from external content (a web page, a tool or a non-owner) — confirm only if you know it is true."
        } else {
            ""
        };
        CardPayload::Decision(DecisionCard {
            question: format!(
                "Silas has used this memory {} times. Mark it as verified (kept as true, changed only by you)?{source}\n\n\"{}\" (conversation {})",
                self.access_count, self.preview, self.scope_id
            ),
            options: serde_json::json!([
                {"value": PROMOTE, "label": "Mark verified"},
                {"value": KEEP_WORKING, "label": "Keep unverified"}
            ]),
            allow_freetext: false,
        })
    }

    /// Whether an answer confirms the promotion: only the `promote` option
    /// does; every other answer and every safe default does not.
    pub fn confirmed(response: &CardResponse) -> bool {
        matches!(response, CardResponse::Choice { selected_value: Some(v), .. } if v == PROMOTE)
    }
}

/// What a card shows, typed per card type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "card_type", content = "payload")]
pub enum CardPayload {
    #[serde(rename = "approval_request")]
    Plan(PlanCard),
    /// Boxed: the recorded decision holds a whole approval token.
    #[serde(rename = "tool_approval")]
    Tool(Box<ToolCard>),
    #[serde(rename = "gate_approval")]
    Gate(GateCard),
    #[serde(rename = "checkpoint")]
    Checkpoint(CheckpointCard),
    #[serde(rename = "batch_review")]
    BatchReview(BatchReviewCard),
    #[serde(rename = "draft_review")]
    DraftReview(DraftReviewCard),
    #[serde(rename = "decision")]
    Decision(DecisionCard),
    #[serde(rename = "suggestion")]
    Suggestion(SuggestionCard),
    #[serde(rename = "autonomy_threshold_review")]
    AutonomyThreshold(AutonomyThresholdCard),
    #[serde(rename = "secure_input_request")]
    SecureInput(SecureInputCard),
    #[serde(rename = "connection_setup_step")]
    ConnectionSetup(ConnectionSetupCard),
    #[serde(rename = "permission_escalation")]
    PermissionEscalation(PermissionEscalationCard),
    #[serde(rename = "connection_failure")]
    ConnectionFailure(ConnectionFailureCard),
    /// Boxed: it carries a diff and possibly a whole approval token.
    #[serde(rename = "apply_changes")]
    Changes(Box<ChangesCard>),
    #[serde(rename = "skill_install")]
    SkillInstall(Box<SkillInstallCard>),
}

impl CardPayload {
    /// The card's lifecycle kind; `None` for a tool card (answered as a plan).
    pub fn kind(&self) -> Option<CardKind> {
        Some(match self {
            CardPayload::Plan(_) => CardKind::Plan,
            CardPayload::Tool(_) | CardPayload::Changes(_) | CardPayload::SkillInstall(_) => {
                return None;
            }
            CardPayload::Gate(_) => CardKind::Gate,
            CardPayload::Checkpoint(_) => CardKind::Checkpoint,
            CardPayload::BatchReview(_) => CardKind::BatchReview,
            CardPayload::DraftReview(_) => CardKind::DraftReview,
            CardPayload::Decision(_) => CardKind::Decision,
            CardPayload::Suggestion(_) => CardKind::Suggestion,
            CardPayload::AutonomyThreshold(_) => CardKind::AutonomyThreshold,
            CardPayload::SecureInput(_) => CardKind::SecureInput,
            CardPayload::ConnectionSetup(_) => CardKind::ConnectionSetup,
            CardPayload::PermissionEscalation(_) => CardKind::PermissionEscalation,
            CardPayload::ConnectionFailure(_) => CardKind::ConnectionFailure,
        })
    }

    /// The stored `card_type` (also the server frame's `type`).
    pub fn card_type(&self) -> &'static str {
        match self {
            CardPayload::Tool(_) => TOOL_CARD,
            CardPayload::Changes(_) => CHANGES_CARD,
            CardPayload::SkillInstall(_) => SKILL_INSTALL_CARD,
            other => other.kind().map_or(PLAN_CARD, CardKind::card_type),
        }
    }

    /// Plan-style cards (plan, fix-task, renewal, tool) are answered through
    /// the ApprovalEngine with `approval_response`.
    pub fn is_approval(&self) -> bool {
        matches!(
            self,
            CardPayload::Plan(_)
                | CardPayload::Tool(_)
                | CardPayload::Changes(_)
                | CardPayload::SkillInstall(_)
        )
    }

    /// The work item a plan or tool card is about.
    pub fn work_item_id(&self) -> Option<&str> {
        match self {
            CardPayload::Plan(p) => Some(&p.work_item_id),
            CardPayload::Tool(t) => Some(&t.work_item_id),
            CardPayload::Changes(c) => Some(&c.work_item_id),
            _ => None,
        }
    }

    pub fn origin(&self) -> CardOrigin {
        match self {
            CardPayload::Plan(p) => p.origin,
            CardPayload::Tool(t) => t.origin,
            CardPayload::Changes(_) => CardOrigin::WorkExecutor,
            _ => CardOrigin::Turn,
        }
    }

    /// Decodes a `card_type` and its JSON payload (tests and fixtures; the
    /// runtime builds cards with the typed builders below).
    pub fn from_parts(card_type: &str, payload: Value) -> Result<CardPayload, serde_json::Error> {
        serde_json::from_value(serde_json::json!({"card_type": card_type, "payload": payload}))
    }

    /// The card's risk (§0.5.2), decided by the server for every channel:
    /// plan cards from their plan, tool cards from the tool, the rest by
    /// [`risk::card_risk`]. `None` for a secure-input card (it collects a
    /// credential, not a decision).
    pub fn risk(&self) -> Option<Risk> {
        match self {
            CardPayload::Plan(p) => Some(p.plan.risk.clone()),
            CardPayload::Tool(t) => Some(risk::tool_call_risk(&t.tool_name)),
            CardPayload::Changes(c) => Some(risk::changes_risk(c)),
            CardPayload::SkillInstall(c) => Some(risk::skill_install_risk(c)),
            other => risk::card_risk(other).map(|level| Risk {
                level,
                reasons: Vec::new(),
            }),
        }
    }
}

/// A plan card for `item`, bound to `plan_hash` (the caller computed it
/// from the same item).
pub fn plan_card(item: &WorkItem, plan_hash: &str) -> PlanCard {
    PlanCard {
        work_item_id: item.id.clone(),
        plan_hash: plan_hash.to_string(),
        plan: Box::new(PlanView::of(item)),
        verify: item.verify.clone(),
        from_scope: None,
        inbox_id: None,
        goal_id: None,
        reason: None,
        renewal: false,
        origin: CardOrigin::Turn,
    }
}

/// A proposed plan from a conversation; `from_scope` is kept only when it
/// is not the owner's (a chatbot customer's request).
pub fn proposed_plan_card(
    item: &WorkItem,
    plan_hash: &str,
    inbox_id: &str,
    from_scope: &str,
    owner_scope: &str,
) -> CardPayload {
    CardPayload::Plan(PlanCard {
        inbox_id: Some(inbox_id.to_string()),
        from_scope: (from_scope != owner_scope).then(|| from_scope.to_string()),
        ..plan_card(item, plan_hash)
    })
}

/// A goal-spawned task waiting for interactive approval.
pub fn fix_task_card(task: &WorkItem, plan_hash: &str, goal_id: &str, reason: &str) -> CardPayload {
    CardPayload::Plan(PlanCard {
        goal_id: Some(goal_id.to_string()),
        reason: Some(reason.to_string()),
        origin: CardOrigin::WorkExecutor,
        ..plan_card(task, plan_hash)
    })
}

/// A goal whose standing approval stopped verifying (§5.2.3).
pub fn renewal_card(goal: &WorkItem, plan_hash: &str, reason: &str) -> CardPayload {
    CardPayload::Plan(PlanCard {
        goal_id: Some(goal.id.clone()),
        reason: Some(reason.to_string()),
        renewal: true,
        origin: CardOrigin::WorkExecutor,
        ..plan_card(goal, plan_hash)
    })
}

/// A goal's plan card with its terms (`goal_terms`): what the standing
/// approval covers and the zone its schedule is read in. Other cards are
/// returned as they are.
pub fn with_goal_terms(
    card: CardPayload,
    zone: &str,
    limits: crate::goal_terms::StandingLimits,
) -> CardPayload {
    match card {
        CardPayload::Plan(mut p) if p.plan.standing => {
            p.plan.terms = Some(crate::goal_terms::goal_terms(
                p.plan.schedule.as_deref(),
                zone,
                limits,
            ));
            CardPayload::Plan(p)
        }
        other => other,
    }
}

/// The call a tool card asks about.
pub struct ToolCall<'a> {
    pub tool_name: &'a str,
    pub arguments: &'a Value,
    pub reason: &'a str,
    pub attempt: u64,
}

/// A paused tool call of `item`; `pause` is the executor's resume state.
pub fn tool_card(item: &WorkItem, call: ToolCall<'_>, pause: Value) -> CardPayload {
    CardPayload::Tool(Box::new(ToolCard {
        work_item_id: item.id.clone(),
        title: item.title.clone(),
        tool_name: call.tool_name.to_string(),
        arguments: call.arguments.clone(),
        reason: call.reason.to_string(),
        attempt: call.attempt,
        origin: CardOrigin::WorkExecutor,
        pause,
        decision: None,
    }))
}

/// A secure-input request (the value goes `POST /secrets/{ref_id}`).
pub fn secure_input_card(label: &str, input_hint: Option<&str>, guidance: Value) -> CardPayload {
    CardPayload::SecureInput(SecureInputCard {
        label: label.to_string(),
        input_hint: input_hint.map(str::to_string),
        guidance,
    })
}

/// A gate asking the owner whether a turn may pass it.
pub fn gate_card(gate_name: &str, value: Value, context: Value) -> CardPayload {
    CardPayload::Gate(GateCard {
        gate_name: gate_name.to_string(),
        value,
        context,
    })
}

#[cfg(test)]
#[path = "cards_tests.rs"]
mod tests;
