//! Replies a client acknowledges (issue #19 item 6): at-least-once on the
//! wire, exactly once for the user.
//!
//! A reply written to a WebSocket just before a crash or a connection reset
//! can be lost in the kernel while the store says delivered. So a reply to
//! a client that acknowledges by id ([`ReplyAck::Client`]) is kept in
//! `inbox_unacked` — in the same transaction as its delivery mark — until
//! the client's `ack` for that id ([`InboxStore::acknowledge_async`]), and
//! sent again, under the same id, when the scope reconnects
//! ([`InboxStore::unacked_for_scope`]). The client drops an id it has
//! already shown, so the user sees it once.
//!
//! Bounded: a scope keeps its newest [`UNACKED_KEPT_PER_SCOPE`]
//! unacknowledged replies (an old client that never acknowledges gets at
//! most that many again per reconnect, never a growing backlog).

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::codec;
use crate::error::StoreResult;
use crate::group_commit::Wait;
use crate::inbox::{InboxRecord, InboxStore, TABLE, get_in};
use crate::schema::{INBOX, INBOX_UNACKED};

/// Most unacknowledged replies one scope keeps; older ones are dropped
/// when a newer one joins.
pub const UNACKED_KEPT_PER_SCOPE: usize = 100;

/// Who confirms that a reply reached its reader — the channel's answer to
/// [`crate::InboxStore::mark_delivered`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyAck {
    /// The channel confirmed the send itself (Telegram's API answer, an
    /// in-memory sink) and a second send would be shown twice: nothing is
    /// kept, and the mark is durable before the turn goes on.
    Channel,
    /// The client acknowledges the reply by id and drops an id it has shown
    /// (the web app, `silas chat`): kept as unacknowledged until its `ack`,
    /// sent again when the scope reconnects.
    Client,
    /// A client that drops ids it has shown, on a scope that can never
    /// reconnect (a chatbot customer's scope is its connection): nothing to
    /// keep, and a redelivery after a crash finds nobody.
    ClientOnce,
}

impl ReplyAck {
    /// What the delivery mark waits for: only a channel that would show a
    /// redelivered reply twice needs the mark to survive a crash; for the
    /// others a lost mark means a redelivery the client drops by id.
    pub fn mark_wait(self) -> Wait {
        match self {
            ReplyAck::Channel => Wait::Durable,
            ReplyAck::Client | ReplyAck::ClientOnce => Wait::Lazy,
        }
    }

    /// Whether the delivery mark may be committed with the response, before
    /// the send (`TurnOutcome::delivered`): a reply lost on the way is sent
    /// again when its scope reconnects (`Client`) or had nobody to reach
    /// (`ClientOnce`: the scope was its connection). A channel that
    /// confirms its own sends is marked once it has.
    pub fn marked_with_response(self) -> bool {
        self != ReplyAck::Channel
    }
}

/// What an `ack` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// The reply is acknowledged now (it will not be sent again).
    Acknowledged,
    /// A reply of this scope that was not waiting (acknowledged before, or
    /// never kept): nothing changed.
    AlreadyAcknowledged,
    /// No reply of this scope has that id — another scope's, or none at
    /// all (indistinguishable on purpose): nothing changed.
    NotThisScope,
}

/// The ack's write (a `Fn`: the writer may run it twice, see `group_commit`).
type AckOp = Box<dyn Fn(&WriteTransaction) -> StoreResult<AckOutcome> + Send>;

/// Inside the delivery mark's transaction: keep `record`'s reply as
/// unacknowledged, dropping the scope's oldest beyond the bound.
pub(crate) fn keep_unacked_in(txn: &WriteTransaction, record: &InboxRecord) -> StoreResult<()> {
    let scope = record.message.scope_id.as_str();
    let mut table = txn.open_table(INBOX_UNACKED)?;
    table.insert((scope, record.seq), record.inbox_id.as_str())?;
    let mut beyond = Vec::new();
    for row in table
        .range((scope, 0u64)..=(scope, u64::MAX))?
        .rev()
        .skip(UNACKED_KEPT_PER_SCOPE)
    {
        let (k, _) = row?;
        beyond.push(k.value().1);
    }
    for seq in beyond {
        table.remove((scope, seq))?;
    }
    Ok(())
}

