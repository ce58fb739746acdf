//! CPU time per process, from `/proc/<pid>/stat` (user + system, in clock ticks of
//! `sysconf(_SC_CLK_TCK)`, 10 ms on Linux), and the host's load, from `/proc/loadavg` and
//! `/proc/pressure/cpu`, so that every figure says how busy the machine was. Also used by
//! `perf/probes/put_openloop.rs` for its own CPU time.

#![allow(dead_code)] // `perf/probes/put_openloop.rs` uses only `rusage_seconds`.

use std::time::Instant;

/// CPU seconds (user + system) from `getrusage(who)`: this process (`RUSAGE_SELF`), or its
/// children that have been waited for (`RUSAGE_CHILDREN`).
pub fn rusage_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the callers pass RUSAGE_SELF or RUSAGE_CHILDREN.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds (user + system) that process `pid` has used so far; `None` once it is gone.
pub fn seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it are plain numbers.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; it touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Some(ticks as f64 / hz as f64)
}

/// CPU used by a set of processes between `start` and `stop`.
pub struct Meter {
    pids: Vec<(&'static str, u32)>,
    before: Vec<f64>,
    started: Instant,
}

/// What each process used over a measurement: `(name, CPU seconds, share of one core)`.
pub struct Used {
    pub per: Vec<(&'static str, f64, f64)>,
    pub wall: f64,
}

impl Meter {
    pub fn start(pids: &[(&'static str, u32)]) -> Meter {
        Meter {
            pids: pids.to_vec(),
            before: pids
                .iter()
                .map(|&(_, p)| seconds(p).unwrap_or(0.0))
                .collect(),
            started: Instant::now(),
        }
    }

    pub fn stop(self) -> Used {
        let wall = self.started.elapsed().as_secs_f64();
        let per = self
            .pids
            .iter()
            .zip(&self.before)
            .map(|(&(name, pid), before)| {
                let used = seconds(pid).unwrap_or(*before) - before;
                (name, used, used / wall)
            })
            .collect();
        Used { per, wall }
    }
}

impl Used {
    /// CPU seconds of the process named `name`.
    pub fn of(&self, name: &str) -> f64 {
        self.per
            .iter()
            .find(|(n, _, _)| *n == name)
            .map_or(0.0, |&(_, s, _)| s)
    }

    /// One line: each process's CPU per unit of work and its share of a core.
    pub fn line(&self, units: u64, unit: &str) -> String {
        self.per
            .iter()
            .map(|(name, s, share)| {
                format!(
                    "{name} {:.2} µs/{unit} ({:.0}% of a core)",
                    s * 1e6 / units.max(1) as f64,
                    share * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `/proc/loadavg` and the `some` line of `/proc/pressure/cpu`, as one line.
pub fn host_load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let pressure = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
    format!(
        "load average {}; cpu pressure {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        pressure.lines().next().unwrap_or("unavailable")
    )
}
