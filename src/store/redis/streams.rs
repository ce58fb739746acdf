//! `punctual_stream_length`: the length of every tenant's fired stream, sampled.
//!
//! Shard 0 runs this task (one per process is enough: the streams are shared). Every
//! [`PERIOD`] it lists the `punctual:fired:*` keys with `SCAN` (the keyspace holds only the
//! 1,024 partition hashes and the streams, so this is a few round trips) and asks `XLEN` of
//! each, on its own connection so that it never sits between the shard's writes and their
//! replies. The figures are published for exporters under a mutex that only this task and a
//! scrape take, never the shard's loop.
//!
//! Over a Redis Cluster the streams lie on every master: each period the slot map is read
//! again and each master is scanned on a connection of its own (a stream that a reshard moves
//! between two scans is counted once, at its longest).
//!
//! Trimming (`MAXLEN ~`) drops the oldest entries whether or not a consumer read them, so
//! this length has to stay well under the configured maximum.
//!
//! Bounded per tenant: the 64 longest streams ([`TENANT_SERIES`], as for the webhook series)
//! keep a series each and the rest show as one `tenant="other"` line, their longest; a
//! tenant's line goes when its stream does (each sample replaces the last).

use super::cluster::{ClusterClient, ClusterConfig};
use super::conn::Conn;
use super::endpoint::Endpoint;
use super::RedisLink;
use crate::metrics::{OTHER_TENANTS, TENANT_SERIES};
use redis::Value;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::time::Duration;

/// How often the lengths are sampled.
pub const PERIOD: Duration = Duration::from_secs(5);

pub(crate) async fn run(shared: Rc<RedisLink>) {
    if let Endpoint::Cluster(seeds) = &shared.endpoint {
        let cfg = shared.cfg.cluster(seeds);
        return run_cluster(&shared, cfg).await;
    }
    let mut conn: Option<Conn> = None;
    while !shared.closing.get() {
        if conn.is_none() {
            conn = super::endpoint::connect(&shared.endpoint, shared.cfg.io_timeout)
                .await
                .ok();
        }
        if let Some(c) = conn.as_mut() {
            match sample(c).await {
                Ok(lengths) => {
                    if let Ok(mut m) = shared.m().stream_lengths.lock() {
                        *m = lengths;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "store: stream lengths not sampled");
                    conn = None;
                }
            }
        }
        // Detached: it ends with the shard's executor; it never listens to the kicks that
        // are meant for the store task.
        glommio::timer::sleep(PERIOD).await;
    }
}

/// [`run`] over a Redis Cluster: every master sampled, each period.
async fn run_cluster(shared: &RedisLink, cfg: ClusterConfig) {
    let mut client: Option<ClusterClient> = None;
    while !shared.closing.get() {
        if client.is_none() {
            client = ClusterClient::connect(cfg.clone()).await.ok();
        }
        if let Some(c) = client.as_mut() {
            match sample_cluster(c, &cfg).await {
                Ok(lengths) => {
                    if let Ok(mut m) = shared.m().stream_lengths.lock() {
                        *m = lengths;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "store: stream lengths not sampled");
                    client = None;
                }
            }
        }
        glommio::timer::sleep(PERIOD).await;
    }
}

/// [`sample`] of every master the slot map names now.
async fn sample_cluster(
    client: &mut ClusterClient,
    cfg: &ClusterConfig,
) -> Result<Vec<(String, u64)>, String> {
    client.refresh().await.map_err(|e| e.to_string())?;
    let mut longest = Longest::default();
    for at in client.map().masters().to_vec() {
        let info = redis::ConnectionInfo {
            addr: redis::ConnectionAddr::Tcp(at.host.clone(), at.port),
            redis: cfg.redis.clone(),
        };
        let mut conn = Conn::connect(&info, cfg.io_timeout)
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        sample_into(&mut conn, &mut longest).await?;
    }
    Ok(longest.finish())
}

/// (tenant, XLEN) of the longest fired streams ([`Longest`]), one `SCAN` page at a time, so
/// that neither this task's memory nor the exposition grows with the number of tenants.
async fn sample(conn: &mut Conn) -> Result<Vec<(String, u64)>, String> {
    let mut longest = Longest::default();
    sample_into(conn, &mut longest).await?;
    Ok(longest.finish())
}

/// Adds the streams of the server `conn` is connected to to `longest`.
async fn sample_into(conn: &mut Conn, longest: &mut Longest) -> Result<(), String> {
    let mut cursor = b"0".to_vec();
    loop {
        redis::cmd("SCAN")
            .arg(&cursor[..])
            .arg("MATCH")
            .arg("punctual:fired:*")
            .arg("COUNT")
            .arg(1000)
            .write_packed_command(conn.out());
        let mut reply = conn.round_trip(1).await.map_err(|e| e.to_string())?;
        let Some(Value::Array(mut parts)) = reply.pop() else {
            return Err("unexpected SCAN reply".into());
        };
        let (Some(Value::Array(found)), Some(Value::BulkString(next))) = (parts.pop(), parts.pop())
        else {
            return Err("unexpected SCAN reply".into());
        };
        let keys: Vec<String> = found
            .into_iter()
            .filter_map(|k| match k {
                Value::BulkString(k) => String::from_utf8(k).ok(),
                _ => None,
            })
            .collect();
        for k in &keys {
            redis::cmd("XLEN").arg(k).write_packed_command(conn.out());
        }
        let lens = conn
            .round_trip(keys.len())
            .await
            .map_err(|e| e.to_string())?;
        for (k, v) in keys.iter().zip(lens) {
            let tenant = k
                .strip_prefix("punctual:fired:{")
                .and_then(|t| t.strip_suffix('}'));
            if let (Some(tenant), Value::Int(n)) = (tenant, v) {
                longest.add(tenant, n.max(0) as u64);
            }
        }
        cursor = next;
        if cursor == b"0" {
            break;
        }
    }
    Ok(())
}

/// The [`TENANT_SERIES`] longest streams by tenant, and the longest of the rest under
/// [`OTHER_TENANTS`]: a stream nearing its trim still shows, under `other` if need be, however
/// many tenants an open server has seen. (A tenant named `other` is folded into that line.)
#[derive(Default)]
struct Longest {
    /// The longest so far, shortest on top.
    top: BinaryHeap<Reverse<(u64, String)>>,
    other: Option<u64>,
}

impl Longest {
    fn add(&mut self, tenant: &str, len: u64) {
        if tenant == OTHER_TENANTS {
            self.fold(len);
            return;
        }
        // Seen already (a cluster's stream moved between two masters' scans): the longest.
        if let Some(Reverse((seen, _))) = self.top.iter().find(|Reverse((_, t))| t == tenant) {
            if *seen >= len {
                return;
            }
            self.top.retain(|Reverse((_, t))| t != tenant);
        }
        self.top.push(Reverse((len, tenant.to_string())));
        if self.top.len() > TENANT_SERIES {
            if let Some(Reverse((shortest, _))) = self.top.pop() {
                self.fold(shortest);
            }
        }
    }

    fn fold(&mut self, len: u64) {
        self.other = Some(self.other.map_or(len, |o| o.max(len)));
    }

    /// By tenant name, then `other` when it counts anyone.
    fn finish(self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .top
            .into_iter()
            .map(|Reverse((len, tenant))| (tenant, len))
            .collect();
        out.sort();
        out.extend(self.other.map(|len| (OTHER_TENANTS.to_string(), len)));
        out
    }
}

#[cfg(test)]
#[path = "streams_tests.rs"]
mod tests;
