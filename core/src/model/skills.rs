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

    /// How a card says where the skill came from ("installed" read like a
    /// status before anything was installed).
    pub fn origin_text(self) -> &'static str {
        match self {
            SkillSource::Discovered => "found in the skills dir",
            SkillSource::Installed => "from `silas skill install`",
            SkillSource::Imported => "imported from another format",
            SkillSource::Created => "written by the skill-maker",
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

/// One tool of a skill's MCP server, as listed by the install dry run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolDecl {
    pub name: String,
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: serde_json::Value,
}

/// What the install dry run bound for a skill's MCP server: the tools it
/// listed from the approved files and their hash (names, descriptions,
/// schemas). A server offering anything else later is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpBinding {
    pub tools_hash: String,
    pub tools: Vec<McpToolDecl>,
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
    /// The skill's MCP server tools, bound at install (`None`: the skill
    /// declares no server). Records written before this field read as
    /// `None`, so no table migration is needed.
    #[serde(default)]
    pub mcp: Option<McpBinding>,
}

/// The owner declined a skill's install card (table `declined_skills`,
/// keyed by name): the start-up scan does not offer the same folder again
/// at any of these hashes; a changed folder (a new hash) is offered, and
/// `silas skill install NAME` clears the record to ask again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclinedSkill {
    pub name: String,
    /// Every content hash the owner declined, oldest first (bounded by
    /// [`DeclinedSkill::MAX_HASHES`]).
    pub content_hashes: Vec<String>,
    pub declined_at: Timestamp,
}

impl DeclinedSkill {
    /// Enough for a folder edited back and forth; older ones drop off.
    pub const MAX_HASHES: usize = 16;

    pub fn covers(&self, hash: &str) -> bool {
        self.content_hashes.iter().any(|h| h == hash)
    }

    /// `rec` with `hash` declined (now), the oldest dropped past the bound.
    pub fn with(rec: Option<DeclinedSkill>, name: &str, hash: &str, now: Timestamp) -> Self {
        let mut hashes = rec.map(|r| r.content_hashes).unwrap_or_default();
        hashes.retain(|h| h != hash);
        hashes.push(hash.to_string());
        let excess = hashes.len().saturating_sub(Self::MAX_HASHES);
        hashes.drain(..excess);
        DeclinedSkill {
            name: name.to_string(),
            content_hashes: hashes,
            declined_at: now,
        }
    }
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
            mcp: None,
        }
    }

    #[test]
    fn a_decline_covers_its_hashes_and_keeps_a_bounded_history() {
        let now = Timestamp::now();
        let d = DeclinedSkill::with(None, "count-lines", "aa", now);
        assert!(d.covers("aa") && !d.covers("bb"));
        // Declining the same hash again does not duplicate it.
        let d = DeclinedSkill::with(Some(d), "count-lines", "aa", now);
        assert_eq!(d.content_hashes, ["aa"]);
        let mut d = DeclinedSkill::with(Some(d), "count-lines", "bb", now);
        assert!(d.covers("aa") && d.covers("bb"));
        for i in 0..DeclinedSkill::MAX_HASHES {
            d = DeclinedSkill::with(Some(d), "count-lines", &format!("h{i}"), now);
        }
        assert_eq!(d.content_hashes.len(), DeclinedSkill::MAX_HASHES);
        assert!(!d.covers("aa"), "the oldest dropped off");
        assert!(d.covers(&format!("h{}", DeclinedSkill::MAX_HASHES - 1)));
    }

    #[test]
    fn records_without_an_mcp_binding_still_read() {
        // A record written before MCP bindings existed.
        let old = serde_json::json!({"name": "count-lines", "content_hash": "aa",
            "token_id": "t", "approved_via": "web", "source": "installed",
            "installed_at": "2026-01-01T00:00:00Z"});
        let rec: InstalledSkill = serde_json::from_value(old).unwrap();
        assert_eq!(rec.mcp, None);
        let mut with = rec.clone();
        with.mcp = Some(McpBinding {
            tools_hash: "h".into(),
            tools: vec![McpToolDecl {
                name: "search".into(),
                description: "d".into(),
                input_schema: serde_json::json!({"type": "object"}),
            }],
        });
        let back: InstalledSkill =
            serde_json::from_value(serde_json::to_value(&with).unwrap()).unwrap();
        assert_eq!(back, with);
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
