//! What removing a skill withdraws besides its folder (`silas skill
//! remove`): the install approval, so putting the same bytes back asks the
//! owner again — before, the record stayed and the copied-back folder ran
//! under the old approval — a recorded decline, and any install card still
//! waiting for the skill.

use silas_core::cards::CardPayload;
use silas_core::model::skills::{DeclinedSkill, InstalledSkill};
use silas_storage::{PendingCard, Store, StoreError};

/// What [`withdraw`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Withdrawn {
    /// The install approval (its token id).
    pub approval: Option<String>,
    pub decline: bool,
    /// Install cards closed.
    pub cards: Vec<String>,
}

/// Forgets every approval-side record of `name`.
pub fn withdraw(store: &Store, name: &str) -> Result<Withdrawn, StoreError> {
    let approval = store
        .records::<InstalledSkill>()
        .delete(name)?
        .map(|r| r.token_id);
    let decline = store.records::<DeclinedSkill>().delete(name)?.is_some();
    let cards: Vec<String> = store
        .records::<PendingCard>()
        .list()?
        .into_iter()
        .filter(|c| matches!(&c.card, CardPayload::SkillInstall(s) if s.skill == name))
        .map(|c| c.request_id)
        .collect();
    store.records::<PendingCard>().delete_many(&cards)?;
    Ok(Withdrawn {
        approval,
        decline,
        cards,
    })
}
