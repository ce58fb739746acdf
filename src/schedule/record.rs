//! A schedule as the service keeps it: its definition, verbatim, and where it stands (the
//! [`Cursor`], whether it is paused), in one JSON record that rides as the payload of the
//! schedule's one pending timer. The shard reads it when that timer fires, spends the
//! occurrences due ([`ScheduleRecord::fire`]) and writes it back with the next occurrence
//! armed; the API reads it for `GET` and writes it for `PUT`, `pause` and `resume`.
//!
//! ```json
//! {"def": {"every_ms": 60000, "payload": {"job": "sweep"}},
//!  "created_us": 1805000000000000, "sequence": 12, "through_us": 1805000720000000,
//!  "paused": false}
//! ```
//!
//! - `def` is the body of the `PUT` that made the schedule, as sent: the timing fields are
//!   read back through [`ScheduleSpec`] (which ignores `payload`, `callback` and `retry`), and
//!   compiled again at each fire against `created_us` (what an absent `start_at` means).
//! - `sequence` and `through_us` are the cursor: occurrences fired so far, and the instant
//!   through which every occurrence is spent. A replacing `PUT` keeps both (and `paused`), so
//!   that no occurrence fires twice and `sequence` keeps counting across definitions.
//!
//! The timer is armed at the next occurrence, or at most [`PARK_US`] ahead (a paused
//! schedule, or an occurrence past the wheel's range): a fire that finds nothing due only
//! arms it again.

use super::catch_up::{Cursor, Fire};
use super::error::SpecError;
use super::rule::{Occurrence, Schedule};
use super::spec::{Limits, ScheduleSpec};
use crate::units::UtcMicros;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::time::Duration;

/// How late an occurrence may fire and still be on time rather than missed (`catch_up.rs`):
/// a fire's lateness is microseconds, so only a downtime, a pause, a held store or a forward
/// clock jump makes one later than this.
pub const ON_TIME: Duration = Duration::from_secs(1);

/// The longest a schedule's timer waits before it looks again: a year, well inside the
/// wheel's range of ten.
pub const PARK_US: u64 = 365 * 86_400 * 1_000_000;

/// A schedule's durable record (see the module doc).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// The definition as sent.
    pub def: Box<RawValue>,
    /// When the schedule was first created: `start_at` when the definition has none.
    pub created_us: u64,
    /// Occurrences fired so far.
    pub sequence: u64,
    /// Every occurrence at or before this instant is spent.
    pub through_us: Option<u64>,
    #[serde(default)]
    pub paused: bool,
}

/// What one fire of a schedule's timer does: the occurrences to deliver now, how many the
/// catch-up policy passed over, and when the timer fires next (`None`: the schedule ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recurrence {
    pub fires: Vec<Fire>,
    pub skipped: u64,
    pub arm: Option<UtcMicros>,
}

/// The part of a definition that an occurrence's delivery carries.
#[derive(Deserialize)]
struct Carried<'a> {
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
}

/// An occurrence's body: what its delivery (webhook, stream entry, handler) carries as the
/// timer's payload.
#[derive(Serialize)]
struct OccurrenceBody<'a> {
    schedule: &'a str,
    occurrence_us: u64,
    sequence: u64,
    caught_up: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a RawValue>,
}

impl ScheduleRecord {
    /// A new schedule of definition `def` (JSON text), created at `now`, validated: its
    /// compiled form with it. Nothing before `now` is due.
    pub fn create(
        def: &str,
        now: UtcMicros,
        limits: &Limits,
    ) -> Result<(ScheduleRecord, Schedule), SpecError> {
        let def = RawValue::from_string(def.trim().to_string())
            .map_err(|e| SpecError::Definition(e.to_string()))?;
        let r = ScheduleRecord {
            def,
            created_us: now.0,
            sequence: 0,
            through_us: Some(now.0),
            paused: false,
        };
        let s = r.schedule(limits)?;
        Ok((r, s))
    }

    /// This record replacing `prior` (a `PUT` over an existing schedule): the cursor and the
    /// pause carry over, the start of an `every_ms` without `start_at` too, so no occurrence
    /// already spent comes back and `sequence` counts on.
    pub fn replacing(mut self, prior: &ScheduleRecord) -> ScheduleRecord {
        self.sequence = prior.sequence;
        self.through_us = match (self.through_us, prior.through_us) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.paused = prior.paused;
        self
    }

    /// The timing fields of the definition.
    pub fn spec(&self) -> Result<ScheduleSpec, SpecError> {
        serde_json::from_str(self.def.get()).map_err(|e| SpecError::Definition(e.to_string()))
    }

    /// The definition compiled.
    pub fn schedule(&self, limits: &Limits) -> Result<Schedule, SpecError> {
        self.spec()?.compile(UtcMicros(self.created_us), limits)
    }

    pub fn cursor(&self) -> Cursor {
        Cursor {
            sequence: self.sequence,
            through: self.through_us.map(UtcMicros),
        }
    }

    /// When the schedule's timer should fire, seen at `now`: its first unspent occurrence,
    /// or `now` when that is past (a resume after missed ones, a `start_at` in the past: the
    /// timer's deadline is when its catch-up is judged, so what passed before `now` is judged
    /// missed, not on time), at most [`PARK_US`] ahead; [`PARK_US`] ahead while paused;
    /// `None` once the schedule has ended.
    pub fn armed_at(&self, s: &Schedule, now: UtcMicros) -> Option<UtcMicros> {
        let park = now.saturating_add_micros(PARK_US);
        if self.paused {
            return Some(park);
        }
        s.armed(self.cursor()).map(|o| o.at.max(now).min(park))
    }

    /// The next `n` occurrences from where the schedule stands.
    pub fn preview(&self, s: &Schedule, n: usize) -> Vec<Occurrence> {
        s.preview(self.cursor(), n)
    }

    /// The schedule's timer fired at `now`: spends what is due under the catch-up policy,
    /// moves the cursor, and says what to deliver and when to fire next. A paused schedule
    /// spends nothing: what it misses is left to the catch-up policy at its resume.
    pub fn fire(&mut self, s: &Schedule, now: UtcMicros) -> Recurrence {
        let park = now.saturating_add_micros(PARK_US);
        if self.paused {
            return Recurrence {
                fires: Vec::new(),
                skipped: 0,
                arm: Some(park),
            };
        }
        let due = s.due(self.cursor(), now, ON_TIME);
        self.sequence = due.cursor.sequence;
        self.through_us = due.cursor.through.map(|t| t.0);
        let arm = match (due.more, due.next) {
            (true, _) => Some(now),
            (false, Some(o)) => Some(o.at.min(park)),
            (false, None) => None,
        };
        Recurrence {
            fires: due.fires,
            skipped: due.skipped,
            arm,
        }
    }

    /// The body an occurrence of schedule `key` is delivered with: the schedule's key, the
    /// occurrence's nominal UTC time, its sequence, whether the catch-up policy fired it late,
    /// and the definition's `payload`.
    pub fn occurrence_body(&self, key: &str, fire: &Fire) -> Vec<u8> {
        let carried: Option<Carried<'_>> = serde_json::from_str(self.def.get()).ok();
        let body = OccurrenceBody {
            schedule: key,
            occurrence_us: fire.occurrence.at.0,
            sequence: fire.sequence,
            caught_up: fire.caught_up,
            payload: carried.and_then(|c| c.payload),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// `None` for bytes that are not such a record.
    pub fn decode(bytes: &[u8]) -> Option<ScheduleRecord> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
