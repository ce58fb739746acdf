//! Firing: what is due leaves the wheel in deadline order, goes to the sinks, then to the store
//! (its record goes, or the timer is kept for a delivery step), within the pass's budget; and
//! the spent list, where the memory of fired timers waits until the burst is over.
//!
//! # One call per fire
//!
//! The pass polls the table with `TimerTable::poll_keeping`: for each timer due, the table
//! hands it over, the sinks answer ([`Next`]), and the pass answers the table with the
//! timer's fate before the next one fires (`Settle::fate`, in `fate.rs`, which owns every
//! state of a timer's end and the one release of its quota slot).
//!
//! # The budget
//!
//! - **Fires.** At most the loop's budget (`FIRE_BATCH` in `pass.rs` on a shared thread, no
//!   limit alone), and never more than the store has room for (`Store::fire_room`; past it
//!   the rest is held back, [`More::HeldBack`]).
//! - **Time, on a shared thread.** A fire's cost depends on its sinks: a plain one is a few
//!   hundred nanoseconds, a webhook's builds a JSON body, signs it (HMAC) and spawns a task, a
//!   few microseconds; a full pass of those would hold the thread for tens of milliseconds.
//!   So the pass fires in chunks and ends once its slice of time (`cooperate`, about
//!   200 µs) is over, leaving the rest due ([`More::Due`]); the loop then yields to the
//!   executor, as after any pass that did work, and fires on in the next one. A webhook's
//!   fire also costs by its payload's size, so a chunk holds [`CHECK_EVERY`] fires of small
//!   timers but only as many as about [`CHECK_BYTES`] of payload: the pass fires one timer
//!   first, then sizes each chunk by the bytes of the last. The slice is only ever looked at
//!   between chunks, so a pass fires at least one timer.
//!
//! # A timer whose record is not durable yet
//!
//! A timer fires only once the store has made its record durable (`Store::may_fire`): a
//! replacement fired before its commit, then a crash, would bring back the version it
//! replaced, to fire again later. Such a timer is re-armed as it was, due again, and the pass
//! ends held back ([`More::HeldBack`]) so that the store's commit runs before the next look;
//! timers due after it may fire first. With the journal that is one group commit, about a
//! millisecond.
//!
//! # A schedule's timer
//!
//! A recurring schedule's one pending timer (`partition::schedule_key`) fires like any, never
//! before its deadline, but no sink sees it: it leaves the table in the poll, and after the
//! poll `Shard::recur` (`fate.rs`) arms the timers that deliver its due occurrences and the
//! schedule's timer again at its next one.
//!
//! # A timer this node may not fire
//!
//! On a cluster of nodes, a due timer of a partition the shard may not act on now (its lease
//! lapsed, or it is not loaded: `gate.rs`) is not fired: it leaves the wheel unfired, its
//! quota slot goes back, the sinks forget it, and the store hears nothing (its record stays for
//! the partition's holder: `Settle::unfired`). The partition is then not acted on until it is loaded again. One
//! exception: a due timer of the partition whose load is under way is set aside by the load
//! (`load_drop.rs`), and goes in again, still unfired, as the partition opens.
//!
//! # Cost
//!
//! Per fire: the wheel's removal (or re-arm), one clock read for `fired_at`, the histogram
//! update and the sinks; for a kept timer, its new bytes (one allocation) and its store
//! write. Per chunk on a shared thread: one clock read (`Instant::now`) and one call into the
//! table's poll, about 1% of a chunk of plain fires. Cleaning up after a fire waits until the
//! burst is over: the index entry goes after the pass (`TimerTable::poll_keeping`), the
//! timer's memory after the last pass of the burst (`Spent`, `pass.rs`).

use super::fate::Settle;
use super::pass::More;
use super::queue::{enqueued, message_fired};
use super::Shard;
use crate::clock::TimeSource;
use crate::partition::schedule_of;
use crate::queue::{Message, MessageState};
use crate::runtime::cooperate::Slice;
use crate::sink::{webhook, Next};
use crate::timer::{FiredTimer, Firing, PackedTimer};
use crate::units::{UtcMicros, UtcNanos};
use crate::wheel::Fate;
use std::sync::atomic::Ordering;

/// Fires between two looks at the pass's slice: 32 webhook fires (a few microseconds each)
/// overrun a 200 µs slice by well under its length, and a look costs about as much as two
/// plain fires.
pub(super) const CHECK_EVERY: usize = 32;

/// Bytes of payload and metadata fired between two looks at the slice, at most, about: a
/// webhook's fire reads its payload again, copies it into the request's body and signs it
/// (1–4 ns a byte), so 32 fires of 64 KiB were 2.6–8.5 ms before the first look. A pass
/// fires one timer first, then chunks sized by the bytes of the last one ([`chunk_after`]).
pub(super) const CHECK_BYTES: usize = 64 * 1024;

