//! Ingest latency to a parked shard: the time from `schedule_detached` of an already-due timer
//! on core 0 to its handler running on the shard (core 1), after the shard has parked. One run
//! measures three things side by side:
//!
//! - `direct`: the library engine, whose shard parks in `ppoll` (it runs nothing else);
//! - `reactor`: the same engine with a (no-op) `on_shard_start` hook, so the shard parks in
//!   glommio's reactor, as shards hosting HTTP or the store do;
//! - `floor`: a plain thread on core 1 blocked in `read(2)` on a socket, woken by a one-byte
//!   write from core 0: what a cross-core wake-up costs on this host.
//!
//! ```sh
//! cargo run --release --example ingest_latency            # spin window 0
//! cargo run --release --example ingest_latency -- 200     # spin window 200 µs
//! ```

use punctual::clock::clock_ns;
use punctual::{EngineBuilder, UtcMicros};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SAMPLES: usize = 2_000;

/// Sets `pushed_at`, calls `kick`, and spins until `seen` holds the latency; `SAMPLES` times,
/// each after a 2 ms pause in which the other side parks. Runs on a scoped thread pinned to
/// core 0, so the main thread's affinity stays whole for the next engine's placement.
fn sample(
    pushed_at: &AtomicU64,
    seen: &AtomicU64,
    mut kick: impl FnMut(usize, u64) + Send,
) -> Vec<u64> {
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
            let mut samples = Vec::with_capacity(SAMPLES);
            for i in 0..SAMPLES {
                std::thread::sleep(Duration::from_millis(2));
                seen.store(0, Ordering::SeqCst);
                let now = clock_ns(libc::CLOCK_REALTIME);
                pushed_at.store(now, Ordering::SeqCst);
                kick(i, now);
                while seen.load(Ordering::SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                samples.push(seen.load(Ordering::SeqCst));
            }
            samples
        });
        sampler.join().unwrap_or_default()
    })
}

fn record(pushed_at: &AtomicU64, seen: &AtomicU64) {
    let now = clock_ns(libc::CLOCK_REALTIME);
    seen.store(
        now.saturating_sub(pushed_at.load(Ordering::SeqCst)).max(1),
        Ordering::SeqCst,
    );
}

fn engine_run(spin_us: u64, reactor: bool) -> Result<Vec<u64>, punctual::Error> {
    let pushed_at = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let (p, s) = (pushed_at.clone(), seen.clone());
    let mut builder = EngineBuilder::new()
        .cores(vec![1])
        .spin(Duration::from_micros(spin_us))
        .on_fire(move |_| record(&p, &s));
    if reactor {
        builder = builder.on_shard_start(|_, _| {});
    }
    let engine = builder.build()?;
    let timers = engine.handle();
    let mut result = Ok(());
    let samples = sample(&pushed_at, &seen, |i, now| {
        if let Err(e) =
            timers.schedule_detached("bench", &format!("k{i}"), UtcMicros(now / 1_000), b"")
        {
            result = Err(e);
            seen.store(1, Ordering::SeqCst);
        }
    });
    result?;
    engine.shutdown().map_err(punctual::Error::Config)?;
    Ok(samples)
}

fn floor_run() -> std::io::Result<Vec<u64>> {
    let (mut tx, mut rx) = std::os::unix::net::UnixStream::pair()?;
    let pushed_at = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let (p, s) = (pushed_at.clone(), seen.clone());
    let reader = std::thread::spawn(move || {
        let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
        let mut byte = [0u8; 1];
        while matches!(rx.read(&mut byte), Ok(1)) {
            record(&p, &s);
        }
    });
    let samples = sample(&pushed_at, &seen, |_, _| {
        let _ = tx.write_all(&[1]);
    });
    drop(tx);
    let _ = reader.join();
    Ok(samples)
}

fn report(what: &str, mut samples: Vec<u64>) {
    samples.sort_unstable();
    let pct =
        |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)] as f64 / 1e3;
    println!(
        "{what:<42} p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>8.1} µs  max {:>8.1} µs",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spin_us: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    println!("{SAMPLES} samples each, spin window {spin_us} µs, core 0 → core 1");
    report(
        "push → fire, shard parked in ppoll (direct)",
        engine_run(spin_us, false)?,
    );
    report(
        "push → fire, shard parked in glommio",
        engine_run(spin_us, true)?,
    );
    report("blocked read(2) woken by a write (floor)", floor_run()?);
    Ok(())
}
