//! The per-shard families: one shard's figures, engine and store, read once per scrape
//! ([`Row`]), and each family's name, help, type and the pick of its value from a row. Every
//! family has one series per shard.

use crate::engine::{Handle, ShardStats};
use crate::metrics::{HistogramSnapshot, StoreMetrics};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::Ordering::Relaxed;

/// A value of one metric family for one shard.
pub(super) enum Value<'a> {
    Gauge(i64),
    GaugeF(f64),
    Counter(u64),
    Histogram(&'a HistogramSnapshot),
}

/// One shard's figures, engine and store, read once per scrape.
pub(super) struct Row {
    pub s: ShardStats,
    pub flush: HistogramSnapshot,
    pub batch: HistogramSnapshot,
    pub pending_writes: u64,
    pub reconnects: u64,
    pub errors: u64,
    pub refused: u64,
    pub share_refused: u64,
    pub ack_timeouts: u64,
    pub recoveries: u64,
    pub recovered_timers: u64,
    pub recovery_seconds: f64,
    pub fires_held: u64,
    pub fire_pauses: u64,
    pub cluster_moved: u64,
    pub cluster_asked: u64,
    pub cluster_refreshes: u64,
    pub fenced: u64,
    pub journal_bytes: u64,
    pub journal_records: u64,
    pub journal_segments: u64,
    pub journal_disk_bytes: u64,
    pub journal_snapshots: u64,
    pub journal_snapshot_seconds: f64,
    pub journal_compaction_holds: u64,
    pub journal_torn: u64,
    pub journal_corrupt: u64,
    pub page: [u64; 7],
}

/// Every shard's row.
pub(super) fn rows(handle: &Handle) -> Vec<Row> {
    let store = handle.store_metrics();
    handle
        .stats()
        .into_iter()
        .map(|s| {
            let m = store.get(s.shard).map(|m| &m.store);
            let get = |f: fn(&StoreMetrics) -> u64| m.map(f).unwrap_or(0);
            Row {
                flush: m.map(|m| m.flush_seconds.snapshot()).unwrap_or_default(),
                batch: m.map(|m| m.batch_commands.snapshot()).unwrap_or_default(),
                pending_writes: get(|m| m.pending_writes.load(Relaxed)),
                reconnects: get(|m| m.reconnects_total.load(Relaxed)),
                fires_held: get(|m| m.fires_held.load(Relaxed)),
                fire_pauses: get(|m| m.fire_pauses_total.load(Relaxed)),
                errors: get(|m| m.errors_total.load(Relaxed)),
                refused: get(|m| m.refused_total.load(Relaxed)),
                share_refused: get(|m| m.share_refused_total.load(Relaxed)),
                ack_timeouts: get(|m| m.ack_timeouts_total.load(Relaxed)),
                recoveries: get(|m| m.recoveries_total.load(Relaxed)),
                recovered_timers: get(|m| m.recovered_timers.load(Relaxed)),
                recovery_seconds: get(|m| m.recovery_duration_ns.load(Relaxed)) as f64 * 1e-9,
                cluster_moved: get(|m| m.cluster_moved_total.load(Relaxed)),
                cluster_asked: get(|m| m.cluster_asked_total.load(Relaxed)),
                cluster_refreshes: get(|m| m.cluster_refreshes_total.load(Relaxed)),
                fenced: get(|m| m.fenced_total.load(Relaxed)),
                journal_bytes: get(|m| m.journal_bytes_total.load(Relaxed)),
                journal_records: get(|m| m.journal_records_total.load(Relaxed)),
                journal_segments: get(|m| m.journal_segments.load(Relaxed)),
                journal_disk_bytes: get(|m| m.journal_disk_bytes.load(Relaxed)),
                journal_snapshots: get(|m| m.journal_snapshots_total.load(Relaxed)),
                journal_snapshot_seconds: get(|m| m.journal_snapshot_ns.load(Relaxed)) as f64
                    * 1e-9,
                journal_compaction_holds: get(|m| m.journal_compaction_holds_total.load(Relaxed)),
                journal_torn: get(|m| m.journal_torn_total.load(Relaxed)),
                journal_corrupt: get(|m| m.journal_corrupt_total.load(Relaxed)),
                page: [
                    get(|m| m.page_timers.load(Relaxed)),
                    get(|m| m.page_buffered_bytes.load(Relaxed)),
                    get(|m| m.page_disk_bytes.load(Relaxed)),
                    get(|m| m.page_write_errors_total.load(Relaxed)),
                    get(|m| m.page_read_errors_total.load(Relaxed)),
                    get(|m| m.page_damaged_total.load(Relaxed)),
                    get(|m| m.page_lost_timers.load(Relaxed)),
                ],
                s,
            }
        })
        .collect()
}

