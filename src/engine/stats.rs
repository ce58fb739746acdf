//! Per-shard figures for exporters (`/metrics`), read without disturbing the shards.

use super::handle::Handle;
use std::sync::atomic::Ordering;

/// Per-shard figures for exporters.
#[derive(Clone, Debug)]
pub struct ShardStats {
    pub shard: usize,
    pub pending: u64,
    pub fired_total: u64,
    pub ring_depth: usize,
    /// Requests the ring holds when full.
    pub ring_capacity: usize,
    pub ring_rejected_total: u64,
    pub clock_offset_ns: i64,
    pub clock_steps_total: u64,
    /// Leads under the step threshold that the clock removed at an anchor.
    pub clock_set_backs_total: u64,
    /// The shard's clock reads clock_gettime, not the TSC.
    pub clock_fallback: bool,
    /// Times the watchdog had to wake the shard (`runtime::watchdog`).
    pub watchdog_wakes_total: u64,
    /// Times the watchdog found the shard's executor asleep with the shard's work due.
    pub executor_stalls_total: u64,
    pub executor_runnable_sleeps_total: u64,
    /// Wakes that went through glommio because the shard's doorbell failed (`doorbell`).
    pub doorbell_fallback_wakes_total: u64,
    /// Conditional writes refused, by what they met: a pending timer (`"if": "absent"`), another
    /// version, no timer (`if_version`).
    pub conflicts: [u64; 3],
    /// Occurrences of recurring schedules fired, and missed ones their catch-up policy passed
    /// over.
    pub schedules: [u64; 2],
    /// The shard's thread panicked: its ring is closed (`shard::failure`).
    pub failed: bool,
    pub lateness: crate::metrics::HistogramSnapshot,
    /// Pending timers on each wheel level (0 to 8), then on the expired list.
    pub wheel_timers: [u64; crate::metrics::WHEEL_GAUGES],
    /// What the shard's store is doing.
    pub store_state: crate::metrics::StoreState,
}

impl Handle {
    pub fn stats(&self) -> Vec<ShardStats> {
        let inner = &self.inner;
        (0..inner.rings.len())
            .map(|i| {
                let m = &inner.metrics[i];
                ShardStats {
                    shard: i,
                    pending: m.pending.load(Ordering::Relaxed),
                    fired_total: m.fired_total.load(Ordering::Relaxed),
                    ring_depth: inner.rings[i].len(),
                    ring_capacity: inner.rings[i].capacity(),
                    ring_rejected_total: inner.rings[i].rejected(),
                    clock_offset_ns: m.clock_offset_ns.load(Ordering::Relaxed),
                    clock_steps_total: m.clock_steps_total.load(Ordering::Relaxed),
                    clock_set_backs_total: m.clock_set_backs_total.load(Ordering::Relaxed),
                    clock_fallback: m.clock_fallback.load(Ordering::Relaxed) != 0,
                    watchdog_wakes_total: m.watchdog_wakes_total.load(Ordering::Relaxed),
                    executor_stalls_total: m.executor_stalls_total.load(Ordering::Relaxed),
                    executor_runnable_sleeps_total: m
                        .executor_runnable_sleeps_total
                        .load(Ordering::Relaxed),
                    doorbell_fallback_wakes_total: m
                        .doorbell_fallback_wakes_total
                        .load(Ordering::Relaxed),
                    conflicts: [
                        m.conflicts_exists_total.load(Ordering::Relaxed),
                        m.conflicts_version_total.load(Ordering::Relaxed),
                        m.conflicts_absent_total.load(Ordering::Relaxed),
                    ],
                    schedules: [
                        m.schedule_occurrences_total.load(Ordering::Relaxed),
                        m.schedule_skipped_total.load(Ordering::Relaxed),
                    ],
                    failed: m.failed.load(Ordering::Relaxed) != 0,
                    lateness: m.lateness.snapshot(),
                    wheel_timers: std::array::from_fn(|l| {
                        m.wheel_timers[l].load(Ordering::Relaxed)
                    }),
                    store_state: m.store.state(),
                }
            })
            .collect()
    }
}
