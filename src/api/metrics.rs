//! `/metrics`: the engine's per-shard figures and the HTTP request metrics, rendered in the
//! Prometheus/OpenMetrics text format by `prometheus-client`.
//!
//! Engine and store figures are read at scrape time from [`Handle::stats`] and
//! [`Handle::store_metrics`] by a collector (nothing is copied on the hot path). Request count and latency are per shard, route and status; each
//! shard only touches its own label sets, so the counters do not bounce between cores.

use crate::engine::Handle;
use crate::metrics::StoreState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub shard: u32,
    pub route: &'static str,
    pub status: u16,
}

type LatencyFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

/// Everything `/metrics` serves. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
}

fn latency_histogram() -> Histogram {
    // 10 µs to ~1.3 s in powers of 2.
    Histogram::new(exponential_buckets(1e-5, 2.0, 18))
}

impl Metrics {
    /// `store` ("journal", "memory" or "redis") goes into `punctual_build_info`.
    pub fn new(handle: Handle, store: &'static str) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: LatencyFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "punctual_http_requests",
            "HTTP requests answered, by shard, route and status",
            requests.clone(),
        );
        registry.register(
            "punctual_http_request_duration_seconds",
            "Time from a request's head to its response, by shard, route and status",
            latency.clone(),
        );
        registry.register_collector(Box::new(EngineCollector { handle, store }));
        Metrics {
            registry: Arc::new(registry),
            requests,
            latency,
        }
    }

    pub fn observe(&self, labels: RequestLabels, elapsed: Duration) {
        self.latency
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.requests.get_or_create(&labels).inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("rendering metrics failed: {e}");
        }
        out
    }
}

/// The gauges with labels beyond the shard: ring capacity, store readiness, wheel occupancy
/// per level, and each quota'd tenant's pending count and quota.
fn encode_gauges(handle: &Handle, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let stats = handle.stats();
    let mut gauge = |name: &str, help: &str, rows: Vec<(Vec<(&str, String)>, i64)>| {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in rows {
            family.encode_family(&labels)?.encode_gauge(&v)?;
        }
        Ok::<(), std::fmt::Error>(())
    };
    let shard = |s: &crate::engine::ShardStats| ("shard", s.shard.to_string());
    gauge(
        "punctual_ring_capacity",
        "Requests the shard's ring holds when full",
        stats
            .iter()
            .map(|s| (vec![shard(s)], s.ring_capacity as i64))
            .collect(),
    )?;
    gauge(
        "punctual_store_ready",
        "1 when the shard's store acknowledges writes (in memory, or recovered and connected), else 0",
        stats
            .iter()
            .map(|s| {
                let ready = matches!(s.store_state, StoreState::InMemory | StoreState::Ready);
                (vec![shard(s)], i64::from(ready))
            })
            .collect(),
    )?;
    gauge(
        "punctual_store_state",
        "The shard's store state: 0 in memory, 1 connecting, 2 recovering, 3 ready, 4 reconnecting, 5 failed, 6 stalled (disk full, or too few Redis replicas confirm writes)",
        stats.iter().map(|s| (vec![shard(s)], s.store_state as i64)).collect(),
    )?;
    gauge(
        "punctual_wheel_timers",
        "Pending timers on each level of the shard's timing wheel (level 0: the next 64 µs … level 8), and on its expired list",
        stats
            .iter()
            .flat_map(|s| {
                s.wheel_timers.iter().enumerate().map(move |(l, &n)| {
                    let level = if l + 1 == s.wheel_timers.len() {
                        "expired".to_string()
                    } else {
                        l.to_string()
                    };
                    (vec![shard(s), ("level", level)], n as i64)
                })
            })
            .collect(),
    )?;
    let quotas = handle.quotas();
    if !quotas.is_empty() {
        gauge(
            "punctual_tenant_pending",
            "Pending timers (and dead letters) counted against the tenant's quota, all shards together",
            quotas
                .iter()
                .map(|(t, _, pending)| (vec![("tenant", t.clone())], *pending))
                .collect(),
        )?;
        gauge(
            "punctual_tenant_quota",
            "The tenant's max_pending",
            quotas
                .iter()
                .map(|(t, limit, _)| (vec![("tenant", t.clone())], *limit as i64))
                .collect(),
        )?;
    }
    Ok(())
}

struct EngineCollector {
    handle: Handle,
    store: &'static str,
}

