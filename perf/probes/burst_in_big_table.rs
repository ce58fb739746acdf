//! A burst out of a big table: `PENDING` timers pending (default 8,000,000), every
//! `PENDING / BURST`-th of them (default 400,000) due at one instant and the rest far later.
//! Reports the burst's time and the longest gap between two consecutive fires: what stops a
//! burst midway (the table's own recording of what it fired, which a poll of a big table
//! keeps for up to 1/32 of it), as opposed to its average cost (`burst_fire`).
//!
//! ```sh
//! cargo run --release --example burst_in_big_table -- 8000000 400000
//! ```

use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const START: UtcMicros = UtcMicros(1_000_000);
const DUE: UtcMicros = UtcMicros(3_000_000);

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pending = args.first().copied().unwrap_or(8_000_000);
    let burst = args.get(1).copied().unwrap_or(400_000).clamp(1, pending);
    if let Err(e) = punctual::engine::transparent_huge_pages_off() {
        eprintln!("transparent huge pages stay as the host has them: {e}");
    }
    let mut table = TimerTable::new(START, pending);
    let payload = [b'x'; 100];
    let mut key = String::with_capacity(32);
    for i in 0..pending {
        use std::fmt::Write;
        key.clear();
        let _ = write!(key, "order:{i:026}");
        let Some(timer) = PackedTimer::new("shop", &key, &payload) else {
            eprintln!("names too long");
            return;
        };
        let deadline = if i % (pending / burst) == 0 {
            DUE
        } else {
            UtcMicros(100_000_000 + i as u64)
        };
        if table.upsert(timer, deadline, START).is_err() {
            eprintln!("table refused timer {i}");
            return;
        }
    }
    // On the way to the deadline, as a shard polls: the burst cascades down ahead of it.
    for ms in 2_000..3_000 {
        table.poll(UtcMicros(ms * 1_000), |_, _| {});
    }
    let (mut fired, mut longest_gap) = (0usize, 0u128);
    let started = Instant::now();
    let mut last = started;
    table.poll(DUE, |_, _| {
        fired += 1;
        let now = Instant::now();
        longest_gap = longest_gap.max((now - last).as_nanos());
        last = now;
    });
    println!(
        "{fired} fired out of {pending} pending in {:.1} ms; longest gap between two fires {:.0} µs",
        started.elapsed().as_secs_f64() * 1e3,
        longest_gap as f64 / 1e3
    );
}
