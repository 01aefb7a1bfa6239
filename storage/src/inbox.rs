//! `InboxStore`: the durable record of every accepted inbound message, so no
//! accepted turn is lost (issue #5, spec §5.1, §18.2 crash recovery).
//!
//! A message is recorded ([`InboxStore::accept`]) *before* the channel is
//! told it was accepted. The turn then moves the record through its stages,
//! each stage change committed in one write transaction together with the
//! durable effect it stands for:
//!
//! | stage            | committed together with                           | the turn waits for (group commit) |
//! |------------------|---------------------------------------------------|-----------------------------------|
//! | `accepted`       | the record and its pending-index entry, attempt 1 | durable (before the ack)          |
//! | `input_recorded` | the message's chronicle entry (§5.1 step 3), taint | durable if signed; else committed with the response |
//! | `responded`      | the response's chronicle entry (step 11), the reply | durable (before delivery)       |
//! | `delivered`      | removal from the pending index; a reply the client acknowledges joins the unacknowledged ones (`inbox_ack`) | a web reply: with the response, before the send; a channel that confirms itself (Telegram): durable after the send |
//!
//! A web turn of an unsigned message thus commits twice — its acceptance
//! (visible) and its [`TurnOutcome`] (durable) — where it committed four
//! times.
//!
//! Writes go through the store's [`GroupCommit`] writer, so concurrent turns
//! share fsyncs; the `_async` variants await it without blocking a runtime
//! thread, the plain ones block and are always durable when they return.
//!
//! Replay after a crash resumes from the recorded stage: a record that is
//! `input_recorded` never chronicles its message twice, a `responded` one is
//! only (re)delivered under its stable `inbox_id` (channels deduplicate on
//! it), and a `delivered` one is never touched again — so every accepted
//! message is processed exactly once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use redb::{Database, ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use silas_core::Timestamp;
use silas_core::model::JsonObject;
use silas_core::model::context::ContextItem;
use silas_core::model::messages::{SignedMessage, TaintLevel};

use crate::audit::Sanitized;
use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::group_commit::{DurableTicket, GroupCommit, Wait};
use crate::schema::{COUNTERS, INBOX, INBOX_KEYS, INBOX_PENDING};

pub use crate::inbox_ack::{AckOutcome, ReplyAck, UNACKED_KEPT_PER_SCOPE};

pub(crate) const TABLE: &str = "inbox";
/// A delivered record without its words: the message emptied, the reply
/// (should it be sent again) replaced by `reply`.
fn scrubbed(mut r: InboxRecord, reply: &str) -> InboxRecord {
    r.message.text.clear();
    if r.reply.is_some() {
        r.reply = Some(reply.to_string());
    }
    r
}

/// Writes the records back; returns how many.
fn put_all(table: &mut redb::Table<&str, &[u8]>, records: &[InboxRecord]) -> StoreResult<u64> {
    for r in records {
        table.insert(r.inbox_id.as_str(), codec::encode(TABLE, r)?.as_slice())?;
    }
    Ok(records.len() as u64)
}

/// Where [`InboxStore::scrub_delivered_before`] goes on from.
const SCRUBBED_THROUGH: &str = "inbox_scrubbed_through";
/// What a reply past retention reads as, should it be sent again.
pub const EXPIRED_REPLY: &str = "(this reply is older than the history Silas keeps)";
/// What a forgotten reply reads as, should it be sent again.
pub const FORGOTTEN_REPLY: &str = "(this reply was forgotten at the owner's request)";
const SEQ_COUNTER: &str = "inbox_seq";

/// How far an accepted message has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxStage {
    Accepted,
    InputRecorded,
    Responded,
    Delivered,
}

/// An inbound message as a channel hands it over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewInbound {
    pub scope_id: String,
    pub channel: String,
    pub sender_id: String,
    pub text: String,
    pub signed: Option<SignedMessage>,
    pub connection_id: String,
    pub ip: Option<String>,
    /// Set by the server at acceptance: the connection had authenticated
    /// with an owner credential. Never taken from a client frame.
    #[serde(default)]
    pub owner_authenticated: bool,
    /// The channel's idempotency key (e.g. `telegram:update:<update_id>`): a
    /// message handed over again under the same key is not accepted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
}

