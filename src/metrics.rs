//! The numbers: per-shard counters, the store's figures and one histogram type, written by
//! the owning shard's thread with relaxed atomics (no locks, no allocation on the hot path)
//! and read by exporters. Prometheus rendering lives with the HTTP API; this module only owns
//! the numbers, and imports nothing of the parts that write them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// `punctual_fire_lateness_seconds` upper bounds, in ns: 1 µs to 10 s, 1-2-5 steps.
pub const LATENESS_BOUNDS_NS: [u64; 22] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// `punctual_store_flush_seconds` upper bounds, in ns: 50 µs to 10 s.
pub const FLUSH_BOUNDS_NS: [u64; 16] = [
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    10_000_000_000,
];

/// `punctual_webhook_delivery_latency_seconds` upper bounds, in ns: 100 µs to 10 minutes.
pub const DELIVERY_BOUNDS_NS: [u64; 20] = [
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
    600_000_000_000,
];

/// `punctual_store_batch_commands` upper bounds: 1 to 65,536 writes, powers of 4.
pub const BATCH_BOUNDS: [u64; 9] = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536];

/// A fixed-bucket histogram of `u64` observations (ns, or a count), with one writer.
///
/// Only the owning shard's thread writes (its loop, or a task on its executor), so a relaxed
/// load and store replace the locked read-modify-write of `fetch_add` (about 10 ns per
/// observation in a burst); readers on other threads still see whole values. An observation
/// divided by `per_unit` is the exported unit (1e9 for ns → seconds, 1 for counts; a division
/// by an exact power of ten keeps `le` labels such as `1e-6` exact).
pub struct Histogram {
    bounds: &'static [u64],
    per_unit: f64,
    /// Non-cumulative counts; the last is +Inf.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// A histogram as read at one moment: cumulative counts per upper bound, sum and count, in
/// the exported unit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64], per_unit: f64) -> Histogram {
        Histogram {
            bounds,
            per_unit,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one observation. Call only from the owning shard's thread.
    #[inline]
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get(i) {
            single_writer_add(c, 1);
        }
        single_writer_add(&self.sum, v);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (i, &bound) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            buckets.push((bound as f64 / self.per_unit, cumulative));
        }
        let inf = self.counts.last().map_or(0, |c| c.load(Ordering::Relaxed));
        HistogramSnapshot {
            buckets,
            count: cumulative + inf,
            sum: self.sum.load(Ordering::Relaxed) as f64 / self.per_unit,
        }
    }
}

/// `counter += n` for a counter that only the calling thread writes.
#[inline]
pub fn single_writer_add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

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
    /// (`shard::watchdog`).
    pub watchdog_wakes_total: AtomicU64,
    /// Times the watchdog found this shard's executor asleep in io_uring while the shard's
    /// work was due: glommio slept with work runnable (`shard::watchdog`).
    pub executor_stalls_total: AtomicU64,
    /// Wakes from other threads that reached this shard's tasks through glommio's own path
    /// because its doorbell could not be rung (`doorbell`).
    pub doorbell_fallback_wakes_total: AtomicU64,
    /// 1 once the shard's thread panicked (`shard::failure`): its ring is closed.
    pub failed: AtomicU64,
    /// Pending timers on each level of the wheel (0 to 8), then on its expired list; sampled
    /// at every clock anchor.
    pub wheel_timers: [AtomicU64; WHEEL_GAUGES],
    /// The durable store's figures (all zero, state `InMemory`, without one).
    pub store: StoreMetrics,
    /// Webhook deliveries, per tenant.
    pub webhooks: WebhookMetrics,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        ShardMetrics {
            pending: AtomicU64::new(0),
            fired_total: AtomicU64::new(0),
            lateness: Histogram::new(&LATENESS_BOUNDS_NS, 1e9),
            clock_offset_ns: AtomicI64::new(0),
            clock_steps_total: AtomicU64::new(0),
            clock_set_backs_total: AtomicU64::new(0),
            clock_fallback: AtomicU64::new(0),
            watchdog_wakes_total: AtomicU64::new(0),
            executor_stalls_total: AtomicU64::new(0),
            doorbell_fallback_wakes_total: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            wheel_timers: [const { AtomicU64::new(0) }; WHEEL_GAUGES],
            store: StoreMetrics::default(),
            webhooks: WebhookMetrics::default(),
        }
    }
}

