//! §18.2 steps 1–3 of `silas start`'s shutdown, the turn drain (split from
//! `daemon.rs`): close turn and card intake (prompts with a waiter resolve
//! to their safe default; plan cards stay for the restart) and let the
//! turns already running finish while their sockets can still take the
//! replies. Queued turns do not start (a turn the grace cut off would pay
//! its model call again at the restart): they stay in the inbox,
//! unattempted, and are answered at the next start. Turns still running at
//! the end of the grace are cut off and replayed at the next start. The
//! WebSockets close with 1001 after this.

use std::time::Duration;

use super::signals::ShutdownSignals;

/// What the drain did, for `daemon.stopped`.
pub(super) struct TurnDrain {
    /// Every turn that started finished.
    pub finished: bool,
    /// A second signal stopped the wait.
    pub hurried: bool,
    /// Queued turns left for the next start.
    pub left_queued: u32,
}

pub(super) async fn drain_turns(grace: Duration, signals: &mut ShutdownSignals) -> TurnDrain {
    let mut out = TurnDrain {
        finished: true,
        hurried: false,
        left_queued: 0,
    };
    let Some(stream) = silas_actors::stream::StreamHandle::find() else {
        return out;
    };
    tokio::select! {
        drained = stream.drain(grace) => match drained {
            Ok(d) => {
                out.left_queued = d.left_queued;
                if d.left_queued > 0 {
                    tracing::info!(messages = d.left_queued, "shutdown: queued messages were not started; they are answered at the next start");
                }
                out.finished = d.finished();
            }
            Err(e) => {
                tracing::warn!("shutdown: the turn drain did not answer: {e}");
                out.finished = false;
            }
        },
        signal = signals.next() => {
            out.hurried = true;
            out.finished = false;
            tracing::warn!(signal, "shutdown: asked again, stopping now without waiting for running turns; they are replayed at the next start");
        }
    }
    if !out.finished && !out.hurried {
        tracing::warn!(
            grace_seconds = grace.as_secs(),
            "shutdown: turns still running after the grace period were cut off; they are replayed at the next start"
        );
    }
    out
}
