//! Scopes end (issue #19 item 3): a scope whose visitor has gone releases
//! its TurnProcessor after an idle interval, so the daemon's memory does
//! not grow with the number of past chatbot visitors. Pure bookkeeping; the
//! Stream decides with it and stops the actor.
//!
//! A scope becomes a candidate when its last connection closes (the web
//! bridge's `scope_disconnected`), stops being one when a message arrives
//! for it, and is due once it has been a candidate for `after`. The Stream
//! releases a due scope only with nothing queued and nothing undelivered in
//! its inbox; its durable state (inbox, chronicle, memories, cards) stays in
//! redb and the next message rehydrates a fresh processor from it. The
//! owner's scope is never released. Rate-limit windows are not touched
//! here: the limiters forget a key only once its window has passed, so a
//! release never resets a per-hour or per-week count.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::turn::OWNER_SCOPE;

#[derive(Debug)]
pub struct IdleScopes {
    after: Duration,
    since: HashMap<String, Instant>,
}

impl IdleScopes {
    pub fn new(after: Duration) -> Self {
        IdleScopes {
            after,
            since: HashMap::new(),
        }
    }

    /// The scope's last connection closed at `now`.
    pub fn disconnected(&mut self, scope: &str, now: Instant) {
        if scope != OWNER_SCOPE {
            self.since.entry(scope.to_string()).or_insert(now);
        }
    }

    /// A message for the scope arrived: it is in use again.
    pub fn active(&mut self, scope: &str) {
        self.since.remove(scope);
    }

    /// Candidates idle for at least the interval, oldest first.
    pub fn due(&self, now: Instant) -> Vec<String> {
        let mut due: Vec<(&String, &Instant)> = self
            .since
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) >= self.after)
            .collect();
        due.sort_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
        due.into_iter().map(|(s, _)| s.clone()).collect()
    }

    /// Released (or nothing left to release): no longer tracked.
    pub fn forget(&mut self, scope: &str) {
        self.since.remove(scope);
    }

    pub fn len(&self) -> usize {
        self.since.len()
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_scope_is_due_only_after_the_interval_since_its_visitor_left() {
        let t0 = Instant::now();
        let mut idle = IdleScopes::new(5 * MIN);
        idle.disconnected("web:a", t0);
        idle.disconnected("web:b", t0 + MIN);
        assert!(idle.due(t0 + 4 * MIN).is_empty());
        assert_eq!(idle.due(t0 + 5 * MIN), vec!["web:a".to_string()]);
        assert_eq!(
            idle.due(t0 + 10 * MIN),
            vec!["web:a".to_string(), "web:b".to_string()]
        );
        // A second disconnect (another tab) does not restart the clock.
        idle.disconnected("web:a", t0 + 4 * MIN);
        assert_eq!(idle.due(t0 + 5 * MIN), vec!["web:a".to_string()]);
    }

    #[test]
    fn a_returning_visitor_is_not_released_and_the_owner_never_is() {
        let t0 = Instant::now();
        let mut idle = IdleScopes::new(MIN);
        idle.disconnected("web:a", t0);
        idle.disconnected(OWNER_SCOPE, t0);
        idle.active("web:a");
        assert!(idle.due(t0 + 10 * MIN).is_empty());
        assert!(idle.is_empty());
        idle.disconnected("web:a", t0 + 2 * MIN);
        assert_eq!(idle.len(), 1);
        idle.forget("web:a");
        assert!(idle.due(t0 + 10 * MIN).is_empty());
    }
}
