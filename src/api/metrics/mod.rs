//! `/metrics`: the engine's per-shard figures and the HTTP request metrics, rendered in the
//! Prometheus/OpenMetrics text format by `prometheus-client`.
//!
//! Engine and store figures are read at scrape time from [`Handle::stats`] and
//! [`Handle::store_metrics`] by a collector (nothing is copied on the hot path). Request
//! count and latency are per shard, route and status; each shard only touches its own label
//! sets, so the counters do not bounce between cores.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the registry and the HTTP request metrics |
//! | `collector.rs` | what a scrape encodes, in order |
//! | `families.rs` | the per-shard families: one shard's row, and each family's pick from it |
//! | `webhooks.rs` | the webhook families, per shard and tenant |
//! | `cluster.rs` | a node's partitions and lease events, on a Redis Cluster shared with other nodes |
//! | `gauges.rs` | the gauges with other labels: rings, store state, wheel levels, quotas, the resolver, streams |

mod cluster;
mod collector;
mod families;
mod gauges;
mod webhooks;

use super::forward::ForwardStats;
use crate::cluster::node::Holdings;
use crate::engine::Handle;
use collector::EngineCollector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
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
    /// `node`: on a node that shares a Redis Cluster, its leases (`cluster.rs`), and
    /// `forwards`, what it forwarded to the others.
    pub fn new(
        handle: Handle,
        store: &'static str,
        node: Option<Arc<Holdings>>,
        forwards: Arc<ForwardStats>,
    ) -> Self {
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
        if node.is_some() {
            registry.register(
                "punctual_cluster_forward_duration_seconds",
                "Time a forward to the node that owns a request's partition took, connect and answer, for those answered",
                forwards.latency.clone(),
            );
        }
        registry.register_collector(Box::new(EngineCollector {
            handle,
            store,
            node,
            forwards,
        }));
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
