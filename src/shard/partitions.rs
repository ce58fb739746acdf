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
//! after it. Every partition of the pass that may hold something is purged in one look at the
//! table's slab and one at the dead letters, however many partitions change at once: O(slab),
//! each live entry's key hashed to its partition (a read of the timer's bytes, often a cache
//! miss), in one go on the shard's thread, not in slices as the fire pass is; at millions of
//! timers on a shard that holds the thread for a noticeable pause. It happens only when a
//! partition that was loaded is dropped or reloaded (a lost lease, a rebalance), once per pass
//! for all of them; a partition never loaded is not looked for. The
//! inserts cost what recovery's cost (a table insert each); the records' bytes were packed on
//! the loop's thread. A load of a large partition holds the shard's thread for its inserts: a
//! partition holds about 1/1,024 of the cluster's timers.

use super::recover::Loader;
use super::Shard;
use crate::clock::TimeSource;
use crate::metrics::DeliveryMetrics;
use crate::op::Control;
use crate::partition::{partition_of, PARTITIONS};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

impl<S: TimeSource> Shard<S> {
    /// Applies the loads and drops waiting on the ring; how many.
    pub(super) fn take_controls(&mut self) -> usize {
        let controls = self.ring.take_controls();
        if controls.is_empty() {
            return 0;
        }
        if !self.gate.is_closed() {
            // Only a shard with the lease holders acts on partitions one by one.
            return 0;
        }
        self.purge(&controls);
        let n = controls.len();
        for (partition, control) in controls {
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

    /// Forgets every timer and dead letter of the partitions in `controls` that may hold some,
    /// in one look at each table.
    fn purge(&mut self, controls: &BTreeMap<u32, Control>) {
        let mut picked = vec![false; PARTITIONS as usize];
        let mut any = false;
        for &p in controls.keys() {
            if self.gate.is_filled(p) {
                picked[p as usize] = true;
                any = true;
            }
        }
        if !any {
            return;
        }
        let pick = |tenant: &str, key: &str| picked[partition_of(tenant, key) as usize];
        let (sinks, quotas) = (&mut self.sinks, &self.quotas);
        let timers = self.table.purge(
            |t| pick(t.tenant(), t.key()),
            |_, record| {
                for sink in sinks.iter_mut() {
                    sink.forget(&record.timer);
                }
                if let Some(q) = quotas.get(record.timer.tenant()) {
                    q.release();
                }
            },
        );
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
        tracing::debug!(shard = self.id, timers, letters, "partitions purged");
    }
}
