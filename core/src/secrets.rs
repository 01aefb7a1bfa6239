//! Secret detection and redaction (meao M2 "SecretDetector" tiers).
//!
//! One detector for the whole system: the audit log runs every string through
//! it, tool output passes it before truncation, and the guard gate's `secrets`
//! check uses it. Findings come in three confidence tiers:
//!
//! * `definite` — the structure alone proves a secret (provider key formats,
//!   PEM private keys, JWTs);
//! * `probable` — a secret-looking value in a secret-naming context
//!   (`api_key=…`, `Authorization: Bearer …`, credentials in a URL);
//! * `possible` — context-dependent (`password="…"`, long high-entropy tokens).
//!
//! False positives that matter in practice are filtered deliberately: UUIDs,
//! hex digests (git SHAs, SHA-256) and base64 `data:` URIs (inline images) are
//! never reported as high-entropy secrets. Redaction replaces the secret part
//! of a match with `[REDACTED:<type>]`; findings never carry the secret itself.

use std::sync::OnceLock;

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

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
    regex: Regex,
    /// Capture group holding the secret (0 = whole match).
    group: usize,
    /// Extra filter on the secret text; `false` drops the candidate.
    accept: fn(&str) -> bool,
}

fn always(_: &str) -> bool {
    true
}

/// (kind, confidence, regex, secret capture group, acceptance filter)
type PatternSpec = (
    &'static str,
    Confidence,
    &'static str,
    usize,
    fn(&str) -> bool,
);

fn patterns() -> &'static [Pattern] {
    static PATTERNS: OnceLock<Vec<Pattern>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let spec: &[PatternSpec] = &[
            (
                "private_key",
                Confidence::Definite,
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----)?",
                0,
                always,
            ),
            ("aws_access_key_id", Confidence::Definite, r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", 0, always),
            ("github_token", Confidence::Definite, r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b", 0, always),
            ("github_token", Confidence::Definite, r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", 0, always),
            ("gitlab_token", Confidence::Definite, r"\bglpat-[A-Za-z0-9_-]{20,}", 0, always),
            ("slack_token", Confidence::Definite, r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0, always),
            ("stripe_key", Confidence::Definite, r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", 0, always),
            ("llm_api_key", Confidence::Definite, r"\bsk-(?:ant-|proj-|svcacct-|or-)?[A-Za-z0-9_-]{20,}", 0, always),
            ("google_api_key", Confidence::Definite, r"\bAIza[0-9A-Za-z_-]{35}", 0, always),
            (
                "jwt",
                Confidence::Definite,
                r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                0,
                always,
            ),
            ("telegram_bot_token", Confidence::Definite, r"\b[0-9]{8,10}:AA[A-Za-z0-9_-]{33}\b", 0, always),
            (
                "generic_api_key",
                Confidence::Probable,
                r#"(?i)\b(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|aws_secret_access_key)\b["']?\s*[:=]\s*["']?([A-Za-z0-9_\-./+=]{16,})"#,
                1,
                always,
            ),
            ("bearer_token", Confidence::Probable, r"(?i)\bbearer\s+([A-Za-z0-9_\-.~+/]{20,}=*)", 1, always),
            (
                "url_credentials",
                Confidence::Probable,
                r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:([^\s@/]+)@",
                1,
                always,
            ),
            (
                "password_assignment",
                Confidence::Possible,
                r#"(?i)\b(?:password|passwd|pwd|passphrase)\b["']?\s*[:=]\s*["']([^"'\s]{4,})["']"#,
                1,
                always,
            ),
            ("high_entropy_string", Confidence::Possible, r"[A-Za-z0-9_\-]{32,}", 0, high_entropy),
        ];
        spec.iter()
            .filter_map(|(kind, confidence, re, group, accept)| {
                // The patterns are constants covered by tests; a pattern that
                // failed to compile would be dropped rather than panic.
                Regex::new(re).ok().map(|regex| Pattern {
                    kind,
                    confidence: *confidence,
                    regex,
                    group: *group,
                    accept: *accept,
                })
            })
            .collect()
    })
}

/// All patterns in one automaton: one pass decides whether any can match, so
/// the common case (no secret) costs a single scan instead of sixteen.
fn prefilter() -> Option<&'static RegexSet> {
    static SET: OnceLock<Option<RegexSet>> = OnceLock::new();
    SET.get_or_init(|| RegexSet::new(patterns().iter().map(|p| p.regex.as_str())).ok())
        .as_ref()
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

