//! Installed skills (spec §10.4, issue #17 item 3): what the owner approved
//! for a skill — its name and the content hash of exactly the files the
//! install card showed. A skill is usable only while its folder still hashes
//! to the approved hash; any change needs a new install approval.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// How a skill reached its install card.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// A folder found under `skills_dir` that was not yet approved.
    #[default]
    Discovered,
    /// `silas skill install PATH`.
    Installed,
    /// `silas skill import PATH` (adapted from another platform's format).
    Imported,
    /// Written by the skill-maker in a work item.
    Created,
}

impl SkillSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SkillSource::Discovered => "discovered",
            SkillSource::Installed => "installed",
            SkillSource::Imported => "imported",
            SkillSource::Created => "created",
        }
    }
}

/// The subject a `skill_install` token binds: one skill at one content hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillInstallApproval {
    pub skill: String,
    pub content_hash: String,
}

impl SkillInstallApproval {
    /// The id a `skill_install` token names in place of a work item.
    pub fn subject_id(&self) -> String {
        format!("skill:{}", self.skill)
    }
}

/// One installed skill (table `installed_skills`, keyed by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledSkill {
    pub name: String,
    /// The content hash the owner approved (and the dry run ran).
    pub content_hash: String,
    /// The `skill_install` token that authorised it.
    pub token_id: String,
    /// The channel the owner approved on.
    pub approved_via: String,
    pub source: SkillSource,
    pub installed_at: Timestamp,
}

/// Why an installed skill may not be used now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkillUseRefusal {
    #[error("skill {0} is not installed (it needs a skill_install approval)")]
    NotInstalled(String),
    #[error(
        "skill {name} changed since it was approved (approved {approved}, now {current}); it needs a new skill_install approval"
    )]
    Changed {
        name: String,
        approved: String,
        current: String,
    },
}

impl crate::Coded for SkillUseRefusal {
    fn code(&self) -> crate::ErrorCode {
        match self {
            SkillUseRefusal::NotInstalled(_) => crate::ErrorCode::EApprovalScope,
            SkillUseRefusal::Changed { .. } => crate::ErrorCode::EApprovalHash,
        }
    }
}

/// A skill may be used only when it is installed at exactly its current
/// content hash.
pub fn check_use(
    name: &str,
    installed: Option<&InstalledSkill>,
    current_hash: &str,
) -> Result<(), SkillUseRefusal> {
    let Some(rec) = installed.filter(|r| r.name == name) else {
        return Err(SkillUseRefusal::NotInstalled(name.to_string()));
    };
    if rec.content_hash != current_hash {
        return Err(SkillUseRefusal::Changed {
            name: name.to_string(),
            approved: rec.content_hash.clone(),
            current: current_hash.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(hash: &str) -> InstalledSkill {
        InstalledSkill {
            name: "count-lines".into(),
            content_hash: hash.into(),
            token_id: "t".into(),
            approved_via: "web".into(),
            source: SkillSource::Installed,
            installed_at: Timestamp::now(),
        }
    }

    #[test]
    fn use_needs_the_approved_hash() {
        assert!(check_use("count-lines", Some(&rec("aa")), "aa").is_ok());
        assert!(matches!(
            check_use("count-lines", Some(&rec("aa")), "bb"),
            Err(SkillUseRefusal::Changed { .. })
        ));
        assert!(matches!(
            check_use("count-lines", None, "aa"),
            Err(SkillUseRefusal::NotInstalled(_))
        ));
        // A record for another skill never authorises this one.
        assert!(matches!(
            check_use("other", Some(&rec("aa")), "aa"),
            Err(SkillUseRefusal::NotInstalled(_))
        ));
    }
}
