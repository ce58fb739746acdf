//! `punctual_queue_*`: the pull queues' figures per tenant, all shards together, for the
//! tenants whose queue is on (fixed at start, so the series are bounded by the configuration;
//! a tenant taken out of it has none after the restart).
//!
//! The counters are bumped by the shards as messages change state (`shard::queue`). The
//! gauges (ready, in flight, delayed, the oldest ready message's age) are the lengths of the
//! shards' queue indexes, asked for by the scrape before it is rendered ([`count_queues`]):
//! no walk of the messages, so a backlog of millions costs a scrape what an empty queue does.

use crate::engine::Handle;
use crate::queue::QueueFigures;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::Ordering::Relaxed;

/// Asks the shards for each queued tenant's counts and keeps them for the render. A shard
/// that does not answer leaves the tenant's last counts.
pub(super) async fn count_queues(handle: &Handle) {
    let queues = handle.pull_queues().clone();
    for (tenant, _) in queues.all_figures() {
        if let Ok(c) = handle.queue_count_async(tenant).await {
            queues.set_counts(tenant, &c);
        }
    }
}

/// `punctual_queue_*`, one series per tenant whose queue is on.
pub(super) fn encode_queues(
    handle: &Handle,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let queues = handle.pull_queues();
    let rows = queues.all_figures();
    if rows.is_empty() {
        return Ok(());
    }
    type Get = fn(&QueueFigures) -> u64;
    use MetricType::{Counter, Gauge};
    let families: [(&str, &str, MetricType, Get); 9] = [
        ("punctual_queue_received", "Messages handed out by receives", Counter, |q| {
            q.received.load(Relaxed)
        }),
        ("punctual_queue_acked", "Messages acknowledged", Counter, |q| {
            q.acked.load(Relaxed)
        }),
        ("punctual_queue_nacked", "Messages given back by a nack", Counter, |q| {
            q.nacked.load(Relaxed)
        }),
        (
            "punctual_queue_expired",
            "Leases that ended without an ack or a nack (the message is ready again, or a dead letter)",
            Counter,
            |q| q.expired.load(Relaxed),
        ),
        (
            "punctual_queue_dead_letters_made",
            "Messages that became dead letters: received queue_max_receives times, or ready past queue_retention_s",
            Counter,
            |q| q.dead.load(Relaxed),
        ),
        (
            "punctual_queue_receives_refused",
            "Receives refused 429 too_many_receives: queue_max_waiting were waiting already",
            Counter,
            |q| q.refused.load(Relaxed),
        ),
        ("punctual_queue_ready", "Messages ready to be received", Gauge, |q| {
            q.ready.load(Relaxed)
        }),
        (
            "punctual_queue_in_flight",
            "Messages received and not yet acknowledged (leased)",
            Gauge,
            |q| q.in_flight.load(Relaxed),
        ),
        (
            "punctual_queue_delayed",
            "Messages nacked with a delay or re-driven, not yet ready",
            Gauge,
            |q| q.delayed.load(Relaxed),
        ),
    ];
    for (name, help, kind, get) in families {
        let counter = matches!(kind, Counter);
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        for (tenant, q) in &rows {
            let labels = [("tenant", *tenant)];
            let mut sample = family.encode_family(&labels)?;
            if counter {
                sample.encode_counter::<(), _, u64>(&get(q), None)?;
            } else {
                sample.encode_gauge(&i64::try_from(get(q)).unwrap_or(i64::MAX))?;
            }
        }
    }
    let mut waiting = encoder.encode_descriptor(
        "punctual_queue_waiting_receives",
        "Receives waiting for messages now (at most queue_max_waiting)",
        None,
        MetricType::Gauge,
    )?;
    for (tenant, _) in &rows {
        let v = i64::from(queues.waiting(tenant));
        waiting
            .encode_family(&[("tenant", *tenant)])?
            .encode_gauge(&v)?;
    }
    let now_us = handle.now().0;
    let mut age = encoder.encode_descriptor(
        "punctual_queue_oldest_ready_age_seconds",
        "Age of the oldest ready message (0 with none ready)",
        None,
        MetricType::Gauge,
    )?;
    for (tenant, q) in &rows {
        let at = q.oldest_queued_at_us.load(Relaxed);
        let secs = if at == 0 || q.ready.load(Relaxed) == 0 {
            0.0
        } else {
            now_us.saturating_sub(at) as f64 / 1e6
        };
        age.encode_family(&[("tenant", *tenant)])?
            .encode_gauge(&secs)?;
    }
    Ok(())
}
