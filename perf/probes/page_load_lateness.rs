//! Fire lateness while a page loads: does loading a million paged timers into the wheel make
//! other timers late?
//!
//! One shard with the journal and a 16 s paging horizon (buckets of 4 s). A million timers
//! (32-byte keys, 100-byte payloads) are scheduled 28–29 s ahead, so they are paged, and their
//! bucket's load begins 16 s before it starts. Probe timers, all within the horizon (never
//! paged), are due every millisecond from 4 s to 15 s after the start, through the load. Each fire reads CLOCK_REALTIME; a sampler thread
//! reads `punctual_page_timers` every 10 ms and so brackets the load. Printed, for the probes
//! due before, during and after the load: p50, p99, p99.9 and max lateness, in one run. Then the
//! million fire, and the run checks that every one of them and every probe fired once.
//!
//! ```sh
//! cargo run --release --example page_load_lateness           # THP off, as `punctual serve`
//! cargo run --release --example page_load_lateness -- --thp  # the host's THP setting
//! ```

use punctual::clock::clock_ns;
use punctual::store::journal::JournalConfig;
use punctual::{EngineBuilder, UtcMicros};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAGED: usize = 1_000_000;
const SECOND: u64 = 1_000_000;
const PAYLOAD: [u8; 100] = [b'p'; 100];

fn now_us() -> u64 {
    clock_ns(libc::CLOCK_REALTIME) / 1_000
}

fn main() {
    // As `punctual serve` runs by default: no transparent huge pages (`--thp` keeps them).
    if !std::env::args().any(|a| a == "--thp") {
        punctual::engine::transparent_huge_pages_off().expect("PR_SET_THP_DISABLE");
    }
    let dir = tempfile_dir();
    let mut cfg = JournalConfig::new(&dir);
    cfg.page_horizon = Some(Duration::from_secs(16));
    cfg.ack_timeout = Duration::from_secs(60);
    // (deadline, lateness) of each probe; count of the paged timers' fires.
    let probes: Arc<Mutex<Vec<(u64, i64)>>> = Arc::new(Mutex::new(Vec::with_capacity(20_000)));
    let paged_fired = Arc::new(AtomicU64::new(0));
    let (p, f) = (probes.clone(), paged_fired.clone());
    let engine = EngineBuilder::new()
        .shards(1)
        .cores(vec![1])
        .spin(Duration::from_micros(100))
        .shard_capacity(2 * PAGED)
        .journal_config(cfg)
        .on_fire(move |t| {
            let late = now_us() as i64 - t.deadline.0 as i64;
            if t.tenant == "probe" {
                if let Ok(mut v) = p.lock() {
                    v.push((t.deadline.0, late));
                }
            } else {
                f.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .expect("engine");
    let h = engine.handle();
    assert!(h.wait_store_ready(Duration::from_secs(60)));
    let t0 = now_us();
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    let started = Instant::now();
    let mut calls = Vec::with_capacity(4_096);
    for i in 0..PAGED {
        let due = t0 + 28 * SECOND + (i as u64 * SECOND) / PAGED as u64;
        calls.push(h.schedule_async("shop", &format!("order-{i:026}"), UtcMicros(due), &PAYLOAD));
        if calls.len() == 4_096 || i + 1 == PAGED {
            for r in futures_lite::future::block_on(futures_util::future::join_all(calls.drain(..)))
            {
                r.expect("acknowledged");
            }
        }
    }
    let probes_from = t0 + 4 * SECOND;
    let probe_count = 11_000u64;
    let calls: Vec<_> = (0..probe_count)
        .map(|i| {
            h.schedule_async(
                "probe",
                &format!("p{i}"),
                UtcMicros(probes_from + i * 1_000),
                b"",
            )
        })
        .collect();
    for r in futures_lite::future::block_on(futures_util::future::join_all(calls)) {
        r.expect("probe acknowledged");
    }
    assert!(
        now_us() < probes_from,
        "registered too slowly for the probes' times"
    );
    println!(
        "registered {PAGED} paged timers and {probe_count} probes in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let metrics = h.store_metrics();
    let paged = || {
        metrics
            .iter()
            .map(|m| m.store.page_timers.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    // The load: from the first sample below the most the gauge showed (once registration
    // is over and published) to the first at zero.
    let (mut most, mut load_from, mut load_to) = (0, None, None);
    std::thread::sleep(Duration::from_millis(300));
    while now_us() < t0 + 30 * SECOND {
        let n = paged();
        let at = now_us();
        most = most.max(n);
        if load_from.is_none() && n < most {
            load_from = Some(at);
        }
        if load_from.is_some() && load_to.is_none() && n == 0 {
            load_to = Some(at);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The gauge is published every 100 ms: widen the window by that on each side.
    let from = load_from.map_or(0, |t| t.saturating_sub(100_000));
    let to = load_to.map_or(u64::MAX, |t| t + 100_000);
    println!("paged at most: {most}");
    println!(
        "load of the million: from {:.2} s to {:.2} s after the start (gauge every 100 ms)",
        (from as f64 - t0 as f64) / 1e6,
        (to as f64 - t0 as f64) / 1e6
    );
    let probes = probes.lock().expect("probes").clone();
    let mut parts: [(&str, Vec<i64>); 3] = [
        ("before", vec![]),
        ("during the load", vec![]),
        ("after", vec![]),
    ];
    for (deadline, late) in &probes {
        let i = if *deadline < from {
            0
        } else if *deadline <= to {
            1
        } else {
            2
        };
        parts[i].1.push(*late);
    }
    println!("| probes due | n | p50 µs | p99 µs | p99.9 µs | max µs | early |");
    println!("|---|---|---|---|---|---|---|");
    for (name, mut v) in parts {
        v.sort_unstable();
        let q = |p: f64| {
            v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        let early = v.iter().filter(|l| **l < 0).count();
        println!(
            "| {name} | {} | {} | {} | {} | {} | {early} |",
            v.len(),
            q(0.5),
            q(0.99),
            q(0.999),
            v.last().copied().unwrap_or(0)
        );
    }
    assert_eq!(probes.len() as u64, probe_count, "every probe fired once");
    assert_eq!(
        paged_fired.load(Ordering::Relaxed),
        PAGED as u64,
        "every paged timer fired once"
    );
    engine.shutdown().expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let root = std::env::var_os("PUNCTUAL_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/page-load-lateness"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("dir");
    root
}
