//! Loading and dropping a partition at run time, on a shard handed the lease holders (a node on
//! a Redis Cluster): the node's loop reads a partition once it gains its lease and the shard
//! loads it; the loop tells a lost lease and the shard drops the partition (`gate.rs` says
//! what the shard refuses meanwhile).
//!
//! # What each does
//!
//! - **Load** (`Control::Load`): the partition's timers and dead letters leave the shard (a
//!   purge, as for a drop), then its records go in as recovery inserts them (`Loader`), each
//!   under its stored version; then the gate opens it. The records are what the last holder
//!   left: nothing writes the partition between the acquisition and the load (other nodes are
//!   fenced, and this shard refuses the partition's ops until the load arrives).
//! - **Drop** (`Control::Drop`): the partition's timers leave the wheel and its dead letters the
//!   listing, their quota slots go back, and the sinks forget them (a delivery under way is not
//!   stopped, but its outcome finds no timer and changes nothing). Nothing fires and nothing is
//!   written: the records stay in Redis for the partition's next holder.
//!
//! # When, and what it costs
//!
//! The shard takes every control waiting (`Ring::take_controls`, at most one per partition)
//! at the start of a pass, before the ring's ops, so an op that arrived after a load is applied
//! after it. Every partition of the pass that may hold something is purged in one walk over
//! the table's slab: O(slab), each live entry's key hashed to its partition (a read of the
//! timer's bytes, often a cache miss). On a cooperative shard the walk goes in slices of about
//! `cooperate::SLICE` (200 µs), one a pass, as the fire pass does, so the shard's other tasks
//! and its ops of other partitions wait at most about a slice; without cooperation it goes in
//! one go. While it goes on ([`Purge`]):
//!
//! - the purged partitions are closed in the gate (`Gate::closing`): their ops are refused and
//!   their due timers leave unfired, so none of their timers enters the table behind the
//!   walk's cursor;
//! - a sink's follow-up of one of their timers is ignored (`fate.rs`): a re-armed entry
//!   could land below the cursor and escape the purge;
//! - no other control is taken off the ring until the purge's own controls are all applied
//!   (below): they wait there, in order, their partitions closed by the ring's waiting bit.
//!
//! The dead letters of the purged partitions leave the same way once the walk ends: a walk
//! over the dead letters by tenant and key, in slices on a cooperative shard
//! (`DeadLetters::purge_from`); no letter of a closed partition is filed meanwhile. It happens
//! only when a partition that was loaded is dropped or reloaded (a lost lease, a rebalance),
//! once for every control taken together; a partition never loaded is not looked for.
//!
//! Then the controls apply, by partition: a drop at once, a load's records a slice at a time
//! ([`Load`]), one partition after the other. The inserts cost what recovery's cost (a table
//! insert each, a few hundred nanoseconds at a million timers); the records' bytes were packed
//! on the loop's thread. Until the last of a partition's records is in, the partition stays
//! closed in the gate (its ops are refused, nothing of it fires) and its sinks' follow-ups
//! are ignored. One of its records that is due meanwhile (on arrival, or since) is set aside,
//! not fired and not dropped: it goes in with the load's last step, when the gate opens the
//! partition, and fires at the next pass. So that last step costs a table insert per record
//! of the partition that fell due while it loaded: few, unless the partition is taken over
//! long after its timers fell due.
//!
//! A process that dies while a load goes on loses nothing: a load and a purge write nothing to
//! the store, the records stay in Redis, and the next holder of the lease loads them.

use super::dead::PurgeCursor;
use super::fate;
use super::purge::{Load, Purge};
use super::recover::Loader;
use super::Shard;
use crate::clock::TimeSource;
use crate::op::Control;
use crate::partition::{partition_of, PARTITIONS};
use crate::runtime::cooperate::Slice;
use crate::sink::webhook;
use crate::units::UtcMicros;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Records a load inserts between two looks at the pass's slice, as many as the ring's drain
/// applies ops between its looks: an insert is a few hundred nanoseconds (a hash, an index
/// probe, a wheel link; a dead letter reads its metadata too), so 32 are about 10 µs and a
/// look (a clock read, about 20 ns) costs well under 1%. A few inserts take far longer,
/// read as the table's growth (a part of its index doubling, fresh pages): while a million
/// records went in, the longest step took 0.35–0.59 ms of CPU with 32, 0.44–0.82 ms with 64
/// (`load_drop_tests::load_steps_figure`, on a shared 2-vCPU host).
pub(super) const LOAD_CHECK: usize = 32;

impl<S: TimeSource> Shard<S> {
    /// Goes on with the purge or the loads under way, or takes the loads and drops waiting on
    /// the ring and starts theirs: the purge, then each control in turn. With a `slice`,
    /// returns when it is over (the rest goes on at the next pass); without one, in one go.
    /// How many controls were applied, or 1 while some are still under way (the pass did
    /// work).
    pub(super) fn take_controls(&mut self, slice: Option<Slice>) -> usize {
        let mut purge = match self.purging.take() {
            Some(p) => p,
            None => {
                let controls = self.ring.take_controls();
                if controls.is_empty() || !self.gate.is_closed() {
                    // Only a shard with the lease holders acts on partitions one by one.
                    return 0;
                }
                self.begin_purge(controls)
            }
        };
        let done = self.purge_slice(&mut purge, slice)
            && self.purge_letters(&mut purge, slice)
            && self.apply_controls(&mut purge, slice);
        if !done {
            self.purging = Some(purge);
            return 1;
        }
        self.metrics
            .pending
            .store(self.pending() as u64, Ordering::Relaxed);
        self.metrics
            .partitions_loaded
            .store(self.gate.loaded_count(), Ordering::Relaxed);
        purge.taken
    }

