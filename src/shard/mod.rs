//! A shard: one thread, one glommio `LocalExecutor` pinned to its core, owning its timer table,
//! its clock and the consuming end of its ring. Nothing here is shared or locked.
//!
//! # The loop
//!
//! ```text
//!   loop:
//!     drain the ring (at most the store's ops_per_pass ops)
//!     re-anchor the clock if 100 ms have passed
//!     fire what is due, in deadline order (sharing its thread: at most FIRE_BATCH and ~200 µs)
//!     if it did any work and shares its thread: yield to the executor, go round
//!     if the ring has more or more is due: go round
//!     next = min(next deadline, next anchor)
//!     if next - now > spin window: park until `next - spin window` or a ring wake-up
//!     else: spin reading the TSC until `next` or ring work (bounded when sharing: see below)
//! ```
//!
//! The park is glommio's timer raced against a read of the ring's wake-up socket; a producer
//! writes a byte only when the shard is parked (see `ring`), so ingest does not wait for
//! glommio's preemption timer or its low-priority queues. A shard that runs nothing but this
//! loop parks in `ppoll` instead (`park::Wakee`).
//!
//! # Sharing the thread: cooperative, never preempted
//!
//! With HTTP connections or a store on its executor, the loop is one task among several, and
//! it gives the thread away itself, at three points:
//!
//! - after every pass that did work (drained ops or fired timers), so that the store task
//!   writes what the pass queued and the connections read their answers at once;
//! - while spinning, at least every `MAX_UNYIELDED`, so that deadlines closer together than
//!   the spin window cannot keep the other tasks off the thread;
//! - in parks, which are `await`s.
//!
//! A pass is bounded (`Store::ops_per_pass` ops: 512 on a durable store, 4,096 in memory;
//! `FIRE_BATCH` fires and a ~200 µs slice of time, `fire.rs`), so the other tasks never wait
//! for more than one bounded pass. The yield is a one-microsecond glommio timer (`cooperate`),
//! not `yield_now`: only a task that is *not* runnable lets glommio reap I/O completions before
//! its preemption timer.
//!
//! ## The glommio behaviours this design avoids
//!
//! glommio 0.9 can put its thread to sleep while a task is runnable. Its `LocalExecutor::run`
//! parks (`react` with no preemption timer) whenever `run_task_queues` ran nothing, and that
//! runs nothing when `need_preempt()` is already true at its first check, without looking at
//! whether a task queue is active (`executor/mod.rs`). `need_preempt()` means "the latency
//! ring's completion queue is not empty": `reactor.rs` compares that queue's head and tail
//! through the pointers `sys/uring.rs::preempt_pointers` hands it. The park then sleeps in
//! `io_uring_enter` unless its own reap finds a completion with a task behind it, a due glommio
//! timer, a foreign wake or a blocking-pool result. So the executor sleeps with work runnable
//! when a latency-ring completion *with no task behind it* lands between a round's I/O poll
//! (which empties that ring) and its first check, and nothing else is pending; it sleeps until
//! the next timer or I/O, which may be seconds away. What lands in the latency ring, and what
//! punctual does about each (no patched glommio; the upstream fix, "do not park while a task
//! queue is runnable", is in no release on crates.io):
//!
//! | trigger | punctual's side | guarded by |
//! |---|---|---|
//! | the preemption timer (armed at every poll) fires before the check: the poll took longer than the timer | glommio's default 100 ms is kept, never a shorter one (250 µs fired thousands of timers 0.1–2.7 s late); shards yield on their own, never relying on preemption. Left: a 100 ms stall of the thread inside that window | `tests/shard_cooperation.rs::shards_keep_firing_when_glommio_preempts_before_every_round` (a 20 µs timer: the trigger on almost every round) |
//! | the notifier `eventfd` read, completed by a foreign wake: glommio writes the `eventfd` when the executor is flagged asleep, and the flag goes stale (raised before each sleep, cleared only after one really taken), so a wake of an awake executor that already took the waker leaves a completion with no task | replies from other threads (the shards answering HTTP tasks) reach a shard's tasks through its `doorbell`: a main-ring read with a task behind it, no glommio foreign wake. the journal's I/O thread answers the same way (`store/journal/io.rs`). So do the name resolver's answers (`resolve.rs`). Left: a doorbell whose bell cannot be written (those wakes fall back to glommio's path, counted in `punctual_doorbell_fallback_wakes_total`), and the watchdog's own wakes, which exist to end such a sleep | `doorbell::tests::replies_from_another_thread_arrive_through_the_doorbell`, `doorbell::tests::a_bell_that_cannot_be_rung_strands_no_reply` |
//! | the same `eventfd`, written by glommio's blocking pool on each result, by tasks in `Latency::Matters` queues, or by its throughput timer (after `ring_depth` main-ring completions) | no latency-sensitive queue; the journal's I/O and name resolution run on threads of their own, not the blocking pool | — |
//! | the round's own `install_eventfd`, which re-arms that read and completes it at once when the counter is already set | as above | — |
//! | accept, connect and `recv` (peek, datagrams) completions: a waiting task is woken by the park's reap, so the park does not sleep; a cancelled one (a dropped accept at drain, a connect timeout) leaves a completion with no task | the shards' wake sockets and stream reads are main-ring polls (glommio's stream reads try a non-blocking read first, then poll) | — |
//!
//! Whatever is left is bounded, for every task on the thread: a shard that shares its thread
//! never parks for longer than `MAX_NAP` (2 ms), and its park's timer ends such a sleep; and
//! the `watchdog` wakes a shard loop still asleep 1 ms past its time from another thread.
//! A watchdog wake that finds the executor asleep in `io_uring_enter` is counted
//! (`punctual_executor_stalls_total`, with every wake in `punctual_shard_watchdog_wakes_total`),
//! and so, apart, is each of those where the shard's task had been runnable for 1 ms, because
//! what its park or yield waited on had woken it (`punctual_executor_runnable_sleeps_total`,
//! `watchdog::Noter`): that is the park bug itself, where the rest are timers or I/O that came
//! late to a sleeping executor.
//! A stall of another task that the nap ends is bounded but not counted.
//!
//! # Cross-thread wake-ups
//!
//! Every way another thread reaches a shard, and how it wakes it:
//!
//! - the ring (`ring`): producers push and, when the shard is parked, write one byte to its
//!   wake socket (a kernel wake-up, no waker involved);
//! - replies (`op::Reply`, futures-channel's oneshot): the shard completes them, waking the
//!   caller's waker (a thread blocked in `Handle::schedule`, or an HTTP task on another
//!   shard's executor through glommio's foreign-waker path);
//! - replies to this shard's tasks from other threads come through its doorbell
//!   (`crate::doorbell`), which the shard's thread answers itself;
//! - the watchdog wakes the shard loop's own waker (above);
//! - shutdown and draining raise flags and notify `event_listener::Event`s (the HTTP drain);
//!   the shard's stop flag is followed by a ring wake-up.
//!
//! # Cost
//!
//! Per fired timer: the wheel's removal, one clock read for `fired_at`, the histogram update
//! and the handler. Cleaning up after a fire waits until the burst is over: the index entry
//! goes after the pass (`TimerTable::poll_at_most`), the timer's memory after the last pass
//! of the burst (`Spent`). Per yield (only on a shared thread, only after work): one
//! glommio timer and one reactor pass, a few microseconds.
//!
//! # Applying an op, and the store
//!
//! Every op goes through one `Shard::apply`, whatever the store: the store admits the write
//! (or refuses it: 503), the tenant's quota admits a new key, the table changes at once, and
//! the store gets the write with the caller's reply, which it answers once the write is
//! durable (`store`). The in-memory store answers at once. Fires go to the sinks, then to the
//! store (the record goes). Before the loop, the store recovers the shard's timers
//! (`recover.rs`); ops that arrive meanwhile wait and are applied in order afterwards.
//!
//! # Deliveries
//!
//! A sink may keep a fired timer pending (a webhook under way) or make it a dead letter; its
//! deliveries' outcomes come back as follow-ups, which each pass applies before firing
//! (`delivery.rs`). A delivery task that finishes while the shard is parked wakes it through
//! the ring's `nudge`. The dead letters are the shard's own (`dead.rs`).