/// One accepted message and its progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// Stable id (zero-padded sequence number): the idempotency key of the
    /// reply on every channel.
    pub inbox_id: String,
    pub seq: u64,
    pub message: NewInbound,
    pub received_at: Timestamp,
    pub stage: InboxStage,
    /// Set once, at step 2; a replayed turn reuses it (the message nonce was
    /// consumed the first time).
    pub taint: Option<TaintLevel>,
    pub turn_number: Option<u64>,
    /// The text delivered at step 13 (kept for redelivery after a crash).
    pub reply: Option<String>,
    /// How many times a TurnProcessor started processing this record
    /// ([`InboxStore::begin_attempt`]), crashed attempts included: the
    /// poison-message bound. Absent in records stored before it existed
    /// (decoded as 0: adding a defaulted field to the JSON value changes
    /// neither the record version nor the table layout).
    #[serde(default)]
    pub attempts: u32,
}

/// This process's attempts, in memory only (after a restart every attempt
/// is counted again).
#[derive(Default)]
pub(crate) struct AttemptBook {
    /// Records accepted here whose first attempt was counted at acceptance
    /// and not started yet (see [`InboxStore::begin_attempt`]).
    unstarted: HashSet<String>,
    /// Records whose attempt started here and that are not delivered yet:
    /// the attempts an orderly stop cuts off ([`InboxStore::refund_cut_off`]).
    running: HashSet<String>,
}

pub(crate) type SharedAttemptBook = Arc<Mutex<AttemptBook>>;

#[derive(Clone)]
pub struct InboxStore {
    pub(crate) db: Arc<Database>,
    pub(crate) writer: Arc<GroupCommit>,
    attempt_book: SharedAttemptBook,
}

pub(crate) fn get_in(txn: &WriteTransaction, id: &str) -> StoreResult<InboxRecord> {
    let table = txn.open_table(INBOX)?;
    let found = table.get(id)?;
    match found {
        Some(v) => codec::decode(TABLE, v.value()),
        None => Err(StoreError::NotFound {
            what: "inbox record",
            id: id.to_string(),
        }),
    }
}

fn put_in(txn: &WriteTransaction, r: &InboxRecord) -> StoreResult<()> {
    txn.open_table(INBOX)?
        .insert(r.inbox_id.as_str(), codec::encode(TABLE, r)?.as_slice())?;
    Ok(())
}

/// A queued write: runs inside the group-commit writer's transaction.
type Op<R> = Box<dyn Fn(&WriteTransaction) -> StoreResult<R> + Send>;
// `Fn`: the writer may run a write twice (a batch-mate failed, see
// `group_commit`), so each run starts from its own copy of the inputs.

fn accept_op(message: NewInbound, now: Timestamp) -> StoreResult<Op<(InboxRecord, bool)>> {
    if message.scope_id.is_empty() {
        return Err(StoreError::Invalid("scope_id must not be empty".into()));
    }
    Ok(Box::new(move |txn| {
        if let Some(key) = &message.dedup_key {
            let known = txn
                .open_table(INBOX_KEYS)?
                .get(key.as_str())?
                .map(|v| v.value().to_string());
            if let Some(id) = known {
                let record = get_in(txn, &id)?;
                return Ok((record, false));
            }
        }
        let mut counters = txn.open_table(COUNTERS)?;
        let seq = counters.get(SEQ_COUNTER)?.map(|v| v.value()).unwrap_or(0);
        counters.insert(SEQ_COUNTER, seq + 1)?;
        let record = InboxRecord {
            inbox_id: format!("{seq:020}"),
            seq,
            message: message.clone(),
            received_at: now,
            stage: InboxStage::Accepted,
            taint: None,
            turn_number: None,
            reply: None,
            // The first attempt is counted here, in the acceptance's
            // durable commit (one fsync fewer per turn).
            attempts: 1,
        };
        put_in(txn, &record)?;
        txn.open_table(INBOX_PENDING)?.insert(
            (record.message.scope_id.as_str(), seq),
            record.inbox_id.as_str(),
        )?;
        if let Some(key) = &record.message.dedup_key {
            txn.open_table(INBOX_KEYS)?
                .insert(key.as_str(), record.inbox_id.as_str())?;
        }
        Ok((record, true))
    }))
}

