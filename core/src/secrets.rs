//! Secret detection and redaction (meao M2 "SecretDetector" tiers).
//!
//! One detector for the whole system: the audit log runs every string through
//! it, tool output passes it before truncation, and the guard gate's `secrets`
//! check uses it. Findings come in three confidence tiers:
//!
//! * `definite` — the structure alone proves a secret (provider key formats
//!   with their fixed prefixes and lengths, PEM private keys, JWTs), or a
//!   provider's shape right after its name (Twilio, Mailgun, Discord) or
//!   key id (an AWS secret access key after its `AKIA…`);
//! * `probable` — a secret-looking value in a secret-naming context
//!   (`api_key=…`, `token: …` or `my api secret is …` with a generated-looking
//!   value, `NAME_SECRET=…` in a `.env`, `Authorization: Bearer …`,
//!   credentials in a URL, `password: …` / `pw = …` quoted or, if it looks
//!   made up, unquoted, also said as `my password (for the router) is …` or
//!   as a `login admin / …` pair);
//! * `possible` — long high-entropy tokens.
//!
//! Invisible characters (zero-width space/joiners, word joiner, BOM, soft
//! hyphen) are ignored when matching, so they cannot split a key; offsets
//! still refer to the original text.
//!
//! False positives that matter in practice are filtered deliberately: UUIDs,
//! hex digests (git SHAs, SHA-256) and base64 `data:` URIs (inline images) are
//! never reported as high-entropy secrets. Redaction replaces the secret part
//! of a match with `[REDACTED:<type>]`; findings never carry the secret itself.

use std::sync::{OnceLock, RwLock};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::patterns::PatternTable;

mod table;

use table::new_table;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    Possible,
    Probable,
    Definite,
}

/// One detected secret: where it is and what it looks like, never its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretFinding {
    pub kind: &'static str,
    pub confidence: Confidence,
    /// Byte offset of the secret part within the scanned text.
    pub start: usize,
    pub len: usize,
}

struct Pattern {
    kind: &'static str,
    confidence: Confidence,
    /// Capture group holding the secret (0 = whole match).
    group: usize,
    /// Extra filter on the secret text; `false` drops the candidate.
    accept: fn(&str) -> bool,
}

/// The patterns' metadata and, index for index, the patterns themselves.
/// Each pattern is compiled at the first text the table's prefilter says it
/// may match: most text matches none, and the compiled patterns (44 of
/// them then; NFAs and lazy-DFA caches) were most of an idle daemon's regex
/// heap (issue #19 item 4). The patterns and their filters are in
/// [`table`].
struct Table {
    meta: Vec<Pattern>,
    regexes: PatternTable,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(new_table)
}

/// No pattern can match text shorter than this (the shortest, a quoted
/// four-character password after `pw=`, needs nine bytes).
const MIN_CANDIDATE_LEN: usize = 9;

fn data_uri_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"data:[a-zA-Z]+/[a-zA-Z0-9.+-]+;base64,[A-Za-z0-9+/=]+").ok())
        .as_ref()
}

/// Shannon entropy in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    let mut n = 0u32;
    for b in s.bytes() {
        counts[b as usize] += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = f64::from(n);
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum()
}

/// Invisible format characters an attacker (or a copy-paste) can put inside a
/// key to split it: zero-width space/non-joiner/joiner, word joiner and the
/// invisible operators, BOM / zero-width no-break space, soft hyphen.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}'
    )
}

/// Scan text for secrets. Overlapping candidates are resolved in favour of the
/// higher-confidence (then longer) finding.
///
/// Invisible characters (see [`is_invisible`]) are ignored: the patterns run
/// on a copy without them, and each finding is mapped back to byte offsets in
/// `text`, so a finding's span covers the invisible characters inside the
/// secret (they are redacted with it) and always falls on char boundaries.
pub fn scan(text: &str) -> Vec<SecretFinding> {
    if !text.contains(is_invisible) {
        return scan_visible(text);
    }
    let mut visible = String::with_capacity(text.len());
    // `origin[i]` = offset in `text` of byte `i` of `visible`.
    let mut origin: Vec<usize> = Vec::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if is_invisible(c) {
            continue;
        }
        visible.push(c);
        origin.extend(i..i + c.len_utf8());
    }
    scan_visible(&visible)
        .into_iter()
        .filter_map(|f| {
            let start = *origin.get(f.start)?;
            // The last byte of the secret, then one past it: the end of the
            // secret's last char in `text` (a char's bytes are contiguous).
            let end = *origin.get((f.start + f.len).checked_sub(1)?)? + 1;
            Some(SecretFinding {
                start,
                len: end - start,
                ..f
            })
        })
        .collect()
}

fn scan_visible(text: &str) -> Vec<SecretFinding> {
    if text.len() < MIN_CANDIDATE_LEN {
        return Vec::new();
    }
    // The daemon's own secrets are taken first, whole; a pattern finding
    // overlapping one gives way.
    let known = resolve(Vec::new(), known_in(text));
    resolve(known, candidates(text, table()))
}

/// The kind of a finding that is one of the daemon's own secrets.
pub const CONFIGURED_SECRET: &str = "configured_secret";
/// Shorter values are not registered: a short word would be redacted
/// wherever it appears, and no real key or token is this short.
pub const MIN_KNOWN_LEN: usize = 12;

