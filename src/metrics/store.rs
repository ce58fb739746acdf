//! The durable store's figures for one shard, whichever store it is: [`StoreMetrics`], and
//! what the store is doing ([`StoreState`]).

use super::counter::single_writer_add;
use super::histogram::{one_two_five, Histogram};
use std::sync::atomic::{AtomicU64, Ordering};

/// `punctual_store_flush_seconds` upper bounds, in ns: 50 µs to 2 s in 1-2-5 steps, then 10 s.
pub const FLUSH_BOUNDS_NS: [u64; 16] = one_two_five(50_000, &[10_000_000_000]);

/// `punctual_store_batch_commands` upper bounds: 1 to 65,536 writes, powers of 4.
pub const BATCH_BOUNDS: [u64; 9] = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536];

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
    /// Redis Cluster: `MOVED` replies followed (a slot's master changed).
    pub cluster_moved_total: AtomicU64,
    /// Redis Cluster: `ASK` replies followed (a slot being migrated).
    pub cluster_asked_total: AtomicU64,
    /// Redis Cluster: slot maps read (at connect, after a failover or a lost connection).
    pub cluster_refreshes_total: AtomicU64,
    /// Partition scripts refused `FENCED` (another node holds the partition's lease).
    pub fenced_total: AtomicU64,
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
    /// Journal: rolls to a new segment that waited for a running compaction to end.
    pub journal_compaction_holds_total: AtomicU64,
    /// Journal: torn tails (a commit a crash cut short) truncated at recovery.
    pub journal_torn_total: AtomicU64,
    /// Journal: corrupt regions skipped (`--journal-skip-corrupt`).
    pub journal_corrupt_total: AtomicU64,
    /// Paging (`page`): timers paged, bytes of pages held in memory and on disk, and the
    /// pages' failed writes, failed reads and damaged records (sampled at every anchor).
    pub page_timers: AtomicU64,
    pub page_buffered_bytes: AtomicU64,
    pub page_disk_bytes: AtomicU64,
    pub page_write_errors_total: AtomicU64,
    pub page_read_errors_total: AtomicU64,
    pub page_damaged_total: AtomicU64,
    /// Paging: timers a damaged page lost, pending in the journal until a restart fires them.
    pub page_lost_timers: AtomicU64,
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
            cluster_moved_total: AtomicU64::new(0),
            cluster_asked_total: AtomicU64::new(0),
            cluster_refreshes_total: AtomicU64::new(0),
            fenced_total: AtomicU64::new(0),
            journal_bytes_total: AtomicU64::new(0),
            journal_records_total: AtomicU64::new(0),
            journal_segments: AtomicU64::new(0),
            journal_disk_bytes: AtomicU64::new(0),
            journal_snapshots_total: AtomicU64::new(0),
            journal_compaction_holds_total: AtomicU64::new(0),
            journal_snapshot_ns: AtomicU64::new(0),
            journal_torn_total: AtomicU64::new(0),
            journal_corrupt_total: AtomicU64::new(0),
            page_timers: AtomicU64::new(0),
            page_buffered_bytes: AtomicU64::new(0),
            page_disk_bytes: AtomicU64::new(0),
            page_write_errors_total: AtomicU64::new(0),
            page_read_errors_total: AtomicU64::new(0),
            page_damaged_total: AtomicU64::new(0),
            page_lost_timers: AtomicU64::new(0),
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
