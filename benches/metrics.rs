//! The cost of recording one fire's lateness, which every fire pays: `Histogram::observe`
//! (the search starts at the observation's power of two) against a binary search of the same
//! bounds with the same single-writer add (how `observe` found its bucket before), measured
//! in the same run.
//!
//! Two sequences of 4,096 lateness values, observed in order:
//! - `burst`: 0 to 100 ms, rising, as a million timers due at one instant fire (W2);
//! - `spread`: 0.1 to 10 µs, scattered, as timers spread over seconds fire (W1).
//!
//! Run: `cargo bench --bench metrics` (under a minute). Smoke test: `cargo bench --bench
//! metrics -- --test`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use punctual::metrics::{single_writer_add, Histogram, LATENESS_BOUNDS_NS};
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

const N: usize = 4_096;

/// The baseline: the bucket found by a binary search of the bounds.
struct Searched {
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
}

impl Searched {
    fn new() -> Searched {
        Searched {
            counts: (0..=LATENESS_BOUNDS_NS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum: AtomicU64::new(0),
        }
    }

    #[inline]
    fn observe(&self, v: u64) {
        let i = LATENESS_BOUNDS_NS.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get(i) {
            single_writer_add(c, 1);
        }
        single_writer_add(&self.sum, v);
    }
}

fn sequences() -> [(&'static str, Vec<u64>); 2] {
    let burst = (0..N as u64).map(|i| i * 100_000_000 / N as u64).collect();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let spread = (0..N)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            100 + x % 9_900
        })
        .collect();
    [("burst", burst), ("spread", spread)]
}

fn observe_benches(c: &mut Criterion) {
    for (name, values) in sequences() {
        let mut group = c.benchmark_group(format!("lateness observe/{name}"));
        group.throughput(Throughput::Elements(N as u64));
        let h = Histogram::new(&LATENESS_BOUNDS_NS, 1e9);
        group.bench_function("Histogram::observe", |b| {
            b.iter(|| {
                for &v in &values {
                    h.observe(black_box(v));
                }
            })
        });
        let s = Searched::new();
        group.bench_function("binary search (baseline)", |b| {
            b.iter(|| {
                for &v in &values {
                    s.observe(black_box(v));
                }
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = observe_benches
}
criterion_main!(benches);