/// How a family reads its value from one shard's row.
pub(super) type Pick = fn(&Row) -> Value<'_>;

/// The engine's families, one series per shard.
pub(super) const ENGINE_FAMILIES: [(&str, &str, MetricType, Pick); 19] = [
    (
        "punctual_timers_pending",
        "Timers pending on the shard",
        MetricType::Gauge,
        |r| Value::Gauge(r.s.pending as i64),
    ),
    (
        "punctual_timers_fired",
        "Timers fired by the shard",
        MetricType::Counter,
        |r| Value::Counter(r.s.fired_total),
    ),
    (
        "punctual_fire_lateness_seconds",
        "Fired-at minus deadline",
        MetricType::Histogram,
        |r| Value::Histogram(&r.s.lateness),
    ),
    (
        "punctual_ring_depth",
        "Requests waiting in the shard's ring",
        MetricType::Gauge,
        |r| Value::Gauge(r.s.ring_depth as i64),
    ),
    (
        "punctual_ring_rejected",
        "Requests refused because the ring was full",
        MetricType::Counter,
        |r| Value::Counter(r.s.ring_rejected_total),
    ),
    (
        "punctual_clock_offset_seconds",
        "Mapped clock minus CLOCK_REALTIME at the last anchor",
        MetricType::Gauge,
        |r| Value::GaugeF(r.s.clock_offset_ns as f64 * 1e-9),
    ),
    (
        "punctual_clock_steps",
        "System clock steps seen by the shard",
        MetricType::Counter,
        |r| Value::Counter(r.s.clock_steps_total),
    ),
    (
        "punctual_clock_set_backs",
        "Leads of the mapped clock over CLOCK_REALTIME removed at an anchor",
        MetricType::Counter,
        |r| Value::Counter(r.s.clock_set_backs_total),
    ),
    (
        "punctual_clock_fallback",
        "1 when the shard's clock reads clock_gettime because the TSC is not invariant",
        MetricType::Gauge,
        |r| Value::Gauge(i64::from(r.s.clock_fallback)),
    ),
    (
        "punctual_shard_watchdog_wakes",
        "Times the watchdog woke the shard, 1 ms past its time with its executor asleep in io_uring",
        MetricType::Counter,
        |r| Value::Counter(r.s.watchdog_wakes_total),
    ),
    (
        "punctual_executor_stalls",
        "Times the shard's executor was found asleep in io_uring 1 ms past the shard's time (a late timer or I/O, or glommio's park bug), each ended by a watchdog wake",
        MetricType::Counter,
        |r| Value::Counter(r.s.executor_stalls_total),
    ),
    (
        "punctual_executor_runnable_sleeps",
        "Of the stalls, those where the shard's task had been runnable for 1 ms while its executor slept (glommio's park bug)",
        MetricType::Counter,
        |r| Value::Counter(r.s.executor_runnable_sleeps_total),
    ),
    (
        "punctual_doorbell_fallback_wakes",
        "Replies from other threads that reached the shard's tasks through glommio's foreign wakes because its doorbell could not be rung",
        MetricType::Counter,
        |r| Value::Counter(r.s.doorbell_fallback_wakes_total),
    ),
    (
        "punctual_shard_failed",
        "1 once the shard's thread panicked: its ring is closed and every call to it is refused",
        MetricType::Gauge,
        |r| Value::Gauge(i64::from(r.s.failed)),
    ),
    (
        "punctual_conflicts_exists",
        "Conditional writes refused 409 exists: \"if\": \"absent\" with a timer pending under the key",
        MetricType::Counter,
        |r| Value::Counter(r.s.conflicts[0]),
    ),
    (
        "punctual_conflicts_version_mismatch",
        "Conditional writes and cancels refused 409 version_mismatch: if_version not the pending timer's version",
        MetricType::Counter,
        |r| Value::Counter(r.s.conflicts[1]),
    ),
    (
        "punctual_conflicts_not_pending",
        "Conditional writes refused 404: if_version with no timer pending under the key",
        MetricType::Counter,
        |r| Value::Counter(r.s.conflicts[2]),
    ),
    (
        "punctual_schedule_occurrences",
        "Occurrences of recurring schedules fired: each armed as a timer that delivers it",
        MetricType::Counter,
        |r| Value::Counter(r.s.schedules[0]),
    ),
    (
        "punctual_schedule_skipped",
        "Missed occurrences of recurring schedules that their catch-up policy passed over",
        MetricType::Counter,
        |r| Value::Counter(r.s.schedules[1]),
    ),
];

