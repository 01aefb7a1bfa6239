//! Card lifecycle policy (§8.1 "approval flow error handling", §4.1.1
//! `RichCardChannel`): pure functions over a [`PendingCard`] and the
//! owner's answer, sequenced by the Stream.
//!
//! Why a separate module: every card type shares one lifecycle — a card is
//! answered at most once, only from its own scope, only before its deadline,
//! and otherwise resolves to its *safe default* (declined / block / reject /
//! not now / cancel / skip) — and that rule must not depend on which actor
//! produced the card. The deadline is the earlier of the card's own
//! `expires_at` and `created_at` + its type's timeout (plan and other
//! decision cards 300 s, gate and checkpoint cards 120 s by default;
//! `approval.plan_card_timeout_seconds` / `approval.gate_card_timeout_seconds`).
//!
//! Nothing here writes; the Stream persists and audits what these functions
//! decide. Audit data built here never carries free text (`freetext`,
//! `edited_text`): only ids, card types and chip values.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use silas_core::config::Config;
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_storage::PendingCard;

/// §8.1: "300s for plan approvals".
pub const DEFAULT_PLAN_TIMEOUT: Duration = Duration::from_secs(300);
/// §8.1: "120s for gate approvals".
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(120);

use silas_core::cards::CardPayload;
pub use silas_core::cards::{CardKind, CardResponse};

/// Gate and checkpoint cards hold up running work: the short timeout.
fn uses_gate_timeout(kind: CardKind) -> bool {
    matches!(kind, CardKind::Gate | CardKind::Checkpoint)
}

/// How long each card type waits for the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardTimeouts {
    pub plan: Duration,
    pub gate: Duration,
}

impl Default for CardTimeouts {
    fn default() -> Self {
        CardTimeouts {
            plan: DEFAULT_PLAN_TIMEOUT,
            gate: DEFAULT_GATE_TIMEOUT,
        }
    }
}

impl CardTimeouts {
    pub fn from_config(cfg: &Config) -> CardTimeouts {
        CardTimeouts {
            plan: Duration::from_secs(cfg.approval.plan_card_timeout_seconds),
            gate: Duration::from_secs(cfg.approval.gate_card_timeout_seconds),
        }
    }

    /// Card types this module does not know (added by other flows, e.g. a
    /// tool-approval card) get the plan timeout: they are decisions too.
    pub fn for_card_type(&self, card_type: &str) -> Duration {
        match CardKind::from_card_type(card_type) {
            Some(k) if uses_gate_timeout(k) => self.gate,
            _ => self.plan,
        }
    }
}

/// The moment a card stops accepting answers.
pub fn deadline(card: &PendingCard, timeouts: &CardTimeouts) -> Timestamp {
    // A change card holds up nothing (the task is done): an apply card
    // waits as long as an approval lives (`approval.default_ttl_minutes`),
    // so the owner can read the diff later; an undo card exactly its undo
    // window (§0.5.5).
    if let CardPayload::Changes(_) = &card.card {
        return card.expires_at;
    }
    let timeout = chrono::Duration::from_std(timeouts.for_card_type(card.card_type()))
        .unwrap_or(chrono::Duration::seconds(300));
    card.expires_at.min(card.created_at.plus(timeout))
}

pub fn is_expired(card: &PendingCard, timeouts: &CardTimeouts, now: Timestamp) -> bool {
    now >= deadline(card, timeouts)
}

/// The stored cards of `scope_id` a channel may show when it (re)connects or
/// starts: not past their deadline, and not one whose turn a crash cut off
/// (that one is the replay's to deliver, see [`turn_committed`]).
pub fn waiting_cards(
    store: &silas_storage::Store,
    scope_id: &str,
    timeouts: &CardTimeouts,
    now: Timestamp,
) -> Vec<PendingCard> {
    let cards = store.records::<PendingCard>().list().unwrap_or_default();
    cards
        .into_iter()
        .filter(|c| {
            c.scope_id == scope_id
                && !is_expired(c, timeouts, now)
                && turn_committed(store, c).unwrap_or(false)
        })
        .collect()
}

/// Whether `card` may be shown and answered yet: a plan card a turn filed
/// only once that turn has committed its response. The card is stored just
/// before that commit; a crash in between replays the turn, which files the
/// plan again. Were the stored card served on reconnect and approved in
/// the meantime, the replay would find its plan approved and propose it a
/// second time under a new id — one message, two approved executions
/// (found by `tests/chaos.rs`). Until the commit the card reads as unknown;
/// the replay delivers it.
pub fn turn_committed(
    store: &silas_storage::Store,
    card: &PendingCard,
) -> Result<bool, silas_storage::StoreError> {
    let CardPayload::Plan(plan) = &card.card else {
        return Ok(true);
    };
    let Some(inbox_id) = plan.inbox_id.as_deref() else {
        return Ok(true);
    };
    Ok(store
        .inbox()
        .get(inbox_id)?
        .is_some_and(|r| r.stage >= silas_storage::InboxStage::Responded))
}

