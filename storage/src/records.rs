//! Keyed record tables for the remaining durable state: persona state (per
//! scope), memory records, service connections and pending cards, plus the
//! append-only persona event log. One generic [`Records`] handle serves every
//! `id → record` table; the [`Keyed`] impls bind each model type to its table.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use silas_core::Timestamp;
use silas_core::cards::CardPayload;
use silas_core::model::connections::Connection;
use silas_core::model::context::ScopeSubscriptions;
use silas_core::model::devices::OwnerDevice;
use silas_core::model::memory::MemoryItem;
use silas_core::model::personality::{PersonaEvent, PersonaState};
use silas_core::model::skills::{DeclinedSkill, InstalledSkill};
use silas_core::model::workspace::Workspace;

use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::group_commit::{GroupCommit, Wait};
use crate::schema::{
    CONNECTIONS, CONTEXT_SUBSCRIPTIONS, DECLINED_SKILLS, INSTALLED_SKILLS, MEMORY, OWNER_DEVICES,
    PENDING_CARDS, PERSONA_EVENTS, PERSONA_STATE, TELEGRAM_CARDS, TELEGRAM_PROGRESS, WORKSPACES,
};

/// A record stored under its own string key.
pub trait Keyed: Serialize + DeserializeOwned {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]>;
    const NAME: &'static str;
    fn key(&self) -> &str;
}

impl Keyed for PersonaState {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = PERSONA_STATE;
    const NAME: &'static str = "persona_state";
    fn key(&self) -> &str {
        &self.scope_id
    }
}

impl Keyed for MemoryItem {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = MEMORY;
    const NAME: &'static str = "memory";
    fn key(&self) -> &str {
        &self.memory_id
    }
}

impl Keyed for Connection {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = CONNECTIONS;
    const NAME: &'static str = "connections";
    fn key(&self) -> &str {
        &self.connection_id
    }
}

impl Keyed for OwnerDevice {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = OWNER_DEVICES;
    const NAME: &'static str = "owner_devices";
    fn key(&self) -> &str {
        &self.device_id
    }
}

/// The owner's registered workspaces, by name (issue #15).
impl Keyed for Workspace {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = WORKSPACES;
    const NAME: &'static str = "workspaces";
    fn key(&self) -> &str {
        &self.name
    }
}

/// Skills the owner approved at one content hash (issue #17), by name.
impl Keyed for InstalledSkill {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = INSTALLED_SKILLS;
    const NAME: &'static str = "installed_skills";
    fn key(&self) -> &str {
        &self.name
    }
}

/// Skill install cards the owner declined, by name (issue #17).
impl Keyed for DeclinedSkill {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = DECLINED_SKILLS;
    const NAME: &'static str = "declined_skills";
    fn key(&self) -> &str {
        &self.name
    }
}

/// A scope's context subscriptions, by scope (issue #18).
impl Keyed for ScopeSubscriptions {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = CONTEXT_SUBSCRIPTIONS;
    const NAME: &'static str = "context_subscriptions";
    fn key(&self) -> &str {
        &self.scope_id
    }
}

/// A card awaiting the owner's answer (plan approval, gate approval, batch
/// review, decision, secure input). Persisted so a restart neither loses the
/// question nor lets an answer arrive for a card that was never asked.
/// Who may see and answer a card. Decided by the server when the card is
/// made, never by a client or a model; a record without it (written before
/// audiences existed) is the owner's — the safe reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardAudience {
    /// Only connections authenticated as the owner see and answer it.
    #[default]
    Owner,
    /// The customer of the card's scope (chatbot mode); never an approval.
    Customer,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingCard {
    pub request_id: String,
    pub scope_id: String,
    /// What the card shows, typed per card type. Flattened so the record
    /// keeps the `{card_type, payload}` layout it had before it was typed.
    #[serde(flatten)]
    pub card: CardPayload,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    #[serde(default)]
    pub audience: CardAudience,
}

