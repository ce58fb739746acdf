//! What fires now: a schedule's [`Cursor`], and [`Schedule::due`], which spends the
//! occurrences up to `now` under the catch-up policy and says which to arm next.
//!
//! An occurrence is **on time** when it is at most `on_time` old at `now` (the caller's bound
//! for an ordinary fire's lateness); an older one was **missed** (a downtime, a pause, a
//! forward clock jump). On-time occurrences always fire. Missed ones, under the policy:
//!
//! | policy | missed occurrences within `window_ms` of now | older ones |
//! |---|---|---|
//! | `skip` | none fires | none fires |
//! | `latest` (default) | the most recent fires once, unless an on-time one fires | none fires |
//! | `all` | each fires, in order ([`MAX_FIRES_PER_CALL`] a call; `more` says call again) | none fires |
//!
//! Walk-through, `every_ms: 60000` from 10:00, `latest`, one-hour window, `on_time` 1 s: the
//! cursor says `through` 10:05 (the 10:05 occurrence fired). The service is down until
//! 10:09:30. `due(now = 10:09:30)`: 10:06, 10:07, 10:08 and 10:09 are unspent and at or before
//! now; none is on time; the most recent, 10:09, fires (sequence + 1, `caught_up`), the other
//! three are `skipped`; `through` becomes 10:09:30 and `next` is 10:10, to arm. If the wall
//! clock then steps back to 10:09:00, `due` finds nothing after `through` and before now:
//! nothing fires again.
//!
//! The invariant that makes every occurrence fire at most once: an occurrence fires or is
//! passed over only if it is after the cursor's `through`, and `through` then moves past it
//! (to `now`, or to the last fire when `more`). The caller stores the new cursor in the same
//! write that records the fires.

use super::rule::{Occurrence, Rule, Schedule};
use super::spec::CatchUpPolicy;
use crate::units::UtcMicros;
use std::time::Duration;

/// The most occurrences one `due` call fires; `Due::more` asks for another call.
pub const MAX_FIRES_PER_CALL: usize = 1_024;
/// How many passed-over occurrences of a cron `due` counts one by one; beyond it, `skipped`
/// reads as this many more than the fires it counted (a period's are counted exactly).
const SKIP_COUNT_CAP: u64 = 10_000;

/// Where a schedule stands. The store keeps it with the definition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Occurrences fired so far (the API's `sequence`); the next fire is `sequence + 1`.
    pub sequence: u64,
    /// Every occurrence at or before this instant is spent: fired, or passed over by the
    /// catch-up policy. `None` before the first `due`.
    pub through: Option<UtcMicros>,
}

impl Cursor {
    /// The cursor of a schedule created (or replaced) at `created`: the occurrences at or
    /// before that instant are not missed ones, they were never due.
    pub fn new(created: UtcMicros) -> Cursor {
        Cursor {
            sequence: 0,
            through: Some(created),
        }
    }
}

/// One occurrence to fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    pub occurrence: Occurrence,
    /// 1 for the schedule's first fire, then 2, 3, …
    pub sequence: u64,
    /// Fired late by the catch-up policy rather than on time.
    pub caught_up: bool,
}

/// The answer of [`Schedule::due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// What fires now, in order.
    pub fires: Vec<Fire>,
    /// Missed occurrences passed over by the policy in this call.
    pub skipped: u64,
    /// The cursor after these fires: store it with them.
    pub cursor: Cursor,
    /// More occurrences are due (`all` over a long window): call again with the same `now`.
    pub more: bool,
    /// The occurrence to arm next, strictly after `now`; `None` when the schedule has ended
    /// (`end_at`, `max_occurrences`) or when `more`.
    pub next: Option<Occurrence>,
}