/// Scan text for secrets. Overlapping candidates are resolved in favour of the
/// higher-confidence (then longer) finding.
pub fn scan(text: &str) -> Vec<SecretFinding> {
    if text.len() < MIN_CANDIDATE_LEN {
        return Vec::new();
    }
    let Some(set) = prefilter() else {
        return Vec::new();
    };
    let hits = set.matches(text);
    if !hits.matched_any() {
        return Vec::new();
    }
    let data_uris: Vec<(usize, usize)> = data_uri_regex()
        .map(|re| re.find_iter(text).map(|m| (m.start(), m.end())).collect())
        .unwrap_or_default();
    let inside_data_uri =
        |s: usize, e: usize| data_uris.iter().any(|(ds, de)| s >= *ds && e <= *de);

    let mut candidates: Vec<SecretFinding> = Vec::new();
    for (i, p) in patterns().iter().enumerate() {
        if !hits.matched(i) {
            continue;
        }
        for caps in p.regex.captures_iter(text) {
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
mod tests {
    use super::*;

    #[test]
    fn redact_at_least_keeps_weaker_findings() {
        let key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345";
        let hash = "Zq8xK2mN7pL4vR9tY3wB6cF1hJ5dG0sAeU";
        let text = format!("key {key} and id {hash}");
        let (all, found) = redact(&text);
        assert!(!all.contains(key) && !all.contains(hash), "{all}");
        assert_eq!(found.len(), 2);
        let (strong, found) = redact_at_least(&text, Confidence::Probable);
        assert!(!strong.contains(key), "{strong}");
        assert!(strong.contains(hash), "{strong}");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].confidence, Confidence::Definite);
    }

    fn kinds(text: &str) -> Vec<&'static str> {
        scan(text).into_iter().map(|f| f.kind).collect()
    }

    #[test]
    fn detects_definite_formats() {
        let cases = [
            ("key AKIAIOSFODNN7EXAMPLE here", "aws_access_key_id"),
            ("ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "github_token"),
            (
                "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
                "llm_api_key",
            ),
            ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
            ("xoxb-1234567890-abcdefghij", "slack_token"),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "jwt",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                "private_key",
            ),
            ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "google_api_key"),
            (
                "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1",
                "telegram_bot_token",
            ),
        ];
        for (text, kind) in cases {
            assert_eq!(kinds(text), vec![kind], "{text}");
            assert_eq!(scan(text)[0].confidence, Confidence::Definite);
        }
    }

    #[test]
    fn detects_contextual_secrets_and_redacts_only_the_value() {
        let (r, f) = redact("config: api_key = \"abcd1234efgh5678ijkl\" ok");
        assert_eq!(f.len(), 1);
        assert_eq!(r, "config: api_key = \"[REDACTED:generic_api_key]\" ok");
        let (r, _) = redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz123");
        assert_eq!(r, "Authorization: Bearer [REDACTED:bearer_token]");
        let (r, _) = redact("postgres://admin:hunter2pass@db.local/app");
        assert_eq!(
            r,
            "postgres://admin:[REDACTED:url_credentials]@db.local/app"
        );
        let (r, _) = redact(r#"password: "correct-horse""#);
        assert_eq!(r, r#"password: "[REDACTED:password_assignment]""#);
    }

    #[test]
    fn no_false_positives_on_ids_hashes_and_images() {
        let benign = [
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 merged",
            "uuid 123e4567-e89b-12d3-a456-426614174000",
            "sha256 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "<img src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==\">",
            "the quick brown fox jumps over the lazy dog",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "path/to/some_really_long_module_name_without_digits.rs",
        ];
        for text in benign {
            assert!(
                scan(text).is_empty(),
                "false positive in {text:?}: {:?}",
                scan(text)
            );
        }
    }

    #[test]
    fn high_entropy_tokens_are_possible_findings() {
        let f = scan("token Zx9Qm2LkP8vR4tW7yB1nC5hJ3gF6dS0aE");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "high_entropy_string");
        assert_eq!(f[0].confidence, Confidence::Possible);
    }

    #[test]
    fn overlapping_candidates_keep_the_strongest() {
        // A JWT is also a long high-entropy run; only the definite finding stays.
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(kinds(jwt), vec!["jwt"]);
    }

    #[test]
    fn redaction_is_idempotent_and_preserves_surroundings() {
        let text = "before ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 after";
        let (once, _) = redact(text);
        assert_eq!(once, "before [REDACTED:github_token] after");
        let (twice, f) = redact(&once);
        assert_eq!(twice, once);
        assert!(f.is_empty());
    }

    #[test]
    fn all_patterns_compile() {
        assert_eq!(patterns().len(), 16);
        assert_eq!(prefilter().map(RegexSet::len), Some(16));
    }

    #[test]
    fn shortest_secret_pattern_is_not_cut_by_the_length_shortcut() {
        let text = "pwd='abcd'";
        assert_eq!(text.len(), MIN_CANDIDATE_LEN);
        assert_eq!(kinds(text), vec!["password_assignment"]);
    }
}