    /// The purge of the partitions in `controls` that may hold something: each is closed now
    /// (no op admitted, no timer fired, no follow-up applied) until its control is applied.
    fn begin_purge(&mut self, controls: BTreeMap<u32, Control>) -> Purge {
        let mut picked = vec![false; PARTITIONS as usize];
        let mut any = false;
        for &p in controls.keys() {
            if self.gate.is_filled(p) {
                picked[p as usize] = true;
                self.gate.closing(p);
                any = true;
            }
        }
        Purge {
            picked,
            next: 0,
            bound: if any { self.table.slab_bound() } else { 0 },
            letters: any.then(PurgeCursor::default),
            taken: controls.len(),
            controls,
            load: None,
            timers: 0,
            dead: 0,
        }
    }

    /// Removes the picked partitions' timers from the table until `slice` is over; whether
    /// the table is done.
    fn purge_slice(&mut self, purge: &mut Purge, slice: Option<Slice>) -> bool {
        if purge.next >= purge.bound {
            return true;
        }
        let picked = &purge.picked;
        let (sinks, quotas) = (&mut self.sinks, &self.quotas);
        let next = self.table.purge_from(
            purge.next,
            purge.bound,
            |t| picked[partition_of(t.tenant(), t.key()) as usize],
            |_, record| fate::purged(sinks, quotas, &record.timer),
            &mut purge.timers,
            || slice.as_ref().is_some_and(Slice::is_over),
        );
        match next {
            Some(i) => {
                purge.next = i;
                false
            }
            None => {
                purge.next = purge.bound;
                true
            }
        }
    }

    /// Removes the picked partitions' dead letters until `slice` is over; whether they are
    /// all gone.
    fn purge_letters(&mut self, purge: &mut Purge, slice: Option<Slice>) -> bool {
        let Some(cursor) = purge.letters.as_mut() else {
            return true;
        };
        let picked = &purge.picked;
        let pick = |tenant: &str, key: &str| picked[partition_of(tenant, key) as usize];
        let (quotas, metrics, dead) = (&self.quotas, &self.metrics, &mut purge.dead);
        let done = self.deliveries.dead.purge_from(
            cursor,
            pick,
            |letter| {
                *dead += 1;
                fate::letter_purged(quotas, metrics, &letter);
            },
            || slice.as_ref().is_some_and(Slice::is_over),
        );
        if !done {
            return false;
        }
        purge.letters = None;
        tracing::debug!(
            shard = self.id,
            timers = purge.timers,
            letters = purge.dead,
            "partitions purged"
        );
        true
    }

    /// Applies the purge's controls in turn, a load's records [`LOAD_CHECK`] at a time, until
    /// `slice` is over; whether they are all applied.
    fn apply_controls(&mut self, purge: &mut Purge, slice: Option<Slice>) -> bool {
        let due_by = self.clock.now().as_micros();
        loop {
            let load = match purge.load.as_mut() {
                Some(load) => load,
                None => match purge.controls.pop_first() {
                    None => return true,
                    Some((partition, Control::Drop)) => {
                        self.gate.dropped(partition);
                        continue;
                    }
                    Some((partition, Control::Load(records, floor))) => {
                        // Versions only grow across owners: the old owner's clock may have
                        // been ahead of this one's.
                        self.table.observe_version(floor);
                        purge.load.insert(Load {
                            partition,
                            total: records.len(),
                            records: records.into_iter(),
                            due: Vec::new(),
                            refused: 0,
                        })
                    }
                },
            };
            if self.insert_some(load, due_by) {
                if let Some(load) = purge.load.take() {
                    self.finish_load(load);
                }
                if purge.controls.is_empty() {
                    return true;
                }
            }
            if slice.as_ref().is_some_and(Slice::is_over) {
                return false;
            }
        }
    }

    /// What inserts a load's records, as recovery's (`recover.rs`).
    fn loader(&mut self) -> Loader<'_> {
        Loader {
            queues: &mut self.queues,
            table: &mut self.table,
            dead: &mut self.deliveries.dead,
            quotas: &self.quotas,
            metrics: &self.metrics,
            // A cluster's stores are Redis: nothing is paged.
            pager: None,
            occurrences: &mut self.recovered_occurrences,
        }
    }

    /// Inserts up to [`LOAD_CHECK`] of `load`'s records, setting aside the timers due by
    /// `due_by`; whether none is left.
    fn insert_some(&mut self, load: &mut Load, due_by: UtcMicros) -> bool {
        let mut loader = self.loader();
        for r in load.records.by_ref().take(LOAD_CHECK) {
            if r.deadline <= due_by && !webhook::is_dead(r.timer.meta()) {
                load.due.push(r);
            } else if !loader.insert(r.timer, r.version, r.deadline) {
                load.refused += 1;
            }
        }
        load.records.len() == 0
    }

    /// The last step of a load: its due records go in, and the gate opens the partition.
    fn finish_load(&mut self, mut load: Load) {
        let mut loader = self.loader();
        for r in load.due {
            if !loader.insert(r.timer, r.version, r.deadline) {
                load.refused += 1;
            }
        }
        let (partition, refused) = (load.partition, load.refused);
        if refused > 0 {
            tracing::error!(
                shard = self.id,
                partition,
                refused,
                "timers of a loaded partition not taken (the shard is at capacity, \
                 or a deadline is past the wheel's range); they stay in Redis"
            );
        }
        tracing::debug!(
            shard = self.id,
            partition,
            records = load.total,
            "partition loaded"
        );
        self.gate.loaded(partition);
        let now = self.clock.now().as_micros();
        self.gate.loaded_at(partition, now);
    }
}
