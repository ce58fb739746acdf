//! The history's cost per fire (`punctual::history`), with the history on against off in the
//! same run, rounds alternated.
//!
//! ```text
//! cargo bench --bench history                  # 200,000 timers a round, 4 rounds of each
//! cargo bench --bench history -- --n 50000 --rounds 2
//! ```
//!
//! - **Burst**: one engine as the memory store runs it (1 shard, no pinning, no spinning, a
//!   fire handler that counts), `n` plain timers with 32-byte keys due at one instant T a few
//!   seconds ahead; measured from just before T until every timer fired and, history on,
//!   until the history's thread applied every entry: the process's CPU time
//!   (`CLOCK_PROCESS_CPUTIME_ID`, every thread: the shard, the history's thread, the rest)
//!   per fire, and the wall time from T to the last fire (the fire path alone).
//! - **Bytes**: the heap an entry takes in the index (a counting allocator, net bytes after
//!   `n` fires of distinct keys) and a fire's line in the journal's log.

use punctual::clock::clock_ns;
use punctual::engine::Pinning;
use punctual::history::{Event, History, Index, Outcome};
use punctual::{EngineBuilder, UtcMicros};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Net heap bytes allocated (allocations minus frees), to size an entry.
struct Counting;

static NET: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        NET.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NET.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` was allocated by `System` with `l` (every allocation goes through here).
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_us() -> u64 {
    clock_ns(libc::CLOCK_REALTIME) / 1_000
}

/// One burst of `n` timers; (CPU ns per fire, wall ms from the deadline to the last fire).
fn burst(n: usize, history: bool) -> (f64, f64) {
    let fired = Arc::new(AtomicU64::new(0));
    let count = fired.clone();
    let h = history.then(|| History::open(None, Duration::from_secs(3600), n).expect("history"));
    let mut b = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(n + 1_000)
        .on_fire(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
    if let Some(h) = &h {
        b = b.history(h.clone());
    }
    let engine = b.build().expect("engine");
    let handle = engine.handle();
    let due = now_us() + 4_000_000 + n as u64 * 10;
    let mut calls = Vec::with_capacity(4096);
    for i in 0..n {
        let key = format!("order-{i:026}");
        calls.push(handle.schedule_async("shop", &key, UtcMicros(due), b"{}"));
        if calls.len() == 4096 || i + 1 == n {
            for r in futures_lite::future::block_on(futures_util::future::join_all(calls.drain(..)))
            {
                r.expect("scheduled");
            }
        }
    }
    let lead = due.saturating_sub(now_us());
    assert!(lead > 100_000, "scheduling took too long: raise the lead");
    std::thread::sleep(Duration::from_micros(lead - 50_000));
    let cpu0 = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    let mut last_fire_us = 0;
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        let done = fired.load(Ordering::Relaxed) as usize >= n;
        if done && last_fire_us == 0 {
            last_fire_us = now_us();
        }
        if done && h.as_ref().is_none_or(|h| h.entries() >= n) {
            break;
        }
        assert!(Instant::now() < give_up, "the burst did not finish");
        std::thread::sleep(Duration::from_micros(200));
    }
    let cpu = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    engine.shutdown().expect("shutdown");
    let wall_ms = last_fire_us.saturating_sub(due) as f64 / 1_000.0;
    (cpu as f64 / n as f64, wall_ms)
}

/// Net heap bytes per entry of `n` fires of distinct keys, and a fire's log line.
fn bytes(n: usize) -> (f64, usize) {
    let event = |i: usize| Event {
        tenant: "shop".into(),
        key: format!("order-{i:026}").into(),
        version: 1_764_574_768_000_000 + i as u64,
        fire_at_us: 1_896_084_900_000_000,
        at_us: 1_896_084_900_000_180,
        attempt: None,
        outcome: Outcome::Fired,
    };
    let line = serde_json::to_vec(&event(0)).expect("json").len() + 1;
    let before = NET.load(Ordering::Relaxed);
    let mut index = Index::new(u64::MAX, n);
    for i in 0..n {
        index.apply(event(i));
    }
    let net = NET.load(Ordering::Relaxed) - before;
    assert_eq!(index.len(), n);
    (net as f64 / n as f64, line)
}

fn main() {
    if std::env::args().any(|a| a == "--test") {
        burst(1_000, true);
        burst(1_000, false);
        bytes(1_000);
        return;
    }
    let n = arg("--n", 200_000);
    let rounds = arg("--rounds", 4);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for r in 0..rounds * 2 {
        let history = r % 2 == 0;
        let (cpu, wall) = burst(n, history);
        println!(
            "round {r}: history {}: {cpu:.0} ns CPU per fire, last fire {wall:.1} ms after the deadline",
            if history { "on " } else { "off" }
        );
        if history { &mut on } else { &mut off }.push((cpu, wall));
    }
    let median = |v: &mut Vec<(f64, f64)>, pick: fn(&(f64, f64)) -> f64| {
        let mut x: Vec<f64> = v.iter().map(pick).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    let (cpu_on, cpu_off) = (median(&mut on, |x| x.0), median(&mut off, |x| x.0));
    let (wall_on, wall_off) = (median(&mut on, |x| x.1), median(&mut off, |x| x.1));
    println!(
        "median CPU per fire: on {cpu_on:.0} ns, off {cpu_off:.0} ns, on/off {:.2} (+{:.0} ns)",
        cpu_on / cpu_off,
        cpu_on - cpu_off
    );
    println!(
        "median last fire after the deadline: on {wall_on:.1} ms, off {wall_off:.1} ms, on/off {:.2}",
        wall_on / wall_off
    );
    let (heap, line) = bytes(n);
    println!("an entry: {heap:.0} heap bytes in the index (32-byte keys), {line} bytes in the log");
}
