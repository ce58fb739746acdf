//! How long the purge of a partition (a load or drop of one that was loaded, on a node of a
//! Redis Cluster) holds a shard's thread, walked in one go as before and in slices as the
//! shard walks it now (`src/shard/load_drop.rs`): one table of `n` timers over the 1,024
//! partitions, one partition purged each way.
//!
//! ```sh
//! cargo run --release --example purge_stretch                # 1,000,000 timers
//! cargo run --release --example purge_stretch -- 4000000
//! ```
//!
//! The slice is the shard's (`cooperate::SLICE`, 200 µs); the sliced walk asks the clock every
//! `PURGE_CHECK` entries, as the shard's does. Between two slices the shard serves its other
//! work; here nothing runs between them, so the sliced total is the walk's cost alone.

use punctual::partition::partition_of;
use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The shard's slice (`cooperate::SLICE`).
const SLICE: Duration = Duration::from_micros(200);
const NOW: UtcMicros = UtcMicros(1_700_000_000_000_000);

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut table = TimerTable::new(NOW, n as usize);
    for i in 0..n {
        let key = format!("order:{i:012}");
        let Some(timer) = PackedTimer::new("shop", &key, b"{}") else {
            eprintln!("names too long");
            return;
        };
        // Deadlines spread over about an hour from 1 s ahead.
        let deadline = UtcMicros(NOW.0 + 1_000_000 + (i * 7_919) % 3_600_000_000);
        if table.upsert(timer, deadline, NOW).is_err() {
            eprintln!("table refused timer {i}");
            return;
        }
    }
    let first = partition_of("shop", "order:000000000000");
    let second = (1..)
        .map(|i| partition_of("shop", &format!("order:{i:012}")))
        .find(|&p| p != first)
        .unwrap_or(first);

    let started = Instant::now();
    let removed = table.purge(|t| partition_of(t.tenant(), t.key()) == first, |_, _| {});
    let one_go = started.elapsed();
    println!(
        "{n} timers: one walk purged {removed} of partition {first} in {one_go:.2?} (one stretch)"
    );

    let bound = table.slab_bound();
    let (mut from, mut removed, mut slices) = (0, 0usize, 0u32);
    let mut longest = Duration::ZERO;
    let started = Instant::now();
    loop {
        let begun = Instant::now();
        let end = begun + SLICE;
        let next = table.purge_from(
            from,
            bound,
            |t| partition_of(t.tenant(), t.key()) == second,
            |_, _| {},
            &mut removed,
            || Instant::now() >= end,
        );
        longest = longest.max(begun.elapsed());
        slices += 1;
        match next {
            Some(i) => from = i,
            None => break,
        }
    }
    println!(
        "{n} timers: sliced walk purged {removed} of partition {second} in {slices} slices, \
         {:.2?} in all, longest slice {longest:.2?}",
        started.elapsed()
    );
}
