//! What a shard's timer table costs as it grows from empty: the longest single insert (a pause
//! while the slab or the index grows), and the memory it holds, virtual and resident, per
//! pending timer. Keys are 32 bytes and payloads 100 bytes, as in the service's memory figure.
//!
//! ```sh
//! cargo run --release --example table_growth                  # 4,000,000 timers, capacity 10,000,000
//! cargo run --release --example table_growth -- 10000000
//! cargo run --release --example table_growth -- 4000000 --thp  # with transparent huge pages
//! ```
//!
//! Like `punctual serve`, it turns transparent huge pages off for itself unless `--thp` is given
//! (see `tuning/README.md`: each first touch of a huge page stalls the thread for milliseconds
//! on a small VM).
//!
//! The table is made with the service's default per-shard capacity (10 million), as
//! `punctual serve` makes it; the timers' packed bytes are built one at a time just before
//! their insert, as the service's connection tasks do, and counted in the resident figure.

use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CAPACITY: usize = 10_000_000;
const NOW: UtcMicros = UtcMicros(1_700_000_000_000_000);

/// (virtual, resident) bytes of this process, from /proc/self/statm.
fn memory() -> (u64, u64) {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut fields = statm
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    let (size, resident) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    (size * 4096, resident * 4096)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(4_000_000);
    let thp = args.iter().any(|a| a == "--thp");
    if !thp {
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument (the rest zero) and only sets
        // a flag on this process's memory map.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
    let payload = [b'x'; 100];
    let (virt0, rss0) = memory();
    let mut table = TimerTable::new(NOW, CAPACITY);
    let (virt_empty, rss_empty) = memory();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut key = String::with_capacity(32);
    let mut worst_ns = 0u64;
    let mut over_1ms = 0usize;
    let mut over_100us = 0usize;
    let started = Instant::now();
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        key.clear();
        use std::fmt::Write;
        let _ = write!(key, "order:{i:026}");
        let Some(timer) = PackedTimer::new("shop", &key, &payload) else {
            eprintln!("names too long");
            return;
        };
        // Deadlines from 1 s to about 1 h ahead, as in the wheel bench.
        let deadline = UtcMicros(NOW.0 + 1_000_000 + rng % 3_600_000_000);
        let t0 = Instant::now();
        let ok = table.upsert(timer, deadline, NOW).is_ok();
        let took = t0.elapsed().as_nanos() as u64;
        if !ok {
            eprintln!("table refused timer {i}");
            return;
        }
        worst_ns = worst_ns.max(took);
        over_1ms += usize::from(took > 1_000_000);
        over_100us += usize::from(took > 100_000);
    }
    let total = started.elapsed();
    let (virt, rss) = memory();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "{n} timers inserted into a table of capacity {CAPACITY} in {total:.2?} (transparent huge pages {})",
        if thp { "allowed" } else { "off" }
    );
    println!(
        "empty table: virtual +{:.0} MiB, resident +{:.1} MiB",
        mib(virt_empty.saturating_sub(virt0)),
        mib(rss_empty.saturating_sub(rss0))
    );
    println!(
        "longest insert {:.2} ms; inserts over 100 µs: {over_100us}, over 1 ms: {over_1ms}",
        worst_ns as f64 / 1e6
    );
    println!(
        "at {n}: resident {:.1} B per timer (all of it: table, keys, payloads, allocator); virtual {:.0} MiB",
        rss.saturating_sub(rss0) as f64 / n as f64,
        mib(virt)
    );
}
