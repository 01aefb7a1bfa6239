//! The deterministic validation report (§10.4 step 2, issue #17 item 2):
//! front matter, description bounds, script syntax, path integrity,
//! forbidden patterns (credential literals, undeclared environment use,
//! unsafe shell interpolation, dynamic code) and `script_args` schemas.
//! Every finding names the file, the line and the rule. The report is
//! computed from one [`snapshot`](crate::snapshot) of the folder, and its
//! content hash is the hash of exactly what was checked.

pub mod checker;
mod rules;
pub mod shell;

use std::collections::BTreeSet;
use std::path::Path;

use silas_core::config::SkillValidationConfig;
use silas_core::secrets::{self, Confidence};

pub use checker::{HostInterpreters, ScriptChecker};
pub use rules::{inside, value_fits};

use crate::SkillError;
use crate::manifest::{self, Manifest};
use crate::report::{Finding, Rule, Severity, ValidationReport};
use crate::snapshot::{self, FileEntry, Snapshot};

/// Variables every process has; reading them needs no declaration.
pub const STANDARD_ENV: &[&str] = &[
    "PATH", "HOME", "TMPDIR", "PWD", "OLDPWD", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "USER", "LOGNAME", "SHELL", "TERM",
];

/// Findings being collected.
#[derive(Default)]
pub(crate) struct Out(Vec<Finding>);

impl Out {
    pub(crate) fn push(
        &mut self,
        file: &str,
        line: Option<u32>,
        rule: Rule,
        severity: Severity,
        message: String,
    ) {
        self.0.push(Finding {
            file: file.to_string(),
            line,
            rule,
            message,
            severity,
        });
    }

    pub(crate) fn error(&mut self, file: &str, line: Option<u32>, rule: Rule, message: String) {
        self.push(file, line, rule, Severity::Error, message);
    }
}

/// Validate the skill folder at `dir` with the host's interpreters.
pub fn validate(dir: &Path, cfg: &SkillValidationConfig) -> Result<ValidationReport, SkillError> {
    validate_with(dir, cfg, &HostInterpreters::default())
}

