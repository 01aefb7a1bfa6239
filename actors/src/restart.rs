//! Restart intensity (Erlang's `MaxR`/`MaxT`): how often a supervised child
//! may fail before the supervisor gives up and escalates. Pure: time is an
//! argument, so the policy is tested without sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// At most `max_restarts` restarts within any `within` window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    pub max_restarts: u32,
    pub within: Duration,
    /// Delay before the first restart; doubles per recent failure.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    /// Five restarts a minute, 50 ms doubling to at most 2 s.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            within: Duration::from_secs(60),
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart after this delay.
    Restart { after: Duration },
    /// Too many failures in the window: stop the supervisor.
    Escalate { failures_in_window: u32 },
}

/// Failure history of one supervisor (all its children share the budget, as
/// in OTP: a crash loop anywhere escalates).
#[derive(Clone, Debug)]
pub struct RestartTracker {
    policy: RestartPolicy,
    failures: VecDeque<Instant>,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        RestartTracker {
            policy,
            failures: VecDeque::new(),
        }
    }

    /// Record a failure at `now` and decide what to do.
    pub fn record_failure(&mut self, now: Instant) -> RestartDecision {
        while let Some(&first) = self.failures.front() {
            if now.saturating_duration_since(first) >= self.policy.within {
                self.failures.pop_front();
            } else {
                break;
            }
        }
        self.failures.push_back(now);
        let n = self.failures.len() as u32;
        if n > self.policy.max_restarts {
            return RestartDecision::Escalate {
                failures_in_window: n,
            };
        }
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        let after = self
            .policy
            .base_backoff
            .saturating_mul(factor)
            .min(self.policy.max_backoff);
        RestartDecision::Restart { after }
    }

    pub fn failures_in_window(&self) -> usize {
        self.failures.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max: u32, secs: u64) -> RestartPolicy {
        RestartPolicy {
            max_restarts: max,
            within: Duration::from_secs(secs),
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        }
    }

    #[test]
    fn restarts_until_the_intensity_limit_then_escalates() {
        let t0 = Instant::now();
        let mut t = RestartTracker::new(policy(3, 10));
        let d: Vec<RestartDecision> = (0..4)
            .map(|i| t.record_failure(t0 + Duration::from_secs(i)))
            .collect();
        assert_eq!(
            d[0],
            RestartDecision::Restart {
                after: Duration::from_millis(100)
            }
        );
        assert_eq!(
            d[1],
            RestartDecision::Restart {
                after: Duration::from_millis(200)
            }
        );
        assert_eq!(
            d[2],
            RestartDecision::Restart {
                after: Duration::from_millis(400)
            }
        );
        assert_eq!(
            d[3],
            RestartDecision::Escalate {
                failures_in_window: 4
            }
        );
    }

    #[test]
    fn old_failures_leave_the_window() {
        let t0 = Instant::now();
        let mut t = RestartTracker::new(policy(2, 10));
        t.record_failure(t0);
        t.record_failure(t0 + Duration::from_secs(1));
        // 10 s after the first failure it no longer counts.
        let d = t.record_failure(t0 + Duration::from_secs(10));
        assert!(matches!(d, RestartDecision::Restart { .. }), "{d:?}");
        assert_eq!(t.failures_in_window(), 2);
        let d = t.record_failure(t0 + Duration::from_secs(10));
        assert_eq!(
            d,
            RestartDecision::Escalate {
                failures_in_window: 3
            }
        );
    }

    #[test]
    fn backoff_is_capped() {
        let t0 = Instant::now();
        let mut t = RestartTracker::new(policy(100, 1000));
        let mut last = Duration::ZERO;
        for i in 0..40 {
            if let RestartDecision::Restart { after } =
                t.record_failure(t0 + Duration::from_millis(i))
            {
                assert!(after >= last || after == Duration::from_millis(500));
                assert!(after <= Duration::from_millis(500));
                last = after;
            }
        }
        assert_eq!(last, Duration::from_millis(500));
    }

    #[test]
    fn zero_budget_escalates_immediately() {
        let mut t = RestartTracker::new(policy(0, 10));
        assert!(matches!(
            t.record_failure(Instant::now()),
            RestartDecision::Escalate { .. }
        ));
    }
}