/// Why a delivery attempt failed: the `class` label of `punctual_webhook_failures_total`.
pub const FAILURE_CLASSES: [&str; 5] = ["connect", "timeout", "5xx", "throttled", "permanent"];

/// One tenant's deliveries on one shard.
pub struct DeliveryMetrics {
    pub attempts: AtomicU64,
    pub successes: AtomicU64,
    /// By class, in the order of [`FAILURE_CLASSES`].
    pub failures: [AtomicU64; 5],
    /// Deliveries a cap (per host or per tenant) held back; each is retried shortly.
    pub refused: AtomicU64,
    /// Attempts our own name resolver had no room for (`Busy`): made again without using an
    /// attempt, up to `MAX_BUSY` in a row (`sink::webhook::meta`).
    pub resolver_busy: AtomicU64,
    /// Timers that became dead letters.
    pub dead_total: AtomicU64,
    /// Dead letters held now (made, recovered, less discarded and re-driven).
    pub dead: AtomicI64,
    pub in_flight: AtomicI64,
    /// Timers waiting in a cap's queue for a slot (one entry per timer).
    pub held_back: AtomicI64,
    /// The answer's arrival minus the timer's deadline, ns, for successful deliveries.
    pub latency: Histogram,
}

impl Default for DeliveryMetrics {
    fn default() -> Self {
        DeliveryMetrics {
            attempts: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            failures: Default::default(),
            refused: AtomicU64::new(0),
            resolver_busy: AtomicU64::new(0),
            dead_total: AtomicU64::new(0),
            dead: AtomicI64::new(0),
            in_flight: AtomicI64::new(0),
            held_back: AtomicI64::new(0),
            latency: Histogram::new(&DELIVERY_BOUNDS_NS, 1e9),
        }
    }
}

impl DeliveryMetrics {
    /// The sum of the counters: it moves whenever the tenant does anything.
    fn counted(&self) -> u64 {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            &self.attempts,
            &self.successes,
            &self.refused,
            &self.resolver_busy,
            &self.dead_total,
        ]
        .into_iter()
        .chain(&self.failures)
        .map(get)
        .fold(0u64, u64::wrapping_add)
    }

    /// Whether the tenant holds anything now: dead letters, attempts in flight, timers held back.
    fn holds(&self) -> bool {
        [&self.dead, &self.in_flight, &self.held_back]
            .into_iter()
            .any(|g| g.load(Ordering::Relaxed) != 0)
    }

    /// Counts a failure of `class` (one of [`FAILURE_CLASSES`]).
    pub fn failed(&self, class: &str) {
        if let Some(i) = FAILURE_CLASSES.iter().position(|c| *c == class) {
            single_writer_add(&self.failures[i], 1);
        }
    }

    /// `gauge += d`; one writer (the shard's thread).
    pub fn add(gauge: &AtomicI64, d: i64) {
        gauge.store(
            gauge.load(Ordering::Relaxed).wrapping_add(d),
            Ordering::Relaxed,
        );
    }
}

/// The webhook figures of one shard: one [`DeliveryMetrics`] per tenant seen, for at most
/// [`TENANT_SERIES`] tenants at once; a tenant that finds them all taken is counted under one
/// shared entry exported as `tenant="other"`, so that tenants a server does not know (an open
/// server) cannot grow the exposition without bound.
///
/// A tenant's series goes when the tenant does: once it has held nothing (no dead letter,
/// nothing in flight or held back) and counted nothing for [`SERIES_IDLE`], the shard's sink
/// retires it ([`WebhookMetrics::retire_idle`]), unless the tenant has a table of its own in
/// the configuration. Its place is free for another tenant; should it come back, its series
/// starts again from zero (a counter reset, which `rate()` reads correctly). While an entry
/// lives it never changes, so its counters stay monotonic.
///
/// One writer: the shard's thread (its sink, its deliveries, its dead letters). The sink keeps
/// its own map of these (no lock per delivery); this list, under a mutex, is taken when a
/// tenant is first seen, by the sink's sweep once a minute, and by a scrape.
#[derive(Default)]
pub struct WebhookMetrics {
    tenants: std::sync::Mutex<Vec<Series>>,
    /// The tenants past the first [`TENANT_SERIES`], together.
    other: std::sync::Arc<DeliveryMetrics>,
    /// Whether any tenant was counted under `other`.
    folded: std::sync::atomic::AtomicBool,
}

