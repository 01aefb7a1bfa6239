//! Standard 5-field cron, as users and the spec write it (`*/30 * * * *`,
//! day of week 0–7 with 0 and 7 = Sunday, `MON-FRI`), evaluated in an IANA
//! time zone on top of the `cron` crate. Pure: no clock, no I/O.
//!
//! The `cron` crate (0.17) speaks Quartz dialect: six or seven fields with
//! seconds first, and days of the week numbered **1 = Sunday … 7 =
//! Saturday** (it rejects 0; see `cron::time_unit::DaysOfWeek` and the
//! `numeric_weekdays_of_the_cron_crate_are_quartz` test, which pins this).
//! Passing `1-5` through unchanged would fire Sunday–Thursday. So the
//! day-of-week field is parsed here into a set of weekdays and re-emitted as
//! an explicit Quartz list; the other four fields mean the same in both
//! dialects and are passed through (the crate validates them).
//!
//! Semantics kept from Vixie cron, which the crate does not share:
//! * **day-of-month OR day-of-week.** When both fields are restricted (neither
//!   starts with `*`), a day matches if *either* matches (`0 9 1 * MON` = the
//!   1st of the month and every Monday). The crate intersects them, so such an
//!   expression becomes two crate schedules and the earlier fire wins.
//! * **DST gap.** A wall-clock time that does not exist (spring forward) fires
//!   at the first instant after the gap, once (the crate would silently skip
//!   the day).
//! * **DST overlap.** A wall-clock time that occurs twice (fall back) fires
//!   once, at its first occurrence (the crate would fire twice). Jobs firing
//!   every few minutes therefore pause for the repeated hour once a year.
//!
//! Evaluation works on local wall-clock time: the crate is asked for the next
//! matching *naive* local time (presented to it as UTC, which has no DST), and
//! that wall time is then mapped to an instant in the configured zone.

use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use silas_core::config::{Config, ConfigError};
use silas_core::{Coded, ErrorCode, Timestamp};

/// Why a schedule or time zone was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("cron expression {expr:?}: {reason}")]
    Invalid { expr: String, reason: String },
    #[error("unknown time zone {0:?} (expected an IANA name such as \"Europe/Vienna\")")]
    TimeZone(String),
}

impl Coded for CronError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ECfgInvalid
    }
}

/// `scheduler.timezone`'s default: the host's own zone ([`host_timezone`]).
pub const LOCAL_TIMEZONE: &str = "local";

/// Parse an IANA time zone name (`scheduler.timezone`); `local` is the
/// host's zone.
pub fn parse_timezone(name: &str) -> Result<Tz, CronError> {
    let name = name.trim();
    if name.eq_ignore_ascii_case(LOCAL_TIMEZONE) {
        return Ok(host_timezone(
            std::env::var("TZ").ok().as_deref(),
            std::fs::read_to_string("/etc/timezone").ok().as_deref(),
            std::fs::read_link("/etc/localtime").ok().as_deref(),
        ));
    }
    Tz::from_str(name).map_err(|_| CronError::TimeZone(name.to_owned()))
}

/// The name of the zone `scheduler.timezone` resolves to (`local`
/// resolved), for cards; UTC for a name that does not resolve (the config
/// check refuses it before the daemon starts).
pub fn zone_name(setting: &str) -> String {
    parse_timezone(setting).map_or_else(|_| "UTC".to_owned(), |z| z.name().to_owned())
}

/// The host's zone, as the C library would pick it: `TZ` (an IANA name,
/// with or without the leading `:`), else `/etc/timezone` (Debian), else
/// the zone `/etc/localtime` links to; UTC when none names a known zone
/// (a POSIX rule string such as `CET-1CEST` is not an IANA name).
pub fn host_timezone(
    tz_env: Option<&str>,
    etc_timezone: Option<&str>,
    localtime_link: Option<&std::path::Path>,
) -> Tz {
    let from_link = localtime_link.and_then(|p| Some(zone_of(p.to_str()?)));
    let from_env = tz_env.map(zone_in_tz);
    [
        from_env.as_deref(),
        etc_timezone.map(str::trim),
        from_link.as_deref(),
    ]
    .into_iter()
    .flatten()
    .find_map(|name| Tz::from_str(name).ok())
    .unwrap_or(Tz::UTC)
}

