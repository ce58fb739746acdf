//! A 65 MB answer (a page of a thousand dead letters of 65,000 bytes) written into one buffer
//! a letter at a time, as the service encodes it between looks at its slice, under the
//! service's allocator: the longest single append when the buffer grows as it fills (each
//! doubling copies all it holds, in one step) against one reserved at its estimated size.
//! The first round takes fresh memory from the system, the later ones reuse it.
//!
//! ```sh
//! cargo run --release --example buffer_growth
//! ```

use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let letter = vec![b'x'; 65_000];
    for round in 0..5 {
        for reserved in [false, true] {
            let mut out: Vec<u8> = if reserved {
                Vec::with_capacity(1_000 * letter.len())
            } else {
                Vec::new()
            };
            let mut longest = Duration::ZERO;
            for _ in 0..1_000 {
                let t = Instant::now();
                out.extend_from_slice(&letter);
                longest = longest.max(t.elapsed());
            }
            println!(
                "round {round}, {}: longest append {:.0} µs",
                if reserved { "reserved" } else { "grown" },
                longest.as_secs_f64() * 1e6
            );
        }
    }
}
