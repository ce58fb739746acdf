//! Counters with one writer: the owning shard's thread adds with a relaxed load and store,
//! not a locked read-modify-write.

use std::sync::atomic::{AtomicU64, Ordering};

/// `counter += n` for a counter that only the calling thread writes.
#[inline]
pub fn single_writer_add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}
