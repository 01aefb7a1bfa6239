//! The validation report (§10.4 step 3, `validation_report`): typed
//! findings, each naming the file, the line and the rule, in a fixed order
//! so the same skill always gets the same report.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Every rule the validator applies. The snake_case name is what a report
/// shows and what tests and cards match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// `SKILL.md` is missing or does not start with a `---` block.
    FrontMatterMissing,
    /// The front matter is not YAML (or not a mapping).
    FrontMatterParse,
    /// A key Silas does not know.
    FrontMatterUnknownKey,
    /// A required key is missing or a value has the wrong shape.
    FrontMatterInvalid,
    /// `name` is not 1–64 lowercase letters, digits and single hyphens.
    NameFormat,
    /// `name` differs from the directory name.
    NameMismatch,
    /// `description` is outside the configured length bounds.
    DescriptionLength,
    /// `description` lists process steps instead of when to use the skill.
    DescriptionProcessHeavy,
    /// A connection skill without its auth strategy, permissions or health check.
    ConnectionFields,
    /// A path that is absolute or climbs out with `..`.
    PathTraversal,
    /// A referenced file that does not exist in the skill.
    PathMissing,
    /// A file name that is not UTF-8 or holds control characters.
    PathName,
    /// A symbolic link (inside or out, never followed).
    Symlink,
    /// A FIFO, socket or device file.
    SpecialFile,
    /// Too many files or bytes.
    TooLarge,
    /// A script that does not parse.
    ScriptSyntax,
    /// A script in a language Silas cannot check.
    ScriptUnsupported,
    /// The interpreter needed to check a script is missing or failed.
    ScriptCheckUnavailable,
    /// A credential literal (the secret detector's probable/definite tiers).
    CredentialLiteral,
    /// A high-entropy string that might be a credential (warning).
    PossibleCredential,
    /// An environment variable read without `requirements.env` declaring it.
    UndeclaredEnv,
    /// Data reaching a shell as code: `shell=True`, `os.system`, unquoted
    /// or `eval`-ed expansions.
    UnsafeShellInterpolation,
    /// `eval` / `exec` / `compile` of computed code in a Python script.
    DynamicCode,
    /// A `script_args` entry that is not a usable schema.
    ScriptArgsSchema,
    /// The body is longer than progressive disclosure allows (warning).
    BodyLength,
    /// A produced skill whose name an installed skill (or a folder under
    /// `skills_dir`) already has: it would replace it.
    NameTaken,
    /// A produced file with a second name (a hard link to a file elsewhere).
    HardLink,
}

impl Rule {
    pub fn as_str(&self) -> &'static str {
        use Rule::*;
        match self {
            FrontMatterMissing => "front_matter_missing",
            FrontMatterParse => "front_matter_parse",
            FrontMatterUnknownKey => "front_matter_unknown_key",
            FrontMatterInvalid => "front_matter_invalid",
            NameFormat => "name_format",
            NameMismatch => "name_mismatch",
            DescriptionLength => "description_length",
            DescriptionProcessHeavy => "description_process_heavy",
            ConnectionFields => "connection_fields",
            PathTraversal => "path_traversal",
            PathMissing => "path_missing",
            PathName => "path_name",
            Symlink => "symlink",
            SpecialFile => "special_file",
            TooLarge => "too_large",
            ScriptSyntax => "script_syntax",
            ScriptUnsupported => "script_unsupported",
            ScriptCheckUnavailable => "script_check_unavailable",
            CredentialLiteral => "credential_literal",
            PossibleCredential => "possible_credential",
            UndeclaredEnv => "undeclared_env",
            UnsafeShellInterpolation => "unsafe_shell_interpolation",
            DynamicCode => "dynamic_code",
            ScriptArgsSchema => "script_args_schema",
            BodyLength => "body_length",
            NameTaken => "name_taken",
            HardLink => "hard_link",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors refuse the skill; warnings are shown on the card and kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding: where (file relative to the skill, 1-based line when it
/// has one), which rule, what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub file: String,
    pub line: Option<u32>,
    pub rule: Rule,
    pub message: String,
    pub severity: Severity,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        match self.line {
            Some(l) => write!(
                f,
                "{sev} {}:{l} [{}] {}",
                self.file, self.rule, self.message
            ),
            None => write!(f, "{sev} {} [{}] {}", self.file, self.rule, self.message),
        }
    }
}

/// The report of one skill directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationReport {
    /// The directory's name (what `name` must equal).
    pub skill: String,
    /// The content hash of what was validated; `None` when the folder
    /// cannot be hashed (a symlink, a special file, too large).
    pub content_hash: Option<String>,
    /// Sorted by file, line, rule, message.
    pub findings: Vec<Finding>,
}

impl ValidationReport {
    /// No error-severity finding (warnings allowed).
    pub fn is_valid(&self) -> bool {
        !self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    /// Whether some finding is for `rule`.
    pub fn has(&self, rule: Rule) -> bool {
        self.findings.iter().any(|f| f.rule == rule)
    }

    /// The fixed order of a report: file, line, rule, message.
    pub fn sort(&mut self) {
        self.findings.sort_by(|a, b| {
            (&a.file, a.line, a.rule, &a.message).cmp(&(&b.file, b.line, b.rule, &b.message))
        });
        self.findings.dedup();
    }
}
