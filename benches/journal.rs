//! The journal store's figures, with the disk's own floor and Redis measured in the same run:
//!
//! - disk floor: a loop of one 4 KiB write + fdatasync, and the same with 64 KiB;
//! - Redis: `redis-server --appendonly yes --appendfsync always` driven by
//!   `redis-benchmark -P 64 -t zadd`;
//! - punctual, 2 shards, through the library API: durable registrations/s (32 B key, 100 B
//!   payload), p99 acknowledgement latency at half that rate, disk bytes per pending timer,
//!   recovery of 1 M and 10 M timers.
//!
//! `cargo bench --bench journal` (all), `-- --quick` (100 k registrations, recovery of 1 M only).
//! The data goes under `$PUNCTUAL_BENCH_DIR` or `./target/journal-bench` (a real disk: on
//! tmpfs `fdatasync` costs nothing).

#[path = "journal/measure.rs"]
mod measure;

use measure::{allocated_bytes, store_sum};
use punctual::engine::Pinning;
use punctual::store::journal::JournalConfig;
use punctual::{EngineBuilder, UtcMicros};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let root = std::env::var_os("PUNCTUAL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/journal-bench"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench dir");
    println!(
        "# journal bench on {} ({} CPUs)",
        root.display(),
        num_cpus()
    );

    for size in [4096usize, 65536] {
        let (ops, p50, p99) = disk_floor(&root, size, if quick { 500 } else { 3000 });
        println!(
            "disk floor  {:>3} KiB write + fdatasync: {ops:>8.0} /s ({:.0} MB/s)  p50 {p50:.0} µs  p99 {p99:.0} µs",
            size / 1024,
            ops * size as f64 / 1e6
        );
    }

    match redis(&root, if quick { 100_000 } else { 500_000 }) {
        Ok(rps) => {
            println!("redis appendfsync always, redis-benchmark -P 64 -t zadd: {rps:>9.0} ZADD/s")
        }
        Err(e) => println!("redis: not measured: {e}"),
    }

    let n = if quick { 100_000 } else { 1_000_000 };
    let dir = root.join("throughput");
    let (rate, bytes_per_timer, allocated_per_timer) = throughput(&dir, n);
    println!(
        "punctual journal, 2 shards: {rate:>9.0} durable registrations/s ({n} timers, 32 B key, 100 B payload)"
    );
    println!(
        "  disk per pending timer: {bytes_per_timer:.0} B written, {allocated_per_timer:.0} B allocated (incl. each shard's preallocated 64 MiB active segment)"
    );
    let half = rate / 2.0;
    let (p50, p99, p999, achieved) =
        latency(&root.join("latency"), half, if quick { 2 } else { 5 });
    println!(
        "  ack latency at {achieved:.0}/s (half): p50 {p50:.0} µs  p99 {p99:.0} µs  p99.9 {p999:.0} µs"
    );

    let sizes: &[usize] = if quick {
        &[1_000_000]
    } else {
        &[1_000_000, 10_000_000]
    };
    for &n in sizes {
        let dir = root.join(format!("recovery-{n}"));
        load(&dir, n);
        let (secs, timers) = recover(&dir, n);
        println!("  recovery of {timers} timers: {secs:.2} s");
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `n` writes of `size` bytes, each followed by fdatasync, on an O_DIRECT file.
fn disk_floor(root: &Path, size: usize, n: usize) -> (f64, f64, f64) {
    let path = root.join(format!("floor-{size}"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("floor file");
    // An aligned buffer for O_DIRECT.
    let layout = std::alloc::Layout::from_size_align(size, 4096).expect("layout");
    // SAFETY: a non-zero size with a valid alignment; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: `ptr` points to `size` initialised bytes that nothing else uses.
    let buf = unsafe { std::slice::from_raw_parts(ptr, size) };
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(buf).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let ops = n as f64 / start.elapsed().as_secs_f64();
    // SAFETY: allocated above with this layout, not used after.
    unsafe { std::alloc::dealloc(ptr, layout) };
    let _ = std::fs::remove_file(&path);
    lat.sort_by(f64::total_cmp);
    (ops, lat[n / 2], lat[n * 99 / 100])
}

/// redis-server with appendfsync always, driven by redis-benchmark; ZADD/s.
fn redis(root: &Path, n: usize) -> Result<f64, String> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.local_addr().map_err(|e| e.to_string())?.port()
    };
    let dir = root.join("redis");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut server = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--appendonly", "yes"])
        .args(["--appendfsync", "always", "--save", ""])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("redis-server: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-P", "64", "-t", "zadd", "-q"])
        .args(["-n", &n.to_string()])
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"));
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out?.stdout).into_owned();
    // "ZADD: 123456.79 requests per second, p50=..." (the last of its \r-separated updates).
    text.rsplit(['\r', '\n'])
        .find_map(|l| {
            l.trim()
                .strip_prefix("ZADD: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text:?}"))
}

fn engine(dir: &Path, capacity: usize) -> punctual::Engine {
    let mut cfg = JournalConfig::new(dir);
    cfg.ack_timeout = Duration::from_secs(30);
    let e = EngineBuilder::new()
        .shards(2)
        .pinning(Pinning::Auto)
        .spin(Duration::ZERO)
        .shard_capacity(capacity)
        .ring_capacity(1 << 20)
        .journal_config(cfg)
        .build()
        .expect("engine");
    assert!(e.handle().wait_store_ready(Duration::from_secs(600)));
    e
}

fn key(i: usize) -> String {
    format!("order-{i:026}") // 32 bytes
}

const PAYLOAD: [u8; 100] = [b'p'; 100];

fn far() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
        + 3_600_000_000
}

