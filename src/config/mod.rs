//! The service's configuration: one typed struct, [`Config`], loaded once at start from a TOML
//! file, `PUNCTUAL_*` environment variables and flags (flags win over the environment, the
//! environment over the file), validated once, with every default written below in
//! [`Config::default`]. A value that is wrong is reported with the key that holds it.

mod args;
mod file;
mod webhooks;

pub use args::{ClusterArgs, ClusterCommand, JournalArgs, JournalCommand, ServeArgs};
pub use file::{ConfigError, FileConfig, TenantConfig};
pub use webhooks::WebhookConfig;

use file::invalid;

use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The shortest token or webhook secret accepted: 32 bytes, 256 bits, so that neither can be
/// guessed online or brute-forced offline from a signature.
pub const MIN_SECRET_BYTES: usize = 32;

/// How shards are placed on cores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PinningMode {
    Auto,
    None,
}

/// Which store makes timers durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreChoice {
    /// A journal per shard under `data_dir` (the default).
    Journal,
    /// Redis at `redis`.
    Redis,
    /// Nothing durable: pending timers are lost on exit.
    Memory,
}

/// When the journal acknowledges a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncMode {
    /// After `fdatasync`: survives a crash of the process or the machine.
    Always,
    /// After the write, with an `fdatasync` at least once a second: survives a crash of the
    /// process; a power cut loses at most about the last second.
    #[serde(rename = "everysec")]
    EverySec,
    /// After the write, synced only when a segment is sealed: survives a crash of the
    /// process; a power cut loses what the kernel had not written back.
    Never,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Config {
    pub listen: SocketAddr,
    pub shards: usize,
    pub cores: Option<Vec<usize>>,
    pub pinning: PinningMode,
    pub store: StoreChoice,
    pub data_dir: std::path::PathBuf,
    pub fsync: FsyncMode,
    pub journal_skip_corrupt: bool,
    /// Timers due further ahead than this are paged (the journal store; 0: none).
    pub page_horizon_s: u64,
    pub transparent_huge_pages: bool,
    pub redis: Option<String>,
    pub redis_wait_replicas: u32,
    /// Whether a node among others starts under a master's evicting `maxmemory-policy`
    /// (`allkeys-*`), which it otherwise refuses (`nodes::preflight`).
    pub redis_allow_eviction: bool,
    /// `host:port` this node is reached at by other nodes of a Redis Cluster store (its id);
    /// checked and kept for the node's loop, which is not built yet.
    pub advertise: Option<String>,
    /// The secret the nodes of a cluster share: a node counts only the records in Redis that
    /// prove it (`nodes::membership::prove`).
    pub cluster_secret: Option<String>,
    pub spin_us: u64,
    /// The spin window follows the measured wake-up latency, `spin_us` its ceiling.
    pub spin_adaptive: bool,
    pub ring_capacity: usize,
    pub shard_capacity: usize,
    /// Recurring schedules a tenant may hold unless its table says (`max_schedules`).
    pub max_schedules: u64,
    pub max_connections: usize,
    /// Open connections from one client address (an IPv6 client by its /64), all shards
    /// together; more are answered 503 and closed.
    pub max_connections_per_address: usize,
    /// Networks whose clients `max_connections_per_address` does not count (a proxy in
    /// front); none by default, loopback included.
    pub max_connections_per_address_exempt: Vec<String>,
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
    pub max_batch_body_bytes: usize,
    pub idle_timeout_ms: u64,
    pub body_timeout_ms: u64,
    pub shutdown_timeout_ms: u64,
    /// Webhook deliveries in flight at a stop may finish within this many ms.
    pub shutdown_grace_ms: u64,
    pub bind_retry_ms: u64,
    #[serde(flatten)]
    pub webhooks: WebhookConfig,
    /// With `[tenants.*]` tables configured, whether a tenant without one is still served.
    /// Without any table every tenant is open (the quick start).
    pub open_tenants: bool,
    /// `GET /metrics` then needs `Authorization: Bearer <metrics_token>`.
    pub metrics_token: Option<String>,
    /// Seconds a queued message stays ready before it becomes a dead letter, for tenants
    /// without their own `queue_retention_s`.
    pub queue_retention_s: u64,
    /// Receives that may wait at once per tenant, for tenants without their own
    /// `queue_max_waiting`.
    pub queue_max_waiting: u64,
    /// Seconds the history keeps an entry after its last event (0: no history).
    pub history_retention_s: u64,
    /// Entries of the history kept per tenant, at most.
    pub history_max_per_tenant: u64,
    pub tenants: BTreeMap<String, TenantConfig>,
}

impl Config {
    /// Whether a tenant without a `[tenants.<name>]` table is served: always when no table
    /// is configured, else only with `open_tenants = true`.
    pub fn serves_unlisted_tenants(&self) -> bool {
        self.tenants.is_empty() || self.open_tenants
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7480)),
            shards: crate::cpus::available_cores().len().max(1),
            cores: None,
            pinning: PinningMode::Auto,
            store: StoreChoice::Journal,
            data_dir: std::path::PathBuf::from("./punctual-data"),
            fsync: FsyncMode::Always,
            journal_skip_corrupt: false,
            page_horizon_s: 0,
            transparent_huge_pages: false,
            redis: None,
            redis_wait_replicas: 0,
            redis_allow_eviction: false,
            advertise: None,
            cluster_secret: None,
            spin_us: 100,
            spin_adaptive: false,
            ring_capacity: 65_536,
            shard_capacity: 10_000_000,
            // Unlike a timer, a schedule makes work for as long as it lives: at the shortest
            // period (1 s) 10,000 schedules are 10,000 fires a second for one tenant, a
            // shard's share of a busy node; and a creation counts the tenant's schedules
            // (`api/schedule_quota.rs`), O(this) once per new schedule.
            max_schedules: 10_000,
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_connections_per_address_exempt: Vec::new(),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 128 * 1024,
            max_batch_body_bytes: 16 * 1024 * 1024,
            idle_timeout_ms: 30_000,
            body_timeout_ms: 10_000,
            shutdown_timeout_ms: 10_000,
            shutdown_grace_ms: 5_000,
            bind_retry_ms: 5_000,
            webhooks: WebhookConfig::default(),
            open_tenants: false,
            metrics_token: None,
            queue_retention_s: crate::queue::DEFAULT_RETENTION.as_secs(),
            queue_max_waiting: crate::queue::DEFAULT_MAX_WAITING as u64,
            history_retention_s: 86_400,
            history_max_per_tenant: 10_000,
            tenants: BTreeMap::new(),
        }
    }
}

/// A Redis URL with its password replaced by `***`, for logs and `--print-config`.
pub use crate::store::redis::endpoint::mask_url;

/// A flag's (or env var's) text, else the file's value, parsed as `T`.
fn pick<T: std::str::FromStr>(
    key: &str,
    flag: &Option<String>,
    file: Option<T>,
) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match flag {
        Some(s) => s.trim().parse().map(Some).map_err(|e| invalid(key, s, e)),
        None => Ok(file),
    }
}

fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(key, v, format!("must be {lo} to {hi}")))
    }
}

/// Parses "0,1,4-6" into CPU ids.
pub fn parse_cores(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| t.trim().parse::<usize>().map_err(|e| format!("{t:?}: {e}"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 4096 {
                    return Err(format!("{part:?} is not a range low-high"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

mod merge;
