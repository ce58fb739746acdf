//! Many pending timers on one node, far in the future: how fast they are registered, the
//! resident memory and disk they take, and how long a restart takes to recover them.
//!
//! ```text
//! cargo bench --bench pending                       # 100,000,000 timers (needs about 26 GiB of RAM)
//! cargo bench --bench pending -- --timers 50000000
//! cargo bench --bench pending -- --timers 100000000 --shards 8   # a host with 16 cores
//! cargo bench --bench pending -- --timers 10000000 --thp-off      # as `punctual serve` runs
//! cargo bench --bench pending -- --timers 100000000 --thp-off --page-horizon-s 3600  # paged
//! cargo bench --bench pending -- --timers 10000000 --page-horizon-s 3600 --probes-s 90
//! ```
//!
//! With `--probes-s S`, timers due during the restart's recovery and the minute after it are
//! measured too: how late each fires (`pending/probes.rs`).
//!
//! With `--page-horizon-s S` the journal pages timers due more than S seconds ahead
//! (`page`): nearly all of them with an hour, since the timers start an hour ahead. Printed
//! then too: how many are paged after registration and after recovery.
//!
//! The engine runs as `punctual serve` does: 2 shards (`--shards N`), the journal store (`fsync
//! always`), mimalloc. Timers have 32-byte keys and 100-byte payloads and are spread evenly over
//! 7 days, from one hour ahead; one client thread per shard registers them through the library
//! API, each keeping 4,096 acknowledged schedules in flight. Transparent huge pages are as the
//! host has them (with `madvise`, mimalloc asks for them); `--thp-off` turns them off for the
//! bench's processes, as `punctual serve` does by default. The data goes under
//! `$PUNCTUAL_BENCH_DIR` or `./target/pending-bench`. Printed:
//!
//! - registrations per second, acknowledged (durable);
//! - resident memory (VmRSS) before and after, and per pending timer;
//! - disk: bytes the journal wrote, and blocks allocated, per pending timer;
//! - recovery: a fresh process starts an engine on the data directory; seconds until every
//!   shard has recovered, the timers recovered, and that process's VmRSS.
//!
//! Registration and recovery each run in a process of their own (this executable again, with
//! `--register DIR` or `--recover DIR`), so neither holds the other's memory.

#[path = "journal/measure.rs"]
mod measure;
#[path = "pending/probes.rs"]
mod probes;

use measure::{allocated_bytes, rss_bytes, store_sum};
use punctual::engine::Pinning;
use punctual::store::journal::JournalConfig;
use punctual::{EngineBuilder, UtcMicros};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAYLOAD: [u8; 100] = [b'p'; 100];
const HOUR_US: u64 = 3_600_000_000;
const SPAN_US: u64 = 7 * 24 * HOUR_US;
const IN_FLIGHT: usize = 4_096;

/// `--page-horizon-s`: 0 pages nothing.
static HORIZON_S: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// `--probes-s`: 0 schedules no probes.
static PROBES_S: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The flags that take a value, and those that do not (`--bench` is cargo's).
const WITH_VALUE: [&str; 6] = [
    "--timers",
    "--shards",
    "--page-horizon-s",
    "--probes-s",
    "--register",
    "--recover",
];
const BARE: [&str; 2] = ["--thp-off", "--bench"];

/// Exits with the usage on `--help` (status 0) or on a flag it does not know (status 2): the
/// default run registers a hundred million timers and needs about 26 GiB, not a thing to start
/// by mistyping a flag.
fn check_args(args: &[String]) {
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        if (WITH_VALUE.contains(&a.as_str()) && rest.next().is_some()) || BARE.contains(&a.as_str())
        {
            continue;
        }
        let help = a == "--help" || a == "-h";
        if !help {
            eprintln!("pending: unknown flag or missing value: {a}");
        }
        eprintln!(
            "usage: pending [--timers N] [--shards N] [--page-horizon-s S] [--probes-s S] [--thp-off]\n\
             (see the doc at the top of benches/pending.rs; the default is 100,000,000 timers)"
        );
        std::process::exit(if help { 0 } else { 2 });
    }
}

