//! What each card offers in Telegram and what each offer means: one list
//! of [`Choice`]s per card, read by the renderer (buttons) and by the answer
//! mapping (presses and typed answers), so a button can only ever produce an
//! answer the card lifecycle (`silas_actors::cards::validate_response`)
//! accepts — the same values the web channel sends.

use serde_json::Value;
use silas_core::cards::{CardKind, CardPayload, CardResponse};
use silas_core::model::approval::{ApprovalVerdict, ChangesAction};
use silas_core::risk::RiskLevel;

/// What a pressed button or a typed answer means (channel-neutral).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardAnswer {
    /// Plan and tool cards: for the ApprovalEngine.
    Approval(ApprovalVerdict),
    /// Every other card: for the card lifecycle.
    Card {
        kind: CardKind,
        response: CardResponse,
    },
}

/// Buttons for a card's own options (decision, checkpoint, suggestion,
/// connection failure); the rest are answered in the web app.
pub(crate) const MAX_OPTION_BUTTONS: usize = 8;

/// Which §4.1 text synonym a choice answers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// "approve", "yes", "ok"…
    Yes,
    /// "decline", "no", "reject"… — always the card's safe side.
    No,
    Other,
}

/// One button of a card.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    /// Callback `action` (≤ 7 bytes: the rest of the 64 is handle+nonce+MAC).
    pub action: String,
    pub icon: &'static str,
    /// Plain label, without icon or number.
    pub label: String,
    /// The option's value as the producer wrote it (typed-answer match).
    pub value: Option<String>,
    pub role: Role,
    /// What the message is edited to once this was the answer.
    pub outcome: String,
    pub answer: CardAnswer,
}

/// A card's choices; `more` counts the options left to the web app.
pub(crate) struct Choices {
    pub list: Vec<Choice>,
    pub more: usize,
}

fn choice(action: &str, icon: &'static str, label: &str, role: Role, answer: CardAnswer) -> Choice {
    let outcome = match role {
        Role::Yes => format!("✅ {label}"),
        Role::No => format!("❌ {label}"),
        Role::Other => format!("Chosen: {label}"),
    };
    Choice {
        action: action.to_string(),
        icon,
        label: label.to_string(),
        value: None,
        role,
        outcome,
        answer,
    }
}

fn with_outcome(mut c: Choice, outcome: &str) -> Choice {
    c.outcome = outcome.to_string();
    c
}

fn card(kind: CardKind, response: CardResponse) -> CardAnswer {
    CardAnswer::Card { kind, response }
}

fn verdict(kind: CardKind, v: &str) -> CardAnswer {
    card(
        kind,
        CardResponse::Verdict {
            verdict: v.to_string(),
        },
    )
}

fn pick(kind: CardKind, v: &str) -> CardAnswer {
    card(
        kind,
        CardResponse::Choice {
            selected_value: Some(v.to_string()),
            freetext: None,
        },
    )
}

/// "needs_review" → "Needs review".
pub(crate) fn words(s: &str) -> String {
    let s = s.replace('_', " ");
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A producer's option list as (value, label): strings, or objects whose
/// value is `value`/`action`/`id` — the keys the lifecycle's `offered`
/// reads, so every value shown here is one it accepts — and whose label is
/// `label` (else the value in words).
pub(crate) fn options(list: &Value) -> Vec<(String, String)> {
    let Some(list) = list.as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|o| match o {
            Value::String(s) => Some((s.clone(), words(s))),
            Value::Object(m) => {
                let value = ["value", "action", "id"]
                    .iter()
                    .find_map(|k| m.get(*k).and_then(Value::as_str))?;
                let label = m
                    .get("label")
                    .and_then(Value::as_str)
                    .filter(|l| !l.trim().is_empty())
                    .map_or_else(|| words(value), str::to_string);
                Some((value.to_string(), label))
            }
            _ => None,
        })
        .collect()
}

/// Option buttons `o0`..`o7` answering `answer(value)`.
fn option_choices(
    opts: &[(String, String)],
    answer: impl Fn(&str) -> CardAnswer,
) -> (Vec<Choice>, usize) {
    let list = opts
        .iter()
        .take(MAX_OPTION_BUTTONS)
        .enumerate()
        .map(|(i, (value, label))| Choice {
            value: Some(value.clone()),
            ..choice(&format!("o{i}"), "", label, Role::Other, answer(value))
        })
        .collect();
    (list, opts.len().saturating_sub(MAX_OPTION_BUTTONS))
}

