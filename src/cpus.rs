//! The CPUs this process may run on: what the engine pins shards to, what the configuration
//! checks `cores` and `shards` against, and where a thread that a pinned shard starts (the
//! journal's I/O thread, a name lookup's) is moved to: off the shards' cores when the process
//! has others.

use std::sync::{Mutex, OnceLock};

/// The cores shards of this process are pinned to (every engine's).
static SHARD_CORES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Notes that shards are pinned to `cores`, before any of them starts.
pub fn note_shard_cores(cores: &[usize]) {
    let mut noted = SHARD_CORES.lock().unwrap_or_else(|e| e.into_inner());
    for &c in cores {
        if !noted.contains(&c) {
            noted.push(c);
        }
    }
}

/// The cores a helper thread of a shard should run on: those of the process that no shard is
/// pinned to, or all of them when the shards take every one. A helper on a shard's core takes
/// that core from its shard whenever both are busy: the journal's `pwrite` of a 16 MiB batch
/// shared the pinned shard's core under the kernel's scheduler and held fires back by 1–2 ms.
pub fn off_shard_cores() -> Vec<usize> {
    let all = available_cores();
    let noted = SHARD_CORES.lock().unwrap_or_else(|e| e.into_inner());
    let off: Vec<usize> = all.iter().copied().filter(|c| !noted.contains(c)).collect();
    if off.is_empty() {
        all
    } else {
        off
    }
}

/// The CPU ids this process may run on: the affinity mask of the first thread that asks
/// (which a process started under `taskset` or systemd's `CPUAffinity` inherits), read once.
/// Read once because a shard's thread is pinned to one core and a thread it starts inherits
/// that single core: asked from there, the mask would name one core.
pub fn available_cores() -> Vec<usize> {
    static CORES: OnceLock<Vec<usize>> = OnceLock::new();
    CORES.get_or_init(current_thread_cores).clone()
}

/// The CPU ids the calling thread may run on now, read afresh (empty if they cannot be read).
pub fn current_thread_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// Pins the calling thread to `cores`. Ids at or past `CPU_SETSIZE` are left out, and a list
/// with none left changes nothing.
pub fn pin_current_thread(cores: &[usize]) -> std::io::Result<()> {
    let max = libc::CPU_SETSIZE as usize;
    if !cores.iter().any(|&c| c < max) {
        return Ok(());
    }
    // SAFETY: `cpu_set_t` is plain data for which all zeroes is the empty set; CPU_SET only
    // writes bits below CPU_SETSIZE (filtered), and sched_setaffinity(0, ..) reads
    // `size_of::<cpu_set_t>()` bytes of the set, for the calling thread only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores.iter().filter(|&&c| c < max) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
#[path = "cpus_tests.rs"]
mod tests;
