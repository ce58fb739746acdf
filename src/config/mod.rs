//! The service's configuration: one typed struct, [`Config`], loaded once at start from a TOML
//! file, `PUNCTUAL_*` environment variables and flags (flags win over the environment, the
//! environment over the file), validated once, with every default written below in
//! [`Config::default`]. A value that is wrong is reported with the key that holds it.

mod args;
mod webhooks;

pub use args::{ClusterArgs, ClusterCommand, JournalArgs, JournalCommand, ServeArgs};
pub use webhooks::WebhookConfig;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use thiserror::Error;

/// The shortest token or webhook secret accepted: 32 bytes, 256 bits, so that neither can be
/// guessed online or brute-forced offline from a signature.
pub const MIN_SECRET_BYTES: usize = 32;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("`{key}` = {value:?}: {reason} (set by flag --{flag}, env PUNCTUAL_{env}, or key `{key}` in the config file)", flag = .key.replace('_', "-"), env = .key.to_uppercase())]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
}

/// `[tenants.<name>]` in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Every call for this tenant then needs `Authorization: Bearer <token>` (at least
    /// [`MIN_SECRET_BYTES`] bytes).
    pub token: Option<String>,
    /// Requests a second this tenant may make, all shards together; more are answered
    /// `429 rate_limited` with `Retry-After`. Unset: no limit.
    pub max_requests_per_s: Option<u64>,
    /// Requests the tenant may make at once above its rate [default: `max_requests_per_s`].
    pub burst: Option<u64>,
    /// Quota of pending timers.
    pub max_pending: Option<u64>,
    /// The callback of a registration that names none.
    pub callback_url: Option<String>,
    /// URL prefixes this tenant's callbacks must start with (replaces the top-level list).
    pub callback_allow: Option<Vec<String>>,
    /// Networks this tenant's deliveries may reach beyond the public internet (replaces the
    /// top-level list).
    pub callback_allow_networks: Option<Vec<String>>,
    /// Signs this tenant's deliveries (at least [`MIN_SECRET_BYTES`]).
    pub webhook_secret: Option<String>,
    /// Several secrets, newest first: each delivery carries a signature for each, so that a
    /// receiver can roll its key (instead of `webhook_secret`).
    pub webhook_secrets: Option<Vec<String>>,
    /// `"punctual"` (`Punctual-Signature`, the default) or `"standard"` (Standard Webhooks,
    /// with `whsec_<base64>` secrets).
    pub webhook_signature: Option<String>,
    pub retry_max_attempts: Option<u64>,
    pub retry_base_delay_ms: Option<u64>,
    pub retry_max_delay_ms: Option<u64>,
    /// Callbacks accepted and delivered (default true).
    pub webhooks: Option<bool>,
    /// Fired timers written to the Redis Stream (default true).
    pub stream: Option<bool>,
}

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
    /// (`allkeys-*`), which it otherwise refuses (`cluster::preflight`).
    pub redis_allow_eviction: bool,
    /// `host:port` this node is reached at by other nodes of a Redis Cluster store (its id);
    /// checked and kept for the node's loop, which is not built yet.
    pub advertise: Option<String>,
    pub spin_us: u64,
    /// The spin window follows the measured wake-up latency, `spin_us` its ceiling.
    pub spin_adaptive: bool,
    pub ring_capacity: usize,
    pub shard_capacity: usize,
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
            spin_us: 100,
            spin_adaptive: false,
            ring_capacity: 65_536,
            shard_capacity: 10_000_000,
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
            tenants: BTreeMap::new(),
        }
    }
}

/// What the file may hold: the same keys, all optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    listen: Option<String>,
    shards: Option<u64>,
    cores: Option<Vec<u64>>,
    pinning: Option<String>,
    store: Option<String>,
    data_dir: Option<String>,
    fsync: Option<String>,
    journal_skip_corrupt: Option<bool>,
    page_horizon_s: Option<u64>,
    transparent_huge_pages: Option<bool>,
    redis: Option<String>,
    redis_wait_replicas: Option<u64>,
    redis_allow_eviction: Option<bool>,
    advertise: Option<String>,
    spin_us: Option<u64>,
    spin_adaptive: Option<bool>,
    ring_capacity: Option<u64>,
    shard_capacity: Option<u64>,
    max_connections: Option<u64>,
    max_connections_per_address: Option<u64>,
    max_connections_per_address_exempt: Option<Vec<String>>,
    max_header_bytes: Option<u64>,
    max_body_bytes: Option<u64>,
    max_batch_body_bytes: Option<u64>,
    idle_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    shutdown_timeout_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    bind_retry_ms: Option<u64>,
    callback_allow: Option<Vec<String>>,
    callback_allow_networks: Option<Vec<String>>,
    webhook_timeout_ms: Option<u64>,
    webhook_max_in_flight_per_host: Option<u64>,
    webhook_max_in_flight_per_tenant: Option<u64>,
    webhook_ca_file: Option<String>,
    retry_max_attempts: Option<u64>,
    retry_base_delay_ms: Option<u64>,
    retry_max_delay_ms: Option<u64>,
    open_tenants: Option<bool>,
    metrics_token: Option<String>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantConfig>,
}

impl FileConfig {
    pub fn parse(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::File {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }

    pub fn load(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, &shown)
    }
}

/// A Redis URL with its password replaced by `***`, for logs and `--print-config`.
pub use crate::store::redis::endpoint::mask_url;

fn invalid(key: &str, value: impl ToString, reason: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

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

mod resolve;