/// Read-modify-write one record; `f` returns `false` to leave it as is
/// (the change already happened: idempotent replay).
fn advance_op(
    inbox_id: &str,
    chronicle: Option<ContextItem>,
    audit: Vec<(String, JsonObject)>,
    f: impl Fn(&mut InboxRecord) -> bool + Send + 'static,
) -> Op<InboxRecord> {
    let inbox_id = inbox_id.to_string();
    let audit = Sanitized::new(audit);
    Box::new(move |txn| {
        let mut record = get_in(txn, &inbox_id)?;
        if !f(&mut record) {
            return Ok(record);
        }
        if let Some(item) = &chronicle {
            crate::chronicle::append_in(txn, &record.message.scope_id, item)?;
        }
        if !audit.is_empty() {
            crate::audit::append_in(txn, &audit)?;
        }
        put_in(txn, &record)?;
        if record.stage == InboxStage::Delivered {
            txn.open_table(INBOX_PENDING)?
                .remove((record.message.scope_id.as_str(), record.seq))?;
        }
        Ok(record)
    })
}

fn attempt_op(inbox_id: &str) -> Op<InboxRecord> {
    advance_op(inbox_id, None, Vec::new(), |r| {
        if r.stage >= InboxStage::Delivered {
            return false;
        }
        r.attempts = r.attempts.saturating_add(1);
        true
    })
}

fn input_op(inbox_id: &str, input: InputRecord) -> Op<InboxRecord> {
    let item = input.chronicle.clone();
    advance_op(inbox_id, Some(item), Vec::new(), move |r| input.apply(r))
}

/// The input record (§5.1 steps 2–3) of a message whose taint and turn
/// number a replay recomputes: committed with the turn's response
/// ([`TurnOutcome::input`]) rather than on its own (see
/// [`InboxRecord::input_first`]).
#[derive(Clone, Debug, PartialEq)]
pub struct InputRecord {
    pub taint: TaintLevel,
    pub turn_number: u64,
    /// The message's chronicle entry.
    pub chronicle: ContextItem,
}

impl InputRecord {
    /// Moves `r` to `input_recorded` with this taint and turn number;
    /// `false` (unchanged) once it got there.
    pub fn apply(&self, r: &mut InboxRecord) -> bool {
        if r.stage >= InboxStage::InputRecorded {
            return false;
        }
        r.stage = InboxStage::InputRecorded;
        r.taint = Some(self.taint);
        r.turn_number = Some(self.turn_number);
        true
    }
}

/// What a turn commits in its one durable response commit (§5.1 step 11),
/// with what earlier and later steps left to it: the input record of a
/// message that did not need its own commit, and the delivery mark of a
/// reply whose client acknowledges it by id (step 13). One commit instead
/// of three: each commit rewrites the pages of every table it touches, and
/// the fsync writes all of them (issue #19).
#[derive(Clone, Debug, Default)]
pub struct TurnOutcome {
    pub reply: String,
    /// The response's chronicle entry (absent when the turn stopped early).
    pub chronicle: Option<ContextItem>,
    pub audit: Vec<(String, JsonObject)>,
    /// Step 3's record, when it was not committed then.
    pub input: Option<InputRecord>,
    /// The delivery mark to commit with the response (see
    /// [`ReplyAck::marked_with_response`]); `None` marks after the send.
    pub delivered: Option<ReplyAck>,
}

impl TurnOutcome {
    /// The delivery mark this commit makes: only one a redelivery cannot
    /// show twice.
    fn marks(&self) -> Option<ReplyAck> {
        self.delivered.filter(|ack| ack.marked_with_response())
    }
}

fn outcome_op(inbox_id: &str, outcome: TurnOutcome) -> Op<InboxRecord> {
    let inbox_id = inbox_id.to_string();
    let mark = outcome.marks();
    let TurnOutcome {
        reply,
        chronicle,
        audit,
        input,
        ..
    } = outcome;
    let audit = Sanitized::new(audit);
    Box::new(move |txn| {
        let mut record = get_in(txn, &inbox_id)?;
        if record.stage >= InboxStage::Responded {
            return Ok(record);
        }
        if let Some(input) = &input
            && input.apply(&mut record)
        {
            crate::chronicle::append_in(txn, &record.message.scope_id, &input.chronicle)?;
        }
        record.stage = InboxStage::Responded;
        record.reply = Some(reply.clone());
        if let Some(item) = &chronicle {
            crate::chronicle::append_in(txn, &record.message.scope_id, item)?;
        }
        if !audit.is_empty() {
            crate::audit::append_in(txn, &audit)?;
        }
        if let Some(ack) = mark {
            deliver_in(txn, &mut record, ack)?;
        }
        put_in(txn, &record)?;
        Ok(record)
    })
}

