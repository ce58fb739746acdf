//! Wheel operations at 1 thousand, 1 million and 10 million pending timers: insert, cancel,
//! an insert+cancel pair, and advance-with-expiry, for the bare `Wheel<u64>` and for the
//! `TimerTable` (index by (tenant, key) + wheel: what a shard really runs), with
//! `tokio_util::time::DelayQueue` insert and remove at 1 million pending as the baseline.
//!
//! Run: `cargo bench --bench wheel` (about 2–3 minutes on the 2-core VM; one group:
//! `cargo bench --bench wheel -- 'table/1M'`). Smoke test: `cargo bench --bench wheel -- --test`.
//!
//! # Method
//!
//! Each group (one structure at one size) builds its population once, lazily on its first
//! benchmark, with exact capacity: `n` timers whose deadlines are spread uniformly over 1 s to
//! 1 h ahead of a virtual "now". It prints, once, the engine's heap bytes per pending timer
//! (`heap_bytes() / len`: slab, levels and index, target ≤ 64) and, for the table, the packed
//! tenant/key/payload bytes per timer, which live in their own allocations and are not part of
//! that figure. Building per iteration would make 10 million infeasible on this machine.
//!
//! The population then stays at `n` (± one batch) in steady state. Every iteration is one
//! operation (criterion `Throughput::Elements(1)`, so the report is time per operation), run in
//! batches of `min(n / 10, 1000)` distinct timers picked uniformly at random from the whole
//! population (cold in cache, as a real cancel would be):
//!
//! - `insert`: cancel a batch (untimed), then insert as many new timers (timed). The slab's
//!   free list is LIFO, so the new timers reuse the entries just freed, warm in cache, as they
//!   would in a shard where cancels and inserts interleave; the slot lists they join are not.
//! - `cancel`: cancel a batch (timed), then insert as many new ones (untimed).
//! - `insert+cancel pair`: both timed; one iteration is one cancel plus one insert.
//! - `advance`: move "now" forward by the span in which about one batch falls due and poll
//!   (timed: firing, cascading, the fire callback), then re-insert the fired timers at
//!   now + 1 s..1 h (untimed). One iteration is one fired timer, cascades amortised in.
//! - `next_deadline`: the O(levels) bitmap scan a shard does before it parks.
//!
//! Only the structure's own work is timed. Deadlines, slot picks, and for the table the
//! `PackedTimer`s to insert and the identities to cancel are built before each timed batch;
//! cancelled and fired records are parked and dropped after it, so neither allocating nor
//! freeing key bytes is measured (in the engine the caller's thread allocates them).
//! The bench uses mimalloc, as the binary does.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::{EntryRef, Wheel};
use punctual::wheel::{TimerRecord, TimerTable};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tokio_util::time::delay_queue::{DelayQueue, Key};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZES: [(usize, &str); 3] = [(1_000, "1k"), (1_000_000, "1M"), (10_000_000, "10M")];
/// Deadlines lie this far ahead of "now", uniformly.
const MIN_AHEAD_US: u64 = 1_000_000;
const MAX_AHEAD_US: u64 = 3_600_000_000;
/// The virtual clock starts at a fixed UTC instant (2023-11-14), so runs are repeatable.
const START: UtcMicros = UtcMicros(1_700_000_000_000_000);
const TENANT: &str = "shop";
const PAYLOAD: &[u8] = br#"{"order":88120042}"#;

/// splitmix64: fast, seedable, good enough to spread deadlines and pick slots.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn ahead_us(&mut self) -> u64 {
        MIN_AHEAD_US + self.below(MAX_AHEAD_US - MIN_AHEAD_US)
    }
}

/// Picks distinct population slots uniformly at random: a partial Fisher–Yates shuffle over a
/// permutation kept between batches.
struct Picker {
    perm: Vec<u32>,
}

impl Picker {
    fn new(n: usize) -> Picker {
        Picker {
            perm: (0..n as u32).collect(),
        }
    }

    fn pick(&mut self, rng: &mut Rng, count: usize, out: &mut Vec<u32>) {
        let n = self.perm.len();
        for k in 0..count {
            let j = k + rng.below((n - k) as u64) as usize;
            self.perm.swap(k, j);
        }
        out.clear();
        out.extend_from_slice(&self.perm[..count]);
    }
}

/// A structure holding a steady population of timers, one per slot `0..n`. The `prepare_*`
/// and `settle` methods run untimed; `insert` and `cancel` are what the bench times.
trait Population {
    /// Builds what inserting new timers into `slots` needs (deadlines, packed keys).
    fn prepare_insert(&mut self, slots: &[u32]);
    fn insert(&mut self, slots: &[u32]);
    /// Builds what cancelling the timers in `slots` needs (identities).
    fn prepare_cancel(&mut self, slots: &[u32]);
    fn cancel(&mut self, slots: &[u32]);
    /// Drops what `cancel` parked, and checks that every cancel found its timer.
    fn settle(&mut self);
}