/// [`validate`] with a given script checker.
pub fn validate_with(
    dir: &Path,
    cfg: &SkillValidationConfig,
    checker: &dyn ScriptChecker,
) -> Result<ValidationReport, SkillError> {
    let snap = snapshot::take(dir).map_err(|source| SkillError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Out::default();
    for r in &snap.refusals {
        out.error(&r.path, None, r.rule, r.message.clone());
    }
    let manifest = match snap.file("SKILL.md") {
        None => {
            out.error(
                "SKILL.md",
                None,
                Rule::FrontMatterMissing,
                "SKILL.md is missing".into(),
            );
            None
        }
        Some(md) => skill_md(&mut out, cfg, &snap, md, &dir_name),
    };
    let declared: BTreeSet<&str> = manifest
        .as_ref()
        .map(|m| {
            let r = &m.requirements;
            r.env
                .iter()
                .chain(&r.credentials)
                .map(String::as_str)
                .collect()
        })
        .unwrap_or_default();
    for f in &snap.files {
        credentials(&mut out, f);
        if f.path.starts_with("scripts/") {
            script(&mut out, cfg, checker, f, &declared);
        }
    }
    let mut report = ValidationReport {
        skill: dir_name,
        content_hash: snap.content_hash(),
        findings: out.0,
    };
    report.sort();
    Ok(report)
}

fn skill_md(
    out: &mut Out,
    cfg: &SkillValidationConfig,
    snap: &Snapshot,
    md: &FileEntry,
    dir_name: &str,
) -> Option<Manifest> {
    let Ok(text) = std::str::from_utf8(&md.bytes) else {
        out.error(
            "SKILL.md",
            None,
            Rule::FrontMatterParse,
            "SKILL.md is not UTF-8".into(),
        );
        return None;
    };
    let parsed = manifest::parse(text);
    for p in &parsed.problems {
        out.error("SKILL.md", p.line, p.rule, p.message.clone());
    }
    if let Some(m) = &parsed.manifest {
        rules::front_matter(out, cfg, snap, text, m, dir_name);
    }
    rules::body_refs(out, snap, &parsed.body, parsed.body_line);
    parsed.manifest
}

fn line_at(text: &str, offset: usize) -> u32 {
    let before = text.get(..offset).unwrap_or(text);
    u32::try_from(before.matches('\n').count() + 1).unwrap_or(u32::MAX)
}

/// Credential literals through the system's one secret detector. The
/// finding names the kind, never the value.
fn credentials(out: &mut Out, f: &FileEntry) {
    let Ok(text) = std::str::from_utf8(&f.bytes) else {
        return; // binary assets: nothing a script can read as a literal
    };
    let instructions = f.path == "SKILL.md" || f.path.starts_with("scripts/");
    for s in secrets::scan(text) {
        let line = Some(line_at(text, s.start));
        match s.confidence {
            Confidence::Definite | Confidence::Probable => out.error(
                &f.path,
                line,
                Rule::CredentialLiteral,
                format!(
                    "a {} credential literal; use a credential reference",
                    s.kind
                ),
            ),
            Confidence::Possible if instructions => out.push(
                &f.path,
                line,
                Rule::PossibleCredential,
                Severity::Warning,
                format!(
                    "a high-entropy string ({}) that may be a credential",
                    s.kind
                ),
            ),
            Confidence::Possible => {}
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    Python,
    Shell { bash: bool },
}

fn language(f: &FileEntry, text: &str) -> Option<Lang> {
    let shebang = text
        .lines()
        .next()
        .filter(|l| l.starts_with("#!"))
        .unwrap_or_default();
    let ext = f.path.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
    if ext == "py" || shebang.contains("python") {
        Some(Lang::Python)
    } else if ext == "bash" || shebang.contains("bash") {
        Some(Lang::Shell { bash: true })
    } else if ext == "sh"
        || shebang.ends_with("/sh")
        || shebang.contains("env sh")
        || shebang.contains("dash")
    {
        Some(Lang::Shell { bash: false })
    } else {
        None
    }
}

fn script(
    out: &mut Out,
    cfg: &SkillValidationConfig,
    checker: &dyn ScriptChecker,
    f: &FileEntry,
    declared: &BTreeSet<&str>,
) {
    let Ok(text) = std::str::from_utf8(&f.bytes) else {
        out.error(
            &f.path,
            None,
            Rule::ScriptUnsupported,
            "a script must be UTF-8 text".into(),
        );
        return;
    };
    let env_severity = if cfg.forbid_undeclared_env {
        Severity::Error
    } else {
        Severity::Warning
    };
    let undeclared = |name: &str| !declared.contains(name) && !STANDARD_ENV.contains(&name);
    let line = |l: u32| (l > 0).then_some(l);
    match language(f, text) {
        None => out.error(
            &f.path,
            None,
            Rule::ScriptUnsupported,
            "scripts are Python (.py) or POSIX shell (.sh); this one cannot be checked".into(),
        ),
        Some(Lang::Python) => match checker.python(&f.bytes) {
            Err(e) => out.error(&f.path, None, Rule::ScriptCheckUnavailable, e),
            Ok(facts) => {
                if let Some(e) = facts.syntax_error {
                    out.error(
                        &f.path,
                        line(e.line),
                        Rule::ScriptSyntax,
                        format!("Python does not parse: {}", e.message),
                    );
                }
                for r in facts.env {
                    match r.name {
                        None => out.push(
                            &f.path,
                            line(r.line),
                            Rule::UndeclaredEnv,
                            env_severity,
                            "reads an environment variable by a computed name".into(),
                        ),
                        Some(n) if undeclared(&n) => out.push(
                            &f.path,
                            line(r.line),
                            Rule::UndeclaredEnv,
                            env_severity,
                            format!("reads ${n}, which requirements.env does not declare"),
                        ),
                        Some(_) => {}
                    }
                }
                for c in facts.shell {
                    out.error(
                        &f.path,
                        line(c.line),
                        Rule::UnsafeShellInterpolation,
                        format!(
                            "{} hands a string to a shell; pass an argument list",
                            c.what
                        ),
                    );
                }
                for c in facts.dynamic {
                    out.error(
                        &f.path,
                        line(c.line),
                        Rule::DynamicCode,
                        format!("{} runs computed code", c.what),
                    );
                }
            }
        },
        Some(Lang::Shell { bash }) => {
            match checker.shell(&f.bytes, bash) {
                Err(e) => out.error(&f.path, None, Rule::ScriptCheckUnavailable, e),
                Ok(Some(e)) => out.error(
                    &f.path,
                    line(e.line),
                    Rule::ScriptSyntax,
                    format!("the shell does not parse it: {}", e.message),
                ),
                Ok(None) => {}
            }
            let facts = shell::analyze(text);
            for (n, l) in &facts.reads {
                if undeclared(n)
                    && !facts.assigned.contains(n)
                    && !shell::SHELL_SET.contains(&n.as_str())
                {
                    out.push(
                        &f.path,
                        Some(*l),
                        Rule::UndeclaredEnv,
                        env_severity,
                        format!("reads ${n}, which requirements.env does not declare"),
                    );
                }
            }
            for (l, why) in facts.unsafe_sites {
                out.error(&f.path, Some(l), Rule::UnsafeShellInterpolation, why);
            }
        }
    }
}