/// Moves `record` to `delivered` inside `txn`: out of the pending index,
/// and kept until acknowledged when its client acknowledges by id. The
/// caller stores the record.
fn deliver_in(txn: &WriteTransaction, record: &mut InboxRecord, ack: ReplyAck) -> StoreResult<()> {
    record.stage = InboxStage::Delivered;
    txn.open_table(INBOX_PENDING)?
        .remove((record.message.scope_id.as_str(), record.seq))?;
    if ack == ReplyAck::Client {
        crate::inbox_ack::keep_unacked_in(txn, record)?;
    }
    Ok(())
}

fn delivered_op(inbox_id: &str, ack: ReplyAck) -> Op<InboxRecord> {
    let inbox_id = inbox_id.to_string();
    Box::new(move |txn| {
        let mut record = get_in(txn, &inbox_id)?;
        if record.stage >= InboxStage::Delivered {
            return Ok(record);
        }
        deliver_in(txn, &mut record, ack)?;
        put_in(txn, &record)?;
        Ok(record)
    })
}

impl InboxRecord {
    /// Whether step 3's input record is committed on its own, durably,
    /// before the turn acts on it. A signed message's taint rests on its
    /// nonce, consumed durably at step 2: a replay after losing the record
    /// would find the nonce used and downgrade the taint. Any other
    /// message's taint and turn number are recomputed identically by a
    /// replay (same stored message, same chronicle), so its input record
    /// joins the turn's durable response commit ([`TurnOutcome::input`]).
    pub fn input_first(&self) -> bool {
        self.message.signed.is_some()
    }
}

impl InboxStore {
    pub(crate) fn new(
        db: Arc<Database>,
        writer: Arc<GroupCommit>,
        attempt_book: SharedAttemptBook,
    ) -> Self {
        InboxStore {
            db,
            writer,
            attempt_book,
        }
    }

    /// A record this process accepted fresh: its first attempt was counted
    /// by the acceptance itself (see [`Self::begin_attempt`]).
    fn note_first_attempt(&self, record: &InboxRecord, fresh: bool) {
        if fresh && let Ok(mut book) = self.attempt_book.lock() {
            book.unstarted.insert(record.inbox_id.clone());
        }
    }

    /// An attempt at `inbox_id` starts: whether its count was already made
    /// at acceptance.
    fn take_first_attempt(&self, inbox_id: &str) -> bool {
        self.attempt_book
            .lock()
            .map(|mut book| {
                book.running.insert(inbox_id.to_string());
                book.unstarted.remove(inbox_id)
            })
            .unwrap_or(false)
    }

    /// `inbox_id` is delivered: no attempt of it is left to count or refund.
    fn forget_attempts(&self, inbox_id: &str) {
        if let Ok(mut book) = self.attempt_book.lock() {
            book.unstarted.remove(inbox_id);
            book.running.remove(inbox_id);
        }
    }

