//! What approving a goal commits to, in words, for its card: how long the
//! standing approval lasts and how many fix tasks it covers, that its checks
//! run once at approval, and in which time zone its schedule is read. The
//! plan hash does not cover these (they are the daemon's policy, not the
//! plan), but the owner approves them all the same: a goal approved for
//! "0 9 * * *" fired 5.5 hours off after a restart in another zone.

/// The standing approval's limits (`approval.standing_ttl_minutes`, the
/// standing tokens' `max_executions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StandingLimits {
    pub ttl_minutes: u32,
    pub max_executions: u32,
}

/// "30 days", "12 hours", "90 minutes".
pub fn span(minutes: u32) -> String {
    let (n, unit) = if minutes >= 1440 && minutes.is_multiple_of(1440) {
        (minutes / 1440, "day")
    } else if minutes >= 60 && minutes.is_multiple_of(60) {
        (minutes / 60, "hour")
    } else {
        (minutes, "minute")
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// The card's line for a goal: `schedule` as the plan states it, `zone` the
/// scheduler reads cron times in.
pub fn goal_terms(schedule: Option<&str>, zone: &str, limits: StandingLimits) -> String {
    let when = match schedule.map(str::trim).filter(|s| !s.is_empty()) {
        None => "its checks run once when you approve".to_string(),
        Some(s) if s.starts_with('@') || s == "always_on" => {
            format!("its checks run once when you approve, then on `{s}`")
        }
        // Cron fields are wall-clock times: the zone decides when they fire.
        Some(s) => {
            format!("its checks run once when you approve, then on `{s}` in {zone} time")
        }
    };
    format!(
        "standing for {} from your answer, covering at most {} fix {}; {when}",
        span(limits.ttl_minutes),
        limits.max_executions,
        if limits.max_executions == 1 {
            "task"
        } else {
            "tasks"
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: StandingLimits = StandingLimits {
        ttl_minutes: 30 * 24 * 60,
        max_executions: 100,
    };

    #[test]
    fn a_goal_card_says_how_long_how_often_and_in_which_zone() {
        assert_eq!(
            goal_terms(Some("0 9 * * *"), "Europe/Vienna", LIMITS),
            "standing for 30 days from your answer, covering at most 100 fix tasks; its \
             checks run once when you approve, then on `0 9 * * *` in Europe/Vienna time"
        );
        assert_eq!(
            goal_terms(Some("@every 10m"), "Europe/Vienna", LIMITS),
            "standing for 30 days from your answer, covering at most 100 fix tasks; its \
             checks run once when you approve, then on `@every 10m`"
        );
        let short = StandingLimits {
            ttl_minutes: 90,
            max_executions: 1,
        };
        assert_eq!(
            goal_terms(None, "UTC", short),
            "standing for 90 minutes from your answer, covering at most 1 fix task; its \
             checks run once when you approve"
        );
    }

    #[test]
    fn spans_read_in_their_largest_whole_unit() {
        for (m, want) in [
            (1, "1 minute"),
            (59, "59 minutes"),
            (60, "1 hour"),
            (150, "150 minutes"),
            (720, "12 hours"),
            (1440, "1 day"),
            (2880, "2 days"),
            (1500, "25 hours"),
        ] {
            assert_eq!(span(m), want, "{m}");
        }
    }
}
