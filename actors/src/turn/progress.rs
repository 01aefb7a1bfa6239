//! Progress while a slow model works (issue #16 item 5): a small local
//! model on a home server's CPU can take a minute per call, and a silent
//! chat reads as a hang. While a model call of a turn runs longer than
//! [`PROGRESS_AFTER`], the sender's connection gets an
//! [`Outbound::Progress`] now and then ([`PROGRESS_EVERY`]) saying how long
//! it has been. Progress is best-effort: a failed send never affects the
//! turn, and it carries no content, only the elapsed time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::channel::{ChannelSink, Outbound};

/// The first notice, once a call has taken this long.
pub const PROGRESS_AFTER: Duration = Duration::from_secs(5);
/// Later notices, while it goes on.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Who hears about a turn's progress.
#[derive(Clone)]
pub struct ProgressTarget {
    pub sink: Arc<dyn ChannelSink>,
    pub scope_id: String,
    pub connection_id: String,
    /// The inbox id of the message being answered.
    pub reply_to: String,
}

/// The notice's text after `elapsed`.
pub fn progress_text(elapsed: Duration) -> String {
    format!(
        "Still working on your message — the model has been thinking for {} s.",
        elapsed.as_secs()
    )
}

impl ProgressTarget {
    /// Runs `call`; while it is pending past [`PROGRESS_AFTER`], sends a
    /// progress notice every [`PROGRESS_EVERY`].
    pub async fn around<F: Future>(&self, call: F) -> F::Output {
        self.around_with(PROGRESS_AFTER, PROGRESS_EVERY, call).await
    }

    /// [`Self::around`] with explicit intervals (tests).
    pub async fn around_with<F: Future>(
        &self,
        after: Duration,
        every: Duration,
        call: F,
    ) -> F::Output {
        let started = tokio::time::Instant::now();
        let mut ticks =
            tokio::time::interval_at(started + after, every.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(call);
        loop {
            tokio::select! {
                out = &mut call => return out,
                _ = ticks.tick() => self.notify(started.elapsed()).await,
            }
        }
    }

    async fn notify(&self, elapsed: Duration) {
        let out = Outbound::Progress {
            scope_id: self.scope_id.clone(),
            connection_id: self.connection_id.clone(),
            reply_to: self.reply_to.clone(),
            text: progress_text(elapsed),
            elapsed_seconds: elapsed.as_secs(),
        };
        if let Err(e) = self.sink.send(out).await {
            tracing::debug!(scope_id = %self.scope_id, "progress not delivered: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::MemorySink;

    fn target(sink: &MemorySink) -> ProgressTarget {
        ProgressTarget {
            sink: Arc::new(sink.clone()),
            scope_id: "owner".into(),
            connection_id: "c1".into(),
            reply_to: "in-1".into(),
        }
    }

    fn progress(sink: &MemorySink) -> Vec<(String, u64)> {
        sink.sent()
            .into_iter()
            .filter_map(|o| match o {
                Outbound::Progress {
                    reply_to,
                    elapsed_seconds,
                    connection_id,
                    ..
                } => {
                    assert_eq!(connection_id, "c1");
                    Some((reply_to, elapsed_seconds))
                }
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_call_reports_progress_and_a_fast_one_does_not() {
        let sink = MemorySink::new();
        let t = target(&sink);
        let out = t
            .around(async {
                tokio::time::sleep(Duration::from_secs(36)).await;
                7
            })
            .await;
        assert_eq!(out, 7);
        // At 5 s, 20 s and 35 s.
        assert_eq!(
            progress(&sink),
            vec![("in-1".into(), 5), ("in-1".into(), 20), ("in-1".into(), 35)]
        );
        let quick = MemorySink::new();
        target(&quick)
            .around(tokio::time::sleep(Duration::from_secs(4)))
            .await;
        assert!(progress(&quick).is_empty());
    }

    #[test]
    fn the_notice_says_how_long_and_nothing_else() {
        assert_eq!(
            progress_text(Duration::from_millis(20_900)),
            "Still working on your message — the model has been thinking for 20 s."
        );
    }
}