/// How a card was resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The owner answered in time.
    Answered,
    /// The deadline passed: safe default.
    TimedOut,
    /// The scope's last connection closed: safe default.
    Disconnected,
    /// Shutdown closed card intake: safe default.
    Shutdown,
    /// What asked no longer needs an answer (a connection setup that
    /// ended): safe default, and it is not shown again.
    Withdrawn,
}

impl Resolution {
    pub fn audit_event(self) -> &'static str {
        match self {
            Resolution::Answered => "card_answered",
            Resolution::TimedOut => "card_timed_out",
            Resolution::Disconnected => "card_declined_disconnected",
            Resolution::Shutdown => "card_declined_shutdown",
            Resolution::Withdrawn => "card_withdrawn",
        }
    }
}

/// What the requester of a card gets back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardAnswer {
    pub request_id: String,
    pub kind: CardKind,
    pub response: CardResponse,
    pub resolution: Resolution,
    /// Where an answered card's answer arrived (already checked against the
    /// card's audience); `None` for a safe default. A requester that turns
    /// the answer into a token (e.g. a `[Just this once]` escalation) hands
    /// it to the ApprovalEngine, which checks it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::approval::AnswerOrigin>,
}

impl CardAnswer {
    /// Whether the owner actively chose something (a safe default never
    /// counts as consent to change state).
    pub fn answered(&self) -> bool {
        self.resolution == Resolution::Answered
    }
}

fn verdict(v: &str) -> CardResponse {
    CardResponse::Verdict {
        verdict: v.to_string(),
    }
}

/// The step a connection-setup card asks about (empty for other cards).
fn step_type_of(card: &PendingCard) -> &str {
    match &card.card {
        CardPayload::ConnectionSetup(c) => &c.step_type,
        _ => "",
    }
}

/// The safe outcome of a card nobody answered (§8.1: declined / block;
/// suggestion → not now; never an implicit widen or apply).
pub fn safe_default(kind: CardKind, card: &PendingCard) -> CardResponse {
    match kind {
        CardKind::Plan => verdict("declined"),
        CardKind::Gate => verdict("block"),
        CardKind::Checkpoint => verdict("decline"),
        CardKind::BatchReview => CardResponse::Batch {
            verdict: "decline".into(),
            selected_item_ids: Vec::new(),
        },
        CardKind::DraftReview => CardResponse::Draft {
            verdict: "reject".into(),
            edited_text: None,
        },
        CardKind::Decision => CardResponse::Choice {
            selected_value: None,
            freetext: None,
        },
        CardKind::Suggestion => CardResponse::Choice {
            selected_value: Some("not_now".into()),
            freetext: None,
        },
        CardKind::AutonomyThreshold => verdict("decline"),
        CardKind::PermissionEscalation => verdict("deny"),
        CardKind::SecureInput => CardResponse::SecureInput { success: false },
        CardKind::ConnectionSetup => CardResponse::SetupAction {
            step_type: step_type_of(card).into(),
            action: "cancel".into(),
        },
        CardKind::ConnectionFailure => CardResponse::Recovery {
            selected_action: "skip".into(),
        },
    }
}

/// Why an answer was refused. Sent back as a typed `error` frame; the card
/// is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CardRejection {
    #[error("no pending card {0:?}")]
    Unknown(String),
    #[error("card {0:?} was already answered")]
    AlreadyAnswered(String),
    #[error("card {0:?} expired and was resolved to its safe default")]
    Expired(String),
    #[error("card {request_id:?} is a {card_type} card; answer it with {expected}")]
    WrongType {
        request_id: String,
        card_type: String,
        expected: String,
    },
    #[error("invalid answer to card {request_id:?}: {reason}")]
    Invalid { request_id: String, reason: String },
    #[error("card intake is closed: {0}")]
    Closed(String),
    /// Over `limits.card_submissions_per_minute_per_scope` (§18.5): the
    /// answer was not looked at and the card is unchanged.
    #[error("card {request_id:?}: too many card answers; wait a minute and answer again")]
    RateLimited { request_id: String },
    #[error("card {request_id:?}: {message}")]
    Failed {
        request_id: String,
        code: ErrorCode,
        message: String,
    },
}

