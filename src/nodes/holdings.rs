//! What this node holds: one lease slot per partition ([`Holdings`]), written by the node's
//! loop (`node`) and read by every shard's store to fence its writes
//! (`store::redis::clustered::Holders`), by the shards' gates, by the API's forwarding (its
//! routing view) and by `/metrics`, `/healthz` and `GET /cluster`; beside it the loop's
//! counters ([`NodeStats`]) and the partitions gained and not yet loaded ([`Loading`]).
//!
//! # Invariants
//!
//! - A slot names a lease only while the node may act on it: past its local deadline, or cut
//!   by a fenced write, [`Holdings::valid`] no longer answers it.
//! - A lease that lapsed is never put back under the same value ([`Holdings::renewed`]): the
//!   partition is told lost, then acquired under a new epoch and told gained (`node`).
//!
//! # Cost model
//!
//! One mutex per partition, uncontended but for the loop's updates; a shard's look is one
//! lock and two clock reads (monotonic, and the boot clock that counts a suspend: `lease`). [`Loading`] is one mutex over 1,024 instants, taken at each gain,
//! loss and hand-over, and at each scrape.

use super::lease::Lease;
use super::routing::RoutingTable;
use crate::partition::PARTITIONS;
use crate::store::redis::clustered::Holders;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Counters of the node's lease events, for `/metrics`.
#[derive(Debug, Default)]
pub struct NodeStats {
    pub acquisitions_total: AtomicU64,
    pub renewals_total: AtomicU64,
    /// Leases found lost at renewal (another value, or gone).
    pub losses_total: AtomicU64,
    pub releases_total: AtomicU64,
    /// Partitions dropped at once because a write fenced by their lease was answered `FENCED`
    /// (another value in the lease key), before the lease's local deadline or next renewal.
    pub fenced_drops_total: AtomicU64,
    /// Rounds whose heartbeat or lease calls failed.
    pub round_errors_total: AtomicU64,
    /// Rounds started before their time because a tick saw the live set change.
    pub early_rounds_total: AtomicU64,
    /// Live nodes at the last good heartbeat.
    pub live_nodes: AtomicU64,
}

/// The leases this node holds, one slot per partition: written by the loop, read by every
/// shard's store (and anything else that must know whether it may act on a partition).
pub struct Holdings {
    slots: Vec<Mutex<Option<Lease>>>,
    pub stats: NodeStats,
    /// Where each partition's requests go, by the live set of the last good heartbeat
    /// (`routing`): published by the loop, read by the API to forward.
    pub routing: RoutingTable,
    /// Notified when a fenced write cut a lease (`Holders::fenced`): the loop, waiting for its
    /// next round, tells the loss at once; and at a stop ([`Holdings::wake`]).
    pub(super) cut: event_listener::Event,
    /// Partitions gained whose records are not yet handed to the shards (`reader`).
    pub loading: Loading,
}

impl Default for Holdings {
    fn default() -> Self {
        Holdings {
            slots: (0..PARTITIONS).map(|_| Mutex::new(None)).collect(),
            stats: NodeStats::default(),
            routing: RoutingTable::default(),
            cut: event_listener::Event::new(),
            loading: Loading::default(),
        }
    }
}