fn setup_choices(step_type: &str) -> Vec<Choice> {
    let act = |action: &str| {
        card(
            CardKind::ConnectionSetup,
            CardResponse::SetupAction {
                step_type: step_type.to_string(),
                action: action.to_string(),
            },
        )
    };
    let done = |label: &str| choice("done", "✅", label, Role::Yes, act("done"));
    let retry = choice("retry", "🔁", "Try again", Role::Yes, act("retry"));
    let trouble = choice("help", "🆘", "Having trouble", Role::Other, act("trouble"));
    let cancel = choice("cancel", "✖️", "Cancel", Role::No, act("cancel"));
    // The same steps and actions as the web app's setup card.
    match step_type {
        // The value goes through the web app's secure form, never the chat.
        "secure_input" | "progress" => vec![cancel],
        "device_code" => vec![done("I've done it"), trouble, cancel],
        "browser_redirect" => vec![trouble, cancel],
        "completion" => vec![done("Done")],
        "failure" => vec![retry, trouble, cancel],
        _ => vec![done("Continue"), cancel],
    }
}

/// Everything `card` offers, in display order.
pub(crate) fn choices(card_payload: &CardPayload) -> Choices {
    use CardKind as K;
    let mut more = 0;
    let list = match card_payload {
        CardPayload::Plan(_) | CardPayload::Tool(_) | CardPayload::SkillInstall(_) => vec![
            with_outcome(
                choice(
                    "ok",
                    "✅",
                    "Approve",
                    Role::Yes,
                    CardAnswer::Approval(ApprovalVerdict::Approved),
                ),
                "✅ Approved",
            ),
            with_outcome(
                choice(
                    "no",
                    "❌",
                    "Decline",
                    Role::No,
                    CardAnswer::Approval(ApprovalVerdict::Declined),
                ),
                "❌ Declined",
            ),
        ],
        CardPayload::Changes(c) => {
            let (yes, yes_done, no, no_done) = match c.phase {
                ChangesAction::Apply => ("Apply", "✅ Applying", "Decline", "❌ Not applied"),
                ChangesAction::Undo => ("Undo", "↩️ Undoing", "Keep", "Kept"),
            };
            vec![
                with_outcome(
                    choice(
                        "ok",
                        "✅",
                        yes,
                        Role::Yes,
                        CardAnswer::Approval(ApprovalVerdict::Approved),
                    ),
                    yes_done,
                ),
                with_outcome(
                    choice(
                        "no",
                        "❌",
                        no,
                        Role::No,
                        CardAnswer::Approval(ApprovalVerdict::Declined),
                    ),
                    no_done,
                ),
            ]
        }
        CardPayload::Gate(_) => vec![
            with_outcome(
                choice(
                    "ok",
                    "✅",
                    "Let it through",
                    Role::Yes,
                    verdict(K::Gate, "approve"),
                ),
                "✅ Let through",
            ),
            with_outcome(
                choice("no", "⛔", "Block", Role::No, verdict(K::Gate, "block")),
                "⛔ Blocked",
            ),
        ],
        CardPayload::Checkpoint(c) => {
            // "decline" is always accepted: it is the one fixed way out.
            let opts: Vec<(String, String)> = c
                .options
                .iter()
                .filter(|o| o.as_str() != "decline")
                .map(|o| (o.clone(), words(o)))
                .collect();
            let (mut list, rest) = option_choices(&opts, |v| verdict(K::Checkpoint, v));
            more = rest;
            list.push(with_outcome(
                choice(
                    "no",
                    "❌",
                    "Decline",
                    Role::No,
                    verdict(K::Checkpoint, "decline"),
                ),
                "❌ Declined",
            ));
            list
        }
        CardPayload::BatchReview(_) => {
            let batch = |v: &str| {
                card(
                    K::BatchReview,
                    CardResponse::Batch {
                        verdict: v.to_string(),
                        selected_item_ids: Vec::new(),
                    },
                )
            };
            vec![
                with_outcome(
                    choice("ok", "✅", "Approve all", Role::Yes, batch("approve")),
                    "✅ Approved all",
                ),
                with_outcome(
                    choice("no", "❌", "Decline", Role::No, batch("decline")),
                    "❌ Declined",
                ),
            ]
        }
        CardPayload::DraftReview(_) => {
            let draft = |v: &str| {
                card(
                    K::DraftReview,
                    CardResponse::Draft {
                        verdict: v.to_string(),
                        edited_text: None,
                    },
                )
            };
            vec![
                with_outcome(
                    choice("ok", "✅", "Send as written", Role::Yes, draft("approve")),
                    "✅ Approved as written",
                ),
                with_outcome(
                    choice("re", "🔁", "Rephrase", Role::Other, draft("rephrase")),
                    "🔁 Rephrase asked",
                ),
                with_outcome(
                    choice("no", "❌", "Reject", Role::No, draft("reject")),
                    "❌ Rejected",
                ),
            ]
        }
        CardPayload::Decision(d) => {
            let (list, rest) = option_choices(&options(&d.options), |v| pick(K::Decision, v));
            more = rest;
            list
        }
        CardPayload::Suggestion(s) => {
            let opts: Vec<(String, String)> = options(&s.options)
                .into_iter()
                .filter(|(v, _)| !["do_it", "not_now", "dismiss"].contains(&v.as_str()))
                .collect();
            let (extra, rest) = option_choices(&opts, |v| pick(K::Suggestion, v));
            more = rest;
            let mut list = vec![with_outcome(
                choice("ok", "👍", "Do it", Role::Yes, pick(K::Suggestion, "do_it")),
                "👍 Do it",
            )];
            list.extend(extra);
            list.push(with_outcome(
                choice(
                    "no",
                    "💤",
                    "Not now",
                    Role::No,
                    pick(K::Suggestion, "not_now"),
                ),
                "💤 Not now",
            ));
            list
        }
        CardPayload::AutonomyThreshold(_) => vec![
            with_outcome(
                choice(
                    "ok",
                    "✅",
                    "Approve",
                    Role::Yes,
                    verdict(K::AutonomyThreshold, "approve"),
                ),
                "✅ Approved",
            ),
            with_outcome(
                choice(
                    "tight",
                    "🔒",
                    "Tighten now",
                    Role::Other,
                    verdict(K::AutonomyThreshold, "tighten_now"),
                ),
                "🔒 Tightened",
            ),
            with_outcome(
                choice(
                    "no",
                    "❌",
                    "Decline",
                    Role::No,
                    verdict(K::AutonomyThreshold, "decline"),
                ),
                "❌ Declined",
            ),
        ],
        CardPayload::PermissionEscalation(_) => vec![
            with_outcome(
                choice(
                    "ok",
                    "✅",
                    "Approve",
                    Role::Yes,
                    verdict(K::PermissionEscalation, "approve"),
                ),
                "✅ Access granted",
            ),
            with_outcome(
                choice(
                    "once",
                    "☝️",
                    "Just this once",
                    Role::Other,
                    verdict(K::PermissionEscalation, "just_this_once"),
                ),
                "☝️ Granted just this once",
            ),
            with_outcome(
                choice(
                    "no",
                    "⛔",
                    "Deny",
                    Role::No,
                    verdict(K::PermissionEscalation, "deny"),
                ),
                "⛔ Denied",
            ),
        ],
        // A secret is never typed or tapped into the chat.
        CardPayload::SecureInput(_) => Vec::new(),
        CardPayload::ConnectionSetup(c) => setup_choices(&c.step_type),
        CardPayload::ConnectionFailure(f) => {
            let all = options(&f.recovery_options);
            let skip_label = all
                .iter()
                .find(|(v, _)| v == "skip")
                .map_or_else(|| "Skip".to_string(), |(_, l)| l.clone());
            let opts: Vec<(String, String)> =
                all.into_iter().filter(|(v, _)| v != "skip").collect();
            let recover = |v: &str| {
                card(
                    K::ConnectionFailure,
                    CardResponse::Recovery {
                        selected_action: v.to_string(),
                    },
                )
            };
            let (mut list, rest) = option_choices(&opts, recover);
            more = rest;
            // Always a way out (§4.1.1: "Always includes Skip").
            list.push(choice("skip", "⏭", &skip_label, Role::No, recover("skip")));
            list
        }
    };
    Choices { list, more }
}

