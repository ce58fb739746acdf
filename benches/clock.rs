//! The cost of one clock read: punctual's `Clock::now()` (RDTSCP mapped to UTC; the target is
//! ≤ 20 ns) against `clock_gettime(CLOCK_REALTIME)`, `clock_gettime(CLOCK_MONOTONIC)`,
//! `quanta::Clock::now()`, `std::time::Instant::now()` and `SystemTime::now()`. Also the raw
//! tick read alone (what the mapping costs on top), `quanta::Clock::raw()`, and punctual's clock
//! on its clock_gettime fallback (what a shard pays on a host without an invariant TSC).
//!
//! Each iteration is one read on the bench thread, back to back, the result passed through
//! `black_box`; criterion reports the mean time per read. Back-to-back reads overlap in the
//! pipeline as far as the instruction allows (RDTSCP waits for earlier instructions; RDTSC
//! does not), which is how a shard's loop reads the clock too.
//!
//! It prints, once, the tick source punctual detected and the kernel's clocksource: on a VM
//! whose clocksource is not `tsc` (or `kvm-clock`), `clock_gettime` may be a system call and
//! cost far more than the vDSO path.
//!
//! Run: `cargo bench --bench clock` (under a minute). Smoke test: `cargo bench --bench clock --
//! --test`.

use criterion::{criterion_group, criterion_main, Criterion};
use punctual::clock::{clock_ns, Clock, ClockConfig, HostSource, TimeSource};
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

fn clock_benches(c: &mut Criterion) {
    let punctual_clock = Clock::calibrate(HostSource::detect(), ClockConfig::default());
    let fallback_clock = Clock::calibrate(HostSource::fallback(), ClockConfig::default());
    let quanta_clock = quanta::Clock::new();
    let clocksource =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("unknown ({e})"));
    let offset_ns = punctual_clock
        .now()
        .signed_diff(punctual::UtcNanos(clock_ns(libc::CLOCK_REALTIME)));
    eprintln!(
        "punctual clock source: {}; kernel clocksource: {clocksource}; mapped - CLOCK_REALTIME \
         right after calibration: {offset_ns} ns",
        punctual_clock.kind().as_str()
    );

    let mut group = c.benchmark_group("clock read");
    group.bench_function("punctual Clock::now (detected source)", |b| {
        b.iter(|| black_box(punctual_clock.now()))
    });
    group.bench_function("punctual raw ticks (detected source)", |b| {
        let source = punctual_clock.source();
        b.iter(|| black_box(source.ticks()))
    });
    group.bench_function("punctual Clock::now (clock_gettime fallback)", |b| {
        b.iter(|| black_box(fallback_clock.now()))
    });
    group.bench_function("clock_gettime(CLOCK_REALTIME)", |b| {
        b.iter(|| black_box(clock_ns(black_box(libc::CLOCK_REALTIME))))
    });
    group.bench_function("clock_gettime(CLOCK_MONOTONIC)", |b| {
        b.iter(|| black_box(clock_ns(black_box(libc::CLOCK_MONOTONIC))))
    });
    group.bench_function("quanta::Clock::now", |b| {
        b.iter(|| black_box(quanta_clock.now()))
    });
    group.bench_function("quanta::Clock::raw", |b| {
        b.iter(|| black_box(quanta_clock.raw()))
    });
    group.bench_function("std Instant::now", |b| b.iter(|| black_box(Instant::now())));
    group.bench_function("std SystemTime::now", |b| {
        b.iter(|| black_box(SystemTime::now()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = clock_benches
}
criterion_main!(benches);