/// The store's families, one series per shard (zero without a durable store).
pub(super) const STORE_FAMILIES: [(&str, &str, MetricType, Pick); 33] = [
    (
        "punctual_page_timers",
        "Timers paged: due beyond the horizon, kept on disk (--page-horizon-s)",
        MetricType::Gauge,
        |r| Value::Gauge(r.page[0] as i64),
    ),
    (
        "punctual_page_buffered_bytes",
        "Bytes of pages held in memory, not yet written",
        MetricType::Gauge,
        |r| Value::Gauge(r.page[1] as i64),
    ),
    (
        "punctual_page_disk_bytes",
        "Bytes of pages on disk",
        MetricType::Gauge,
        |r| Value::Gauge(r.page[2] as i64),
    ),
    (
        "punctual_page_write_errors",
        "Page writes that failed (their bytes stay in memory and are written again)",
        MetricType::Counter,
        |r| Value::Counter(r.page[3]),
    ),
    (
        "punctual_page_read_errors",
        "Page reads that failed (a load waits and reads again)",
        MetricType::Counter,
        |r| Value::Counter(r.page[4]),
    ),
    (
        "punctual_page_damaged_records",
        "Page records that read back damaged: their timers load at the next start, from the journal",
        MetricType::Counter,
        |r| Value::Counter(r.page[5]),
    ),
    (
        "punctual_page_lost_timers",
        "Paged timers a damaged page lost: they do not fire until a restart loads them from the journal",
        MetricType::Gauge,
        |r| Value::Gauge(r.page[6] as i64),
    ),
    (
        "punctual_store_flush_seconds",
        "Duration of one batch of durable writes: a Redis pipeline, or a journal group commit (write and fdatasync)",
        MetricType::Histogram,
        |r| Value::Histogram(&r.flush),
    ),
    (
        "punctual_store_batch_commands",
        "Writes per batch: commands per Redis pipeline, or records per journal group commit",
        MetricType::Histogram,
        |r| Value::Histogram(&r.batch),
    ),
    (
        "punctual_journal_bytes_written",
        "Bytes the journal wrote to its segments (records, commit markers, block padding)",
        MetricType::Counter,
        |r| Value::Counter(r.journal_bytes),
    ),
    (
        "punctual_journal_records_written",
        "Records the journal made durable",
        MetricType::Counter,
        |r| Value::Counter(r.journal_records),
    ),
    (
        "punctual_journal_segments",
        "Journal segment files on disk",
        MetricType::Gauge,
        |r| Value::Gauge(r.journal_segments as i64),
    ),
    (
        "punctual_journal_disk_bytes",
        "Bytes the shard's journal (segments and snapshot) takes on disk",
        MetricType::Gauge,
        |r| Value::Gauge(r.journal_disk_bytes as i64),
    ),
    (
        "punctual_journal_snapshots",
        "Snapshots written by journal compaction",
        MetricType::Counter,
        |r| Value::Counter(r.journal_snapshots),
    ),
    (
        "punctual_journal_snapshot_seconds",
        "Duration of the last journal snapshot",
        MetricType::Gauge,
        |r| Value::GaugeF(r.journal_snapshot_seconds),
    ),
    (
        "punctual_journal_compaction_holds",
        "Segment rolls that waited for a running compaction to end (writes outpaced it)",
        MetricType::Counter,
        |r| Value::Counter(r.journal_compaction_holds),
    ),
    (
        "punctual_journal_torn_records",
        "Torn journal tails (a commit cut short by a crash) truncated at recovery",
        MetricType::Counter,
        |r| Value::Counter(r.journal_torn),
    ),
    (
        "punctual_journal_corrupt_records",
        "Corrupt journal regions skipped at recovery (--journal-skip-corrupt)",
        MetricType::Counter,
        |r| Value::Counter(r.journal_corrupt),
    ),
    (
        "punctual_store_pending_writes",
        "Writes buffered for the store, not yet acknowledged",
        MetricType::Gauge,
        |r| Value::Gauge(r.pending_writes as i64),
    ),
    (
        "punctual_store_fires_held",
        "1 while the shard holds due timers back: max_buffered_fires fires wait for the store",
        MetricType::Gauge,
        |r| Value::Gauge(r.fires_held as i64),
    ),
    (
        "punctual_store_fire_pauses",
        "Times the shard began holding due timers back for want of room for their stream entries",
        MetricType::Counter,
        |r| Value::Counter(r.fire_pauses),
    ),
    (
        "punctual_store_reconnects",
        "Reconnections to Redis",
        MetricType::Counter,
        |r| Value::Counter(r.reconnects),
    ),
    (
        "punctual_store_cluster_moved",
        "Redis Cluster MOVED replies followed: a slot's master changed",
        MetricType::Counter,
        |r| Value::Counter(r.cluster_moved),
    ),
    (
        "punctual_store_cluster_asked",
        "Redis Cluster ASK replies followed: a slot was being migrated",
        MetricType::Counter,
        |r| Value::Counter(r.cluster_asked),
    ),
    (
        "punctual_store_cluster_refreshes",
        "Redis Cluster slot maps read: at connect, after a failover, a lost connection or redirects",
        MetricType::Counter,
        |r| Value::Counter(r.cluster_refreshes),
    ),
    (
        "punctual_store_fenced",
        "Partition scripts refused FENCED because another node holds the partition's lease",
        MetricType::Counter,
        |r| Value::Counter(r.fenced),
    ),
    (
        "punctual_store_errors",
        "Errors seen by the shard's store (Redis replies and I/O, journal I/O)",
        MetricType::Counter,
        |r| Value::Counter(r.errors),
    ),
    (
        "punctual_store_refused",
        "Durable writes refused (503 store_unavailable)",
        MetricType::Counter,
        |r| Value::Counter(r.refused),
    ),
    (
        "punctual_store_share_refused",
        "Durable writes refused because their tenant held a quarter of the writes waiting (503 overloaded)",
        MetricType::Counter,
        |r| Value::Counter(r.share_refused),
    ),
    (
        "punctual_store_ack_timeouts",
        "Durable writes not acknowledged within the timeout",
        MetricType::Counter,
        |r| Value::Counter(r.ack_timeouts),
    ),
    (
        "punctual_store_recoveries",
        "Recoveries of pending timers from the store",
        MetricType::Counter,
        |r| Value::Counter(r.recoveries),
    ),
    (
        "punctual_store_recovered_timers",
        "Pending timers loaded from the store by recoveries",
        MetricType::Counter,
        |r| Value::Counter(r.recovered_timers),
    ),
    (
        "punctual_store_recovery_seconds",
        "Duration of the last recovery from the store",
        MetricType::Gauge,
        |r| Value::GaugeF(r.recovery_seconds),
    ),
];

