//! What one clock reading costs on this host, for each reading the clock source offers: the TSC
//! as the fire path reads it (`TimeSource::ticks_now`, plain RDTSC), the TSC with RDTSCP
//! (`TimeSource::ticks`), and CLOCK_REALTIME through the vDSO (`TimeSource::realtime`, what a
//! shard reads before it fires and the jitter bench's recorder reads at each fire). A guest
//! may pay several times a bare host's cost.
//!
//! ```sh
//! cargo run --release --example clock_read_cost
//! ```

use punctual::clock::{HostSource, TimeSource};
use std::hint::black_box;
use std::time::Instant;

const READS: u32 = 20_000_000;

/// Mean ns per call of `read`, over `READS` calls.
fn per_read(read: impl Fn() -> u64) -> f64 {
    let start = Instant::now();
    let mut sum = 0u64;
    for _ in 0..READS {
        sum = sum.wrapping_add(read());
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / f64::from(READS)
}

fn main() {
    let src = HostSource::detect();
    println!("clock source: {:?}", src.kind());
    for round in 1..=2 {
        let plain = per_read(|| src.ticks_now().0);
        let serialized = per_read(|| src.ticks().0);
        let realtime = per_read(|| src.realtime().0);
        println!(
            "round {round}: TSC (rdtsc) {plain:.1} ns, TSC (rdtscp) {serialized:.1} ns, \
             clock_gettime(CLOCK_REALTIME) {realtime:.1} ns per read ({READS} reads each)"
        );
    }
}
