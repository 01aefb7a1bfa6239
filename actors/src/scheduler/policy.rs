//! The Scheduler's pure decisions: what a job's schedule string means
//! ([`Trigger`]), when it fires next, and what to do at startup about runs
//! that fell due while the daemon was down ([`plan_on_start`]). No clock and
//! no I/O: `now` is always an argument.
//!
//! **Missed runs (the policy).** A job remembers when it last fired (in
//! redb). At startup the scheduler asks, per job, whether a fire time passed
//! between that moment (or the job's creation, if it never fired) and now.
//! If so the runs are **coalesced**: jobs whose policy is
//! [`MissedRunPolicy::CatchUpOnce`] run exactly once, immediately, however
//! many fires were missed; jobs whose policy is [`MissedRunPolicy::Skip`] do
//! not run. Either way the job then continues on its normal schedule from
//! now, and the number of missed fires is reported (and audited). Nothing is
//! replayed run by run: a goal that was due six times during a night's
//! outage verifies once in the morning, not six times in a row. The same
//! rule applies when the process was merely slow (a fire is never followed
//! by a burst of the ones it overslept).

use std::time::Duration;

use chrono_tz::Tz;
use silas_core::Timestamp;

use super::cron_expr::{CronError, CronExpr};

/// When a job fires.
#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    /// A standard 5-field cron expression in the scheduler's time zone.
    Cron(CronExpr),
    /// `@every <n>s|m|h`: a fixed interval after the previous fire.
    Every(Duration),
    /// `@at <timestamp>`: once (e.g. a proactive token refresh).
    At(Timestamp),
    /// `always_on` (§3.3): no timer; the goal runs for as long as the daemon.
    AlwaysOn,
}

impl Trigger {
    /// Parse a schedule string: `always_on`, `@every 10m`, `@at
    /// 2026-01-01T00:00:00Z`, or standard cron (including `@daily` & co.).
    pub fn parse(s: &str) -> Result<Trigger, CronError> {
        let t = s.trim();
        let invalid = |reason: &str| CronError::Invalid {
            expr: s.to_owned(),
            reason: reason.to_owned(),
        };
        if t == silas_core::model::work::ALWAYS_ON {
            return Ok(Trigger::AlwaysOn);
        }
        if let Some(rest) = t.strip_prefix("@every ") {
            let rest = rest.trim();
            let (num, unit) = rest.split_at(rest.len().saturating_sub(1));
            let n: u64 =
                num.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    invalid("@every needs a positive number and a unit s, m or h")
                })?;
            let secs = match unit {
                "s" => n,
                "m" => n.saturating_mul(60),
                "h" => n.saturating_mul(3600),
                _ => return Err(invalid("@every unit must be s, m or h")),
            };
            return Ok(Trigger::Every(Duration::from_secs(secs)));
        }
        if let Some(rest) = t.strip_prefix("@at ") {
            return Timestamp::parse(rest.trim())
                .map(Trigger::At)
                .map_err(|_| invalid("@at needs a UTC timestamp such as 2026-01-01T00:00:00Z"));
        }
        CronExpr::parse(t).map(Trigger::Cron)
    }

    /// The canonical schedule string for a fixed interval.
    pub fn every(d: Duration) -> String {
        format!("@every {}s", d.as_secs().max(1))
    }

    /// The canonical schedule string for a one-shot job.
    pub fn at(t: Timestamp) -> String {
        format!("@at {t}")
    }

    /// The first fire strictly after `after`; `None` if it never fires again.
    pub fn next_after(&self, tz: &Tz, after: Timestamp) -> Option<Timestamp> {
        match self {
            Trigger::Cron(c) => c.next_after(tz, after),
            Trigger::Every(d) => {
                let d = chrono::Duration::from_std(*d).ok()?;
                Some(after.plus(d))
            }
            Trigger::At(t) => (*t > after).then_some(*t),
            Trigger::AlwaysOn => None,
        }
    }

    /// A one-shot trigger is finished after it fires.
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Trigger::At(_))
    }
}

/// What to do about fires missed while the daemon was down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissedRunPolicy {
    /// Run once now, however many fires were missed.
    CatchUpOnce,
    /// Do not run; wait for the next scheduled fire.
    Skip,
}

/// The decision for one job at startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartupPlan {
    /// Fires that fell due while down (counted up to [`MISSED_COUNT_CAP`]).
    pub missed: u32,
    /// Run once now (a coalesced catch-up).
    pub run_now: bool,
    /// The next regular fire after now.
    pub next: Option<Timestamp>,
}

/// Missed fires are counted up to this many (the count is only reported).
pub const MISSED_COUNT_CAP: u32 = 1000;

/// Decide what a job does at startup. `reference` is when it last fired, or
/// when it was registered if it never fired.
pub fn plan_on_start(
    trigger: &Trigger,
    tz: &Tz,
    reference: Timestamp,
    now: Timestamp,
    policy: MissedRunPolicy,
) -> StartupPlan {
    let mut missed = 0u32;
    let mut t = trigger.next_after(tz, reference);
    while let Some(due) = t {
        if due > now || missed >= MISSED_COUNT_CAP {
            break;
        }
        missed += 1;
        t = trigger.next_after(tz, due);
    }
    StartupPlan {
        missed,
        run_now: missed > 0 && policy == MissedRunPolicy::CatchUpOnce,
        next: trigger.next_after(tz, now),
    }
}

