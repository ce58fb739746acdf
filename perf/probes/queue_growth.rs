//! What a store's queue costs the shard's thread while a backlog grows, with the service's
//! allocator, each beside what it replaced, in the same run:
//!
//! - the longest single push onto a queue of 200,000 elements of 232 bytes (the size of a
//!   Redis outbox entry): a `VecDeque`, which doubles, and the store's chunked `Deque`;
//! - the longest single write of a 1 KiB record while the journal's outbox grows to 256 MiB
//!   behind a disk that takes nothing: one `VecDeque` of bytes, and the outbox.
//!
//! ```sh
//! cargo run --release --example queue_growth
//! ```

use punctual::store::deque::Deque;
use punctual::store::journal::outbox::Outbox;
use punctual::store::Ack;
use std::collections::VecDeque;
use std::time::Instant;

/// The service's allocator (`src/main.rs`): its reallocation of a large block copies it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// 232 bytes, as a Redis outbox entry.
struct Wide([u64; 29]);

const N: u64 = 200_000;

/// Records of 1 KiB to 256 MiB.
const RECORDS: u64 = 256 << 10;

/// The whole run of `n` pushes and its longest, in ms and µs.
fn longest(n: u64, mut push: impl FnMut(u64)) -> (f64, f64) {
    let (started, mut most) = (Instant::now(), 0u128);
    for i in 0..n {
        let t = Instant::now();
        push(i);
        most = most.max(t.elapsed().as_nanos());
    }
    (started.elapsed().as_secs_f64() * 1e3, most as f64 / 1e3)
}

/// Both timings of a round, the two run in turn: the first in a round pays the process's
/// fresh pages, the second the allocator returning what the first freed.
fn in_turn<A, B>(round: usize, a: impl FnOnce() -> A, b: impl FnOnce() -> B) -> (A, B) {
    if round % 2 == 0 {
        let a = a();
        (a, b())
    } else {
        let b = b();
        (a(), b)
    }
}

fn first(round: usize, a: &'static str, b: &'static str) -> &'static str {
    if round % 2 == 0 {
        a
    } else {
        b
    }
}

fn main() {
    for round in 0..4 {
        let (mut v, mut d) = (VecDeque::new(), Deque::new());
        let ((v_ms, v_us), (d_ms, d_us)) = in_turn(
            round,
            || longest(N, |i| v.push_back(Wide([i; 29]))),
            || longest(N, |i| d.push_back(Wide([i; 29]))),
        );
        println!(
            "{N} pushes of 232 bytes ({} first): VecDeque {v_ms:.1} ms, longest {v_us:.0} µs; chunks {d_ms:.1} ms, longest {d_us:.0} µs",
            first(round, "VecDeque", "chunks")
        );
        std::hint::black_box((v.back().map(|w| w.0[0]), d.back().map(|w| w.0[28])));
    }
    let record = [7u8; 1024];
    for round in 0..4 {
        let mut v: VecDeque<u8> = VecDeque::new();
        let mut o = Outbox::new(usize::MAX, usize::MAX, std::time::Duration::from_secs(60));
        let write = |b: &mut Vec<u8>| {
            b.extend_from_slice(&record);
            record.len()
        };
        let ((v_ms, v_us), (o_ms, o_us)) = in_turn(
            round,
            || longest(RECORDS, |_| v.extend(&record)),
            || longest(RECORDS, |_| o.push(write, Ack::None, "")),
        );
        println!(
            "{RECORDS} records of 1 KiB ({} first): VecDeque of bytes {v_ms:.1} ms, longest {v_us:.0} µs; outbox {o_ms:.1} ms, longest {o_us:.0} µs",
            first(round, "VecDeque", "outbox")
        );
        std::hint::black_box((v.len(), o.len()));
    }
}
