//! Recurring schedules at scale, against plain timers in the same run: the resident memory a
//! schedule takes, and how late the occurrences of many schedules falling due in the same
//! second fire.
//!
//! ```text
//! cargo bench --bench schedule_burst                       # 100,000 of each
//! cargo bench --bench schedule_burst -- --n 20000
//! cargo bench --bench schedule_burst -- --policy skip   # the burst's catch_up policy
//! ```
//!
//! One engine as `punctual serve` runs it: 2 shards, the journal store (`fsync always`), no
//! pinning, no spinning. Schedules are written as the API writes them (`ScheduleRecord`, then
//! `Handle::put_schedule_async` on condition `absent`), without a callback: each occurrence
//! reaches the library's fire handler, which records its lateness (the fire's instant minus
//! the nominal one). Keys are 32 bytes. Printed, each with the plain timers' figure beside it
//! (the baseline of the run):
//!
//! - memory: VmRSS grown by `n` schedules whose cron fires once a year (`0 0 1 1 *`), per
//!   schedule; and by `n` plain timers due a year ahead, per timer;
//! - lateness: `n` plain timers due at the same whole second T, and `n` schedules whose cron
//!   (`S M H * * *`, UTC) first falls at T + 10 s: p50, p99 and max of fire − nominal over
//!   every fire. An occurrence fires in two steps (the schedule's timer fires and arms it,
//!   durable first; the occurrence's own timer fires in the next pass), so it is later than a
//!   timer by at least one pass and one journal write.

// Only its resident-memory reading is used here.
#[allow(dead_code, unused_imports)]
#[path = "journal/measure.rs"]
mod measure;

use measure::rss_bytes;
use punctual::engine::{Condition, JournalConfig, Pinning};
use punctual::partition::occurrence_of;
use punctual::schedule::{Limits, ScheduleRecord};
use punctual::{EngineBuilder, FiredTimer, Handle, UtcMicros};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Calls awaiting their acks at once, per registering thread.
const IN_FLIGHT: usize = 4_096;
const THREADS: usize = 2;
const YEAR_US: u64 = 365 * 86_400_000_000;

/// Lateness in µs of each fire, timers and occurrences apart.
#[derive(Default)]
struct Late {
    timers: Vec<u64>,
    occurrences: Vec<u64>,
}