/// Jobs due at `now`: those whose next fire is not in the future.
pub fn is_due(next: Option<Timestamp>, now: Timestamp) -> bool {
    next.is_some_and(|n| n <= now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::cron_expr::parse_timezone;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn utc() -> Tz {
        parse_timezone("UTC").unwrap()
    }

    #[test]
    fn parses_every_kind_of_schedule() {
        assert_eq!(Trigger::parse("always_on").unwrap(), Trigger::AlwaysOn);
        assert_eq!(
            Trigger::parse("@every 10m").unwrap(),
            Trigger::Every(Duration::from_secs(600))
        );
        assert_eq!(
            Trigger::parse("@every 2h").unwrap(),
            Trigger::Every(Duration::from_secs(7200))
        );
        assert_eq!(
            Trigger::parse(&Trigger::every(Duration::from_secs(5))).unwrap(),
            Trigger::Every(Duration::from_secs(5))
        );
        let at = ts("2026-06-17T12:00:00Z");
        assert_eq!(Trigger::parse(&Trigger::at(at)).unwrap(), Trigger::At(at));
        assert!(matches!(
            Trigger::parse("*/30 * * * *").unwrap(),
            Trigger::Cron(_)
        ));
        for bad in [
            "@every 0m",
            "@every 5d",
            "@every m",
            "@at yesterday",
            "nope",
        ] {
            assert!(Trigger::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn next_fire_per_trigger() {
        let now = ts("2026-06-17T12:00:00Z");
        let every = Trigger::parse("@every 10m").unwrap();
        assert_eq!(
            every.next_after(&utc(), now),
            Some(ts("2026-06-17T12:10:00Z"))
        );
        let at = Trigger::At(ts("2026-06-17T13:00:00Z"));
        assert_eq!(at.next_after(&utc(), now), Some(ts("2026-06-17T13:00:00Z")));
        assert_eq!(at.next_after(&utc(), ts("2026-06-17T13:00:00Z")), None);
        assert!(at.is_one_shot());
        assert_eq!(Trigger::AlwaysOn.next_after(&utc(), now), None);
    }

    #[test]
    fn missed_runs_are_coalesced_into_one_catch_up() {
        // Every 30 minutes; last fired 08:00; down until 11:10: 6 fires
        // missed (08:30 … 11:00), one catch-up, next at 11:30.
        let t = Trigger::parse("*/30 * * * *").unwrap();
        let plan = plan_on_start(
            &t,
            &utc(),
            ts("2026-06-17T08:00:00Z"),
            ts("2026-06-17T11:10:00Z"),
            MissedRunPolicy::CatchUpOnce,
        );
        assert_eq!(
            plan,
            StartupPlan {
                missed: 6,
                run_now: true,
                next: Some(ts("2026-06-17T11:30:00Z")),
            }
        );
    }

    #[test]
    fn skip_policy_reports_but_does_not_run() {
        let t = Trigger::parse("*/15 * * * *").unwrap();
        let plan = plan_on_start(
            &t,
            &utc(),
            ts("2026-06-17T08:00:00Z"),
            ts("2026-06-17T09:00:00Z"),
            MissedRunPolicy::Skip,
        );
        assert_eq!(plan.missed, 4);
        assert!(!plan.run_now);
        assert_eq!(plan.next, Some(ts("2026-06-17T09:15:00Z")));
    }

    #[test]
    fn nothing_missed_means_no_catch_up() {
        let t = Trigger::parse("@every 1h").unwrap();
        let plan = plan_on_start(
            &t,
            &utc(),
            ts("2026-06-17T08:00:00Z"),
            ts("2026-06-17T08:59:59Z"),
            MissedRunPolicy::CatchUpOnce,
        );
        assert_eq!(plan.missed, 0);
        assert!(!plan.run_now);
        // Continues from now, not from the reference.
        assert_eq!(plan.next, Some(ts("2026-06-17T09:59:59Z")));
    }

    #[test]
    fn a_missed_one_shot_runs_once_and_is_finished() {
        let t = Trigger::At(ts("2026-06-17T09:00:00Z"));
        let plan = plan_on_start(
            &t,
            &utc(),
            ts("2026-06-17T08:00:00Z"),
            ts("2026-06-17T10:00:00Z"),
            MissedRunPolicy::CatchUpOnce,
        );
        assert_eq!(
            plan,
            StartupPlan {
                missed: 1,
                run_now: true,
                next: None
            }
        );
    }

    #[test]
    fn the_missed_count_is_capped() {
        let t = Trigger::parse("@every 1s").unwrap();
        let plan = plan_on_start(
            &t,
            &utc(),
            ts("2026-01-01T00:00:00Z"),
            ts("2026-06-17T00:00:00Z"),
            MissedRunPolicy::CatchUpOnce,
        );
        assert_eq!(plan.missed, MISSED_COUNT_CAP);
        assert!(plan.run_now);
    }

    #[test]
    fn always_on_never_misses_anything() {
        let plan = plan_on_start(
            &Trigger::AlwaysOn,
            &utc(),
            ts("2026-01-01T00:00:00Z"),
            ts("2026-06-17T00:00:00Z"),
            MissedRunPolicy::CatchUpOnce,
        );
        assert_eq!(
            plan,
            StartupPlan {
                missed: 0,
                run_now: false,
                next: None
            }
        );
    }

    #[test]
    fn due_is_inclusive() {
        let now = ts("2026-06-17T12:00:00Z");
        assert!(is_due(Some(now), now));
        assert!(is_due(Some(ts("2026-06-17T11:00:00Z")), now));
        assert!(!is_due(Some(ts("2026-06-17T12:00:01Z")), now));
        assert!(!is_due(None, now));
    }
}