impl Holdings {
    fn slot(&self, partition: u32) -> Option<MutexGuard<'_, Option<Lease>>> {
        // A poisoned slot still holds a whole `Option<Lease>`: assignments only.
        let slot = self.slots.get(partition as usize)?;
        Some(slot.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The lease of `partition` if this node holds it and its local deadline is after `now`.
    pub fn valid(&self, partition: u32, now: Instant) -> Option<Lease> {
        self.slot(partition)?
            .as_ref()
            .filter(|l| l.valid_at(now))
            .cloned()
    }

    /// Partitions whose lease is valid at `now`, in increasing order.
    pub fn owned(&self, now: Instant) -> Vec<u32> {
        (0..PARTITIONS)
            .filter(|&p| self.valid(p, now).is_some())
            .collect()
    }

    /// Every lease in the table, valid or not.
    pub(super) fn held(&self) -> Vec<Lease> {
        (0..PARTITIONS)
            .filter_map(|p| self.slot(p).and_then(|s| s.clone()))
            .collect()
    }

    pub(super) fn put(&self, lease: Lease) {
        if let Some(mut s) = self.slot(lease.partition) {
            *s = Some(lease);
        }
    }

    /// Puts a renewed lease in place of the one it renews if that one is still valid; else
    /// empties the slot and answers `false`. A lease that lapsed locally is never put back
    /// under the same epoch: a shard that looked meanwhile saw the partition not held (and
    /// dropped a due timer of it), so the partition is loaded afresh, and a write queued under
    /// the lapsed lease must not land after that load, so the partition is acquired again
    /// under a new epoch, which fences it (`store::redis::clustered`). The clock is read under
    /// the slot's lock, so a look that saw the old lease lapsed came before it.
    pub(super) fn renewed(&self, lease: Lease) -> bool {
        let Some(mut s) = self.slot(lease.partition) else {
            return false;
        };
        let now = Instant::now();
        let was_valid = s.as_ref().is_some_and(|l| l.valid_at(now));
        *s = was_valid.then_some(lease);
        was_valid
    }

    /// Wakes the loop from its wait between rounds (a stop was asked): it looks at its stop
    /// flag now rather than at its next tick.
    pub fn wake(&self) {
        self.cut.notify(usize::MAX);
    }

    pub(super) fn remove(&self, partition: u32) {
        if let Some(mut s) = self.slot(partition) {
            *s = None;
        }
    }
}

impl Holders for Holdings {
    fn holder(&self, partition: u32) -> Option<Arc<str>> {
        let now = Instant::now();
        self.slot(partition)?
            .as_ref()
            .filter(|l| l.valid_at(now))
            .map(Lease::holder_shared)
    }

    fn holds(&self, partition: u32) -> bool {
        let now = Instant::now();
        self.slot(partition)
            .is_some_and(|s| s.as_ref().is_some_and(|l| l.valid_at(now)))
    }

    /// The lease `holder` of `partition` is lost (a write fenced by it was refused): it is cut
    /// to now, so no one acts on it from here, and the loop is woken to tell it lost at once;
    /// at its next round it finds it lapsed and releases it like any lapse. A lease of the partition under another
    /// value (acquired since, under a later epoch) is left alone.
    fn fenced(&self, partition: u32, holder: &str) {
        let Some(mut slot) = self.slot(partition) else {
            return;
        };
        let now = Instant::now();
        let Some(lease) = slot
            .as_mut()
            .filter(|l| l.holder() == holder && l.valid_at(now))
        else {
            return;
        };
        lease.lost_at(now);
        let epoch = lease.epoch;
        drop(slot);
        self.stats
            .fenced_drops_total
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            partition,
            epoch,
            "node: a write was fenced: the lease is held elsewhere; the partition is dropped now"
        );
        self.cut.notify(usize::MAX);
    }
}

/// How long a partition may stay held and not loaded before it is reported (`/healthz`,
/// `/metrics`, `GET /cluster`): a read of a few thousand records takes milliseconds, a
/// handoff's few hundred partitions well under a second.
pub const LOAD_OVERDUE: Duration = Duration::from_secs(5);

/// Partitions told gained whose records were not yet handed to the shards, each with the
/// instant it was gained. Set and cleared by the reader (`reader`), on the loop's thread.
pub struct Loading(Mutex<Vec<Option<Instant>>>);

impl Default for Loading {
    fn default() -> Self {
        Loading(Mutex::new(vec![None; PARTITIONS as usize]))
    }
}

impl Loading {
    fn slots(&self) -> MutexGuard<'_, Vec<Option<Instant>>> {
        // A poisoned lock still holds whole instants: assignments only.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `partition` was gained at `at`: it is loading until [`Loading::settled`].
    pub(super) fn gained(&self, partition: u32, at: Instant) {
        if let Some(s) = self.slots().get_mut(partition as usize) {
            *s = Some(at);
        }
    }

    /// `partition`'s records were handed to the shards, or it was lost: not loading.
    pub(super) fn settled(&self, partition: u32) {
        if let Some(s) = self.slots().get_mut(partition as usize) {
            *s = None;
        }
    }

    /// Partitions gained more than `after` before `now` and still not loaded, increasing.
    pub fn overdue(&self, now: Instant, after: Duration) -> Vec<u32> {
        (0..PARTITIONS)
            .zip(self.slots().iter())
            .filter(|(_, s)| s.is_some_and(|at| now.saturating_duration_since(at) > after))
            .map(|(p, _)| p)
            .collect()
    }
}

#[cfg(test)]
#[path = "holdings_tests.rs"]
mod tests;
