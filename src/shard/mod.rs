//! A shard: one thread, one glommio `LocalExecutor` pinned to its core, owning its timer table,
//! its clock and the consuming end of its ring. Nothing here is shared or locked.
//!
//! # The loop
//!
//! ```text
//!   loop:
//!     load and drop the partitions the node's loop handed over (a cluster of nodes only),
//!     drain the ring (at most the store's ops_per_pass ops and, sharing, ~200 µs), apply
//!     the sinks' follow-ups
//!     re-anchor the clock if 100 ms have passed (and let the sinks do their periodic chores)
//!     fire what is due, in deadline order (sharing its thread: at most FIRE_BATCH and ~200 µs)
//!     if it did any work or left more due, and shares its thread: yield to the executor, go
//!     round (a pass that only sorted overdue timers fired nothing, and still took ~1 ms)
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
//! # A fire, settled in the call that fires it
//!
//! The fire pass takes each due timer from the table, hands it to the sinks and answers the
//! table with its fate in the same call (`fire.rs`; the fate is `fate.rs`'s, which owns every
//! state of a timer's end, from its fire to its last quota release): retired (the store hears
//! of the fire or drops a step's record, the quota slot goes back), made a dead letter, or
//! kept. A kept timer (a webhook's attempt under way, or a delivery a cap holds back, due
//! again at its safety net) is written to the store and re-armed by the table in its own slab entry, under
//! its version and index entry, at the deadline and with the metadata its sink gave: a retry
//! is a timer, and keeping one is one call on the table, not a removal and an insert. The
//! wheel links a re-armed entry at its new deadline as the poll ends, so nothing fires twice
//! in one poll. What a delivery learns later (its outcome) comes back as a follow-up
//! (`Followups::send`), applied at the next pass (`delivery.rs` takes them, `fate.rs` applies
//! each).
//!
//! # Sharing the thread: cooperative, never preempted
//!
//! With HTTP connections or a store on its executor, the loop is one task among several, and
//! it gives the thread away itself, at three points:
//!
//! - after every pass that did work (drained ops or fired timers), so that the store task
//!   writes what the pass queued and the connections read their answers at once;
//! - while spinning, at least every `MAX_UNYIELDED` (`park.rs`), so that deadlines closer
//!   together than the spin window cannot keep the other tasks off the thread;
//! - in parks, which are `await`s.
//!
//! A pass is bounded (`Store::ops_per_pass` ops: 512 on a durable store, 4,096 in memory,
//! and a ~200 µs slice of time, `apply.rs`; `FIRE_BATCH` fires and a slice, `pass.rs` and `fire.rs`), so the other tasks never wait
//! for more than one bounded pass. The yield is a one-microsecond glommio timer (`cooperate`),
//! not `yield_now`: only a task that is *not* runnable lets glommio reap I/O completions before
//! its preemption timer.
//!
//! The other tasks on the thread give it back by the same rules. Why the yield is a reactor
//! timer and not `yield_now`, what glommio 0.9 does that this loop must avoid (parking its
//! thread with a task runnable), and the watchdog that bounds what is left: the runtime's
//! room, `crate::runtime`, tells that story once, with the test that guards each workaround.
//!
//! # Cross-thread wake-ups
//!
//! Every way another thread reaches a shard, and how it wakes it:
//!
//! - the ring (`ring`): producers push and, when the shard is parked, write one byte to its
//!   wake socket (a kernel wake-up, no waker involved); a sink's follow-up, from a task on the
//!   shard's own executor, wakes a parked shard the same way (`Followups::send`, the ring's
//!   `nudge`);
//! - replies (`op::Reply`, futures-channel's oneshot): the shard completes them, waking the
//!   caller's waker (a thread blocked in `Handle::schedule`, or an HTTP task on another
//!   shard's executor, through that executor's doorbell, or glommio's foreign-waker path
//!   where it has none);
//! - replies to this shard's tasks from other threads come through its doorbell
//!   (`crate::runtime::doorbell`), which the shard's thread answers itself;
//! - the watchdog wakes the shard loop's own waker (above);
//! - shutdown and draining raise flags and notify `event_listener::Event`s (the HTTP drain);
//!   the shard's stop flag is followed by a ring wake-up.
//!
//! # The files
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the shard's state and its loop ([`Shard::run`]) |
//! | `pass.rs` | what one pass may fire on a shared thread (`FIRE_BATCH`), what it left (`More`), and the spent list (`Spent`) |
//! | `park.rs` | parking: the park, the spin, the yield, and warming the wheel before either |
//! | `wakee.rs` | the wake socket a parked shard waits on (`Wakee`) and the thread's timer slack |
//! | `spin.rs` | the spin window, fixed or following the measured wake-up latency |
//! | `apply.rs` | the one `apply(op)` for every op from the ring, and the quota it settles |
//! | `defer.rs` | the writes held back behind a due timer whose record is not durable yet (`Deferred`) |
//! | `gate.rs` | which partitions the shard may act on: all, or on a cluster of nodes those it loaded and holds the lease of |
//! | `load_drop.rs` | a partition loaded or dropped at run time (a cluster of nodes), run a slice at a time |
//! | `purge.rs` | the purge and loads under way between two passes (`Purge`) |
//! | `fire.rs` | the fire pass: what is due, in deadline order, to the sinks, within its budget |
//! | `queue.rs` | a pull queue's message: its transitions (enqueued at its fire, received, acked, nacked, extended, expired, dead after `max_receives`), one function each |
//! | `ready.rs` | the pull queues' ready index, by tenant |
//! | `fate.rs` | a timer's end, one function per transition: its fate at its fire (`Settle::fate`: kept, retired or buried), the follow-ups' outcomes (delivered, retried, dead), re-drives and discards, the ways out of a purge, and the one quota release (`fate::release`) |
//! | `delivery.rs` | the sinks' follow-ups taken a slice at a time, the deliveries finished at a stop, the dead letters' room and listing |
//! | `dead.rs` | the dead-letter table |
//! | `recover.rs` | start-up recovery from the store, and the one insert of a stored record (`Loader`) |
//! | `occurrences.rs` | the occurrences of schedules loaded from the store, which their schedule must not arm again |
//! | `failure.rs` | what a panic does |
//!
//! The loop's file names only what the files without an `impl Shard` define (`pass.rs`,
//! `purge.rs`, `wakee.rs`, `dead.rs`, `spin.rs`, `gate.rs`, `defer.rs`); the files that add
//! to `Shard` import it from here, never the other way (`tests/architecture/`).
//!
//! # Cost
//!
//! Per pass: the ring's drain (`apply.rs`), the follow-ups (`delivery.rs`), one TSC read for
//! the anchor check, the fire pass (`fire.rs`, with its own cost model), the store's
//! `after_pass`. Per anchor (every 100 ms): one `Instant` read for the sinks' `tick`. Per
//! yield (only on a shared thread, only after work): one glommio timer and one reactor pass, a
//! few microseconds.