/// The fires of the next chunk, after a chunk fired `n` timers of `bytes` in all: as many
/// as hold [`CHECK_BYTES`] at that size, at least 1 and at most [`CHECK_EVERY`].
pub(super) fn chunk_after(n: u64, bytes: usize) -> usize {
    if n == 0 {
        return CHECK_EVERY;
    }
    let each = (bytes as u64 / n).max(1);
    (CHECK_BYTES as u64 / each).clamp(1, CHECK_EVERY as u64) as usize
}

impl<S: TimeSource> Shard<S> {
    /// Fires up to `budget` due timers (fewer when the store has less room for fires), ending
    /// early once `slice` is over; how many fired, and what is left.
    pub(super) fn fire_due(&mut self, budget: usize, slice: Option<Slice>) -> (u64, More) {
        let (now, trailing) = self.fire_time();
        let room = self.store.fire_room();
        let budget = budget.min(room);
        // Sharing the thread: one fire, then chunks sized by what the last one fired.
        let mut chunk = if slice.is_some() { 1 } else { usize::MAX };
        let (mut fired, mut own_firings, mut left) = (0u64, 0u64, budget);
        let mut unwritten = false;
        let more = loop {
            let before = fired;
            let mut bytes = 0;
            let more = self.fire_chunk(
                (now, trailing),
                left.min(chunk),
                (&mut fired, &mut own_firings),
                &mut bytes,
                &mut unwritten,
            );
            left = left.saturating_sub((fired - before) as usize);
            // A timer held for its record is due again at once: wait for the commit.
            if unwritten || !more || left == 0 || slice.as_ref().is_some_and(Slice::is_over) {
                break more || unwritten;
            }
            if slice.is_some() {
                chunk = chunk_after(fired - before, bytes);
            }
        };
        if fired > 0 {
            self.metrics
                .fired_total
                .fetch_add(own_firings, Ordering::Relaxed);
            self.metrics
                .pending
                .store(self.pending() as u64, Ordering::Relaxed);
        }
        // Held back only when the store's room, not the loop's budget or the slice, ended it.
        let held = more && left == 0 && budget == room;
        self.store.fires_held(held);
        let more = match (more, held || unwritten) {
            (false, _) => More::No,
            (true, false) => More::Due,
            (true, true) => More::HeldBack,
        };
        (fired, more)
    }

    /// The time a pass fires by, and how far the mapped clock trails it (added to every
    /// `fired_at` of the pass).
    ///
    /// While nothing is due within [`Clock::lag_allowance`] of the mapped clock, the pass
    /// fires nothing and makes no system call. Once something is, the pass reads the system
    /// clock after the mapping and fires by that reading: never early, since deadlines are
    /// CLOCK_REALTIME instants, and not late by the mapping's lag (about 1.4 µs, `clock`). A
    /// mapping found ahead of the system clock is set back first (counted as a set-back).
    fn fire_time(&mut self) -> (UtcMicros, u64) {
        let mut mapped = self.clock.now();
        let allowance = self.clock.lag_allowance().as_nanos() as u64;
        let near = self
            .table
            .next_deadline()
            .is_some_and(|d| d.as_nanos().0 <= mapped.0.saturating_add(allowance));
        if !near {
            return (mapped.as_micros(), 0);
        }
        let mut system = self.clock.source().realtime();
        if mapped > system {
            self.clock.anchor();
            self.publish_gauges();
            mapped = self.clock.now();
            // Read again after the anchor: the system clock may have moved back again since
            // its sample; the pass fires by this reading whatever the mapping says.
            system = self.clock.source().realtime();
        }
        (system.as_micros(), system.0.saturating_sub(mapped.0))
    }

