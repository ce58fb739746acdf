//! Overdue timers arriving out of order: `N` timers (default 1,000,000) inserted with deadlines
//! already past, in a scrambled order, as a partition taken over or a batch of past deadlines
//! brings them, then drained in polls of at most 1,024 fires, as a shard on a shared thread
//! does. Reported per round: the longest single poll (the longest the shard's thread is held
//! by the wheel in one step), the first fire and the whole drain, timed from the first poll.
//!
//! ```sh
//! cargo run --release --example overdue_sort -- 1000000
//! ```

use punctual::timer::PackedTimer;
use punctual::units::UtcMicros;
use punctual::wheel::TimerTable;
use std::time::{Duration, Instant};

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
        let (mut polls, mut longest) = (0u64, Duration::ZERO);
        loop {
            let poll = Instant::now();
            let more = table.poll_at_most(NOW, 1024, |deadline, _| {
                first.get_or_insert_with(|| started.elapsed());
                ordered &= deadline.0 >= last;
                last = deadline.0;
                fired += 1;
            });
            longest = longest.max(poll.elapsed());
            polls += 1;
            if !more {
                break;
            }
        }
        let total = started.elapsed();
        let first = first.unwrap_or_default();
        println!(
            "{fired} overdue out of order: longest poll {:.2} ms, first fire after {:.1} ms, \
             all fired in {:.1} ms over {polls} polls, in deadline order: {ordered}",
            longest.as_secs_f64() * 1e3,
            first.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );
    }
}