/// Cards whose choices a typed number picks (§4.1 fallback).
pub(crate) fn numbered(card: &CardPayload) -> bool {
    matches!(
        card,
        CardPayload::Decision(_)
            | CardPayload::Checkpoint(_)
            | CardPayload::Suggestion(_)
            | CardPayload::ConnectionFailure(_)
            | CardPayload::ConnectionSetup(_)
    )
}

/// The answer a button `action` of `card` stands for; `None` for an action
/// the card never offered. Whether the press may *approve* is the caller's
/// check ([`approvable_here`] when [`is_affirmative`]).
pub fn answer_for_button(card: &CardPayload, action: &str) -> Option<CardAnswer> {
    choices(card)
        .list
        .into_iter()
        .find(|c| c.action == action)
        .map(|c| c.answer)
}

const YES_WORDS: &[&str] = &[
    "approve", "approved", "yes", "y", "yep", "yeah", "ok", "okay", "sure", "go", "go ahead",
    "allow", "accept", "confirm", "✅", "👍", "✔", "👌",
];
const NO_WORDS: &[&str] = &[
    "decline", "declined", "no", "n", "nope", "reject", "rejected", "deny", "denied", "block",
    "cancel", "skip", "not now", "❌", "👎", "✖", "🚫",
];

/// Lower case, trimmed, without emoji variation selectors or a trailing
/// full stop / exclamation mark.
fn normalize(text: &str) -> String {
    let t: String = text.chars().filter(|c| *c != '\u{fe0f}').collect();
    t.trim().trim_end_matches(['.', '!']).trim().to_lowercase()
}

