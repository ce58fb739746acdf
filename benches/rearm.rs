//! Keeping a fired timer, the two ways the table allows (run: `cargo bench --bench rearm`):
//!
//! - **round trip**: the poll pops the timer (its slab entry freed, its index entry removed
//!   after the poll), and the caller inserts it again under its version with its new metadata
//!   and deadline (`insert_with_version`: a lookup, a slab entry, an index entry). What the
//!   shard did for every webhook attempt before `poll_keeping`.
//! - **one call**: `poll_keeping` answers the fire with `Fate::Rearm`; the timer stays in its
//!   slab entry and index entry. What the shard does now.
//!
//! Each round fires 4,096 kept timers (a webhook's 120 bytes of metadata each, re-packed
//! either way) out of a table that holds 1 million others due in a day or more, and keeps
//! them 30 s on; the figure is the time per kept fire, over 200 rounds, both ways in one run,
//! alternating, so that the host's noise falls on both. Only the table's work and the
//! re-pack are timed; the old bytes are dropped after each round.

use punctual::timer::PackedTimer;
use punctual::wheel::{Fate, TimerRecord, TimerTable};
use punctual::UtcMicros;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PENDING: u64 = 1_000_000;
const KEPT: u64 = 4_096;
const ROUNDS: u64 = 200;
const STEP_US: u64 = 30_000_000;
const DAY_US: u64 = 86_400_000_000;

/// A table of `PENDING` timers due in 1–2 days (after the last round) and `KEPT` due at
/// `start`.
fn table(start: u64) -> TimerTable {
    let mut t = TimerTable::new(UtcMicros(start - 1), (PENDING + KEPT) as usize);
    for i in 0..PENDING {
        let timer = PackedTimer::new("t", &format!("pending-{i}"), b"{}").expect("short");
        let due = start + DAY_US + (i * DAY_US / PENDING);
        t.insert_with_version(timer, UtcMicros(due), i + 1)
            .expect("room");
    }
    for i in 0..KEPT {
        let timer =
            PackedTimer::with_meta("t", &format!("kept-{i}"), &[0; 120], b"{}").expect("short");
        t.insert_with_version(timer, UtcMicros(start), PENDING + i + 1)
            .expect("room");
    }
    t
}

/// One round the old way: pop, then insert again after the poll.
fn round_trip(t: &mut TimerTable, now: u64, meta: &[u8], spent: &mut Vec<PackedTimer>) -> Duration {
    let began = Instant::now();
    let mut kept: Vec<(UtcMicros, TimerRecord)> = Vec::with_capacity(KEPT as usize);
    t.poll_at_most(UtcMicros(now), usize::MAX, |d, r| kept.push((d, r)));
    for (_, r) in kept {
        let new = r.timer.with_new_meta(meta).expect("short");
        t.insert_with_version(new, UtcMicros(now + STEP_US), r.version)
            .expect("room");
        spent.push(r.timer);
    }
    began.elapsed()
}

/// One round in one call: re-armed at the fire.
fn one_call(t: &mut TimerTable, now: u64, meta: &[u8], spent: &mut Vec<PackedTimer>) -> Duration {
    let began = Instant::now();
    t.poll_keeping(
        UtcMicros(now),
        usize::MAX,
        |_, r| {
            Fate::Rearm(
                UtcMicros(now + STEP_US),
                r.timer.with_new_meta(meta).expect("short"),
            )
        },
        |old| spent.push(old),
    );
    began.elapsed()
}

fn main() {
    let start = 1_750_000_000_000_000;
    let (mut a, mut b) = (table(start), table(start));
    let (mut took_a, mut took_b) = (Duration::ZERO, Duration::ZERO);
    let mut spent = Vec::with_capacity(KEPT as usize);
    for round in 0..ROUNDS {
        let now = start + round * STEP_US;
        let meta = [(round % 251) as u8; 120];
        took_a += round_trip(&mut a, now, &meta, &mut spent);
        spent.clear();
        took_b += one_call(&mut b, now, &meta, &mut spent);
        spent.clear();
    }
    assert_eq!(
        (a.len(), b.len()),
        ((PENDING + KEPT) as usize, (PENDING + KEPT) as usize)
    );
    let per = |d: Duration| d.as_nanos() as f64 / (ROUNDS * KEPT) as f64;
    println!(
        "keeping a fired timer, {KEPT} per round among {PENDING} pending, {ROUNDS} rounds: \
         round trip {:.0} ns, one call {:.0} ns per kept fire",
        per(took_a),
        per(took_b)
    );
}