fn main() {
    let mut n = 100_000usize;
    let mut policy = "latest".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--n" {
            n = args.next().and_then(|v| v.parse().ok()).expect("--n N");
        } else if a == "--policy" {
            policy = args.next().expect("--policy skip|latest|all");
        }
    }
    let dir = std::env::var_os("PUNCTUAL_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "target/schedule-burst-bench".into());
    let _ = std::fs::remove_dir_all(&dir);
    let late = Arc::new(Mutex::new(Late::default()));
    let l = late.clone();
    let handler = move |f: &FiredTimer<'_>| {
        let at_us = f.fired_at.0 / 1_000;
        let lateness = at_us.saturating_sub(f.deadline.0);
        let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
        match (f.key.starts_with('@'), occurrence_of(f.key)) {
            (false, _) => l.timers.push(lateness),
            (true, Some(_)) => l.occurrences.push(lateness),
            (true, None) => {}
        }
    };
    let e = EngineBuilder::new()
        .on_fire(handler)
        .shards(2)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(6 * n + 100_000)
        .journal_config(JournalConfig::new(&dir))
        .build()
        .expect("engine");
    let h = e.handle();
    assert!(h.wait_store_ready(Duration::from_secs(600)));
    println!("n = {n}, 2 shards, journal (fsync always), {} CPUs", cpus());

    let now = h.now().0;
    let before = rss_bytes();
    register(n, |i| {
        let key = format!("idle-timer-{i:021}");
        h.schedule_async("shop", &key, UtcMicros(now + YEAR_US), b"{}")
    });
    let timer_bytes = (rss_bytes() - before) as f64 / n as f64;
    let before = rss_bytes();
    register(n, |i| {
        put_schedule(&h, &format!("idle-sched-{i:021}"), "0 0 1 1 *", "latest")
    });
    let schedule_bytes = (rss_bytes() - before) as f64 / n as f64;
    println!(
        "memory: {schedule_bytes:.0} B a schedule, {timer_bytes:.0} B a plain timer: {:.2}×",
        schedule_bytes / timer_bytes
    );

    // T: a whole second far enough ahead for both registrations.
    let t_s = h.now().0 / 1_000_000 + 20;
    register(n, |i| {
        let key = format!("burst-timer-{i:020}");
        h.schedule_async("shop", &key, UtcMicros(t_s * 1_000_000), b"{}")
    });
    let at = t_s + 10;
    let cron = format!("{} {} {} * * *", at % 60, at / 60 % 60, at / 3_600 % 24);
    register(n, |i| {
        put_schedule(&h, &format!("burst-sched-{i:020}"), &cron, &policy)
    });
    assert!(
        h.now().0 < t_s * 1_000_000,
        "registration ran past T; use a smaller --n"
    );
    // Every fire, or 30 s past the schedules' second: an occurrence the catch-up policy
    // passes over (more than 1 s late is missed) never fires.
    loop {
        let l = late.lock().unwrap_or_else(|e| e.into_inner());
        let done = l.timers.len() >= n && l.occurrences.len() >= n;
        if done || h.now().0 > (at + 30) * 1_000_000 {
            println!(
                "fired: {} of {n} timers, {} of {n} occurrences (catch_up {policy})",
                l.timers.len(),
                l.occurrences.len()
            );
            break;
        }
        drop(l);
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut l = late.lock().unwrap_or_else(|e| e.into_inner());
    let timers = percentiles(&mut l.timers);
    let occurrences = percentiles(&mut l.occurrences);
    println!("lateness (ms)        p50      p99      max");
    for (name, p) in [("plain timers", timers), ("occurrences", occurrences)] {
        println!(
            "{name:<16} {:>8.2} {:>8.2} {:>8.2}",
            p.0 as f64 / 1e3,
            p.1 as f64 / 1e3,
            p.2 as f64 / 1e3
        );
    }
    println!(
        "occurrences / timers: p50 {:.2}×, p99 {:.2}×, max {:.2}×",
        occurrences.0 as f64 / timers.0.max(1) as f64,
        occurrences.1 as f64 / timers.1.max(1) as f64,
        occurrences.2 as f64 / timers.2.max(1) as f64
    );
    drop(l);
    e.shutdown().expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Schedule `key` with `cron`, written as `PUT /v1/schedules` writes a new one.
fn put_schedule(
    h: &Handle,
    key: &str,
    cron: &str,
    policy: &str,
) -> impl std::future::Future<Output = punctual::Result<punctual::Scheduled>> {
    let now = h.now();
    let def = format!(r#"{{"cron": "{cron}", "catch_up": {{"policy": "{policy}"}}}}"#);
    let (record, schedule) = ScheduleRecord::create(&def, now, &Limits::default()).expect("cron");
    let at = record.armed_at(&schedule, now).expect("an occurrence");
    h.put_schedule_async("shop", key, at, &record.encode(), &[], Condition::Absent)
}

/// `n` calls made by `call(i)`, from [`THREADS`] threads, each keeping [`IN_FLIGHT`] awaiting
/// their acks.
fn register<F, C>(n: usize, call: C)
where
    F: std::future::Future<Output = punctual::Result<punctual::Scheduled>>,
    C: Fn(usize) -> F + Sync,
{
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let call = &call;
            s.spawn(move || {
                let mut i = t;
                while i < n {
                    let mut calls = Vec::with_capacity(IN_FLIGHT);
                    while calls.len() < IN_FLIGHT && i < n {
                        calls.push(call(i));
                        i += THREADS;
                    }
                    let done =
                        futures_lite::future::block_on(futures_util::future::join_all(calls));
                    for r in done {
                        r.expect("acknowledged");
                    }
                }
            });
        }
    });
}

/// p50, p99 and max.
fn percentiles(v: &mut [u64]) -> (u64, u64, u64) {
    v.sort_unstable();
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    (at(0.5), at(0.99), at(1.0))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
