//! Per-shard counters and the fire-lateness histogram, written by the shard with relaxed
//! atomic stores (no locks, no allocation on the hot path) and read by exporters.
//!
//! Prometheus rendering lives with the HTTP API; this module only owns the numbers.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds of the lateness histogram buckets, in seconds: 1 µs to 10 s, 1-2-5 steps.
pub const LATENESS_BUCKETS_S: [f64; 22] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

const LATENESS_BUCKETS_NS: [u64; 22] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
];

#[derive(Default)]
pub struct ShardMetrics {
    pub pending: AtomicU64,
    pub fired_total: AtomicU64,
    /// Non-cumulative counts per bucket; the last one is +Inf.
    lateness_counts: [AtomicU64; 23],
    lateness_sum_ns: AtomicU64,
    pub clock_offset_ns: AtomicI64,
    pub clock_steps_total: AtomicU64,
    /// 1 when the shard's clock fell back to clock_gettime (no invariant TSC), else 0.
    pub clock_fallback: AtomicU64,
    /// Times the watchdog woke this shard because it had not run well past its time
    /// (`shard::watchdog`).
    pub watchdog_wakes_total: AtomicU64,
    /// The durable store's figures (all zero, state `InMemory`, without Redis).
    pub store: crate::store::StoreMetrics,
}

/// A histogram as read at one moment: cumulative counts per upper bound, sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl ShardMetrics {
    /// Records one fire's lateness (fired-at minus deadline), in ns.
    ///
    /// Only the owning shard's thread writes these counters, so a relaxed load and store
    /// replaces the locked read-modify-write of `fetch_add` (about 10 ns a fire in a burst);
    /// readers on other threads still see whole values.
    #[inline]
    pub fn observe_lateness(&self, late_ns: u64) {
        let i = LATENESS_BUCKETS_NS.partition_point(|&b| b < late_ns);
        single_writer_add(&self.lateness_counts[i], 1);
        single_writer_add(&self.lateness_sum_ns, late_ns);
    }

    pub fn lateness(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(LATENESS_BUCKETS_S.len());
        for (i, &bound) in LATENESS_BUCKETS_S.iter().enumerate() {
            cumulative += self.lateness_counts[i].load(Ordering::Relaxed);
            buckets.push((bound, cumulative));
        }
        let count = cumulative + self.lateness_counts[22].load(Ordering::Relaxed);
        let sum_seconds = self.lateness_sum_ns.load(Ordering::Relaxed) as f64 * 1e-9;
        HistogramSnapshot {
            buckets,
            count,
            sum_seconds,
        }
    }
}

/// `counter += n` for a counter that only the calling thread writes.
#[inline]
fn single_writer_add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_the_first_bucket_that_holds_it() {
        let m = ShardMetrics::default();
        m.observe_lateness(0); // on time: the 1 µs bucket
        m.observe_lateness(1_000); // exactly 1 µs: still le="1e-6"
        m.observe_lateness(1_001);
        m.observe_lateness(20_000_000_000); // 20 s: only +Inf
        let h = m.lateness();
        assert_eq!(h.buckets[0], (1e-6, 2));
        assert_eq!(h.buckets[1], (2e-6, 3));
        assert_eq!(h.buckets.last().map(|b| b.1), Some(3));
        assert_eq!(h.count, 4);
    }
}
