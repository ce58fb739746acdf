//! The histogram: fixed buckets of `u64` observations (ns, or a count) with one writer, and
//! its snapshot for exporters.

use super::counter::single_writer_add;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fixed-bucket histogram of `u64` observations (ns, or a count), with one writer.
///
/// Only the owning shard's thread writes (its loop, or a task on its executor), so a relaxed
/// load and store replace the locked read-modify-write of `fetch_add` (about 10 ns per
/// observation in a burst); readers on other threads still see whole values. An observation
/// divided by `per_unit` is the exported unit (1e9 for ns → seconds, 1 for counts; a division
/// by an exact power of ten keeps `le` labels such as `1e-6` exact).
pub struct Histogram {
    bounds: &'static [u64],
    per_unit: f64,
    /// Non-cumulative counts; the last is +Inf.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// A histogram as read at one moment: cumulative counts per upper bound, sum and count, in
/// the exported unit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64], per_unit: f64) -> Histogram {
        Histogram {
            bounds,
            per_unit,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one observation. Call only from the owning shard's thread.
    #[inline]
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get(i) {
            single_writer_add(c, 1);
        }
        single_writer_add(&self.sum, v);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (i, &bound) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            buckets.push((bound as f64 / self.per_unit, cumulative));
        }
        let inf = self.counts.last().map_or(0, |c| c.load(Ordering::Relaxed));
        HistogramSnapshot {
            buckets,
            count: cumulative + inf,
            sum: self.sum.load(Ordering::Relaxed) as f64 / self.per_unit,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::{ShardMetrics, StoreMetrics};

    #[test]
    fn lateness_lands_in_the_first_bucket_that_holds_it() {
        let m = ShardMetrics::default();
        m.lateness.observe(0); // on time: the 1 µs bucket
        m.lateness.observe(1_000); // exactly 1 µs: still le="1e-6"
        m.lateness.observe(1_001);
        m.lateness.observe(20_000_000_000); // 20 s: only +Inf
        let h = m.lateness.snapshot();
        assert_eq!(h.buckets[0], (1e-6, 2));
        assert_eq!(h.buckets[1], (2e-6, 3));
        assert_eq!(h.buckets.last().map(|b| b.1), Some(3));
        assert_eq!(h.count, 4);
        assert!((h.sum - 20.000002001).abs() < 1e-9, "{}", h.sum);
    }

    #[test]
    fn counts_histograms_export_their_own_unit() {
        let m = StoreMetrics::default();
        m.batch_commands.observe(1);
        m.batch_commands.observe(5);
        m.batch_commands.observe(1_000_000_000);
        let s = m.batch_commands.snapshot();
        assert_eq!(s.buckets[0], (1.0, 1));
        assert_eq!(s.buckets[2], (16.0, 2));
        assert_eq!(s.count, 3);
    }
}