/// Tenants with webhook series of their own, per shard.
pub const TENANT_SERIES: usize = 64;

/// How long a tenant's webhook series stays once it holds and counts nothing.
pub const SERIES_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// One tenant's series, and since when it has been idle.
struct Series {
    tenant: String,
    m: std::sync::Arc<DeliveryMetrics>,
    /// The sum of its counters at the last sweep, and the sweep that last saw it move (or
    /// hold something).
    counted: u64,
    since: std::time::Instant,
}

/// The label the tenants past [`TENANT_SERIES`] share (a tenant named `other` shares it too).
pub const OTHER_TENANTS: &str = "other";

impl WebhookMetrics {
    /// The figures of `tenant`, made on first use.
    pub fn tenant(&self, tenant: &str) -> std::sync::Arc<DeliveryMetrics> {
        let Ok(mut list) = self.tenants.lock() else {
            return Default::default();
        };
        if let Some(s) = list.iter().find(|s| s.tenant == tenant) {
            return s.m.clone();
        }
        if list.len() >= TENANT_SERIES {
            self.folded.store(true, Ordering::Relaxed);
            return self.other.clone();
        }
        let m = std::sync::Arc::new(DeliveryMetrics::default());
        list.push(Series {
            tenant: tenant.to_string(),
            m: m.clone(),
            counted: 0,
            since: std::time::Instant::now(),
        });
        m
    }

    /// Retires the series of every tenant that has held and counted nothing since `idle`
    /// before `now` and that `keep` does not name; their names. Called on the shard's thread
    /// (the only writer), so no count can land in a series as it goes.
    pub fn retire_idle(
        &self,
        now: std::time::Instant,
        idle: std::time::Duration,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let Ok(mut list) = self.tenants.lock() else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        list.retain_mut(|s| {
            let counted = s.m.counted();
            if counted != s.counted || s.m.holds() || keep(&s.tenant) {
                s.counted = counted;
                s.since = now;
                return true;
            }
            if now.saturating_duration_since(s.since) < idle {
                return true;
            }
            gone.push(std::mem::take(&mut s.tenant));
            false
        });
        gone
    }

    /// (tenant, figures) of every tenant with its own series, then `other` once it counts
    /// anyone, for exporters.
    pub fn snapshot(&self) -> Vec<(String, std::sync::Arc<DeliveryMetrics>)> {
        let mut out: Vec<_> = self
            .tenants
            .lock()
            .map(|l| l.iter().map(|s| (s.tenant.clone(), s.m.clone())).collect())
            .unwrap_or_default();
        if self.folded.load(Ordering::Relaxed) {
            out.push((OTHER_TENANTS.to_string(), self.other.clone()));
        }
        out
    }
}

/// What the store of one shard is doing (`StoreMetrics::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum StoreState {
    /// No durable store: in-memory, not durable.
    InMemory = 0,
    /// Trying to reach the store (at start, before recovery).
    Connecting = 1,
    /// Loading the shard's timers.
    Recovering = 2,
    /// Connected and recovered: durable writes are acknowledged.
    Ready = 3,
    /// The connection was lost; writes are buffered while it reconnects.
    Reconnecting = 4,
    /// The store failed in a way it cannot recover from by itself (the log says what to do);
    /// writes are refused.
    Failed = 5,
    /// The store cannot make writes durable now (the journal's disk is full, or too few Redis
    /// replicas confirm them); writes are refused or held and retried, and it becomes `Ready`
    /// by itself when a write succeeds again.
    Stalled = 6,
}

impl StoreState {
    fn from_u64(v: u64) -> StoreState {
        match v {
            1 => StoreState::Connecting,
            2 => StoreState::Recovering,
            3 => StoreState::Ready,
            4 => StoreState::Reconnecting,
            5 => StoreState::Failed,
            6 => StoreState::Stalled,
            _ => StoreState::InMemory,
        }
    }
}

