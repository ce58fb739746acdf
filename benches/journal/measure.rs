//! What the journal benches read back from a run: a store figure summed over the shards, and
//! the disk a data directory takes.

use punctual::metrics::StoreMetrics;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// `field` of every shard's store metrics, summed.
pub fn store_sum(h: &punctual::Handle, field: impl Fn(&StoreMetrics) -> &AtomicU64) -> u64 {
    h.store_metrics()
        .iter()
        .map(|m| field(&m.store).load(Ordering::Relaxed))
        .sum()
}

/// Disk blocks allocated under `dir`, in bytes.
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(m) = e.metadata() {
                total += m.blocks() * 512;
            }
        }
    }
    total
}