    /// Fires up to `n` timers due by `now`, counting them into `fired` (their own firings
    /// into `own_firings`, their payloads' and metadata's bytes into `bytes`), each settled at
    /// its fire; whether more are due. `trailing` is how far the mapped clock trails the time
    /// the pass fires by (`fire_time`). A timer whose record the store has not made durable
    /// yet (`Store::may_fire`) is not fired: it is re-armed as it was, due again, and
    /// `unwritten` is set.
    fn fire_chunk(
        &mut self,
        (now, trailing): (UtcMicros, u64),
        n: usize,
        (fired, own_firings): (&mut u64, &mut u64),
        bytes: &mut usize,
        unwritten: &mut bool,
    ) -> bool {
        let (clock, metrics, id) = (&self.clock, &*self.metrics, self.id);
        let mut settle = Settle {
            id,
            store: &mut *self.store,
            quotas: &self.quotas,
            metrics,
            dead: &mut self.deliveries.dead,
            horizon: self.table.horizon(),
        };
        let inbox = &self.deliveries.inbox;
        let (sinks, spent, gate, ring, purging, queues) = (
            &mut self.sinks,
            &mut self.spent,
            &mut self.gate,
            &*self.ring,
            &mut self.purging,
            &mut self.queues,
        );
        // Schedules' timers that fired: their occurrences are armed after the poll, when the
        // table takes inserts again (`Shard::recur`, `fate.rs`).
        let mut recurring: Vec<(UtcMicros, PackedTimer)> = Vec::new();
        let more = self.table.poll_keeping(
            now,
            n,
            |deadline, record| {
                // Counted against the pass's budget like a fire: it left the wheel.
                *fired += 1;
                *bytes += record.timer.payload().len() + record.timer.meta().len();
                if !gate.may_fire(record.timer.tenant(), record.timer.key(), ring) {
                    let tenant = record.timer.tenant();
                    if purging
                        .as_mut()
                        .is_some_and(|p| p.set_aside(deadline, record))
                    {
                        // Of the partition being loaded: it goes in again, unfired, with the
                        // load's last step (`load_drop.rs`).
                        settle.set_aside(tenant);
                        return Fate::Done;
                    }
                    // Not this node's to fire now: it leaves unfired, its record stays in the
                    // store for the partition's holder (`gate.rs`).
                    settle.unfired(sinks, &record.timer);
                    return Fate::Done;
                }
                if !settle.store.may_fire(record.version) {
                    // Its record is not durable: a crash now would bring back what it
                    // replaced. Due again after the store's next commit.
                    *unwritten = true;
                    return Fate::Rearm(deadline, record.timer.clone());
                }
                if schedule_of(record.timer.key()).is_some() {
                    // A schedule's own timer: not a delivery, so no sink sees it.
                    recurring.push((deadline, record.timer.clone()));
                    return Fate::Done;
                }
                // The mapping, moved up to the reading the pass fires by: never before it, so
                // never before the deadline.
                let fired_at = UtcNanos(clock.now().0.saturating_add(trailing));
                metrics
                    .lateness
                    .observe(fired_at.0.saturating_sub(deadline.as_nanos().0));
                // A timer with a callback fires again for each step of its delivery; only its
                // own firing is a fired timer for the stream, the handler and the count.
                let firing = webhook::firing_of(record.timer.meta());
                *own_firings += u64::from(firing == Firing::Own);
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
                // A queued message changes state at its deadline; the sinks never see it.
                let message = Message::decode(f.meta);
                let queued_message = message.is_some();
                let next = match message {
                    Some(m) => {
                        if m.state != MessageState::Ready {
                            queues.settled(f.tenant, f.key);
                        }
                        message_fired(&queues.shared, &f, m)
                    }
                    None => {
                        let mut next = Next::Done;
                        for sink in sinks.iter_mut() {
                            let n = sink.fired(&f);
                            if n != Next::Done {
                                next = n;
                            }
                        }
                        match next {
                            Next::Done => enqueued(&queues.shared, &f).unwrap_or(Next::Done),
                            next => next,
                        }
                    }
                };
                if f.firing == Firing::Own && !queued_message {
                    inbox.record(|| history_of(&f, &next));
                }
                let fate = settle.fate(&f, &record.timer, next);
                let ready =
                    |meta| Message::decode(meta).is_some_and(|m| m.state == MessageState::Ready);
                let ready_after = matches!(&fate, Fate::Rearm(_, kept) if ready(kept.meta()));
                // Ready again: indexed once. Still ready (kept past a retention that grew):
                // its entry holds. No longer ready (its retention ended): its entry is stale.
                match (ready(f.meta), ready_after) {
                    (false, true) => queues.made_ready(f.tenant, f.key, f.version),
                    (true, false) => queues.went_stale(f.tenant),
                    _ => {}
                }
                fate
            },
            |timer| spent.keep(timer),
        );
        // An occurrence is judged on time against its schedule's deadline when that passed
        // while the shard ran and held its partition, however long the shard then took to get
        // to it (a burst of schedules due at once): only a downtime, a forward clock step or,
        // on nodes among others, a partition's time without a holder misses one.
        let unseen_before = self.clock.unseen_before().as_micros();
        for (deadline, timer) in recurring {
            let seen_from = unseen_before.max(self.gate.seen_from(timer.tenant(), timer.key()));
            let judged_at = match deadline >= seen_from {
                true => deadline.min(now),
                false => now,
            };
            self.recur(now, judged_at, &timer);
        }
        more
    }
}

/// The history's event for a timer's own fire (`crate::history`), from what its sinks
/// answered: a webhook's delivery under way, a message put on its tenant's queue, a dead
/// letter at once (a callback no longer allowed), or done.
fn history_of(f: &FiredTimer<'_>, next: &Next) -> crate::history::Event {
    use crate::history::Outcome;
    let outcome = match next {
        Next::Reschedule { meta, .. } if Message::decode(meta).is_some() => Outcome::Queued,
        Next::Reschedule { .. } => Outcome::Retrying,
        Next::Dead { .. } => Outcome::DeadLettered,
        Next::Done | Next::Wake => Outcome::Fired,
    };
    crate::history::Event {
        tenant: f.tenant.into(),
        key: f.key.into(),
        version: f.version,
        fire_at_us: f.deadline.0,
        at_us: f.fired_at.as_micros().0,
        attempt: None,
        outcome,
    }
}