/// The durable store's figures for one shard, whichever store it is.
pub struct StoreMetrics {
    state: AtomicU64,
    /// Seconds from sending a batch of writes to its acknowledgement (a Redis pipeline's last
    /// reply, a journal group commit's fdatasync).
    pub flush_seconds: Histogram,
    /// Writes per batch (Redis: commands per pipeline, MULTI/EXEC included; journal: records
    /// per group commit).
    pub batch_commands: Histogram,
    /// Writes (registrations, cancels, fires) not yet acknowledged.
    pub pending_writes: AtomicU64,
    pub reconnects_total: AtomicU64,
    /// Error replies and I/O failures, each logged.
    pub errors_total: AtomicU64,
    /// Durable registrations and cancels refused with `StoreUnavailable`.
    pub refused_total: AtomicU64,
    /// Durable registrations and cancels refused because their tenant held a quarter of the
    /// writes waiting (`StoreShare`, 503 `overloaded`).
    pub share_refused_total: AtomicU64,
    /// Callers answered `StoreUnavailable` because the acknowledgement took too long.
    pub ack_timeouts_total: AtomicU64,
    pub recoveries_total: AtomicU64,
    pub recovered_timers: AtomicU64,
    pub recovery_duration_ns: AtomicU64,
    /// 1 while the shard holds due timers back because its store holds as many fires as it may.
    pub fires_held: AtomicU64,
    /// Times the shard began holding fires back.
    pub fire_pauses_total: AtomicU64,
    /// Journal: bytes written to segments (records, commit markers and block padding).
    pub journal_bytes_total: AtomicU64,
    /// Journal: records made durable (schedules, attempts, cancels, fires).
    pub journal_records_total: AtomicU64,
    /// Journal: segment files on disk.
    pub journal_segments: AtomicU64,
    /// Journal: bytes the shard's segments and snapshot take on disk.
    pub journal_disk_bytes: AtomicU64,
    /// Journal: snapshots written by compaction.
    pub journal_snapshots_total: AtomicU64,
    /// Journal: how long the last snapshot took, ns.
    pub journal_snapshot_ns: AtomicU64,
    /// Journal: torn tails (a commit a crash cut short) truncated at recovery.
    pub journal_torn_total: AtomicU64,
    /// Journal: corrupt regions skipped (`--journal-skip-corrupt`).
    pub journal_corrupt_total: AtomicU64,
    /// (tenant, length) of every fired stream, sampled by shard 0 (Redis only). Only the
    /// sampling task and a scrape take this lock, never a shard's loop.
    pub stream_lengths: std::sync::Mutex<Vec<(String, u64)>>,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            state: AtomicU64::new(StoreState::InMemory as u64),
            flush_seconds: Histogram::new(&FLUSH_BOUNDS_NS, 1e9),
            batch_commands: Histogram::new(&BATCH_BOUNDS, 1.0),
            pending_writes: AtomicU64::new(0),
            reconnects_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
            share_refused_total: AtomicU64::new(0),
            ack_timeouts_total: AtomicU64::new(0),
            recoveries_total: AtomicU64::new(0),
            recovered_timers: AtomicU64::new(0),
            recovery_duration_ns: AtomicU64::new(0),
            fires_held: AtomicU64::new(0),
            fire_pauses_total: AtomicU64::new(0),
            journal_bytes_total: AtomicU64::new(0),
            journal_records_total: AtomicU64::new(0),
            journal_segments: AtomicU64::new(0),
            journal_disk_bytes: AtomicU64::new(0),
            journal_snapshots_total: AtomicU64::new(0),
            journal_snapshot_ns: AtomicU64::new(0),
            journal_torn_total: AtomicU64::new(0),
            journal_corrupt_total: AtomicU64::new(0),
            stream_lengths: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl StoreMetrics {
    pub fn state(&self) -> StoreState {
        StoreState::from_u64(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, s: StoreState) {
        self.state.store(s as u64, Ordering::Relaxed);
    }

    /// A recovery finished: `loaded` timers in `took`. The store is ready.
    pub fn recovered(&self, loaded: u64, took: std::time::Duration) {
        self.recovered_timers.store(loaded, Ordering::Relaxed);
        self.recovery_duration_ns.store(
            took.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        StoreMetrics::count(&self.recoveries_total, 1);
        self.set_state(StoreState::Ready);
    }

    /// `counter += n`; the store's counters have one writer, the shard's thread.
    pub fn count(counter: &AtomicU64, n: u64) {
        single_writer_add(counter, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_past_the_series_bound_share_one_stable_other_entry() {
        let w = WebhookMetrics::default();
        for i in 0..TENANT_SERIES {
            single_writer_add(&w.tenant(&format!("t{i}")).attempts, 1);
        }
        assert_eq!(w.snapshot().len(), TENANT_SERIES, "no other before a fold");
        for i in 0..1_000 {
            single_writer_add(&w.tenant(&format!("late{i}")).attempts, 1);
        }
        // The same late tenant lands in the same entry every time.
        single_writer_add(&w.tenant("late7").attempts, 1);
        single_writer_add(&w.tenant("t3").attempts, 1);
        let snap = w.snapshot();
        assert_eq!(snap.len(), TENANT_SERIES + 1);
        let get = |name: &str| {
            snap.iter()
                .find(|(t, _)| t == name)
                .map(|(_, m)| m.attempts.load(Ordering::Relaxed))
        };
        assert_eq!(get(OTHER_TENANTS), Some(1_001));
        assert_eq!(get("t3"), Some(2));
        assert_eq!(get("late7"), None);
    }

    /// A tenant's series goes once it has held and counted nothing for the idle time, unless
    /// kept; its place then goes to a new tenant instead of `other`.
    #[test]
    fn an_idle_tenants_series_is_retired_and_its_place_reused() {
        use std::time::{Duration, Instant};
        let w = WebhookMetrics::default();
        for i in 0..TENANT_SERIES {
            single_writer_add(&w.tenant(&format!("t{i}")).attempts, 1);
        }
        DeliveryMetrics::add(&w.tenant("t1").dead, 1);
        let idle = Duration::from_secs(600);
        let t0 = Instant::now();
        let kept = |t: &str| t == "t2";
        // First sweep: every counter moved since the series were made.
        assert!(w.retire_idle(t0, idle, kept).is_empty());
        // t3 counts again; the rest stay still.
        single_writer_add(&w.tenant("t3").successes, 1);
        assert!(w.retire_idle(t0 + idle / 2, idle, kept).is_empty());
        let mut gone = w.retire_idle(t0 + idle, idle, kept);
        gone.sort();
        assert_eq!(gone.len(), TENANT_SERIES - 3, "all but t1, t2 and t3");
        assert!(!gone
            .iter()
            .any(|t| ["t1", "t2", "t3"].contains(&t.as_str())));
        let names: Vec<String> = w.snapshot().into_iter().map(|(t, _)| t).collect();
        assert_eq!(names, ["t1", "t2", "t3"]);
        // t3 goes half an idle time later; a newcomer gets a series of its own, from zero.
        assert_eq!(w.retire_idle(t0 + idle * 3 / 2, idle, kept), ["t3"]);
        assert_eq!(w.tenant("t0").attempts.load(Ordering::Relaxed), 0);
        single_writer_add(&w.tenant("new").attempts, 1);
        let snap = w.snapshot();
        assert!(snap.iter().any(|(t, _)| t == "new"));
        assert!(!snap.iter().any(|(t, _)| t == OTHER_TENANTS));
    }

    #[test]
    fn lateness_lands_in_the_first_bucket_that_holds_it() {
        let m = ShardMetrics::default();
        m.lateness.observe(0); // on time: the 1 µs bucket
        m.lateness.observe(1_000); // exactly 1 µs: still le="1e-6"
        m.lateness.observe(1_001);
        m.lateness.observe(20_000_000_000); // 20 s: only +Inf
        let h = m.lateness.snapshot();
        assert_eq!(h.buckets[0], (1e-6, 2));
        assert_eq!(h.buckets[1], (2e-6, 3));
        assert_eq!(h.buckets.last().map(|b| b.1), Some(3));
        assert_eq!(h.count, 4);
        assert!((h.sum - 20.000002001).abs() < 1e-9, "{}", h.sum);
    }

    #[test]
    fn counts_histograms_export_their_own_unit() {
        let m = StoreMetrics::default();
        m.batch_commands.observe(1);
        m.batch_commands.observe(5);
        m.batch_commands.observe(1_000_000_000);
        let s = m.batch_commands.snapshot();
        assert_eq!(s.buckets[0], (1.0, 1));
        assert_eq!(s.buckets[2], (16.0, 2));
        assert_eq!(s.count, 3);
    }
}
