//! Starting a node: the loop's thread (`punctual-node`) and its glommio executor, with the
//! services that run beside the loop on it (the reader of gained partitions, `reader`; the
//! sweep of the relays, `sweep`; the read of the cluster's state for `GET /cluster`,
//! `status`), and for `serve` the node's record and the preflight of the Redis Cluster
//! (`preflight`) before any of it. What the loop does once running is `node.rs`; this file
//! only puts it and its neighbours on a thread and ends them together at `stop`.

use super::holdings::Holdings;
use super::membership::NodeRecord;
use super::node::{run, NodeConfig};
use super::preflight;
use super::reader::{Reader, Shards};
use super::status::Status;
use super::sweep;
use crate::store::redis::cluster::{parse_url, ClusterConfig};
use crate::store::redis::RedisConfig;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Starts the loop on a thread of its own (see the module doc) with a cluster client made
/// from `cluster` (its `retry_for` set to one round), and beside it the reader that loads
/// gained partitions into `shards` (`reader`), the sweep of the relays (`sweep`) and the service that reads the cluster's state
/// for `GET /cluster` (`status`, its own client). On `stop` it releases what it holds and
/// leaves the live set, so the others need not wait a TTL.
pub fn spawn(
    cluster: ClusterConfig,
    cfg: NodeConfig,
    holdings: Arc<Holdings>,
    shards: Arc<dyn Shards>,
    status: Arc<Status>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("punctual-node".into())
        .spawn(move || {
            let ex = match glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).make()
            {
                Ok(ex) => ex,
                Err(e) => {
                    tracing::error!(error = %e, "node: cannot make the loop's executor; this node holds no partition");
                    return;
                }
            };
            ex.run(async move {
                let (reader, queue) = Reader::reporting(&*shards, &holdings.loading);
                let rounds = ClusterConfig {
                    retry_for: cfg.round,
                    ..cluster.clone()
                };
                // The loop ends at `stop` (after telling every loss); the reader and the status
                // service go with it.
                futures_lite::future::or(
                    run(rounds, &cfg, &holdings, &reader, &stop),
                    futures_lite::future::or(
                        reader.serve(cluster.clone(), queue),
                        futures_lite::future::or(
                            sweep::serve(cluster.clone(), &holdings),
                            status.serve(cluster),
                        ),
                    ),
                )
                .await;
            });
        })
}

/// [`spawn`] for a service whose store is on the Redis Cluster `redis` names
/// (`redis+cluster://…`), as the node advertised at `advertise`, with the default rounds and
/// leases; the cluster client takes the store's credentials, I/O timeout and replicas to wait
/// for. Under the cluster's `secret` its record proves it and only records that do count;
/// without one, every record in Redis is trusted (said at start). The error says what is wrong.
pub fn spawn_for(
    redis: &RedisConfig,
    advertise: &str,
    secret: Option<&str>,
    holdings: Arc<Holdings>,
    shards: Arc<dyn Shards>,
    status: Arc<Status>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let seeds = parse_url(&redis.url).map_err(|e| format!("redis URL: {e}"))?;
    check_redis(redis)?;
    let started_at_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let me = NodeRecord {
        id: advertise.to_string(),
        advertise: advertise.to_string(),
        started_at_us,
        proof: None,
    };
    let cfg = match secret {
        Some(s) => NodeConfig::new(me).with_secret(s.as_bytes()),
        None => {
            tracing::warn!("node: no cluster_secret: every node record in Redis is trusted, and anyone who can write to it can add a node that receives forwarded requests and their tokens (set cluster_secret on every node)");
            NodeConfig::new(me)
        }
    };
    spawn(redis.cluster(&seeds), cfg, holdings, shards, status, stop)
        .map_err(|e| format!("cannot start the node's loop: {e}"))
}

/// The preflight of the cluster (`preflight`): its warnings logged, an evicting policy refused
/// unless allowed. A cluster that cannot be listed yet is left to the loop, which waits for it.
fn check_redis(redis: &RedisConfig) -> Result<(), String> {
    let masters = match preflight::read(redis) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %crate::store::redis::endpoint::scrub(&e, &redis.url), "node: the cluster's masters could not be listed at start; maxmemory-policy and replicas not checked");
            return Ok(());
        }
    };
    let verdict = preflight::judge(&masters, redis.wait_replicas, redis.allow_eviction);
    for w in &verdict.warnings {
        tracing::warn!("{w}");
    }
    verdict.refuse.map_or(Ok(()), Err)
}