impl CardRejection {
    pub fn request_id(&self) -> Option<&str> {
        match self {
            CardRejection::Unknown(r)
            | CardRejection::AlreadyAnswered(r)
            | CardRejection::Expired(r) => Some(r),
            CardRejection::WrongType { request_id, .. }
            | CardRejection::Invalid { request_id, .. }
            | CardRejection::Failed { request_id, .. }
            | CardRejection::RateLimited { request_id } => Some(request_id),
            CardRejection::Closed(_) => None,
        }
    }
}

impl Coded for CardRejection {
    fn code(&self) -> ErrorCode {
        match self {
            CardRejection::Expired(_) => ErrorCode::EChannelTimeout,
            CardRejection::Closed(_) => ErrorCode::EChannelDisconnected,
            CardRejection::RateLimited { .. } => ErrorCode::EChannelRateLimited,
            CardRejection::Failed { code, .. } => *code,
            _ => ErrorCode::EChannelProtocol,
        }
    }
}

fn one_of(request_id: &str, value: &str, allowed: &[&str]) -> Result<(), CardRejection> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(CardRejection::Invalid {
            request_id: request_id.to_string(),
            reason: format!("{value:?} is not one of {}", allowed.join(", ")),
        })
    }
}

/// The option values a card offered (strings or objects with
/// `value`/`action`/`id`); nothing when the producer listed none.
fn offered(options: &Value) -> Vec<String> {
    let Some(list) = options.as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|o| match o {
            Value::String(s) => Some(s.clone()),
            Value::Object(m) => ["value", "action", "id"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str))
                .map(str::to_string),
            _ => None,
        })
        .collect()
}

fn invalid(request_id: &str, reason: impl Into<String>) -> CardRejection {
    CardRejection::Invalid {
        request_id: request_id.to_string(),
        reason: reason.into(),
    }
}

