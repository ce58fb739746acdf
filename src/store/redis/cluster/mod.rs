//! Redis Cluster for the Redis store: the slot of a key (`slot`), which master serves each
//! slot (`map`), `MOVED` and `ASK` (`redirect`), and a client that routes commands by slot
//! over the store's own glommio connections and follows the cluster as it changes
//! (`client`).
//!
//! ```text
//! redis+cluster://[user:password@]host:port[,host:port…]/
//! ```
//!
//! The hosts are seeds: any node of the cluster, asked for the slot map when no master the
//! client knows answers. The layout needs nothing new: every key of partition N carries the
//! hash tag `{p<N>}`, so a partition is one slot and a script may touch all its keys.
//!
//! A `redis+cluster://` store runs its writes, recovery and stream sampling through the client
//! (`store::redis::clustered`); a `redis://` or `redis+sentinel://` store connects as before
//! (`endpoint`). See `docs/SCALING.md` for how the cluster client, the partition leases
//! (`crate::nodes`) and the fenced writes (`fence`) fit together, and what is not built yet.

pub mod client;
pub mod fence;
pub mod map;
pub mod redirect;
pub mod slot;

pub use client::{ClusterClient, ClusterConfig, ClusterError, ClusterStats, Routed, Sent};
pub use map::{Addr, SlotMap};

/// The URL scheme for a Redis Cluster.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The seeds and credentials of a `redis+cluster://` URL; the error says what is wrong.
pub fn parse_url(url: &str) -> Result<ClusterConfig, String> {
    let rest = url
        .strip_prefix(CLUSTER_SCHEME)
        .ok_or_else(|| format!("a cluster URL starts with {CLUSTER_SCHEME}"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path.is_empty() {
        return Err(format!(
            "a cluster URL ends after its hosts (a cluster has database 0 only), not /{path}"
        ));
    }
    let (hosts, redis) = super::authority::parse(authority, "cluster node")?;
    let seeds = hosts
        .into_iter()
        .map(|(host, port)| Addr { host, port })
        .collect();
    Ok(ClusterConfig::new(seeds, redis))
}

#[cfg(test)]
mod tests;
