//! A definition validated into a [`Schedule`]: each rule of `spec.rs`'s fields checked once,
//! in the order a user reads them, the first broken one answered as a [`SpecError`] naming its
//! field.

use super::cron::CronFields;
use super::error::SpecError;
use super::rule::{Rule, Schedule};
use super::spec::{Limits, ScheduleSpec, DEFAULT_WINDOW_MS, MAX_EVERY_MS};
use crate::units::UtcMicros;
use jiff::Timestamp;

impl ScheduleSpec {
    /// Validates the definition and compiles it. `created` stands in for an absent
    /// `start_at`. A cron that names no time that occurs (in the 400 years after its start,
    /// or before `end_at`) is refused here rather than never firing.
    pub fn compile(&self, created: UtcMicros, limits: &Limits) -> Result<Schedule, SpecError> {
        let rule = match (&self.cron, self.every_ms) {
            (None, None) => return Err(SpecError::NeitherRule),
            (Some(_), Some(_)) => return Err(SpecError::BothRules),
            (None, Some(ms)) => {
                if self.time_zone.is_some() {
                    return Err(SpecError::ZoneWithPeriod);
                }
                if ms < limits.min_every_ms {
                    return Err(SpecError::PeriodTooShort {
                        got: ms,
                        min: limits.min_every_ms,
                    });
                }
                if ms > MAX_EVERY_MS {
                    return Err(SpecError::PeriodTooLong {
                        got: ms,
                        max: MAX_EVERY_MS,
                    });
                }
                Rule::Every {
                    period_us: ms * 1_000,
                }
            }
            (Some(expr), None) => {
                let fields = CronFields::parse(expr).map_err(SpecError::Cron)?;
                Rule::Cron {
                    fields: Box::new(fields),
                    dst: self.dst.unwrap_or_default(),
                }
            }
        };
        let zone = match self.time_zone.as_deref() {
            None => jiff::tz::TimeZone::UTC,
            Some(name) => jiff::tz::db()
                .get(name)
                .map_err(|_| SpecError::UnknownZone(name.to_string()))?,
        };
        let start = match &self.start_at {
            Some(s) => instant("start_at", s)?,
            None => created,
        };
        let end = self
            .end_at
            .as_deref()
            .map(|s| instant("end_at", s))
            .transpose()?;
        if end.is_some_and(|e| e <= start) {
            return Err(SpecError::EndBeforeStart);
        }
        if self.max_occurrences == Some(0) {
            return Err(SpecError::NoOccurrences);
        }
        let catch_up = self.catch_up.unwrap_or_default();
        let window_ms = catch_up.window_ms.unwrap_or(DEFAULT_WINDOW_MS);
        if window_ms > limits.max_window_ms {
            return Err(SpecError::WindowTooLong {
                got: window_ms,
                max: limits.max_window_ms,
            });
        }
        let schedule = Schedule {
            rule,
            zone,
            start,
            end,
            max_occurrences: self.max_occurrences,
            catch_up: catch_up.policy,
            window_us: window_ms * 1_000,
        };
        if let (Some(expr), None) = (&self.cron, schedule.first()) {
            return Err(SpecError::NeverFires {
                expr: expr.clone(),
                when: if end.is_some() {
                    "between start_at and end_at"
                } else {
                    "in the 400 years after start_at"
                },
            });
        }
        Ok(schedule)
    }
}

/// An RFC 3339 time (with an offset) as UTC microseconds, rounded up to the microsecond so
/// that nothing is ever placed before it.
fn instant(field: &'static str, s: &str) -> Result<UtcMicros, SpecError> {
    let bad = || SpecError::BadTime {
        field,
        got: s.chars().take(64).collect(),
    };
    let ts: Timestamp = s.parse().map_err(|_| bad())?;
    if ts < Timestamp::UNIX_EPOCH {
        return Err(SpecError::BeforeEpoch {
            field,
            got: s.chars().take(64).collect(),
        });
    }
    let us = ts.as_microsecond() as u64;
    let us = if ts.subsec_nanosecond() % 1_000 > 0 {
        us + 1
    } else {
        us
    };
    Ok(UtcMicros(us))
}
