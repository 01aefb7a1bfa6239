//! PII detection and redaction for the guard provider's `pii` check.
//!
//! Candidates are found by regex and then *validated* structurally, because
//! a digit pattern alone flags order numbers, dates and timestamps:
//!
//! * `credit_card` — 13–19 digits (spaces/dashes allowed between groups), a
//!   known issuer prefix (Visa, Mastercard, Amex, Discover, Diners, JCB,
//!   UnionPay, Maestro) *and* a valid Luhn checksum;
//! * `us_ssn` — `AAA-GG-SSSS` (dashes or spaces required: a bare nine-digit
//!   number is far more often something else), area not 000/666/9xx, group
//!   not 00, serial not 0000;
//! * `iban` — country code, two check digits, 11–30 alphanumerics (optionally
//!   in groups of four), length 15–34, and the ISO 13616 mod-97 check;
//! * `email` — `local@domain.tld` with an alphabetic TLD;
//! * `phone` — international `+CC …` with 8–15 digits, or North-American
//!   `(AAA) BBB-CCCC` / `AAA-BBB-CCCC` / `AAA.BBB.CCCC` with a separator
//!   (so ten bare digits, version strings and IPs are not phones).
//!
//! Overlapping findings keep the earliest (then longest) one. Redaction
//! replaces each finding with `[REDACTED:<kind>]`.

use std::sync::OnceLock;

use serde::Serialize;
use silas_core::patterns::PatternTable;

/// One PII finding; carries the kind and location, never the value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PiiFinding {
    pub kind: &'static str,
    pub start: usize,
    pub end: usize,
}

/// All PII kinds this module detects.
pub const KINDS: [&str; 5] = ["credit_card", "us_ssn", "iban", "email", "phone"];