mod apply;
mod dead;
mod defer;
mod delivery;
mod failure;
mod fate;
mod fire;
pub(crate) mod gate;
mod list;
mod load_drop;
mod occurrences;
mod park;
mod pass;
mod purge;
mod queue;
mod ready;
mod recover;
pub(crate) mod spin;
mod terms;
mod wakee;

pub(crate) use failure::ShardFailure;
pub(crate) use ready::ShardQueues;
pub(crate) use wakee::{set_timer_slack_ns, Wakee};

use crate::clock::{Clock, TimeSource};
use crate::metrics::ShardMetrics;
use crate::page::Pager;
use crate::quota::Quotas;
use crate::ring::Ring;
use crate::runtime::cooperate::Slice;
use crate::sink::{Followup, Followups, Sink};
use crate::store::Store;
use crate::wheel::TimerTable;
use dead::DeadLetters;
use pass::{More, Spent, FIRE_BATCH, HELD_BACK_NAP};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    /// The shard whose executor runs on this thread; `None` on every other thread.
    static THIS_SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread is shard `id`'s from now on: its executor's thread, before its tasks run.
pub(crate) fn claim_thread(id: usize) {
    THIS_SHARD.with(|s| s.set(Some(id)));
}

/// The shard whose thread this is, if it is one's. (Two engines in one process each have a
/// shard 0: a handle of one used on the other's thread takes it for its own, which costs only
/// the copy that `PackedTimer::into_local` would have saved.)
pub(crate) fn on_thread() -> Option<usize> {
    THIS_SHARD.with(Cell::get)
}

