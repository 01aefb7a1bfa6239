//! Secret detection and redaction (meao M2 "SecretDetector" tiers).
//!
//! One detector for the whole system: the audit log runs every string through
//! it, tool output passes it before truncation, and the guard gate's `secrets`
//! check uses it. Findings come in three confidence tiers:
//!
//! * `definite` — the structure alone proves a secret (provider key formats
//!   with their fixed prefixes and lengths, PEM private keys, JWTs), or a
//!   provider's shape right after its name (Twilio, Mailgun, Discord);
//! * `probable` — a secret-looking value in a secret-naming context
//!   (`api_key=…`, `Authorization: Bearer …`, credentials in a URL,
//!   `password: …` quoted or, if it looks made up, unquoted, also said as
//!   `my password is …`);
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

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::patterns::PatternTable;

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
/// may match: most text matches none, and the 44 compiled patterns (NFAs
/// and lazy-DFA caches) were most of an idle daemon's regex heap (issue #19
/// item 4).
struct Table {
    meta: Vec<Pattern>,
    regexes: PatternTable,
}

fn always(_: &str) -> bool {
    true
}

/// Random tokens mix cases; a long run of one case after a known prefix is
/// an identifier (`hf_some_module`, `npm_…` in a script name), not a key.
fn mixed_case(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase())
}

fn mixed_alnum(s: &str) -> bool {
    mixed_case(s) && s.bytes().any(|b| b.is_ascii_digit())
}

/// Values that name, mask or template a password instead of stating one:
/// `********`, `<your-password>`, `${DB_PASSWORD}`, `{{ pw }}`, `%(pw)s`,
/// `os.environ['PW']`, `getpass()`, `self.password`, `DB_PASSWORD`, an
/// elided `pypi-...`, and an already redacted `[REDACTED:…]`.
fn is_password_stand_in(s: &str) -> bool {
    if s.starts_with(['$', '{', '<', '[', '%']) {
        return true;
    }
    if s.chars().all(|c| {
        matches!(
            c,
            '*' | '\u{2022}' | '\u{25CF}' | 'x' | 'X' | '.' | '#' | '-' | '_' | '?'
        )
    }) {
        return true;
    }
    let lower = s.to_ascii_lowercase();
    if ["your", "placeholder", "redacted", "****", "...", "\u{2026}"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return true;
    }
    // A code expression: an identifier (path) followed by `[` or `(`.
    let ident_end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(s.len());
    let ident = &s[..ident_end];
    let starts_ident = ident
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if starts_ident && s[ident_end..].starts_with(['[', '(']) {
        return true;
    }
    if ident_end == s.len() && starts_ident {
        // `self.password`, `settings.DB.password`: a dotted name.
        if s.contains('.')
            && s.split('.').all(|seg| {
                seg.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            })
        {
            return true;
        }
        // `DB_PASSWORD`, `YOUR_TOKEN`: an environment variable name.
        if s.contains('_') && !s.bytes().any(|b| b.is_ascii_lowercase()) {
            return true;
        }
    }
    false
}

fn plausible_quoted_password(s: &str) -> bool {
    !is_password_stand_in(s)
}

/// An unquoted value is often prose or a path (`password: required`,
/// `pwd: /srv/app`, `Password: None`): it must look made up, with a digit,
/// a symbol or a capital letter after the first character.
fn plausible_unquoted_password(s: &str) -> bool {
    if is_password_stand_in(s) || s.starts_with(['/', '~', '.', '!', '(', '@']) {
        return false;
    }
    s.chars()
        .any(|c| c.is_ascii_digit() || !(c.is_alphanumeric()))
        || s.chars().skip(1).any(char::is_uppercase)
}

/// `my password is Xk9-…` in a chat message: as [`plausible_unquoted_password`]
/// once the sentence's own punctuation is set aside (`is incorrect.` is
/// prose, not a password).
fn plausible_stated_password(s: &str) -> bool {
    let word = s.trim_end_matches(['.', ',', '!', '?', ';', ':', ')']);
    word.chars().count() >= 6 && plausible_unquoted_password(word)
}

/// (kind, confidence, regex, secret capture group, acceptance filter)
type PatternSpec = (
    &'static str,
    Confidence,
    &'static str,
    usize,
    fn(&str) -> bool,
);

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(new_table)
}