/// Luhn (mod 10) over the digits of `s`; non-digits are ignored, fewer than
/// two digits is invalid.
pub fn luhn_valid(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if digits.len() < 2 {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Known card issuer prefixes and lengths (IIN ranges as published by the
/// networks). Checked before Luhn so random order numbers rarely qualify.
pub fn card_issuer_ok(digits: &str) -> bool {
    let len = digits.len();
    let p = |n: usize| {
        digits
            .get(..n)
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let visa = digits.starts_with('4') && matches!(len, 13 | 16 | 19);
    let mc = ((51..=55).contains(&p(2)) || (2221..=2720).contains(&p(4))) && len == 16;
    let amex = matches!(p(2), 34 | 37) && len == 15;
    let discover =
        (p(4) == 6011 || p(2) == 65 || (644..=649).contains(&p(3))) && (16..=19).contains(&len);
    let diners =
        ((300..=305).contains(&p(3)) || matches!(p(2), 36 | 38)) && (14..=19).contains(&len);
    let jcb = (3528..=3589).contains(&p(4)) && (16..=19).contains(&len);
    let unionpay = p(2) == 62 && (16..=19).contains(&len);
    let maestro = matches!(
        p(4),
        5018 | 5020 | 5038 | 5893 | 6304 | 6759 | 6761 | 6762 | 6763
    ) && (12..=19).contains(&len);
    visa || mc || amex || discover || diners || jcb || unionpay || maestro
}

/// A payment card number: issuer prefix, length and Luhn.
pub fn credit_card_valid(candidate: &str) -> bool {
    let digits: String = candidate.chars().filter(char::is_ascii_digit).collect();
    (13..=19).contains(&digits.len()) && card_issuer_ok(&digits) && luhn_valid(&digits)
}

/// US SSN structural rules (SSA): area 001–665, 667–899; group 01–99;
/// serial 0001–9999. Input is the nine digits (separators ignored).
pub fn ssn_valid(candidate: &str) -> bool {
    let d: String = candidate.chars().filter(char::is_ascii_digit).collect();
    if d.len() != 9 {
        return false;
    }
    let (area, group, serial) = (&d[0..3], &d[3..5], &d[5..9]);
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

/// ISO 13616 IBAN check: length 15–34 after removing spaces, two letters,
/// two digits, alphanumerics; move the first four characters to the end,
/// letters to 10–35, the number mod 97 must be 1.
pub fn iban_valid(candidate: &str) -> bool {
    let s: String = candidate.chars().filter(|c| !c.is_whitespace()).collect();
    let b = s.as_bytes();
    if !(15..=34).contains(&b.len())
        || !b[0].is_ascii_uppercase()
        || !b[1].is_ascii_uppercase()
        || !b[2].is_ascii_digit()
        || !b[3].is_ascii_digit()
        || !b
            .iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
    {
        return false;
    }
    let mut rem: u32 = 0;
    for &c in b[4..].iter().chain(&b[..4]) {
        let v = if c.is_ascii_digit() {
            u32::from(c - b'0')
        } else {
            u32::from(c - b'A') + 10
        };
        // Letters are two digits; fold them in one decimal digit at a time.
        let width = if v >= 10 { 100 } else { 10 };
        rem = (rem * width + v) % 97;
    }
    rem == 1
}

fn digit_count(s: &str) -> usize {
    s.chars().filter(char::is_ascii_digit).count()
}

type Validator = fn(&str) -> bool;

/// The detectors' kinds and validators and, index for index, their
/// patterns. Each pattern compiles at the first text the table's prefilter
/// says it may match (see `silas_core::patterns`): compiling all seven took
/// 9 ms and 1.6 MB of heap, paid by the first turn after start.
struct Detectors {
    meta: Vec<(&'static str, Validator)>,
    regexes: PatternTable,
}

fn detectors() -> &'static Detectors {
    static D: OnceLock<Detectors> = OnceLock::new();
    D.get_or_init(new_detectors)
}

fn new_detectors() -> Detectors {
    let spec: [(&'static str, &str, Validator); 7] = [
        // Digits in groups separated by single spaces/dashes; not glued to
        // other digits, letters or `-`/`.` digit runs (dates, versions).
        (
            "credit_card",
            r"(?:^|[^\w.-])(\d(?:[ -]?\d){12,18})(?:$|[^\w-]|\.(?:\D|$))",
            credit_card_valid,
        ),
        (
            "us_ssn",
            r"(?:^|[^\w-])(\d{3}[- ]\d{2}[- ]\d{4})(?:$|[^\w-])",
            ssn_valid,
        ),
        (
            "iban",
            r"\b([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?)\b",
            iban_valid,
        ),
        (
            "email",
            r"(?i)\b([a-z0-9._%+-]+@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.[a-z]{2,24})\b",
            |_| true,
        ),
        (
            "phone",
            r"(?:^|[^\w+])(\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5})(?:$|[^\w])",
            |s| (8..=15).contains(&digit_count(s)),
        ),
        (
            "phone",
            r"(?:^|[^\w.-])(\(\d{3}\) ?\d{3}[ .-]\d{4})(?:$|[^\w-]|\.(?:\D|$))",
            |_| true,
        ),
        (
            "phone",
            r"(?:^|[^\w.-])(\d{3}-\d{3}-\d{4}|\d{3}\.\d{3}\.\d{4})(?:$|[^\w-]|\.(?:\D|$))",
            |_| true,
        ),
    ];
    Detectors {
        meta: spec.iter().map(|(k, _, v)| (*k, *v)).collect(),
        regexes: PatternTable::new(spec.iter().map(|(_, re, _)| *re)),
    }
}

/// Finds PII in `text`, restricted to `kinds` if given. Sorted by position,
/// non-overlapping.
pub fn scan(text: &str, kinds: Option<&[String]>) -> Vec<PiiFinding> {
    scan_in(detectors(), text, kinds)
}

fn scan_in(d: &Detectors, text: &str, kinds: Option<&[String]>) -> Vec<PiiFinding> {
    let mut found = Vec::new();
    let may = d.regexes.may_match(text);
    for (i, (kind, valid)) in d.meta.iter().enumerate() {
        if kinds.is_some_and(|ks| !ks.iter().any(|k| k == kind)) {
            continue;
        }
        if !may.get(i).copied().unwrap_or(true) {
            continue;
        }
        let Some(re) = d.regexes.regex(i) else {
            continue;
        };
        // Iterate by position so adjacent candidates sharing a boundary
        // character (`a, b`) are both seen.
        let mut at = 0;
        while let Some(c) = re.captures_at(text, at) {
            let (Some(whole), Some(m)) = (c.get(0), c.get(1)) else {
                break;
            };
            if valid(m.as_str()) {
                found.push(PiiFinding {
                    kind,
                    start: m.start(),
                    end: m.end(),
                });
            }
            at = if m.end() > whole.start() {
                m.end()
            } else {
                whole.end()
            };
            if at >= text.len() {
                break;
            }
        }
    }
    found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<PiiFinding> = Vec::new();
    for f in found {
        if out.last().is_none_or(|l| f.start >= l.end) {
            out.push(f);
        }
    }
    out
}

/// Replaces every finding with `[REDACTED:<kind>]`.
pub fn redact(text: &str, kinds: Option<&[String]>) -> (String, Vec<PiiFinding>) {
    let findings = scan(text, kinds);
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for f in &findings {
        out.push_str(&text[last..f.start]);
        out.push_str("[REDACTED:");
        out.push_str(f.kind);
        out.push(']');
        last = f.end;
    }
    out.push_str(&text[last..]);
    (out, findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_detectors_compile() {
        let d = detectors();
        assert_eq!((d.meta.len(), d.regexes.len()), (7, 7));
        assert!((0..7).all(|i| d.regexes.regex(i).is_some()));
        assert!(d.regexes.prefilter().is_some());
    }

    #[test]
    fn a_detector_compiles_only_for_text_that_may_match_it() {
        let d = new_detectors();
        assert!(scan_in(&d, "Hello from the web app, turn 3: all good.", None).is_empty());
        assert_eq!(d.regexes.compiled(), 0);
        let found = scan_in(&d, "write to jane.doe@example.com today", None);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, "email");
        let n = d.regexes.compiled();
        assert!((1..7).contains(&n), "{n}");
    }

    #[test]
    fn the_prefilter_misses_no_text_a_detector_matches() {
        let checked =
            silas_core::patterns::check::prefilter_is_a_superset(&detectors().regexes, 64);
        assert!(checked > 7 * 64, "only {checked} generated texts matched");
    }

    #[test]
    fn luhn_table() {
        let cases = [
            ("4111111111111111", true),
            ("4111 1111 1111 1111", true),
            ("4111111111111112", false),
            ("79927398713", true),
            ("79927398710", false),
            ("0", false),
            ("", false),
            ("00", true),
        ];
        for (s, want) in cases {
            assert_eq!(luhn_valid(s), want, "{s}");
        }
    }

    #[test]
    fn credit_card_table() {
        let cases = [
            ("4111111111111111", true),  // Visa test number
            ("5555555555554444", true),  // Mastercard
            ("2223003122003222", true),  // Mastercard 2-series
            ("378282246310005", true),   // Amex
            ("6011111111111117", true),  // Discover
            ("3530111333300000", true),  // JCB
            ("30569309025904", true),    // Diners
            ("4111111111111112", false), // Luhn fails
            ("1234567812345670", false), // Luhn ok, no issuer
            ("3782 822463 10005", true), // separators ignored by the validator
            ("411111111111", false),     // too short
        ];
        for (s, want) in cases {
            assert_eq!(credit_card_valid(s), want, "{s}");
        }
    }

    #[test]
    fn ssn_table() {
        let cases = [
            ("123-45-6789", true),
            ("000-12-3456", false),
            ("666-12-3456", false),
            ("900-12-3456", false),
            ("123-00-4567", false),
            ("123-45-0000", false),
            ("665-99-9999", true),
            ("12345678", false),
        ];
        for (s, want) in cases {
            assert_eq!(ssn_valid(s), want, "{s}");
        }
    }

    #[test]
    fn iban_table() {
        let cases = [
            ("GB82 WEST 1234 5698 7654 32", true),
            ("GB82WEST12345698765432", true),
            ("DE89370400440532013000", true),
            ("FR1420041010050500013M02606", true),
            ("NL91ABNA0417164300", true),
            ("GB82WEST12345698765433", false), // checksum
            ("GB00WEST12345698765432", false),
            ("gb82west12345698765432", false), // lower case is not an IBAN as written
            ("DE8937040044", false),           // too short
            ("XX", false),
        ];
        for (s, want) in cases {
            assert_eq!(iban_valid(s), want, "{s}");
        }
    }

    #[test]
    fn scan_and_redact_table() {
        // (text, kinds found in order)
        let cases: &[(&str, &[&str])] = &[
            ("card 4111 1111 1111 1111 thanks", &["credit_card"]),
            ("card 4111-1111-1111-1111.", &["credit_card"]),
            ("order 4111111111111112", &[]),
            ("ssn 123-45-6789", &["us_ssn"]),
            ("date 2024-01-15 and 2024-01-15T10:00", &[]),
            ("iban GB82 WEST 1234 5698 7654 32 ok", &["iban"]),
            ("mail a.b+c@example.co.uk, then", &["email"]),
            ("call +44 20 7946 0958 now", &["phone"]),
            ("call (555) 123-4567 or 555.123.4567", &["phone", "phone"]),
            ("ip 192.168.100.200 v1.2.3", &[]),
            ("uuid 123e4567-e89b-12d3-a456-426614174000", &[]),
            ("a@b.c", &[]),
            ("x@y.io and 123-45-6789", &["email", "us_ssn"]),
        ];
        for (text, kinds) in cases {
            let got: Vec<&str> = scan(text, None).iter().map(|f| f.kind).collect();
            assert_eq!(got, *kinds, "{text}");
        }
        let (red, f) = redact("ssn 123-45-6789, mail x@y.io", None);
        assert_eq!(red, "ssn [REDACTED:us_ssn], mail [REDACTED:email]");
        assert_eq!(f.len(), 2);
        let only_email = vec!["email".to_owned()];
        let (red, _) = redact("ssn 123-45-6789, mail x@y.io", Some(&only_email));
        assert_eq!(red, "ssn 123-45-6789, mail [REDACTED:email]");
    }
}
