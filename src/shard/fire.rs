//! A shard's fire pass: what is due leaves the wheel in deadline order, goes to the sinks, then
//! to the store (its record goes, or the timer is kept for a delivery step), within the pass's
//! budget.
//!
//! # The budget
//!
//! - **Fires.** At most the loop's budget ([`FIRE_BATCH`](super::FIRE_BATCH) on a shared
//!   thread, no limit alone), and never more than the store has room for (`Store::fire_room`;
//!   past it the rest is held back, [`More::HeldBack`]).
//! - **Time, on a shared thread.** A fire's cost depends on its sinks: a plain one is a few
//!   hundred nanoseconds, a webhook's builds a JSON body, signs it (HMAC) and spawns a task, a
//!   few microseconds; a full pass of those would hold the thread for tens of milliseconds.
//!   So the pass fires in chunks of [`CHECK_EVERY`] and ends once its slice of time
//!   (`cooperate`, about 200 µs) is over, leaving the rest due ([`More::Due`]); the loop then
//!   yields to the executor, as after any pass that did work, and fires on in the next one.
//!   The slice is only ever looked at between chunks, so a pass fires at least one chunk.
//!
//! # Cost
//!
//! Per fire: the wheel's removal, one clock read for `fired_at`, the histogram update and the
//! sinks. Per chunk on a shared thread: one clock read (`Instant::now`) and one call into the
//! table's poll, about 1% of a chunk of plain fires.

use super::{delivery, More, Shard, SPENT_MAX};
use crate::clock::TimeSource;
use crate::cooperate::Slice;
use crate::sink::{webhook, Next};
use crate::timer::{FiredTimer, Firing};
use crate::units::UtcMicros;
use std::sync::atomic::Ordering;

/// Fires between two looks at the pass's slice: 32 webhook fires (a few microseconds each)
/// overrun a 200 µs slice by well under its length, and a look costs about as much as two
/// plain fires.
pub(super) const CHECK_EVERY: usize = 32;

impl<S: TimeSource> Shard<S> {
    /// Fires up to `budget` due timers (fewer when the store has less room for fires), ending
    /// early once `slice` is over; how many fired, and what is left.
    pub(super) fn fire_due(&mut self, budget: usize, slice: Option<Slice>) -> (u64, More) {
        let now = self.fire_time();
        let room = self.store.fire_room();
        let budget = budget.min(room);
        let chunk = if slice.is_some() {
            CHECK_EVERY
        } else {
            usize::MAX
        };
        let (mut fired, mut own_firings, mut left) = (0u64, 0u64, budget);
        let more = loop {
            let before = fired;
            let more = self.fire_chunk(now, left.min(chunk), &mut fired, &mut own_firings);
            left = left.saturating_sub((fired - before) as usize);
            if !more || left == 0 || slice.as_ref().is_some_and(Slice::is_over) {
                break more;
            }
        };
        if !self.deliveries.kept.is_empty() {
            self.settle_kept();
        }
        if fired > 0 {
            self.metrics
                .fired_total
                .fetch_add(own_firings, Ordering::Relaxed);
            self.metrics
                .pending
                .store(self.table.len() as u64, Ordering::Relaxed);
        }
        // Held back only when the store's room, not the loop's budget or the slice, ended it.
        let held = more && left == 0 && budget == room;
        self.store.fires_held(held);
        let more = match (more, held) {
            (false, _) => More::No,
            (true, false) => More::Due,
            (true, true) => More::HeldBack,
        };
        (fired, more)
    }

    /// The time a pass fires by: the mapped clock's, never ahead of the system clock.
    fn fire_time(&mut self) -> UtcMicros {
        let mut now = self.clock.now();
        if self
            .table
            .next_deadline()
            .is_some_and(|d| d <= now.as_micros())
            && self.clock.ahead_of_system(now)
        {
            // Something is due by the mapped clock, which leads the system clock: set the
            // lead back (counted as a set-back) before firing anything.
            self.clock.anchor();
            self.publish_gauges();
            now = self.clock.now();
            // Fire only what the system clock has reached, even when the anchor did not
            // remove the whole lead (the system clock moved back again since its sample).
            if self.clock.ahead_of_system(now) {
                now = now.min(self.clock.source().realtime());
            }
        }
        now.as_micros()
    }

    /// Fires up to `n` timers due by `now`, counting them into `fired` (and their own firings
    /// into `own_firings`); whether more are due.
    fn fire_chunk(
        &mut self,
        now: UtcMicros,
        n: usize,
        fired: &mut u64,
        own_firings: &mut u64,
    ) -> bool {
        let (clock, metrics, quotas, id) = (&self.clock, &*self.metrics, &*self.quotas, self.id);
        let (sinks, store) = (&mut self.sinks, &mut self.store);
        let kept = &mut self.deliveries.kept;
        let spent = &mut self.spent.0;
        self.table.poll_at_most(now, n, |deadline, record| {
            let fired_at = clock.now();
            metrics
                .lateness
                .observe(fired_at.0.saturating_sub(deadline.as_nanos().0));
            *fired += 1;
            // A timer with a callback fires again for each step of its delivery; only its
            // own firing is a fired timer for the stream, the handler and the count.
            let firing = webhook::firing_of(record.timer.meta());
            let own = firing == Firing::Own;
            *own_firings += u64::from(own);
            let f = FiredTimer {
                shard: id,
                tenant: record.timer.tenant(),
                key: record.timer.key(),
                version: record.version,
                deadline,
                fired_at,
                meta: record.timer.meta(),
                payload: record.timer.payload(),
                firing,
            };
            let mut next = Next::Done;
            for sink in sinks.iter_mut() {
                let n = sink.fired(&f);
                if n != Next::Done {
                    next = n;
                }
            }
            if next == Next::Done {
                if own {
                    store.fired(&f);
                } else {
                    store.cancel(f.tenant, f.key, crate::store::Ack::None);
                }
                if let Some(q) = quotas.get(f.tenant) {
                    q.release();
                }
                if spent.len() < SPENT_MAX {
                    spent.push(record.timer);
                }
            } else {
                kept.push(delivery::Kept {
                    record,
                    deadline,
                    fired_at,
                    next,
                    firing,
                });
            }
        })
    }
}
