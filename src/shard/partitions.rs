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
//! - a sink's follow-up of one of their timers is ignored (`delivery.rs`): a re-armed entry
//!   could land below the cursor and escape the purge;
//! - no other control is taken off the ring: they wait there (their partitions closed by the
//!   ring's waiting bit), and the controls of the purge are applied once it ends (the loads'
//!   inserts, then the gate opens them).
//!
//! The dead letters of the purged partitions leave in one look at the listing when the walk
//! ends (not sliced). It happens only when a partition that was loaded is dropped or reloaded
//! (a lost lease, a rebalance), once for every control taken together; a partition never
//! loaded is not looked for. The inserts cost what recovery's cost (a table insert each); the
//! records' bytes were packed on the loop's thread. A load of a large partition holds the
//! shard's thread for its inserts (not sliced): a partition holds about 1/1,024 of the
//! cluster's timers.

use super::recover::Loader;
use super::Shard;
use crate::clock::TimeSource;
use crate::cooperate::Slice;
use crate::metrics::DeliveryMetrics;
use crate::op::Control;
use crate::partition::{partition_of, PARTITIONS};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// A purge under way: the controls taken off the ring, applied once every timer of the
/// partitions they purge has left the table.
pub(crate) struct Purge {
    /// Per partition: its timers leave (it may hold some and a control names it).
    picked: Vec<bool>,
    /// The slab index to go on from, and the bound it goes to (the slab's at the start: an
    /// entry above it was inserted since, and is not of a picked partition).
    next: u32,
    bound: u32,
    controls: BTreeMap<u32, Control>,
    /// Timers removed so far.
    timers: usize,
}

impl Purge {
    /// Whether `partition`'s timers are being purged: nothing of it may enter the table.
    pub(crate) fn covers(&self, partition: u32) -> bool {
        self.picked
            .get(partition as usize)
            .copied()
            .unwrap_or(false)
    }
}

impl<S: TimeSource> Shard<S> {
    /// Goes on with the purge under way, or takes the loads and drops waiting on the ring and
    /// starts theirs; once the purge is done, applies them. With a `slice`, returns when it is
    /// over (the purge goes on at the next pass); without one, in one go. How many controls
    /// were applied, or 1 while a purge is still under way (the pass did work).
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
        if !self.purge_slice(&mut purge, slice) {
            self.purging = Some(purge);
            return 1;
        }
        self.finish_purge(&purge);
        let n = purge.controls.len();
        for (partition, control) in purge.controls {
            match control {
                Control::Drop => self.gate.dropped(partition),
                Control::Load(records) => {
                    let (total, mut refused) = (records.len(), 0usize);
                    let mut loader = Loader {
                        table: &mut self.table,
                        dead: &mut self.deliveries.dead,
                        quotas: &self.quotas,
                        metrics: &self.metrics,
                    };
                    for r in records {
                        if !loader.insert(r.timer, r.version, r.deadline) {
                            refused += 1;
                        }
                    }
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
                        records = total,
                        "partition loaded"
                    );
                    self.gate.loaded(partition);
                }
            }
        }
        self.metrics
            .pending
            .store(self.table.len() as u64, Ordering::Relaxed);
        self.metrics
            .partitions_loaded
            .store(self.gate.loaded_count(), Ordering::Relaxed);
        n
    }

    /// The purge of the partitions in `controls` that may hold something: each is closed now
    /// (no op admitted, no timer fired, no follow-up applied) until the purge ends.
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
            controls,
            timers: 0,
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
            |_, record| {
                for sink in sinks.iter_mut() {
                    sink.forget(&record.timer);
                }
                if let Some(q) = quotas.get(record.timer.tenant()) {
                    q.release();
                }
            },
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

    /// The picked partitions' dead letters leave the listing, in one go (not sliced: one look
    /// at the dead letters, usually far fewer than the pending timers).
    fn finish_purge(&mut self, purge: &Purge) {
        if !purge.picked.contains(&true) {
            return;
        }
        let picked = &purge.picked;
        let pick = |tenant: &str, key: &str| picked[partition_of(tenant, key) as usize];
        let quotas = &self.quotas;
        let mut letters = 0usize;
        let metrics = &self.metrics;
        self.deliveries.dead.purge(pick, |letter| {
            letters += 1;
            let tenant = letter.timer.tenant();
            if let Some(q) = quotas.get(tenant) {
                q.release();
            }
            DeliveryMetrics::add(&metrics.webhooks.tenant(tenant).dead, -1);
        });
        tracing::debug!(
            shard = self.id,
            timers = purge.timers,
            letters,
            "partitions purged"
        );
    }
}
