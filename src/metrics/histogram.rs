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
    /// For each bit length `L` of an observation (0 for 0, 64 for `u64::MAX`): how many bounds
    /// lie below the smallest value of that length, where `observe`'s search starts.
    below: [u16; 65],
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
        let mut below = [0u16; 65];
        for (len, b) in below.iter_mut().enumerate().skip(1) {
            let smallest = 1u64 << (len - 1);
            let n = bounds.partition_point(|&x| x < smallest);
            *b = u16::try_from(n).unwrap_or(u16::MAX);
        }
        Histogram {
            bounds,
            below,
            per_unit,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one observation. Call only from the owning shard's thread.
    ///
    /// The bucket is the first whose bound is `>= v`. The search starts at the bounds below
    /// `v`'s power of two and steps up: with bounds at least 2× apart (every histogram here)
    /// that is one comparison, where a binary search over 22 bounds made 5 dependent ones
    /// (1.6–1.8 against 2.8–2.9 ns per observation, `benches/metrics.rs`).
    #[inline]
    pub fn observe(&self, v: u64) {
        let len = (u64::BITS - v.leading_zeros()) as usize;
        let mut i = self.below.get(len).map_or(0, |&n| usize::from(n));
        while self.bounds.get(i).is_some_and(|&b| b < v) {
            i += 1;
        }
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

/// Histogram bounds: the 1-2-5 series from `first` (1, 2 or 5 times a power of ten), then
/// `tail`, `N` values in all. Evaluated at compile time (a `tail` longer than `N` does not
/// compile).
pub const fn one_two_five<const N: usize>(first: u64, tail: &[u64]) -> [u64; N] {
    let mut out = [0u64; N];
    let series = N - tail.len();
    let (mut i, mut v) = (0, first);
    while i < series {
        out[i] = v;
        v = next_one_two_five(v);
        i += 1;
    }
    let mut j = 0;
    while j < tail.len() {
        out[series + j] = tail[j];
        j += 1;
    }
    out
}

/// The step after `v` in a 1-2-5 series: 1 → 2 → 5 → 10 times its power of ten.
const fn next_one_two_five(v: u64) -> u64 {
    let mut power = 1;
    while v / power >= 10 {
        power *= 10;
    }
    match v / power {
        1 => 2 * power,
        2 => 5 * power,
        _ => 10 * power,
    }
}

#[cfg(test)]
mod tests {
    use super::{one_two_five, Histogram};
    use crate::metrics::{
        ShardMetrics, StoreMetrics, DELIVERY_BOUNDS_NS, FLUSH_BOUNDS_NS, LATENESS_BOUNDS_NS,
    };
    use std::sync::atomic::Ordering;

    #[test]
    fn bounds_follow_the_one_two_five_series_then_their_tail() {
        assert_eq!(one_two_five::<7>(1, &[]), [1, 2, 5, 10, 20, 50, 100]);
        assert_eq!(one_two_five::<4>(50, &[7_000]), [50, 100, 200, 7_000]);
        assert_eq!(LATENESS_BOUNDS_NS[..4], [1_000, 2_000, 5_000, 10_000]);
        assert_eq!(LATENESS_BOUNDS_NS.last(), Some(&10_000_000_000));
        assert_eq!(FLUSH_BOUNDS_NS[..2], [50_000, 100_000]);
        assert_eq!(FLUSH_BOUNDS_NS[14..], [2_000_000_000, 10_000_000_000]);
        assert_eq!(DELIVERY_BOUNDS_NS[..3], [100_000, 200_000, 500_000]);
        assert_eq!(
            DELIVERY_BOUNDS_NS[15..],
            [
                10_000_000_000,
                30_000_000_000,
                60_000_000_000,
                120_000_000_000,
                600_000_000_000
            ]
        );
    }

    /// Every value near a bound, a power of two or either end lands where a plain search of
    /// the bounds puts it, for every histogram's bounds and for bounds closer than 2× apart.
    #[test]
    fn observe_finds_the_bucket_a_search_of_the_bounds_finds() {
        static CLOSE: [u64; 6] = [3, 4, 5, 6, 1_000, 1_001];
        let sets: [&'static [u64]; 5] = [
            &LATENESS_BOUNDS_NS,
            &FLUSH_BOUNDS_NS,
            &DELIVERY_BOUNDS_NS,
            &crate::metrics::BATCH_BOUNDS,
            &CLOSE,
        ];
        for bounds in sets {
            let mut values = vec![0, 1, u64::MAX, u64::MAX - 1];
            for &b in bounds {
                values.extend([b.saturating_sub(1), b, b.saturating_add(1)]);
            }
            for k in 0..64 {
                values.extend([(1u64 << k) - 1, 1u64 << k, (1u64 << k) + 1]);
            }
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                values.push(x >> (x % 64));
            }
            for v in values {
                let h = Histogram::new(bounds, 1.0);
                h.observe(v);
                let want = bounds.partition_point(|&b| b < v);
                let got = h.counts.iter().position(|c| c.load(Ordering::Relaxed) == 1);
                assert_eq!(got, Some(want), "value {v} in bounds {bounds:?}");
            }
        }
    }

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
