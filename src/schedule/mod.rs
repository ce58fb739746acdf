//! Recurring schedules: when a cron expression or a fixed period fires, in any time zone,
//! under an explicit daylight-saving policy, and what fires after a downtime.
//!
//! This is the calculus only, a leaf: it imports `units` and nothing else of the crate, and
//! no part of the service uses it yet (the `punctual schedules next` command does). The
//! shard, the store and the API will keep one armed occurrence per schedule and ask this
//! module for the next; the contract below is what they may rely on.
//!
//! | file | owns |
//! |---|---|
//! | `spec.rs` | the definition's JSON shape (`cron`, `every_ms`, `time_zone`, `start_at`, `end_at`, `max_occurrences`, `catch_up`, `dst`), defaults, limits |
//! | `dst.rs` | the daylight-saving policy: `gap` and `overlap` |
//! | `compile.rs` | validation of a definition into a [`Schedule`] |
//! | `error.rs` | [`SpecError`]: one variant per rule, each naming its field |
//! | `cron.rs` | a cron expression (parsed by croner) as sets of wall-clock values; the next matching civil second |
//! | `zoned.rs` | civil seconds to instants in a zone: gaps and overlaps under the policy |
//! | `catch_up.rs` | the [`Cursor`] a schedule keeps, and [`Schedule::due`]: what fires now, what was missed, what is armed next |
//! | `cli.rs` | `punctual schedules next` |
//!
//! # The contract
//!
//! - **Occurrences** are UTC microseconds ([`UtcMicros`]). A cron fires on whole seconds of
//!   local time in its zone (jiff's bundled tz database, so every host computes the same);
//!   a period fires at `start_at + k × every_ms`, `k ≥ 0`, in absolute time.
//! - [`Schedule::next_after`]`(t)` is the earliest occurrence **strictly after** `t`, never
//!   before `start_at`, never after `end_at`. Calling it again with its own answer gives a
//!   strictly later one: the occurrences are a strictly increasing sequence, each instant at
//!   most once (a gap-shifted time that lands on a time the cron names anyway is one).
//! - **Daylight saving** is the definition's `dst`: `gap` `shift` (default) or `skip`;
//!   `overlap` `first` (default), `last` or `both`; a cron whose hour field is `*` fires in
//!   every real hour, once each, through both changes. See `zoned.rs` for the walk.
//! - **Catch-up** ([`Schedule::due`]) fires each occurrence at most once: every occurrence at
//!   or before the cursor's `through` is spent, fired or passed over, so a backward clock
//!   step fires nothing again, and the policy (`skip`, `latest`, `all` within `window_ms`)
//!   decides only among occurrences that were missed.
//! - `max_occurrences` counts fires (the cursor's `sequence`); it ends the schedule.
//! - No input panics: bad definitions are [`SpecError`]s, and searches are bounded (400
//!   years of local time, year 9999 at the latest), answering `None` past them.
//!
//! # Cost
//!
//! A cron's `next_after` is three transition look-ups per segment visited plus a
//! field-by-field civil search; a period's is a division. `cargo bench --bench schedule`
//! (criterion medians, 2-core shared host under load, 2026-12-07): a period 39 ns; `30 2 * *
//! *` 0.5 µs in UTC and 1.0 µs in America/New_York; `*/10 * * * * *` in New York 0.7 µs (the
//! look-ups are most of it); `0 0 29 2 *` 12 µs (it walks the days of each February). `due` is `O(occurrences in the catch-up window)` for a cron and `O(fires)` for
//! a period, and fires at most [`MAX_FIRES_PER_CALL`] per call.

mod catch_up;
pub mod cli;
mod compile;
mod cron;
mod dst;
mod error;
mod spec;
mod zoned;

pub use catch_up::{Cursor, Due, Fire, MAX_FIRES_PER_CALL};
pub use cron::MAX_CRON_LEN;
pub use dst::{DstSpec, Gap, Overlap};
pub use error::SpecError;
pub use spec::{CatchUpPolicy, CatchUpSpec, Limits, ScheduleSpec, DEFAULT_WINDOW_MS, MAX_EVERY_MS};

use crate::units::UtcMicros;
use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;
use std::fmt;

/// How far ahead a cron search looks from the instant it is asked about.
const HORIZON_S: i64 = 400 * 31_556_952;
/// The last second a search considers (9999-12-01T00:00:00Z), a month inside what the
/// date library represents, so that local times a day either side of it are still dates.
const LAST_S: i64 = 253_399_622_400;

/// A validated schedule, ready to answer when it fires. Built by [`ScheduleSpec::compile`].
#[derive(Debug, Clone)]
pub struct Schedule {
    rule: Rule,
    zone: TimeZone,
    start: UtcMicros,
    end: Option<UtcMicros>,
    max_occurrences: Option<u64>,
    catch_up: CatchUpPolicy,
    window_us: u64,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron {
        fields: Box<cron::CronFields>,
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
    fn at_or_after(&self, t: u64) -> Option<Occurrence> {
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
