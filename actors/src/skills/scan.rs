//! The start-up scan of `skills_dir` (issue #17): every skill folder that is
//! not installed at its current content hash is offered to the owner as a
//! `skill_install` card — once per hash: a folder whose card for that same
//! hash is still open is not offered again, so restarting the daemon does
//! not pile up duplicates. A folder that cannot be loaded (a link out, bad
//! front matter, a name that is not the folder's) is audited with its rule
//! and never offered; `silas skill list` shows it as broken. A folder the
//! owner declined at its current hash is not offered again (`declined`;
//! `silas skill install NAME` asks again). A folder whose
//! validation report has errors is refused by [`SkillHost::offer`] (audited
//! `skill_install_refused` with the first error's rule). A skill shipped
//! inside the binary, still at its shipped bytes, is not offered unasked
//! (`shipped`): unsolicited cards at the first connection would queue ahead
//! of the owner's first plan; `silas skill install NAME` offers its card.

use serde::Serialize;
use serde_json::json;
use silas_core::cards::CardPayload;
use silas_core::model::skills::{SkillSource, check_use};
use silas_skill::SkillError;
use silas_storage::PendingCard;

use super::{SkillFlowError, SkillHost};

/// What one scan did, per skill name (each list sorted by name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScanSummary {
    /// Installed and unchanged: usable.
    pub installed: Vec<String>,
    /// A new card was stored for the folder's current hash.
    pub offered: Vec<String>,
    /// A card for the current hash is already waiting for the owner.
    pub waiting: Vec<String>,
    /// The owner declined the current hash: not asked again.
    pub declined: Vec<String>,
    /// Shipped inside the binary and unchanged: offered only when asked.
    pub shipped: Vec<String>,
    /// Loaded, but its report has errors: no card.
    pub refused: Vec<String>,
    /// Could not be loaded at all: no card.
    pub broken: Vec<String>,
}

impl SkillHost {
    /// Scan `skills_dir` and offer what needs the owner's approval (see the
    /// module docs). Errors only when the store or the directory cannot be
    /// read; a bad folder is a result, not an error.
    pub fn scan_and_offer(&self) -> Result<ScanSummary, SkillFlowError> {
        let catalog = self.loader.scan()?;
        let cards = self.store.records::<PendingCard>().list()?;
        let waiting_for = |name: &str, hash: &str| {
            cards.iter().any(|c| {
                matches!(&c.card, CardPayload::SkillInstall(s)
                    if s.skill == name && s.content_hash == hash)
            })
        };
        let mut out = ScanSummary::default();
        for skill in &catalog.skills {
            let rec = self.installed(&skill.name)?;
            if check_use(&skill.name, rec.as_ref(), &skill.content_hash).is_ok() {
                out.installed.push(skill.name.clone());
            } else if waiting_for(&skill.name, &skill.content_hash) {
                out.waiting.push(skill.name.clone());
            } else if self
                .declined(&skill.name)?
                .is_some_and(|d| d.covers(&skill.content_hash))
            {
                out.declined.push(skill.name.clone());
            } else if self
                .shipped
                .iter()
                .any(|(n, h)| *n == skill.name && *h == skill.content_hash)
            {
                out.shipped.push(skill.name.clone());
            } else {
                let source = rec.map(|r| r.source).unwrap_or(SkillSource::Discovered);
                match self.offer(&skill.name, source, Vec::new()) {
                    Ok(_) => out.offered.push(skill.name.clone()),
                    // Audited by `offer` with the reason (rule included).
                    Err(SkillFlowError::Refused(_)) => out.refused.push(skill.name.clone()),
                    Err(e) => return Err(e),
                }
            }
        }
        for (name, err) in &catalog.broken {
            let (rule, file, line) = match err {
                SkillError::Invalid {
                    rule, file, line, ..
                } => (Some(rule.as_str()), Some(file.as_str()), *line),
                _ => (None, None, None),
            };
            self.audit(
                "skill_broken",
                json!({"skill": name, "rule": rule, "file": file, "line": line,
                       "reason": err.to_string()}),
            )?;
            out.broken.push(name.clone());
        }
        Ok(out)
    }
}
