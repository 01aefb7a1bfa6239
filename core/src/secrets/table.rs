//! The secret patterns and the plausibility filters their candidates pass.
//!
//! Each entry of [`new_table`] is (kind, confidence, regex, secret capture
//! group, acceptance filter); the filters here decide whether a matched
//! value is a secret or a placeholder, a word, a path or a digest.

use std::sync::OnceLock;

use regex::Regex;

use super::{Confidence, Pattern, Table, shannon_entropy};
use crate::patterns::PatternTable;

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
/// elided `pypi-...`, the `changeme` of a template, and an already redacted
/// `[REDACTED:…]`.
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
    if matches!(
        lower.as_str(),
        "changeme" | "change_me" | "change-me" | "changeit"
    ) {
        return true;
    }
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

/// `my password (for the router) is Xk9-…` in a chat message: as [`plausible_unquoted_password`]
/// once the sentence's own punctuation is set aside (`is incorrect.` is
/// prose, not a password).
fn plausible_stated_password(s: &str) -> bool {
    let word = without_trailing_punctuation(s);
    word.chars().count() >= 6 && plausible_unquoted_password(word)
}

/// Sentence punctuation after a value said in prose (`… is Xk9-….`).
fn without_trailing_punctuation(s: &str) -> &str {
    s.trim_end_matches(['.', ',', '!', '?', ';', ':', ')'])
}

/// `login admin / Xk9-…`: the part after the slash is only a password if it
/// clearly looks made up — eight characters or more, with a digit and a
/// capital or a symbol — since `login page / Dashboard` is prose.
fn plausible_paired_password(s: &str) -> bool {
    let word = without_trailing_punctuation(s);
    word.chars().count() >= 8
        && plausible_unquoted_password(word)
        && word.chars().any(|c| c.is_ascii_digit())
        && word
            .chars()
            .any(|c| c.is_uppercase() || !c.is_alphanumeric())
}

/// How often a letter and a digit stand side by side: generated tokens
/// interleave them (`3f9a8b…`, `Kx7Lm9…`), names and versions
/// (`session_timeout_2024`, `gpt-4o-mini`) mostly do not.
fn letter_digit_switches(s: &str) -> usize {
    s.as_bytes()
        .windows(2)
        .filter(|w| {
            (w[0].is_ascii_alphabetic() && w[1].is_ascii_digit())
                || (w[0].is_ascii_digit() && w[1].is_ascii_alphabetic())
        })
        .count()
}

/// After `token:` or `my api secret is`: a value that looks generated —
/// hex of 20 characters or more, or 16 or more that interleave letters and
/// digits or mix cases with digits at high entropy — not a word, an
/// identifier, a path, a URL or a placeholder (`the token: is missing`).
fn generated_looking(s: &str) -> bool {
    let v = without_trailing_punctuation(s);
    if v.len() < 16
        || is_password_stand_in(v)
        || v.contains("://")
        || v.starts_with(['/', '~', '.'])
        || !v.bytes().any(|b| b.is_ascii_digit())
        || !v.bytes().any(|b| b.is_ascii_alphabetic())
    {
        return false;
    }
    if v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return v.len() >= 20;
    }
    letter_digit_switches(v) >= 3 || (mixed_case(v) && shannon_entropy(v) >= 3.5)
}

/// Values a setting takes that hide nothing: switches, empties and numbers
/// (`true`, `NONE`, `4096`).
fn is_setting_value(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "true"
            | "false"
            | "none"
            | "null"
            | "nil"
            | "yes"
            | "no"
            | "on"
            | "off"
            | "undefined"
            | "enabled"
            | "disabled"
    ) || s.bytes().all(|b| b.is_ascii_digit())
}

