//! The install card of §10.4 (issue #17 item 3): built only from a report
//! without errors, for the hash that report checked, so a refused skill
//! never gets a card that could approve it.

use silas_core::cards::SkillInstallCard;
use silas_core::model::skills::SkillSource;

use crate::loader::Skill;
use crate::report::{Severity, ValidationReport};

/// Why a skill gets no install card.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InstallRefusal {
    #[error("skill {skill} is refused by its validation report: {first}")]
    Invalid { skill: String, first: String },
    #[error("skill {0} changed while it was being checked; validate it again")]
    Moved(String),
}

impl silas_core::Coded for InstallRefusal {
    fn code(&self) -> silas_core::ErrorCode {
        match self {
            InstallRefusal::Invalid { .. } => silas_core::ErrorCode::ECfgInvalid,
            InstallRefusal::Moved(_) => silas_core::ErrorCode::EApprovalHash,
        }
    }
}

/// The `skill_install` card for `skill`, whose folder `report` checked.
pub fn install_card(
    skill: &Skill,
    report: &ValidationReport,
    source: SkillSource,
    transformation: Vec<String>,
) -> Result<SkillInstallCard, InstallRefusal> {
    if let Some(first) = report.errors().next() {
        return Err(InstallRefusal::Invalid {
            skill: skill.name.clone(),
            first: first.to_string(),
        });
    }
    // The card shows one hash: the one both the report and the load saw.
    if report.content_hash.as_deref() != Some(skill.content_hash.as_str()) {
        return Err(InstallRefusal::Moved(skill.name.clone()));
    }
    let req = &skill.manifest.requirements;
    Ok(SkillInstallCard {
        skill: skill.name.clone(),
        content_hash: skill.content_hash.clone(),
        source,
        description: skill.manifest.description.clone(),
        scripts: skill.scripts().into_iter().map(str::to_string).collect(),
        network: req.network.clone(),
        credentials: req.credentials.clone(),
        warnings: report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count(),
        findings: report.findings.iter().map(ToString::to_string).collect(),
        transformation,
        mcp_server: skill.manifest.mcp_server.as_ref().map(|m| {
            std::iter::once(m.command.as_str())
                .chain(m.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ")
        }),
        made_by: None,
    })
}

/// Copy the skill folder at `src` into `skills_dir/<its name>` (which must
/// not exist) from one snapshot: regular files byte for byte with their
/// permission bits, a link or special file refuses the whole copy.
/// Returns the skill's name.
pub fn copy_into(
    src: &std::path::Path,
    skills_dir: &std::path::Path,
) -> Result<String, crate::SkillError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |p: &std::path::Path| {
        let path = p.to_path_buf();
        move |source| crate::SkillError::Io { path, source }
    };
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !crate::is_valid_name(&name) {
        return Err(crate::SkillError::BadName(name));
    }
    let snap = crate::snapshot::take(src).map_err(io(src))?;
    if let Some(r) = snap.refusals.first() {
        return Err(crate::SkillError::Invalid {
            skill: name,
            file: r.path.clone(),
            line: None,
            rule: r.rule,
            message: r.message.clone(),
        });
    }
    let dest = skills_dir.join(&name);
    if std::fs::symlink_metadata(&dest).is_ok() {
        return Err(crate::SkillError::Invalid {
            skill: name.clone(),
            file: String::new(),
            line: None,
            rule: crate::Rule::NameFormat,
            message: format!("a skill named {name} already exists in the skills directory"),
        });
    }
    for f in &snap.files {
        let path = dest.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, &f.bytes).map_err(io(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o755))
            .map_err(io(&path))?;
    }
    Ok(name)
}

