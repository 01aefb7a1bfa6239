//! The front matter rules: name, description, connection fields, declared
//! environment, `ui.icon`, `script_args` schemas, and the paths the body
//! refers to.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;
use silas_core::config::SkillValidationConfig;

use super::Out;
use crate::manifest::{self, ArgSchema, ArgType, Manifest, SkillType};
use crate::report::{Rule, Severity};
use crate::snapshot::Snapshot;
use crate::{MAX_NAME_LEN, is_valid_name};

/// Longer than this, a body defeats progressive disclosure (§10.3:
/// < 5000 tokens recommended, at ~4 characters per token).
pub const BODY_MAX_CHARS: usize = 20_000;

fn process_words() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?i)\b(first|then|next|finally|step \d+)\b").ok())
        .as_ref()
}

fn link_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\]\(([^)\s]+)\)").ok())
        .as_ref()
}

fn code_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"`([^`\n]+)`").ok()).as_ref()
}

/// A path inside the skill, as written: `Err` names why it cannot be one.
pub fn inside(path: &str) -> Result<&str, &'static str> {
    let p = path.strip_prefix("./").unwrap_or(path);
    if p.starts_with('/') || p.starts_with('~') {
        return Err("an absolute path");
    }
    if p.split('/').any(|seg| seg == "..") {
        return Err("a path climbing out with `..`");
    }
    Ok(p)
}

/// Check one path the skill refers to: inside, and present (a file, or a
/// directory some file lives under).
fn check_ref(out: &mut Out, snap: &Snapshot, path: &str, line: Option<u32>, what: &str) {
    match inside(path) {
        Err(why) => out.error(
            "SKILL.md",
            line,
            Rule::PathTraversal,
            format!("{what} `{path}` is {why}"),
        ),
        Ok(p) => {
            let dir = format!("{}/", p.trim_end_matches('/'));
            if snap.file(p).is_none() && !snap.files.iter().any(|f| f.path.starts_with(&dir)) {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::PathMissing,
                    format!("{what} `{path}` does not exist in the skill"),
                );
            }
        }
    }
}

pub fn front_matter(
    out: &mut Out,
    cfg: &SkillValidationConfig,
    snap: &Snapshot,
    text: &str,
    m: &Manifest,
    dir_name: &str,
) {
    let at = |key: &str| manifest::line_of_key(text, key);
    if !is_valid_name(&m.name) {
        out.error(
            "SKILL.md",
            at("name"),
            Rule::NameFormat,
            format!(
                "name {:?} must be 1-{MAX_NAME_LEN} lowercase letters, digits and single hyphens",
                m.name
            ),
        );
    }
    if m.name != dir_name {
        out.error(
            "SKILL.md",
            at("name"),
            Rule::NameMismatch,
            format!(
                "name {:?} must equal the directory name {dir_name:?}",
                m.name
            ),
        );
    }
    let len = m.description.chars().count();
    let (min, max) = (
        cfg.description_min_chars as usize,
        cfg.description_max_chars as usize,
    );
    if len < min || len > max {
        out.error(
            "SKILL.md",
            at("description"),
            Rule::DescriptionLength,
            format!("description must be {min} to {max} characters (has {len})"),
        );
    }
    let steps = process_words().map_or(0, |re| re.find_iter(&m.description).count());
    if steps >= 2 {
        let severity = if cfg.fail_on_process_heavy_description {
            Severity::Error
        } else {
            Severity::Warning
        };
        out.push(
            "SKILL.md",
            at("description"),
            Rule::DescriptionProcessHeavy,
            severity,
            "description reads like process steps; say when to use the skill".into(),
        );
    }
    for other in &m.composes_with {
        if !is_valid_name(other) {
            out.error(
                "SKILL.md",
                at("composes_with"),
                Rule::NameFormat,
                format!("composes_with names {other:?}, not a skill name"),
            );
        }
    }
    for var in m.requirements.env.iter().chain(&m.requirements.credentials) {
        let ok = var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            out.error(
                "SKILL.md",
                at("requirements"),
                Rule::FrontMatterInvalid,
                format!("requirements: {var:?} is not an environment variable name"),
            );
        }
    }
    if let Some(icon) = m.ui.as_ref().and_then(|u| u.icon.as_deref()) {
        check_ref(out, snap, icon, at("ui"), "ui.icon");
    }
    if m.kind == Some(SkillType::Connection) {
        if m.auth_strategy.is_none() {
            out.error("SKILL.md", at("type"), Rule::ConnectionFields, "a connection skill needs auth_strategy (device_code, browser_redirect or secure_input)".into());
        }
        for p in &m.initial_permissions {
            if !m.available_permissions.contains(p) {
                out.error(
                    "SKILL.md",
                    at("initial_permissions"),
                    Rule::ConnectionFields,
                    format!("initial permission {p:?} is not in available_permissions"),
                );
            }
        }
        for (script, perms) in &m.script_permissions {
            let line = at("script_permissions");
            if !script.starts_with("scripts/") || snap.file(script).is_none() {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::ConnectionFields,
                    format!("script_permissions names `{script}`, not a script of the skill"),
                );
            }
            for p in perms
                .iter()
                .filter(|p| !m.available_permissions.contains(p))
            {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::ConnectionFields,
                    format!("{script} needs {p:?}, which is not in available_permissions"),
                );
            }
        }
        if snap.file("scripts/health_check.py").is_none() {
            out.error(
                "SKILL.md",
                at("type"),
                Rule::ConnectionFields,
                "a connection skill must include scripts/health_check.py".into(),
            );
        }
    } else if m.auth_strategy.is_some()
        || !m.initial_permissions.is_empty()
        || !m.available_permissions.is_empty()
        || !m.script_permissions.is_empty()
    {
        out.error(
            "SKILL.md",
            at("auth_strategy")
                .or(at("initial_permissions"))
                .or(at("available_permissions")),
            Rule::ConnectionFields,
            "auth_strategy and permissions belong to `type: connection` skills".into(),
        );
    }
    script_args(out, snap, text, m);
}

