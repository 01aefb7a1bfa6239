//! v3 → v4: pending cards become typed ([`silas_core::cards::CardPayload`]).
//!
//! The on-disk layout (`{card_type, payload}`) is unchanged, but a typed plan
//! card carries the `plan` view its renderer shows, which plan cards written
//! before v4 lack. Those get the view built from their stored work item (the
//! item an approval binds, so the view is what the hash is checked against).
//! A record that still does not decode (unknown type, missing item, mangled
//! payload) is dropped and counted: a card nobody can render or answer would
//! otherwise fail every listing of the table.

use redb::{ReadableTable, WriteTransaction};
use serde_json::Value;
use silas_core::cards::PLAN_CARD;
use silas_core::model::work::WorkItem;
use silas_core::risk::PlanView;

use crate::codec;
use crate::error::StoreResult;
use crate::records::PendingCard;
use crate::schema::{PENDING_CARDS, WORK_ITEMS};

/// What the migration did, for the log line (and tests).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CardMigration {
    pub upgraded: usize,
    pub dropped: usize,
}

pub(crate) fn v3_to_v4(txn: &WriteTransaction) -> StoreResult<()> {
    let report = migrate(txn)?;
    if report.dropped > 0 {
        tracing::warn!(
            upgraded = report.upgraded,
            dropped = report.dropped,
            "schema v4: dropped pending cards that no longer decode"
        );
    } else if report.upgraded > 0 {
        tracing::info!(upgraded = report.upgraded, "schema v4: plan cards typed");
    }
    Ok(())
}

fn migrate(txn: &WriteTransaction) -> StoreResult<CardMigration> {
    let mut raw = Vec::new();
    {
        let table = txn.open_table(PENDING_CARDS)?;
        for row in table.iter()? {
            let (k, v) = row?;
            raw.push((k.value().to_string(), v.value().to_vec()));
        }
    }
    let mut report = CardMigration::default();
    let work_items = txn.open_table(WORK_ITEMS)?;
    let mut cards = txn.open_table(PENDING_CARDS)?;
    for (key, bytes) in raw {
        if codec::decode::<PendingCard>("pending_cards", &bytes).is_ok() {
            continue;
        }
        let upgraded = codec::decode::<Value>("pending_cards", &bytes)
            .ok()
            .and_then(|mut v| {
                fill_plan(&mut v, |id| {
                    let bytes = work_items.get(id).ok()??.value().to_vec();
                    codec::decode::<WorkItem>("work_items", &bytes).ok()
                })?;
                serde_json::from_value::<PendingCard>(v).ok()
            });
        match upgraded {
            Some(card) => {
                cards.insert(
                    key.as_str(),
                    codec::encode("pending_cards", &card)?.as_slice(),
                )?;
                report.upgraded += 1;
            }
            None => {
                cards.remove(key.as_str())?;
                report.dropped += 1;
            }
        }
    }
    Ok(report)
}

/// Adds `plan` and `verify` to a pre-v4 plan card from its work item.
/// `None` when the record is no plan card missing its view, or the item is gone.
fn fill_plan(record: &mut Value, item_of: impl Fn(&str) -> Option<WorkItem>) -> Option<()> {
    if record.get("card_type")?.as_str()? != PLAN_CARD {
        return None;
    }
    let payload = record.get_mut("payload")?.as_object_mut()?;
    if payload.contains_key("plan") {
        return None;
    }
    let item = item_of(payload.get("work_item_id")?.as_str()?)?;
    let plan = serde_json::to_value(PlanView::of(&item)).ok()?;
    let verify = serde_json::to_value(&item.verify).ok()?;
    payload.insert("plan".into(), plan);
    payload.insert("verify".into(), verify);
    Some(())
}