/// A population on a wheel, which can also move time forward.
trait Expiring: Population {
    /// Advances "now" by `step_us` and polls, timed. Returns how many timers fired.
    fn advance(&mut self, step_us: u64) -> usize;
    /// The slots of the timers the last `advance` fired (untimed).
    fn fired_slots(&mut self, out: &mut Vec<u32>);
    fn next_deadline(&self) -> Option<UtcMicros>;
}

struct WheelPop {
    wheel: Wheel<u64>,
    handles: Vec<EntryRef>,
    now: u64,
    rng: Rng,
    deadlines: Vec<UtcMicros>,
    fired: Vec<u32>,
}

impl WheelPop {
    fn build(n: usize) -> WheelPop {
        let mut pop = WheelPop {
            wheel: Wheel::new(START, n),
            handles: Vec::with_capacity(n),
            now: START.0,
            rng: Rng(0x5eed_0001),
            deadlines: Vec::new(),
            fired: Vec::new(),
        };
        for slot in 0..n as u64 {
            let deadline = UtcMicros(pop.now + pop.rng.ahead_us());
            let handle = pop.wheel.insert(deadline, slot).expect("deadline in range");
            pop.handles.push(handle);
        }
        pop
    }
}

impl Population for WheelPop {
    fn prepare_insert(&mut self, slots: &[u32]) {
        self.deadlines.clear();
        for _ in slots {
            self.deadlines
                .push(UtcMicros(self.now + self.rng.ahead_us()));
        }
    }

    fn insert(&mut self, slots: &[u32]) {
        for (&slot, &deadline) in slots.iter().zip(&self.deadlines) {
            self.handles[slot as usize] = self
                .wheel
                .insert(deadline, u64::from(slot))
                .expect("deadline in range");
        }
    }

    fn prepare_cancel(&mut self, _slots: &[u32]) {}

    fn cancel(&mut self, slots: &[u32]) {
        for &slot in slots {
            black_box(self.wheel.remove(self.handles[slot as usize]));
        }
    }

    fn settle(&mut self) {}
}

impl Expiring for WheelPop {
    fn advance(&mut self, step_us: u64) -> usize {
        self.now += step_us;
        let fired = &mut self.fired;
        fired.clear();
        self.wheel
            .poll(UtcMicros(self.now), |_, _, slot| fired.push(slot as u32));
        fired.len()
    }

    fn fired_slots(&mut self, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.fired);
    }

    fn next_deadline(&self) -> Option<UtcMicros> {
        self.wheel.next_deadline()
    }
}

struct TablePop {
    table: TimerTable,
    /// How many times each slot's timer was replaced; part of its key, so keys stay unique.
    generation: Vec<u32>,
    now: u64,
    rng: Rng,
    to_insert: Vec<(PackedTimer, UtcMicros)>,
    /// Identities to cancel, back to back; `ident_ends[i]` ends the i-th.
    idents: Vec<u8>,
    ident_ends: Vec<usize>,
    cancelled: Vec<Option<(UtcMicros, TimerRecord)>>,
    fired: Vec<TimerRecord>,
}

/// A realistic key, from which the bench can read the slot back when the timer fires.
fn key_for(slot: u32, generation: u32) -> String {
    format!("order:{slot:x}.{generation:x}")
}

fn slot_of(record: &TimerRecord) -> u32 {
    let key = record.timer.key();
    let hex = key
        .strip_prefix("order:")
        .and_then(|k| k.split('.').next())
        .expect("bench key");
    u32::from_str_radix(hex, 16).expect("bench key")
}

impl TablePop {
    fn build(n: usize) -> TablePop {
        let mut pop = TablePop {
            table: TimerTable::new(START, n),
            generation: vec![0; n],
            now: START.0,
            rng: Rng(0x5eed_0002),
            to_insert: Vec::new(),
            idents: Vec::new(),
            ident_ends: Vec::new(),
            cancelled: Vec::new(),
            fired: Vec::new(),
        };
        for slot in 0..n as u32 {
            let timer = PackedTimer::new(TENANT, &key_for(slot, 0), PAYLOAD).expect("short");
            let deadline = UtcMicros(pop.now + pop.rng.ahead_us());
            pop.table
                .upsert(timer, deadline, UtcMicros(pop.now))
                .expect("room and range");
        }
        pop
    }
}

impl Population for TablePop {
    fn prepare_insert(&mut self, slots: &[u32]) {
        self.to_insert.clear();
        for &slot in slots {
            let generation = &mut self.generation[slot as usize];
            *generation += 1;
            let timer =
                PackedTimer::new(TENANT, &key_for(slot, *generation), PAYLOAD).expect("short");
            let deadline = UtcMicros(self.now + self.rng.ahead_us());
            self.to_insert.push((timer, deadline));
        }
    }

