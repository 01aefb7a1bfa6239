//! `silas skill import` (§10.4.1): a Claude-, OpenAI- or OpenClaw-style skill
//! folder on local disk adapted to the Silas format by deterministic
//! transforms, with a transformation report. Front matter keys Silas knows
//! are kept; a few are mapped; missing required keys are filled with
//! stated defaults; everything else is dropped and listed. Files are copied
//! byte for byte (links and special files are refused, never followed); a
//! platform's own UI metadata (`agents/openai.yaml`) is not copied. The
//! result then goes through the same validation and install card as any
//! skill — an imported skill never runs before its `skill_install` approval.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SkillError;
use crate::manifest::KNOWN_KEYS;
use crate::snapshot;

/// The source format, detected from the folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    Silas,
    Claude,
    Openai,
    Openclaw,
}

/// What the import changed (§10.4.1 step 5), shown on the install card.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformationReport {
    pub source: String,
    pub format: Option<SourceFormat>,
    pub name: String,
    /// `from → to` key mappings applied.
    pub translated: Vec<String>,
    /// Keys dropped because Silas does not enforce them.
    pub removed: Vec<String>,
    /// Required keys filled with a stated default.
    pub defaults: Vec<String>,
    /// Files not copied (platform-only metadata).
    pub skipped_files: Vec<String>,
    /// What the owner should look at before approving.
    pub manual_review: Vec<String>,
}

impl TransformationReport {
    /// One line per change, for the card.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "imported from {} ({})",
            self.source,
            self.format
                .map(|f| format!("{f:?}").to_lowercase())
                .unwrap_or_else(|| "unknown".into())
        )];
        out.extend(self.translated.iter().map(|t| format!("mapped {t}")));
        out.extend(
            self.removed
                .iter()
                .map(|k| format!("dropped unsupported key `{k}`")),
        );
        out.extend(self.defaults.iter().map(|d| format!("filled {d}")));
        out.extend(
            self.skipped_files
                .iter()
                .map(|f| format!("not copied: {f}")),
        );
        out.extend(self.manual_review.iter().map(|m| format!("review: {m}")));
        out
    }
}

fn detect(front: &serde_yaml_ng::Mapping, files: &[&str]) -> SourceFormat {
    let has = |k: &str| front.contains_key(k);
    if files.iter().any(|f| f.starts_with("agents/")) {
        SourceFormat::Openai
    } else if has("allowed-tools") || has("context") || has("hooks") || has("model") {
        SourceFormat::Claude
    } else if has("homepage") || has("user-invocable") || has("command-dispatch") {
        SourceFormat::Openclaw
    } else if front
        .keys()
        .all(|k| k.as_str().is_some_and(|k| KNOWN_KEYS.contains(&k)))
    {
        SourceFormat::Silas
    } else {
        SourceFormat::Claude
    }
}