pub(crate) struct Shard<S: TimeSource> {
    pub id: usize,
    pub ring: Arc<Ring>,
    pub table: TimerTable,
    pub clock: Clock<S>,
    pub spin: spin::SpinWindow,
    /// Where fired timers go, in this order, before the store hears of the fire.
    pub sinks: Vec<Box<dyn Sink>>,
    pub store: Box<dyn Store>,
    pub metrics: Arc<ShardMetrics>,
    pub stop: Arc<AtomicBool>,
    /// What the watchdog sees of this shard (`watchdog`).
    pub pulse: Arc<crate::runtime::watchdog::Pulse>,
    /// Every tenant's quota, shared by all shards (`quota`).
    pub quotas: Arc<Quotas>,
    /// Dead letters, the sinks' follow-ups, and the scratch of kept timers (`delivery`).
    pub deliveries: Deliveries,
    /// Fired timers whose memory is not freed yet.
    pub spent: Spent,
    /// Which partitions the shard may act on (`gate.rs`): all of them, but on a cluster of
    /// nodes.
    pub gate: gate::Gate,
    /// The purge of partitions being loaded or dropped, while it goes on in slices
    /// (`load_drop.rs`).
    pub purging: Option<purge::Purge>,
    /// Timers due beyond the horizon, on disk (`page`): with the journal, when it pages.
    pub pager: Option<Pager>,
    /// Writes held back behind a due timer whose record is not durable yet (`defer.rs`).
    pub deferred: defer::Deferred,
    /// The ready index of the pull queues, and their settings (`queue.rs`).
    pub queues: ShardQueues,
    /// Occurrences of schedules loaded from the store, until their schedule next fires
    /// (`recover.rs`, `fate.rs`).
    pub recovered_occurrences: occurrences::RecoveredOccurrences,
}

