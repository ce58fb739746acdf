//! What is wrong with a schedule's definition: one variant per rule, each naming the JSON
//! field the user has to change (the API answers these as `400`, message and all).

use thiserror::Error;

/// A schedule definition that cannot be compiled. `field()` names the JSON field at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    #[error("the definition is not a JSON object of a schedule: {0}")]
    Definition(String),
    #[error("cron and every_ms: give exactly one of them (a cron expression or a fixed period)")]
    NeitherRule,
    #[error("cron and every_ms: give only one of them, not both")]
    BothRules,
    #[error("cron: {0}")]
    Cron(String),
    #[error("cron: `{expr}` names no time that occurs {when}")]
    NeverFires { expr: String, when: &'static str },
    #[error("every_ms: {got} is under the least period allowed here, {min} ms")]
    PeriodTooShort { got: u64, min: u64 },
    #[error("every_ms: {got} is over the longest period allowed, {max} ms (100 years)")]
    PeriodTooLong { got: u64, max: u64 },
    #[error("time_zone: `{0}` is not a time zone of the IANA database (say `America/New_York`, `Europe/London` or `UTC`)")]
    UnknownZone(String),
    #[error("time_zone: valid with cron only; every_ms is a period in absolute time")]
    ZoneWithPeriod,
    #[error(
        "{field}: `{got}` is not an RFC 3339 time with an offset (say `2027-01-01T00:00:00Z`)"
    )]
    BadTime { field: &'static str, got: String },
    #[error("{field}: `{got}` is before 1970-01-01T00:00:00Z")]
    BeforeEpoch { field: &'static str, got: String },
    #[error("end_at: it is not after start_at")]
    EndBeforeStart,
    #[error("max_occurrences: it must be at least 1")]
    NoOccurrences,
    #[error("catch_up.window_ms: {got} is over the longest window allowed here, {max} ms")]
    WindowTooLong { got: u64, max: u64 },
}

impl SpecError {
    /// The JSON field the error is about (`catch_up.window_ms` for a nested one).
    pub fn field(&self) -> &'static str {
        match self {
            SpecError::Definition(_) => "definition",
            SpecError::NeitherRule | SpecError::BothRules => "cron",
            SpecError::Cron(_) | SpecError::NeverFires { .. } => "cron",
            SpecError::PeriodTooShort { .. } | SpecError::PeriodTooLong { .. } => "every_ms",
            SpecError::UnknownZone(_) | SpecError::ZoneWithPeriod => "time_zone",
            SpecError::BadTime { field, .. } | SpecError::BeforeEpoch { field, .. } => field,
            SpecError::EndBeforeStart => "end_at",
            SpecError::NoOccurrences => "max_occurrences",
            SpecError::WindowTooLong { .. } => "catch_up.window_ms",
        }
    }
}
