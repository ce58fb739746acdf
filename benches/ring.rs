//! Moving work between cores: the shard ring's queue type on its own, and the real ingest path
//! through the engine.
//!
//! - `ring/throughput`: one producer thread pinned to core 0 pushes N messages through a
//!   `crossbeam_queue::ArrayQueue` of 65,536 slots (the shard ring's type and default
//!   capacity), one consumer pinned to core 1 pops them; both spin when the queue is full or
//!   empty. Timed from the producer's first push to the consumer's last pop; one iteration is
//!   one message. For an 8-byte message and a 40-byte one (about the size of the ring's `Op`).
//! - `ring/ping-pong`: the same two pinned threads and two queues; one iteration is one round
//!   trip (push there, the other core pops and pushes back, pop). Half of it is the one-way
//!   cache-line hand-off latency between the cores.
//! - `engine/...`: one shard pinned to core 1 (`EngineBuilder::new().shards(1).cores(vec![1])`,
//!   default capacities), the caller on core 0, deadlines one hour ahead so nothing fires:
//!   - `schedule round trip, shard parked`: sleep 1 ms (untimed) so the shard parks, then one
//!     blocking `schedule`: validate, pack, push, wake the shard, the shard upserts into its
//!     table and replies. This bounds the ingest latency to a parked shard from above (the
//!     reply's trip back, and the caller's own wake-up from its blocking receive, are
//!     included). The p50..max of 2,000 such round trips is printed once.
//!   - `schedule round trip, back to back`: the same without the pause; the shard may still be
//!     awake from the previous call.
//!   - `schedule_detached throughput`: pushes without waiting (spinning while the ring is
//!     full), then one blocking `schedule` behind them, so the time covers the shard applying
//!     every one. One iteration is one timer.
//!
//!   Keys cycle through a pool of 1 million pre-built strings, so the shard's table holds at
//!   most 1 million timers; after the first pass a schedule replaces a pending timer (an upsert
//!   with remove + insert) rather than adding one. Packing tenant, key and payload (one
//!   allocation) happens on the caller's thread in the engine, and is part of what is timed.
//!
//! Needs two cores, 0 and 1 (pinning failures are reported and the bench runs unpinned).
//!
//! Run: `cargo bench --bench ring` (about a minute). Smoke test: `cargo bench --bench ring --
//! --test`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use punctual::{Engine, EngineBuilder, Error, UtcMicros};
use std::hint::{black_box, spin_loop};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The shard ring's default capacity (`EngineBuilder`).
const RING_CAPACITY: usize = 65_536;
const PRODUCER_CORE: usize = 0;
const CONSUMER_CORE: usize = 1;
const KEY_POOL: usize = 1_000_000;
const TENANT: &str = "shop";
const PAYLOAD: &[u8] = br#"{"order":88120042}"#;
const HOUR_US: u64 = 3_600_000_000;

/// Pins the calling thread to `core`; says so once per thread when it cannot.
fn pin(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("could not pin a bench thread to core {core}; it runs unpinned");
    }
}

/// Pushes `msg`, spinning while the queue is full.
fn push_spin<M>(queue: &ArrayQueue<M>, mut msg: M) {
    while let Err(back) = queue.push(msg) {
        msg = back;
        spin_loop();
    }
}

/// Pops one message, spinning while the queue is empty.
fn pop_spin<M>(queue: &ArrayQueue<M>) -> M {
    loop {
        if let Some(msg) = queue.pop() {
            return msg;
        }
        spin_loop();
    }
}

/// `iters` messages from core 0 to core 1; time from the first push to the last pop.
fn throughput<M: Copy + Send + Sync>(iters: u64, msg: M) -> Duration {
    let queue = ArrayQueue::<M>::new(RING_CAPACITY);
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            pin(CONSUMER_CORE);
            ready.wait();
            for _ in 0..iters {
                black_box(pop_spin(&queue));
            }
            Instant::now()
        });
        let producer = s.spawn(|| {
            pin(PRODUCER_CORE);
            ready.wait();
            let start = Instant::now();
            for _ in 0..iters {
                push_spin(&queue, black_box(msg));
            }
            start
        });
        let start = producer.join().expect("producer thread");
        let end = consumer.join().expect("consumer thread");
        end.saturating_duration_since(start)
    })
}

/// `iters` round trips between core 0 and core 1 through two queues.
fn ping_pong(iters: u64) -> Duration {
    let there = ArrayQueue::<u64>::new(RING_CAPACITY);
    let back = ArrayQueue::<u64>::new(RING_CAPACITY);
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(CONSUMER_CORE);
            ready.wait();
            for _ in 0..iters {
                push_spin(&back, pop_spin(&there));
            }
        });
        let pinger = s.spawn(|| {
            pin(PRODUCER_CORE);
            ready.wait();
            let start = Instant::now();
            for i in 0..iters {
                push_spin(&there, i);
                black_box(pop_spin(&back));
            }
            start.elapsed()
        });
        pinger.join().expect("pinger thread")
    })
}