/// A name made valid: lowercase, `_`/space/`.` → `-`, others dropped.
pub fn normalize_name(raw: &str) -> String {
    let mut s: String = raw
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => Some(c),
            '_' | ' ' | '.' => Some('-'),
            _ => None,
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    s.trim_matches('-')
        .chars()
        .take(crate::MAX_NAME_LEN)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// Adapt the folder at `src` into `dest_root/<name>` (which must not
/// exist). Returns the report; the caller validates and offers the result.
pub fn import(src: &Path, dest_root: &Path) -> Result<TransformationReport, SkillError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SkillError::Io { path, source }
    };
    let snap = snapshot::take(src).map_err(io(src))?;
    let folder = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let invalid = |rule, message: String| SkillError::Invalid {
        skill: folder.clone(),
        file: "SKILL.md".into(),
        line: None,
        rule,
        message,
    };
    if let Some(r) = snap.refusals.first() {
        return Err(SkillError::Invalid {
            skill: folder.clone(),
            file: r.path.clone(),
            line: None,
            rule: r.rule,
            message: r.message.clone(),
        });
    }
    let md = snap.file("SKILL.md").ok_or_else(|| {
        invalid(
            crate::Rule::FrontMatterMissing,
            "the folder has no SKILL.md".into(),
        )
    })?;
    let text = String::from_utf8_lossy(&md.bytes).into_owned();
    let (front, body) = split(&text).ok_or_else(|| {
        invalid(
            crate::Rule::FrontMatterMissing,
            "SKILL.md has no --- front matter".into(),
        )
    })?;
    let front: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(front)
        .map_err(|e| invalid(crate::Rule::FrontMatterParse, e.to_string()))?;
    let paths: Vec<&str> = snap.files.iter().map(|f| f.path.as_str()).collect();
    let format = detect(&front, &paths);
    let mut report = TransformationReport {
        source: src.display().to_string(),
        format: Some(format),
        ..Default::default()
    };
    let mut out: BTreeMap<String, serde_yaml_ng::Value> = BTreeMap::new();
    let mut metadata = serde_yaml_ng::Mapping::new();
    for (k, v) in front {
        let Some(key) = k.as_str().map(str::to_string) else {
            report.removed.push(format!("{k:?}"));
            continue;
        };
        match key.as_str() {
            // Kept as they are (the validator checks their shapes).
            "name"
            | "description"
            | "license"
            | "requirements"
            | "ui"
            | "activation"
            | "composes_with"
            | "script_args"
            | "type"
            | "auth_strategy"
            | "initial_permissions"
            | "available_permissions"
            | "script_permissions" => {
                out.insert(key, v);
            }
            "metadata" => {
                if let serde_yaml_ng::Value::Mapping(m) = v {
                    metadata.extend(m);
                }
            }
            // Informational keys become metadata, not behaviour.
            "version" | "author" | "homepage" | "tags" => {
                report.translated.push(format!("{key} → metadata.{key}"));
                metadata.insert(serde_yaml_ng::Value::String(key), v);
            }
            // Claude's "user only" switch is Silas's manual activation.
            "disable-model-invocation" => {
                if v.as_bool() == Some(true) {
                    out.insert("activation".into(), "manual".into());
                    report
                        .translated
                        .push("disable-model-invocation: true → activation: manual".into());
                } else {
                    report.removed.push(key);
                }
            }
            _ => {
                if key == "allowed-tools" {
                    report.manual_review.push(
                        "the source granted tools (allowed-tools); Silas grants none beyond its own gates"
                            .into(),
                    );
                }
                report.removed.push(key);
            }
        }
    }
    if !metadata.is_empty() {
        out.insert("metadata".into(), serde_yaml_ng::Value::Mapping(metadata));
    }
    let raw_name = out
        .get("name")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| folder.clone());
    let name = normalize_name(&raw_name);
    if !crate::is_valid_name(&name) {
        return Err(SkillError::BadName(raw_name));
    }
    if out.get("name").and_then(|v| v.as_str()) != Some(name.as_str()) {
        report
            .defaults
            .push(format!("name = {name:?} (from {raw_name:?})"));
        out.insert("name".into(), name.clone().into());
    }
    if !out.contains_key("description") {
        let first = body
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap_or("Imported skill; describe when to use it.");
        let d: String = first.chars().take(200).collect();
        report
            .defaults
            .push(format!("description from the first body line: {d:?}"));
        out.insert("description".into(), d.into());
    }
    report.name = name.clone();
    let dest = dest_root.join(&name);
    if std::fs::symlink_metadata(&dest).is_ok() {
        return Err(invalid(
            crate::Rule::NameFormat,
            format!("a skill named {name} already exists in the skills directory"),
        ));
    }
    let yaml = serde_yaml_ng::to_string(&out)
        .map_err(|e| invalid(crate::Rule::FrontMatterParse, e.to_string()))?;
    for f in &snap.files {
        if f.path.starts_with("agents/") {
            report.skipped_files.push(f.path.clone());
            continue;
        }
        let bytes = if f.path == "SKILL.md" {
            format!("---\n{yaml}---\n{body}").into_bytes()
        } else {
            f.bytes.clone()
        };
        let path = dest.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, bytes).map_err(io(&path))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o755))
            .map_err(io(&path))?;
    }
    report.removed.sort();
    Ok(report)
}