impl PendingCard {
    /// The stored `card_type` (also the server frame's `type`).
    pub fn card_type(&self) -> &'static str {
        self.card.card_type()
    }
}

impl Keyed for PendingCard {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = PENDING_CARDS;
    const NAME: &'static str = "pending_cards";
    fn key(&self) -> &str {
        &self.request_id
    }
}

/// One card as shown in a Telegram chat (issue #14): the render's random
/// `handle` is what its buttons carry (request ids can exceed Telegram's
/// 64-byte callback data), `nonce` the render's live nonce. A press counts
/// only while `outcome` is `None` and the press names this handle, chat and
/// nonce; answering (or resolving the card elsewhere) sets the outcome, so a
/// replayed or stale press is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelegramCardMessage {
    pub handle: String,
    pub request_id: String,
    pub chat_id: i64,
    pub message_id: i64,
    pub nonce: String,
    pub sent_at: Timestamp,
    /// The line the message was edited to once the card was resolved.
    #[serde(default)]
    pub outcome: Option<String>,
}

impl Keyed for TelegramCardMessage {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = TELEGRAM_CARDS;
    const NAME: &'static str = "telegram_cards";
    fn key(&self) -> &str {
        &self.handle
    }
}

/// A "Still working…" message in a Telegram chat (issue #16 item 5), kept
/// until the answer replaces it; one left from before a start is deleted
/// then (the daemon died before the answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelegramProgressMessage {
    /// `{chat_id}:{reply_to}`.
    pub key: String,
    pub chat_id: i64,
    pub message_id: i64,
    pub sent_at: Timestamp,
}

impl Keyed for TelegramProgressMessage {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = TELEGRAM_PROGRESS;
    const NAME: &'static str = "telegram_progress";
    fn key(&self) -> &str {
        &self.key
    }
}