fn main() {
    let start_us = probes::now_us();
    let args: Vec<String> = std::env::args().collect();
    check_args(&args);
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let n: usize =
        value("--timers").map_or(100_000_000, |v| v.parse().expect("--timers takes a count"));
    let shards: usize = value("--shards").map_or(2, |v| v.parse().expect("--shards takes a count"));
    let thp_off = args.iter().any(|a| a == "--thp-off");
    let horizon: Option<u64> =
        value("--page-horizon-s").map(|v| v.parse().expect("--page-horizon-s takes seconds"));
    HORIZON_S.store(horizon.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    let probes_s: u64 =
        value("--probes-s").map_or(0, |v| v.parse().expect("--probes-s takes seconds"));
    PROBES_S.store(probes_s, std::sync::atomic::Ordering::Relaxed);
    if thp_off {
        punctual::engine::transparent_huge_pages_off().expect("PR_SET_THP_DISABLE");
        if value("--register").is_none() && value("--recover").is_none() {
            println!("transparent huge pages off for these processes (--thp-off)");
        }
    }
    if let Some(dir) = value("--register") {
        register(Path::new(dir), n, shards);
        return;
    }
    if let Some(dir) = value("--recover") {
        recover(Path::new(dir), n, shards, start_us);
        return;
    }
    let root = std::env::var_os("PUNCTUAL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/pending-bench"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench dir");
    let dir = root.join("data");
    // Each part in a process of its own, so that neither holds the other's memory.
    for part in ["--register", "--recover"] {
        let out = std::process::Command::new(std::env::current_exe().expect("own path"))
            .args([part, &dir.to_string_lossy()])
            .args(["--timers", &n.to_string(), "--shards", &shards.to_string()])
            .args(
                horizon
                    .map(|h| ["--page-horizon-s".to_string(), h.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(thp_off.then_some("--thp-off"))
            .args(["--probes-s".to_string(), probes_s.to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("bench process");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        assert!(out.status.success(), "{part} failed: {}", out.status);
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Registers `n` timers into a fresh engine on `dir` and prints the rate, memory and disk.
fn register(dir: &Path, n: usize, shards: usize) {
    let e = engine(dir, n, shards, None);
    let rss0 = rss_bytes();
    let started = Instant::now();
    schedule_all(&e.handle(), n, shards);
    let secs = started.elapsed().as_secs_f64();
    let probes_s = PROBES_S.load(std::sync::atomic::Ordering::Relaxed);
    if probes_s > 0 {
        probes::schedule(&e.handle(), dir, probes_s);
    }
    let rss = rss_bytes();
    let written = store_sum(&e.handle(), |s| &s.journal_disk_bytes);
    let (paged, pages) = paged(&e.handle());
    e.shutdown().expect("shutdown");
    let allocated = allocated_bytes(dir);
    println!(
        "registered {n} timers on {shards} shards (32 B keys, 100 B payloads, over 7 days) in {secs:.1} s: {:.0}/s",
        n as f64 / secs
    );
    println!(
        "  RSS {:.2} GiB at {n} pending ({:.2} GiB with none, the engine started): {:.0} B per pending timer",
        gib(rss),
        gib(rss0),
        (rss - rss0) as f64 / n as f64
    );
    println!(
        "  disk: {:.2} GiB written ({:.0} B per timer), {:.2} GiB allocated ({:.0} B per timer)",
        gib(written),
        written as f64 / n as f64,
        gib(allocated),
        allocated as f64 / n as f64
    );
    if HORIZON_S.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        println!(
            "  paged: {paged} of {n} timers, {:.2} GiB of pages on disk beside the journal",
            gib(pages)
        );
    }
}

/// Timers paged and bytes of pages on disk, once the shards published them (every 100 ms).
fn paged(h: &punctual::Handle) -> (u64, u64) {
    std::thread::sleep(Duration::from_millis(300));
    (
        store_sum(h, |s| &s.page_timers),
        store_sum(h, |s| &s.page_disk_bytes),
    )
}

/// Starts an engine with room for `n` timers on `dir`, waits for every shard to recover and
/// prints how long it took.
fn recover(dir: &Path, n: usize, shards: usize, start_us: u64) {
    let started = Instant::now();
    let fires = probes::Fires::default();
    let e = engine(dir, n, shards, Some(&fires));
    let secs = started.elapsed().as_secs_f64();
    let ready_us = probes::now_us();
    let timers = store_sum(&e.handle(), |s| &s.recovered_timers);
    let rss = rss_bytes();
    println!(
        "  recovery: {timers} timers in {secs:.1} s in a fresh process, RSS {:.2} GiB",
        gib(rss)
    );
    if HORIZON_S.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        let (paged, pages) = paged(&e.handle());
        println!(
            "  after recovery: {paged} paged, {:.2} GiB of pages",
            gib(pages)
        );
    }
    let probes_s = PROBES_S.load(std::sync::atomic::Ordering::Relaxed);
    // Probes that fell due before the registering process ended fired there.
    assert!(
        (n as u64..=n as u64 + probes_s * 100).contains(&timers),
        "every registered timer is recovered"
    );
    if probes_s > 0 {
        fires.report(dir, start_us, ready_us);
    }
    e.shutdown().expect("shutdown");
}

fn engine(
    dir: &Path,
    capacity: usize,
    shards: usize,
    fires: Option<&probes::Fires>,
) -> punctual::Engine {
    let mut cfg = JournalConfig::new(dir);
    cfg.ack_timeout = Duration::from_secs(60);
    let horizon = HORIZON_S.load(std::sync::atomic::Ordering::Relaxed);
    cfg.page_horizon = (horizon > 0).then(|| Duration::from_secs(horizon));
    let mut b = EngineBuilder::new();
    if let Some(f) = fires {
        b = b.on_fire(f.handler());
    }
    let e = b
        .shards(shards)
        .pinning(Pinning::Auto)
        .spin(Duration::ZERO)
        .shard_capacity(capacity + 100_000)
        .journal_config(cfg)
        .build()
        .expect("engine");
    assert!(e.handle().wait_store_ready(Duration::from_secs(3_600)));
    e
}

/// `n` timers from `threads` threads, each with `IN_FLIGHT` schedules awaiting their acks.
fn schedule_all(h: &punctual::Handle, n: usize, threads: usize) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let h = h.clone();
            s.spawn(move || {
                let mut i = t;
                while i < n {
                    let mut calls = Vec::with_capacity(IN_FLIGHT);
                    while calls.len() < IN_FLIGHT && i < n {
                        let due = now + HOUR_US + (i as u64 * SPAN_US) / n as u64;
                        let key = format!("order-{i:026}"); // 32 bytes
                        calls.push(h.schedule_async("shop", &key, UtcMicros(due), &PAYLOAD));
                        i += threads;
                    }
                    for r in futures_lite::future::block_on(futures_util::future::join_all(calls)) {
                        r.expect("acknowledged");
                    }
                }
            });
        }
    });
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}