impl InboxStore {
    /// The replies of `scope_id` sent and not acknowledged, oldest first:
    /// what a reconnecting client of that scope is sent again.
    pub fn unacked_for_scope(&self, scope_id: &str) -> StoreResult<Vec<InboxRecord>> {
        let txn = self.db.begin_read()?;
        let unacked = txn.open_table(INBOX_UNACKED)?;
        let table = txn.open_table(INBOX)?;
        let mut out = Vec::new();
        for row in unacked.range((scope_id, 0u64)..=(scope_id, u64::MAX))? {
            let (_, id) = row?;
            if let Some(v) = table.get(id.value())? {
                out.push(codec::decode(TABLE, v.value())?);
            }
        }
        Ok(out)
    }

    /// The client of `scope_id` acknowledged the reply `inbox_id`. Only a
    /// reply of that scope is acknowledged; any other id changes nothing
    /// ([`AckOutcome::NotThisScope`]). Lazy: a lost ack sends the reply
    /// once more on the next reconnect, which the client drops by id.
    pub async fn acknowledge_async(
        &self,
        scope_id: &str,
        inbox_id: &str,
    ) -> StoreResult<AckOutcome> {
        // Checked on a read transaction first: a refused or repeated ack
        // costs no write (a record's scope never changes).
        let seq = {
            let txn = self.db.begin_read()?;
            let found = txn.open_table(INBOX)?.get(inbox_id)?;
            let record: InboxRecord = match found {
                Some(v) => codec::decode(TABLE, v.value())?,
                None => return Ok(AckOutcome::NotThisScope),
            };
            if record.message.scope_id != scope_id {
                return Ok(AckOutcome::NotThisScope);
            }
            let waiting = txn
                .open_table(INBOX_UNACKED)?
                .get((scope_id, record.seq))?
                .is_some();
            if !waiting {
                return Ok(AckOutcome::AlreadyAcknowledged);
            }
            record.seq
        };
        let scope = scope_id.to_string();
        let id = inbox_id.to_string();
        let op: AckOp = Box::new(move |txn| {
            // Re-read in the write: the scope check holds for the
            // record the removal is keyed by.
            let record = get_in(txn, &id)?;
            if record.message.scope_id != scope || record.seq != seq {
                return Ok(AckOutcome::NotThisScope);
            }
            let removed = txn
                .open_table(INBOX_UNACKED)?
                .remove((scope.as_str(), seq))?
                .is_some();
            Ok(if removed {
                AckOutcome::Acknowledged
            } else {
                AckOutcome::AlreadyAcknowledged
            })
        });
        self.writer.write(Wait::Lazy, op).await
    }
}

#[cfg(test)]
mod tests {
    use silas_core::Timestamp;

    use super::*;
    use crate::inbox::NewInbound;
    use crate::{InboxStage, Store};

    fn msg(scope: &str) -> NewInbound {
        NewInbound {
            scope_id: scope.into(),
            channel: "web".into(),
            sender_id: "owner".into(),
            text: "hi".into(),
            signed: None,
            connection_id: "ws-1".into(),
            ip: None,
            owner_authenticated: false,
            dedup_key: None,
        }
    }

    fn responded(store: &Store, scope: &str) -> InboxRecord {
        let inbox = store.inbox();
        let r = inbox.accept(msg(scope), Timestamp::now()).unwrap();
        inbox
            .record_response(&r.inbox_id, "re", None, Vec::new())
            .unwrap()
    }

    fn ids(v: Vec<InboxRecord>) -> Vec<String> {
        v.into_iter().map(|r| r.inbox_id).collect()
    }