    /// An orderly stop cut these messages off (a turn still running at the
    /// end of the drain, a message counted at acceptance and never
    /// started): the attempt they were charged is given back, so restarting
    /// the daemon never sets a healthy message aside as a poison one (only
    /// crashes count toward the turn's attempt limit). Call once the turn
    /// processors are stopped; returns how many were refunded.
    pub async fn refund_cut_off(&self) -> StoreResult<usize> {
        let ids: Vec<String> = match self.attempt_book.lock() {
            Ok(mut book) => {
                let running = std::mem::take(&mut book.running);
                let unstarted = std::mem::take(&mut book.unstarted);
                running.into_iter().chain(unstarted).collect()
            }
            Err(_) => return Ok(0),
        };
        if ids.is_empty() {
            return Ok(0);
        }
        let op: Op<usize> = Box::new(move |txn| {
            let mut refunded = 0;
            for id in &ids {
                let mut record = match get_in(txn, id) {
                    Ok(r) => r,
                    Err(StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(e),
                };
                if record.stage >= InboxStage::Delivered || record.attempts == 0 {
                    continue;
                }
                record.attempts -= 1;
                put_in(txn, &record)?;
                refunded += 1;
            }
            Ok(refunded)
        });
        self.writer.write(Wait::Durable, op).await
    }

    /// Durably record an inbound message (one transaction); only after this
    /// returns may the channel be told the message was accepted.
    pub fn accept(&self, message: NewInbound, now: Timestamp) -> StoreResult<InboxRecord> {
        self.accept_once(message, now).map(|(record, _)| record)
    }

    /// [`Self::accept`], idempotent on `message.dedup_key`: a key seen before
    /// returns the record it was accepted as, and `false` (nothing stored).
    /// The key and the record commit in one transaction, so a crash between
    /// a channel's hand-over and its own "handled" mark cannot make a second
    /// turn.
    pub fn accept_once(
        &self,
        message: NewInbound,
        now: Timestamp,
    ) -> StoreResult<(InboxRecord, bool)> {
        let op = accept_op(message, now)?;
        self.writer
            .write_blocking(Wait::Durable, op)
            .inspect(|(record, fresh)| self.note_first_attempt(record, *fresh))
    }

    /// [`Self::accept_once`] for async callers: waits for the group commit
    /// that holds the record without blocking a runtime thread.
    pub async fn accept_once_async(
        &self,
        message: NewInbound,
        now: Timestamp,
    ) -> StoreResult<(InboxRecord, bool)> {
        let op = accept_op(message, now)?;
        self.writer
            .write(Wait::Durable, op)
            .await
            .inspect(|(record, fresh)| self.note_first_attempt(record, *fresh))
    }

    /// [`Self::accept_once_async`] in two steps: returns once the record is
    /// visible, with a [`DurableTicket`] met once it is durable. The turn
    /// may start at once (every durable write it makes queues behind the
    /// record, so a crash before the ticket is met loses both); the channel
    /// is told "accepted" only once the ticket is met. At low load the
    /// turn's own durable response commit then carries the record: one
    /// fsync per turn instead of two.
    pub async fn accept_once_staged(
        &self,
        message: NewInbound,
        now: Timestamp,
    ) -> StoreResult<(InboxRecord, bool, DurableTicket)> {
        let op = accept_op(message, now)?;
        let ((record, fresh), ticket) = self.writer.write_staged(op).await?;
        self.note_first_attempt(&record, fresh);
        Ok((record, fresh, ticket))
    }

    /// The record a channel's dedup key was accepted as, if any (a plain
    /// read: the acceptance may still be on its way to disk — see
    /// [`Self::durable_barrier`]).
    pub fn accepted_as(&self, dedup_key: &str) -> StoreResult<Option<String>> {
        let txn = self.db.begin_read()?;
        let keys = txn.open_table(INBOX_KEYS)?;
        Ok(keys.get(dedup_key)?.map(|v| v.value().to_string()))
    }

    /// Returns once everything committed before the call is durable (a
    /// write of nothing, carried by the next durable group commit).
    pub async fn durable_barrier(&self) -> StoreResult<()> {
        let op: Op<()> = Box::new(|_| Ok(()));
        self.writer.write(Wait::Durable, op).await
    }

    pub fn get(&self, inbox_id: &str) -> StoreResult<Option<InboxRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(INBOX)?;
        let found = table.get(inbox_id)?;
        match found {
            Some(v) => Ok(Some(codec::decode(TABLE, v.value())?)),
            None => Ok(None),
        }
    }

