//! Skills the skill-maker writes (issue #17 item 5, spec §10.4).
//!
//! A work item whose plan names the `skill-maker` skill writes each new
//! skill as `skills/<name>/` in the working directory of one of its
//! sandboxed tool runs — never into `skills_dir`, which the sandbox cannot
//! reach. After each attempt, before its work dirs are deleted,
//! [`SkillHost::capture_produced`] copies those folders into the item's
//! staging area `{data_dir}/skill-staging/<work item>/<name>/`
//! ([`silas_skill::install::stage_produced`]: links, hard links and
//! special files refuse the folder; the last attempt's capture replaces the
//! previous one). When the item ends `done` (verification passed),
//! [`SkillHost::offer_produced`] validates each staged folder and offers
//! the same `skill_install` card as any other skill — report and content
//! hash, `made_by` naming the item — or refuses it with the named rule
//! (audited `skill_install_refused`, and told to the owner in the item's
//! result). A name an installed skill or a folder under `skills_dir`
//! already has is refused (`name_taken`): a produced skill never replaces
//! one. Nothing is activated without approval: [`SkillHost::decide`] dry
//! runs the staged bytes at the approved hash and only then copies them
//! into `skills_dir` (checked again at that hash).

use std::path::{Path, PathBuf};

use serde_json::json;
use silas_core::cards::CardPayload;
use silas_core::model::skills::SkillSource;
use silas_skill::{Rule, SkillError};
use silas_storage::PendingCard;

use super::{SkillFlowError, SkillHost};

/// The bundled skill whose plans produce skills.
pub const SKILL_MAKER: &str = "skill-maker";

/// Where, in a tool run's working directory, the skill-maker writes skills.
pub const PRODUCED_DIR: &str = "skills";

/// What one attempt's capture staged and refused (names sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Produced {
    pub staged: Vec<String>,
    /// (folder name, reason with its rule).
    pub refused: Vec<(String, String)>,
}

/// What [`SkillHost::offer_produced`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducedOffer {
    /// (skill, card request id, content hash).
    pub offered: Vec<(String, String, String)>,
    /// (skill, reason with its rule).
    pub refused: Vec<(String, String)>,
}

