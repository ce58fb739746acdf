//! The store's per-shard figures: relaxed atomics written by the shard's store task and read
//! by exporters (Prometheus rendering lives with the HTTP API).

use std::sync::atomic::{AtomicU64, Ordering};

/// `punctual_store_flush_seconds` upper bounds: 50 µs to 10 s.
pub const FLUSH_BUCKETS_S: [f64; 16] = [
    5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1.0, 2.0, 10.0,
];

/// `punctual_store_batch_commands` upper bounds: 1 to 65,536 commands, powers of 4.
pub const BATCH_BUCKETS: [f64; 9] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0,
];

/// What the store of one shard is doing (`StoreMetrics::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum StoreState {
    /// No Redis configured: in-memory, not durable.
    InMemory = 0,
    /// Trying to reach Redis (at start, before recovery).
    Connecting = 1,
    /// Loading the shard's partitions.
    Recovering = 2,
    /// Connected and recovered: durable writes are acknowledged.
    Ready = 3,
    /// The connection was lost; writes are buffered while it reconnects.
    Reconnecting = 4,
}

impl StoreState {
    fn from_u64(v: u64) -> StoreState {
        match v {
            1 => StoreState::Connecting,
            2 => StoreState::Recovering,
            3 => StoreState::Ready,
            4 => StoreState::Reconnecting,
            _ => StoreState::InMemory,
        }
    }
}

/// A fixed-bucket histogram of relaxed atomics (non-cumulative counts; the last is +Inf).
pub struct AtomicHistogram<const N: usize> {
    bounds: &'static [f64; N],
    counts: [AtomicU64; 17],
    sum_micro: AtomicU64,
}

impl<const N: usize> AtomicHistogram<N> {
    const fn new(bounds: &'static [f64; N]) -> Self {
        AtomicHistogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; 17],
            sum_micro: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v).min(16);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micro
            .fetch_add((v * 1e6) as u64, Ordering::Relaxed);
    }

    /// Cumulative (upper bound, count) pairs, the total count and the sum.
    pub fn snapshot(&self) -> crate::metrics::HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(N);
        for (i, &b) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            buckets.push((b, cumulative));
        }
        let count = cumulative
            + self.counts[N..]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>();
        crate::metrics::HistogramSnapshot {
            buckets,
            count,
            sum_seconds: self.sum_micro.load(Ordering::Relaxed) as f64 * 1e-6,
        }
    }
}

pub struct StoreMetrics {
    state: AtomicU64,
    /// Seconds from writing a pipeline to reading its last reply.
    pub flush_seconds: AtomicHistogram<16>,
    /// Commands per pipeline (MULTI/EXEC included).
    pub batch_commands: AtomicHistogram<9>,
    /// Writes (registrations, cancels, fires) not yet acknowledged by Redis.
    pub pending_writes: AtomicU64,
    pub reconnects_total: AtomicU64,
    /// Error replies and I/O failures, each logged.
    pub errors_total: AtomicU64,
    /// Durable registrations and cancels refused with `StoreUnavailable`.
    pub refused_total: AtomicU64,
    /// Callers answered `StoreUnavailable` because the acknowledgement took too long.
    pub ack_timeouts_total: AtomicU64,
    pub recoveries_total: AtomicU64,
    /// 1 while the shard holds due timers back because `max_buffered_fires` fires wait.
    pub fires_held: AtomicU64,
    /// Times the shard began holding fires back.
    pub fire_pauses_total: AtomicU64,
    pub recovered_timers: AtomicU64,
    pub recovery_duration_ns: AtomicU64,
    /// (tenant, length) of every fired stream, sampled by shard 0 (`store::streams`).
    pub stream_lengths: std::sync::Mutex<Vec<(String, u64)>>,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            state: AtomicU64::new(StoreState::InMemory as u64),
            flush_seconds: AtomicHistogram::new(&FLUSH_BUCKETS_S),
            batch_commands: AtomicHistogram::new(&BATCH_BUCKETS),
            pending_writes: AtomicU64::new(0),
            reconnects_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
            ack_timeouts_total: AtomicU64::new(0),
            recoveries_total: AtomicU64::new(0),
            fires_held: AtomicU64::new(0),
            fire_pauses_total: AtomicU64::new(0),
            recovered_timers: AtomicU64::new(0),
            recovery_duration_ns: AtomicU64::new(0),
            stream_lengths: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl StoreMetrics {
    pub fn state(&self) -> StoreState {
        StoreState::from_u64(self.state.load(Ordering::Relaxed))
    }

    pub(crate) fn set_state(&self, s: StoreState) {
        self.state.store(s as u64, Ordering::Relaxed);
    }

    pub(crate) fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_land_in_the_first_bucket_that_holds_them() {
        let m = StoreMetrics::default();
        m.batch_commands.observe(1.0);
        m.batch_commands.observe(5.0);
        m.batch_commands.observe(1e9);
        let s = m.batch_commands.snapshot();
        assert_eq!(s.buckets[0], (1.0, 1));
        assert_eq!(s.buckets[2], (16.0, 2));
        assert_eq!(s.count, 3);
    }
}
