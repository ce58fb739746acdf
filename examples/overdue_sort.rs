//! Overdue timers arriving out of order: `N` timers (default 1,000,000) inserted with deadlines
//! already past, in a scrambled order, as a partition taken over or a batch of past deadlines
//! brings them. The first poll that may fire sorts them, in one step, before its first fire;
//! reported: that step, and the whole drain in polls of 1,024 fires.
//!
//! ```sh
//! cargo run --release --example overdue_sort -- 1000000
//! ```

use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NOW: UtcMicros = UtcMicros(10_000_000_000);

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    for _ in 0..3 {
        let mut table = TimerTable::new(NOW, n as usize);
        let payload = [b'x'; 100];
        for i in 0..n {
            // A multiplicative scramble of 0..n: every deadline in the last n µs, out of order.
            let past = (i.wrapping_mul(2_654_435_761)) % n;
            let Some(timer) = PackedTimer::new("shop", &format!("order:{i:026}"), &payload) else {
                eprintln!("names too long");
                return;
            };
            if table
                .upsert(timer, UtcMicros(NOW.0 - 1 - past), NOW)
                .is_err()
            {
                eprintln!("table refused timer {i}");
                return;
            }
        }
        let started = Instant::now();
        let mut first = None;
        let mut fired = 0u64;
        let mut last = 0u64;
        let mut ordered = true;
        while table.poll_at_most(NOW, 1024, |deadline, _| {
            first.get_or_insert_with(|| started.elapsed());
            ordered &= deadline.0 >= last;
            last = deadline.0;
            fired += 1;
        }) {}
        let first = first.unwrap_or_default();
        println!(
            "{fired} overdue out of order: first fire after {:.1} ms (the sort), all fired in {:.1} ms, in deadline order: {ordered}",
            first.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