/// `/usr/share/zoneinfo/Asia/Tokyo` → `Asia/Tokyo` (glibc takes a path).
fn zone_of(s: &str) -> String {
    s.find("zoneinfo/")
        .map_or(s, |i| &s[i + "zoneinfo/".len()..])
        .to_owned()
}

/// The zone name a `TZ` value gives (`:Asia/Tokyo`, a zoneinfo path).
fn zone_in_tz(tz: &str) -> String {
    zone_of(tz.trim().trim_start_matches(':'))
}

/// The `TZ` value when it is set and names no zone Silas reads — a POSIX
/// rule (`CET-1CEST`) or a typo (`Europe/Viena`). The C library may still
/// honour it, so the host's clock and Silas's schedules would disagree
/// without a word: `silas start` and `silas doctor` say so.
pub fn unread_tz(tz_env: Option<&str>) -> Option<String> {
    let tz = tz_env?.trim();
    (!tz.is_empty() && Tz::from_str(&zone_in_tz(tz)).is_err()).then(|| tz.to_owned())
}

/// What to say when `scheduler.timezone` is `local` and `TZ` is not read:
/// the zone cron times use instead, and how to name one.
pub fn unread_tz_warning(tz: &str, used: &str) -> String {
    format!(
        "TZ={tz:?} is not a time zone name Silas reads (an IANA name such as Europe/Vienna), so cron times are in {used} instead"
    )
}

/// The configuration keys only the scheduler's parsers (the time zone
/// database, cron) can check: `scheduler.timezone`, and
/// `suggestions.heartbeat_cron` when the heartbeat would run. Checked with
/// the rest by `config check` and by `start` before it touches anything.
pub fn config_errors(cfg: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if let Err(e) = parse_timezone(&cfg.scheduler.timezone) {
        errors.push(ConfigError::Invalid {
            key: "scheduler.timezone".into(),
            message: e.to_string(),
        });
    }
    if cfg.scheduler.enabled
        && cfg.suggestions.enabled
        && let Err(e) = CronExpr::parse(&cfg.suggestions.heartbeat_cron)
    {
        errors.push(ConfigError::Invalid {
            key: "suggestions.heartbeat_cron".into(),
            message: e.to_string(),
        });
    }
    errors
}