fn new_table() -> Table {
    let spec: &[PatternSpec] = &[
        (
            "private_key",
            Confidence::Definite,
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----)?",
            0,
            always,
        ),
        // GCP service-account JSON: the whole `private_key` string value,
        // also when the END marker was cut off.
        (
            "gcp_service_account_key",
            Confidence::Definite,
            r#""private_key"\s*:\s*"(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[^"]*)""#,
            1,
            always,
        ),
        (
            "aws_access_key_id",
            Confidence::Definite,
            r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
            0,
            always,
        ),
        (
            "github_token",
            Confidence::Definite,
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b",
            0,
            always,
        ),
        (
            "github_token",
            Confidence::Definite,
            r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
            0,
            always,
        ),
        (
            "gitlab_token",
            Confidence::Definite,
            r"\b(?:glpat|gldt|glrt|glptt|glft|glsoat|glcbt|glimt|glagent|gloas)-[A-Za-z0-9_-]{20,}",
            0,
            always,
        ),
        (
            "slack_token",
            Confidence::Definite,
            r"\b(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{20,})",
            0,
            always,
        ),
        (
            "slack_webhook",
            Confidence::Definite,
            r"https?://hooks\.slack\.com/(?:services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,32}|(?:workflows|triggers)/T[A-Z0-9]{6,12}/[A-Za-z0-9/]{20,})",
            0,
            always,
        ),
        (
            "stripe_key",
            Confidence::Definite,
            r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b",
            0,
            always,
        ),
        (
            "stripe_key",
            Confidence::Definite,
            r"\bwhsec_[A-Za-z0-9+/]{32,}",
            0,
            mixed_case,
        ),
        (
            "llm_api_key",
            Confidence::Definite,
            r"\bsk-(?:ant-|proj-|svcacct-|admin-|or-)?[A-Za-z0-9_-]{20,}",
            0,
            always,
        ),
        // Groq, Perplexity, Replicate.
        (
            "llm_api_key",
            Confidence::Definite,
            r"\b(?:gsk_[A-Za-z0-9]{52}|pplx-[A-Za-z0-9]{48}|r8_[A-Za-z0-9]{37})\b",
            0,
            mixed_case,
        ),
        (
            "google_api_key",
            Confidence::Definite,
            r"\bAIza[0-9A-Za-z_-]{35}",
            0,
            always,
        ),
        (
            "google_oauth_client_secret",
            Confidence::Definite,
            r"\bGOCSPX-[A-Za-z0-9_-]{28}",
            0,
            always,
        ),
        (
            "jwt",
            Confidence::Definite,
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            0,
            always,
        ),
        (
            "telegram_bot_token",
            Confidence::Definite,
            r"\b[0-9]{8,10}:AA[A-Za-z0-9_-]{33}\b",
            0,
            always,
        ),
        // Hugging Face user (`hf_`) and org (`api_org_`) tokens: 34 random letters.
        (
            "huggingface_token",
            Confidence::Definite,
            r"\b(?:hf|api_org)_[A-Za-z0-9]{34}\b",
            0,
            mixed_case,
        ),
        (
            "npm_token",
            Confidence::Definite,
            r"\bnpm_[A-Za-z0-9]{36}\b",
            0,
            mixed_case,
        ),
        // PyPI / TestPyPI macaroons: base64 of the fixed `pypi.org` / `test.pypi.org` header.
        (
            "pypi_token",
            Confidence::Definite,
            r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}",
            0,
            always,
        ),
        (
            "sendgrid_key",
            Confidence::Definite,
            r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
            0,
            always,
        ),
        // HashiCorp Vault service, batch and recovery tokens.
        (
            "vault_token",
            Confidence::Definite,
            r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}",
            0,
            mixed_case,
        ),
        (
            "shopify_token",
            Confidence::Definite,
            r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",
            0,
            always,
        ),
        // Discord bot token: base64 of the numeric bot id (so M/N/O first), a
        // 6-char timestamp, an HMAC part.
        (
            "discord_bot_token",
            Confidence::Definite,
            r"\b[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b",
            0,
            mixed_alnum,
        ),
        // The same three-part shape with any first letter, after a `discord…=` name.
        (
            "discord_bot_token",
            Confidence::Definite,
            r#"(?i)discord[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?([A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,38})"#,
            1,
            mixed_alnum,
        ),
        // Azure storage / Service Bus connection strings.
        (
            "azure_storage_key",
            Confidence::Definite,
            r"(?i)\b(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{40,86}={0,2})",
            1,
            mixed_alnum,
        ),
        // Azure SAS token: a dated `sv=` service version, then the signature.
        (
            "azure_sas_token",
            Confidence::Definite,
            r"\bsv=[0-9]{4}-[0-9]{2}-[0-9]{2}&(?:[A-Za-z]+=[^\s&'<>]*&)*?sig=([A-Za-z0-9%+/=]{30,})",
            1,
            always,
        ),
        (
            "digitalocean_token",
            Confidence::Definite,
            r"\bdo[opr]_v1_[a-f0-9]{64}\b",
            0,
            always,
        ),
        (
            "linear_api_key",
            Confidence::Definite,
            r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b",
            0,
            mixed_case,
        ),
        // Notion internal integration secrets (legacy `secret_`, current `ntn_`).
        (
            "notion_token",
            Confidence::Definite,
            r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[0-9]{11}[A-Za-z0-9]{35})\b",
            0,
            mixed_alnum,
        ),
        (
            "doppler_token",
            Confidence::Definite,
            r"\bdp\.(?:st\.(?:[a-z0-9_-]{2,35}\.)?|pt\.|ct\.|sa\.|scim\.|audit\.)[A-Za-z0-9]{40,44}\b",
            0,
            mixed_case,
        ),
        // Twilio: the API key SID (`SK` + 32 hex) and the auth token (32 hex)
        // are only told from digests by a `twilio` name in front of them.
        (
            "twilio_credential",
            Confidence::Definite,
            r#"(?i)twilio[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?((?:SK)?[0-9a-f]{32})\b"#,
            1,
            always,
        ),
        (
            "twilio_credential",
            Confidence::Definite,
            r"(?i)twilio[^\n]{0,80}?\b(SK[0-9a-f]{32})\b",
            1,
            always,
        ),
        // Mailgun private keys (legacy `key-` and current format), with a `mailgun` mention.
        (
            "mailgun_key",
            Confidence::Definite,
            r"(?i)mailgun[^\n]{0,80}?\b(key-[0-9a-z]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})\b",
            1,
            always,
        ),
        (
            "tailscale_key",
            Confidence::Definite,
            r"\btskey-(?:api|auth|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}",
            0,
            always,
        ),
        (
            "age_secret_key",
            Confidence::Definite,
            r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
            0,
            always,
        ),
        (
            "grafana_token",
            Confidence::Definite,
            r"\b(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|glc_[A-Za-z0-9+/]{32,400}={0,2})",
            0,
            mixed_case,
        ),
        (
            "sentry_token",
            Confidence::Definite,
            r"\b(?:sntryu_[a-f0-9]{64}\b|sntrys_eyJ[A-Za-z0-9+/=_-]{50,})",
            0,
            always,
        ),
        (
            "postman_api_key",
            Confidence::Definite,
            r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b",
            0,
            always,
        ),
        (
            "generic_api_key",
            Confidence::Probable,
            r#"(?i)\b(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|aws_secret_access_key)\b["']?\s*[:=]\s*["']?([A-Za-z0-9_\-./+=]{16,})"#,
            1,
            always,
        ),
        (
            "bearer_token",
            Confidence::Probable,
            r"(?i)\bbearer\s+([A-Za-z0-9_\-.~+/]{20,}=*)",
            1,
            always,
        ),
        (
            "url_credentials",
            Confidence::Probable,
            r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:([^\s@/]+)@",
            1,
            always,
        ),
        // `password = "…"`, also as the tail of an env name (`DB_PASSWORD=`).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|passphrase)\b["']?\s*[:=]\s*["']([^"'\s]{4,})["']"#,
            1,
            plausible_quoted_password,
        ),
        // Unquoted `password: value` needs a value that looks like one (see the filter).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|passphrase)\b["']?\s*[:=]\s*([^\s"'<>`]{6,})"#,
            1,
            plausible_unquoted_password,
        ),
        // Said in prose: `my password is …` (chat messages say it this way).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)\b(?:password|passwd|passphrase)\s+(?:is|was)\s+([^\s"'<>`]{6,})"#,
            1,
            plausible_stated_password,
        ),
        (
            "high_entropy_string",
            Confidence::Possible,
            r"[A-Za-z0-9_\-]{32,}",
            0,
            high_entropy,
        ),
    ];
    Table {
        meta: spec
            .iter()
            .map(|(kind, confidence, _, group, accept)| Pattern {
                kind,
                confidence: *confidence,
                group: *group,
                accept: *accept,
            })
            .collect(),
        regexes: PatternTable::new(spec.iter().map(|(_, _, source, _, _)| *source)),
    }
}