fn ring_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring");
    group.throughput(Throughput::Elements(1));
    group.bench_function("throughput, 8-byte messages", |b| {
        b.iter_custom(|iters| throughput(iters, 0u64))
    });
    group.bench_function("throughput, 40-byte messages", |b| {
        b.iter_custom(|iters| throughput(iters, [0u64; 5]))
    });
    group.bench_function("ping-pong round trip", |b| b.iter_custom(ping_pong));
    group.finish();
}

/// The engine and what the benches send it, built on first use.
struct Ingest {
    engine: Engine,
    keys: Vec<String>,
    next_key: usize,
}

impl Ingest {
    fn start() -> Ingest {
        let engine = EngineBuilder::new()
            .shards(1)
            .cores(vec![CONSUMER_CORE])
            .build()
            .expect("engine starts with one shard on core 1");
        // The caller side of every engine bench runs on this thread, on the other core. Pinned
        // only now: the builder checks the shard's core against this thread's affinity.
        pin(PRODUCER_CORE);
        Ingest {
            engine,
            keys: (0..KEY_POOL).map(|i| format!("order:{i}")).collect(),
            next_key: 0,
        }
    }

    fn key(&mut self) -> &str {
        let key = &self.keys[self.next_key];
        self.next_key = (self.next_key + 1) % KEY_POOL;
        key
    }

    fn deadline(&self) -> UtcMicros {
        self.engine.handle().now().saturating_add_micros(HOUR_US)
    }

    /// One blocking schedule; its round-trip time.
    fn round_trip(&mut self, deadline: UtcMicros) -> Duration {
        let handle = self.engine.handle();
        let key = self.key();
        let start = Instant::now();
        black_box(handle.schedule(TENANT, key, deadline, PAYLOAD)).expect("scheduled");
        start.elapsed()
    }

    /// `iters` blocking schedules, each after a pause long enough for the shard to park.
    fn parked_round_trips(&mut self, iters: u64) -> Duration {
        let deadline = self.deadline();
        (0..iters)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(1));
                self.round_trip(deadline)
            })
            .sum()
    }

    fn print_parked_percentiles(&mut self) {
        let mut rtts: Vec<Duration> = Vec::with_capacity(2_000);
        let deadline = self.deadline();
        for _ in 0..2_000 {
            std::thread::sleep(Duration::from_millis(1));
            rtts.push(self.round_trip(deadline));
        }
        rtts.sort_unstable();
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
        eprintln!(
            "schedule round trip to a parked shard, 2,000 samples: p50 {:.1} µs, p90 {:.1} µs, \
             p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs (target: ingest p99 <= 100 µs)",
            at(0.5),
            at(0.9),
            at(0.99),
            at(0.999),
            at(1.0)
        );
    }

    fn detached(&mut self, iters: u64) -> Duration {
        let handle = self.engine.handle();
        let deadline = self.deadline();
        let start = Instant::now();
        for _ in 0..iters {
            let key = self.key();
            loop {
                match handle.schedule_detached(TENANT, key, deadline, PAYLOAD) {
                    Ok(()) => break,
                    Err(Error::RingFull { .. }) => spin_loop(),
                    Err(e) => panic!("schedule_detached: {e}"),
                }
            }
        }
        // The ring is FIFO: once this answers, the shard has applied every push above.
        // A full ring refuses it too: retry until it is in.
        let key = self.key();
        loop {
            match handle.schedule(TENANT, key, deadline, PAYLOAD) {
                Ok(_) => break,
                Err(Error::RingFull { .. }) => spin_loop(),
                Err(e) => panic!("schedule: {e}"),
            }
        }
        start.elapsed()
    }
}

fn engine_benches(c: &mut Criterion) {
    let mut ingest: Option<Ingest> = None;
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.bench_function("schedule round trip, shard parked", |b| {
        let ingest = ingest.get_or_insert_with(|| {
            let mut ingest = Ingest::start();
            ingest.print_parked_percentiles();
            ingest
        });
        b.iter_custom(|iters| ingest.parked_round_trips(iters));
    });
    group.bench_function("schedule round trip, back to back", |b| {
        let ingest = ingest.get_or_insert_with(Ingest::start);
        b.iter_custom(|iters| {
            let deadline = ingest.deadline();
            (0..iters).map(|_| ingest.round_trip(deadline)).sum()
        });
    });
    group.bench_function("schedule_detached throughput", |b| {
        let ingest = ingest.get_or_insert_with(Ingest::start);
        b.iter_custom(|iters| ingest.detached(iters));
    });
    group.finish();
    if let Some(ingest) = ingest {
        if let Err(e) = ingest.engine.shutdown() {
            eprintln!("engine shutdown: {e}");
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = ring_benches, engine_benches
}
criterion_main!(benches);