    fn pending_range(&self, scope: Option<&str>) -> StoreResult<Vec<InboxRecord>> {
        let txn = self.db.begin_read()?;
        let pending = txn.open_table(INBOX_PENDING)?;
        let table = txn.open_table(INBOX)?;
        let mut ids = Vec::new();
        match scope {
            Some(s) => {
                for row in pending.range((s, 0u64)..=(s, u64::MAX))? {
                    let (_, v) = row?;
                    ids.push(v.value().to_string());
                }
            }
            None => {
                for row in pending.iter()? {
                    let (_, v) = row?;
                    ids.push(v.value().to_string());
                }
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let found = table.get(id.as_str())?;
            match found {
                Some(v) => out.push(codec::decode(TABLE, v.value())?),
                None => {
                    return Err(StoreError::Corrupt(format!(
                        "inbox pending index points at missing record {id:?}"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Undelivered records of one scope, oldest first.
    pub fn pending_for_scope(&self, scope_id: &str) -> StoreResult<Vec<InboxRecord>> {
        self.pending_range(Some(scope_id))
    }

    /// Every undelivered record, grouped by scope, oldest first within one.
    pub fn pending_all(&self) -> StoreResult<Vec<InboxRecord>> {
        self.pending_range(None)
    }

    /// Counts one processing attempt, committed before the attempt starts,
    /// so an attempt that crashes the processor (or the daemon) still
    /// counts. Returns the record with the new count. A delivered record is
    /// left as is.
    ///
    /// The first attempt of a record this process accepted was counted by
    /// the acceptance's own durable commit: the first call for it here
    /// writes nothing (no fsync). Every later call — a processor restarted
    /// after a failed attempt, or any call after a daemon restart, when the
    /// in-memory set is empty — counts.
    pub fn begin_attempt(&self, inbox_id: &str) -> StoreResult<InboxRecord> {
        if let Some(record) = self.first_attempt(inbox_id)? {
            return Ok(record);
        }
        self.writer
            .write_blocking(Wait::Durable, attempt_op(inbox_id))
    }

    /// [`Self::begin_attempt`] for async callers.
    pub async fn begin_attempt_async(&self, inbox_id: &str) -> StoreResult<InboxRecord> {
        if let Some(record) = self.first_attempt(inbox_id)? {
            return Ok(record);
        }
        self.writer.write(Wait::Durable, attempt_op(inbox_id)).await
    }

    fn first_attempt(&self, inbox_id: &str) -> StoreResult<Option<InboxRecord>> {
        // Either way the attempt is running from here (see `running`).
        if !self.take_first_attempt(inbox_id) {
            return Ok(None);
        }
        match self.get(inbox_id)? {
            Some(r) if r.stage < InboxStage::Delivered => Ok(Some(r)),
            // Not there (cannot happen) or delivered: the counting path
            // reports it as it always did.
            _ => Ok(None),
        }
    }

    /// §5.1 steps 2–3: the message's taint and turn number, with its
    /// chronicle entry, in one transaction. A no-op once recorded.
    pub fn record_input(
        &self,
        inbox_id: &str,
        taint: TaintLevel,
        turn_number: u64,
        chronicle: &ContextItem,
    ) -> StoreResult<InboxRecord> {
        let input = InputRecord {
            taint,
            turn_number,
            chronicle: chronicle.clone(),
        };
        self.writer
            .write_blocking(Wait::Durable, input_op(inbox_id, input))
    }

    /// [`Self::record_input`] for async callers (a signed message's, see
    /// [`InboxRecord::input_first`]); durable when it returns.
    pub async fn record_input_async(
        &self,
        inbox_id: &str,
        input: InputRecord,
    ) -> StoreResult<InboxRecord> {
        self.writer
            .write(Wait::Durable, input_op(inbox_id, input))
            .await
    }

    /// §5.1 step 11: the turn's outcome — the reply to deliver, the
    /// response's chronicle entry (if the turn got that far) and audit
    /// events — in one transaction. A no-op once responded.
    pub fn record_response(
        &self,
        inbox_id: &str,
        reply: &str,
        chronicle: Option<&ContextItem>,
        audit: Vec<(String, JsonObject)>,
    ) -> StoreResult<InboxRecord> {
        let outcome = TurnOutcome {
            reply: reply.to_string(),
            chronicle: chronicle.cloned(),
            audit,
            ..TurnOutcome::default()
        };
        self.writer
            .write_blocking(Wait::Durable, outcome_op(inbox_id, outcome))
    }

    /// [`Self::record_response`] for async callers, with what the turn
    /// left to this commit ([`TurnOutcome`]); durable when it returns. A
    /// no-op once responded.
    pub async fn record_outcome_async(
        &self,
        inbox_id: &str,
        outcome: TurnOutcome,
    ) -> StoreResult<InboxRecord> {
        if outcome.marks().is_some() {
            // Delivered with this commit: no later attempt to count.
            self.forget_attempts(inbox_id);
        }
        self.writer
            .write(Wait::Durable, outcome_op(inbox_id, outcome))
            .await
    }

    /// Every record of one scope, any stage, in acceptance order.
    pub fn of_scope(&self, scope_id: &str) -> StoreResult<Vec<InboxRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(INBOX)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            let r: InboxRecord = codec::decode(TABLE, v.value())?;
            if r.message.scope_id == scope_id {
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }

    /// The owner's `memory forget`: delivered records of `scope_id` whose
    /// message or reply `gone` picks lose their text (the message is
    /// emptied, the reply replaced — a reply still to be acknowledged is
    /// then redelivered as that). Records of turns still in flight are left
    /// to finish. Returns how many were scrubbed.
    pub fn scrub_delivered(&self, scope_id: &str, gone: impl Fn(&str) -> bool) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let scrubbed = {
            let mut table = txn.open_table(INBOX)?;
            let mut changed = Vec::new();
            for row in table.iter()? {
                let (_, v) = row?;
                let r: InboxRecord = codec::decode(TABLE, v.value())?;
                if r.message.scope_id != scope_id
                    || r.stage != InboxStage::Delivered
                    || !(gone(&r.message.text) || r.reply.as_deref().is_some_and(&gone))
                {
                    continue;
                }
                changed.push(scrubbed(r, FORGOTTEN_REPLY));
            }
            put_all(&mut table, &changed)?
        };
        txn.commit()?;
        Ok(scrubbed)
    }

    /// Retention (the chronicle's, §4.14): delivered records received
    /// before `cutoff` lose their words as [`Self::scrub_delivered`] does —
    /// the record stays for de-duplication. Walks in acceptance order from
    /// where the last call stopped, and stops at the first record that is
    /// newer or still in flight. Returns how many were scrubbed.
    pub fn scrub_delivered_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        let txn = self.db.begin_write()?;
        let scrubbed = {
            let mut table = txn.open_table(INBOX)?;
            let mut counters = txn.open_table(COUNTERS)?;
            let from = counters.get(SCRUBBED_THROUGH)?.map_or(0, |v| v.value());
            let start = format!("{from:020}");
            let mut changed = Vec::new();
            let mut next = from;
            for row in table.range(start.as_str()..)? {
                let (_, v) = row?;
                let r: InboxRecord = codec::decode(TABLE, v.value())?;
                if r.received_at >= cutoff || r.stage != InboxStage::Delivered {
                    break;
                }
                next = r.seq.saturating_add(1);
                if r.message.text.is_empty()
                    && r.reply.as_deref().is_none_or(|t| t == EXPIRED_REPLY)
                {
                    continue;
                }
                changed.push(scrubbed(r, EXPIRED_REPLY));
            }
            counters.insert(SCRUBBED_THROUGH, next)?;
            put_all(&mut table, &changed)?
        };
        txn.commit()?;
        Ok(scrubbed)
    }

    /// Step 13: the reply went out (or found nobody connected); the record
    /// leaves the pending index, and a reply the client acknowledges
    /// ([`ReplyAck::Client`]) is kept as unacknowledged until it does
    /// ([`Self::acknowledge`]). Durable when it returns.
    pub fn mark_delivered(&self, inbox_id: &str, ack: ReplyAck) -> StoreResult<InboxRecord> {
        self.forget_attempts(inbox_id);
        self.writer
            .write_blocking(Wait::Durable, delivered_op(inbox_id, ack))
    }

    /// [`Self::mark_delivered`] for the turn's hot path: awaits the group
    /// commit instead of blocking a runtime thread, and waits only as long
    /// as `ack` needs ([`ReplyAck::mark_wait`]): a mark lost in a crash
    /// redelivers the reply under the same id, which a client that drops
    /// ids it has shown turns into nothing, so only a channel without that
    /// (Telegram) waits for the fsync.
    pub async fn mark_delivered_async(
        &self,
        inbox_id: &str,
        ack: ReplyAck,
    ) -> StoreResult<InboxRecord> {
        self.forget_attempts(inbox_id);
        self.writer
            .write(ack.mark_wait(), delivered_op(inbox_id, ack))
            .await
    }
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
