//! The last step of the Stream's admission (§5.1, issue #19): the durable
//! inbox record, awaited in its own task so the Stream goes on admitting
//! while the group commit's fsync runs — concurrent admissions then share
//! one fsync instead of taking one each in turn.
//!
//! The Stream has already counted the message against its queues and found
//! (or started) the scope's TurnProcessor. The record is written staged
//! ([`InboxStore::accept_once_staged`](silas_storage::InboxStore)): once it
//! is visible the processor is woken, and only once it is durable is the
//! sender told `Accepted`. The turn's durable writes queue behind the
//! record, so its reply never goes out before the record is durable, and a
//! crash before then loses the record and the turn's work together (the
//! sender was never told `Accepted`). A message handed over before (same
//! channel idempotency key) gives its queue slot back, and a store failure
//! is the sender's answer (its code, `E_DB_IO` on a full disk) and fails the
//! Stream as it did when the Stream awaited the commit itself.

use ractor::{ActorRef, RpcReplyPort};
use silas_core::Timestamp;
use silas_storage::{NewInbound, Store, StoreError};

use crate::stream::{StreamMsg, SubmitOutcome};
use crate::turn::TurnMsg;
use crate::turn::pipeline::TurnError;

/// What the Stream's admission decided.
pub(crate) enum Admit {
    /// Answered at once (refused, rate limited, shutting down).
    Done(SubmitOutcome),
    /// Admitted: the record is being made durable (boxed: the message is
    /// much larger than an outcome).
    Accepting(Box<Accepting>),
    /// Its dedup key was recorded before, as `inbox_id`: accepted as that
    /// once the earlier acceptance is durable ([`Admit::answer_known`]).
    Known { inbox_id: String },
}

impl Admit {
    /// Answers a message already recorded as `inbox_id`: after a durable
    /// barrier, since the read that found it may have seen the first
    /// acceptance before its fsync (durable before acknowledged, again).
    pub(crate) fn answer_known(
        store: &Store,
        inbox_id: String,
        reply: RpcReplyPort<Result<SubmitOutcome, TurnError>>,
    ) {
        let inbox = store.inbox();
        tokio::spawn(async move {
            let out = match inbox.durable_barrier().await {
                Ok(()) => Ok(SubmitOutcome::Accepted { inbox_id }),
                Err(e) => Err(TurnError::Store(e)),
            };
            let _ = reply.send(out);
        });
    }
}

impl From<SubmitOutcome> for Admit {
    fn from(out: SubmitOutcome) -> Self {
        Admit::Done(out)
    }
}

pub(crate) struct Accepting {
    pub inbound: NewInbound,
    pub processor: ActorRef<TurnMsg>,
}

impl Accepting {
    /// Records the message and answers `reply` once it is durable.
    pub(crate) fn spawn(
        self: Box<Self>,
        store: &Store,
        stream: ActorRef<StreamMsg>,
        reply: RpcReplyPort<Result<SubmitOutcome, TurnError>>,
    ) {
        let Accepting { inbound, processor } = *self;
        let inbox = store.inbox();
        let scope_id = inbound.scope_id.clone();
        tokio::spawn(async move {
            let failed = |scope_id: String, e: StoreError, reply: RpcReplyPort<_>| {
                // Not acknowledged: the sender is told the store's error
                // (a full disk says so), and the Stream fails.
                let _ = stream.cast(StreamMsg::AdmissionFailed {
                    scope_id,
                    error: e.to_string(),
                });
                let _ = reply.send(Err(TurnError::Store(e)));
            };
            let (record, fresh, ticket) =
                match inbox.accept_once_staged(inbound, Timestamp::now()).await {
                    Ok(accepted) => accepted,
                    Err(e) => return failed(scope_id, e, reply),
                };
            if fresh {
                // The turn starts while the record's fsync is still to come.
                // A processor that stopped meanwhile is restarted by the
                // Stream and wakes itself: the record is in the store.
                if let Err(e) = processor.send_message(TurnMsg::Wake) {
                    tracing::debug!(scope_id, "wake after acceptance not sent: {e}");
                }
            } else {
                // Handed over before: queued or done already.
                let _ = stream.cast(StreamMsg::AdmissionReleased {
                    scope_id: scope_id.clone(),
                });
            }
            // Durable before acknowledged.
            match ticket.wait().await {
                Ok(()) => {
                    let _ = reply.send(Ok(SubmitOutcome::Accepted {
                        inbox_id: record.inbox_id,
                    }));
                }
                Err(e) => failed(scope_id, e, reply),
            }
        });
    }
}