/// Encodes `families`, one series per row.
pub(super) fn encode_families(
    families: impl IntoIterator<Item = (&'static str, &'static str, MetricType, Pick)>,
    rows: &[Row],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    for (name, help, kind, pick) in families {
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        for r in rows {
            let labels = [("shard", r.s.shard.to_string())];
            let mut m = family.encode_family(&labels)?;
            match pick(r) {
                Value::Gauge(v) => m.encode_gauge(&v)?,
                Value::GaugeF(v) => m.encode_gauge(&v)?,
                Value::Counter(v) => m.encode_counter::<(), _, u64>(&v, None)?,
                Value::Histogram(h) => {
                    m.encode_histogram::<()>(h.sum, h.count, &per_bucket(h), None)?
                }
            }
        }
    }
    Ok(())
}

/// A histogram's buckets as the encoder wants them: the snapshot is cumulative, the encoder
/// takes per-bucket counts, the last one +Inf.
pub(super) fn per_bucket(h: &HistogramSnapshot) -> Vec<(f64, u64)> {
    let mut prev = 0;
    let mut buckets: Vec<(f64, u64)> = h
        .buckets
        .iter()
        .map(|&(le, c)| {
            let b = (le, c.saturating_sub(prev));
            prev = c;
            b
        })
        .collect();
    buckets.push((f64::MAX, h.count.saturating_sub(prev)));
    buckets
}
