//! `punctual_webhook_*`: webhook deliveries, and `punctual_tenant_conflicts_total`: refused
//! conditional writes, per shard and tenant, for the tenants that had either.

use super::families::per_bucket;
use crate::engine::Handle;
use crate::metrics::{DeliveryMetrics, CONFLICT_CODES, FAILURE_CLASSES};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// `punctual_webhook_*` and `punctual_tenant_conflicts_total`: per shard and tenant, for the
/// tenants that had deliveries or refusals.
pub(super) fn encode_webhooks(
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
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
    type Each = fn(&DeliveryMetrics) -> &[std::sync::atomic::AtomicU64];
    let by_label: [(&str, &str, &str, &[&str], Each); 2] = [
        (
            "punctual_tenant_conflicts",
            "Conditional writes and cancels refused, by code: exists and version_mismatch (409), not_pending (404: if_version with nothing pending)",
            "code",
            &CONFLICT_CODES,
            |d| &d.conflicts,
        ),
        (
            "punctual_webhook_failures",
            "Failed delivery attempts, by class: connect, timeout, 5xx, throttled (408, 429), permanent",
            "class",
            &FAILURE_CLASSES,
            |d| &d.failures,
        ),
    ];
    for (name, help, label, values, each) in by_label {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (shard, tenant, d) in &rows {
            for (value, count) in values.iter().zip(each(d)) {
                let labels = [
                    ("shard", shard.as_str()),
                    ("tenant", tenant.as_str()),
                    (label, value),
                ];
                family
                    .encode_family(&labels)?
                    .encode_counter::<(), _, u64>(&count.load(Relaxed), None)?;
            }
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
        family.encode_family(&labels)?.encode_histogram::<()>(
            h.sum,
            h.count,
            &per_bucket(&h),
            None,
        )?;
    }
    Ok(())
}
