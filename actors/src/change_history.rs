//! What became of a work item's change set, for `silas work show`: the
//! apply, decline, refusal and undo steps its workspace went through, read
//! back from the audit log (the only place they are recorded) — newest
//! [`LOOKBACK`] entries, so an old item may show none.

pub use silas_core::model::workspace::{ChangeEvent, ChangeStep};
use silas_storage::{AuditEntry, Store, StoreError};

/// How far back the audit is read.
pub const LOOKBACK: usize = 20_000;

/// The steps of `work_item_id`'s change set in `entries`, oldest first.
pub fn steps(entries: &[AuditEntry], work_item_id: &str) -> Vec<ChangeStep> {
    entries
        .iter()
        .filter(|e| e.data.get("work_item_id").and_then(|v| v.as_str()) == Some(work_item_id))
        .filter_map(|e| {
            let text = |k: &str| {
                e.data
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let files = e
                .data
                .get("files")
                .map(|v| v.as_u64().or_else(|| v.as_array().map(|a| a.len() as u64)))
                .unwrap_or_default()
                .unwrap_or_default();
            let what = match e.event.as_str() {
                "workspace_apply_offered" => ChangeEvent::Offered { files },
                "workspace_applied" => ChangeEvent::Applied { files },
                "workspace_apply_declined" => ChangeEvent::ApplyDeclined,
                "workspace_apply_refused" => ChangeEvent::ApplyRefused {
                    reason: text("reason"),
                },
                "workspace_undone" => ChangeEvent::Undone { files },
                "workspace_undo_declined" => ChangeEvent::UndoDeclined,
                "workspace_undo_refused" => ChangeEvent::UndoRefused {
                    reason: text("reason"),
                },
                _ => return None,
            };
            Some(ChangeStep {
                at: e.timestamp,
                workspace: text("workspace"),
                what,
            })
        })
        .collect()
}

/// [`steps`] over the store's newest [`LOOKBACK`] audit entries.
pub fn history(store: &Store, work_item_id: &str) -> Result<Vec<ChangeStep>, StoreError> {
    Ok(steps(&store.audit().tail(LOOKBACK)?, work_item_id))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_items_steps_in_order_and_no_other_items() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let log = |event: &str, data: serde_json::Value| {
            let serde_json::Value::Object(d) = data else {
                unreachable!()
            };
            store.audit().log(event, d).unwrap();
        };
        log(
            "workspace_apply_offered",
            json!({"work_item_id": "w1", "workspace": "site", "files": 2}),
        );
        log(
            "workspace_applied",
            json!({"work_item_id": "w2", "workspace": "other", "files": ["a"]}),
        );
        log(
            "workspace_applied",
            json!({"work_item_id": "w1", "workspace": "site", "files": ["a", "b"]}),
        );
        log("turn_completed", json!({"work_item_id": "w1"}));
        log(
            "workspace_undo_refused",
            json!({"work_item_id": "w1", "workspace": "site",
                   "reason": "calc.py changed since the apply"}),
        );
        log(
            "workspace_undone",
            json!({"work_item_id": "w1", "workspace": "site", "files": 2}),
        );
        let h = history(&store, "w1").unwrap();
        let what: Vec<_> = h.iter().map(|s| s.what.clone()).collect();
        assert_eq!(
            what,
            vec![
                ChangeEvent::Offered { files: 2 },
                ChangeEvent::Applied { files: 2 },
                ChangeEvent::UndoRefused {
                    reason: "calc.py changed since the apply".into()
                },
                ChangeEvent::Undone { files: 2 },
            ]
        );
        assert!(h[1].to_string().starts_with("applied 2 file(s) to site — "));
        assert!(history(&store, "w3").unwrap().is_empty());
    }
}
