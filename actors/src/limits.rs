//! Rate limits and backpressure as pure arithmetic (spec §11 `limits` /
//! `backpressure`, §18.5, §18.6). Time is an argument, so every rule is
//! tested without sleeping; the Stream owns one [`RateLimiter`] per kind and
//! one [`TurnQueues`] and asks them before it records a message.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A sliding one-window limit per key (`n` events per `window`).
#[derive(Clone, Debug)]
pub struct RateLimiter {
    max: u32,
    window: Duration,
    events: HashMap<String, VecDeque<Instant>>,
}

impl RateLimiter {
    pub fn per_minute(max: u32) -> Self {
        RateLimiter::new(max, Duration::from_secs(60))
    }

    pub fn new(max: u32, window: Duration) -> Self {
        RateLimiter {
            max,
            window,
            events: HashMap::new(),
        }
    }

    /// Takes one event for `key` at `now`; `false` (nothing recorded) when
    /// the key has used its allowance in the window.
    pub fn try_take(&mut self, key: &str, now: Instant) -> bool {
        let q = self.events.entry(key.to_string()).or_default();
        while let Some(&first) = q.front() {
            if now.saturating_duration_since(first) >= self.window {
                q.pop_front();
            } else {
                break;
            }
        }
        if q.len() as u64 >= u64::from(self.max) {
            return false;
        }
        q.push_back(now);
        true
    }

    /// Whether `key` could take an event at `now` (nothing recorded).
    pub fn would_allow(&self, key: &str, now: Instant) -> bool {
        let used = self.events.get(key).map_or(0, |q| {
            q.iter()
                .filter(|t| now.saturating_duration_since(**t) < self.window)
                .count()
        });
        (used as u64) < u64::from(self.max)
    }

    /// Drops keys with no event in the window (bounded memory).
    pub fn prune(&mut self, now: Instant) {
        let window = self.window;
        self.events.retain(|_, q| {
            q.back()
                .is_some_and(|t| now.saturating_duration_since(*t) < window)
        });
    }
}

/// Whether a new turn may be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// The scope already has `max_per_scope` pending turns.
    ScopeFull,
    /// The global bound is reached (or, for non-owner traffic, the share of
    /// it reserved for the owner).
    GlobalFull,
}

/// Pending-turn counts per scope and in total (§18.6).
#[derive(Clone, Debug, Default)]
pub struct TurnQueues {
    pub max_per_scope: u32,
    pub max_total: u32,
    pending: HashMap<String, u32>,
    total: u32,
}

impl TurnQueues {
    pub fn new(max_per_scope: u32, max_total: u32) -> Self {
        TurnQueues {
            max_per_scope,
            max_total,
            pending: HashMap::new(),
            total: 0,
        }
    }

    /// Slots of the global queue only the owner may use: "reject
    /// lowest-priority non-owner traffic first" (§18.6) — non-owner turns are
    /// refused once the queue is 90 % full.
    pub fn owner_reserve(&self) -> u32 {
        self.max_total / 10
    }

    /// Decides admission of one more turn for `scope` (nothing recorded).
    pub fn admission(&self, scope: &str, is_owner: bool) -> Admission {
        if self.pending(scope) >= self.max_per_scope {
            return Admission::ScopeFull;
        }
        let limit = if is_owner {
            self.max_total
        } else {
            self.max_total.saturating_sub(self.owner_reserve())
        };
        if self.total >= limit {
            return Admission::GlobalFull;
        }
        Admission::Admit
    }

    pub fn push(&mut self, scope: &str) {
        *self.pending.entry(scope.to_string()).or_default() += 1;
        self.total = self.total.saturating_add(1);
    }

    pub fn pop(&mut self, scope: &str) {
        if let Some(n) = self.pending.get_mut(scope)
            && *n > 0
        {
            *n -= 1;
            self.total = self.total.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(scope);
            }
        }
    }

    pub fn pending(&self, scope: &str) -> u32 {
        self.pending.get(scope).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    /// Scopes with pending turns and their depth (for `/health`, §18.6).
    pub fn depths(&self) -> impl Iterator<Item = (&str, u32)> {
        self.pending.iter().map(|(s, n)| (s.as_str(), *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(2, Duration::from_secs(60));
        assert!(l.try_take("a", t0));
        assert!(l.try_take("a", t0 + Duration::from_secs(1)));
        assert!(!l.try_take("a", t0 + Duration::from_secs(2)));
        assert!(!l.would_allow("a", t0 + Duration::from_secs(2)));
        assert!(
            l.try_take("b", t0 + Duration::from_secs(2)),
            "keys are independent"
        );
        // The first event leaves the window after 60 s.
        assert!(l.try_take("a", t0 + Duration::from_secs(60)));
        l.prune(t0 + Duration::from_secs(600));
        assert!(l.events.is_empty());
    }

    #[test]
    fn queues_per_scope_global_and_owner_reserve() {
        let mut q = TurnQueues::new(2, 10);
        q.push("s");
        q.push("s");
        assert_eq!(q.admission("s", true), Admission::ScopeFull);
        assert_eq!(q.admission("t", true), Admission::Admit);
        for i in 0..7 {
            q.push(&format!("x{i}"));
        }
        // 9 of 10 used: non-owner traffic hits the owner reserve first.
        assert_eq!(q.admission("c", false), Admission::GlobalFull);
        assert_eq!(q.admission("owner", true), Admission::Admit);
        q.push("owner");
        assert_eq!(q.admission("owner", true), Admission::GlobalFull);
        q.pop("s");
        q.pop("s");
        q.pop("s");
        assert_eq!(q.pending("s"), 0);
        assert_eq!(q.total(), 8);
    }
}
