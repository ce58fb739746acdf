//! Ingest latency to a parked shard: the time from `schedule_detached` of an already-due timer
//! on core 0 to its handler running on the shard (core 1), after the shard has parked.
//!
//! ```sh
//! cargo run --release --example ingest_latency            # spin window 0
//! cargo run --release --example ingest_latency -- 200     # spin window 200 µs
//! ```

use punctual::clock::clock_ns;
use punctual::{EngineBuilder, UtcMicros};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SAMPLES: usize = 2_000;

fn main() -> Result<(), punctual::Error> {
    let spin_us: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let pushed_at = Arc::new(AtomicU64::new(0));
    let latency = Arc::new(AtomicU64::new(0));
    let (pushed, seen) = (pushed_at.clone(), latency.clone());
    let engine = EngineBuilder::new()
        .cores(vec![1])
        .spin(Duration::from_micros(spin_us))
        .on_fire(move |_| {
            let now = clock_ns(libc::CLOCK_REALTIME);
            seen.store(
                now.saturating_sub(pushed.load(Ordering::SeqCst)).max(1),
                Ordering::SeqCst,
            );
        })
        .build()?;
    let timers = engine.handle();
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        std::thread::sleep(Duration::from_millis(2)); // the shard parks
        latency.store(0, Ordering::SeqCst);
        let now = clock_ns(libc::CLOCK_REALTIME);
        pushed_at.store(now, Ordering::SeqCst);
        timers.schedule_detached("bench", &format!("k{i}"), UtcMicros(now / 1_000), b"")?;
        while latency.load(Ordering::SeqCst) == 0 {
            std::hint::spin_loop();
        }
        samples.push(latency.load(Ordering::SeqCst));
    }
    samples.sort_unstable();
    let pct =
        |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)] as f64 / 1e3;
    println!(
        "push → fire on a parked shard, {SAMPLES} samples, spin {spin_us} µs: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    engine.shutdown().map_err(punctual::Error::Config)
}