impl Schedule {
    /// Spends the occurrences after `cursor.through` and at or before `now`: which fire now,
    /// how many the policy passed over, the new cursor, and the next occurrence to arm.
    pub fn due(&self, cursor: Cursor, now: UtcMicros, on_time: Duration) -> Due {
        let on_time_from = now
            .0
            .saturating_sub(u64::try_from(on_time.as_micros()).unwrap_or(u64::MAX));
        let window_from = now.0.saturating_sub(self.window_us).min(on_time_from);
        let left = self
            .max_occurrences
            .map_or(usize::MAX, |m| m.saturating_sub(cursor.sequence) as usize);
        if left == 0 {
            return Due {
                fires: Vec::new(),
                skipped: 0,
                cursor,
                more: false,
                next: None,
            };
        }
        let cap = left.min(MAX_FIRES_PER_CALL);
        let run = |from: u64, cap: usize| self.run(cursor.through, from, now, cap);
        let picked: Vec<Occurrence> = match self.catch_up {
            CatchUpPolicy::Skip => run(on_time_from, cap),
            CatchUpPolicy::All => run(window_from, cap),
            CatchUpPolicy::Latest => {
                let on_time = run(on_time_from, cap);
                if on_time.is_empty() {
                    self.latest(cursor.through, window_from, on_time_from)
                        .into_iter()
                        .collect()
                } else {
                    on_time
                }
            }
        };
        let ended = picked.len() >= left;
        let more = !ended && picked.len() >= MAX_FIRES_PER_CALL;
        let through = match picked.last() {
            Some(last) if more || ended => last.at,
            _ => now.max(cursor.through.unwrap_or(now)),
        };
        let fires: Vec<Fire> = picked
            .iter()
            .zip(cursor.sequence + 1..)
            .map(|(o, sequence)| Fire {
                occurrence: *o,
                sequence,
                caught_up: o.at.0 < on_time_from,
            })
            .collect();
        let spent = self.count(cursor.through, through, fires.len() as u64 + SKIP_COUNT_CAP);
        let next = match (more, ended) {
            (false, false) => self.next_after(through),
            _ => None,
        };
        Due {
            skipped: spent.saturating_sub(fires.len() as u64),
            cursor: Cursor {
                sequence: cursor.sequence + fires.len() as u64,
                through: Some(through),
            },
            more,
            next,
            fires,
        }
    }

    /// The occurrence to arm for a schedule at `cursor`: the first unspent one, or `None` when
    /// the schedule has ended.
    pub fn armed(&self, cursor: Cursor) -> Option<Occurrence> {
        if self.max_occurrences.is_some_and(|m| cursor.sequence >= m) {
            return None;
        }
        self.unspent_from(cursor.through, 0)
    }

    /// The next `n` occurrences of a schedule at `cursor`, the armed one first, as many as
    /// `max_occurrences` leaves (the `next` of the API's `GET`).
    pub fn preview(&self, cursor: Cursor, n: usize) -> Vec<Occurrence> {
        let left = self
            .max_occurrences
            .map_or(n, |m| n.min(m.saturating_sub(cursor.sequence) as usize));
        let Some(first) = self.armed(cursor) else {
            return Vec::new();
        };
        let mut out = vec![first];
        out.extend(self.upcoming(first.at, left.saturating_sub(1)));
        out.truncate(left);
        out
    }

    /// The earliest unspent occurrence at or after `from`.
    fn unspent_from(&self, through: Option<UtcMicros>, from: u64) -> Option<Occurrence> {
        let floor = through.map_or(0, |t| t.0.saturating_add(1));
        self.at_or_after(from.max(floor))
    }

    /// Up to `cap` unspent occurrences in `[from, now]`, in order.
    fn run(
        &self,
        through: Option<UtcMicros>,
        from: u64,
        now: UtcMicros,
        cap: usize,
    ) -> Vec<Occurrence> {
        let mut out = Vec::new();
        let mut o = self.unspent_from(through, from);
        while let Some(x) = o.filter(|x| x.at <= now) {
            if out.len() >= cap {
                break;
            }
            out.push(x);
            o = self.next_after(x.at);
        }
        out
    }

    /// The latest unspent occurrence in `[from, before)`. Probes back from `before` over
    /// doubling spans, so a dense cron over a long window costs a few searches, not one per
    /// occurrence.
    fn latest(&self, through: Option<UtcMicros>, from: u64, before: u64) -> Option<Occurrence> {
        let end = before.checked_sub(1)?;
        let mut span = 1_000_000u64;
        loop {
            let lo = end.saturating_sub(span).max(from);
            if let Some(mut last) = self.unspent_from(through, lo).filter(|o| o.at.0 <= end) {
                while let Some(n) = self.next_after(last.at).filter(|o| o.at.0 <= end) {
                    last = n;
                }
                return Some(last);
            }
            if lo == from {
                return None;
            }
            span = span.saturating_mul(2);
        }
    }

    /// Occurrences after `through` and at or before `to`, counted up to `cap` for a cron.
    fn count(&self, through: Option<UtcMicros>, to: UtcMicros, cap: u64) -> u64 {
        let Some(first) = self.unspent_from(through, 0).filter(|o| o.at <= to) else {
            return 0;
        };
        if let Rule::Every { period_us } = self.rule {
            let to = self.end.map_or(to, |e| e.min(to));
            return (to.0 - first.at.0) / period_us + 1;
        }
        let mut n = 1;
        let mut at = first.at;
        while n < cap {
            match self.next_after(at).filter(|o| o.at <= to) {
                Some(o) => {
                    n += 1;
                    at = o.at;
                }
                None => break,
            }
        }
        n
    }
}