/// Copy a skill folder a sandboxed run produced (`src`, named by its
/// folder) into `staging/<name>` for the install card (issue #17 item 5).
/// Stricter than [`copy_into`]: a file with a second name (a hard link the
/// run made to a file elsewhere) is refused too, besides links and special
/// files; modes lose their setuid/setgid/sticky bits. `staging/<name>` must
/// not exist.
pub fn stage_produced(
    src: &std::path::Path,
    staging: &std::path::Path,
) -> Result<String, crate::SkillError> {
    use std::os::unix::fs::MetadataExt;
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for entry in walkdir::WalkDir::new(src).follow_links(false).min_depth(1) {
        let entry = entry.map_err(|e| crate::SkillError::Io {
            path: src.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        let meta =
            std::fs::symlink_metadata(entry.path()).map_err(|source| crate::SkillError::Io {
                path: entry.path().to_path_buf(),
                source,
            })?;
        if meta.is_file() && meta.nlink() != 1 {
            let rel = entry.path().strip_prefix(src).unwrap_or(entry.path());
            return Err(crate::SkillError::Invalid {
                skill: name,
                file: rel.display().to_string(),
                line: None,
                rule: crate::Rule::HardLink,
                message: "a hard-linked file (its content also lives elsewhere)".into(),
            });
        }
    }
    copy_into(src, staging)
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::config::SkillValidationConfig;

    fn write(dir: &std::path::Path, script: &str) {
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: count-lines\ndescription: Use when the owner wants the lines of a text file counted.\n---\n# Count lines\n",
        )
        .unwrap();
        std::fs::write(dir.join("scripts/count.sh"), script).unwrap();
    }

    #[test]
    fn a_valid_report_gets_a_card_bound_to_its_hash_and_a_refused_one_none() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("count-lines");
        write(&dir, "wc -l \"$1\"\n");
        let cfg = SkillValidationConfig::default();
        let report = crate::validate(&dir, &cfg).unwrap();
        let skill = Skill::load(&dir).unwrap();
        let card = install_card(&skill, &report, SkillSource::Installed, vec![]).unwrap();
        assert_eq!(card.content_hash, skill.content_hash);
        assert_eq!(card.scripts, ["scripts/count.sh"]);

        // Unsafe shell interpolation: the report refuses it, so no card.
        std::fs::write(dir.join("scripts/count.sh"), "eval \"$1\"\n").unwrap();
        let report = crate::validate(&dir, &cfg).unwrap();
        let skill = Skill::load(&dir).unwrap();
        let err = install_card(&skill, &report, SkillSource::Installed, vec![]).unwrap_err();
        assert!(
            err.to_string().contains("unsafe_shell_interpolation"),
            "{err}"
        );

        // A report of other bytes than the loaded skill's: no card either.
        std::fs::write(dir.join("scripts/count.sh"), "wc -l \"$1\"\n").unwrap();
        let report = crate::validate(&dir, &cfg).unwrap();
        std::fs::write(dir.join("scripts/count.sh"), "wc -c \"$1\"\n").unwrap();
        let skill = Skill::load(&dir).unwrap();
        assert!(matches!(
            install_card(&skill, &report, SkillSource::Installed, vec![]),
            Err(InstallRefusal::Moved(_))
        ));
    }

    #[test]
    fn a_produced_folder_is_staged_only_without_links_or_hard_links() {
        let root = tempfile::tempdir().unwrap();
        let staging = root.path().join("staging");
        let dir = root.path().join("work/skills/count-lines");
        write(&dir, "wc -l \"$1\"\n");
        let hash = Skill::load(&dir).unwrap().content_hash;
        assert_eq!(stage_produced(&dir, &staging).unwrap(), "count-lines");
        let staged = Skill::load(&staging.join("count-lines")).unwrap();
        assert_eq!(staged.content_hash, hash);

        // A hard link to a file outside the folder: refused, nothing staged.
        let other = tempfile::tempdir().unwrap();
        let dir2 = other.path().join("two-lines");
        std::fs::create_dir_all(&dir2).unwrap();
        std::fs::write(other.path().join("secret"), "s").unwrap();
        std::fs::hard_link(other.path().join("secret"), dir2.join("SKILL.md")).unwrap();
        let err = stage_produced(&dir2, &staging).unwrap_err();
        assert!(err.to_string().contains("[hard_link]"), "{err}");
        assert!(!staging.join("two-lines").exists());

        // A symbolic link out: refused with its rule.
        let dir3 = other.path().join("three-lines");
        write(&dir3, "wc -l \"$1\"\n");
        std::os::unix::fs::symlink("/etc/passwd", dir3.join("scripts/pw")).unwrap();
        let err = stage_produced(&dir3, &staging).unwrap_err();
        assert!(err.to_string().contains("[symlink]"), "{err}");
        assert!(!staging.join("three-lines").exists());
    }
}
