//! Pacing outgoing traffic to Telegram's limits (issue #14 item 6).
//!
//! [`EditThrottle`]: at most one edit per message per interval (500 ms);
//! edits offered in between coalesce to the latest text, which goes out when
//! the interval has passed — so a busy work status edits one status message
//! instead of flooding. An edit to the text already shown is skipped
//! (Telegram answers it with 400 "message is not modified").
//!
//! [`ChatRateLimiter`]: Telegram allows about one message per second in a
//! chat and 20 per minute in a group; each send reserves the earliest slot
//! that keeps within both and says how long to wait for it.
//!
//! Both are pure: the caller passes `now`, so tests need no clock.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// One message: (chat id, message id).
pub type MessageKey = (i64, i64);

pub const EDIT_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditDecision {
    /// Send this edit now.
    SendNow,
    /// Held; the latest held text becomes due at `due`.
    Coalesced { due: Instant },
    /// Same text as the last one sent: nothing to do.
    Unchanged,
}

#[derive(Debug, Default)]
struct Slot {
    last_sent_at: Option<Instant>,
    last_text: Option<String>,
    held: Option<String>,
}

#[derive(Debug)]
pub struct EditThrottle {
    interval: Duration,
    slots: HashMap<MessageKey, Slot>,
}

impl Default for EditThrottle {
    fn default() -> Self {
        EditThrottle::new(EDIT_INTERVAL)
    }
}

impl EditThrottle {
    pub fn new(interval: Duration) -> Self {
        EditThrottle {
            interval,
            slots: HashMap::new(),
        }
    }

    /// Offer an edit of `key` to `text` at `now`.
    pub fn offer(&mut self, key: MessageKey, text: &str, now: Instant) -> EditDecision {
        let interval = self.interval;
        let slot = self.slots.entry(key).or_default();
        if slot.last_text.as_deref() == Some(text) {
            // A newer held text would be superseded by the one already shown.
            slot.held = None;
            return EditDecision::Unchanged;
        }
        match slot.last_sent_at {
            Some(at) if now.saturating_duration_since(at) < interval => {
                slot.held = Some(text.to_string());
                EditDecision::Coalesced { due: at + interval }
            }
            _ => {
                slot.last_sent_at = Some(now);
                slot.last_text = Some(text.to_string());
                slot.held = None;
                EditDecision::SendNow
            }
        }
    }

    /// The held edits whose interval has passed, now marked sent.
    pub fn take_due(&mut self, now: Instant) -> Vec<(MessageKey, String)> {
        let interval = self.interval;
        let mut due = Vec::new();
        for (key, slot) in &mut self.slots {
            let ready = slot
                .last_sent_at
                .is_none_or(|at| now.saturating_duration_since(at) >= interval);
            if ready && let Some(text) = slot.held.take() {
                slot.last_sent_at = Some(now);
                slot.last_text = Some(text.clone());
                due.push((*key, text));
            }
        }
        due.sort_by_key(|(k, _)| *k);
        due
    }

    /// When the next held edit becomes due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.slots
            .values()
            .filter(|s| s.held.is_some())
            .filter_map(|s| s.last_sent_at.map(|at| at + self.interval))
            .min()
    }

    /// The message is gone (deleted, or its card answered): drop its state.
    pub fn forget(&mut self, key: MessageKey) {
        self.slots.remove(&key);
    }
}

/// Telegram's documented per-chat pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChatLimits {
    /// Minimum gap between two messages in one chat.
    pub per_chat_gap: Duration,
    /// Messages per window in a group chat.
    pub group_max: usize,
    pub group_window: Duration,
}

impl Default for ChatLimits {
    fn default() -> Self {
        ChatLimits {
            per_chat_gap: Duration::from_secs(1),
            group_max: 20,
            group_window: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Default)]
pub struct ChatRateLimiter {
    limits: ChatLimits,
    sent: HashMap<i64, VecDeque<Instant>>,
}

impl ChatRateLimiter {
    pub fn new(limits: ChatLimits) -> Self {
        ChatRateLimiter {
            limits,
            sent: HashMap::new(),
        }
    }