/// The shard's delivery state: dead letters, the follow-ups its sinks hand it, and reusable
/// scratch.
#[derive(Default)]
pub(crate) struct Deliveries {
    pub dead: DeadLetters,
    /// Where the sinks hand their follow-ups (the shard's end of their [`Followups`]).
    pub inbox: Followups,
    /// Taken from the inbox, not yet applied, in the order they were sent.
    pub followups: VecDeque<Followup>,
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
                let drained = self.take_controls(cooperative.then(Slice::begin))
                    + self.drain(cooperative.then(Slice::begin))
                    + self.follow_up(cooperative.then(Slice::begin));
                let t = self.clock.source().ticks_now();
                if self.clock.anchor_due(t) {
                    self.clock.anchor();
                    self.publish_gauges();
                    let now = std::time::Instant::now();
                    for sink in self.sinks.iter_mut() {
                        sink.tick(now);
                    }
                }
                let (fired, more) = self.fire_due(fire_budget, cooperative.then(Slice::begin));
                let loaded = self.load_pages(cooperative.then(Slice::begin));
                self.store.after_pass();
                self.deliveries.inbox.flush_history();
                let freed = self.spent.after_pass(more);
                if cooperative && worked(drained + loaded, fired, freed, more) {
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
                    More::No if self.ring.has_work() || !self.spent.is_empty() => continue,
                    More::No if !self.deferred.is_empty() => {
                        // Writes wait for a timer's fire (`defer.rs`): look again soon.
                        self.nap(&mut wakee, HELD_BACK_NAP, &mut buf).await;
                    }
                    More::No => self.wait(&mut wakee, &mut buf).await,
                }
            }
            self.apply_all_deferred();
            self.finish_deliveries().await;
            self.store.close().await;
        }
        // No caller may wait for a shard that will not run again.
        self.ring.close();
        self.pulse.running();
        self.pulse.set_waker(None);
        self.ring.unpark();
    }

    /// A step of the page loads (`page`): the paged timers whose bucket comes within the
    /// horizon go into the wheel, until the pass's slice is over or a timer in the wheel is
    /// due, which then fires at the next pass rather than after the rest of the slice. How
    /// many went in.
    fn load_pages(&mut self, slice: Option<Slice>) -> usize {
        let Some(pager) = self.pager.as_mut() else {
            return 0;
        };
        let now = self.clock.now().as_micros();
        let next = self.table.next_deadline();
        let (table, clock, id) = (&mut self.table, &self.clock, self.id);
        let stop = || {
            slice.is_some_and(|s| s.is_over()) || next.is_some_and(|d| clock.now().as_micros() >= d)
        };
        let held = pager.held();
        let n = pager.load_step(now, stop, |timer, deadline, version| {
            // The capacity counted it while paged; its deadline was in range when paged, and
            // the wheel's range only grows. A slab whose index space is spent hands it back:
            // the pager holds it, and offers it again at the next step.
            if !table.fits(deadline) {
                return Err(timer);
            }
            if let Err(e) = table.insert_loaded(timer, deadline, version) {
                tracing::error!(shard = id, error = ?e, "paging: a loaded timer the wheel said it would take was refused; it is in the journal, and the next start loads it");
            }
            Ok(())
        });
        if pager.held() > held {
            tracing::error!(
                shard = id,
                held = pager.held(),
                "paging: the wheel cannot take loaded timers now (its slab is full); they stay paged, in memory, and are offered to it at every pass"
            );
        }
        n
    }

    pub fn publish_initial(&self) {
        self.publish_gauges();
    }

    /// The clock's figures and the wheel's occupancy, for exporters: at every anchor (every
    /// 100 ms), not per fire.
    fn publish_gauges(&self) {
        self.metrics
            .partitions_loaded
            .store(self.gate.loaded_count(), Ordering::Relaxed);
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
        if let Some(p) = &self.pager {
            let m = &self.metrics.store;
            let (write_errors, read_errors, damaged, on_disk) = p.stats();
            for (gauge, v) in [
                (&m.page_timers, p.len() as u64),
                (&m.page_buffered_bytes, p.buffered() as u64),
                (&m.page_disk_bytes, on_disk),
                (&m.page_write_errors_total, write_errors),
                (&m.page_read_errors_total, read_errors),
                (&m.page_damaged_total, damaged),
                (&m.page_lost_timers, p.lost()),
            ] {
                gauge.store(v, Ordering::Relaxed);
            }
        }
        let fallback = self.clock.kind() == crate::clock::SourceKind::ClockGettime;
        self.metrics
            .clock_fallback
            .store(u64::from(fallback), Ordering::Relaxed);
    }
}

/// Whether a pass did work, so that a shard sharing its thread yields before the next: it
/// drained ops, fired, freed fired timers' memory, or left more due. A pass can leave more due
/// having fired nothing: the wheel sorted a step of overdue timers that arrived out of order
/// (a millisecond each, dozens of them for a million), and the thread's other tasks must get
/// their turn between those steps too.
fn worked(drained: usize, fired: u64, freed: usize, more: More) -> bool {
    drained > 0 || fired > 0 || freed > 0 || more == More::Due
}

#[cfg(test)]
mod fate_tests;
#[cfg(test)]
mod load_drop_tests;
#[cfg(test)]
mod pass_tests;
#[cfg(test)]
mod tests;