/// Normalises and validates an answer against the card it answers.
pub fn validate_response(
    kind: CardKind,
    card: &PendingCard,
    response: CardResponse,
) -> Result<CardResponse, CardRejection> {
    let rid = card.request_id.as_str();
    let shape_error = || {
        invalid(
            rid,
            format!("wrong answer shape for a {} card", kind.card_type()),
        )
    };
    match (kind, response) {
        (CardKind::Gate, CardResponse::Verdict { verdict: v }) => {
            // The spec's result is "approve" or "block"; accept the obvious synonyms.
            let v = match v.as_str() {
                "approve" | "approved" | "continue" => "approve",
                "block" | "blocked" | "decline" | "declined" => "block",
                _ => {
                    return Err(invalid(
                        rid,
                        format!("gate verdict must be approve or block, got {v:?}"),
                    ));
                }
            };
            Ok(verdict(v))
        }
        (CardKind::Checkpoint, CardResponse::Verdict { verdict: v }) => {
            let options = match &card.card {
                CardPayload::Checkpoint(c) => c.options.as_slice(),
                _ => &[],
            };
            if !options.is_empty() && !options.contains(&v) && v != "decline" {
                return Err(invalid(
                    rid,
                    format!("{v:?} is not one of the checkpoint's options"),
                ));
            }
            Ok(verdict(&v))
        }
        (CardKind::AutonomyThreshold, CardResponse::Verdict { verdict: v }) => {
            one_of(rid, &v, &["approve", "decline", "tighten_now"])?;
            Ok(verdict(&v))
        }
        (CardKind::PermissionEscalation, CardResponse::Verdict { verdict: v }) => {
            one_of(rid, &v, &["approve", "just_this_once", "deny"])?;
            Ok(verdict(&v))
        }
        (
            CardKind::BatchReview,
            CardResponse::Batch {
                verdict: v,
                selected_item_ids,
            },
        ) => {
            one_of(rid, &v, &["approve", "decline", "edit_selection"])?;
            if v == "edit_selection" {
                if selected_item_ids.is_empty() {
                    return Err(invalid(rid, "edit_selection requires selected_item_ids"));
                }
                let items = match &card.card {
                    CardPayload::BatchReview(b) => b.batch.get("items").and_then(Value::as_array),
                    _ => None,
                };
                if let Some(items) = items {
                    let known: HashSet<&str> = items
                        .iter()
                        .filter_map(|i| i.get("id").and_then(Value::as_str))
                        .collect();
                    if let Some(bad) = selected_item_ids
                        .iter()
                        .find(|i| !known.contains(i.as_str()))
                    {
                        return Err(invalid(
                            rid,
                            format!("{bad:?} is not an item of this batch"),
                        ));
                    }
                }
            } else if !selected_item_ids.is_empty() {
                return Err(invalid(
                    rid,
                    format!("selected_item_ids must be empty for {v}"),
                ));
            }
            Ok(CardResponse::Batch {
                verdict: v,
                selected_item_ids,
            })
        }
        (
            CardKind::DraftReview,
            CardResponse::Draft {
                verdict: v,
                edited_text,
            },
        ) => {
            one_of(rid, &v, &["approve", "edit", "rephrase", "reject"])?;
            if v == "edit" && edited_text.as_deref().is_none_or(|t| t.trim().is_empty()) {
                return Err(invalid(rid, "edit requires edited_text"));
            }
            Ok(CardResponse::Draft {
                verdict: v,
                edited_text,
            })
        }
        (
            CardKind::Decision | CardKind::Suggestion,
            CardResponse::Choice {
                selected_value,
                freetext,
            },
        ) => {
            let freetext = freetext.filter(|t| !t.trim().is_empty());
            match &selected_value {
                Some(v) => {
                    let options = match &card.card {
                        CardPayload::Decision(d) => offered(&d.options),
                        CardPayload::Suggestion(s) => offered(&s.options),
                        _ => Vec::new(),
                    };
                    // Suggestions always offer "do it" / "not now" (§4.1.1).
                    let builtin = kind == CardKind::Suggestion
                        && ["do_it", "not_now", "dismiss"].contains(&v.as_str());
                    if !options.contains(v) && !builtin {
                        return Err(invalid(
                            rid,
                            format!("{v:?} is not one of the card's options"),
                        ));
                    }
                }
                None => {
                    let allow = matches!(&card.card, CardPayload::Decision(d) if d.allow_freetext);
                    if freetext.is_none() || !allow {
                        return Err(invalid(rid, "choose one of the options"));
                    }
                }
            }
            Ok(CardResponse::Choice {
                selected_value,
                freetext,
            })
        }
        (CardKind::ConnectionSetup, CardResponse::SetupAction { step_type, action }) => {
            if matches!(&card.card, CardPayload::ConnectionSetup(c) if c.step_type != step_type) {
                return Err(invalid(
                    rid,
                    format!("this card is not a {step_type:?} step"),
                ));
            }
            one_of(rid, &action, &["done", "cancel", "trouble", "retry"])?;
            Ok(CardResponse::SetupAction { step_type, action })
        }
        (CardKind::ConnectionFailure, CardResponse::Recovery { selected_action }) => {
            let options = match &card.card {
                CardPayload::ConnectionFailure(f) => offered(&f.recovery_options),
                _ => Vec::new(),
            };
            if selected_action != "skip" && !options.contains(&selected_action) {
                return Err(invalid(
                    rid,
                    format!("{selected_action:?} is not a recovery option"),
                ));
            }
            Ok(CardResponse::Recovery { selected_action })
        }
        (CardKind::SecureInput, r @ CardResponse::SecureInput { .. }) => Ok(r),
        (CardKind::Plan, CardResponse::Verdict { verdict: v }) => {
            one_of(rid, &v, &["approved", "declined", "edit_requested"])?;
            Ok(verdict(&v))
        }
        _ => Err(shape_error()),
    }
}

/// A `secure_input_request` card (§0.5.3 `SecureInputCard`): only the
/// request's metadata; the value itself never reaches the runtime (it goes
/// `POST /secrets/{ref_id}` → the secret store). `ref_id` doubles as the
/// card's request id.
pub fn secure_input_card(
    ref_id: &str,
    scope_id: &str,
    label: &str,
    input_hint: Option<&str>,
    guidance: Value,
    now: Timestamp,
    timeouts: &CardTimeouts,
) -> PendingCard {
    let ttl = chrono::Duration::from_std(timeouts.plan).unwrap_or(chrono::Duration::seconds(300));
    PendingCard {
        request_id: ref_id.to_string(),
        scope_id: scope_id.to_string(),
        card: silas_core::cards::secure_input_card(label, input_hint, guidance),
        created_at: now,
        expires_at: now.plus(ttl),
        audience: silas_storage::CardAudience::Owner,
    }
}