fn type_name(t: ArgType) -> &'static str {
    match t {
        ArgType::String => "string",
        ArgType::Integer => "integer",
        ArgType::Number => "number",
        ArgType::Boolean => "boolean",
    }
}

/// Whether `v` is a value of the argument's type within its bounds.
pub fn value_fits(schema: &ArgSchema, v: &Value) -> Result<(), String> {
    let typed = match (schema.kind, v) {
        (ArgType::String, Value::String(_)) | (ArgType::Boolean, Value::Bool(_)) => true,
        (ArgType::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
        (ArgType::Number, Value::Number(_)) => true,
        _ => false,
    };
    if !typed {
        return Err(format!("{v} is not a {}", type_name(schema.kind)));
    }
    if let (Some(max), Value::String(s)) = (schema.max_length, v)
        && s.chars().count() as u64 > max
    {
        return Err(format!("is longer than max_length {max}"));
    }
    if let Some(x) = v.as_f64()
        && (schema.min.is_some_and(|min| x < min) || schema.max.is_some_and(|max| x > max))
    {
        return Err(format!("{x} is outside min/max"));
    }
    if let Some(choices) = &schema.choices
        && !choices.contains(v)
    {
        return Err(format!("{v} is not one of the enum values"));
    }
    Ok(())
}

fn arg_name_ok(n: &str) -> bool {
    n.len() <= 64
        && n.starts_with(|c: char| c.is_ascii_lowercase())
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn script_args(out: &mut Out, snap: &Snapshot, text: &str, m: &Manifest) {
    for (script, args) in &m.script_args {
        let line = manifest::line_of(text, &format!("{script}:"))
            .or_else(|| manifest::line_of_key(text, "script_args"));
        match inside(script) {
            Err(why) => {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::PathTraversal,
                    format!("script_args names `{script}`, {why}"),
                );
                continue;
            }
            Ok(p) if !p.starts_with("scripts/") => {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::ScriptArgsSchema,
                    format!("script_args names `{script}`, which is not under scripts/"),
                );
            }
            Ok(p) if snap.file(p).is_none() => {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::PathMissing,
                    format!("declared script {script} is missing"),
                );
            }
            Ok(_) => {}
        }
        for (name, schema) in args {
            let line = manifest::line_of(text, &format!("{name}:")).or(line);
            let mut bad = |msg: String| {
                out.error(
                    "SKILL.md",
                    line,
                    Rule::ScriptArgsSchema,
                    format!("{script} `{name}`: {msg}"),
                )
            };
            if !arg_name_ok(name) {
                bad("argument names are lowercase letters, digits and _ (passed as --name)".into());
            }
            let numeric = matches!(schema.kind, ArgType::Integer | ArgType::Number);
            match schema.kind {
                ArgType::String if schema.max_length.is_none() && schema.choices.is_none() => {
                    bad("a string argument needs max_length (or enum): inputs are bounded".into());
                }
                ArgType::String => {}
                _ if schema.max_length.is_some() => {
                    bad("max_length applies to strings only".into())
                }
                _ => {}
            }
            if !numeric && (schema.min.is_some() || schema.max.is_some()) {
                bad("min/max apply to integer and number arguments only".into());
            }
            if let (Some(min), Some(max)) = (schema.min, schema.max)
                && min > max
            {
                bad(format!("min {min} is greater than max {max}"));
            }
            for choice in schema.choices.iter().flatten() {
                let plain = ArgSchema {
                    choices: None,
                    ..schema.clone()
                };
                if let Err(e) = value_fits(&plain, choice) {
                    bad(format!("enum value {e}"));
                }
            }
            if let Some(d) = &schema.default
                && let Err(e) = value_fits(schema, d)
            {
                bad(format!("default {e}"));
            }
        }
    }
}

/// Paths the body refers to: markdown links and code spans naming a file
/// under `scripts/`, `references/` or `assets/` (or climbing out).
pub fn body_refs(out: &mut Out, snap: &Snapshot, body: &str, body_line: u32) {
    if body.chars().count() > BODY_MAX_CHARS {
        out.push(
            "SKILL.md",
            Some(body_line),
            Rule::BodyLength,
            Severity::Warning,
            format!(
                "the body has more than {BODY_MAX_CHARS} characters; move detail to references/"
            ),
        );
    }
    for (i, l) in body.split('\n').enumerate() {
        let line = Some(body_line + u32::try_from(i).unwrap_or(0));
        for cap in link_re().into_iter().flat_map(|re| re.captures_iter(l)) {
            let target = cap.get(1).map_or("", |m| m.as_str());
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            check_ref(out, snap, target, line, "link");
        }
        for cap in code_re().into_iter().flat_map(|re| re.captures_iter(l)) {
            let token = cap
                .get(1)
                .map_or("", |m| m.as_str())
                .split_whitespace()
                .next()
                .unwrap_or_default();
            let named = ["scripts/", "references/", "assets/"]
                .iter()
                .any(|d| token.starts_with(d) || token.starts_with(&format!("./{d}")));
            if token.ends_with('/') || !(named || token.contains("../")) {
                continue;
            }
            check_ref(out, snap, token, line, "reference");
        }
    }
}
