//! A card as one MarkdownV2 message and its inline keyboard.
//!
//! Everything taken from the card is model- or producer-written and so
//! hostile: it is escaped with `policy::text` and never becomes a link or
//! formatting; the only markup is the renderer's own bold titles. The
//! message is kept within 4,096 UTF-16 units counting the escapes (stricter
//! than Telegram, which counts after parsing) by cutting the card's body.

use serde_json::Value;
use silas_core::cards::{CardPayload, ChangesCard, PlanCard, ToolCard};
use silas_core::model::approval::ChangesAction;
use silas_core::risk::RiskLevel;

use super::answer::{Choice, choices, numbered, words};
use super::approvable_here;
use super::is_affirmative;
use crate::outbox::Text;
use crate::policy::callback::{CallbackError, CallbackSigner};
use crate::policy::text::{MAX_MESSAGE_UTF16, escape_markdown_v2, utf16_len};
use crate::types::{InlineKeyboardButton, InlineKeyboardMarkup};

/// One render of a card in one chat. `handle` is a short random id the
/// daemon stores (it maps to the card's request id — request ids can be too
/// long for callback data); `nonce` is this render's live nonce.
pub struct RenderContext<'a> {
    pub chat_id: i64,
    pub handle: &'a str,
    pub nonce: &'a str,
    pub signer: &'a CallbackSigner,
    pub max_approval_risk: RiskLevel,
    /// The web app's base URL (e.g. "http://127.0.0.1:8420/"), for the
    /// Review link of cards above max_approval_risk and the secure-input
    /// link. None: say "open the web app" without a link.
    pub web_url: Option<&'a str>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedCard {
    pub text: Text,
    pub keyboard: Option<InlineKeyboardMarkup>,
}

/// Telegram's button text is short; longer labels are cut.
pub const MAX_BUTTON_LABEL: usize = 64;
/// Caps (escaped UTF-16 units) of the parts around the body, so the body
/// (what runs, the draft, the question's context) keeps most of the room.
const TITLE_CAP: usize = 300;
const NOTE_CAP: usize = 600;
const DETAIL_CAP: usize = 1200;
/// Plain-text caps of one line and one list item.
const LINE_CAP: usize = 400;
const ITEM_CAP: usize = 200;
const MAX_LIST_ITEMS: usize = 10;
/// Room below which a detail or the body is left out rather than cut.
const MIN_PARAGRAPH: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// A title: kept, bold.
    Title,
    /// What the owner must see to answer safely (risk, why, where to go):
    /// kept whole up to its cap.
    Note,
    /// Facts (lists, budget, values): shortened or dropped when room runs out.
    Detail,
    /// The card's body (what runs, the draft, the message): shares what
    /// is left with the details.
    Body,
}

impl Part {
    /// Cap of one part, in escaped UTF-16 units.
    fn cap(self) -> usize {
        match self {
            Part::Title => TITLE_CAP,
            Part::Note => NOTE_CAP,
            Part::Detail => DETAIL_CAP,
            Part::Body => MAX_MESSAGE_UTF16,
        }
    }
}

/// The message as plain paragraphs, escaped and fitted at the end.
#[derive(Default)]
struct Doc {
    parts: Vec<(Part, String)>,
}

/// Paragraph separator.
const SEP: &str = "\n\n";

impl Doc {
    fn bold(&mut self, s: impl Into<String>) {
        self.push(Part::Title, s.into());
    }
    fn note(&mut self, s: impl Into<String>) {
        self.push(Part::Note, s.into());
    }
    fn line(&mut self, s: impl Into<String>) {
        self.push(Part::Detail, s.into());
    }
    fn body(&mut self, s: impl Into<String>) {
        self.push(Part::Body, s.into());
    }
    fn push(&mut self, part: Part, s: String) {
        // Empty bold ("**") is a parse error in MarkdownV2.
        if !s.trim().is_empty() {
            self.parts.push((part, s.trim().to_string()));
        }
    }

