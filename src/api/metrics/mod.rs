//! `/metrics`: the engine's per-shard figures and the HTTP request metrics, rendered in the
//! Prometheus/OpenMetrics text format by `prometheus-client`.
//!
//! Engine and store figures are read at scrape time from [`Handle::stats`] and
//! [`Handle::store_metrics`] by a collector (nothing is copied on the hot path). Request
//! count and latency are per shard, route and status; each shard only touches its own label
//! sets, so the counters do not bounce between cores.
//!
//! A scrape is rendered on a thread of its own (`punctual-metrics`, on the cores no shard is
//! pinned to when there are any), not on the shard whose connection asked: the exposition
//! grows with shards and tenants (the webhook families are per shard and tenant, up to 64
//! tenants a shard), and its encoding was one step of milliseconds on that shard's thread at
//! every scrape, holding back every timer due there. The shard hands the thread a reply
//! channel and waits for the text like any other answer. At most [`WAITING_SCRAPES`] wait at
//! once; beyond them a scrape is answered `503 overloaded`, so a flood of scrapes cannot
//! queue without bound.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the registry and the HTTP request metrics |
//! | `collector.rs` | what a scrape encodes, in order |
//! | `families.rs` | the per-shard families: one shard's row, and each family's pick from it |
//! | `webhooks.rs` | the webhook families, per shard and tenant |
//! | `queues.rs` | the pull queues' families, per tenant (their gauges counted by the scrape) |
//! | `cluster.rs` | a node's partitions and lease events, on a Redis Cluster shared with other nodes |
//! | `gauges.rs` | the gauges with other labels: rings, store state, wheel levels, quotas, the resolver, streams |

mod cluster;
mod collector;
mod families;
mod gauges;
mod queues;
mod webhooks;

use super::forward::ForwardStats;
use crate::engine::Handle;
use crate::nodes::node::Holdings;
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

/// Scrapes that may wait for the render thread at once, the one being rendered included.
pub const WAITING_SCRAPES: usize = 4;

/// Everything `/metrics` serves. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    /// Asked for the pull queues' counts before each render (`queues.rs`).
    handle: Handle,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    renderer: Renderer,
}

/// Why a scrape got no text.
#[derive(Debug, PartialEq, Eq)]
pub enum ScrapeRefused {
    /// [`WAITING_SCRAPES`] are waiting already.
    Busy,
    /// The render thread is gone (it could not start, or it panicked).
    Gone,
}

fn latency_histogram() -> Histogram {
    // 10 µs to ~1.3 s in powers of 2.
    Histogram::new(exponential_buckets(1e-5, 2.0, 18))
}

impl Metrics {
    /// `store` ("journal", "memory" or "redis") goes into `punctual_build_info`.
    /// `node`: on a node that shares a Redis Cluster, its leases (`cluster.rs`), and
    /// `forwards`, what it forwarded to the others. `bulk`: bulk actions started and the
    /// timers they cancelled (`api/bulk.rs`).
    pub fn new(
        handle: Handle,
        store: &'static str,
        node: Option<Arc<Holdings>>,
        forwards: Arc<ForwardStats>,
        bulk: [Counter; 2],
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
        let [started, cancelled] = bulk;
        registry.register(
            "punctual_bulk_actions",
            "Bulk cancels started (DELETE /v1/timers/{tenant}?prefix=)",
            started,
        );
        registry.register(
            "punctual_bulk_cancelled",
            "Timers cancelled by bulk cancels",
            cancelled,
        );
        if node.is_some() {
            registry.register(
                "punctual_cluster_forward_duration_seconds",
                "Time a forward to the node that owns a request's partition took, connect and answer, for those answered",
                forwards.latency.clone(),
            );
        }
        registry.register_collector(Box::new(EngineCollector {
            handle: handle.clone(),
            store,
            node,
            forwards,
        }));
        Metrics {
            renderer: Renderer::start(Arc::new(registry)),
            handle,
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

    /// The text exposition, rendered on the render thread; the caller's thread only waits
    /// (through its executor's doorbell, when it has one).
    pub async fn scrape(&self) -> Result<String, ScrapeRefused> {
        queues::count_queues(&self.handle).await;
        self.renderer.scrape().await
    }
}

/// The thread that renders scrapes, and the way to it. The thread ends once every clone of
/// this is gone.
#[derive(Clone)]
struct Renderer {
    /// Where to send each scrape's text.
    scrapes: std::sync::mpsc::SyncSender<futures_channel::oneshot::Sender<String>>,
}

impl Renderer {
    /// Starts the thread, on the cores no shard is pinned to (a thread started from a pinned
    /// shard would inherit that shard's core). A thread that cannot start is logged, and every
    /// scrape is then refused.
    fn start(registry: Arc<Registry>) -> Renderer {
        let (scrapes, rx) = std::sync::mpsc::sync_channel::<futures_channel::oneshot::Sender<String>>(
            WAITING_SCRAPES - 1,
        );
        let started = std::thread::Builder::new()
            .name("punctual-metrics".into())
            .spawn(move || {
                let cores = crate::cpus::off_shard_cores();
                if let Err(e) = crate::cpus::pin_current_thread(&cores) {
                    tracing::warn!(error = %e, "metrics: could not move the render thread off the shards' cores");
                }
                for reply in rx {
                    if !reply.is_canceled() {
                        let _ = reply.send(render(&registry));
                    }
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "metrics: the render thread did not start; /metrics answers 500");
        }
        Renderer { scrapes }
    }

    async fn scrape(&self) -> Result<String, ScrapeRefused> {
        use std::sync::mpsc::TrySendError;
        let (tx, rx) = futures_channel::oneshot::channel();
        match self.scrapes.try_send(tx) {
            Ok(()) => crate::runtime::doorbell::relay(rx)
                .await
                .map_err(|_| ScrapeRefused::Gone),
            Err(TrySendError::Full(_)) => Err(ScrapeRefused::Busy),
            Err(TrySendError::Disconnected(_)) => Err(ScrapeRefused::Gone),
        }
    }
}

fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(16 * 1024);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!("rendering metrics failed: {e}");
    }
    out
}

#[cfg(test)]
mod tests;
