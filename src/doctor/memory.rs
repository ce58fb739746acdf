//! Memory checks: transparent huge pages, swap, and the locked-memory limit.
//!
//! Owns `memory.thp` (`/sys/kernel/mm/transparent_hugepage/enabled`), `memory.swap`
//! (`/proc/swaps`, else `SwapTotal` in `/proc/meminfo`) and `memory.memlock` (the soft
//! `Max locked memory` in `/proc/self/limits`, against what glommio needs per shard).
//!
//! What glommio needs (glommio 0.9, `sys/uring.rs`): it refuses to start an executor when
//! RLIMIT_MEMLOCK is under [`GLOMMIO_MIN_MEMLOCK`]; each executor then registers one
//! 10 MiB I/O buffer with each of its three rings, and the kernel charges each
//! registration to the user's locked memory, so a shard wants about
//! [`MEMLOCK_PER_SHARD`]. Past the limit registration fails, glommio logs a warning per
//! shard and falls back to unregistered buffers. Processes with CAP_IPC_LOCK (root) are
//! exempt from the charge.

use super::host::Host;
use super::report::{Check, Group};

/// Below this glommio does not start an executor at all.
pub const GLOMMIO_MIN_MEMLOCK: u64 = 512 * 1024;
/// Three registrations of glommio's default 10 MiB I/O buffer, plus the rings.
pub const MEMLOCK_PER_SHARD: u64 = 32 << 20;

const WHY_THP: &str = "with THP `always`, khugepaged scans and collapses pages in the background \
    and page faults may compact memory synchronously; both stall the faulting or scanned \
    thread for up to milliseconds, at times punctual cannot choose.";

const WHY_SWAP: &str = "a timer entry or wheel slot that was swapped out costs a disk read \
    (milliseconds) when its deadline comes; punctual's memory is small and hot, and should \
    never wait on swap.";

const WHY_MEMLOCK: &str = "glommio (punctual's executor) refuses to start under 512 KiB of \
    RLIMIT_MEMLOCK, and registers a 10 MiB I/O buffer with each of a shard's three io_uring \
    rings (about 32 MiB per shard, charged per user); under that, registration fails and \
    glommio falls back to slower unregistered buffers.";

pub fn checks(host: &Host, shards: usize) -> Vec<Check> {
    vec![thp(host), swap(host), memlock(host, shards)]
}

fn thp(host: &Host) -> Check {
    const ID: &str = "memory.thp";
    const FILE: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    let fix = format!(
        "`tuning/apply.sh` (writes `madvise`), or `echo madvise > {FILE}`; across reboots: kernel command line \
         `transparent_hugepage=madvise`"
    );
    let text = match host.read(FILE) {
        Ok(text) => text,
        Err(_)
            if host.exists("/sys/kernel/mm")
                && !host.exists("/sys/kernel/mm/transparent_hugepage") =>
        {
            return Check::pass(
                ID,
                Group::Memory,
                "kernel built without THP".to_owned(),
                WHY_THP,
            )
        }
        Err(e) => return Check::warn(ID, Group::Memory, format!("unknown: {e}"), WHY_THP, fix),
    };
    let selected = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'));
    match selected {
        Some("always") => Check::warn(
            ID,
            Group::Memory,
            format!("THP is `always` ({FILE})"),
            WHY_THP,
            fix,
        ),
        Some(mode @ ("madvise" | "never")) => {
            Check::pass(ID, Group::Memory, format!("THP is `{mode}`"), WHY_THP)
        }
        _ => Check::warn(
            ID,
            Group::Memory,
            format!("unknown: {FILE} has no [selected] mode: {:?}", text.trim()),
            WHY_THP,
            fix,
        ),
    }
}

