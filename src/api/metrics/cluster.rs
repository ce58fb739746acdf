//! A node's partitions and lease events, on a Redis Cluster shared with other nodes: read from
//! the node loop's [`Holdings`] at scrape time.

use crate::api::forward::ForwardStats;
use crate::engine::Handle;
use crate::nodes::holdings::LOAD_OVERDUE;
use crate::nodes::node::Holdings;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The partitions this node holds and those its shards loaded, the live nodes, the lease
/// counters and the timers left unfired.
pub(super) fn encode_cluster(
    node: &Holdings,
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let s = &node.stats;
    let loaded = handle.partitions_loaded();
    let unfired = AtomicU64::new(handle.unfired());
    let owned = node.owned(Instant::now()).len() as i64;
    let live = s.live_nodes.load(Ordering::Relaxed) as i64;
    let overdue = node.loading.overdue(Instant::now(), LOAD_OVERDUE).len() as i64;
    for (name, help, v) in [
        (
            "punctual_cluster_partitions_owned",
            "Partitions whose lease this node holds, valid now (of 1,024)",
            owned,
        ),
        (
            "punctual_cluster_partitions_loaded",
            "Partitions this node's shards have loaded and act on (a held partition is loaded once its records are read)",
            loaded as i64,
        ),
        (
            "punctual_cluster_live_nodes",
            "Live nodes at the node's last good heartbeat",
            live,
        ),
        (
            "punctual_cluster_partitions_load_overdue",
            "Partitions held for over 5 s whose records were not handed to the shards (an alert: their timers do not fire)",
            overdue,
        ),
    ] {
        encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&v)?;
    }
    for (name, help, v) in [
        (
            "punctual_cluster_lease_acquisitions",
            "Partition leases this node acquired",
            &s.acquisitions_total,
        ),
        (
            "punctual_cluster_lease_renewals",
            "Partition lease renewals that held",
            &s.renewals_total,
        ),
        (
            "punctual_cluster_lease_losses",
            "Partition leases found lost at renewal (another holder, or gone)",
            &s.losses_total,
        ),
        (
            "punctual_cluster_lease_releases",
            "Partition leases this node released (moved to another node, or at stop)",
            &s.releases_total,
        ),
        (
            "punctual_cluster_early_rounds",
            "Rounds started before their time because the live set changed (a join, a leave, an expiry)",
            &s.early_rounds_total,
        ),
        (
            "punctual_cluster_fenced_drops",
            "Partitions dropped at once because a write under their lease was answered FENCED (the lease key held another value)",
            &s.fenced_drops_total,
        ),
        (
            "punctual_cluster_round_errors",
            "Rounds of heartbeat and leases that did not complete",
            &s.round_errors_total,
        ),
        (
            "punctual_cluster_unfired",
            "Due timers taken off a wheel unfired: their partition's lease was no longer valid (their records stay for the holder)",
            &unfired,
        ),
    ] {
        encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<(), _, u64>(&v.load(Ordering::Relaxed), None)?;
    }
    Ok(())
}

/// Forwards to the node that owns a request's partition, by outcome (the time the answered
/// ones took is a histogram of the registry's: `Metrics::new`).
pub(super) fn encode_forwards(
    f: &ForwardStats,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "punctual_cluster_forwards",
        "Requests and sub-batches forwarded to the node that owns their partition, by outcome: answered (whatever its status), busy (too many in flight to that node), timeout, unreachable, unverified (an answer without a valid punctual-answer-signature, not relayed)",
        None,
        MetricType::Counter,
    )?;
    for (outcome, v) in [
        ("answered", &f.answered),
        ("busy", &f.busy),
        ("timeout", &f.timeout),
        ("unreachable", &f.unreachable),
        ("unverified", &f.unverified),
    ] {
        family
            .encode_family(&[("outcome", outcome)])?
            .encode_counter::<(), _, u64>(&v.load(Ordering::Relaxed), None)?;
    }
    let mut family = encoder.encode_descriptor(
        "punctual_cluster_forwards_refused",
        "Requests marked forwarded that this node refused (401), by reason: missing (no signature of the cluster's secret), stale (signed outside the window), wrong (another secret, or changed on the way), replayed (a nonce already served within the window)",
        None,
        MetricType::Counter,
    )?;
    let r = &f.refused;
    for (reason, v) in [
        ("missing", &r.missing),
        ("stale", &r.stale),
        ("wrong", &r.wrong),
        ("replayed", &r.replayed),
    ] {
        family
            .encode_family(&[("reason", reason)])?
            .encode_counter::<(), _, u64>(&v.load(Ordering::Relaxed), None)?;
    }
    Ok(())
}
