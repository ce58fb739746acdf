//! Timer lateness: punctual against tokio's timers and two floors, same workloads, one process
//! run, one clock.
//!
//! ```text
//! cargo bench --bench jitter              # W1: 100,000 timers over 1–11 s; W2: 1,000,000 at one instant
//! cargo bench --bench jitter -- --quick   # W1: 10,000 over 2 s; W2: 100,000
//! cargo bench --bench jitter -- --only punctual --workload W2
//! ```
//!
//! Every deadline is a UTC microsecond. Each system fires each timer once; the callback reads
//! CLOCK_REALTIME and records `fired − deadline` for that timer. The same reading serves every
//! system, so punctual's own TSC clock gets no say in its score: a calibration error would
//! show up here as lateness, or as an early fire.
//!
//! Systems:
//! - `punctual-spin` / `punctual-nospin`: one shard pinned to core 1, spin window 200 µs / 0;
//!   `punctual-adaptive`: the same with a window that follows the measured wake-up latency
//!   (at most 200 µs);
//!   `punctual-*-unpinned`: the same with the shard thread left to the kernel's placement;
//!   `punctual-spin-2shards`: two shards pinned to cores 1 and 0, timers spread by key.
//! - `tokio-sleep-ct` / `tokio-sleep-mt`: one task per timer doing `sleep_until`, on the
//!   current-thread runtime (thread pinned to core 1) and on the multi-thread runtime.
//! - `delayqueue-ct` / `delayqueue-mt`: one task draining a `tokio_util::time::DelayQueue`.
//! - `floor-sleep`: one thread sleeping with `clock_nanosleep(TIMER_ABSTIME)` to each deadline in
//!   turn, timer slack 1 ns: what the kernel's wake-up path costs (the OS floor).
//! - `floor-spin`: one thread pinned to core 1 spinning on CLOCK_REALTIME to each deadline.
//!
//! `--only S` runs the systems whose name contains `S` (e.g. `--only punctual`); `--workload W1`.
//! `JITTER_DUMP=DIR` also writes each system's per-timer deadlines and lateness to
//! `DIR/<system>-<workload>.csv`.
//! Transparent huge pages are off for the bench's process, as `punctual serve` turns them off
//! for its own; `--thp` keeps the host's setting.
//!
//! Registration runs on core 0 and ends before the first deadline (stderr says how long before).
//! After the table, the targets as ratios against this run's baselines (`floor-spin`, tokio's
//! best mode, `punctual-spin` for the spin window's settings), with met or MISSED.
//!
//! `min` is the first fire's lateness: in W2, how long the first of the burst waited. `cpu_s` is the process's user+system
//! CPU time from the start of registration to the last fire.

use punctual::clock::clock_ns;
use punctual::engine::Pinning;
use punctual::{EngineBuilder, UtcMicros};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod peers;
mod report;
use peers::{run_delay_queue, run_floor, run_tokio_sleep};
use report::{print_ratios, print_table, round1};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NOT_FIRED: i64 = i64::MIN;
const SHARD_CORE: usize = 1;
const REGISTRAR_CORE: usize = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// `n` timers spread uniformly over `[lead, lead + span]`.
    Spread {
        n: usize,
        lead_ms: u64,
        span_ms: u64,
    },
    /// `n` timers all due at `lead`.
    Burst { n: usize, lead_ms: u64 },
}

impl Workload {
    fn name(&self) -> &'static str {
        match self {
            Workload::Spread { .. } => "W1",
            Workload::Burst { .. } => "W2",
        }
    }

    fn n(&self) -> usize {
        match *self {
            Workload::Spread { n, .. } | Workload::Burst { n, .. } => n,
        }
    }

    /// Deadlines in UTC µs, from `base_us`, in a shuffled (not sorted) order.
    fn deadlines(&self, base_us: u64) -> Vec<u64> {
        match *self {
            Workload::Spread {
                n,
                lead_ms,
                span_ms,
            } => {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64;
                (0..n)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        base_us + lead_ms * 1_000 + rng % (span_ms * 1_000)
                    })
                    .collect()
            }
            Workload::Burst { n, lead_ms } => vec![base_us + lead_ms * 1_000; n],
        }
    }
}

/// Per-timer lateness in ns. Each firing thread writes its own lane (a log and a count, on
/// cache lines of their own), so that two shards firing at once measure their own work, not
/// the recorder's cache lines bouncing between cores; the logs are merged afterwards.
struct Recorder {
    deadlines_ns: Vec<i64>,
    lanes: Vec<Lane>,
}

