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