    /// A titled bullet list, capped in items and per item.
    fn list(&mut self, title: &str, items: &[String]) {
        if items.is_empty() {
            return;
        }
        let mut s = format!("{title}:");
        for item in items.iter().take(MAX_LIST_ITEMS) {
            s.push_str("\n• ");
            s.push_str(&cut_plain(item, ITEM_CAP));
        }
        if items.len() > MAX_LIST_ITEMS {
            s.push_str(&format!("\n(+{} more)", items.len() - MAX_LIST_ITEMS));
        }
        self.line(s);
    }

    /// The escaped message: titles and notes whole (their caps keep them
    /// well under the limit together), then the body and the details share
    /// the rest — the body at least half of it when both do not fit.
    fn finish(self) -> String {
        let overhead = |part: Part| utf16_len(SEP) + if part == Part::Title { 2 } else { 0 };
        let fitted = |part: Part, plain: &str, room: usize| {
            escape_fit(plain, part.cap().min(room.saturating_sub(overhead(part))))
        };
        let mut room = MAX_MESSAGE_UTF16;
        let mut out: Vec<Option<String>> = vec![None; self.parts.len()];
        for (i, (part, plain)) in self.parts.iter().enumerate() {
            if matches!(part, Part::Title | Part::Note) {
                let e = fitted(*part, plain, room);
                room = room.saturating_sub(utf16_len(&e) + overhead(*part));
                out[i] = Some(e);
            }
        }
        let need = |p: Part| -> usize {
            self.parts
                .iter()
                .filter(|(part, _)| *part == p)
                .map(|(part, plain)| utf16_len(&fitted(*part, plain, usize::MAX)) + overhead(*part))
                .sum()
        };
        let (body_need, detail_need) = (need(Part::Body), need(Part::Detail));
        let mut body_room = if body_need + detail_need <= room {
            body_need
        } else {
            room.saturating_sub(detail_need)
                .max(body_need.min(room / 2))
        };
        let mut detail_room = room.saturating_sub(body_room);
        for (i, (part, plain)) in self.parts.iter().enumerate() {
            let pool = match part {
                Part::Body => &mut body_room,
                Part::Detail => &mut detail_room,
                _ => continue,
            };
            let e = fitted(*part, plain, *pool);
            // A sliver of a cut paragraph says nothing: leave it out.
            if e.ends_with('…') && utf16_len(&e) < MIN_PARAGRAPH {
                continue;
            }
            *pool = pool.saturating_sub(utf16_len(&e) + overhead(*part));
            out[i] = Some(e);
        }
        self.parts
            .iter()
            .zip(out)
            .filter_map(|((part, _), e)| match (part, e) {
                (_, None) => None,
                (_, Some(e)) if e.is_empty() => None,
                (Part::Title, Some(e)) => Some(format!("*{e}*")),
                (_, Some(e)) => Some(e),
            })
            .collect::<Vec<_>>()
            .join(SEP)
    }
}

/// `plain` cut (with "…") to at most `max` UTF-16 units *unescaped*.
fn cut_plain(plain: &str, max: usize) -> String {
    if utf16_len(plain) <= max {
        return plain.to_string();
    }
    let mut out = String::new();
    let mut units = 0;
    for c in plain.chars() {
        if units + c.len_utf16() + 1 > max {
            break;
        }
        units += c.len_utf16();
        out.push(c);
    }
    format!("{}…", out.trim_end())
}

