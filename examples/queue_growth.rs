//! The longest single push onto a queue of 200,000 elements of 232 bytes (the size of a Redis
//! outbox entry), with the service's allocator: a `VecDeque`, which doubles, beside the
//! store's chunked `Deque`, in the same run. What a store's queue costs the shard's thread the
//! first time a burst fills it to its bound.
//!
//! ```sh
//! cargo run --release --example queue_growth
//! ```

use punctual::store::deque::Deque;
use std::collections::VecDeque;
use std::time::Instant;

/// The service's allocator (`src/main.rs`): its reallocation of a large block copies it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// 232 bytes, as a Redis outbox entry.
struct Wide([u64; 29]);

const N: u64 = 200_000;

/// The whole run and its longest push, in ms and µs.
fn longest(mut push: impl FnMut(u64)) -> (f64, f64) {
    let (started, mut most) = (Instant::now(), 0u128);
    for i in 0..N {
        let t = Instant::now();
        push(i);
        most = most.max(t.elapsed().as_nanos());
    }
    (started.elapsed().as_secs_f64() * 1e3, most as f64 / 1e3)
}

fn main() {
    // Each after the other in turn: the first in a round pays the process's fresh pages, the
    // second the allocator returning what the first freed.
    for round in 0..4 {
        let (mut v, mut d) = (VecDeque::new(), Deque::new());
        let mut time_v = || longest(|i| v.push_back(Wide([i; 29])));
        let mut time_d = || longest(|i| d.push_back(Wide([i; 29])));
        let ((v_ms, v_us), (d_ms, d_us)) = if round % 2 == 0 {
            let v = time_v();
            (v, time_d())
        } else {
            let d = time_d();
            (time_v(), d)
        };
        let first = if round % 2 == 0 { "VecDeque" } else { "chunks" };
        println!(
            "{N} pushes of 232 bytes ({first} first): VecDeque {v_ms:.1} ms, longest {v_us:.0} µs; chunks {d_ms:.1} ms, longest {d_us:.0} µs"
        );
        std::hint::black_box((v.back().map(|w| w.0[0]), d.back().map(|w| w.0[28])));
    }
}