/// Schedules `n` timers from two client threads, each keeping a window of calls in flight;
/// the acknowledged rate, and disk bytes per pending timer (written, allocated).
fn throughput(dir: &Path, n: usize) -> (f64, f64, f64) {
    let e = engine(dir, n);
    let started = Instant::now();
    schedule_all(&e.handle(), 0, n);
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let written = store_sum(&e.handle(), |s| &s.journal_disk_bytes);
    let allocated = allocated_bytes(dir);
    e.shutdown().expect("shutdown");
    (rate, written as f64 / n as f64, allocated as f64 / n as f64)
}

fn schedule_all(h: &punctual::Handle, from: usize, n: usize) {
    let threads = 2;
    let due = far();
    std::thread::scope(|s| {
        for t in 0..threads {
            let h = h.clone();
            s.spawn(move || {
                let mine: Vec<usize> = (from..from + n).filter(|i| i % threads == t).collect();
                for chunk in mine.chunks(4096) {
                    let calls: Vec<_> = chunk
                        .iter()
                        .map(|&i| h.schedule_async("shop", &key(i), UtcMicros(due), &PAYLOAD))
                        .collect();
                    for r in futures_lite::future::block_on(futures_util::future::join_all(calls)) {
                        r.expect("acknowledged");
                    }
                }
            });
        }
    });
}

/// Issues schedules at `rate`/s for `secs` s from one thread, polling their answers as they
/// come; (p50, p99, p99.9) of issue-to-acknowledgement in µs, and the rate achieved.
fn latency(dir: &Path, rate: f64, secs: u64) -> (f64, f64, f64, f64) {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let total = (rate * secs as f64) as usize;
    let e = engine(dir, total + 1);
    let h = e.handle();
    let due = far();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut issued = 0usize;
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    while issued < total || !pending.is_empty() {
        let now = Instant::now();
        while issued < total && started + gap * issued as u32 <= now {
            let at = Instant::now();
            let f = h.schedule_async("shop", &key(issued), UtcMicros(due), &PAYLOAD);
            pending.push(async move {
                let r = f.await;
                (r, at.elapsed())
            });
            issued += 1;
        }
        while let std::task::Poll::Ready(Some((r, took))) = pending.poll_next_unpin(&mut cx) {
            r.expect("acknowledged");
            let _ = hist.record(took.as_micros() as u64);
        }
        // Two cores run the two shards: leave them the CPU between looks.
        std::thread::yield_now();
    }
    let achieved = total as f64 / started.elapsed().as_secs_f64();
    e.shutdown().expect("shutdown");
    let _ = std::fs::remove_dir_all(dir);
    (
        hist.value_at_quantile(0.5) as f64,
        hist.value_at_quantile(0.99) as f64,
        hist.value_at_quantile(0.999) as f64,
        achieved,
    )
}

fn load(dir: &Path, n: usize) {
    let e = engine(dir, n);
    schedule_all(&e.handle(), 0, n);
    e.shutdown().expect("shutdown");
}

/// Starts an engine on `dir` and waits until every shard has recovered; (seconds, timers).
fn recover(dir: &Path, n: usize) -> (f64, u64) {
    let started = Instant::now();
    let e = engine(dir, n);
    let secs = started.elapsed().as_secs_f64();
    let timers = store_sum(&e.handle(), |s| &s.recovered_timers);
    e.shutdown().expect("shutdown");
    (secs, timers)
}