    #[tokio::test]
    async fn a_client_reply_waits_for_its_ack_across_a_reopen_and_only_its_scope_acks_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, other) = {
            let store = Store::open_in(dir.path()).unwrap();
            let inbox = store.inbox();
            let a = responded(&store, "owner");
            let b = responded(&store, "owner");
            let other = responded(&store, "ws-9");
            let t = responded(&store, "owner");
            let marked = inbox
                .mark_delivered_async(&a.inbox_id, ReplyAck::Client)
                .await
                .unwrap();
            assert_eq!(marked.stage, InboxStage::Delivered);
            inbox.mark_delivered(&b.inbox_id, ReplyAck::Client).unwrap();
            inbox
                .mark_delivered(&other.inbox_id, ReplyAck::ClientOnce)
                .unwrap();
            inbox
                .mark_delivered(&t.inbox_id, ReplyAck::Channel)
                .unwrap();
            // Delivered: none of them is pending (no turn replays them).
            assert!(inbox.pending_all().unwrap().is_empty());
            (a, b, other)
        };
        // A restart: the unacknowledged ones are still there, in order;
        // neither the channel-confirmed nor the once-only one is.
        let store = Store::open_in(dir.path()).unwrap();
        let inbox = store.inbox();
        assert_eq!(
            ids(inbox.unacked_for_scope("owner").unwrap()),
            vec![a.inbox_id.clone(), b.inbox_id.clone()]
        );
        assert!(inbox.unacked_for_scope("ws-9").unwrap().is_empty());

        // Another scope's ack for the owner's reply, and an unknown id:
        // refused alike, nothing changes and nothing is written.
        let writes = store.group_commit_stats().writes;
        assert_eq!(
            inbox.acknowledge_async("ws-9", &a.inbox_id).await.unwrap(),
            AckOutcome::NotThisScope
        );
        assert_eq!(
            inbox.acknowledge_async("owner", "nope").await.unwrap(),
            AckOutcome::NotThisScope
        );
        assert_eq!(
            inbox
                .acknowledge_async("owner", &other.inbox_id)
                .await
                .unwrap(),
            AckOutcome::NotThisScope
        );
        assert_eq!(store.group_commit_stats().writes, writes);
        assert_eq!(inbox.unacked_for_scope("owner").unwrap().len(), 2);

        // The owner's ack: gone, and a replayed ack changes nothing.
        assert_eq!(
            inbox.acknowledge_async("owner", &a.inbox_id).await.unwrap(),
            AckOutcome::Acknowledged
        );
        assert_eq!(
            inbox.acknowledge_async("owner", &a.inbox_id).await.unwrap(),
            AckOutcome::AlreadyAcknowledged
        );
        assert_eq!(
            ids(inbox.unacked_for_scope("owner").unwrap()),
            vec![b.inbox_id.clone()]
        );
        // A customer acknowledging its own once-only reply: nothing waits.
        assert_eq!(
            inbox
                .acknowledge_async("ws-9", &other.inbox_id)
                .await
                .unwrap(),
            AckOutcome::AlreadyAcknowledged
        );
        // Marking again (a replay) does not bring an acknowledged one back.
        inbox.mark_delivered(&a.inbox_id, ReplyAck::Client).unwrap();
        assert_eq!(inbox.unacked_for_scope("owner").unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_scope_keeps_only_its_newest_unacked_replies() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let inbox = store.inbox();
        let mut all = Vec::new();
        for _ in 0..UNACKED_KEPT_PER_SCOPE + 3 {
            let r = responded(&store, "owner");
            inbox.mark_delivered(&r.inbox_id, ReplyAck::Client).unwrap();
            all.push(r.inbox_id);
        }
        let kept = ids(inbox.unacked_for_scope("owner").unwrap());
        assert_eq!(kept, all[3..].to_vec());
    }

    #[test]
    fn only_a_self_confirming_channel_waits_for_the_fsync() {
        assert_eq!(ReplyAck::Channel.mark_wait(), Wait::Durable);
        assert_eq!(ReplyAck::Client.mark_wait(), Wait::Lazy);
        assert_eq!(ReplyAck::ClientOnce.mark_wait(), Wait::Lazy);
    }
}
