//! Refusals a sender can repeat at will — a message or card answer over
//! the rate limit, a message refused for backpressure — are audited at most
//! once per (event, scope) per [`REFUSAL_AUDIT_EVERY`], the entry carrying
//! how many of the same were refused since the last one written
//! (`refused_since`). One entry per refusal let a customer with no
//! credential grow the store by 2,000 entries a second (and 60 KB each with
//! a long request id), as failed logins could before `web.auth_throttled`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most one entry per (event, scope) in this interval.
pub const REFUSAL_AUDIT_EVERY: Duration = Duration::from_secs(60);

/// The longest client-chosen id an audit entry quotes (a prefix, marked).
pub const QUOTED_ID_MAX: usize = 64;

#[derive(Debug)]
struct Noted {
    at: Instant,
    since: u64,
}

/// Which refusals to write now, and how many were not.
#[derive(Debug)]
pub struct RefusalAudit {
    every: Duration,
    seen: HashMap<(&'static str, String), Noted>,
}

impl Default for RefusalAudit {
    fn default() -> Self {
        RefusalAudit::new(REFUSAL_AUDIT_EVERY)
    }
}

impl RefusalAudit {
    pub fn new(every: Duration) -> Self {
        RefusalAudit {
            every,
            seen: HashMap::new(),
        }
    }

    /// One refusal of `event` for `scope` at `now`: `Some(n)` when it is to
    /// be written, `n` the refusals of the same not written since the last
    /// entry; `None` when it is only counted.
    pub fn note(&mut self, event: &'static str, scope: &str, now: Instant) -> Option<u64> {
        match self.seen.get_mut(&(event, scope.to_owned())) {
            Some(n) if now.saturating_duration_since(n.at) < self.every => {
                n.since = n.since.saturating_add(1);
                None
            }
            Some(n) => {
                let since = n.since;
                *n = Noted { at: now, since: 0 };
                Some(since)
            }
            None => {
                self.seen
                    .insert((event, scope.to_owned()), Noted { at: now, since: 0 });
                Some(0)
            }
        }
    }

    /// Forgets what is past its interval (the table empties when senders
    /// stop) and returns the counts not yet written, to be written now.
    pub fn prune(&mut self, now: Instant) -> Vec<(&'static str, String, u64)> {
        let mut unwritten = Vec::new();
        self.seen.retain(|(event, scope), n| {
            let live = now.saturating_duration_since(n.at) < self.every;
            if !live && n.since > 0 {
                unwritten.push((*event, scope.clone(), n.since));
            }
            live
        });
        unwritten.sort();
        unwritten
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// A client-chosen id as an audit entry may quote it: at most
/// [`QUOTED_ID_MAX`] characters, a longer one cut and marked.
pub fn quoted_id(id: &str) -> String {
    let head = silas_core::never_log::truncate_chars(id, QUOTED_ID_MAX);
    if head.len() == id.len() {
        head
    } else {
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_interval_then_the_count() {
        let mut r = RefusalAudit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(r.note("security_rate_limited", "a", t0), Some(0));
        for i in 1..=500 {
            assert_eq!(
                r.note("security_rate_limited", "a", t0 + Duration::from_millis(i)),
                None
            );
        }
        // Another scope and another event are their own.
        assert_eq!(r.note("security_rate_limited", "b", t0), Some(0));
        assert_eq!(r.note("backpressure_busy_retry", "a", t0), Some(0));
        // Past the interval: written, with the 500 not written.
        let t1 = t0 + Duration::from_secs(61);
        assert_eq!(r.note("security_rate_limited", "a", t1), Some(500));
        assert_eq!(
            r.note("security_rate_limited", "a", t1 + Duration::from_secs(1)),
            None
        );
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn prune_empties_the_table_and_hands_back_what_was_not_written() {
        let mut r = RefusalAudit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        r.note("security_rate_limited", "a", t0);
        r.note("security_rate_limited", "a", t0);
        r.note("security_rate_limited", "a", t0);
        r.note("backpressure_busy_retry", "b", t0);
        assert!(r.prune(t0 + Duration::from_secs(10)).is_empty());
        assert_eq!(r.len(), 2);
        let out = r.prune(t0 + Duration::from_secs(61));
        assert_eq!(out, vec![("security_rate_limited", "a".to_owned(), 2)]);
        assert!(r.is_empty());
    }

    #[test]
    fn long_ids_are_quoted_as_a_marked_prefix() {
        assert_eq!(quoted_id("card-1"), "card-1");
        let long = "R".repeat(60_000);
        let q = quoted_id(&long);
        assert_eq!(q.chars().count(), QUOTED_ID_MAX + 1);
        assert!(q.ends_with('…'));
        assert_eq!(quoted_id(&"é".repeat(64)), "é".repeat(64));
    }
}
