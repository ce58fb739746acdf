//! How a shard's store reaches its Redis: one connection (`redis://`, `redis+sentinel://`) or
//! the cluster client (`redis+cluster://`), for the steps that work the same over both
//! (recovery's scans). The store task's writes differ: `flush` pipelines the outbox on one
//! connection, `clustered` routes it by slot.

use super::cluster::{ClusterClient, Routed};
use super::conn::Conn;
use super::endpoint::Endpoint;
use super::RedisLink;
use redis::Value;

pub(crate) enum Link {
    Single(Conn),
    Cluster(ClusterClient),
}

impl Link {
    /// Connects to where the store's endpoint says Redis is: for a cluster, a client with
    /// the slot map read from the first seed that answers.
    pub async fn connect(shared: &RedisLink) -> Result<Link, String> {
        match &shared.endpoint {
            Endpoint::Cluster(seeds) => ClusterClient::connect(shared.cfg.cluster(seeds))
                .await
                .map(Link::Cluster)
                .map_err(|e| e.to_string()),
            other => super::endpoint::connect(other, shared.cfg.io_timeout)
                .await
                .map(Link::Single)
                .map_err(|e| e.to_string()),
        }
    }

    /// Every command's reply, in order: one pipeline on the connection, or routed by slot
    /// (each command to its slot's master, redirects followed).
    pub async fn round(&mut self, commands: &[Routed]) -> Result<Vec<Value>, String> {
        match self {
            Link::Single(conn) => {
                for c in commands {
                    c.cmd.write_packed_command(conn.out());
                }
                conn.round_trip(commands.len())
                    .await
                    .map_err(|e| e.to_string())
            }
            Link::Cluster(client) => client.pipeline(commands).await.map_err(|e| e.to_string()),
        }
    }
}