impl ProducedOffer {
    /// One sentence per skill for the owner (the item's result).
    pub fn note(&self) -> Option<String> {
        let mut lines: Vec<String> = self
            .offered
            .iter()
            .map(|(name, _, hash)| {
                format!(
                    "Skill {name} waits for your install approval (content hash {}); nothing of it runs before.",
                    &hash[..12.min(hash.len())]
                )
            })
            .collect();
        lines.extend(
            self.refused
                .iter()
                .map(|(name, why)| format!("Skill {name} was refused and not offered: {why}")),
        );
        (!lines.is_empty()).then(|| lines.join(" "))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SkillFlowError + '_ {
    move |source| {
        SkillFlowError::Skill(SkillError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A work item id usable as one directory name under the staging root.
fn plain(item_id: &str) -> Result<&str, SkillFlowError> {
    let ok = !item_id.is_empty()
        && !item_id.starts_with('.')
        && !item_id.contains('/')
        && !item_id.contains('\0');
    if ok {
        Ok(item_id)
    } else {
        Err(SkillFlowError::Refused(format!(
            "work item id {item_id:?} cannot name a staging directory"
        )))
    }
}

fn private_dir(path: &Path) -> Result<(), SkillFlowError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(io(path))
}

impl SkillHost {
    /// The staging area of one work item's produced skills.
    pub fn staging_dir(&self, item_id: &str) -> Result<PathBuf, SkillFlowError> {
        Ok(self.staging_root.join(plain(item_id)?))
    }

    /// A produced skill's staged folder.
    pub(super) fn staged_skill_dir(
        &self,
        item_id: &str,
        name: &str,
    ) -> Result<PathBuf, SkillFlowError> {
        if !silas_skill::is_valid_name(name) {
            return Err(SkillError::BadName(name.to_string()).into());
        }
        Ok(self.staging_dir(item_id)?.join(name))
    }

    /// Copies the `skills/<name>/` folders of `work_dirs` (one attempt's
    /// tool runs, in call order: a later run's folder of the same name
    /// replaces an earlier one) into the item's staging area, replacing
    /// what an earlier attempt staged. Refusals are returned, not errors.
    pub fn capture_produced(
        &self,
        item_id: &str,
        work_dirs: &[PathBuf],
    ) -> Result<Produced, SkillFlowError> {
        let staging = self.staging_dir(item_id)?;
        if std::fs::symlink_metadata(&staging).is_ok() {
            std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
        }
        let mut staged = std::collections::BTreeSet::new();
        let mut refused = std::collections::BTreeMap::new();
        for work in work_dirs {
            let root = work.join(PRODUCED_DIR);
            let Ok(meta) = std::fs::symlink_metadata(&root) else {
                continue;
            };
            if !meta.is_dir() {
                refused.insert(
                    PRODUCED_DIR.to_string(),
                    format!("[{}] `skills` is not a plain directory", Rule::Symlink),
                );
                continue;
            }
            let mut entries: Vec<_> = std::fs::read_dir(&root)
                .map_err(io(&root))?
                .filter_map(Result::ok)
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let name = entry.file_name().to_string_lossy().into_owned();
                let src = entry.path();
                let kind = std::fs::symlink_metadata(&src).map_err(io(&src))?;
                let why = if kind.file_type().is_symlink() {
                    Some(format!(
                        "[{}] the skill folder is a symbolic link",
                        Rule::Symlink
                    ))
                } else if !kind.is_dir() {
                    // A stray file next to the skill folders is not a skill.
                    continue;
                } else if !silas_skill::is_valid_name(&name) {
                    Some(format!(
                        "[{}] {}",
                        Rule::NameFormat,
                        SkillError::BadName(name.clone())
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    refused.insert(name, why);
                    continue;
                }
                private_dir(&staging)?;
                let dest = staging.join(&name);
                if std::fs::symlink_metadata(&dest).is_ok() {
                    std::fs::remove_dir_all(&dest).map_err(io(&dest))?;
                }
                staged.remove(&name);
                refused.remove(&name);
                match silas_skill::install::stage_produced(&src, &staging) {
                    Ok(_) => {
                        staged.insert(name);
                    }
                    Err(e @ SkillError::Invalid { .. }) => {
                        // A partial copy never stays behind.
                        let _ = std::fs::remove_dir_all(&dest);
                        refused.insert(name, e.to_string());
                    }
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&dest);
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(Produced {
            staged: staged.into_iter().collect(),
            refused: refused.into_iter().collect(),
        })
    }

    /// Why `name` may not be installed from a producing work item: an
    /// installed skill or a folder in `skills_dir` already has it.
    pub(super) fn name_taken(&self, name: &str) -> Result<Option<String>, SkillFlowError> {
        let in_dir = std::fs::symlink_metadata(self.loader.path_of(name)?).is_ok();
        if self.installed(name)?.is_some() || in_dir {
            return Ok(Some(format!(
                "[{}] a skill named {name} already exists; a made skill never replaces one",
                Rule::NameTaken
            )));
        }
        Ok(None)
    }

    /// Offers every folder `produced` staged for `item_id` (see the module
    /// docs); every refusal — the capture's and the report's — is audited
    /// `skill_install_refused` with the item and returned.
    pub fn offer_produced(
        &self,
        item_id: &str,
        produced: &Produced,
    ) -> Result<ProducedOffer, SkillFlowError> {
        let mut out = ProducedOffer::default();
        let refuse = |out: &mut ProducedOffer, name: &str, why: String| {
            self.audit(
                "skill_install_refused",
                json!({"skill": name, "reason": why, "source": SkillSource::Created.as_str(),
                       "made_by": item_id}),
            )?;
            out.refused.push((name.to_string(), why));
            Ok::<(), SkillFlowError>(())
        };
        for (name, why) in &produced.refused {
            refuse(&mut out, name, why.clone())?;
        }
        let open = self.store.records::<PendingCard>().list()?;
        for name in &produced.staged {
            if let Some(why) = self.name_taken(name)? {
                refuse(&mut out, name, why)?;
                continue;
            }
            let dir = self.staged_skill_dir(item_id, name)?;
            // The same folder from a resumed run: its card is still open.
            let hash = silas_skill::Skill::load(&dir).map(|s| s.content_hash).ok();
            if let Some(card) = open.iter().find(|c| {
                matches!(&c.card, CardPayload::SkillInstall(s)
                    if s.skill == *name && Some(&s.content_hash) == hash.as_ref()
                        && s.made_by.as_deref() == Some(item_id))
            }) {
                out.offered.push((
                    name.clone(),
                    card.request_id.clone(),
                    hash.unwrap_or_default(),
                ));
                continue;
            }
            match self.offer_at(name, &dir, SkillSource::Created, Vec::new(), Some(item_id)) {
                Ok(card) => {
                    if let CardPayload::SkillInstall(c) = &card.card {
                        out.offered
                            .push((name.clone(), card.request_id, c.content_hash.clone()));
                    }
                }
                // Audited by `offer_at` with its rule.
                Err(SkillFlowError::Refused(why)) => out.refused.push((name.clone(), why)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
