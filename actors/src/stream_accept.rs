//! The last step of the Stream's admission (§5.1, issue #19): the durable
//! inbox record, awaited in its own task so the Stream goes on admitting
//! while the group commit's fsync runs — concurrent admissions then share
//! one fsync instead of taking one each in turn.
//!
//! The Stream has already counted the message against its queues and found
//! (or started) the scope's TurnProcessor. Only once the record is durable
//! is the sender told `Accepted` and the processor woken; a message handed
//! over before (same channel idempotency key) gives its queue slot back, and
//! a store failure fails the Stream as it did when the Stream awaited the
//! commit itself.

use ractor::{ActorRef, RpcReplyPort};
use silas_core::Timestamp;
use silas_storage::{NewInbound, Store};

use crate::stream::{StreamMsg, SubmitOutcome};
use crate::turn::TurnMsg;

/// What the Stream's admission decided.
pub(crate) enum Admit {
    /// Answered at once (refused, rate limited, shutting down).
    Done(SubmitOutcome),
    /// Admitted: the record is being made durable (boxed: the message is
    /// much larger than an outcome).
    Accepting(Box<Accepting>),
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
        reply: RpcReplyPort<SubmitOutcome>,
    ) {
        let Accepting { inbound, processor } = *self;
        let inbox = store.inbox();
        let scope_id = inbound.scope_id.clone();
        tokio::spawn(async move {
            match inbox.accept_once_async(inbound, Timestamp::now()).await {
                Ok((record, fresh)) => {
                    if fresh {
                        // A processor that stopped meanwhile is restarted by
                        // the Stream and wakes itself: the record is durable.
                        if let Err(e) = processor.send_message(TurnMsg::Wake) {
                            tracing::debug!(scope_id, "wake after acceptance not sent: {e}");
                        }
                    } else {
                        // Handed over before: queued or done already.
                        let _ = stream.cast(StreamMsg::AdmissionReleased { scope_id });
                    }
                    let _ = reply.send(SubmitOutcome::Accepted {
                        inbox_id: record.inbox_id,
                    });
                }
                Err(e) => {
                    // Not acknowledged: the dropped reply port tells the
                    // sender the Stream is unavailable.
                    let _ = stream.cast(StreamMsg::AdmissionFailed {
                        scope_id,
                        error: e.to_string(),
                    });
                }
            }
        });
    }
}