/// §4.1 text fallback: "approve"/"yes"/"ok"/"✅"… and "decline"/"no"/
/// "reject"…, a number "1".."n" picks the n-th option (decision,
/// checkpoint, suggestion, connection failure, setup actions), an option's
/// own label or value picks it; case/whitespace-insensitive. None = not an
/// answer (the text is an ordinary message).
pub fn answer_for_text(card: &CardPayload, text: &str) -> Option<CardAnswer> {
    let said = normalize(text);
    if said.is_empty() {
        return None;
    }
    let list = choices(card).list;
    if numbered(card)
        && let Ok(n) = said.parse::<usize>()
    {
        return n
            .checked_sub(1)
            .and_then(|i| list.get(i))
            .map(|c| c.answer.clone());
    }
    let named = list.iter().find(|c| {
        normalize(&c.label) == said || c.value.as_deref().is_some_and(|v| normalize(v) == said)
    });
    let role = if YES_WORDS.contains(&said.as_str()) {
        Some(Role::Yes)
    } else if NO_WORDS.contains(&said.as_str()) {
        Some(Role::No)
    } else {
        None
    };
    named
        .or_else(|| role.and_then(|r| list.iter().find(|c| c.role == r)))
        .map(|c| c.answer.clone())
}

/// Whether a tap/text in Telegram may approve this card (risk <= max).
/// Declining is always allowed. A secure-input card approves nothing here.
pub fn approvable_here(card: &CardPayload, max: RiskLevel) -> bool {
    card.risk().is_some_and(|r| r.level <= max)
}

/// Whether an answer approves/widens (so [`approvable_here`] must hold) or
/// is the safe side (decline, block, not now, skip, cancel...). Anything
/// not known to be safe counts as affirmative.
pub fn is_affirmative(answer: &CardAnswer) -> bool {
    let response = match answer {
        CardAnswer::Approval(v) => return *v != ApprovalVerdict::Declined,
        CardAnswer::Card { response, .. } => response,
    };
    match response {
        CardResponse::Verdict { verdict } => !matches!(
            verdict.as_str(),
            "block" | "blocked" | "decline" | "declined" | "deny" | "tighten_now"
        ),
        CardResponse::Batch { verdict, .. } => verdict != "decline",
        CardResponse::Draft { verdict, .. } => !matches!(verdict.as_str(), "reject" | "rephrase"),
        CardResponse::Choice { selected_value, .. } => !matches!(
            selected_value.as_deref(),
            None | Some("not_now" | "dismiss")
        ),
        CardResponse::SetupAction { action, .. } => {
            !matches!(action.as_str(), "cancel" | "trouble")
        }
        CardResponse::Recovery { selected_action } => selected_action != "skip",
        CardResponse::SecureInput { success } => *success,
    }
}