/// How many times each keyed table had records removed through this
/// store, by table name: a reader holding copies of records (a scope's
/// context holds hundreds of memories) re-checks them only when the count
/// moved since it last looked, instead of on every turn (issue #19). Every
/// removal goes through [`Records`] (the tables are private to this
/// crate), and the count moves before the removal is visible, so a reader
/// that saw the old count re-checks after it.
#[derive(Debug, Default)]
pub(crate) struct Removals(Mutex<HashMap<&'static str, u64>>);

impl Removals {
    fn bump(&self, table: &'static str) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(table).or_default();
        *n = n.wrapping_add(1);
    }

    fn of(&self, table: &'static str) -> u64 {
        let counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        counts.get(table).copied().unwrap_or(0)
    }
}

/// Typed access to one keyed table.
pub struct Records<T> {
    db: Arc<Database>,
    writer: Arc<GroupCommit>,
    removals: Arc<Removals>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Records<T> {
    fn clone(&self) -> Self {
        Records {
            db: self.db.clone(),
            writer: self.writer.clone(),
            removals: self.removals.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Keyed> Records<T> {
    pub(crate) fn new(
        db: Arc<Database>,
        writer: Arc<GroupCommit>,
        removals: Arc<Removals>,
    ) -> Self {
        Records {
            db,
            writer,
            removals,
            _t: PhantomData,
        }
    }

    /// How many removals this table has had through this store (any
    /// record; see [`Removals`]). Unchanged between two looks: nothing was
    /// removed in between.
    pub fn removals(&self) -> u64 {
        self.removals.of(T::NAME)
    }

    /// Stores `record`, durable when it returns (through the store's group
    /// commit: concurrent writers share one fsync).
    pub fn put(&self, record: &T) -> StoreResult<()> {
        self.writer
            .write_blocking(Wait::Durable, self.put_op(record)?)
    }

    /// Like [`Self::put`], but without waiting for an fsync: visible to
    /// every reader when it returns, durable only with the store's next
    /// durable commit, lost if the process dies first. Only for writes that
    /// are redone when lost — e.g. a turn's raw memory capture, which a
    /// replay repeats (same id) until the turn's durable response commit
    /// covers it.
    pub fn put_deferred(&self, record: &T) -> StoreResult<()> {
        self.writer
            .write_blocking(Wait::Visible, self.put_op(record)?)
    }

    /// Like [`Self::put_deferred`], but returns at once: the write is queued
    /// and committed in order, before any write queued after it (so the
    /// caller's own next durable write makes it durable); a failure is
    /// logged, not returned. Nothing the caller reads right after may
    /// depend on it.
    pub fn put_queued(&self, record: &T) -> StoreResult<()> {
        self.writer
            .write_detached(Wait::Visible, T::NAME, self.put_op(record)?);
        Ok(())
    }

    fn put_op(
        &self,
        record: &T,
    ) -> StoreResult<impl Fn(&WriteTransaction) -> StoreResult<()> + Send + 'static> {
        if record.key().is_empty() {
            return Err(StoreError::Invalid(format!(
                "{} key must not be empty",
                T::NAME
            )));
        }
        let key = record.key().to_string();
        let value = codec::encode(T::NAME, record)?;
        Ok(move |txn: &WriteTransaction| {
            txn.open_table(T::TABLE)?
                .insert(key.as_str(), value.as_slice())?;
            Ok(())
        })
    }

    /// Changes the record of each of `keys` that exists with `change`, in
    /// one write that returns once visible (like [`Self::put_deferred`]):
    /// one commit for them all instead of a read and a commit per record —
    /// every turn's retrieval counts several memories (issue #19).
    pub fn update_each(
        &self,
        keys: &[String],
        change: impl Fn(&mut T) + Send + 'static,
    ) -> StoreResult<()>
    where
        T: 'static,
    {
        self.writer
            .write_blocking(Wait::Visible, Self::update_op(keys.to_vec(), change))
    }

    /// [`Self::update_each`] without waiting, like [`Self::put_queued`]:
    /// for counts nothing in the caller reads back (a turn's memory access
    /// counts).
    pub fn update_each_queued(&self, keys: &[String], change: impl Fn(&mut T) + Send + 'static)
    where
        T: 'static,
    {
        self.writer.write_detached(
            Wait::Visible,
            T::NAME,
            Self::update_op(keys.to_vec(), change),
        );
    }

    fn update_op(
        keys: Vec<String>,
        change: impl Fn(&mut T) + Send + 'static,
    ) -> impl Fn(&WriteTransaction) -> StoreResult<()> + Send + 'static
    where
        T: 'static,
    {
        move |txn: &WriteTransaction| {
            let mut table = txn.open_table(T::TABLE)?;
            for key in &keys {
                let Some(bytes) = table.get(key.as_str())?.map(|v| v.value().to_vec()) else {
                    continue;
                };
                let mut record: T = codec::decode(T::NAME, &bytes)?;
                change(&mut record);
                table.insert(key.as_str(), codec::encode(T::NAME, &record)?.as_slice())?;
            }
            Ok(())
        }
    }

    /// Many records in one durable transaction (all or none).
    pub fn put_many(&self, records: &[T]) -> StoreResult<()> {
        self.write_all(records, false)
    }

    /// Replaces the whole table with `records` in one durable transaction:
    /// a failure leaves the table as it was.
    pub fn replace_all(&self, records: &[T]) -> StoreResult<()> {
        self.write_all(records, true)
    }

    fn write_all(&self, records: &[T], clear: bool) -> StoreResult<()> {
        if records.iter().any(|r| r.key().is_empty()) {
            return Err(StoreError::Invalid(format!(
                "{} key must not be empty",
                T::NAME
            )));
        }
        if clear {
            self.removals.bump(T::NAME);
        }
        let txn = self.db.begin_write()?;
        {
            if clear {
                txn.delete_table(T::TABLE)?;
            }
            let mut table = txn.open_table(T::TABLE)?;
            for r in records {
                table.insert(r.key(), codec::encode(T::NAME, r)?.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes every record whose key is in `keys` in one transaction;
    /// returns the removed records.
    pub fn delete_many(&self, keys: &[String]) -> StoreResult<Vec<T>> {
        self.removals.bump(T::NAME);
        let txn = self.db.begin_write()?;
        let mut out = Vec::new();
        {
            let mut table = txn.open_table(T::TABLE)?;
            for k in keys {
                let removed = table.remove(k.as_str())?;
                if let Some(v) = removed {
                    out.push(codec::decode(T::NAME, v.value())?);
                }
            }
        }
        txn.commit()?;
        Ok(out)
    }

    pub fn get(&self, key: &str) -> StoreResult<Option<T>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(T::TABLE)?;
        let found = table.get(key)?;
        match found {
            Some(v) => Ok(Some(codec::decode(T::NAME, v.value())?)),
            None => Ok(None),
        }
    }

    /// Remove a record; returns it if it existed. Durable when it returns.
    pub fn delete(&self, key: &str) -> StoreResult<Option<T>> {
        self.removals.bump(T::NAME);
        let key = key.to_string();
        let bytes = self.writer.write_blocking(Wait::Durable, move |txn| {
            let mut table = txn.open_table(T::TABLE)?;
            let removed = table.remove(key.as_str())?;
            Ok(removed.map(|v| v.value().to_vec()))
        })?;
        match bytes {
            Some(b) => Ok(Some(codec::decode(T::NAME, &b)?)),
            None => Ok(None),
        }
    }

    /// Every record, in key order.
    pub fn list(&self) -> StoreResult<Vec<T>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(T::TABLE)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            out.push(codec::decode(T::NAME, v.value())?);
        }
        Ok(out)
    }

    /// The records, in key order, whose stored JSON text passes `keep`;
    /// the others are skipped without being decoded. `keep` is only a
    /// prefilter (it sees the serialised form, not the record): callers
    /// still check the decoded fields. Records in any other format are
    /// always decoded.
    pub fn list_prefiltered(&self, keep: impl Fn(&str) -> bool) -> StoreResult<Vec<T>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(T::TABLE)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            let bytes = v.value();
            let skip = match bytes.split_first() {
                Some((&codec::RECORD_V1, json)) => {
                    std::str::from_utf8(json).is_ok_and(|j| !keep(j))
                }
                _ => false,
            };
            if !skip {
                out.push(codec::decode(T::NAME, bytes)?);
            }
        }
        Ok(out)
    }

    /// Which of `keys` have a record, in order: one read transaction and
    /// no decoding (a long conversation's memory zone is checked this way
    /// every turn, hundreds of ids).
    pub fn contains_each(&self, keys: &[&str]) -> StoreResult<Vec<bool>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(T::TABLE)?;
        keys.iter().map(|k| Ok(table.get(*k)?.is_some())).collect()
    }

    pub fn len(&self) -> StoreResult<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(T::TABLE)?.len()?)
    }

    pub fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.len()? == 0)
    }
}

/// Append-only persona event log (spec §3.10, §5.15).
#[derive(Clone)]
pub struct PersonaEvents {
    db: Arc<Database>,
}

impl PersonaEvents {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        PersonaEvents { db }
    }

    pub fn append(&self, event: &PersonaEvent) -> StoreResult<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(PERSONA_EVENTS)?.insert(
            (
                event.scope_id.as_str(),
                event.created_at.as_micros(),
                event.event_id.as_str(),
            ),
            codec::encode("persona_events", event)?.as_slice(),
        )?;
        txn.commit()?;
        Ok(())
    }

    /// Events of one scope at or after `since`, oldest first.
    pub fn since(&self, scope_id: &str, since: Timestamp) -> StoreResult<Vec<PersonaEvent>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PERSONA_EVENTS)?;
        let mut out = Vec::new();
        for row in
            table.range((scope_id, since.as_micros(), "")..=(scope_id, i64::MAX, "\u{10FFFF}"))?
        {
            let (_, v) = row?;
            out.push(codec::decode("persona_events", v.value())?);
        }
        Ok(out)
    }
}
