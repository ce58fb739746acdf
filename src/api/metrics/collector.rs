//! The collector a scrape runs: it reads the engine's figures at that moment (nothing is
//! copied on the hot path) and encodes every family in a fixed order: the per-shard
//! families, webhooks, the queues, the resolver, the labelled gauges, the streams, the build.

use super::cluster::{encode_cluster, encode_forwards};
use super::families::{encode_families, rows, ENGINE_FAMILIES, STORE_FAMILIES};
use super::gauges::{encode_gauges, encode_resolver, encode_streams};
use super::queues::encode_queues;
use super::webhooks::encode_webhooks;
use crate::api::forward::ForwardStats;
use crate::engine::Handle;
use crate::nodes::node::Holdings;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::Arc;

pub(super) struct EngineCollector {
    pub handle: Handle,
    pub store: &'static str,
    pub node: Option<Arc<Holdings>>,
    pub forwards: Arc<ForwardStats>,
}

impl std::fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineCollector")
    }
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = rows(&self.handle);
        let families = ENGINE_FAMILIES.into_iter().chain(STORE_FAMILIES);
        encode_families(families, &rows, &mut encoder)?;
        encode_webhooks(&self.handle, &mut encoder)?;
        encode_queues(&self.handle, &mut encoder)?;
        encode_resolver(&mut encoder)?;
        encode_gauges(&self.handle, &mut encoder)?;
        encode_streams(&self.handle, &mut encoder)?;
        if let Some(node) = &self.node {
            encode_cluster(node, &self.handle, &mut encoder)?;
            encode_forwards(&self.forwards, &mut encoder)?;
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
