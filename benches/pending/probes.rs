//! `--probes-s S`: how late a restart fires the timers that fall due while it recovers.
//!
//! The registering process, once its timers are in, schedules probe timers (tenant `probe`,
//! in the wheel: due within the horizon) 100 a second over `S` seconds, the first `LEAD` after
//! it ends, and writes where they start beside the data directory. The recovering process
//! records every probe's fire (its deadline, and when it fired) from its start, waits until
//! the last is due, and prints the lateness of those due before its store was ready and of
//! those due after, within the first minute of its start.

use punctual::{FiredTimer, Handle, UtcMicros};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Probes a second.
const RATE: u64 = 100;
/// From the end of the registration to the first probe: the registering process's shutdown
/// and the next one's start.
const LEAD_US: u64 = 2_000_000;

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn file(dir: &Path) -> PathBuf {
    dir.with_extension("probes")
}

/// Schedules the probes over `seconds` and writes (first deadline, count) beside `dir`.
pub fn schedule(h: &Handle, dir: &Path, seconds: u64) {
    let first = now_us() + LEAD_US;
    let n = seconds * RATE;
    let all: Vec<u64> = (0..n).collect();
    for chunk in all.chunks(1_024) {
        let calls = chunk.iter().map(|i| {
            let due = UtcMicros(first + i * 1_000_000 / RATE);
            h.schedule_async("probe", &format!("p{i:06}"), due, b"probe")
        });
        for r in futures_lite::future::block_on(futures_util::future::join_all(calls)) {
            r.expect("probe acknowledged");
        }
    }
    std::fs::write(file(dir), format!("{first} {n}")).expect("probes file");
}

/// The probes' fires, as a handler records them: (deadline µs, fired at µs).
#[derive(Clone, Default)]
pub struct Fires(Arc<Mutex<Vec<(u64, u64)>>>);

impl Fires {
    pub fn handler(&self) -> impl Fn(&FiredTimer<'_>) + Send + Sync + 'static {
        let fires = self.0.clone();
        move |t: &FiredTimer<'_>| {
            if t.tenant == "probe" {
                let at = t.fired_at.0 / 1_000;
                fires.lock().expect("fires").push((t.deadline.0, at));
            }
        }
    }

    /// Waits for the last probe and prints the lateness of those due before `ready_us` (the
    /// store recovered) and of those due from it to a minute after `start_us`.
    pub fn report(&self, dir: &Path, start_us: u64, ready_us: u64) {
        let Ok(text) = std::fs::read_to_string(file(dir)) else {
            return;
        };
        let mut it = text
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        let (first, n) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
        let last = first + n.saturating_sub(1) * 1_000_000 / RATE;
        while now_us() < last + 1_000_000 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let fires = self.0.lock().expect("fires").clone();
        let s = |us: u64| (us as f64 - start_us as f64) / 1e6;
        println!(
            "  probes: {n} due {RATE} a second from {:+.1} s to {:+.1} s of the process's start; its store ready at {:+.1} s; {} fired in it",
            s(first),
            s(last),
            s(ready_us),
            fires.len()
        );
        let during: Vec<u64> = fires
            .iter()
            .filter(|(d, _)| *d < ready_us)
            .map(|(d, f)| f.saturating_sub(*d))
            .collect();
        let after: Vec<u64> = fires
            .iter()
            .filter(|(d, _)| *d >= ready_us && *d < start_us + 60_000_000)
            .map(|(d, f)| f.saturating_sub(*d))
            .collect();
        print_lateness("due before the store was ready", during);
        print_lateness("due after it, in the first minute", after);
    }
}

fn print_lateness(what: &str, mut late: Vec<u64>) {
    if late.is_empty() {
        println!("    {what}: none");
        return;
    }
    late.sort_unstable();
    let q = |f: f64| late[((late.len() as f64 * f) as usize).min(late.len() - 1)] as f64 / 1e3;
    println!(
        "    {what} ({}): late p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        late.len(),
        q(0.5),
        q(0.99),
        q(1.0)
    );
}