/// `plain` escaped for MarkdownV2 and cut (with "…") so the *escaped* text
/// is at most `max` UTF-16 units; never cuts between a backslash and the
/// character it escapes.
fn escape_fit(plain: &str, max: usize) -> String {
    let full = escape_markdown_v2(plain);
    if utf16_len(&full) <= max {
        return full;
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut units = 0;
    for c in plain.chars() {
        let e = escape_markdown_v2(c.encode_utf8(&mut [0u8; 4]));
        // One unit stays for the "…".
        if units + utf16_len(&e) + 1 > max {
            break;
        }
        units += utf16_len(&e);
        out.push_str(&e);
    }
    // Trailing whitespace before the ellipsis is noise (and never an escape).
    let trimmed = out.trim_end_matches([' ', '\n']);
    format!("{trimmed}…")
}

/// A free-form producer value as readable lines: scalars as they are,
/// objects as "Key: value" lines, lists as bullets; `risk_level` is left out
/// (the server's level is shown instead).
fn describe(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        Value::Array(items) => bullets(items),
        Value::Object(m) => m
            .iter()
            .filter(|(k, _)| k.as_str() != "risk_level")
            .filter_map(|(k, v)| {
                Some(match v {
                    Value::Null => return None,
                    Value::Array(items) => format!("{}:\n{}", words(k), bullets(items)),
                    other => format!("{}: {}", words(k), inline(other)),
                })
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn bullets(items: &[Value]) -> String {
    let mut lines: Vec<String> = items
        .iter()
        .take(MAX_LIST_ITEMS * 2)
        .map(|i| format!("• {}", cut_plain(&inline(i), ITEM_CAP)))
        .collect();
    if items.len() > MAX_LIST_ITEMS * 2 {
        lines.push(format!("(+{} more)", items.len() - MAX_LIST_ITEMS * 2));
    }
    lines.join("\n")
}

/// One value on one line: strings bare, objects as "key: v, key: v".
fn inline(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .iter()
            .filter(|(k, _)| k.as_str() != "risk_level")
            .map(|(k, v)| match v {
                Value::String(s) => format!("{}: {s}", words(k)),
                other => format!("{}: {other}", words(k)),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    };
    cut_plain(&text.replace('\n', " "), LINE_CAP)
}

fn plan_text(doc: &mut Doc, p: &PlanCard) {
    let title = &p.plan.title;
    if p.renewal {
        doc.bold(format!("🔁 Renew goal: {title}"));
    } else if p.goal_id.is_some() {
        doc.bold(format!("🛠 Fix task: {title}"));
    } else {
        doc.bold(format!("📋 Approve plan: {title}"));
    }
    if let Some(reason) = &p.reason {
        doc.note(format!("Why: {}", cut_plain(reason, LINE_CAP)));
    }
    if let Some(goal) = &p.goal_id {
        doc.line(format!("Goal: {goal}"));
    }
    if let Some(scope) = &p.from_scope {
        doc.line(format!("Asked from another conversation: {scope}"));
    }
    let mut kind = format!("Kind: {}", p.plan.kind);
    if let Some(s) = &p.plan.schedule {
        kind.push_str(&format!(" · schedule: {s}"));
    }
    if p.plan.standing {
        kind.push_str(" · standing approval");
    }
    doc.line(kind);
    if let Some(terms) = &p.plan.terms {
        doc.line(format!("Approval: {terms}"));
    }
    if let Some(ws) = &p.plan.workspace {
        doc.line(ws.line());
        for l in ws.detail_lines() {
            doc.line(l);
        }
    }
    doc.body(&p.plan.body);
    doc.list("Tasks", &p.plan.tasks);
    let checks: Vec<String> = p
        .verify
        .iter()
        .map(|c| {
            let net = if c.network { " (network)" } else { "" };
            format!("{}: {}{net}", c.name, c.run)
        })
        .collect();
    doc.list("Checks", &checks);
    doc.list("Skills", &p.plan.skills);
    doc.list("Access", &p.plan.access_levels);
    doc.list("Gates", &p.plan.gates);
    doc.list("Escalation", &p.plan.escalation);
    if let Some(fix) = &p.plan.on_failure {
        doc.line(format!("Fix tasks: {fix}"));
    }
    let b = &p.plan.budget;
    doc.line(format!(
        "Budget: ${:.2} · {} tokens · {} s · {} attempts",
        b.max_cost_usd, b.max_tokens, b.max_wall_time_seconds, b.max_attempts
    ));
}

fn tool_text(doc: &mut Doc, t: &ToolCard) {
    doc.bold(format!("🔧 Allow {} for '{}'?", t.tool_name, t.title));
    doc.line(cut_plain(&t.reason, LINE_CAP));
    let args = serde_json::to_string(&t.arguments).unwrap_or_default();
    doc.line(format!("Arguments: {}", cut_plain(&args, LINE_CAP * 2)));
}

/// Files listed on a change card before "and N more".
const CHANGE_FILES_SHOWN: usize = 12;

/// A skill waiting for its install approval (issue #17).
fn skill_install_text(doc: &mut Doc, c: &silas_core::cards::SkillInstallCard) {
    doc.bold(format!("🧩 Install the skill '{}'?", c.skill));
    doc.line(cut_plain(&c.description, LINE_CAP));
    doc.line(format!("Source: {}", c.source.origin_text()));
    doc.line(format!("Content hash: {}", c.content_hash));
    doc.list("Scripts (dry-run before install)", &c.scripts);
    if c.network.is_empty() {
        doc.line("Network: none");
    } else {
        doc.line(format!("Network: {}", c.network.join(", ")));
    }
    doc.list("Credentials", &c.credentials);
    if let Some(server) = &c.mcp_server {
        doc.line(format!(
            "MCP server: {server} (tools listed and bound at the dry run)"
        ));
    }
    doc.line(format!("Report: valid, {} warning(s)", c.warnings));
    doc.list("Findings", &c.findings);
    doc.list("Import changes", &c.transformation);
    doc.note("Approving installs exactly these files; any later change needs a new approval.");
}

fn changes_text(doc: &mut Doc, c: &ChangesCard) {
    match c.phase {
        ChangesAction::Apply => doc.bold(format!("📝 Apply changes for '{}'?", c.title)),
        ChangesAction::Undo => doc.bold(format!("↩️ Applied changes for '{}'", c.title)),
    }
    doc.line(format!("Workspace: {} ({})", c.workspace, c.path));
    doc.line(format!(
        "{} file(s), +{} −{}",
        c.files.len(),
        c.total_added,
        c.total_removed
    ));
    let files: Vec<String> = c
        .files
        .iter()
        .take(CHANGE_FILES_SHOWN)
        .map(|f| {
            let flag = if f.protected {
                " ⚠️ check file"
            } else {
                ""
            };
            format!("{} {} (+{} −{}){flag}", f.kind, f.path, f.added, f.removed)
        })
        .collect();
    doc.list("Files", &files);
    if c.files.len() > CHANGE_FILES_SHOWN {
        doc.note(format!(
            "…and {} more file(s).",
            c.files.len() - CHANGE_FILES_SHOWN
        ));
    }
    if let Some(note) = c.protected_note() {
        doc.note(format!("⚠️ {note}"));
    }
    doc.list("Not applied", &c.refused);
    if let Some(m) = &c.commit_message {
        doc.line(format!("Then commits locally: {}", cut_plain(m, LINE_CAP)));
    }
    match c.phase {
        ChangesAction::Apply => doc.note("The whole diff is in the web app's Review."),
        ChangesAction::Undo => {
            if let Some(t) = c.undo_until {
                doc.note(format!("Undo is possible until {t}."));
            }
        }
    }
}

/// The card's own text (title, body, facts), before risk and hints.
fn card_text(doc: &mut Doc, card: &CardPayload) {
    match card {
        CardPayload::Plan(p) => plan_text(doc, p),
        CardPayload::Tool(t) => tool_text(doc, t),
        CardPayload::Changes(c) => changes_text(doc, c),
        CardPayload::SkillInstall(c) => skill_install_text(doc, c),
        CardPayload::Gate(g) => {
            doc.bold(format!("🚦 Gate: {}", g.gate_name));
            doc.line(format!("Value: {}", inline(&g.value)));
            doc.body(describe(&g.context));
        }
        CardPayload::Checkpoint(c) => {
            doc.bold("⏸ Checkpoint");
            doc.body(&c.message);
        }
        CardPayload::BatchReview(b) => {
            doc.bold("📦 Batch review");
            doc.body(describe(&b.batch));
            doc.note("To approve only some of the items, use the web app.");
        }
        CardPayload::DraftReview(d) => {
            doc.bold("✍️ Draft review");
            doc.line(cut_plain(&d.context, LINE_CAP));
            doc.body(&d.draft);
            doc.note("To edit the draft yourself, use the web app.");
        }
        CardPayload::Decision(d) => {
            doc.bold(format!("❓ {}", d.question));
            if d.allow_freetext {
                doc.note("To answer in your own words, use the web app.");
            }
        }
        CardPayload::Suggestion(s) => {
            doc.bold("💡 Suggestion");
            doc.body(describe(&s.suggestion));
        }
        CardPayload::AutonomyThreshold(a) => {
            doc.bold("⚖️ Autonomy change");
            doc.body(describe(&a.proposal));
        }
        CardPayload::PermissionEscalation(p) => {
            doc.bold(format!("🔑 More access for {}", p.connection_name));
            doc.line(cut_plain(&p.reason, LINE_CAP));
            doc.list("Now", &p.current_permissions);
            doc.list("Asking for", &p.requested_permissions);
        }
        CardPayload::SecureInput(s) => {
            let label = if s.label.trim().is_empty() {
                "a secret"
            } else {
                &s.label
            };
            doc.bold(format!("🔒 Silas needs {label}."));
            doc.note(SECURE_FORM_NOTE);
            if let Some(hint) = &s.input_hint {
                doc.line(format!("Hint: {}", cut_plain(hint, LINE_CAP)));
            }
        }
        CardPayload::ConnectionSetup(c) => {
            doc.bold(format!("🔌 Connection setup: {}", words(&c.step_type)));
            doc.body(describe(&Value::Object(c.fields.clone())));
            if c.step_type == "secure_input" {
                doc.note(SECURE_FORM_NOTE);
            }
        }
        CardPayload::ConnectionFailure(f) => {
            doc.bold(format!("⚠️ {}: couldn't connect", f.service));
            doc.line(format!("Failure: {}", words(&f.failure_type)));
            doc.body(&f.message);
        }
    }
}

const SECURE_FORM_NOTE: &str =
    "Enter it in the web app's secure form — never paste it into this chat.";

/// Only http(s) URLs make buttons (Telegram refuses the whole message for a
/// bad one).
fn web_link(web_url: Option<&str>) -> Option<&str> {
    web_url.filter(|u| u.starts_with("https://") || u.starts_with("http://"))
}

/// Whether `url` may be a URL button: Telegram refuses buttons to loopback
/// hosts (refusing the whole message), so those are shown as text instead
/// (set `channels.web.public_url` to where the owner's phone reaches the app).
fn buttonable(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
    .to_ascii_lowercase();
    !(host == "localhost"
        || host.ends_with(".localhost")
        || host == "::1"
        || host.starts_with("127.")
        || host.is_empty())
}

fn button_label(n: Option<usize>, c: &Choice) -> String {
    let mut label = match n {
        Some(n) => format!("{n}. {}", c.label),
        None if c.icon.is_empty() => c.label.clone(),
        None => format!("{} {}", c.icon, c.label),
    };
    if label.chars().count() > MAX_BUTTON_LABEL {
        label = label.chars().take(MAX_BUTTON_LABEL - 1).collect::<String>() + "…";
    }
    label
}

/// Renders `card` (request `request_id`) for one chat. The request id is
/// not shown: the buttons carry `ctx.handle`, which the daemon maps back.
pub fn render(
    request_id: &str,
    card: &CardPayload,
    ctx: &RenderContext<'_>,
) -> Result<RenderedCard, CallbackError> {
    let _ = request_id;
    let mut doc = Doc::default();
    card_text(&mut doc, card);
    let offered = choices(card);
    let link = web_link(ctx.web_url);
    // A loopback address is named in the text; a public one is a button.
    let (link, text_link) = match link {
        Some(u) if buttonable(u) => (Some(u), None),
        other => (None, other),
    };
    let approvable = approvable_here(card, ctx.max_approval_risk);
    let is_secure = matches!(card, CardPayload::SecureInput(_));
    let risk = card.risk();
    if let Some(r) = &risk {
        let mut line = format!("Risk: {}", r.level.as_str());
        if !r.reasons.is_empty() {
            line.push_str(" — ");
            line.push_str(&r.reasons.join("; "));
        }
        doc.note(cut_plain(&line, LINE_CAP));
    }
    // Which choices get a button: above the Telegram limit only the safe side.
    let shown: Vec<(usize, &Choice)> = offered
        .list
        .iter()
        .enumerate()
        .filter(|(_, c)| approvable || !is_affirmative(&c.answer))
        .collect();
    let hidden = shown.len() < offered.list.len();
    if hidden {
        let level = risk.as_ref().map_or("high", |r| r.level.as_str());
        doc.note(format!(
            "⚠️ This is {level} risk: approve it in the web app's Review{}",
            match (link, text_link) {
                (Some(_), _) => " (button below).".to_string(),
                (None, Some(u)) => format!(" — open the web app at {u}"),
                (None, None) => " — open the web app.".to_string(),
            }
        ));
    }
    if offered.more > 0 {
        doc.note(format!("{} more choices in the web app.", offered.more));
    }
    if hidden && !shown.is_empty() {
        doc.note("To refuse it here, tap a button below or reply \"decline\".");
    } else if !shown.is_empty() {
        doc.note(if numbered(card) {
            "Tap a button or reply with its number."
        } else {
            "Tap a button or reply \"approve\" / \"decline\"."
        });
    }
    if is_secure && link.is_none() {
        doc.note(match text_link {
            Some(u) => format!("Open the web app at {u} to enter it."),
            None => "Open the web app to enter it.".to_string(),
        });
    }
    let mut rows: Vec<Vec<InlineKeyboardButton>> = Vec::new();
    let diff_to_review = matches!(card, CardPayload::Changes(c) if c.phase == ChangesAction::Apply);
    if diff_to_review
        && link.is_none()
        && let Some(u) = text_link
    {
        doc.note(format!("Read the diff in the web app at {u}"));
    }
    if let Some(url) = link
        && (hidden
            || is_secure
            || diff_to_review
            || matches!(card, CardPayload::ConnectionSetup(c) if c.step_type == "secure_input"))
    {
        let text = if hidden {
            "Review in the web app"
        } else if diff_to_review {
            "Read the diff in the web app"
        } else {
            "Open the secure form"
        };
        rows.push(vec![InlineKeyboardButton::url(text, url)]);
    }
    let mut buttons = Vec::new();
    for (i, c) in &shown {
        let data = ctx
            .signer
            .encode_with_nonce(ctx.chat_id, ctx.handle, &c.action, ctx.nonce)?;
        let n = numbered(card).then_some(i + 1);
        buttons.push(InlineKeyboardButton::callback(button_label(n, c), data));
    }
    // Two or three short buttons share a row; longer lists get one per row.
    let short = buttons.len() <= 3 && buttons.iter().all(|b| b.text.chars().count() <= 20);
    if short && !buttons.is_empty() {
        rows.push(buttons);
    } else {
        rows.extend(buttons.into_iter().map(|b| vec![b]));
    }
    Ok(RenderedCard {
        text: Text::MarkdownV2(doc.finish()),
        keyboard: (!rows.is_empty()).then_some(InlineKeyboardMarkup {
            inline_keyboard: rows,
        }),
    })
}
