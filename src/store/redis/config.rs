//! How the Redis store talks to Redis: [`RedisConfig`], loaded once (`punctual serve` fills
//! it from its configuration), validated once on the caller's thread, with its defaults
//! written in [`RedisConfig::new`].

use super::cluster::ClusterConfig;
use super::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::store::durable::Limits;
use std::time::Duration;

/// How the store talks to Redis. Defaults are written in [`RedisConfig::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`,
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]` for the
    /// master that Redis Sentinel names, or `redis+cluster://[user:password@]host:port[,…]/`
    /// for a Redis Cluster (see `endpoint`).
    pub url: String,
    /// Longest a write waits in the outbox before its pipeline is sent (default 1 ms).
    pub flush_interval: Duration,
    /// A pipeline is sent as soon as this many writes wait (default 4,096).
    pub flush_max_commands: usize,
    /// Writes the outbox holds before durable registrations are refused (default 100,000).
    pub max_buffered: usize,
    /// Fires the outbox holds before the shard stops firing (default 100,000). While Redis is
    /// unreachable, a fired timer's stream entry waits in the outbox; at this bound the shard
    /// holds further due timers in its wheel (their records stay in Redis) and fires them,
    /// late but not lost, once Redis takes the backlog. Memory stays bounded by both limits.
    pub max_buffered_fires: usize,
    /// Longest a durable schedule or cancel waits for Redis before `StoreUnavailable` (2 s).
    pub ack_timeout: Duration,
    /// `MAXLEN ~` of each tenant's fired stream (default 1,000,000).
    pub stream_maxlen: u64,
    /// `COUNT` of each recovery `HSCAN` (default 1,000).
    pub recovery_page: usize,
    /// Tenants whose fired timers get no stream entry (webhooks only; default none).
    pub streams_off: std::collections::BTreeSet<String>,
    /// Connect and I/O timeout of one attempt (default 1 s).
    pub io_timeout: Duration,
    /// Longest pause between reconnect attempts (default 1 s; they start at 10 ms).
    pub backoff_max: Duration,
    /// Replicas that must hold a write before it is acknowledged (default 0: the master's
    /// word is enough). Above 0, each pipeline ends with `WAIT n`, and a write is answered
    /// only once `n` replicas have it, so an acknowledged timer survives the loss of the
    /// master. See `flush` for what happens while too few replicas answer.
    pub wait_replicas: u32,
    /// On a node among others: start even under a master's `allkeys-*` maxmemory-policy
    /// (default false: refused, `nodes::preflight`).
    pub allow_eviction: bool,
}

impl RedisConfig {
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            flush_interval: Duration::from_millis(1),
            flush_max_commands: 4096,
            max_buffered: 100_000,
            max_buffered_fires: 100_000,
            ack_timeout: Duration::from_secs(2),
            stream_maxlen: 1_000_000,
            recovery_page: 1000,
            streams_off: Default::default(),
            io_timeout: Duration::from_secs(1),
            backoff_max: Duration::from_secs(1),
            wait_replicas: 0,
            allow_eviction: false,
        }
    }

    /// Whether the URL names a Redis Cluster (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        self.url.starts_with(super::cluster::CLUSTER_SCHEME)
    }

    /// The parsed URL; an error names what is wrong with it.
    pub fn endpoint(&self) -> Result<Endpoint> {
        Endpoint::parse(&self.url).map_err(|e| {
            let masked = super::endpoint::shown(&self.url);
            Error::Config(super::endpoint::scrub(
                &format!("redis URL {masked:?}: {e}"),
                &self.url,
            ))
        })
    }

    pub(crate) fn validate(&self) -> Result<Endpoint> {
        if self.flush_max_commands == 0
            || self.max_buffered == 0
            || self.max_buffered_fires == 0
            || self.recovery_page == 0
        {
            return Err(Error::Config(
                "store: flush_max_commands, max_buffered, max_buffered_fires and recovery_page must be positive".into(),
            ));
        }
        self.endpoint()
    }

    /// The cluster client's settings for this store: the URL's seeds and credentials, the
    /// store's I/O timeout and replicas to wait for, and calls that give up after about an ack
    /// timeout (at least a second), so that the store task comes back to its outbox, answers
    /// callers and backs off rather than sit in one call while a master is away.
    pub(crate) fn cluster(&self, seeds: &ClusterConfig) -> ClusterConfig {
        ClusterConfig {
            io_timeout: self.io_timeout,
            retry_for: self.ack_timeout.max(Duration::from_secs(1)),
            wait_replicas: self.wait_replicas,
            ..seeds.clone()
        }
    }

    /// The outbox's bounds and what a refused or timed-out caller is told: a refused write
    /// may come back after one reconnect step.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_buffered: self.max_buffered,
            max_buffered_fires: self.max_buffered_fires,
            ack_timeout: self.ack_timeout,
            retry_after_s: self.backoff_max.as_secs().max(1),
        }
    }
}
