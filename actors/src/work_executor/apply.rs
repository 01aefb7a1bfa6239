//! Applying a verified workspace change set to the owner's real directory
//! (issue #15 item 4, §0.5.5 undo):
//!
//! * A task that ends `done` with write access and a non-empty change set
//!   either offers an **apply card** (the plan's `apply: review`, default) or,
//!   with `apply: direct` (shown on the plan card before approval), applies
//!   at once under the plan's own approval.
//! * The owner's answer is recorded on the card (`turn::approval_flow`, a
//!   single-step token bound to the item, its plan hash and the SHA-256 of
//!   the stored `changes.json`) and the item is dispatched; [`WorkEngine::
//!   settle_changes`] acts on it: re-checks the token against the card and
//!   the stored bytes, applies all-or-nothing behind the crash journal
//!   (`silas_workspace::apply`), keeps the reverse patch (`undo.json`), runs
//!   the optional local commit (hooks off), and replaces the card with an
//!   **undo card** open for the undo window. Declining, a timeout, or a
//!   refused apply (the workspace changed since the copy) leaves the real
//!   workspace untouched; the copies are removed either way.
//! * An approved undo card puts every file back byte for byte (refused if
//!   any changed since the apply).
//!
//! The executor only ever writes the real workspace here, and only with a
//! verified token for exactly the bytes the owner was shown.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;
use silas_core::approval::Subject;
use silas_core::cards::{self as model, ChangedFile, ChangesCard};
use silas_core::model::approval::{ChangesAction, ChangesApproval};
use silas_core::model::work::{WorkItem, WorkItemResult, WorkItemStatus};
use silas_core::model::workspace::{Access, ApplyMode};
use silas_core::{Coded, Timestamp, projections};
use silas_storage::PendingCard;
use silas_workspace::{ApplyError, ChangeSet, apply, commit};

use super::cards::{self, ToolDecision};
use super::engine::{WorkEngine, WorkError};
use super::workspace::{CHANGES_FILE, StoredChanges, WorkspaceRun};
use crate::work::WorkStatusKind;

/// The reverse patch of an apply, in the item's artifacts.
const UNDO_FILE: &str = "undo.json";

/// What `undo.json` holds: the record and the change set it came from (an
/// apply re-dispatched after a crash finds it and does not apply twice).
#[derive(Serialize, Deserialize)]
struct StoredUndo {
    changes_sha256: String,
    applied_at: Timestamp,
    undo: apply::UndoRecord,
    #[serde(default)]
    commit: Option<String>,
}

fn io(what: impl std::fmt::Display) -> WorkError {
    WorkError::Io(what.to_string())
}

/// What a finished run's change set led to.
pub(super) struct ChangesOutcome {
    /// The card to store with the item's `done` (apply or undo card).
    pub card: Option<PendingCard>,
    /// A sentence for the result.
    pub note: Option<String>,
}

