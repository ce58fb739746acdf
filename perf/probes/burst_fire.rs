//! Cost per fired timer when a million timers fall due at the same microsecond: the timer
//! table (index + wheel, what a shard runs) against the bare wheel, in the same run; and the
//! table's insert cost for a million new keys (their packed keys built beforehand), and what
//! cascading the burst down to level 0 costs per entry and level (`wheel::MOVE_NS`).
//!
//! ```sh
//! cargo run --release --example burst_fire
//! ```

use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use punctual::wheel::Wheel;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const N: usize = 1_000_000;
const START: UtcMicros = UtcMicros(1_000_000);
const DUE: UtcMicros = UtcMicros(4_000_000);

fn main() {
    for round in 1..=3 {
        let mut table = TimerTable::new(START, N);
        let timers: Vec<PackedTimer> = (0..N)
            .filter_map(|i| PackedTimer::new("bench", &format!("t{i}"), &(i as u64).to_le_bytes()))
            .collect();
        let t0 = Instant::now();
        for (i, timer) in timers.into_iter().enumerate() {
            if table.upsert(timer, DUE, START).is_err() {
                eprintln!("table refused timer {i}");
                return;
            }
        }
        let insert_ns = t0.elapsed().as_nanos() as f64 / N as f64;
        // Cascade down to level 0 first, as the shard does on its way to the deadline.
        let levels_above = table.occupancy().iter().position(|&n| n > 0).unwrap_or(0);
        let t0 = Instant::now();
        table.poll(UtcMicros(DUE.0 - 1), |_, _| {});
        let cascade_ns = t0.elapsed().as_nanos() as f64 / (N * levels_above.max(1)) as f64;
        let t0 = Instant::now();
        let mut fired = 0usize;
        table.poll(DUE, |_, _| fired += 1);
        let table_ns = t0.elapsed().as_nanos() as f64 / fired.max(1) as f64;

        let mut wheel: Wheel<u64> = Wheel::new(START, N);
        for i in 0..N {
            let _ = wheel.insert(DUE, i as u64);
        }
        wheel.poll(UtcMicros(DUE.0 - 1), |_, _, _| {});
        let t0 = Instant::now();
        let mut wheel_fired = 0usize;
        wheel.poll(DUE, |_, _, _| wheel_fired += 1);
        let wheel_ns = t0.elapsed().as_nanos() as f64 / wheel_fired.max(1) as f64;
        println!(
            "round {round}: table insert {insert_ns:.1} ns per new key; cascade {cascade_ns:.1} ns per entry and level ({levels_above} levels down); {fired} fired: table {table_ns:.1} ns per fired timer, bare wheel {wheel_ns:.1} ns"
        );
    }
}