    fn insert(&mut self, _slots: &[u32]) {
        let now = UtcMicros(self.now);
        for (timer, deadline) in self.to_insert.drain(..) {
            black_box(self.table.upsert(timer, deadline, now).expect("room"));
        }
    }

    fn prepare_cancel(&mut self, slots: &[u32]) {
        self.idents.clear();
        self.ident_ends.clear();
        for &slot in slots {
            let key = key_for(slot, self.generation[slot as usize]);
            let timer = PackedTimer::new(TENANT, &key, b"").expect("short");
            self.idents.extend_from_slice(timer.identity());
            self.ident_ends.push(self.idents.len());
        }
    }

    fn cancel(&mut self, _slots: &[u32]) {
        let mut start = 0;
        for &end in &self.ident_ends {
            self.cancelled
                .push(self.table.cancel(&self.idents[start..end]));
            start = end;
        }
    }

    fn settle(&mut self) {
        assert!(
            self.cancelled.iter().all(Option::is_some),
            "a bench cancel missed its timer"
        );
        self.cancelled.clear();
    }
}

impl Expiring for TablePop {
    fn advance(&mut self, step_us: u64) -> usize {
        self.now += step_us;
        let fired = &mut self.fired;
        self.table
            .poll(UtcMicros(self.now), |_, record| fired.push(record));
        fired.len()
    }

    fn fired_slots(&mut self, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.fired.iter().map(slot_of));
        self.fired.clear();
    }

    fn next_deadline(&self) -> Option<UtcMicros> {
        self.table.next_deadline()
    }
}

/// The DelayQueue baseline. It needs a tokio runtime with time enabled, entered while it lives.
struct DelayQueuePop {
    queue: DelayQueue<u32>,
    keys: Vec<Key>,
    rng: Rng,
    deadlines: Vec<tokio::time::Instant>,
}

impl DelayQueuePop {
    fn build(n: usize) -> DelayQueuePop {
        let mut pop = DelayQueuePop {
            queue: DelayQueue::with_capacity(n),
            keys: Vec::with_capacity(n),
            rng: Rng(0x5eed_0003),
            deadlines: Vec::new(),
        };
        let base = tokio::time::Instant::now();
        for slot in 0..n as u32 {
            let at = base + Duration::from_micros(pop.rng.ahead_us());
            pop.keys.push(pop.queue.insert_at(slot, at));
        }
        pop
    }
}

impl Population for DelayQueuePop {
    fn prepare_insert(&mut self, slots: &[u32]) {
        let base = tokio::time::Instant::now();
        self.deadlines.clear();
        for _ in slots {
            self.deadlines
                .push(base + Duration::from_micros(self.rng.ahead_us()));
        }
    }

    fn insert(&mut self, slots: &[u32]) {
        for (&slot, &at) in slots.iter().zip(&self.deadlines) {
            self.keys[slot as usize] = self.queue.insert_at(slot, at);
        }
    }

    fn prepare_cancel(&mut self, _slots: &[u32]) {}

    fn cancel(&mut self, slots: &[u32]) {
        for &slot in slots {
            black_box(self.queue.remove(&self.keys[slot as usize]));
        }
    }

    fn settle(&mut self) {}
}

/// What one benchmark times in each batch.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    Cancel,
    Pair,
}

/// Runs `iters` operations of kind `op` in batches; returns the time of the timed parts.
fn steady_ops<P: Population>(
    pop: &mut P,
    picker: &mut Picker,
    rng: &mut Rng,
    iters: u64,
    op: Op,
) -> Duration {
    let n = picker.perm.len();
    let batch = (n / 10).clamp(1, 1000);
    let mut slots = Vec::with_capacity(batch);
    let mut timed = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let count = batch.min(left as usize);
        left -= count as u64;
        picker.pick(rng, count, &mut slots);
        pop.prepare_cancel(&slots);
        pop.prepare_insert(&slots);
        // Cancel first, so the population never exceeds its exact capacity. Every op runs
        // the same work; only what counts as timed differs.
        let start = Instant::now();
        pop.cancel(&slots);
        let cancel = start.elapsed();
        pop.settle();
        let start = Instant::now();
        pop.insert(&slots);
        let insert = start.elapsed();
        timed += match op {
            Op::Insert => insert,
            Op::Cancel => cancel,
            Op::Pair => cancel + insert,
        };
    }
    timed
}