    /// Reserve the next send to `chat_id` and return how long to wait before
    /// making it. Group chats have negative ids in the Bot API.
    pub fn reserve(&mut self, chat_id: i64, now: Instant) -> Duration {
        let l = self.limits;
        let is_group = chat_id < 0;
        let q = self.sent.entry(chat_id).or_default();
        // Reservations older than both windows no longer constrain anything.
        let horizon = l.per_chat_gap.max(if is_group {
            l.group_window
        } else {
            Duration::ZERO
        });
        while q
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= horizon)
        {
            q.pop_front();
        }
        let mut at = now;
        if let Some(last) = q.back() {
            at = at.max(*last + l.per_chat_gap);
        }
        if is_group && l.group_max > 0 && q.len() >= l.group_max {
            // The send that would be group_max-th within the window.
            let idx = q.len() - l.group_max;
            at = at.max(q[idx] + l.group_window);
        }
        q.push_back(at);
        at.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_edit_goes_out_then_one_per_interval() {
        let t0 = Instant::now();
        let mut th = EditThrottle::default();
        let k = (1, 10);
        assert_eq!(th.offer(k, "a", t0), EditDecision::SendNow);
        assert_eq!(
            th.offer(k, "b", t0 + 100 * MS),
            EditDecision::Coalesced { due: t0 + 500 * MS }
        );
        assert_eq!(
            th.offer(k, "c", t0 + 200 * MS),
            EditDecision::Coalesced { due: t0 + 500 * MS }
        );
        assert!(th.take_due(t0 + 499 * MS).is_empty());
        assert_eq!(th.next_due(), Some(t0 + 500 * MS));
        // Coalesced to the latest text.
        assert_eq!(th.take_due(t0 + 500 * MS), vec![(k, "c".to_string())]);
        assert!(th.take_due(t0 + 2000 * MS).is_empty());
        assert_eq!(th.next_due(), None);
        // The interval restarts at the coalesced send.
        assert_eq!(
            th.offer(k, "d", t0 + 700 * MS),
            EditDecision::Coalesced {
                due: t0 + 1000 * MS
            }
        );
        assert_eq!(th.offer(k, "e", t0 + 1000 * MS), EditDecision::SendNow);
        assert_eq!(th.next_due(), None);
    }

    #[test]
    fn messages_are_throttled_independently() {
        let t0 = Instant::now();
        let mut th = EditThrottle::default();
        assert_eq!(th.offer((1, 1), "a", t0), EditDecision::SendNow);
        assert_eq!(th.offer((1, 2), "a", t0), EditDecision::SendNow);
        assert_eq!(th.offer((2, 1), "a", t0), EditDecision::SendNow);
        assert!(matches!(
            th.offer((1, 1), "b", t0),
            EditDecision::Coalesced { .. }
        ));
    }

    #[test]
    fn unchanged_text_is_skipped_and_cancels_a_held_edit() {
        let t0 = Instant::now();
        let mut th = EditThrottle::default();
        let k = (1, 1);
        th.offer(k, "a", t0);
        assert_eq!(th.offer(k, "a", t0 + 600 * MS), EditDecision::Unchanged);
        th.offer(k, "b", t0 + 700 * MS); // sent
        th.offer(k, "c", t0 + 800 * MS); // held
        assert_eq!(th.offer(k, "b", t0 + 900 * MS), EditDecision::Unchanged);
        assert!(th.take_due(t0 + 5000 * MS).is_empty());
        th.forget(k);
        assert_eq!(th.offer(k, "b", t0 + 900 * MS), EditDecision::SendNow);
    }

    #[test]
    fn private_chats_get_one_message_per_second() {
        let t0 = Instant::now();
        let mut rl = ChatRateLimiter::default();
        assert_eq!(rl.reserve(5, t0), Duration::ZERO);
        assert_eq!(rl.reserve(5, t0), 1000 * MS);
        assert_eq!(rl.reserve(5, t0 + 100 * MS), 1900 * MS);
        // Another chat is not held up.
        assert_eq!(rl.reserve(6, t0), Duration::ZERO);
        // After a pause, no wait.
        assert_eq!(rl.reserve(5, t0 + 10_000 * MS), Duration::ZERO);
    }

    proptest::proptest! {
        /// Whatever the arrival pattern, the reserved send times keep the
        /// per-chat gap, and no 60 s window of a group holds more than 20.
        #[test]
        fn reservations_never_break_the_limits(
            gaps in proptest::collection::vec(0u64..3000, 1..80),
            group in proptest::bool::ANY,
        ) {
            let t0 = Instant::now();
            let chat = if group { -1 } else { 1 };
            let mut rl = ChatRateLimiter::default();
            let mut now = t0;
            let mut at = Vec::new();
            for g in gaps {
                now += Duration::from_millis(g);
                at.push(now + rl.reserve(chat, now));
            }
            for w in at.windows(2) {
                proptest::prop_assert!(w[1] >= w[0] + 1000 * MS);
            }
            if group {
                for w in at.windows(21) {
                    proptest::prop_assert!(w[20] >= w[0] + 60_000 * MS);
                }
            }
        }
    }

    #[test]
    fn groups_get_at_most_twenty_per_minute() {
        let t0 = Instant::now();
        let mut rl = ChatRateLimiter::new(ChatLimits::default());
        let g = -100;
        let mut t = t0;
        for i in 0..20 {
            let wait = rl.reserve(g, t);
            assert_eq!(wait, Duration::ZERO, "send {i}");
            t += 1000 * MS;
        }
        // The 21st within the minute waits until the first leaves the window.
        let wait = rl.reserve(g, t0 + 20_000 * MS);
        assert_eq!(wait, 40_000 * MS);
        // A minute after the burst, sends flow again.
        assert_eq!(rl.reserve(g, t0 + 200_000 * MS), Duration::ZERO);
    }
}