#[repr(align(128))]
struct Lane {
    fired: AtomicU64,
    /// (timer, lateness ns), in firing order. Only the lane's own thread locks it while firing,
    /// so the lock is never contended until the merge.
    log: Mutex<Vec<(u32, i64)>>,
}

/// Lanes: punctual passes its shard id; other systems' threads take one each, in turn.
const LANES: usize = 4;

static NEXT_LANE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MY_LANE: usize = NEXT_LANE.fetch_add(1, Ordering::Relaxed) as usize;
}

impl Recorder {
    fn new(deadlines_us: &[u64]) -> Arc<Recorder> {
        Arc::new(Recorder {
            deadlines_ns: deadlines_us.iter().map(|&d| (d * 1_000) as i64).collect(),
            lanes: (0..LANES)
                .map(|_| Lane {
                    fired: AtomicU64::new(0),
                    log: Mutex::new(Vec::with_capacity(deadlines_us.len())),
                })
                .collect(),
        })
    }

    #[inline]
    fn fire(&self, i: usize) {
        self.fire_on(MY_LANE.with(|l| *l), i);
    }

    #[inline]
    fn fire_on(&self, lane: usize, i: usize) {
        let now = clock_ns(libc::CLOCK_REALTIME) as i64;
        let late = now - self.deadlines_ns[i];
        let lane = &self.lanes[lane % LANES];
        if let Ok(mut log) = lane.log.lock() {
            log.push((i as u32, late));
        }
        lane.fired.fetch_add(1, Ordering::Relaxed);
    }

    fn fired(&self) -> usize {
        self.lanes
            .iter()
            .map(|l| l.fired.load(Ordering::Relaxed) as usize)
            .sum()
    }

    /// Every timer's lateness (`NOT_FIRED` for those that did not fire), and how many fired
    /// more than once.
    fn merged(&self) -> (Vec<i64>, u64) {
        let mut late = vec![NOT_FIRED; self.deadlines_ns.len()];
        let mut duplicates = 0;
        for lane in &self.lanes {
            let log = lane.log.lock().map(|l| l.clone()).unwrap_or_default();
            for (i, l) in log {
                if std::mem::replace(&mut late[i as usize], l) != NOT_FIRED {
                    duplicates += 1;
                }
            }
        }
        (late, duplicates)
    }

