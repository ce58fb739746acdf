//! The cost of one `Schedule::next_after`: what a shard pays to arm a schedule's next
//! occurrence after each fire. Each iteration asks for the occurrence after the previous
//! answer (wrapping back to the start after a year's worth), so the searches cross the zone's
//! transitions as a running schedule does.
//!
//! | case | what it exercises |
//! |---|---|
//! | `every_ms 60000` | a period: one division |
//! | `30 2 * * *` UTC | a daily cron, no transitions |
//! | `30 2 * * *` America/New_York | the same across two DST changes a year |
//! | `*/10 * * * * *` America/New_York | a dense cron (every 10 s): the per-call floor |
//! | `0 9 * * MON-FRI` Australia/Lord_Howe | weekdays, a 30-minute DST change |
//! | `0 0 29 2 *` UTC | a rare cron: the search jumps months and years |
//!
//! Run: `cargo bench --bench schedule` (about a minute). Smoke test: `cargo bench --bench
//! schedule -- --test`.

use criterion::{criterion_group, criterion_main, Criterion};
use punctual::schedule::{Limits, Schedule, ScheduleSpec};
use punctual::UtcMicros;
use std::hint::black_box;

/// 2027-01-01T00:00:00Z
const START: UtcMicros = UtcMicros(1_798_761_600_000_000);

fn compile(cron: Option<&str>, every_ms: Option<u64>, zone: Option<&str>) -> Schedule {
    ScheduleSpec {
        cron: cron.map(String::from),
        every_ms,
        time_zone: zone.map(String::from),
        start_at: Some("2027-01-01T00:00:00Z".into()),
        ..ScheduleSpec::default()
    }
    .compile(START, &Limits::default())
    .expect("a valid schedule")
}

fn next_after(c: &mut Criterion) {
    let cases = [
        ("every_ms 60000", compile(None, Some(60_000), None)),
        ("30 2 * * * UTC", compile(Some("30 2 * * *"), None, None)),
        (
            "30 2 * * * America/New_York",
            compile(Some("30 2 * * *"), None, Some("America/New_York")),
        ),
        (
            "*/10 * * * * * America/New_York",
            compile(Some("*/10 * * * * *"), None, Some("America/New_York")),
        ),
        (
            "0 9 * * MON-FRI Australia/Lord_Howe",
            compile(Some("0 9 * * MON-FRI"), None, Some("Australia/Lord_Howe")),
        ),
        ("0 0 29 2 * UTC", compile(Some("0 0 29 2 *"), None, None)),
    ];
    let year = UtcMicros(START.0 + 365 * 86_400 * 1_000_000);
    let mut group = c.benchmark_group("schedule next_after");
    for (name, s) in &cases {
        group.bench_function(*name, |b| {
            let mut at = START;
            b.iter(|| {
                let next = s.next_after(black_box(at)).map(|o| o.at);
                at = match next {
                    Some(n) if n < year => n,
                    _ => START,
                };
                black_box(next)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, next_after);
criterion_main!(benches);
