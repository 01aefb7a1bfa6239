//! The WorkExecutor's side of the skill-maker (issue #17 item 5; the
//! flow is in [`crate::skills`]'s `made` module): after each attempt of an
//! item whose approved plan bound the `skill-maker` skill, the `skills/<name>/`
//! folders its tool runs wrote are staged before their work dirs go; when
//! the item ends `done` the staged folders are offered on `skill_install`
//! cards (delivered with the item's result) or refused with their rule.

use std::path::PathBuf;

use serde_json::json;

use super::engine::{WorkEngine, WorkError};
use super::skill_tools::ItemSkills;
use super::tools::Ledger;
use crate::skills::{Produced, SKILL_MAKER};

impl WorkEngine {
    /// Stages what this attempt's successful tool runs produced; `None`
    /// for an item that does not run the skill-maker (or a workspace task,
    /// whose runs write into the project copy, not a work dir).
    pub(super) fn capture_made_skills(
        &self,
        item_id: &str,
        workspace: bool,
        skills: &ItemSkills,
        ledger: &Ledger,
    ) -> Result<Option<Produced>, WorkError> {
        let Some(host) = self.skills.as_ref() else {
            return Ok(None);
        };
        if workspace || !skills.names().contains(SKILL_MAKER) {
            return Ok(None);
        }
        let dirs: Vec<PathBuf> = ledger
            .executed
            .iter()
            .filter(|r| r.success)
            .filter_map(|r| self.registry.work_dir_of(&r.execution_id))
            .collect();
        let produced = host
            .capture_produced(item_id, &dirs)
            .map_err(|e| WorkError::Io(format!("{}: {e}", silas_core::Coded::code(&e))))?;
        if !produced.staged.is_empty() || !produced.refused.is_empty() {
            self.audit(
                "skill_produced",
                json!({"work_item_id": item_id, "staged": produced.staged,
                       "refused": produced.refused.iter().map(|(n, _)| n).collect::<Vec<_>>()}),
            )?;
        }
        Ok(Some(produced))
    }

    /// At `done`: the staged skills' cards (or refusals), as one note for
    /// the owner appended to the item's summary.
    pub(super) fn offer_made_skills(
        &self,
        item_id: &str,
        produced: Option<&Produced>,
    ) -> Result<Option<String>, WorkError> {
        let (Some(host), Some(produced)) = (self.skills.as_ref(), produced) else {
            return Ok(None);
        };
        let offer = host
            .offer_produced(item_id, produced)
            .map_err(|e| WorkError::Io(format!("{}: {e}", silas_core::Coded::code(&e))))?;
        Ok(offer.note())
    }
}
