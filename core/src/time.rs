//! UTC timestamps. Every datetime in Silas is timezone-aware UTC (spec §3).
//!
//! [`Timestamp`] serialises in one fixed form so that hashes and signatures over
//! it are stable: `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` — microsecond precision (the
//! fraction is omitted when it is zero, as Pydantic does), always `Z`.
//! Parsing accepts any RFC 3339 string *with* an offset and converts it to UTC;
//! a naive datetime (no offset) is rejected.

use std::fmt;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A timezone-aware UTC instant with microsecond precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

/// Why a timestamp string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid timestamp {input:?}: expected RFC 3339 with a UTC offset (e.g. 2026-01-15T10:00:00Z)"
)]
pub struct TimestampError {
    pub input: String,
}

impl Timestamp {
    /// The current instant, truncated to microseconds.
    pub fn now() -> Self {
        Self::from_datetime(Utc::now())
    }

    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        Timestamp(dt.trunc_subsecs(6))
    }

    /// From microseconds since the Unix epoch (the storage key form).
    pub fn from_micros(micros: i64) -> Option<Self> {
        DateTime::<Utc>::from_timestamp_micros(micros).map(Timestamp)
    }

    pub fn as_micros(&self) -> i64 {
        self.0.timestamp_micros()
    }

    pub fn datetime(&self) -> DateTime<Utc> {
        self.0
    }

    pub fn parse(s: &str) -> Result<Self, TimestampError> {
        DateTime::parse_from_rfc3339(s)
            .map(|dt| Self::from_datetime(dt.with_timezone(&Utc)))
            .map_err(|_| TimestampError {
                input: s.to_string(),
            })
    }

    /// Saturating addition; far-future overflow clamps to the maximum instant.
    pub fn plus(&self, d: Duration) -> Self {
        Timestamp(
            self.0
                .checked_add_signed(d)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        )
    }

    pub fn minus(&self, d: Duration) -> Self {
        Timestamp(
            self.0
                .checked_sub_signed(d)
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.timestamp_subsec_micros();
        if micros == 0 {
            write!(f, "{}", self.0.format("%Y-%m-%dT%H:%M:%SZ"))
        } else {
            write!(f, "{}.{:06}Z", self.0.format("%Y-%m-%dT%H:%M:%S"), micros)
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(dt: DateTime<Utc>) -> Self {
        Self::from_datetime(dt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_whole_seconds_without_fraction() {
        let t = Timestamp::parse("2026-01-15T10:00:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-01-15T10:00:00Z");
    }

    #[test]
    fn formats_microseconds_and_truncates_nanoseconds() {
        let t = Timestamp::parse("2026-01-15T10:00:00.123456789Z").unwrap();
        assert_eq!(t.to_string(), "2026-01-15T10:00:00.123456Z");
        let t = Timestamp::parse("2026-01-15T10:00:00.5Z").unwrap();
        assert_eq!(t.to_string(), "2026-01-15T10:00:00.500000Z");
    }

    #[test]
    fn converts_offsets_to_utc() {
        let t = Timestamp::parse("2026-01-15T11:30:00+01:30").unwrap();
        assert_eq!(t.to_string(), "2026-01-15T10:00:00Z");
    }

    #[test]
    fn rejects_naive_datetimes() {
        assert!(Timestamp::parse("2026-01-15T10:00:00").is_err());
        assert!(Timestamp::parse("2026-01-15").is_err());
        let err = serde_json::from_str::<Timestamp>("\"2026-01-15T10:00:00\"").unwrap_err();
        assert!(err.to_string().contains("UTC offset"), "{err}");
    }

    #[test]
    fn serde_round_trip_and_micros() {
        let t = Timestamp::now();
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timestamp>(&s).unwrap(), t);
        assert_eq!(Timestamp::from_micros(t.as_micros()).unwrap(), t);
    }
}
