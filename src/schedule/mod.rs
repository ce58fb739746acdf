//! Recurring schedules: when a cron expression or a fixed period fires, in any time zone,
//! under an explicit daylight-saving policy, and what fires after a downtime.
//!
//! This is the calculus, a leaf: it imports `units` and nothing else of the crate. The shard
//! and the API keep one armed timer per schedule, whose payload is the schedule's record
//! (`record.rs`), and ask this module what is due when it fires and when it fires next (the
//! `punctual schedules next` command asks it too); the contract below is what they rely on.
//!
//! | file | owns |
//! |---|---|
//! | `spec.rs` | the definition's JSON shape (`cron`, `every_ms`, `time_zone`, `start_at`, `end_at`, `max_occurrences`, `catch_up`, `dst`), defaults, limits |
//! | `dst.rs` | the daylight-saving policy: `gap` and `overlap` |
//! | `rule.rs` | a compiled [`Schedule`] (its rule, zone and bounds) and [`Schedule::next_after`] |
//! | `compile.rs` | validation of a definition into a [`Schedule`] |
//! | `error.rs` | [`SpecError`]: one variant per rule, each naming its field |
//! | `cron.rs` | a cron expression (parsed by croner) as sets of wall-clock values; the next matching civil second |
//! | `zoned.rs` | civil seconds to instants in a zone: gaps and overlaps under the policy |
//! | `record.rs` | [`ScheduleRecord`]: the definition and the cursor as the service keeps them, what one fire of the schedule's timer delivers and arms |
//! | `catch_up.rs` | the [`Cursor`] a schedule keeps, and [`Schedule::due`]: what fires now, what was missed, what is armed next |
//! | `cli.rs` | `punctual schedules next` |
//!
//! # The contract
//!
//! - **Occurrences** are UTC microseconds ([`UtcMicros`](crate::units::UtcMicros)). A cron
//!   fires on whole seconds of local time in its zone (jiff's bundled tz database, so every
//!   host computes the same); a period fires at `start_at + k × every_ms`, `k ≥ 0`, in
//!   absolute time.
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
mod record;
mod rule;
mod spec;
mod zoned;

pub use catch_up::{Cursor, Due, Fire, MAX_FIRES_PER_CALL};
pub use cron::MAX_CRON_LEN;
pub use dst::{DstSpec, Gap, Overlap};
pub use error::SpecError;
pub use record::{Recurrence, ScheduleRecord, ON_TIME, PARK_US};
pub use rule::{Occurrence, Schedule};
pub use spec::{
    whole, CatchUpPolicy, CatchUpSpec, Limits, ScheduleSpec, DEFAULT_WINDOW_MS, MAX_EVERY_MS,
};