impl std::fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineCollector")
    }
}

/// A value of one metric family for one shard.
enum Value<'a> {
    Gauge(i64),
    GaugeF(f64),
    Counter(u64),
    Histogram(&'a crate::metrics::HistogramSnapshot),
}

/// One shard's figures, engine and store, read once per scrape.
struct Row {
    s: crate::engine::ShardStats,
    flush: crate::metrics::HistogramSnapshot,
    batch: crate::metrics::HistogramSnapshot,
    pending_writes: u64,
    reconnects: u64,
    errors: u64,
    refused: u64,
    share_refused: u64,
    ack_timeouts: u64,
    recoveries: u64,
    recovered_timers: u64,
    recovery_seconds: f64,
    fires_held: u64,
    fire_pauses: u64,
    journal_bytes: u64,
    journal_records: u64,
    journal_segments: u64,
    journal_disk_bytes: u64,
    journal_snapshots: u64,
    journal_snapshot_seconds: f64,
    journal_torn: u64,
    journal_corrupt: u64,
}

fn rows(handle: &Handle) -> Vec<Row> {
    let store = handle.store_metrics();
    handle
        .stats()
        .into_iter()
        .map(|s| {
            let m = store.get(s.shard).map(|m| &m.store);
            let get = |f: fn(&crate::metrics::StoreMetrics) -> u64| m.map(f).unwrap_or(0);
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
                journal_bytes: get(|m| m.journal_bytes_total.load(Relaxed)),
                journal_records: get(|m| m.journal_records_total.load(Relaxed)),
                journal_segments: get(|m| m.journal_segments.load(Relaxed)),
                journal_disk_bytes: get(|m| m.journal_disk_bytes.load(Relaxed)),
                journal_snapshots: get(|m| m.journal_snapshots_total.load(Relaxed)),
                journal_snapshot_seconds: get(|m| m.journal_snapshot_ns.load(Relaxed)) as f64
                    * 1e-9,
                journal_torn: get(|m| m.journal_torn_total.load(Relaxed)),
                journal_corrupt: get(|m| m.journal_corrupt_total.load(Relaxed)),
                s,
            }
        })
        .collect()
}

type Pick = fn(&Row) -> Value<'_>;

const STORE_FAMILIES: [(&str, &str, MetricType, Pick); 21] = [
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

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = rows(&self.handle);
        let families: [(&str, &str, MetricType, Pick); 13] = [
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
                "Times the shard's executor slept in io_uring while the shard's work was due (glommio's park bug), each ended by a watchdog wake",
                MetricType::Counter,
                |r| Value::Counter(r.s.executor_stalls_total),
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
        ];
        for (name, help, kind, pick) in families.into_iter().chain(STORE_FAMILIES) {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for r in &rows {
                let labels = [("shard", r.s.shard.to_string())];
                let mut m = family.encode_family(&labels)?;
                match pick(r) {
                    Value::Gauge(v) => m.encode_gauge(&v)?,
                    Value::GaugeF(v) => m.encode_gauge(&v)?,
                    Value::Counter(v) => m.encode_counter::<(), _, u64>(&v, None)?,
                    Value::Histogram(h) => {
                        // The snapshot is cumulative; the encoder wants per-bucket counts.
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
                        m.encode_histogram::<()>(h.sum, h.count, &buckets, None)?
                    }
                }
            }
        }
        encode_webhooks(&self.handle, &mut encoder)?;
        encode_resolver(&mut encoder)?;
        encode_gauges(&self.handle, &mut encoder)?;
        let streams = self.handle.stream_lengths();
        if !streams.is_empty() {
            let mut family = encoder.encode_descriptor(
                "punctual_stream_length",
                "Entries in the tenant's fired stream (trimmed at stream_maxlen)",
                None,
                MetricType::Gauge,
            )?;
            for (tenant, len) in &streams {
                let labels = [("tenant", tenant.as_str())];
                family
                    .encode_family(&labels)?
                    .encode_gauge(&(*len as i64))?;
            }
        }
        let info = encoder.encode_descriptor(
            "punctual_build",
            "Build information",
            None,
            MetricType::Info,
        )?;
        let labels = [
            ("version", env!("CARGO_PKG_VERSION")),
            ("store", self.store),
        ];
        let mut info = info;
        info.encode_info(&labels)
    }
}