/// The owner's card for a connection whose recovery failed (§5.10.4,
/// §3.12): the failure type, the service, the script's message and its
/// recovery options (`skip` is always possible and is the safe default).
pub fn connection_failure_card(
    request_id: &str,
    connection_id: &str,
    failure: &silas_core::model::connections::ConnectionFailure,
    now: Timestamp,
    timeouts: &CardTimeouts,
) -> PendingCard {
    let ttl = chrono::Duration::from_std(timeouts.plan).unwrap_or(chrono::Duration::seconds(300));
    let options: Vec<Value> = failure
        .recovery_options
        .iter()
        .map(|o| serde_json::json!({"action": o.action, "label": o.label}))
        .collect();
    PendingCard {
        request_id: request_id.to_string(),
        scope_id: crate::turn::OWNER_SCOPE.to_string(),
        card: CardPayload::ConnectionFailure(silas_core::cards::ConnectionFailureCard {
            failure_type: failure.failure_type.as_str().to_string(),
            service: if failure.service.is_empty() {
                connection_id.to_string()
            } else {
                failure.service.clone()
            },
            message: failure.message.clone(),
            recovery_options: Value::Array(options),
        }),
        created_at: now,
        expires_at: now.plus(ttl),
        audience: silas_storage::CardAudience::Owner,
    }
}

/// Everything an answer must pass before it changes anything: the card
/// exists, belongs to the answering scope (another scope's card is
/// "unknown", so existence does not leak), is of the answered type and is
/// not past its deadline; then the answer itself is validated.
// The arguments are the facts one decision needs; a struct would only
// rename them.
#[allow(clippy::too_many_arguments)]
pub fn check_answer(
    card: Option<&PendingCard>,
    request_id: &str,
    scope_id: &str,
    kind: CardKind,
    response: CardResponse,
    already_answered: bool,
    timeouts: &CardTimeouts,
    now: Timestamp,
) -> Result<CardResponse, CardRejection> {
    let card = match card {
        Some(c) if c.scope_id == scope_id => c,
        _ if already_answered => return Err(CardRejection::AlreadyAnswered(request_id.into())),
        _ => return Err(CardRejection::Unknown(request_id.into())),
    };
    if card.card.kind() != Some(kind) {
        let expected = card
            .card
            .kind()
            .map_or("approval_response", CardKind::response_type);
        return Err(CardRejection::WrongType {
            request_id: request_id.into(),
            card_type: card.card_type().to_string(),
            expected: expected.into(),
        });
    }
    if is_expired(card, timeouts, now) {
        return Err(CardRejection::Expired(request_id.into()));
    }
    validate_response(kind, card, response)
}

/// The audit record of a resolution: ids, type and the chip chosen — never
/// free text, which may hold anything the owner typed.
pub fn audit_record(card: &PendingCard, answer: &CardAnswer) -> (&'static str, Value) {
    let mut data = json!({
        "request_id": card.request_id,
        "card_type": card.card_type(),
        "scope_id": card.scope_id,
        "resolution": answer.resolution,
    });
    let outcome = match &answer.response {
        CardResponse::Verdict { verdict } => json!({"verdict": verdict}),
        CardResponse::Batch {
            verdict,
            selected_item_ids,
        } => json!({"verdict": verdict, "selected": selected_item_ids.len()}),
        CardResponse::Draft {
            verdict,
            edited_text,
        } => json!({"verdict": verdict, "edited": edited_text.is_some()}),
        CardResponse::Choice {
            selected_value,
            freetext,
        } => json!({"selected_value": selected_value, "freetext_given": freetext.is_some()}),
        CardResponse::SetupAction { step_type, action } => {
            json!({"step_type": step_type, "action": action})
        }
        CardResponse::Recovery { selected_action } => json!({"selected_action": selected_action}),
        CardResponse::SecureInput { success } => json!({"success": success}),
    };
    if let (Value::Object(d), Value::Object(o)) = (&mut data, outcome) {
        d.extend(o);
    }
    (answer.resolution.audit_event(), data)
}

/// Remembers recently resolved card ids and their scopes (bounded), so a
/// second answer from the card's own scope is told "already answered"
/// rather than "unknown" — and another scope is told "unknown" either way,
/// so a customer cannot probe whether someone else's card was answered.
#[derive(Debug, Default)]
pub struct RecentlyResolved {
    order: VecDeque<String>,
    scopes: HashMap<String, String>,
}

impl RecentlyResolved {
    pub const CAPACITY: usize = 4096;

    pub fn remember(&mut self, request_id: &str, scope_id: &str) {
        if self
            .scopes
            .insert(request_id.to_string(), scope_id.to_string())
            .is_none()
        {
            self.order.push_back(request_id.to_string());
            while self.order.len() > Self::CAPACITY {
                if let Some(old) = self.order.pop_front() {
                    self.scopes.remove(&old);
                }
            }
        }
    }

    /// Whether `scope_id`'s card `request_id` was resolved recently.
    pub fn answered_in(&self, request_id: &str, scope_id: &str) -> bool {
        self.scopes.get(request_id).is_some_and(|s| s == scope_id)
    }
}

#[cfg(test)]
#[path = "cards_tests.rs"]
mod tests;
