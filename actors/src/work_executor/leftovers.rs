//! What runs leave in the sandbox work base (`{data}/work`) and when it goes.
//!
//! A run writes two kinds of entries there: a workspace task's copies,
//! `ws-{item_id}` (see [`super::workspace`]), and one directory per tool
//! call, `{item_id}-a{attempt}-{seq}-{call_id}` (its outputs, and the HOME of
//! a call in a project). An ordinary end removes them; a run that is
//! cancelled, crashes past its restarts, ends on an engine error or dies with
//! the daemon does not get there. [`WorkEngine::sweep_work_base`] removes
//! them afterwards: for one item when its run is booked out or cancelled, and
//! for every item when the executor starts. An entry is kept while any item
//! it may belong to still needs it (not ended, or a change card waiting to
//! be applied from the copies), and whatever belongs to no known item is left
//! alone (connections, MCP servers and skill dry runs keep their own).

use std::collections::BTreeSet;

use silas_core::model::work::WorkItemStatus;

use super::engine::WorkEngine;

/// The work items a work-base entry may belong to. Item ids are chosen by
/// the model and may themselves look like `x-a1-2-y` or start with `ws-`,
/// so every reading is a candidate.
pub fn entry_owners(name: &str) -> Vec<&str> {
    let mut owners = Vec::new();
    if let Some(id) = name.strip_prefix("ws-").filter(|id| !id.is_empty()) {
        owners.push(id);
    }
    let bytes = name.as_bytes();
    for (i, _) in name.match_indices("-a") {
        if i > 0 && is_call_suffix(&bytes[i + 2..]) {
            owners.push(&name[..i]);
        }
    }
    owners
}

/// `{attempt}-{seq}-…` after an execution dir's `-a`.
fn is_call_suffix(rest: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let a = digits(rest);
    if a == 0 || rest.get(a) != Some(&b'-') {
        return false;
    }
    let rest = &rest[a + 1..];
    let s = digits(rest);
    s > 0 && rest.get(s) == Some(&b'-')
}

impl WorkEngine {
    /// Whether an item's run directories are still needed: its run may go
    /// on (not ended), or a change card waits to be applied from its copies.
    pub(super) fn keeps_run_dirs(&self, item_id: &str, status: WorkItemStatus) -> bool {
        use WorkItemStatus as S;
        match status {
            S::Done => self.apply_pending(item_id),
            S::Failed | S::Stuck => false,
            _ => true,
        }
    }

    /// Removes the work base's entries of ended items (`only`: of these
    /// items alone). Returns how many entries went.
    pub(crate) fn sweep_work_base(&self, only: Option<&BTreeSet<String>>) -> usize {
        let base = self.registry.work_base();
        let Ok(entries) = std::fs::read_dir(base) else {
            return 0;
        };
        let items = self.store.work_items();
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let owners = entry_owners(name);
            if only.is_some_and(|only| !owners.iter().any(|o| only.contains(*o))) {
                continue;
            }
            let mut ended = false;
            let mut needed = false;
            for owner in owners {
                match items.get(owner) {
                    Ok(Some(item)) if self.keeps_run_dirs(&item.id, item.status) => needed = true,
                    Ok(Some(_)) => ended = true,
                    Ok(None) => {}
                    // Unknown: kept for the next sweep.
                    Err(_) => needed = true,
                }
            }
            if ended && !needed {
                silas_execution::cleanup::remove_tree(&entry.path());
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed what ended runs left in the work dir");
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::entry_owners;

    #[test]
    fn workspace_copies_and_execution_dirs_name_their_item() {
        assert_eq!(entry_owners("ws-fix-login"), ["fix-login"]);
        assert_eq!(entry_owners("fix-login-a1-0-call_7"), ["fix-login"]);
        assert_eq!(entry_owners("t-a12-345-"), ["t"]);
    }

    #[test]
    fn ambiguous_names_give_every_reading() {
        // An item named `x-a1-2-y` and its own call dir; an item named
        // `ws-x` and its call dir.
        assert_eq!(entry_owners("x-a1-2-y-a3-4-c"), ["x", "x-a1-2-y"]);
        assert_eq!(entry_owners("ws-x-a1-0-c"), ["x-a1-0-c", "ws-x"]);
    }

    #[test]
    fn other_entries_belong_to_no_item() {
        for name in [
            "ws-",
            "conn-github-3",
            "skill-dry-tok-1",
            "mcp-files-2",
            "-a1-2-c",
            "x-a-2-c",
            "x-a1-c",
            "x-a1-2",
            "x-ab1-2-c",
        ] {
            assert!(entry_owners(name).is_empty(), "{name}");
        }
    }
}