/// What [`register_known`] was given (empty in most processes but the
/// daemon's).
static KNOWN: RwLock<Vec<Box<str>>> = RwLock::new(Vec::new());

/// Registers one of the daemon's own secrets (a model API key, the bot
/// token, the web auth token): from now on [`scan`] finds it verbatim,
/// whatever its shape, so it is redacted wherever secrets are (a pasted
/// copy in a chat, a tool's output, an audit line). The patterns know the
/// usual formats; a self-hosted server's key or a test token has none.
pub fn register_known(value: &str) {
    let value = value.trim();
    if value.len() < MIN_KNOWN_LEN {
        return;
    }
    if let Ok(mut known) = KNOWN.write()
        && !known.iter().any(|k| &**k == value)
    {
        known.push(value.into());
    }
}

/// Every occurrence of a registered secret in `text` (definite).
fn known_in(text: &str) -> Vec<SecretFinding> {
    let Ok(known) = KNOWN.read() else {
        return Vec::new();
    };
    known
        .iter()
        .flat_map(|value| text.match_indices(&**value))
        .map(|(start, m)| SecretFinding {
            kind: CONFIGURED_SECRET,
            confidence: Confidence::Definite,
            start,
            len: m.len(),
        })
        .collect()
}

/// [`scan_visible`] over a given table, without the registered secrets.
#[cfg(test)]
fn scan_with(text: &str, table: &Table) -> Vec<SecretFinding> {
    resolve(Vec::new(), candidates(text, table))
}

/// The table's patterns' matches in `text`, overlapping ones included.
fn candidates(text: &str, table: &Table) -> Vec<SecretFinding> {
    let may = table.regexes.may_match(text);
    if !may.contains(&true) {
        return Vec::new();
    }
    let data_uris: Vec<(usize, usize)> = data_uri_regex()
        .map(|re| re.find_iter(text).map(|m| (m.start(), m.end())).collect())
        .unwrap_or_default();
    let inside_data_uri =
        |s: usize, e: usize| data_uris.iter().any(|(ds, de)| s >= *ds && e <= *de);

    let mut candidates: Vec<SecretFinding> = Vec::new();
    for (i, p) in table.meta.iter().enumerate() {
        if !may.get(i).copied().unwrap_or(true) {
            continue;
        }
        let Some(regex) = table.regexes.regex(i) else {
            continue;
        };
        for caps in regex.captures_iter(text) {
            let Some(m) = caps.get(p.group) else { continue };
            if m.as_str().is_empty() || !(p.accept)(m.as_str()) {
                continue;
            }
            if p.confidence == Confidence::Possible && inside_data_uri(m.start(), m.end()) {
                continue;
            }
            candidates.push(SecretFinding {
                kind: p.kind,
                confidence: p.confidence,
                start: m.start(),
                len: m.len(),
            });
        }
    }
    candidates
}

/// `chosen` (non-overlapping, kept as they are) plus the `candidates` that
/// overlap nothing chosen before them, taken by confidence, then length,
/// then position; in text order.
fn resolve(
    mut chosen: Vec<SecretFinding>,
    mut candidates: Vec<SecretFinding>,
) -> Vec<SecretFinding> {
    candidates.sort_by(|a, b| {
        b.confidence
            .cmp(&a.confidence)
            .then(b.len.cmp(&a.len))
            .then(a.start.cmp(&b.start))
    });
    for c in candidates {
        let overlaps = chosen
            .iter()
            .any(|k| c.start < k.start + k.len && k.start < c.start + c.len);
        if !overlaps {
            chosen.push(c);
        }
    }
    chosen.sort_by_key(|f| f.start);
    chosen
}

/// Redact every finding, returning the redacted text and the findings.
pub fn redact(text: &str) -> (String, Vec<SecretFinding>) {
    redact_at_least(text, Confidence::Possible)
}

/// What conversation text loses — the owner's message, the model's reply,
/// a task's summary: probable and definite findings; a commit hash or an id
/// stays.
pub fn redact_conversation(text: &str) -> (String, Vec<SecretFinding>) {
    redact_at_least(text, Confidence::Probable)
}

/// Redact the findings of at least `min` confidence (the others are left
/// in place and not returned). Conversation text uses `Probable`
/// ([`redact_conversation`]): a pasted key is removed, while a commit hash
/// or an id the owner typed is not mangled.
pub fn redact_at_least(text: &str, min: Confidence) -> (String, Vec<SecretFinding>) {
    let findings: Vec<SecretFinding> = scan(text)
        .into_iter()
        .filter(|f| f.confidence >= min)
        .collect();
    if findings.is_empty() {
        return (text.to_string(), findings);
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for f in &findings {
        out.push_str(&text[pos..f.start]);
        out.push_str("[REDACTED:");
        out.push_str(f.kind);
        out.push(']');
        pos = f.start + f.len;
    }
    out.push_str(&text[pos..]);
    (out, findings)
}

/// Whether the text contains anything the detector would redact.
pub fn contains_secret(text: &str) -> bool {
    !scan(text).is_empty()
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
