//! A cron expression as sets of local wall-clock values, and the search for the next local
//! second that matches them.
//!
//! Parsing is croner's (`CronParser`, Vixie-cron semantics: 5 fields, or 6 with seconds
//! first; names of months and days; `L`, `W`, `#`; `@hourly`-style macros; a day matches when
//! its day of month *or* its weekday does, unless one of them is `*`, or the weekday field
//! starts with `+`). Only croner's per-field matchers are used: its own next-occurrence
//! search works on zoned date-times and settles daylight-saving on its own terms, while this
//! module works on *civil* (zone-less) date-times, and `zoned.rs` maps them to instants under
//! the schedule's explicit policy.
//!
//! Cost: [`CronFields::first_match`] jumps field by field (a month that does not match costs
//! one step, a day one step (croner's day rule, asked once a date), an hour, a minute or a
//! second a few bit operations on the masks taken at parse), so a search across a year
//! of non-matching days is ~366 steps, and a search over the 400-year horizon is bounded by
//! ~150,000 steps for a day set that never matches (`30 2 30 2 *`, rejected at compile).

use croner::parser::{CronParser, Seconds, Year};
use croner::CronPattern;
use jiff::civil::{Date, DateTime};

/// The longest cron expression accepted, in bytes: far above any real one, and it bounds the
/// parser's work on hostile input.
pub const MAX_CRON_LEN: usize = 256;

/// A parsed cron expression: which local seconds it names.
#[derive(Debug, Clone)]
pub struct CronFields {
    /// croner's parse: the day rule (day of month, weekday, `L`, `W`, `#`) is asked of it.
    pattern: CronPattern,
    /// Bit `v` set when value `v` matches: the time of day is searched on these, a few bit
    /// operations a field.
    seconds: u64,
    minutes: u64,
    hours: u64,
    months: u64,
}

impl CronFields {
    /// Parses `expr`; the error is a sentence for the user (the caller prefixes `cron:`).
    pub fn parse(expr: &str) -> Result<CronFields, String> {
        if expr.len() > MAX_CRON_LEN {
            return Err(format!(
                "{} bytes is longer than the {MAX_CRON_LEN} a cron expression may have",
                expr.len()
            ));
        }
        if expr.trim().is_empty() {
            return Err(
                "empty; say `30 2 * * *` (5 fields) or `0 30 2 * * *` (6, with seconds first)"
                    .into(),
            );
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expr)
            .map_err(|e| format!("`{expr}` is not a cron expression: {e}"))?;
        let pattern = cron.pattern;
        let fields = CronFields {
            seconds: mask(&pattern, CronPattern::second_match, 0..=59),
            minutes: mask(&pattern, CronPattern::minute_match, 0..=59),
            hours: mask(&pattern, CronPattern::hour_match, 0..=23),
            months: mask(&pattern, CronPattern::month_match, 1..=12),
            pattern,
        };
        for (name, bits) in [
            ("second", fields.seconds),
            ("minute", fields.minutes),
            ("hour", fields.hours),
            ("month", fields.months),
        ] {
            if bits == 0 {
                return Err(format!("`{expr}`: its {name} field matches no {name}"));
            }
        }
        Ok(fields)
    }

    /// Whether the hour field names every hour (`*`, `*/1`, `0-23`): such an expression fires
    /// in every real hour, so both passes of a repeated hour fire whatever the overlap policy.
    pub fn every_hour(&self) -> bool {
        self.hours == (1 << 24) - 1
    }

    /// The first civil second `c` with `from <= c < until` that the expression names.
    /// `from` must be a whole second.
    pub fn first_match(&self, from: DateTime, until: DateTime) -> Option<DateTime> {
        let mut c = from;
        // The date whose month and day last matched: the day rule is asked once a date.
        let mut matched: Option<Date> = None;
        while c < until {
            let date = c.date();
            if matched != Some(date) {
                if !self.month(date) {
                    c = first_of_next_month(date)?.to_datetime(jiff::civil::Time::midnight());
                    continue;
                }
                if !self.day(date) {
                    c = date
                        .tomorrow()
                        .ok()?
                        .to_datetime(jiff::civil::Time::midnight());
                    continue;
                }
                matched = Some(date);
            }
            let (h, m, s) = (c.hour() as u32, c.minute() as u32, c.second() as u32);
            let Some(h2) = next_bit(self.hours, h) else {
                c = date
                    .tomorrow()
                    .ok()?
                    .to_datetime(jiff::civil::Time::midnight());
                continue;
            };
            if h2 != h {
                c = at(date, h2, 0, 0)?;
                continue;
            }
            let Some(m2) = next_bit(self.minutes, m) else {
                c = next_hour(date, h)?;
                continue;
            };
            if m2 != m {
                c = at(date, h, m2, 0)?;
                continue;
            }
            let Some(s2) = next_bit(self.seconds, s) else {
                c = next_minute(date, h, m)?;
                continue;
            };
            let found = at(date, h, m, s2)?;
            return (found < until).then_some(found);
        }
        None
    }

    fn month(&self, d: Date) -> bool {
        self.months & (1 << d.month()) != 0
    }

    fn day(&self, d: Date) -> bool {
        let weekday =
            croner::Weekday::from_days_from_sunday(d.weekday().to_sunday_zero_offset() as u32);
        self.pattern
            .day_match(d.year() as i32, d.month() as u32, d.day() as u32, weekday)
            .unwrap_or(false)
    }
}

/// One of croner's per-field matchers.
type Field = fn(&CronPattern, u32) -> Result<bool, croner::errors::CronError>;

/// The values in `values` that `field` matches, as bits.
fn mask(p: &CronPattern, field: Field, values: std::ops::RangeInclusive<u32>) -> u64 {
    values
        .filter(|&v| field(p, v).unwrap_or(false))
        .fold(0, |bits, v| bits | 1 << v)
}

/// The least value at or above `from` whose bit is set.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let above = bits.checked_shr(from)?;
    (above != 0).then(|| from + above.trailing_zeros())
}

fn at(date: Date, h: u32, m: u32, s: u32) -> Option<DateTime> {
    let time = jiff::civil::Time::new(h as i8, m as i8, s as i8, 0).ok()?;
    Some(date.to_datetime(time))
}

fn next_hour(date: Date, h: u32) -> Option<DateTime> {
    if h >= 23 {
        return Some(
            date.tomorrow()
                .ok()?
                .to_datetime(jiff::civil::Time::midnight()),
        );
    }
    at(date, h + 1, 0, 0)
}

fn next_minute(date: Date, h: u32, m: u32) -> Option<DateTime> {
    if m >= 59 {
        return next_hour(date, h);
    }
    at(date, h, m + 1, 0)
}

fn first_of_next_month(d: Date) -> Option<Date> {
    let (y, m) = if d.month() == 12 {
        (d.year().checked_add(1)?, 1)
    } else {
        (d.year(), d.month() + 1)
    };
    Date::new(y, m, 1).ok()
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
