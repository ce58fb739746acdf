//! The shard's gate over partitions: which of its partitions a shard may act on now. Only a
//! shard handed the lease holders (a node on a Redis Cluster, `store::redis::clustered::Holders`)
//! has a closed gate; every other shard (journal, memory, one Redis, Sentinel) owns each of its
//! partitions for good and its gate admits everything.
//!
//! # The rule
//!
//! A partition is open when both hold:
//!
//! - **loaded**: the node's loop gained its lease and the shard took the partition's records
//!   (a `Control::Load`, `load_drop.rs`), and has not dropped it since;
//! - **held now**: the holders name a lease whose local deadline has not passed;
//! - **settled**: no load or drop of it waits on the shard's ring (`Ring::awaits_control`):
//!   the loop has decided, and what the shard holds of it is about to be replaced or dropped.
//!
//! A keyed op (schedule, cancel, get, re-drive, discard) of a partition that is not open is
//! refused with `PartitionNotHeld`, naming it (503). A due timer of such a partition is not
//! fired: it leaves the wheel unfired (its record stays in Redis for whoever holds the
//! partition) and the partition is marked not loaded, so nothing more of it is acted on until
//! the loop, which tells the lease lost and acquires it again under a new epoch, hands the
//! shard a fresh load.
//! Why both: the loop tells a lapse at its next round, up to a second late, while the local
//! deadline is exact; and a lease may be valid before its records arrive. A write refused with
//! `FENCED` cuts its lease in the holders at once (`Holders::fenced`), so the gate closes
//! on the next op or fire after the refusal, not at the next round.
//!
//! # Cost
//!
//! Per keyed op and per fire, on a gated shard only: the key's partition (FNV-1a over tenant
//! and key, tens of nanoseconds), the holders' look (one uncontended mutex) and one atomic
//! load. An open gate costs one branch.

use crate::error::Error;
use crate::partition::{partition_of, PartitionSet, PARTITIONS};
use crate::ring::Ring;
use crate::store::redis::clustered::Holders;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::sync::Arc;

#[derive(Default)]
pub(crate) struct Gate {
    /// `None`: every partition is this shard's for good (no cluster of nodes).
    holders: Option<Arc<dyn Holders>>,
    /// Per partition: its records loaded and not dropped since.
    loaded: Vec<bool>,
    /// Per partition: the table or the dead letters may hold some of it (loaded once, not
    /// purged since), so a load or a drop must purge it first.
    filled: Vec<bool>,
    /// Partitions loaded (`true` in `loaded`).
    count: u64,
    /// Loads, drops and partitions closed so far: a listing whose steps saw the same count
    /// saw the same partitions loaded throughout ([`Gate::open_now`]).
    changes: u64,
    /// Per partition: when its records were last loaded (UTC microseconds). A deadline
    /// before it passed while another node held the partition, or none did: unseen here.
    loaded_at_us: Vec<u64>,
}

impl Gate {
    /// A gate over the partitions `holders` names; `None`: an open gate.
    pub fn new(holders: Option<Arc<dyn Holders>>) -> Gate {
        let n = if holders.is_some() { PARTITIONS } else { 0 };
        Gate {
            holders,
            loaded: vec![false; n as usize],
            filled: vec![false; n as usize],
            count: 0,
            changes: 0,
            loaded_at_us: vec![0; n as usize],
        }
    }

    /// Whether the shard acts only on partitions it loaded and holds.
    pub fn is_closed(&self) -> bool {
        self.holders.is_some()
    }

    /// Whether the shard may act on `partition` now: loaded, held, and no load or drop of it
    /// waiting on `ring`.
    fn open(&self, partition: u32, ring: &Ring) -> bool {
        match &self.holders {
            None => true,
            Some(h) => {
                self.loaded
                    .get(partition as usize)
                    .copied()
                    .unwrap_or(false)
                    && h.holds(partition)
                    && !ring.awaits_control(partition)
            }
        }
    }

