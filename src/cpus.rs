//! The CPUs this process may run on: what the engine pins shards to, and what the
//! configuration checks `cores` and `shards` against.

/// The CPU ids the calling thread may run on (its affinity mask, which a process started
/// under `taskset` or systemd's `CPUAffinity` inherits).
pub fn available_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}
