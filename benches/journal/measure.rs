//! What the journal benches read back from a run: a store figure summed over the shards, and
//! the disk a data directory takes (`tests/support/disk.rs`, shared with the journal's tests).

#[path = "../../tests/support/disk.rs"]
mod disk;

pub use disk::allocated_bytes;
use punctual::metrics::StoreMetrics;
use std::sync::atomic::{AtomicU64, Ordering};

/// `field` of every shard's store metrics, summed.
pub fn store_sum(h: &punctual::Handle, field: impl Fn(&StoreMetrics) -> &AtomicU64) -> u64 {
    h.store_metrics()
        .iter()
        .map(|m| field(&m.store).load(Ordering::Relaxed))
        .sum()
}