    /// `Ok` when a keyed op of `timer` may be applied; otherwise the refusal naming its
    /// partition.
    pub fn admit(&self, timer: &PackedTimer, ring: &Ring) -> Result<(), Error> {
        if self.holders.is_none() {
            return Ok(());
        }
        let partition = partition_of(timer.tenant(), timer.key());
        if self.open(partition, ring) {
            Ok(())
        } else {
            Err(Error::PartitionNotHeld { partition })
        }
    }

    /// Whether a due timer of (tenant, key) may fire. When not, its partition is marked not
    /// loaded (once: logged) and the caller drops the timer unfired.
    pub fn may_fire(&mut self, tenant: &str, key: &str, ring: &Ring) -> bool {
        if self.holders.is_none() {
            return true;
        }
        let partition = partition_of(tenant, key);
        if self.open(partition, ring) {
            return true;
        }
        if let Some(loaded) = self.loaded.get_mut(partition as usize) {
            if *loaded {
                *loaded = false;
                self.count = self.count.saturating_sub(1);
                self.changes += 1;
                tracing::warn!(
                    partition,
                    "a due timer of a partition whose lease is no longer valid was not fired; \
                     the partition is not acted on until it is loaded again"
                );
            }
        }
        false
    }

    /// Whether the shard may hold timers or dead letters of `partition` (to purge first).
    pub fn is_filled(&self, partition: u32) -> bool {
        self.filled
            .get(partition as usize)
            .copied()
            .unwrap_or(false)
    }

    /// `partition`'s records were just loaded: it is open while its lease holds.
    pub fn loaded(&mut self, partition: u32) {
        self.set(partition, true);
    }

    /// `partition`'s purge began: it is not acted on, and may still hold timers until the
    /// purge ends ([`Gate::dropped`] or [`Gate::loaded`]).
    pub fn closing(&mut self, partition: u32) {
        if let Some(l) = self.loaded.get_mut(partition as usize) {
            if *l {
                *l = false;
                self.count = self.count.saturating_sub(1);
                self.changes += 1;
            }
        }
    }

    /// `partition`'s records were loaded at `now` ([`Gate::seen_from`]).
    pub fn loaded_at(&mut self, partition: u32, now: UtcMicros) {
        if let Some(at) = self.loaded_at_us.get_mut(partition as usize) {
            *at = now.0;
        }
    }

    /// Since when this shard has watched the deadlines of (tenant, key)'s partition: its last
    /// load on a gated shard (a recurring schedule judges what passed before as missed, as
    /// after a restart), the epoch on any other (it has always owned it).
    pub fn seen_from(&self, tenant: &str, key: &str) -> UtcMicros {
        if self.loaded_at_us.is_empty() {
            return UtcMicros(0);
        }
        let p = partition_of(tenant, key) as usize;
        UtcMicros(self.loaded_at_us.get(p).copied().unwrap_or(0))
    }

    /// `partition` was purged and is not acted on.
    pub fn dropped(&mut self, partition: u32) {
        self.set(partition, false);
    }

    fn set(&mut self, partition: u32, on: bool) {
        let i = partition as usize;
        if let (Some(l), Some(f)) = (self.loaded.get_mut(i), self.filled.get_mut(i)) {
            match (*l, on) {
                (false, true) => self.count += 1,
                (true, false) => self.count = self.count.saturating_sub(1),
                _ => {}
            }
            *l = on;
            *f = on;
            self.changes += 1;
        }
    }

    /// The partitions the shard may act on now (an open gate: every one, each shard owning
    /// its own for good), and the count of the gate's changes so far.
    pub fn open_now(&self, ring: &Ring) -> (PartitionSet, u64) {
        if self.holders.is_none() {
            return (PartitionSet::full(), self.changes);
        }
        let mut open = PartitionSet::default();
        for (p, &loaded) in (0..PARTITIONS).zip(&self.loaded) {
            if loaded && self.open(p, ring) {
                open.insert(p);
            }
        }
        (open, self.changes)
    }

    /// Partitions loaded (whether their lease is still valid or not).
    pub fn loaded_count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
pub(super) mod tests;
