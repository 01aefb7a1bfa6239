//! `TelegramUpdates`: the durable record of every Bot API update the Telegram
//! channel received (issue #14 item 2), and the chats it has refused.
//!
//! An update is recorded ([`TelegramUpdates::record`]) before it is handled;
//! the `getUpdates` offset (kept in `counters` under [`OFFSET_COUNTER`])
//! advances only when an update is marked handled, and then only past a
//! contiguous run of handled records, so an update is never confirmed to
//! Telegram while it (or an earlier one) is still pending. A crash therefore
//! loses nothing: on restart the pending records are handled again, and an
//! update Telegram re-sends is recognised by `update_id` and not recorded twice.
//! Each handling attempt is counted before the handler runs, so the handler
//! can tell a first delivery from a redelivery after a crash (its effects are
//! keyed by `update_id`).
//!
//! The payload is the update's JSON as the channel typed it: this crate does
//! not know the Bot API types (layering), the channel decodes it.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use silas_core::Timestamp;

use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::schema::{COUNTERS, TELEGRAM_REFUSED_CHATS, TELEGRAM_UPDATES};

const TABLE: &str = "telegram_updates";
/// The next `getUpdates` offset (highest contiguously handled id + 1).
pub const OFFSET_COUNTER: &str = "telegram_offset";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateState {
    Pending,
    Handled,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    pub update_id: u64,
    pub state: UpdateState,
    /// The update as received (JSON), decoded by the channel; emptied once
    /// handled (message text is not kept longer than needed).
    pub payload: String,
    pub received_at: Timestamp,
    /// Handling attempts started, crashed ones included.
    pub attempts: u32,
    pub handled_at: Option<Timestamp>,
}

/// What [`TelegramUpdates::record`] did with an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// First time seen: stored as pending.
    New,
    /// Already stored and still pending (will be handled from the store).
    AlreadyPending,
    /// Already handled: a re-sent update, to be ignored.
    AlreadyHandled,
    /// Below the confirmed offset (handled and pruned): ignore.
    BelowOffset,
    /// Below the confirmed offset and unknown, although `getUpdates` was
    /// asked for nothing below it: Telegram started a new sequence (after a
    /// week without updates the next id is chosen at random). Stored as
    /// pending, and the offset now follows the new sequence.
    NewSequence,
}

#[derive(Clone)]
pub struct TelegramUpdates {
    db: Arc<Database>,
}

fn get_in(txn: &WriteTransaction, id: u64) -> StoreResult<Option<UpdateRecord>> {
    let table = txn.open_table(TELEGRAM_UPDATES)?;
    let found = table.get(id)?;
    found.map(|v| codec::decode(TABLE, v.value())).transpose()
}

fn put_in(txn: &WriteTransaction, r: &UpdateRecord) -> StoreResult<()> {
    txn.open_table(TELEGRAM_UPDATES)?
        .insert(r.update_id, codec::encode(TABLE, r)?.as_slice())?;
    Ok(())
}

fn offset_in(txn: &WriteTransaction) -> StoreResult<u64> {
    Ok(txn
        .open_table(COUNTERS)?
        .get(OFFSET_COUNTER)?
        .map(|v| v.value())
        .unwrap_or(0))
}