/// `punctual_resolver_*`: the process's name resolver (`crate::resolve`).
fn encode_resolver(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let (queued, running) = crate::resolve::global().queued_and_running();
    for (name, help, v) in [
        (
            "punctual_resolver_queued",
            "Host names waiting for a resolver thread (at most 256; more fail the attempt at once)",
            queued,
        ),
        (
            "punctual_resolver_running",
            "Host name lookups running on the resolver threads (at most 4)",
            running,
        ),
    ] {
        encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&(v as i64))?;
    }
    Ok(())
}

/// `punctual_webhook_*`: per shard and tenant, for the tenants that had deliveries.
fn encode_webhooks(
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use crate::metrics::{DeliveryMetrics, FAILURE_CLASSES};
    let rows: Vec<(String, String, Arc<DeliveryMetrics>)> = handle
        .store_metrics()
        .iter()
        .enumerate()
        .flat_map(|(shard, m)| {
            m.webhooks
                .snapshot()
                .into_iter()
                .map(move |(tenant, d)| (shard.to_string(), tenant, d))
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    type Get = fn(&DeliveryMetrics) -> u64;
    let counters: [(&str, &str, Get); 5] = [
        ("punctual_webhook_attempts", "Delivery attempts started", |d| d.attempts.load(Relaxed)),
        ("punctual_webhook_successes", "Deliveries answered 2xx within the timeout", |d| {
            d.successes.load(Relaxed)
        }),
        (
            "punctual_webhook_refused",
            "Deliveries held back by the per-host or per-tenant cap (retried shortly, no attempt used)",
            |d| d.refused.load(Relaxed),
        ),
        (
            "punctual_webhook_resolver_busy",
            "Attempts our own name resolver had no room for (made again, no attempt used, up to 6 in a row)",
            |d| d.resolver_busy.load(Relaxed),
        ),
        ("punctual_webhook_dead_letters_made", "Timers that became dead letters", |d| {
            d.dead_total.load(Relaxed)
        }),
    ];
    for (name, help, get) in counters {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (shard, tenant, d) in &rows {
            let labels = [("shard", shard.as_str()), ("tenant", tenant.as_str())];
            family
                .encode_family(&labels)?
                .encode_counter::<(), _, u64>(&get(d), None)?;
        }
    }
    let mut family = encoder.encode_descriptor(
        "punctual_webhook_failures",
        "Failed delivery attempts, by class: connect, timeout, 5xx, throttled (408, 429), permanent",
        None,
        MetricType::Counter,
    )?;
    for (shard, tenant, d) in &rows {
        for (i, class) in FAILURE_CLASSES.iter().enumerate() {
            let labels = [
                ("shard", shard.as_str()),
                ("tenant", tenant.as_str()),
                ("class", class),
            ];
            family
                .encode_family(&labels)?
                .encode_counter::<(), _, u64>(&d.failures[i].load(Relaxed), None)?;
        }
    }
    type Gauge = fn(&DeliveryMetrics) -> i64;
    let gauges: [(&str, &str, Gauge); 3] = [
        ("punctual_webhook_in_flight", "Deliveries in flight", |d| {
            d.in_flight.load(Relaxed)
        }),
        (
            "punctual_webhook_held_back",
            "Timers waiting in a per-host or per-tenant cap's queue for a slot (one entry each)",
            |d| d.held_back.load(Relaxed),
        ),
        (
            "punctual_webhook_dead_letters",
            "Dead letters held (not yet re-driven or discarded)",
            |d| d.dead.load(Relaxed),
        ),
    ];
    for (name, help, get) in gauges {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (shard, tenant, d) in &rows {
            let labels = [("shard", shard.as_str()), ("tenant", tenant.as_str())];
            family.encode_family(&labels)?.encode_gauge(&get(d))?;
        }
    }
    let mut family = encoder.encode_descriptor(
        "punctual_webhook_delivery_latency_seconds",
        "Successful deliveries: the answer's arrival minus the timer's deadline",
        None,
        MetricType::Histogram,
    )?;
    for (shard, tenant, d) in &rows {
        let labels = [("shard", shard.as_str()), ("tenant", tenant.as_str())];
        let h = d.latency.snapshot();
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
        family
            .encode_family(&labels)?
            .encode_histogram::<()>(h.sum, h.count, &buckets, None)?;
    }
    Ok(())
}
