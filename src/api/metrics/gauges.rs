//! The gauges with labels beyond the shard (ring capacity, store readiness and state, wheel
//! occupancy per level, tenants' pending counts and quotas), the name resolver's, and the
//! fired streams' lengths.

use crate::engine::{Handle, ShardStats};
use crate::metrics::StoreState;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// The gauges with labels beyond the shard: ring capacity, store readiness, wheel occupancy
/// per level, and each quota'd tenant's pending count and quota.
pub(super) fn encode_gauges(
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let stats = handle.stats();
    let mut gauge = |name: &str, help: &str, rows: Vec<(Vec<(&str, String)>, i64)>| {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in rows {
            family.encode_family(&labels)?.encode_gauge(&v)?;
        }
        Ok::<(), std::fmt::Error>(())
    };
    let shard = |s: &ShardStats| ("shard", s.shard.to_string());
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

/// `punctual_resolver_*`: the process's name resolver (`crate::resolve`).
pub(super) fn encode_resolver(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
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

/// `punctual_stream_length`: each fired stream's length (Redis only).
pub(super) fn encode_streams(
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let streams = handle.stream_lengths();
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
    Ok(())
}