impl TelegramUpdates {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        TelegramUpdates { db }
    }

    /// The offset to pass to the next `getUpdates` (0: none confirmed yet).
    pub fn offset(&self) -> StoreResult<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn
            .open_table(COUNTERS)?
            .get(OFFSET_COUNTER)?
            .map(|v| v.value())
            .unwrap_or(0))
    }

    /// Durably record a received update as pending, unless it is known.
    /// `asked_from`: the offset `getUpdates` was called with — an unknown
    /// update below it starts a new sequence (see [`Recorded::NewSequence`]);
    /// `None` (not from a poll) keeps such an update out as before.
    pub fn record(
        &self,
        update_id: u64,
        payload: &str,
        now: Timestamp,
        asked_from: Option<u64>,
    ) -> StoreResult<Recorded> {
        let txn = self.db.begin_write()?;
        let offset = offset_in(&txn)?;
        let below = update_id < offset;
        let outcome = match get_in(&txn, update_id)? {
            Some(r) if r.state == UpdateState::Handled => Recorded::AlreadyHandled,
            Some(_) => Recorded::AlreadyPending,
            None if below && asked_from.is_none_or(|a| update_id >= a) => Recorded::BelowOffset,
            None => {
                if below {
                    // The handled records below the old offset only kept
                    // re-sends of the old sequence out; the new one starts
                    // here, and the offset must follow it (or nothing past
                    // this update would ever be confirmed).
                    let mut t = txn.open_table(TELEGRAM_UPDATES)?;
                    let mut old = Vec::new();
                    for row in t.range(..offset)? {
                        old.push(row?.0.value());
                    }
                    for id in old {
                        t.remove(id)?;
                    }
                    drop(t);
                    txn.open_table(COUNTERS)?
                        .insert(OFFSET_COUNTER, update_id)?;
                }
                put_in(
                    &txn,
                    &UpdateRecord {
                        update_id,
                        state: UpdateState::Pending,
                        payload: payload.to_string(),
                        received_at: now,
                        attempts: 0,
                        handled_at: None,
                    },
                )?;
                if below {
                    Recorded::NewSequence
                } else {
                    Recorded::New
                }
            }
        };
        if matches!(outcome, Recorded::New | Recorded::NewSequence) {
            txn.commit()?;
        }
        Ok(outcome)
    }

    /// Take back the attempt [`Self::begin_attempt`] counted when the
    /// handler did nothing and asked to be called again later (the queue was
    /// full): waiting is not failing, and must not make the update look
    /// poisoned.
    pub fn undo_attempt(&self, update_id: u64) -> StoreResult<()> {
        let txn = self.db.begin_write()?;
        if let Some(mut r) = get_in(&txn, update_id)? {
            r.attempts = r.attempts.saturating_sub(1);
            put_in(&txn, &r)?;
        }
        txn.commit()?;
        Ok(())
    }

    pub fn get(&self, update_id: u64) -> StoreResult<Option<UpdateRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TELEGRAM_UPDATES)?;
        let found = table.get(update_id)?;
        found.map(|v| codec::decode(TABLE, v.value())).transpose()
    }

    /// Every pending update, lowest `update_id` first (handling order).
    pub fn pending(&self) -> StoreResult<Vec<UpdateRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TELEGRAM_UPDATES)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            let r: UpdateRecord = codec::decode(TABLE, v.value())?;
            if r.state == UpdateState::Pending {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Count a handling attempt (committed before the handler runs) and
    /// return the record with the new count.
    pub fn begin_attempt(&self, update_id: u64) -> StoreResult<UpdateRecord> {
        let txn = self.db.begin_write()?;
        let mut r = get_in(&txn, update_id)?.ok_or_else(|| not_found(update_id))?;
        r.attempts = r.attempts.saturating_add(1);
        put_in(&txn, &r)?;
        txn.commit()?;
        Ok(r)
    }

    /// Mark an update handled and advance the offset past every contiguous
    /// handled record from the current offset on. Returns the new offset.
    pub fn mark_handled(&self, update_id: u64, now: Timestamp) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let mut r = get_in(&txn, update_id)?.ok_or_else(|| not_found(update_id))?;
        if r.state != UpdateState::Handled {
            r.state = UpdateState::Handled;
            r.handled_at = Some(now);
            // The message text has gone where the handler put it; the record
            // only needs its id and state for de-duplication.
            r.payload.clear();
            put_in(&txn, &r)?;
        }
        let offset = {
            let table = txn.open_table(TELEGRAM_UPDATES)?;
            let mut next = offset_in(&txn)?;
            for row in table.range(next..)? {
                let (k, v) = row?;
                let rec: UpdateRecord = codec::decode(TABLE, v.value())?;
                if rec.state != UpdateState::Handled {
                    break;
                }
                // Telegram ids may skip numbers: the offset follows the
                // handled records, not a dense counter.
                next = k.value().saturating_add(1);
            }
            next
        };
        txn.open_table(COUNTERS)?.insert(OFFSET_COUNTER, offset)?;
        txn.commit()?;
        Ok(offset)
    }

    /// Drop handled records below the offset handled before `older_than`
    /// (the offset itself keeps them from being recorded again).
    pub fn prune_handled(&self, older_than: Timestamp) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let offset = offset_in(&txn)?;
        let removed = {
            let mut t = txn.open_table(TELEGRAM_UPDATES)?;
            let mut doomed = Vec::new();
            for row in t.range(..offset)? {
                let (k, v) = row?;
                let rec: UpdateRecord = codec::decode(TABLE, v.value())?;
                if rec.handled_at.is_some_and(|at| at < older_than) {
                    doomed.push(k.value());
                }
            }
            for id in &doomed {
                t.remove(*id)?;
            }
            doomed.len() as u64
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Record that `chat_id` got its one refusal; `false` if it already had
    /// one (so a stranger is answered once, across restarts).
    pub fn note_refused(&self, chat_id: i64, now: Timestamp) -> StoreResult<bool> {
        let txn = self.db.begin_write()?;
        let fresh = {
            let mut t = txn.open_table(TELEGRAM_REFUSED_CHATS)?;
            let exists = t.get(chat_id)?.is_some();
            if !exists {
                t.insert(chat_id, now.as_micros())?;
            }
            !exists
        };
        if fresh {
            txn.commit()?;
        }
        Ok(fresh)
    }
}

