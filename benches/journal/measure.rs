//! What the journal benches read back from a run: a store figure summed over the shards, the
//! disk a data directory takes (`tests/support/disk.rs`, shared with the journal's tests), and
//! the process's resident memory.

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

/// The process's resident memory (VmRSS), in bytes.
#[allow(dead_code)]
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}