/// No pattern can match text shorter than this (the shortest, a quoted
/// four-character password after `pwd=`, needs ten bytes).
const MIN_CANDIDATE_LEN: usize = 10;

fn data_uri_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"data:[a-zA-Z]+/[a-zA-Z0-9.+-]+;base64,[A-Za-z0-9+/=]+").ok())
        .as_ref()
}

fn uuid_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
            .ok()
    })
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

fn high_entropy(s: &str) -> bool {
    if s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return false; // git SHAs, SHA-256 digests, hex ids, UUIDs
    }
    if uuid_regex().is_some_and(|re| re.is_match(s)) {
        return false;
    }
    let has_upper = s.bytes().any(|b| b.is_ascii_uppercase());
    let has_lower = s.bytes().any(|b| b.is_ascii_lowercase());
    let has_digit = s.bytes().any(|b| b.is_ascii_digit());
    has_upper && has_lower && has_digit && shannon_entropy(s) >= 4.0
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
    scan_with(text, table())
}

/// [`scan_visible`] over a given table.
fn scan_with(text: &str, table: &Table) -> Vec<SecretFinding> {
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
    candidates.sort_by(|a, b| {
        b.confidence
            .cmp(&a.confidence)
            .then(b.len.cmp(&a.len))
            .then(a.start.cmp(&b.start))
    });
    let mut chosen: Vec<SecretFinding> = Vec::new();
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

/// Redact the findings of at least `min` confidence (the others are left
/// in place and not returned). Chat input uses `Probable`: a pasted key is
/// removed, while a commit hash or an id the owner typed is not mangled.
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