/// `(front matter, body)` of a SKILL.md.
fn split(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---")?;
    let front = &rest[..end];
    let after = &rest[end + 4..];
    let body = after.split_once('\n').map(|(_, b)| b).unwrap_or("");
    Some((front, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::config::SkillValidationConfig;

    #[test]
    fn a_claude_skill_is_mapped_deterministically_and_reported() {
        let src_root = tempfile::tempdir().unwrap();
        let src = src_root.path().join("Line_Counter");
        std::fs::create_dir_all(src.join("scripts")).unwrap();
        std::fs::create_dir_all(src.join("agents")).unwrap();
        std::fs::write(
            src.join("SKILL.md"),
            "---\nname: Line_Counter\ndescription: Use when the owner wants the lines of a text counted.\nallowed-tools: [Bash, Read]\ncontext: fork\nversion: 1.2\ndisable-model-invocation: true\n---\n# Line counter\n",
        )
        .unwrap();
        std::fs::write(
            src.join("scripts/count.py"),
            "import sys\nprint(len(sys.stdin.read().splitlines()))\n",
        )
        .unwrap();
        std::fs::write(src.join("agents/openai.yaml"), "interface: {}\n").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let r = import(&src, dest.path()).unwrap();
        assert_eq!(r.name, "line-counter");
        assert_eq!(r.format, Some(SourceFormat::Openai));
        assert_eq!(r.removed, ["allowed-tools", "context"]);
        assert!(
            r.translated
                .iter()
                .any(|t| t.contains("activation: manual"))
        );
        assert_eq!(r.skipped_files, ["agents/openai.yaml"]);
        assert!(!r.manual_review.is_empty());
        // The result is a Silas skill the validator accepts.
        let out = dest.path().join("line-counter");
        let report = crate::validate(&out, &SkillValidationConfig::default()).unwrap();
        assert!(report.is_valid(), "{:?}", report.findings);
        assert!(!out.join("agents").exists());
        // Deterministic: the same source gives the same bytes (same hash).
        let dest2 = tempfile::tempdir().unwrap();
        let r2 = import(&src, dest2.path()).unwrap();
        assert_eq!(
            r,
            TransformationReport {
                source: r.source.clone(),
                ..r2
            }
        );
        assert_eq!(
            crate::Skill::load(&out).unwrap().content_hash,
            crate::Skill::load(&dest2.path().join("line-counter"))
                .unwrap()
                .content_hash
        );
        // Importing over an existing skill is refused.
        assert!(import(&src, dest.path()).is_err());
    }

    #[test]
    fn missing_fields_get_stated_defaults_and_links_are_refused() {
        let src_root = tempfile::tempdir().unwrap();
        let src = src_root.path().join("notes");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(
            src.join("SKILL.md"),
            "---\nhomepage: https://example.com\n---\n# Notes\n\nUse when notes must be tidied.\n",
        )
        .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let r = import(&src, dest.path()).unwrap();
        assert_eq!(r.format, Some(SourceFormat::Openclaw));
        assert_eq!(r.defaults.len(), 2, "{:?}", r.defaults);
        let md = std::fs::read_to_string(dest.path().join("notes/SKILL.md")).unwrap();
        assert!(
            md.contains("description: Use when notes must be tidied."),
            "{md}"
        );
        assert!(md.contains("homepage: https://example.com"), "{md}");

        std::os::unix::fs::symlink("/etc/passwd", src.join("passwd")).unwrap();
        let err = import(&src, tempfile::tempdir().unwrap().path()).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(normalize_name("My  Skill.v2_"), "my-skill-v2");
    }
}