mod dead;
pub(crate) mod delivery;
mod failure;
mod fire;
mod park;
mod recover;
pub(crate) mod watchdog;

pub(crate) use failure::ShardFailure;
pub(crate) use park::{set_timer_slack_ns, Wakee};

use crate::clock::{Clock, TimeSource};
use crate::cooperate::Slice;
use crate::error::Error;
use crate::metrics::ShardMetrics;
use crate::op::{Cancelled, Op, Reply, Scheduled, TimerInfo};
use crate::quota::{QuotaSlot, Quotas};
use crate::ring::Ring;
use crate::sink::Sink;
use crate::store::{Ack, Store};
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, UtcNanos};
use crate::wheel::{TimerTable, UpsertError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Timers fired in one pass by a shard that shares its thread. A burst (a million timers due
/// at one instant) is fired over many passes, with the other tasks running in between; a
/// shard alone on its thread fires a burst in one go.
const FIRE_BATCH: usize = 4096;

/// Longest a shard that shares its thread spins without yielding to its other tasks: a slice.
const MAX_UNYIELDED: Duration = crate::cooperate::SLICE;

/// Longest a shard that shares its thread parks in one go. glommio 0.9 may sleep with a task
/// runnable (see the module doc); the park's timer is what ends such a sleep for the shard's
/// other tasks, so this bounds it. Cost: an idle shard wakes 500 times a second, a few
/// microseconds each.
const MAX_NAP: Duration = Duration::from_millis(2);

/// Fired timers' memory freed per pass once a burst is over (see [`Spent`]).
const FREE_BATCH: usize = 4096;

/// Fired timers held for freeing at most (1 MiB of pointers, kept once grown: growing it in
/// the middle of a burst would cost more in page faults than it saves). Past it, a fired
/// timer is freed at once, and a pass frees some even while more is due.
const SPENT_MAX: usize = 65_536;

/// How long a shard whose store holds as many fires as it may waits before it looks again.
const HELD_BACK_NAP: Duration = Duration::from_millis(1);

/// What a pass left to fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum More {
    /// Nothing due.
    No,
    /// More due: the pass's budget ran out.
    Due,
    /// More due, held back until the store has room for their writes.
    HeldBack,
}

pub(crate) struct Shard<S: TimeSource> {
    pub id: usize,
    pub ring: Arc<Ring>,
    pub table: TimerTable,
    pub clock: Clock<S>,
    pub spin: Duration,
    /// Where fired timers go, in this order, before the store hears of the fire.
    pub sinks: Vec<Box<dyn Sink>>,
    pub store: Box<dyn Store>,
    pub metrics: Arc<ShardMetrics>,
    pub stop: Arc<AtomicBool>,
    /// What the watchdog sees of this shard (`watchdog`).
    pub pulse: Arc<watchdog::Pulse>,
    /// Every tenant's quota, shared by all shards (`quota`).
    pub quotas: Arc<Quotas>,
    /// Dead letters and the scratch of kept timers and follow-ups (`delivery`).
    pub deliveries: delivery::Deliveries,
    /// Fired timers whose memory is not freed yet.
    pub spent: Spent,
}

/// The memory of fired timers, freed after the burst they fired in rather than between its
/// fires. A timer's packed bytes were allocated by the thread that scheduled it, so freeing
/// them on the shard is a cross-thread free (an atomic push onto the owning heap's list and a
/// cache miss on its page header): 15% of a million-timer burst's time when done per fire.
/// At most [`SPENT_MAX`] are held.
pub(crate) struct Spent(Vec<PackedTimer>);

impl Default for Spent {
    /// Room for one pass of fires from the start, so a first burst does not wait for it.
    fn default() -> Spent {
        Spent(Vec::with_capacity(FIRE_BATCH))
    }
}

impl Spent {
    /// After a pass: frees a batch once nothing more is due, or while the hold is full; how
    /// many it freed.
    fn after_pass(&mut self, more: More) -> usize {
        if more == More::No || self.0.len() >= SPENT_MAX {
            self.free(FREE_BATCH)
        } else {
            0
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Frees up to `n` timers; how many.
    fn free(&mut self, n: usize) -> usize {
        let n = n.min(self.0.len());
        self.0.truncate(self.0.len() - n);
        n
    }
}

impl<S: TimeSource> Shard<S> {
    /// Runs until `stop` is set. `wakee` is the socket the ring's producers write to.
    pub async fn run(mut self, mut wakee: Wakee) {
        let mut buf = [0u8; 64];
        let cooperative = wakee.cooperative();
        if cooperative {
            let waker =
                futures_lite::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone()))
                    .await;
            self.pulse.set_waker(Some(waker));
        }
        if self.recover().await {
            let fire_budget = if cooperative { FIRE_BATCH } else { usize::MAX };
            while !self.stop.load(Ordering::Acquire) {
                let drained = self.drain() + self.follow_up();
                let t = self.clock.source().ticks_now();
                if self.clock.anchor_due(t) {
                    self.clock.anchor();
                    self.publish_gauges();
                }
                let (fired, more) = self.fire_due(fire_budget, cooperative.then(Slice::begin));
                self.store.after_pass();
                let freed = self.spent.after_pass(more);
                if cooperative && (drained > 0 || fired > 0 || freed > 0) {
                    self.yield_now().await;
                    continue;
                }
                match more {
                    More::Due => continue,
                    More::HeldBack => {
                        // The store holds as many fires as it may: let it drain, look again.
                        self.nap(&mut wakee, HELD_BACK_NAP, &mut buf).await;
                        continue;
                    }
                    More::No if !self.ring.is_empty() || !self.spent.is_empty() => continue,
                    More::No => self.wait(&mut wakee, &mut buf).await,
                }
            }
            self.finish_deliveries().await;
            self.store.close().await;
        }
        // No caller may wait for a shard that will not run again.
        self.ring.close();
        self.pulse.running();
        self.pulse.set_waker(None);
        self.ring.unpark();
    }

    /// Parks until the next deadline (less the spin window) or a ring wake-up, or spins when
    /// the next deadline is closer than the spin window.
    async fn wait(&mut self, wakee: &mut Wakee, buf: &mut [u8]) {
        let now = self.clock.now();
        let next = self.next_wake();
        let wait = Duration::from_nanos(next.0.saturating_sub(now.0));
        if wait > self.spin {
            let mut nap = wait - self.spin;
            if wakee.cooperative() {
                // Bounds how long glommio may sleep with another task runnable (see the
                // module doc): the nap's timer ends any such sleep.
                nap = nap.min(MAX_NAP);
            }
            self.nap(wakee, nap, buf).await;
        } else if wakee.cooperative() {
            // Spin for at most MAX_UNYIELDED, then let the other tasks run and come back.
            if !self.spin_until(next, MAX_UNYIELDED) {
                self.yield_now().await;
            }
        } else {
            self.spin_until(next, Duration::MAX);
        }
    }

    /// Parks for `nap` or until a ring wake-up (unless work arrived meanwhile).
    async fn nap(&self, wakee: &mut Wakee, nap: Duration, buf: &mut [u8]) {
        if self.ring.prepare_park() {
            if wakee.cooperative() {
                self.pulse.expect_by(nap);
            }
            let park = std::pin::pin!(wakee.park(nap, buf));
            self.pulse.noted(park).await;
            self.pulse.running();
            self.ring.unpark();
        }
    }

    /// Hands the thread to the executor's other tasks and its I/O (see the module doc).
    async fn yield_now(&self) {
        self.pulse.expect_by(Duration::ZERO);
        self.pulse.noted(crate::cooperate::yield_to_reactor()).await;
        self.pulse.running();
    }

    /// The earlier of the next deadline and the next anchor, in UTC ns.
    fn next_wake(&self) -> UtcNanos {
        let anchor = self.clock.next_anchor_at();
        match self.table.next_deadline() {
            Some(d) => anchor.min(d.as_nanos()),
            None => anchor,
        }
    }

    /// Spins until the clock reaches `target` (true), or until the ring has work, the shard is
    /// stopping, or `limit` has passed (false).
    fn spin_until(&self, target: UtcNanos, limit: Duration) -> bool {
        let give_up = std::time::Instant::now().checked_add(limit);
        let mut turns = 0u32;
        while self.clock.now() < target {
            if !self.ring.is_empty() || self.stop.load(Ordering::Relaxed) {
                return false;
            }
            turns = turns.wrapping_add(1);
            // The limit is checked every 64 turns: an `Instant` read costs about as much as a
            // TSC read through the mapping.
            if turns % 64 == 0 && give_up.is_some_and(|g| std::time::Instant::now() >= g) {
                return false;
            }
            std::hint::spin_loop();
        }
        true
    }

    /// Applies up to one pass's worth of ops from the ring; how many.
    fn drain(&mut self) -> usize {
        let batch = self.store.ops_per_pass();
        let mut n = 0;
        while n < batch {
            let Some(op) = self.ring.pop() else { break };
            if n == 0 {
                self.store.begin_pass();
            }
            self.apply(op);
            n += 1;
        }
        if n > 0 {
            self.metrics
                .pending
                .store(self.table.len() as u64, Ordering::Relaxed);
        }
        n
    }

    /// Applies one op: the table changes at once, the store makes it durable and answers.
    pub(crate) fn apply(&mut self, op: Op) {
        match op {
            Op::Schedule {
                timer,
                deadline,
                reply,
                slot,
            } => {
                let scheduled = self
                    .store
                    .admit(timer.tenant())
                    .and_then(|()| self.admit_room(&timer))
                    .and_then(|()| self.admit_quota(&timer, slot))
                    .and_then(|slot| {
                        let version = self.table.next_version(self.clock.now().as_micros());
                        match self.table.insert_with_version(timer, deadline, version) {
                            Ok(u) => {
                                settle_quota(slot, u.replaced);
                                Ok((
                                    u.slot,
                                    Scheduled {
                                        version,
                                        deadline,
                                        replaced: u.replaced,
                                    },
                                ))
                            }
                            Err(e) => Err(self.upsert_error(e, deadline)),
                        }
                    });
                match scheduled {
                    Ok((at, s)) => {
                        if s.replaced {
                            self.forget_replaced(at);
                        }
                        let ack = reply.map_or(Ack::None, |tx| Ack::Schedule(tx, s));
                        match self.table.timer_at(at) {
                            Some(timer) => self.store.schedule(timer, &s, ack),
                            // Just inserted: always there.
                            None => ack.answer(Ok(())),
                        }
                    }
                    Err(e) => refuse_schedule(self.id, reply, e),
                }
            }
            Op::Cancel { timer, reply } => {
                if self.table.get(timer.identity()).is_none() {
                    let _ = reply.send(Ok(Cancelled::NotFound));
                    return;
                }
                if let Err(e) = self.store.admit(timer.tenant()) {
                    let _ = reply.send(Err(e));
                    return;
                }
                if let Some((deadline, record)) = self.table.cancel(timer.identity()) {
                    self.forget_in_sinks(&record.timer);
                    self.release_quota(record.timer.tenant());
                    let answer = Cancelled::Cancelled {
                        version: record.version,
                        deadline,
                    };
                    self.store.cancel(
                        record.timer.tenant(),
                        record.timer.key(),
                        Ack::Cancel(reply, answer),
                    );
                }
            }
            Op::Get { timer, reply } => {
                let info = self.table.get(timer.identity()).map(|v| TimerInfo {
                    deadline: v.deadline,
                    version: v.version,
                    meta: v.timer.meta().to_vec(),
                    payload: v.timer.payload().to_vec(),
                });
                let _ = reply.send(Ok(info));
            }
            Op::DeadList {
                tenant,
                after,
                through,
                limit,
                bodies,
                reply,
            } => {
                let range = (after.as_deref(), through.as_deref());
                let _ = reply.send(Ok(self.dead_list(&tenant, range, limit, bodies)));
            }
            Op::DeadRedrive { timer, reply } => self.redrive(timer, reply),
            Op::DeadDiscard { timer, reply } => self.discard(timer, reply),
        }
    }

    /// The quota slot a schedule of `timer` needs: the caller's, a fresh one for a new key of
    /// a tenant with a quota, or none (no quota, or a replacement). `QuotaExceeded` when a new
    /// key would pass the quota. Settle it with [`settle_quota`] once the table has answered;
    /// dropping it gives the slot back.
    fn admit_quota(
        &self,
        timer: &PackedTimer,
        slot: Option<QuotaSlot>,
    ) -> Result<Option<QuotaSlot>, Error> {
        let Some(quota) = self.quotas.get(timer.tenant()) else {
            let held = self.quotas.held_per_shard();
            if held > 0
                && self.table.len() + held >= self.table.capacity()
                && self.table.get(timer.identity()).is_none()
            {
                // The room left is held for tenants with a quota (`quota`).
                return Err(self.upsert_error(UpsertError::Capacity, UtcMicros(0)));
            }
            return Ok(slot);
        };
        if slot.is_some() || self.table.get(timer.identity()).is_some() {
            return Ok(slot);
        }
        QuotaSlot::reserve(quota)
            .map(Some)
            .ok_or_else(|| Error::QuotaExceeded {
                tenant: timer.tenant().to_string(),
                limit: quota.limit,
            })
    }

    /// A pending timer of `tenant` left the table (fired or cancelled), or a dead letter left.
    fn release_quota(&self, tenant: &str) {
        if let Some(q) = self.quotas.get(tenant) {
            q.release();
        }
    }

    fn upsert_error(&self, e: UpsertError, deadline: UtcMicros) -> Error {
        match e {
            UpsertError::Capacity => Error::CapacityExceeded {
                shard: self.id,
                capacity: self.table.capacity(),
            },
            UpsertError::OutOfRange => Error::DeadlineOutOfRange {
                deadline_us: deadline.0,
            },
        }
    }

    pub fn publish_initial(&self) {
        self.publish_gauges();
    }

    /// The clock's figures and the wheel's occupancy, for exporters: at every anchor (every
    /// 100 ms), not per fire.
    fn publish_gauges(&self) {
        for (gauge, n) in self.metrics.wheel_timers.iter().zip(self.table.occupancy()) {
            gauge.store(u64::from(n), Ordering::Relaxed);
        }
        let s = self.clock.stats();
        self.metrics
            .clock_offset_ns
            .store(s.offset_ns, Ordering::Relaxed);
        self.metrics
            .clock_steps_total
            .store(s.steps, Ordering::Relaxed);
        self.metrics
            .clock_set_backs_total
            .store(s.set_backs, Ordering::Relaxed);
        let fallback = self.clock.kind() == crate::clock::SourceKind::ClockGettime;
        self.metrics
            .clock_fallback
            .store(u64::from(fallback), Ordering::Relaxed);
    }
}

/// Settles a schedule's quota slot once the table applied it: a new timer keeps it, a
/// replacement gives it back (the replaced timer held one already).
fn settle_quota(slot: Option<QuotaSlot>, replaced: bool) {
    if let Some(slot) = slot {
        if !replaced {
            slot.keep();
        }
    }
}

/// Answers a schedule that was not applied; a detached one has no caller, so it is logged.
fn refuse_schedule(shard: usize, reply: Option<Reply<Result<Scheduled, Error>>>, e: Error) {
    match reply {
        Some(tx) => {
            let _ = tx.send(Err(e));
        }
        None => tracing::warn!(shard, error = %e, "detached schedule refused"),
    }
}

#[cfg(test)]
mod tests;