/// `OPENAI_API_KEY=…` in a `.env`: a value that looks made up (as an
/// unquoted password), and not a setting, a lower-case field or cache name
/// (`SORT_KEY=created_at`, `REDIS_KEY=session:cache`), a URL or an SSH
/// public key (`SSH_PUBLIC_KEY=ssh-ed25519 …`).
fn plausible_env_secret(s: &str) -> bool {
    let field_name = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || matches!(b, b'_' | b'.' | b':'));
    !field_name
        && !is_setting_value(s)
        && !s.contains("://")
        && !s.starts_with("ssh-")
        && !s.starts_with("ecdsa-")
        && plausible_unquoted_password(s)
}

/// (kind, confidence, regex, secret capture group, acceptance filter)
type PatternSpec = (
    &'static str,
    Confidence,
    &'static str,
    usize,
    fn(&str) -> bool,
);

pub(super) fn new_table() -> Table {
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
        // The 40-character secret access key pasted after its key id
        // (`AKIA… wJalrXUtn…`, also on the next line): a run of exactly 40
        // base64 characters, mixed like a random key (a SHA-1 is not).
        (
            "aws_secret_access_key",
            Confidence::Definite,
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b[\s\S]{0,160}?[^A-Za-z0-9/+=]([A-Za-z0-9/+]{40})(?:$|[^A-Za-z0-9/+=])",
            1,
            mixed_alnum,
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
        // `password = "…"` or `pw = "…"`, also as the tail of an env name
        // (`DB_PASSWORD=`).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|pw|passphrase)\b["']?\s*[:=]\s*["']([^"'\s]{4,})["']"#,
            1,
            plausible_quoted_password,
        ),
        // Unquoted `password: value` needs a value that looks like one (see the filter).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|pw|passphrase)\b["']?\s*[:=]\s*([^\s"'<>`]{6,})"#,
            1,
            plausible_unquoted_password,
        ),
        // Said in prose: `my password is …`, `the password for the router
        // is …` (chat messages say it this way).
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)\b(?:password|passwd|passphrase|pwd|pw)(?:\s+(?:for|to|of|on)(?:\s+[^\s"'<>`]+){1,4}?)?\s+(?:is|was)\s+([^\s"'<>`]{6,})"#,
            1,
            plausible_stated_password,
        ),
        // A user and password pair: `login admin / …`, `credentials: root/…`.
        (
            "password_assignment",
            Confidence::Probable,
            r#"(?i)\b(?:login|log-in|sign-in|credentials|creds)\b(?:\s*:\s*|\s+)[^\s/:"'<>`]{1,64}\s*/\s*([^\s"'<>`]{8,})"#,
            1,
            plausible_paired_password,
        ),
        // A `.env` line `NAME_KEY=…` (or `export NAME_TOKEN=…`), and the
        // same upper-case name anywhere in a line: the name is, or ends in
        // `_` and, a secret-naming word (`MAX_TOKENS`, `KEY_PATH` do not).
        (
            "env_secret",
            Confidence::Probable,
            r#"(?m)(?:^[ \t]*(?:export[ \t]+)?(?i:(?:[A-Z0-9_]*_)?(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|PASS|CREDENTIALS|APIKEY|AUTHKEY))|[\s;&](?:[A-Z0-9_]*_)?(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|PASS|CREDENTIALS|APIKEY|AUTHKEY))[ \t]*=[ \t]*["']?([^\s"'`]{6,})"#,
            1,
            plausible_env_secret,
        ),
        // `token: 3f9a…`, `my api secret is 9f8e…`: a bare secret-naming
        // word, so the value must look generated (see the filter). The
        // value's last character is not a full stop ending the sentence.
        (
            "generic_secret",
            Confidence::Probable,
            r#"(?i)(?:\b|_)(?:api[ _-]?(?:key|secret|token)|apikey|access[ _-]?key|secret(?:[ _-]?key)?|token)\b["']?(?:\s*[:=]|\s+(?:is|was))\s*["']?([A-Za-z0-9_\-./+=]{15,}[A-Za-z0-9_\-/+=])"#,
            1,
            generated_looking,
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

fn uuid_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
            .ok()
    })
    .as_ref()
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