/// Moves time forward until at least `iters` timers fired, re-inserting each fired timer
/// (untimed), and returns the time of the polls scaled to exactly `iters` fired timers.
fn advance_fired<P: Expiring>(pop: &mut P, n: usize, iters: u64) -> Duration {
    let batch = (n / 10).clamp(1, 1000) as u64;
    // The span in which about one batch falls due: n timers spread over the horizon.
    let step_us = (batch * (MAX_AHEAD_US - MIN_AHEAD_US) / n as u64).max(1);
    let mut slots = Vec::new();
    let mut timed = Duration::ZERO;
    let mut fired = 0u64;
    while fired < iters {
        let start = Instant::now();
        fired += pop.advance(step_us) as u64;
        timed += start.elapsed();
        pop.fired_slots(&mut slots);
        pop.prepare_insert(&slots);
        pop.insert(&slots);
    }
    timed.mul_f64(iters as f64 / fired as f64)
}

/// What one population costs in engine memory; printed once, when it is built.
trait Memory {
    fn memory(&self) -> String;
}

impl Memory for WheelPop {
    fn memory(&self) -> String {
        let len = self.wheel.len();
        format!(
            "{len} pending, heap {} B = {:.1} B/timer (slab + levels)",
            self.wheel.heap_bytes(),
            self.wheel.heap_bytes() as f64 / len as f64
        )
    }
}

impl Memory for TablePop {
    fn memory(&self) -> String {
        let len = self.table.len();
        let packed: usize = (0..len as u32)
            .map(|slot| 2 + TENANT.len() + key_for(slot, 0).len() + PAYLOAD.len())
            .sum();
        format!(
            "{len} pending, engine heap {} B = {:.1} B/timer (slab + levels + index; target \
             <= 64); packed tenant/key/payload {:.1} B/timer on top ({:.1} of them payload), \
             in separate allocations",
            self.table.heap_bytes(),
            self.table.heap_bytes() as f64 / len as f64,
            packed as f64 / len as f64,
            PAYLOAD.len() as f64
        )
    }
}

/// A population plus its own slot picker and random stream.
struct State<P> {
    pop: P,
    picker: Picker,
    rng: Rng,
}

fn build_state<P: Memory>(group: &str, n: usize, build: fn(usize) -> P) -> State<P> {
    let start = Instant::now();
    let pop = build(n);
    eprintln!(
        "{group}: built in {:.1} s; {}",
        start.elapsed().as_secs_f64(),
        pop.memory()
    );
    State {
        pop,
        picker: Picker::new(n),
        rng: Rng(0x5eed_1000 + n as u64),
    }
}

/// insert, cancel, pair, advance and next_deadline on one structure at one size.
fn wheel_group<P: Expiring + Memory>(
    c: &mut Criterion,
    name: &str,
    n: usize,
    build: fn(usize) -> P,
) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    let mut state: Option<State<P>> = None;
    for (op, op_name) in [
        (Op::Insert, "insert"),
        (Op::Cancel, "cancel"),
        (Op::Pair, "insert+cancel pair"),
    ] {
        group.bench_function(op_name, |b| {
            let s = state.get_or_insert_with(|| build_state(name, n, build));
            b.iter_custom(|iters| steady_ops(&mut s.pop, &mut s.picker, &mut s.rng, iters, op));
        });
    }
    group.bench_function("advance (per fired timer)", |b| {
        let s = state.get_or_insert_with(|| build_state(name, n, build));
        b.iter_custom(|iters| advance_fired(&mut s.pop, n, iters));
    });
    group.measurement_time(Duration::from_secs(1));
    group.bench_function("next_deadline", |b| {
        let s = state.get_or_insert_with(|| build_state(name, n, build));
        b.iter(|| black_box(s.pop.next_deadline()));
    });
    group.finish();
}

fn wheel_benches(c: &mut Criterion) {
    for (n, label) in SIZES {
        wheel_group(c, &format!("wheel/{label}"), n, WheelPop::build);
    }
    for (n, label) in SIZES {
        wheel_group(c, &format!("table/{label}"), n, TablePop::build);
    }
}

/// tokio_util's DelayQueue at 1 million pending: the insert rate the wheel must at least match.
fn delay_queue_benches(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let _context = runtime.enter();
    let mut group = c.benchmark_group("delay_queue/1M");
    group.throughput(Throughput::Elements(1));
    let mut state: Option<State<DelayQueuePop>> = None;
    let mut build = || {
        let start = Instant::now();
        let pop = DelayQueuePop::build(N);
        eprintln!(
            "delay_queue/1M: built in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        State {
            pop,
            picker: Picker::new(N),
            rng: Rng(0x5eed_2000),
        }
    };
    for (op, op_name) in [(Op::Insert, "insert"), (Op::Cancel, "remove")] {
        group.bench_function(op_name, |b| {
            let s = state.get_or_insert_with(&mut build);
            b.iter_custom(|iters| steady_ops(&mut s.pop, &mut s.picker, &mut s.rng, iters, op));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = wheel_benches, delay_queue_benches
}
criterion_main!(benches);
