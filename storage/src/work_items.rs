//! `WorkItemStore` (spec §4.13): durable work items with secondary indexes on
//! status, parent and follow-up-of. A record and its index entries always
//! change in one write transaction, so an index never points at a stale
//! status. The approval token is stored inside the work item as JSON,
//! including its mutable `executions_used`/`execution_nonces` and its base64
//! signature.

use std::sync::Arc;

use redb::{Database, MultimapTable, ReadableDatabase, ReadableTable, WriteTransaction};
use silas_core::model::work::{BudgetUsed, WorkItem, WorkItemStatus};

use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::records::{Keyed, PendingCard};
use crate::schema::{
    PENDING_CARDS, WORK_ITEMS, WORK_ITEMS_BY_FOLLOW_UP, WORK_ITEMS_BY_PARENT, WORK_ITEMS_BY_STATUS,
};

const TABLE: &str = "work_items";

#[derive(Clone)]
pub struct WorkItemStore {
    db: Arc<Database>,
}

fn index_remove(t: &mut MultimapTable<&str, &str>, key: Option<&str>, id: &str) -> StoreResult<()> {
    if let Some(k) = key {
        t.remove(k, id)?;
    }
    Ok(())
}

fn index_insert(t: &mut MultimapTable<&str, &str>, key: Option<&str>, id: &str) -> StoreResult<()> {
    if let Some(k) = key {
        t.insert(k, id)?;
    }
    Ok(())
}

/// Write `item`, replacing `old`'s index entries, inside `txn`.
pub(crate) fn put_in(
    txn: &WriteTransaction,
    item: &WorkItem,
    old: Option<&WorkItem>,
) -> StoreResult<()> {
    let id = item.id.as_str();
    {
        let mut by_status = txn.open_multimap_table(WORK_ITEMS_BY_STATUS)?;
        let mut by_parent = txn.open_multimap_table(WORK_ITEMS_BY_PARENT)?;
        let mut by_follow = txn.open_multimap_table(WORK_ITEMS_BY_FOLLOW_UP)?;
        if let Some(old) = old {
            index_remove(&mut by_status, Some(old.status.as_str()), id)?;
            index_remove(&mut by_parent, old.parent.as_deref(), id)?;
            index_remove(&mut by_follow, old.follow_up_of.as_deref(), id)?;
        }
        index_insert(&mut by_status, Some(item.status.as_str()), id)?;
        index_insert(&mut by_parent, item.parent.as_deref(), id)?;
        index_insert(&mut by_follow, item.follow_up_of.as_deref(), id)?;
    }
    let mut table = txn.open_table(WORK_ITEMS)?;
    table.insert(id, codec::encode(TABLE, item)?.as_slice())?;
    Ok(())
}

pub(crate) fn get_in(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> StoreResult<Option<WorkItem>> {
    match table.get(id)? {
        Some(v) => Ok(Some(codec::decode(TABLE, v.value())?)),
        None => Ok(None),
    }
}

impl WorkItemStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        WorkItemStore { db }
    }

    /// Persist the current state of a work item (insert or replace).
    pub fn save(&self, item: &WorkItem) -> StoreResult<()> {
        if item.id.is_empty() {
            return Err(StoreError::Invalid("work item id must not be empty".into()));
        }
        let txn = self.db.begin_write()?;
        let old = get_in(&txn.open_table(WORK_ITEMS)?, &item.id)?;
        put_in(&txn, item, old.as_ref())?;
        txn.commit()?;
        Ok(())
    }

    /// Persist several work items atomically (e.g. a project and its tasks).
    pub fn save_all(&self, items: &[WorkItem]) -> StoreResult<()> {
        let txn = self.db.begin_write()?;
        for item in items {
            let old = get_in(&txn.open_table(WORK_ITEMS)?, &item.id)?;
            put_in(&txn, item, old.as_ref())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Persist a work item together with a card change in one transaction:
    /// `card` is written (the question the item now waits on) and/or the
    /// card `close` is removed. A crash keeps either the item's old state and
    /// old cards, or the new state with its card — never a waiting item
    /// without its card.
    pub fn save_with_card(
        &self,
        item: &WorkItem,
        card: Option<&PendingCard>,
        close: Option<&str>,
    ) -> StoreResult<()> {
        if item.id.is_empty() {
            return Err(StoreError::Invalid("work item id must not be empty".into()));
        }
        if card.is_some_and(|c| c.key().is_empty()) {
            return Err(StoreError::Invalid(
                "pending card key must not be empty".into(),
            ));
        }
        let txn = self.db.begin_write()?;
        let old = get_in(&txn.open_table(WORK_ITEMS)?, &item.id)?;
        put_in(&txn, item, old.as_ref())?;
        {
            let mut cards = txn.open_table(PENDING_CARDS)?;
            if let Some(key) = close {
                cards.remove(key)?;
            }
            if let Some(c) = card {
                cards.insert(c.key(), codec::encode(PendingCard::NAME, c)?.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    pub fn get(&self, id: &str) -> StoreResult<Option<WorkItem>> {
        let txn = self.db.begin_read()?;
        get_in(&txn.open_table(WORK_ITEMS)?, id)
    }

    fn list_by(
        &self,
        index: redb::MultimapTableDefinition<&str, &str>,
        key: &str,
    ) -> StoreResult<Vec<WorkItem>> {
        let txn = self.db.begin_read()?;
        let idx = txn.open_multimap_table(index)?;
        let table = txn.open_table(WORK_ITEMS)?;
        let mut out = Vec::new();
        for id in idx.get(key)? {
            let id = id?;
            match get_in(&table, id.value())? {
                Some(item) => out.push(item),
                None => {
                    return Err(StoreError::Corrupt(format!(
                        "index entry {key:?} points at missing work item {:?}",
                        id.value()
                    )));
                }
            }
        }
        Ok(out)
    }

    pub fn list_by_status(&self, status: WorkItemStatus) -> StoreResult<Vec<WorkItem>> {
        self.list_by(WORK_ITEMS_BY_STATUS, status.as_str())
    }

    pub fn list_by_parent(&self, parent_id: &str) -> StoreResult<Vec<WorkItem>> {
        self.list_by(WORK_ITEMS_BY_PARENT, parent_id)
    }

    pub fn list_by_follow_up(&self, prior_id: &str) -> StoreResult<Vec<WorkItem>> {
        self.list_by(WORK_ITEMS_BY_FOLLOW_UP, prior_id)
    }

    /// Update status and budget atomically (§4.13).
    pub fn update_status(
        &self,
        id: &str,
        status: WorkItemStatus,
        budget_used: &BudgetUsed,
    ) -> StoreResult<WorkItem> {
        self.update(id, |item| {
            item.status = status;
            item.budget_used = budget_used.clone();
            Ok(())
        })
    }

    /// Read-modify-write one work item in a single transaction. `f` may refuse
    /// the change by returning an error, in which case nothing is written.
    pub fn update(
        &self,
        id: &str,
        f: impl FnOnce(&mut WorkItem) -> StoreResult<()>,
    ) -> StoreResult<WorkItem> {
        let txn = self.db.begin_write()?;
        let old =
            get_in(&txn.open_table(WORK_ITEMS)?, id)?.ok_or_else(|| StoreError::NotFound {
                what: "work item",
                id: id.to_string(),
            })?;
        let mut new = old.clone();
        f(&mut new)?;
        if new.id != old.id {
            return Err(StoreError::Invalid(
                "an update may not change the work item id".into(),
            ));
        }
        put_in(&txn, &new, Some(&old))?;
        txn.commit()?;
        Ok(new)
    }
}