fn swap(host: &Host) -> Check {
    const ID: &str = "memory.swap";
    let fix = "`swapoff -a` and remove the swap lines from /etc/fstab (or `systemctl mask swap.target`); \
               if swap must stay, set `vm.swappiness=1` and run punctual with LimitMEMLOCK=infinity"
        .to_owned();
    if let Ok(text) = host.read("/proc/swaps") {
        let active: Vec<String> = text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let device = fields.next()?;
                let size_kib = fields.nth(1).unwrap_or("?");
                Some(format!("{device} ({size_kib} KiB)"))
            })
            .collect();
        if active.is_empty() {
            return Check::pass(
                ID,
                Group::Memory,
                "no swap active (/proc/swaps)".to_owned(),
                WHY_SWAP,
            );
        }
        let found = format!("swap active: {}", active.join(", "));
        return Check::warn(ID, Group::Memory, found, WHY_SWAP, fix);
    }
    let total_kib = host.read("/proc/meminfo").ok().and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("SwapTotal:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
    });
    match total_kib {
        Some(0) => Check::pass(
            ID,
            Group::Memory,
            "no swap (SwapTotal: 0 kB in /proc/meminfo)".to_owned(),
            WHY_SWAP,
        ),
        Some(kib) => Check::warn(
            ID,
            Group::Memory,
            format!("swap active: SwapTotal {kib} kB"),
            WHY_SWAP,
            fix,
        ),
        None => Check::warn(
            ID,
            Group::Memory,
            "unknown: neither /proc/swaps nor SwapTotal in /proc/meminfo is readable".to_owned(),
            WHY_SWAP,
            fix,
        ),
    }
}

/// The soft and hard `Max locked memory` limits in bytes; `None` is unlimited.
fn parse_memlock(limits: &str) -> Option<(Option<u64>, Option<u64>)> {
    let rest = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max locked memory"))?;
    let mut fields = rest.split_whitespace();
    let value = |field: Option<&str>| match field? {
        "unlimited" => Some(None),
        n => n.parse::<u64>().ok().map(Some),
    };
    Some((value(fields.next())?, value(fields.next())?))
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b => format!("{} KiB", b >> 10),
    }
}

fn memlock(host: &Host, shards: usize) -> Check {
    const ID: &str = "memory.memlock";
    let need = MEMLOCK_PER_SHARD.saturating_mul(shards.max(1) as u64);
    let fix = format!(
        "systemd: `LimitMEMLOCK=infinity` in the unit (see tuning/punctual.service); a shell: \
         `ulimit -l unlimited` before starting, or in /etc/security/limits.conf `punctual - memlock unlimited` \
         (at least {} for {shards} shards)",
        human(need)
    );
    let text = match host.read("/proc/self/limits") {
        Ok(text) => text,
        Err(e) => return Check::warn(ID, Group::Memory, format!("unknown: {e}"), WHY_MEMLOCK, fix),
    };
    let Some((soft, hard)) = parse_memlock(&text) else {
        let found = "unknown: no readable `Max locked memory` line in /proc/self/limits".to_owned();
        return Check::warn(ID, Group::Memory, found, WHY_MEMLOCK, fix);
    };
    let show = |limit: Option<u64>| limit.map_or_else(|| "unlimited".to_owned(), human);
    let found_prefix = format!(
        "this process's RLIMIT_MEMLOCK is soft {} (hard {})",
        show(soft),
        show(hard)
    );
    match soft {
        None => Check::pass(ID, Group::Memory, found_prefix, WHY_MEMLOCK),
        Some(soft) if soft < GLOMMIO_MIN_MEMLOCK => Check::fail(
            ID,
            Group::Memory,
            format!("{found_prefix}: under glommio's minimum of 512 KiB, no shard can start"),
            WHY_MEMLOCK,
            fix,
        ),
        Some(soft) if soft < need => Check::warn(
            ID,
            Group::Memory,
            format!(
                "{found_prefix}: under the {} that {shards} shards register",
                human(need)
            ),
            WHY_MEMLOCK,
            fix,
        ),
        Some(_) => Check::pass(
            ID,
            Group::Memory,
            format!(
                "{found_prefix}: enough for {shards} shards ({} needed)",
                human(need)
            ),
            WHY_MEMLOCK,
        ),
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