/// A parsed standard 5-field cron expression.
#[derive(Clone, Debug)]
pub struct CronExpr {
    source: String,
    /// One crate schedule, or two when day-of-month and day-of-week are both
    /// restricted (Vixie's OR rule).
    schedules: Vec<cron::Schedule>,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Longest DST gap searched when mapping a non-existent wall time (zones
/// shift by at most two hours; three leaves a margin).
const MAX_GAP_MINUTES: i64 = 180;
/// Candidates examined per `next_after` call before giving up (each DST
/// overlap discards at most one hour of minute-level candidates).
const MAX_CANDIDATES: usize = 10_000;

impl CronExpr {
    /// Parse a standard expression: five fields (minute hour day-of-month
    /// month day-of-week) or one of `@hourly`, `@daily`, `@midnight`,
    /// `@weekly`, `@monthly`, `@yearly`, `@annually`.
    pub fn parse(expr: &str) -> Result<CronExpr, CronError> {
        let invalid = |reason: String| CronError::Invalid {
            expr: expr.to_owned(),
            reason,
        };
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@hourly" => "0 * * * *".to_owned(),
            "@daily" | "@midnight" => "0 0 * * *".to_owned(),
            "@weekly" => "0 0 * * 0".to_owned(),
            "@monthly" => "0 0 1 * *".to_owned(),
            "@yearly" | "@annually" => "0 0 1 1 *".to_owned(),
            _ => trimmed.to_owned(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        }
        // Minute, hour and day-of-month are numeric in standard cron; this
        // also keeps Quartz extensions (`?`, `L`, `W`) away from the crate.
        for f in &fields[..3] {
            if !f.chars().all(|c| c.is_ascii_digit() || "*,-/".contains(c)) {
                return Err(invalid(format!(
                    "{f:?}: only digits and * , - / are standard here"
                )));
            }
        }
        if fields[3].contains(['?', '#']) {
            return Err(invalid(format!("{:?}: not standard cron", fields[3])));
        }
        let (minute, hour, dom, month, dow) =
            (fields[0], fields[1], fields[2], fields[3], fields[4]);
        let dow_quartz = translate_day_of_week(dow).map_err(invalid)?;
        let dom_restricted = !dom.starts_with('*');
        let dow_restricted = !dow.starts_with('*');
        let specs = if dom_restricted && dow_restricted {
            vec![
                format!("0 {minute} {hour} {dom} {month} *"),
                format!("0 {minute} {hour} * {month} {dow_quartz}"),
            ]
        } else {
            vec![format!("0 {minute} {hour} {dom} {month} {dow_quartz}")]
        };
        let schedules = specs
            .iter()
            .map(|s| cron::Schedule::from_str(s).map_err(|e| invalid(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CronExpr {
            source: trimmed.to_owned(),
            schedules,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The crate-dialect schedules this expression became (for tests and
    /// diagnostics).
    pub fn quartz(&self) -> Vec<String> {
        self.schedules
            .iter()
            .map(|s| s.source().to_owned())
            .collect()
    }

    /// The first fire strictly after `after`, with wall-clock fields read in
    /// `tz`. `None` if the expression never fires again (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, tz: &Tz, after: Timestamp) -> Option<Timestamp> {
        let after_utc = after.datetime();
        let local_after = after_utc.with_timezone(tz).naive_local();
        self.schedules
            .iter()
            .filter_map(|s| next_for(s, tz, local_after, after_utc))
            .min()
            .map(Timestamp::from_datetime)
    }
}

/// The next instant of one crate schedule after `after_utc`.
fn next_for(
    schedule: &cron::Schedule,
    tz: &Tz,
    local_after: NaiveDateTime,
    after_utc: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    // Naive local wall times, presented to the crate as UTC (no DST there).
    let start = Utc.from_utc_datetime(&local_after);
    for wall in schedule.after(&start).take(MAX_CANDIDATES) {
        let naive = wall.naive_utc();
        let instant = match tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            // Fall back: the first occurrence only.
            LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
            // Spring forward: the first wall minute after the gap.
            LocalResult::None => match first_after_gap(tz, naive) {
                Some(t) => t,
                None => continue,
            },
        };
        if instant > after_utc {
            return Some(instant);
        }
    }
    None
}

fn first_after_gap(tz: &Tz, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
    (1..=MAX_GAP_MINUTES).find_map(|m| {
        tz.from_local_datetime(&(naive + Duration::minutes(m)))
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

/// One day-of-week value: `0`–`7` or a three-letter name → 0 (Sunday)..6.
fn day_value(v: &str) -> Result<u32, String> {
    let lower = v.to_ascii_lowercase();
    if let Some(i) = DAY_NAMES.iter().position(|n| *n == lower) {
        return Ok(i as u32);
    }
    match v.parse::<u32>() {
        Ok(n @ 0..=7) => Ok(n),
        _ => Err(format!(
            "day of week {v:?} is not 0-7 or a day name (SUN..SAT)"
        )),
    }
}

/// Translate a standard day-of-week field to the crate's numbering
/// (1 = Sunday … 7 = Saturday) as an explicit, sorted list; `*` stays `*`.
/// Lists, ranges (`1-5`, `MON-FRI`, `5-7`), steps (`*/2`, `1-5/2`, `1/2`)
/// and 7-as-Sunday are supported; descending ranges are refused.
pub fn translate_day_of_week(field: &str) -> Result<String, String> {
    if field == "*" {
        return Ok("*".to_owned());
    }
    let mut days = [false; 7];
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 =
                    s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        format!("step {s:?} in {part:?} is not a positive number")
                    })?;
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (0, 6)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (day_value(a)?, day_value(b)?);
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
            (a, b)
        } else {
            let a = day_value(range)?;
            // `a/step` means "from a to the end of the week".
            (a, if part.contains('/') { 7 } else { a })
        };
        let mut d = lo;
        while d <= hi {
            days[(d % 7) as usize] = true;
            d += step;
        }
    }
    let list: Vec<String> = days
        .iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    if list.is_empty() {
        return Err(format!("day of week {field:?} selects no day"));
    }
    Ok(list.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Timelike, Weekday};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn utc() -> Tz {
        parse_timezone("UTC").unwrap()
    }

    /// The next `n` fires after `from`.
    fn fires(expr: &str, tz: &Tz, from: &str, n: usize) -> Vec<DateTime<Tz>> {
        let e = CronExpr::parse(expr).unwrap();
        let mut t = ts(from);
        let mut out = Vec::new();
        for _ in 0..n {
            t = e.next_after(tz, t).unwrap();
            out.push(t.datetime().with_timezone(tz));
        }
        out
    }

    #[test]
    fn numeric_weekdays_of_the_cron_crate_are_quartz() {
        // Pins the crate's own numbering: 1 = Sunday, 2 = Monday, 0 refused.
        // 2026-06-17 is a Wednesday.
        let after = Utc.with_ymd_and_hms(2026, 6, 17, 12, 0, 0).unwrap();
        let one = cron::Schedule::from_str("0 0 0 * * 1").unwrap();
        let two = cron::Schedule::from_str("0 0 0 * * 2").unwrap();
        assert_eq!(one.after(&after).next().unwrap().weekday(), Weekday::Sun);
        assert_eq!(two.after(&after).next().unwrap().weekday(), Weekday::Mon);
        assert!(cron::Schedule::from_str("0 0 0 * * 0").is_err());
    }

    #[test]
    fn weekday_mapping_table() {
        let cases = [
            ("0", "1"),
            ("7", "1"),
            ("1", "2"),
            ("6", "7"),
            ("1-5", "2,3,4,5,6"),
            ("MON-FRI", "2,3,4,5,6"),
            ("mon-fri", "2,3,4,5,6"),
            ("SAT,SUN", "1,7"),
            ("0,6", "1,7"),
            ("5-7", "1,6,7"),
            ("0-6", "1,2,3,4,5,6,7"),
            ("*/2", "1,3,5,7"),
            ("1-5/2", "2,4,6"),
            ("1/2", "2,4,6,1"),
            ("*", "*"),
        ];
        for (std, quartz) in cases {
            let mut want: Vec<u32> = quartz
                .split(',')
                .filter(|s| *s != "*")
                .map(|s| s.parse().unwrap())
                .collect();
            want.sort();
            let got = translate_day_of_week(std).unwrap();
            let mut got_v: Vec<u32> = got
                .split(',')
                .filter(|s| *s != "*")
                .map(|s| s.parse().unwrap())
                .collect();
            got_v.sort();
            assert_eq!(got_v, want, "{std}");
            assert_eq!(got == "*", quartz == "*", "{std}");
        }
        for bad in ["8", "FRI-MON", "5-1", "*/0", "funday", "", "1-"] {
            assert!(translate_day_of_week(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn monday_to_friday_fires_on_weekdays_only_across_a_week() {
        // From Saturday 2026-06-20 00:00 UTC: the next five fires are Mon–Fri.
        for expr in ["0 9 * * 1-5", "0 9 * * MON-FRI"] {
            let got = fires(expr, &utc(), "2026-06-20T00:00:00Z", 6);
            let days: Vec<Weekday> = got.iter().map(|d| d.weekday()).collect();
            assert_eq!(
                days,
                [
                    Weekday::Mon,
                    Weekday::Tue,
                    Weekday::Wed,
                    Weekday::Thu,
                    Weekday::Fri,
                    Weekday::Mon
                ],
                "{expr}"
            );
            assert!(got.iter().all(|d| d.hour() == 9 && d.minute() == 0));
        }
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        for expr in ["30 8 * * 0", "30 8 * * 7", "30 8 * * SUN", "@weekly"] {
            let got = fires(expr, &utc(), "2026-06-17T12:00:00Z", 2);
            assert!(got.iter().all(|d| d.weekday() == Weekday::Sun), "{expr}");
        }
    }

    #[test]
    fn every_thirty_minutes() {
        let got = fires("*/30 * * * *", &utc(), "2026-06-17T12:10:00Z", 3);
        let want = [
            "2026-06-17T12:30:00Z",
            "2026-06-17T13:00:00Z",
            "2026-06-17T13:30:00Z",
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!(Timestamp::from_datetime(g.with_timezone(&Utc)), ts(w));
        }
        // Strictly after: a fire time itself is not returned again.
        let e = CronExpr::parse("*/30 * * * *").unwrap();
        assert_eq!(
            e.next_after(&utc(), ts("2026-06-17T12:30:00Z")),
            Some(ts("2026-06-17T13:00:00Z"))
        );
    }

    #[test]
    fn wall_clock_fields_are_read_in_the_configured_zone() {
        let vienna = parse_timezone("Europe/Vienna").unwrap();
        let e = CronExpr::parse("0 9 * * *").unwrap();
        // Summer: CEST = UTC+2.
        assert_eq!(
            e.next_after(&vienna, ts("2026-06-17T00:00:00Z")),
            Some(ts("2026-06-17T07:00:00Z"))
        );
        // Winter: CET = UTC+1.
        assert_eq!(
            e.next_after(&vienna, ts("2026-01-14T00:00:00Z")),
            Some(ts("2026-01-14T08:00:00Z"))
        );
        // The weekday is the local one: 23:30 Sunday in New York is Monday UTC.
        let ny = parse_timezone("America/New_York").unwrap();
        let got = fires("30 23 * * 0", &ny, "2026-06-17T00:00:00Z", 1);
        assert_eq!(got[0].weekday(), Weekday::Sun);
        assert_eq!(got[0].with_timezone(&Utc).weekday(), Weekday::Mon);
    }

    #[test]
    fn dst_gap_fires_once_after_the_gap() {
        // Vienna springs forward on 2026-03-29: 02:00 CET → 03:00 CEST.
        let vienna = parse_timezone("Europe/Vienna").unwrap();
        let e = CronExpr::parse("30 2 * * *").unwrap();
        // 02:30 does not exist that day: fires at 03:00 CEST = 01:00 UTC.
        assert_eq!(
            e.next_after(&vienna, ts("2026-03-28T12:00:00Z")),
            Some(ts("2026-03-29T01:00:00Z"))
        );
        // Every-15-minute job: 02:00..02:45 collapse into one fire at 03:00,
        // then 03:15.
        let e = CronExpr::parse("*/15 * * * *").unwrap();
        let first = e.next_after(&vienna, ts("2026-03-29T00:50:00Z")).unwrap();
        assert_eq!(first, ts("2026-03-29T01:00:00Z"));
        assert_eq!(
            e.next_after(&vienna, first),
            Some(ts("2026-03-29T01:15:00Z"))
        );
    }

    #[test]
    fn dst_overlap_fires_once_at_the_first_occurrence() {
        // Vienna falls back on 2026-10-25: 03:00 CEST → 02:00 CET.
        let vienna = parse_timezone("Europe/Vienna").unwrap();
        let e = CronExpr::parse("30 2 * * *").unwrap();
        let first = e.next_after(&vienna, ts("2026-10-24T12:00:00Z")).unwrap();
        // 02:30 CEST = 00:30 UTC.
        assert_eq!(first, ts("2026-10-25T00:30:00Z"));
        // Not again at 02:30 CET (01:30 UTC): the next fire is the next day.
        assert_eq!(
            e.next_after(&vienna, first),
            Some(ts("2026-10-26T01:30:00Z"))
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_are_ored_when_both_restricted() {
        // The 1st of the month or any Monday. From Tue 2026-06-02.
        let got = fires("0 9 1 * MON", &utc(), "2026-06-02T00:00:00Z", 6);
        let dates: Vec<(u32, u32)> = got.iter().map(|d| (d.month(), d.day())).collect();
        assert_eq!(dates, [(6, 8), (6, 15), (6, 22), (6, 29), (7, 1), (7, 6)]);
        // With `*` in day-of-week only the day of month counts.
        let got = fires("0 9 1 * *", &utc(), "2026-06-02T00:00:00Z", 2);
        assert!(got.iter().all(|d| d.day() == 1));
    }

    #[test]
    fn rejects_what_is_not_standard_cron() {
        for bad in [
            "* * * *",
            "0 * * * * *",
            "61 * * * *",
            "0 24 * * *",
            "0 0 ? * MON",
            "0 0 L * *",
            "0 0 * * 8",
            "",
            "@reboot",
        ] {
            let err = CronExpr::parse(bad).unwrap_err();
            assert_eq!(err.code(), ErrorCode::ECfgInvalid, "{bad}");
        }
        assert!(parse_timezone("Mars/Olympus").is_err());
        assert!(parse_timezone("Europe/Vienna").is_ok());
        assert!(parse_timezone("local").is_ok());
        assert!(parse_timezone(" Local ").is_ok());
    }

    #[test]
    fn impossible_dates_never_fire() {
        let e = CronExpr::parse("0 0 30 2 *").unwrap();
        assert_eq!(e.next_after(&utc(), ts("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn shortcuts_expand() {
        assert_eq!(CronExpr::parse("@daily").unwrap().quartz(), ["0 0 0 * * *"]);
        assert_eq!(
            CronExpr::parse("@hourly").unwrap().quartz(),
            ["0 0 * * * *"]
        );
        assert_eq!(
            CronExpr::parse("0 9 * * 1-5").unwrap().quartz(),
            ["0 0 9 * * 2,3,4,5,6"]
        );
    }

    #[test]
    fn config_check_names_the_scheduler_keys() {
        use silas_core::config::{SchedulerConfig, SuggestionsConfig};
        assert!(config_errors(&Config::default()).is_empty());
        let bad = Config {
            scheduler: SchedulerConfig {
                timezone: "Mars/Olympus".into(),
                ..SchedulerConfig::default()
            },
            suggestions: SuggestionsConfig {
                heartbeat_cron: "every quarter hour".into(),
                ..SuggestionsConfig::default()
            },
            ..Config::default()
        };
        let lines: Vec<String> = config_errors(&bad).iter().map(|e| e.to_string()).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("scheduler.timezone: unknown time zone \"Mars/Olympus\""));
        assert!(lines[1].starts_with("suggestions.heartbeat_cron: cron expression"));
        // The heartbeat is not checked when it would not run.
        let off = Config {
            suggestions: SuggestionsConfig {
                enabled: false,
                ..bad.suggestions.clone()
            },
            ..Config::default()
        };
        assert!(config_errors(&off).is_empty());
    }

    #[test]
    fn the_host_zone_comes_from_tz_then_etc_timezone_then_the_localtime_link() {
        use std::path::Path;
        let link = Path::new("/usr/share/zoneinfo/America/New_York");
        assert_eq!(
            host_timezone(Some(":Asia/Tokyo"), Some("Europe/Vienna\n"), Some(link)),
            Tz::Asia__Tokyo
        );
        assert_eq!(
            host_timezone(None, Some("Europe/Vienna\n"), Some(link)),
            Tz::Europe__Vienna
        );
        assert_eq!(host_timezone(None, None, Some(link)), Tz::America__New_York);
        assert_eq!(
            host_timezone(Some(":/usr/share/zoneinfo/Asia/Tokyo"), None, None),
            Tz::Asia__Tokyo
        );
        // A POSIX rule is not a zone name: the next source decides.
        assert_eq!(
            host_timezone(Some("CET-1CEST"), None, Some(link)),
            Tz::America__New_York
        );
        assert_eq!(
            host_timezone(None, Some("garbage"), Some(Path::new("/etc/nowhere"))),
            Tz::UTC
        );
        assert_eq!(host_timezone(None, None, None), Tz::UTC);
    }

    #[test]
    fn a_tz_silas_cannot_read_is_named() {
        for read in [
            None,
            Some(""),
            Some("Asia/Tokyo"),
            Some(":Europe/Vienna"),
            Some(":/usr/share/zoneinfo/Asia/Tokyo"),
            Some("UTC"),
        ] {
            assert_eq!(unread_tz(read), None, "{read:?}");
        }
        assert_eq!(unread_tz(Some("CET-1CEST")).as_deref(), Some("CET-1CEST"));
        assert_eq!(
            unread_tz(Some(" Europe/Viena ")).as_deref(),
            Some("Europe/Viena")
        );
        assert_eq!(
            unread_tz_warning("Europe/Viena", "UTC"),
            "TZ=\"Europe/Viena\" is not a time zone name Silas reads (an IANA name such as Europe/Vienna), so cron times are in UTC instead"
        );
    }
}