/// The card a change set is shown on.
fn card_for(
    item: &WorkItem,
    run: &WorkspaceRun,
    changes: &ChangeSet,
    sha256: &str,
    plan_hash: &str,
    phase: ChangesAction,
) -> ChangesCard {
    let (diff, cut) = model::cut_diff(&changes.unified_diff, model::CHANGES_CARD_DIFF_MAX);
    ChangesCard {
        work_item_id: item.id.clone(),
        title: item.title.clone(),
        phase,
        workspace: run.use_.name.clone(),
        path: run.snapshot.source.display().to_string(),
        plan_hash: plan_hash.to_string(),
        changes_sha256: sha256.to_string(),
        files: changes
            .files
            .iter()
            .map(|f| ChangedFile {
                path: f.path.clone(),
                kind: serde_json::to_value(f.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                added: f.added_lines,
                removed: f.removed_lines,
                binary: f.binary,
                protected: f.protected,
            })
            .collect(),
        total_added: changes.total_added,
        total_removed: changes.total_removed,
        refused: changes
            .refused
            .iter()
            .map(|r| format!("{} ({})", r.path, refusal_words(&r.reason)))
            .collect(),
        diff,
        diff_truncated: cut || changes.diff_truncated,
        commit_message: run.use_.commit_message.clone(),
        checks_saw_edits: run.use_.allow_protected_edits,
        undo_until: None,
        decision: None,
    }
}

/// Why an undo did not happen, in the undo's own words (the apply's
/// conflict message speaks of a copy and of applying).
fn undo_refused_words(e: &ApplyError) -> String {
    match e {
        ApplyError::Conflict { paths } => format!(
            "Not undone: {} changed since the apply; nothing was changed.",
            paths.join(", ")
        ),
        e => format!("Not undone: {e}. Nothing was changed."),
    }
}

fn refusal_words(r: &silas_workspace::RefusalReason) -> String {
    use silas_workspace::RefusalReason as R;
    match r {
        R::SymlinkOutside { target } => format!("a link out of the workspace, to {target}"),
        R::Symlink { target } => format!("a link to {target}; links are not applied"),
        R::TypeChanged => "changed type".into(),
        R::SpecialFile => "a special file".into(),
        R::NotUtf8 => "a name that is not UTF-8".into(),
        R::ControlCharacter => "a name with a control or invisible character".into(),
        R::GitMetadata => "git metadata (a .git file); never written".into(),
        R::VcsMetadata => {
            "version-control metadata (its hooks would run outside the sandbox); never written"
                .into()
        }
        R::CompiledPython => {
            "compiled Python, bytecode or an extension module (no diff shows it); never written"
                .into()
        }
    }
}

impl WorkEngine {
    fn plan_hash_of(item: &WorkItem) -> Result<String, WorkError> {
        projections::plan_hash(item)
            .map_err(|e| WorkError::Encoding(format!("unhashable work item: {e}")))
    }

    /// Whether a change card of the item still waits for the owner (its
    /// copies are kept for it).
    pub(super) fn apply_pending(&self, item_id: &str) -> bool {
        let Ok(all) = self.store.records::<PendingCard>().list() else {
            // Unknown: keep the copies; the next dispatch settles them.
            return true;
        };
        cards::changes_card_for(&all, item_id).is_some_and(|(_, c)| c.phase == ChangesAction::Apply)
    }

    /// A workspace task ended `done`: offer its change set for review, apply
    /// it at once (`apply: direct`), or do nothing (read access, no changes).
    pub(super) fn changes_outcome(
        &self,
        item: &WorkItem,
        scope: &str,
        run: &WorkspaceRun,
        changes: &StoredChanges,
    ) -> Result<ChangesOutcome, WorkError> {
        let nothing = ChangesOutcome {
            card: None,
            note: None,
        };
        if run.use_.access != Access::Write || changes.set.files.is_empty() {
            return Ok(nothing);
        }
        let plan_hash = Self::plan_hash_of(item)?;
        let card = card_for(
            item,
            run,
            &changes.set,
            &changes.sha256,
            &plan_hash,
            ChangesAction::Apply,
        );
        let now = Timestamp::now();
        if run.use_.apply == ApplyMode::Review {
            let ttl = chrono::Duration::minutes(i64::from(self.approvals.default_ttl_minutes()));
            self.audit(
                "workspace_apply_offered",
                json!({"work_item_id": item.id, "workspace": run.use_.name,
                       "files": card.files.len(), "changes_sha256": changes.sha256}),
            )?;
            return Ok(ChangesOutcome {
                card: Some(cards::changes_card(card, scope, now, now.plus(ttl))),
                note: Some("Review the changes and apply them from the card.".into()),
            });
        }
        // `apply: direct`: the plan's own approval (checked again here, not
        // consumed) is the authority, as the plan card said.
        let token = item
            .approval_token
            .as_ref()
            .ok_or_else(|| io("no approval token"))?;
        if let Err(e) = self.approvals.check(token, item, now) {
            return Ok(ChangesOutcome {
                card: None,
                note: Some(format!(
                    "Not applied ({}: {e}); the workspace is untouched.",
                    e.code()
                )),
            });
        }
        match self.apply_now(item, run, &card, &changes.set, &token.token_id, scope) {
            Ok((undo_card, note)) => Ok(ChangesOutcome {
                card: Some(undo_card),
                note: Some(note),
            }),
            Err(refusal) => Ok(ChangesOutcome {
                card: None,
                note: Some(refusal),
            }),
        }
    }

    /// Applies `changes` to the real workspace; returns the undo card and
    /// a sentence, or why nothing was applied.
    fn apply_now(
        &self,
        item: &WorkItem,
        run: &WorkspaceRun,
        card: &ChangesCard,
        changes: &ChangeSet,
        token_id: &str,
        scope: &str,
    ) -> Result<(PendingCard, String), String> {
        let stored = match self.stored_undo(&item.id) {
            Some(u) if u.changes_sha256 == card.changes_sha256 => u,
            _ => {
                let journal_dir = &self.config.journal_dir;
                if let Err(e) = silas_execution::artifacts::create_private_dir(journal_dir) {
                    return Err(format!("Not applied: {e}; the workspace is untouched."));
                }
                let applied = match apply::apply(changes, &run.result(), &run.snapshot, journal_dir)
                {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = self.audit(
                            "workspace_apply_refused",
                            json!({"work_item_id": item.id, "workspace": run.use_.name,
                                       "code": e.code().as_str(), "reason": e.to_string()}),
                        );
                        return Err(format!("Not applied: {e}. The workspace is untouched."));
                    }
                };
                let paths: Vec<String> = changes.files.iter().map(|f| f.path.clone()).collect();
                let commit =
                    run.use_.commit_message.as_deref().and_then(|msg| {
                        match commit::commit(&run.snapshot.source, &paths, msg) {
                            Ok(id) => Some(id),
                            Err(e) => {
                                let _ = self.audit(
                                    "workspace_commit_failed",
                                    json!({"work_item_id": item.id, "reason": e.to_string()}),
                                );
                                None
                            }
                        }
                    });
                let stored = StoredUndo {
                    changes_sha256: card.changes_sha256.clone(),
                    applied_at: Timestamp::now(),
                    undo: applied.undo,
                    commit,
                };
                if let Err(e) = self.store_undo(&item.id, &stored) {
                    return Err(format!("Applied, but the undo record was not kept: {e}"));
                }
                let _ = self.audit(
                    "workspace_applied",
                    json!({"work_item_id": item.id, "workspace": run.use_.name,
                           "path": card.path, "files": paths, "added": card.total_added,
                           "removed": card.total_removed, "token_id": token_id,
                           "journal": applied.id, "commit": stored.commit}),
                );
                stored
            }
        };
        let until = stored.applied_at.plus(chrono::Duration::seconds(
            self.config.undo_window.as_secs() as i64,
        ));
        let mut undo = card.clone();
        undo.phase = ChangesAction::Undo;
        undo.undo_until = Some(until);
        undo.decision = None;
        let mut note = format!(
            "Applied to {} ({}): {} file(s), +{} −{}.",
            card.workspace,
            card.path,
            card.files.len(),
            card.total_added,
            card.total_removed
        );
        if let Some(c) = &stored.commit {
            note.push_str(&format!(" Committed locally as {}.", &c[..c.len().min(12)]));
        }
        note.push_str(&format!(
            " You can undo it from the card for {} min.",
            self.config.undo_window.as_secs().div_ceil(60)
        ));
        let now = Timestamp::now();
        Ok((cards::changes_card(undo, scope, now, until), note))
    }

    fn undo_path(&self, item_id: &str) -> PathBuf {
        self.artifact_dir(item_id).join(UNDO_FILE)
    }

    fn stored_undo(&self, item_id: &str) -> Option<StoredUndo> {
        let text = std::fs::read_to_string(self.undo_path(item_id)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn store_undo(&self, item_id: &str, undo: &StoredUndo) -> Result<(), WorkError> {
        let dir = self.artifact_dir(item_id);
        silas_execution::artifacts::create_private_dir(&dir).map_err(io)?;
        let text =
            serde_json::to_vec_pretty(undo).map_err(|e| WorkError::Encoding(e.to_string()))?;
        let tmp = dir.join(format!("{UNDO_FILE}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| io(format!("cannot keep the undo record: {e}")))?;
        std::fs::rename(&tmp, self.undo_path(item_id))
            .map_err(|e| io(format!("cannot keep the undo record: {e}")))
    }

    /// A `done` workspace item was dispatched: act on its change card's
    /// answer (apply, undo, or drop), re-announce a card still waiting, or
    /// clean up copies nothing waits for any more.
    pub(super) fn settle_changes(
        &self,
        item: WorkItem,
        scope: &str,
    ) -> Result<WorkItemResult, WorkError> {
        let all = self.store.records::<PendingCard>().list()?;
        let Some((pending, card)) = cards::changes_card_for(&all, &item.id) else {
            self.release_workspace(&item.id, item.status);
            return Ok(Self::result(&item, "already done".into(), None));
        };
        let (pending, card) = (pending.clone(), card.clone());
        let scope = if pending.scope_id.is_empty() {
            scope.to_string()
        } else {
            pending.scope_id.clone()
        };
        let Some(decision) = card.decision.clone() else {
            let s = match card.phase {
                ChangesAction::Apply => "changes wait for your review",
                ChangesAction::Undo => "applied; undo is still possible",
            };
            self.publish(&item.id, &scope, WorkStatusKind::Done, s.to_string(), None);
            return Ok(Self::result(&item, s.into(), None));
        };
        let close = |note: String| -> Result<WorkItemResult, WorkError> {
            self.store
                .work_items()
                .save_with_card(&item, None, Some(&pending.request_id))?;
            self.release_workspace(&item.id, item.status);
            self.publish(&item.id, &scope, WorkStatusKind::Done, note.clone(), None);
            Ok(Self::result(&item, note, None))
        };
        let refused = match &decision {
            ToolDecision::Declined { reason } => Some(reason.clone()),
            ToolDecision::Approved { token } => self.check_changes_token(&item, &card, token),
        };
        if let Some(reason) = refused {
            let (event, note) = match card.phase {
                ChangesAction::Apply => (
                    "workspace_apply_declined",
                    format!(
                        "Not applied ({reason}): workspace {} is untouched.",
                        card.workspace
                    ),
                ),
                ChangesAction::Undo => (
                    "workspace_undo_declined",
                    format!("Kept the changes to workspace {}.", card.workspace),
                ),
            };
            self.audit(
                event,
                json!({"work_item_id": item.id, "workspace": card.workspace, "reason": reason}),
            )?;
            return close(note);
        }
        let token_id = match &decision {
            ToolDecision::Approved { token } => token.token_id.clone(),
            ToolDecision::Declined { .. } => String::new(),
        };
        match card.phase {
            ChangesAction::Apply => {
                let applied = self.kept_run(&item).ok_or_else(|| {
                    "the task's copies are gone (the daemon was reset?)".to_string()
                });
                let outcome = applied.and_then(|run| {
                    let set = self.load_changes(&item.id, &card.changes_sha256)?;
                    self.apply_now(&item, &run, &card, &set, &token_id, &scope)
                });
                match outcome {
                    Ok((undo_card, note)) => {
                        self.store.work_items().save_with_card(
                            &item,
                            Some(&undo_card),
                            Some(&pending.request_id),
                        )?;
                        self.release_workspace(&item.id, item.status);
                        // Done again: the Stream delivers the undo card with it.
                        self.publish(&item.id, &scope, WorkStatusKind::Done, note.clone(), None);
                        Ok(Self::result(&item, note, None))
                    }
                    Err(note) => close(note),
                }
            }
            ChangesAction::Undo => {
                let mut retry = false;
                let note = match self.stored_undo(&item.id) {
                    None => "Cannot undo: the undo record is gone.".to_string(),
                    Some(u) => {
                        match apply::undo(&u.undo, Path::new(&card.path), &self.config.journal_dir)
                        {
                            Ok(_) => {
                                self.audit(
                                    "workspace_undone",
                                    json!({"work_item_id": item.id, "workspace": card.workspace,
                                       "path": card.path, "files": u.undo.files.len(),
                                       "token_id": token_id}),
                                )?;
                                let _ = std::fs::remove_file(self.undo_path(&item.id));
                                let mut n = format!(
                                    "Undone: workspace {} is as it was before the apply ({} file(s) restored).",
                                    card.workspace,
                                    u.undo.files.len()
                                );
                                if u.commit.is_some() {
                                    n.push_str(" The local commit stays in the history; revert it with git if you want it gone.");
                                }
                                n
                            }
                            Err(e) => {
                                self.audit(
                                    "workspace_undo_refused",
                                    json!({"work_item_id": item.id, "workspace": card.workspace,
                                       "code": e.code().as_str(), "reason": e.to_string()}),
                                )?;
                                // Files edited since the apply: the owner may
                                // put them back and undo again while the
                                // window is open (the record is kept).
                                retry = matches!(e, ApplyError::Conflict { .. });
                                undo_refused_words(&e)
                            }
                        }
                    }
                };
                match card
                    .undo_until
                    .filter(|until| retry && *until > Timestamp::now())
                {
                    Some(until) => {
                        let mut again = card.clone();
                        again.decision = None;
                        let now = Timestamp::now();
                        let mut fresh = cards::changes_card(again, &scope, now, until);
                        // A new id: the answered one is remembered as answered.
                        fresh.request_id = format!("{}-{}", fresh.request_id, now.as_micros());
                        self.store.work_items().save_with_card(
                            &item,
                            Some(&fresh),
                            Some(&pending.request_id),
                        )?;
                        let note = format!(
                            "{note} Put them back as the apply left them and undo again from the card, until {until}."
                        );
                        // Done again: the Stream delivers the fresh card with it.
                        self.publish(&item.id, &scope, WorkStatusKind::Done, note.clone(), None);
                        Ok(Self::result(&item, note, None))
                    }
                    None => close(note),
                }
            }
        }
    }

    /// `None` when the recorded token authorises exactly this card's action
    /// on exactly these bytes under the item's current plan; else why not.
    fn check_changes_token(
        &self,
        item: &WorkItem,
        card: &ChangesCard,
        token: &silas_core::model::approval::ApprovalToken,
    ) -> Option<String> {
        let plan_hash = match Self::plan_hash_of(item) {
            Ok(h) => h,
            Err(e) => return Some(e.to_string()),
        };
        if plan_hash != card.plan_hash {
            return Some("the task changed since the card was made".into());
        }
        let subject = ChangesApproval {
            work_item_id: item.id.clone(),
            plan_hash,
            action: card.phase,
            changes_sha256: card.changes_sha256.clone(),
        };
        self.approvals
            .check_subject(token, Subject::Changes(&subject), Timestamp::now())
            .err()
            .map(|e| format!("{}: approval not valid: {e}", e.code()))
    }

    /// The stored change set, only if it still hashes to what was approved.
    fn load_changes(&self, item_id: &str, sha256: &str) -> Result<ChangeSet, String> {
        let bytes = std::fs::read(self.artifact_dir(item_id).join(CHANGES_FILE))
            .map_err(|e| format!("Not applied: the change set is gone ({e})."))?;
        if silas_core::canonical::sha256_hex(&bytes) != sha256 {
            return Err(
                "Not applied: the stored change set is not the one you approved.".to_string(),
            );
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("Not applied: {e}"))
    }

    /// At start: finish or roll back applies a crash interrupted, in every
    /// registered workspace, and drop journals past the undo window.
    pub fn recover_applies(&self) {
        let dir = &self.config.journal_dir;
        if !dir.is_dir() {
            return;
        }
        let workspaces = match self
            .store
            .records::<silas_core::model::workspace::Workspace>()
            .list()
        {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("cannot list workspaces for apply recovery: {e}");
                return;
            }
        };
        for ws in workspaces {
            match apply::recover(dir, Path::new(&ws.path)) {
                Ok(r) if r.finished.is_empty() && r.rolled_back.is_empty() => {}
                Ok(r) => {
                    let _ = self.audit(
                        "workspace_apply_recovered",
                        json!({"workspace": ws.name, "finished": r.finished,
                               "rolled_back": r.rolled_back}),
                    );
                }
                Err(e) => {
                    tracing::error!(workspace = %ws.name, code = %e.code(), "apply recovery failed: {e}");
                    let _ = self.audit(
                        "workspace_apply_recovery_failed",
                        json!({"workspace": ws.name, "code": e.code().as_str(),
                               "reason": e.to_string()}),
                    );
                }
            }
        }
        // Backups are kept a day past the undo window, then pruned.
        let keep = self.config.undo_window + std::time::Duration::from_secs(24 * 3600);
        if let Err(e) = apply::prune(dir, keep) {
            tracing::warn!("cannot prune apply journals: {e}");
        }
    }

    /// Called by `run_task` for an item already `done`.
    pub(super) fn done_item(
        &self,
        item: WorkItem,
        scope: &str,
    ) -> Result<WorkItemResult, WorkError> {
        if item.status == WorkItemStatus::Done && item.workspace.is_some() {
            return self.settle_changes(item, scope);
        }
        let s = format!("already {}", item.status.as_str());
        Ok(Self::result(&item, s, None))
    }
}
