//! The numbers: per-shard counters, the store's figures and one histogram type, written by
//! the owning shard's thread with relaxed atomics (no locks, no allocation on the hot path)
//! and read by exporters. Prometheus rendering lives with the HTTP API; this module only owns
//! the numbers, and imports nothing of the parts that write them.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`ShardMetrics`]: one shard's figures |
//! | `counter.rs` | the add of a counter with one writer |
//! | `histogram.rs` | the fixed-bucket [`Histogram`] and its snapshot |
//! | `store.rs` | [`StoreMetrics`] and [`StoreState`]: the durable store's figures |
//! | `webhook.rs` | [`WebhookMetrics`]: webhook deliveries and refused conditional writes per tenant, with a bound on tenants |

mod counter;
mod histogram;
mod store;
mod webhook;

pub use counter::single_writer_add;
pub use histogram::{Histogram, HistogramSnapshot};
pub use store::{StoreMetrics, StoreState, BATCH_BOUNDS, FLUSH_BOUNDS_NS};
pub use webhook::{
    DeliveryMetrics, WebhookMetrics, CONFLICT_CODES, DELIVERY_BOUNDS_NS, FAILURE_CLASSES,
    OTHER_TENANTS, SERIES_IDLE, TENANT_SERIES,
};

use std::sync::atomic::{AtomicI64, AtomicU64};

/// `punctual_fire_lateness_seconds` upper bounds, in ns: 1 µs to 10 s, 1-2-5 steps.
pub const LATENESS_BOUNDS_NS: [u64; 22] = histogram::one_two_five(1_000, &[]);

/// The wheel's levels and its expired list: one occupancy gauge each.
pub const WHEEL_GAUGES: usize = 10;

/// One shard's figures.
pub struct ShardMetrics {
    pub pending: AtomicU64,
    pub fired_total: AtomicU64,
    /// Fired-at minus deadline, ns.
    pub lateness: Histogram,
    pub clock_offset_ns: AtomicI64,
    pub clock_steps_total: AtomicU64,
    /// Leads under the step threshold removed at an anchor (the mapping set back).
    pub clock_set_backs_total: AtomicU64,
    /// 1 when the shard's clock fell back to clock_gettime (no invariant TSC), else 0.
    pub clock_fallback: AtomicU64,
    /// Times the watchdog woke this shard because it had not run well past its time
    /// (`runtime::watchdog`).
    pub watchdog_wakes_total: AtomicU64,
    /// Times the watchdog found this shard's executor asleep in io_uring 1 ms or more past
    /// the shard's time (`runtime::watchdog`): a timer or I/O that came late, or glommio asleep
    /// with the shard runnable.
    pub executor_stalls_total: AtomicU64,
    /// Of those, the times the shard's task had been runnable for 1 ms or more (what it
    /// waited on had woken it): glommio's executor slept with work runnable.
    pub executor_runnable_sleeps_total: AtomicU64,
    /// Wakes from other threads that reached this shard's tasks through glommio's own path
    /// because its doorbell could not be rung (`doorbell`).
    pub doorbell_fallback_wakes_total: AtomicU64,
    /// 1 once the shard's thread panicked (`shard::failure`): its ring is closed.
    pub failed: AtomicU64,
    /// On a node that shares a Redis Cluster: the partitions this shard has loaded and acts
    /// on (`shard::gate`).
    pub partitions_loaded: AtomicU64,
    /// On a node that shares a Redis Cluster: due timers this shard took off its wheel unfired,
    /// their partition's lease no longer valid (`shard::gate`).
    pub unfired_total: AtomicU64,
    /// Conditional writes refused: `"if": "absent"` with a timer pending (`shard::terms`).
    pub conflicts_exists_total: AtomicU64,
    /// Conditional writes refused: `if_version` not the pending timer's version.
    pub conflicts_version_total: AtomicU64,
    /// Conditional writes refused: `if_version` with no timer pending.
    pub conflicts_absent_total: AtomicU64,
    /// Occurrences of recurring schedules fired: armed as timers for delivery (`shard::fate`).
    pub schedule_occurrences_total: AtomicU64,
    /// Missed occurrences of recurring schedules passed over by their catch-up policy.
    pub schedule_skipped_total: AtomicU64,
    /// Pending timers on each level of the wheel (0 to 8), then on its expired list; sampled
    /// at every clock anchor.
    pub wheel_timers: [AtomicU64; WHEEL_GAUGES],
    /// The durable store's figures (all zero, state `InMemory`, without one).
    pub store: StoreMetrics,
    /// Webhook deliveries and refused conditional writes, per tenant.
    pub webhooks: WebhookMetrics,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        ShardMetrics {
            pending: AtomicU64::new(0),
            fired_total: AtomicU64::new(0),
            partitions_loaded: AtomicU64::new(0),
            unfired_total: AtomicU64::new(0),
            conflicts_exists_total: AtomicU64::new(0),
            conflicts_version_total: AtomicU64::new(0),
            conflicts_absent_total: AtomicU64::new(0),
            schedule_occurrences_total: AtomicU64::new(0),
            schedule_skipped_total: AtomicU64::new(0),
            lateness: Histogram::new(&LATENESS_BOUNDS_NS, 1e9),
            clock_offset_ns: AtomicI64::new(0),
            clock_steps_total: AtomicU64::new(0),
            clock_set_backs_total: AtomicU64::new(0),
            clock_fallback: AtomicU64::new(0),
            watchdog_wakes_total: AtomicU64::new(0),
            executor_stalls_total: AtomicU64::new(0),
            executor_runnable_sleeps_total: AtomicU64::new(0),
            doorbell_fallback_wakes_total: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            wheel_timers: [const { AtomicU64::new(0) }; WHEEL_GAUGES],
            store: StoreMetrics::default(),
            webhooks: WebhookMetrics::default(),
        }
    }
}