    fn wait_all(&self, last_deadline_us: u64, grace: Duration) {
        let give_up = last_deadline_us * 1_000 + grace.as_nanos() as u64;
        while self.fired() < self.deadlines_ns.len() && clock_ns(libc::CLOCK_REALTIME) < give_up {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

struct Row {
    system: &'static str,
    workload: &'static str,
    n: usize,
    fired: usize,
    lost: usize,
    early: usize,
    duplicates: u64,
    /// The earliest fire's lateness: for W2, how long the first of the burst waited.
    min_us: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    cpu_s: f64,
}

/// Writes `<dir>/<system>-<workload>.csv`: each timer's deadline and lateness in ns (lateness
/// empty for a timer that never fired), in deadline order, for looking at which timers were
/// late (`JITTER_DUMP=DIR`).
fn dump(dir: &std::path::Path, system: &str, w: &Workload, rec: &Recorder, late: &[i64]) {
    let mut rows: Vec<(i64, i64)> = rec
        .deadlines_ns
        .iter()
        .copied()
        .zip(late.iter().copied())
        .collect();
    rows.sort_unstable();
    let mut out = String::from("deadline_ns,late_ns\n");
    for (d, l) in rows {
        use std::fmt::Write;
        let _ = match l {
            NOT_FIRED => writeln!(out, "{d},"),
            l => writeln!(out, "{d},{l}"),
        };
    }
    let path = dir.join(format!("{system}-{}.csv", w.name()));
    if let Err(e) = std::fs::write(&path, out) {
        eprintln!("could not write {}: {e}", path.display());
    }
}

fn summarize(system: &'static str, w: &Workload, rec: &Recorder, cpu_s: f64) -> Row {
    let (late, duplicates) = rec.merged();
    if let Some(dir) = std::env::var_os("JITTER_DUMP") {
        dump(std::path::Path::new(&dir), system, w, rec, &late);
    }
    let mut late: Vec<i64> = late.into_iter().filter(|&l| l != NOT_FIRED).collect();
    late.sort_unstable();
    let pct = |p: f64| -> f64 {
        if late.is_empty() {
            return f64::NAN;
        }
        let i = ((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1;
        late[i] as f64 / 1_000.0
    };
    Row {
        system,
        workload: w.name(),
        n: w.n(),
        fired: late.len(),
        lost: w.n() - late.len(),
        early: late.iter().filter(|&&l| l < 0).count(),
        duplicates,
        min_us: late.first().map_or(f64::NAN, |&l| l as f64 / 1_000.0),
        p50_us: pct(0.50),
        p90_us: pct(0.90),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        max_us: pct(1.0),
        cpu_s,
    }
}

fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe_zeroed_rusage();
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF is always a valid target.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn unsafe_zeroed_rusage() -> libc::rusage {
    // SAFETY: rusage is a plain C struct of integers, for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

fn pin(core: usize) {
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

fn set_timer_slack_1ns() {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

fn now_us() -> u64 {
    clock_ns(libc::CLOCK_REALTIME) / 1_000
}

fn grace(w: &Workload) -> Duration {
    match w {
        Workload::Spread { .. } => Duration::from_secs(3),
        Workload::Burst { n, .. } => Duration::from_secs(3 + *n as u64 / 100_000),
    }
}

/// Runs one system on one workload and returns its row.
fn run(system: &'static str, w: &Workload) -> Row {
    let base = now_us();
    let deadlines = w.deadlines(base);
    let last = deadlines.iter().copied().max().unwrap_or(base);
    let rec = Recorder::new(&deadlines);
    let cpu0 = cpu_seconds();
    match system {
        "punctual-spin" => run_punctual(&deadlines, &rec, last, w, Window::Fixed(SPIN), true),
        "punctual-spin-2shards" => {
            run_punctual_on(&deadlines, &rec, last, w, Window::Fixed(SPIN), TWO_SHARDS)
        }
        "punctual-adaptive" => {
            run_punctual(&deadlines, &rec, last, w, Window::Adaptive(SPIN), true)
        }
        "punctual-nospin" => run_punctual(&deadlines, &rec, last, w, NO_SPIN, true),
        "punctual-spin-unpinned" => {
            run_punctual(&deadlines, &rec, last, w, Window::Fixed(SPIN), false)
        }
        "punctual-nospin-unpinned" => run_punctual(&deadlines, &rec, last, w, NO_SPIN, false),
        "tokio-sleep-ct" => run_tokio_sleep(&deadlines, &rec, last, w, false),
        "tokio-sleep-mt" => run_tokio_sleep(&deadlines, &rec, last, w, true),
        "delayqueue-ct" => run_delay_queue(&deadlines, &rec, last, w, false),
        "delayqueue-mt" => run_delay_queue(&deadlines, &rec, last, w, true),
        "floor-sleep" => run_floor(&deadlines, &rec, false),
        "floor-spin" => run_floor(&deadlines, &rec, true),
        other => unreachable!("unknown system {other}"),
    }
    summarize(system, w, &rec, cpu_seconds() - cpu0)
}

/// The spin window of the `punctual-spin` systems, and the ceiling of `punctual-adaptive`'s.
const SPIN: Duration = Duration::from_micros(200);

/// The `punctual-nospin` systems' window: parking all the way to each deadline.
const NO_SPIN: Window = Window::Fixed(Duration::ZERO);

/// A punctual system's spin window.
#[derive(Clone, Copy)]
enum Window {
    Fixed(Duration),
    /// Following the measured wake-up latency, at most this.
    Adaptive(Duration),
}

fn run_punctual(
    deadlines: &[u64],
    rec: &Arc<Recorder>,
    last: u64,
    w: &Workload,
    spin: Window,
    pinned: bool,
) {
    let cores = if pinned { vec![SHARD_CORE] } else { vec![] };
    run_punctual_on(deadlines, rec, last, w, spin, &cores)
}

/// Two shards, pinned to cores 1 and 0: the registrar shares core 0 with the second shard
/// until registration ends, well before the first deadline.
const TWO_SHARDS: &[usize] = &[SHARD_CORE, REGISTRAR_CORE];

/// One shard per entry of `cores`, each pinned there; one unpinned shard when `cores` is empty.
fn run_punctual_on(
    deadlines: &[u64],
    rec: &Arc<Recorder>,
    last: u64,
    w: &Workload,
    spin: Window,
    cores: &[usize],
) {
    let fired = rec.clone();
    let (pinning, shards) = if cores.is_empty() {
        (Pinning::None, 1)
    } else {
        (Pinning::Cores(cores.to_vec()), cores.len())
    };
    let builder = EngineBuilder::new().pinning(pinning).shards(shards);
    let builder = match spin {
        Window::Fixed(d) => builder.spin(d),
        Window::Adaptive(max) => builder.adaptive_spin(max),
    };
    let engine = builder
        .shard_capacity(deadlines.len().max(1))
        .ring_capacity(65_536)
        .on_fire(move |f| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&f.payload[..8]);
            fired.fire_on(f.shard, u64::from_le_bytes(b) as usize);
        })
        .build()
        .expect("engine starts");
    let h = engine.handle();
    let first = deadlines.iter().copied().min().unwrap_or(last);
    let deadlines = deadlines.to_vec();
    // Register from a thread pinned to the other core, so the main thread's affinity stays
    // whole for the next system's setup.
    std::thread::spawn(move || {
        pin(REGISTRAR_CORE);
        let mut key = String::with_capacity(16);
        for (i, &d) in deadlines.iter().enumerate() {
            key.clear();
            use std::fmt::Write;
            let _ = write!(key, "t{i}");
            let payload = (i as u64).to_le_bytes();
            while h
                .schedule_detached("bench", &key, UtcMicros(d), &payload)
                .is_err()
            {
                std::hint::spin_loop();
            }
        }
    })
    .join()
    .expect("registrar thread");
    report_registration(first, w);
    rec.wait_all(last, grace(w));
    engine.shutdown().expect("clean shutdown");
}

/// Says how long before the first deadline registration finished (on stderr): a registration
/// still running at the deadline would be measured as lateness.
fn report_registration(first_deadline_us: u64, w: &Workload) {
    let lead_ms = (first_deadline_us as f64 - now_us() as f64) / 1_000.0;
    eprintln!(
        "  {}: registration done {lead_ms:.0} ms before the first deadline",
        w.name()
    );
}

const SYSTEMS: [&str; 12] = [
    "punctual-spin",
    "punctual-spin-2shards",
    "punctual-adaptive",
    "punctual-nospin",
    "punctual-spin-unpinned",
    "punctual-nospin-unpinned",
    "tokio-sleep-ct",
    "tokio-sleep-mt",
    "delayqueue-ct",
    "delayqueue-mt",
    "floor-sleep",
    "floor-spin",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if !args.iter().any(|a| a == "--thp") {
        // As `punctual serve` does by default (`transparent_huge_pages`): a first touch of a
        // 2 MiB page clears the whole page on the thread that touches it, inside a burst.
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument and zeros for the rest; it
        // changes only this process's THP policy.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            eprintln!("could not turn transparent huge pages off; measuring with them");
        }
    }
    let only = value("--only");
    let only_workload = value("--workload");
    let workloads = if quick {
        [
            Workload::Spread {
                n: 10_000,
                lead_ms: 500,
                span_ms: 2_000,
            },
            Workload::Burst {
                n: 100_000,
                lead_ms: 1_500,
            },
        ]
    } else {
        [
            Workload::Spread {
                n: 100_000,
                lead_ms: 1_000,
                span_ms: 10_000,
            },
            Workload::Burst {
                n: 1_000_000,
                lead_ms: 3_000,
            },
        ]
    };
    let mut rows = Vec::new();
    for w in &workloads {
        if only_workload.as_deref().is_some_and(|o| o != w.name()) {
            continue;
        }
        for system in SYSTEMS {
            if only.as_deref().is_some_and(|o| !system.contains(o)) {
                continue;
            }
            let row = run(system, w);
            eprintln!(
                "{:<16} {:<3} n={:<8} fired={:<8} min={:>9.1}µs p50={:>9.1}µs p99={:>9.1}µs p99.9={:>9.1}µs max={:>9.1}µs",
                row.system, row.workload, row.n, row.fired, row.min_us, row.p50_us, row.p99_us, row.p999_us, row.max_us
            );
            rows.push(row);
        }
    }
    print_table(&rows);
    print_ratios(&rows);
    for r in &rows {
        println!(
            "{}",
            serde_json::json!({
                "system": r.system, "workload": r.workload, "n": r.n, "fired": r.fired,
                "lost": r.lost, "early": r.early, "duplicates": r.duplicates,
                "min_us": round1(r.min_us), "p50_us": round1(r.p50_us), "p90_us": round1(r.p90_us), "p99_us": round1(r.p99_us),
                "p999_us": round1(r.p999_us), "max_us": round1(r.max_us), "cpu_s": round1(r.cpu_s * 100.0) / 100.0,
            })
        );
    }
}