/// The label of option `value` of `card` (the value in words when the card
/// does not list it).
fn label_of(card: &CardPayload, value: &str) -> String {
    let opts = match card {
        CardPayload::Decision(d) => options(&d.options),
        CardPayload::Suggestion(s) => options(&s.options),
        CardPayload::ConnectionFailure(f) => options(&f.recovery_options),
        _ => Vec::new(),
    };
    opts.into_iter()
        .find(|(v, _)| v == value)
        .map_or_else(|| words(value), |(_, l)| l)
}

/// The one-line outcome the message is edited to once answered, e.g.
/// "✅ Approved", "❌ Declined", "Chosen: <label>". Plain text (send it
/// without a parse mode); never echoes free text or an edited draft.
pub fn outcome_line(card: &CardPayload, answer: &CardAnswer) -> String {
    if let Some(c) = choices(card).list.into_iter().find(|c| c.answer == *answer) {
        return c.outcome;
    }
    // Answers given in the web app (or options beyond the buttons).
    let response = match answer {
        CardAnswer::Approval(v) => {
            return match v {
                ApprovalVerdict::Approved => "✅ Approved",
                ApprovalVerdict::Declined => "❌ Declined",
                ApprovalVerdict::EditRequested => "✏️ Edit requested",
                ApprovalVerdict::Conditional => "✅ Approved with conditions",
            }
            .to_string();
        }
        CardAnswer::Card { response, .. } => response,
    };
    match response {
        CardResponse::Verdict { verdict } => format!("Answered: {}", words(verdict)),
        CardResponse::Batch {
            verdict,
            selected_item_ids,
        } if verdict == "edit_selection" => {
            format!("✅ Approved {} selected", selected_item_ids.len())
        }
        CardResponse::Batch { verdict, .. } | CardResponse::Draft { verdict, .. } => {
            match verdict.as_str() {
                "edit" => "✅ Sent with your edits".to_string(),
                v => format!("Answered: {}", words(v)),
            }
        }
        CardResponse::Choice {
            selected_value: Some(v),
            ..
        } => format!("Chosen: {}", label_of(card, v)),
        CardResponse::Choice {
            freetext: Some(_), ..
        } => "Answered in your own words".to_string(),
        CardResponse::Choice { .. } => "No choice made".to_string(),
        CardResponse::SetupAction { action, .. } => format!("Answered: {}", words(action)),
        CardResponse::Recovery { selected_action } => {
            format!("Chosen: {}", label_of(card, selected_action))
        }
        CardResponse::SecureInput { success: true } => "🔒 Stored securely".to_string(),
        CardResponse::SecureInput { success: false } => "Nothing was stored".to_string(),
    }
}

/// The line a card nobody answered in time is edited to: its safe default
/// (the one the lifecycle resolves it to).
pub fn timed_out_line(card: &CardPayload) -> String {
    let outcome = match card {
        CardPayload::Plan(_)
        | CardPayload::Tool(_)
        | CardPayload::Checkpoint(_)
        | CardPayload::BatchReview(_)
        | CardPayload::AutonomyThreshold(_) => "declined",
        CardPayload::SkillInstall(_) => "not installed",
        CardPayload::Changes(c) if c.phase == ChangesAction::Apply => "not applied",
        CardPayload::Changes(_) => "kept (the undo window closed)",
        CardPayload::Gate(_) => "blocked",
        CardPayload::DraftReview(_) => "rejected",
        CardPayload::Decision(_) => "no choice made",
        CardPayload::Suggestion(_) => "not now",
        CardPayload::PermissionEscalation(_) => "denied",
        CardPayload::SecureInput(_) => "nothing stored",
        CardPayload::ConnectionSetup(_) => "cancelled",
        CardPayload::ConnectionFailure(_) => "skipped",
    };
    format!("⏱ Timed out — {outcome} (safe default)")
}
