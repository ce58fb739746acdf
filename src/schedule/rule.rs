//! A compiled schedule: its rule (a cron in a zone under a daylight-saving policy, or a
//! fixed period), its bounds, and the search for its next occurrence. `compile.rs` builds
//! one from a definition; `catch_up.rs` walks it after a downtime.
use super::cron::CronFields;
use super::dst::DstSpec;
use super::spec::CatchUpPolicy;
use super::zoned;
use crate::units::UtcMicros;
use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;
use std::fmt;

/// How far ahead a cron search looks from the instant it is asked about.
const HORIZON_S: i64 = 400 * 31_556_952;
/// The last second a search considers (9999-12-01T00:00:00Z), a month inside what the
/// date library represents, so that local times a day either side of it are still dates.
const LAST_S: i64 = 253_399_622_400;

/// A validated schedule, ready to answer when it fires. Built by [`ScheduleSpec::compile`](super::ScheduleSpec::compile).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub(super) rule: Rule,
    pub(super) zone: TimeZone,
    pub(super) start: UtcMicros,
    pub(super) end: Option<UtcMicros>,
    pub(super) max_occurrences: Option<u64>,
    pub(super) catch_up: CatchUpPolicy,
    pub(super) window_us: u64,
}

#[derive(Debug, Clone)]
pub(super) enum Rule {
    Cron {
        fields: Box<CronFields>,
        dst: DstSpec,
    },
    Every {
        period_us: u64,
    },
}

/// One occurrence: its nominal UTC instant and the zone's offset then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    pub at: UtcMicros,
    pub offset: Offset,
}

impl Occurrence {
    /// The local time, RFC 3339 with its offset (`2027-03-14T03:30:00-04:00`).
    pub fn local(&self) -> String {
        match Timestamp::from_microsecond(self.at.0 as i64) {
            Ok(ts) => ts.display_with_offset(self.offset).to_string(),
            Err(_) => String::new(),
        }
    }

    /// The UTC time, RFC 3339 (`2027-03-14T07:30:00Z`).
    pub fn utc(&self) -> String {
        match Timestamp::from_microsecond(self.at.0 as i64) {
            Ok(ts) => ts.to_string(),
            Err(_) => String::new(),
        }
    }
}

impl fmt::Display for Occurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.local())
    }
}

impl Schedule {
    /// The earliest occurrence strictly after `after`, or `None` when there is none (past
    /// `end_at`, or beyond the search's horizon). Ignores `max_occurrences`, which counts
    /// fires: see [`Schedule::due`].
    pub fn next_after(&self, after: UtcMicros) -> Option<Occurrence> {
        self.at_or_after(after.0.checked_add(1)?)
    }

    /// The first occurrence: the earliest at or after `start_at`.
    pub fn first(&self) -> Option<Occurrence> {
        self.at_or_after(self.start.0)
    }

    /// Up to `n` occurrences strictly after `after`, in order.
    pub fn upcoming(&self, after: UtcMicros, n: usize) -> Vec<Occurrence> {
        let mut out = Vec::with_capacity(n.min(1_024));
        let mut at = after;
        while out.len() < n {
            let Some(o) = self.next_after(at) else { break };
            debug_assert!(o.at > at, "not strictly increasing: {o:?} after {at:?}");
            at = o.at;
            out.push(o);
        }
        out
    }

    /// The zone local times are reckoned in (`UTC` for a period).
    pub fn time_zone(&self) -> &str {
        self.zone.iana_name().unwrap_or("UTC")
    }

    /// The instant no occurrence precedes.
    pub fn start(&self) -> UtcMicros {
        self.start
    }

    pub fn max_occurrences(&self) -> Option<u64> {
        self.max_occurrences
    }

    /// The earliest occurrence at or after `t` µs.
    pub(super) fn at_or_after(&self, t: u64) -> Option<Occurrence> {
        let t = t.max(self.start.0);
        let found = match &self.rule {
            Rule::Every { period_us } => {
                let k = (t - self.start.0).div_ceil(*period_us);
                let at = self.start.0.checked_add(k.checked_mul(*period_us)?)?;
                (at <= LAST_S as u64 * 1_000_000).then_some(Occurrence {
                    at: UtcMicros(at),
                    offset: Offset::UTC,
                })
            }
            Rule::Cron { fields, dst } => {
                // Candidates are whole seconds s >= ceil(t / 1e6), i.e. s > that less one.
                let after_s = i64::try_from(t.div_ceil(1_000_000)).ok()? - 1;
                let mut until_s = after_s.saturating_add(HORIZON_S).min(LAST_S);
                if let Some(end) = self.end {
                    until_s = until_s.min(i64::try_from(end.0 / 1_000_000).ok()? + 1);
                }
                zoned::next_cron(fields, &self.zone, *dst, after_s, until_s).map(|(s, offset)| {
                    Occurrence {
                        at: UtcMicros(s as u64 * 1_000_000),
                        offset,
                    }
                })
            }
        }?;
        match self.end {
            Some(end) if found.at > end => None,
            _ => Some(found),
        }
    }
}