fn not_found(update_id: u64) -> StoreError {
    StoreError::NotFound {
        what: "telegram update",
        id: update_id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open_in(dir.path()).unwrap();
        (dir, s)
    }

    #[test]
    fn offset_advances_only_past_contiguous_handled_updates() {
        let (_d, s) = store();
        let u = s.telegram_updates();
        let now = Timestamp::now();
        for id in [10, 11, 13] {
            assert_eq!(u.record(id, "{}", now, None).unwrap(), Recorded::New);
        }
        assert_eq!(u.offset().unwrap(), 0);
        // 11 handled before 10: nothing may be confirmed yet.
        assert_eq!(u.mark_handled(11, now).unwrap(), 0);
        assert_eq!(u.mark_handled(10, now).unwrap(), 12);
        // Ids need not be dense: 13 follows 11.
        assert_eq!(u.mark_handled(13, now).unwrap(), 14);
        assert!(u.pending().unwrap().is_empty());
    }

    #[test]
    fn duplicates_are_recognised_by_update_id() {
        let (_d, s) = store();
        let u = s.telegram_updates();
        let now = Timestamp::now();
        assert_eq!(u.record(5, "{\"a\":1}", now, None).unwrap(), Recorded::New);
        assert_eq!(
            u.record(5, "{\"a\":2}", now, None).unwrap(),
            Recorded::AlreadyPending
        );
        // The first payload is kept while pending, dropped once handled.
        assert_eq!(u.get(5).unwrap().unwrap().payload, "{\"a\":1}");
        // 6 handled while 5 is pending: above the offset, still known.
        assert_eq!(u.record(6, "{}", now, None).unwrap(), Recorded::New);
        assert_eq!(u.mark_handled(6, now).unwrap(), 0);
        assert_eq!(
            u.record(6, "{}", now, None).unwrap(),
            Recorded::AlreadyHandled
        );
        assert_eq!(u.mark_handled(5, now).unwrap(), 7);
        assert_eq!(u.get(5).unwrap().unwrap().payload, "");
        // Pruning keeps the offset, so pruned ids stay refused.
        let later = now.plus(chrono::Duration::seconds(1));
        assert_eq!(u.prune_handled(later).unwrap(), 2);
        assert!(u.get(5).unwrap().is_none());
        assert_eq!(u.record(5, "{}", now, None).unwrap(), Recorded::BelowOffset);
        assert_eq!(u.record(7, "{}", now, None).unwrap(), Recorded::New);
    }

    /// After a quiet week Telegram picks the next id at random, possibly
    /// far below the offset, and delivers it although `getUpdates` asked
    /// for nothing below the offset: a new sequence, not a re-send. The bot
    /// must hear it, and confirm what follows it.
    #[test]
    fn an_unknown_id_below_the_offset_asked_for_starts_a_new_sequence() {
        let (_d, s) = store();
        let u = s.telegram_updates();
        let now = Timestamp::now();
        u.record(1_000_000_000, "{}", now, Some(0)).unwrap();
        assert_eq!(u.mark_handled(1_000_000_000, now).unwrap(), 1_000_000_001);
        // Delivered by a poll from the offset: the new sequence.
        assert_eq!(
            u.record(500, "{\"m\":1}", now, Some(1_000_000_001))
                .unwrap(),
            Recorded::NewSequence
        );
        assert_eq!(u.offset().unwrap(), 500);
        assert_eq!(u.pending().unwrap().len(), 1);
        assert_eq!(
            u.record(500, "{}", now, Some(500)).unwrap(),
            Recorded::AlreadyPending
        );
        assert_eq!(u.mark_handled(500, now).unwrap(), 501);
        assert_eq!(u.record(501, "{}", now, Some(501)).unwrap(), Recorded::New);
        assert_eq!(u.mark_handled(501, now).unwrap(), 502);
        // The old sequence's records are gone, not confirmed past.
        assert!(u.get(1_000_000_000).unwrap().is_none());
    }

    #[test]
    fn a_wait_is_not_a_failed_attempt() {
        let (_d, s) = store();
        let u = s.telegram_updates();
        u.record(9, "{}", Timestamp::now(), None).unwrap();
        assert_eq!(u.begin_attempt(9).unwrap().attempts, 1);
        u.undo_attempt(9).unwrap();
        assert_eq!(u.begin_attempt(9).unwrap().attempts, 1);
    }

    #[test]
    fn pending_survive_reopen_with_attempts_counted() {
        let dir = tempfile::tempdir().unwrap();
        let now = Timestamp::now();
        {
            let s = Store::open_in(dir.path()).unwrap();
            let u = s.telegram_updates();
            u.record(7, "{}", now, None).unwrap();
            u.record(8, "{}", now, None).unwrap();
            assert_eq!(u.begin_attempt(7).unwrap().attempts, 1);
            // crash: 7 was being handled, never marked.
        }
        let s = Store::open_in(dir.path()).unwrap();
        let u = s.telegram_updates();
        let pending = u.pending().unwrap();
        let ids: Vec<_> = pending.iter().map(|r| (r.update_id, r.attempts)).collect();
        assert_eq!(ids, vec![(7, 1), (8, 0)]);
        assert_eq!(u.offset().unwrap(), 0);
    }

    #[test]
    fn a_chat_is_refused_once() {
        let (_d, s) = store();
        let u = s.telegram_updates();
        let now = Timestamp::now();
        assert!(u.note_refused(-100, now).unwrap());
        assert!(!u.note_refused(-100, now).unwrap());
        assert!(u.note_refused(42, now).unwrap());
    }
}
