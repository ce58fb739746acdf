//! The configuration file's model: what `punctual.toml` may hold ([`FileConfig`], every key
//! optional, unknown keys an error), a tenant's table in it ([`TenantConfig`]), and the error a
//! setting is reported with ([`ConfigError`]). Merging it with the environment and the flags
//! is `resolve.rs`; the typed result is `Config` (`mod.rs`). Apart from both so that the
//! files that read the model (`resolve.rs`, `webhooks.rs`) need not import the file that
//! holds their result.
//!
//! Cost: one TOML parse at start.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

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
    /// [`MIN_SECRET_BYTES`](super::MIN_SECRET_BYTES) bytes).
    pub token: Option<String>,
    /// Requests a second this tenant may make, all shards together; more are answered
    /// `429 rate_limited` with `Retry-After`. Unset: no limit.
    pub max_requests_per_s: Option<u64>,
    /// Requests the tenant may make at once above its rate [default: `max_requests_per_s`].
    pub burst: Option<u64>,
    /// Quota of pending timers.
    pub max_pending: Option<u64>,
    /// Quota of recurring schedules (replaces the top-level `max_schedules`).
    pub max_schedules: Option<u64>,
    /// The callback of a registration that names none.
    pub callback_url: Option<String>,
    /// URL prefixes this tenant's callbacks must start with (replaces the top-level list).
    pub callback_allow: Option<Vec<String>>,
    /// Networks this tenant's deliveries may reach beyond the public internet (replaces the
    /// top-level list).
    pub callback_allow_networks: Option<Vec<String>>,
    /// Signs this tenant's deliveries (at least [`MIN_SECRET_BYTES`](super::MIN_SECRET_BYTES)).
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
    /// A pull queue: this tenant's fired timers without a callback wait as messages until a
    /// consumer receives and acknowledges them (default false; the journal and memory stores).
    pub queue: Option<bool>,
    /// Receives of one message before it becomes a dead letter (default 10, 1 to 1,000).
    pub queue_max_receives: Option<u64>,
    /// Seconds a message stays ready without a receive before it becomes a dead letter
    /// (default: the top-level `queue_retention_s`).
    pub queue_retention_s: Option<u64>,
    /// Receives of this tenant that may wait for messages at once (default: the top-level
    /// `queue_max_waiting`); past it a receive that would wait is `429 too_many_receives`.
    pub queue_max_waiting: Option<u64>,
}

/// What the file may hold: the same keys, all optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub(super) listen: Option<String>,
    pub(super) shards: Option<u64>,
    pub(super) cores: Option<Vec<u64>>,
    pub(super) pinning: Option<String>,
    pub(super) store: Option<String>,
    pub(super) data_dir: Option<String>,
    pub(super) fsync: Option<String>,
    pub(super) journal_skip_corrupt: Option<bool>,
    pub(super) page_horizon_s: Option<u64>,
    pub(super) transparent_huge_pages: Option<bool>,
    pub(super) redis: Option<String>,
    pub(super) redis_wait_replicas: Option<u64>,
    pub(super) redis_allow_eviction: Option<bool>,
    pub(super) advertise: Option<String>,
    pub(super) cluster_secret: Option<String>,
    pub(super) spin_us: Option<u64>,
    pub(super) spin_adaptive: Option<bool>,
    pub(super) ring_capacity: Option<u64>,
    pub(super) shard_capacity: Option<u64>,
    pub(super) max_schedules: Option<u64>,
    pub(super) max_connections: Option<u64>,
    pub(super) max_connections_per_address: Option<u64>,
    pub(super) max_connections_per_address_exempt: Option<Vec<String>>,
    pub(super) max_header_bytes: Option<u64>,
    pub(super) max_body_bytes: Option<u64>,
    pub(super) max_batch_body_bytes: Option<u64>,
    pub(super) idle_timeout_ms: Option<u64>,
    pub(super) body_timeout_ms: Option<u64>,
    pub(super) shutdown_timeout_ms: Option<u64>,
    pub(super) shutdown_grace_ms: Option<u64>,
    pub(super) bind_retry_ms: Option<u64>,
    pub(super) callback_allow: Option<Vec<String>>,
    pub(super) callback_allow_networks: Option<Vec<String>>,
    pub(super) webhook_timeout_ms: Option<u64>,
    pub(super) webhook_max_in_flight_per_host: Option<u64>,
    pub(super) webhook_max_in_flight_per_tenant: Option<u64>,
    pub(super) webhook_ca_file: Option<String>,
    pub(super) retry_max_attempts: Option<u64>,
    pub(super) retry_base_delay_ms: Option<u64>,
    pub(super) retry_max_delay_ms: Option<u64>,
    pub(super) open_tenants: Option<bool>,
    pub(super) metrics_token: Option<String>,
    pub(super) queue_retention_s: Option<u64>,
    pub(super) queue_max_waiting: Option<u64>,
    pub(super) history_retention_s: Option<u64>,
    pub(super) history_max_per_tenant: Option<u64>,
    #[serde(default)]
    pub(super) tenants: BTreeMap<String, TenantConfig>,
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

pub(super) fn invalid(key: &str, value: impl ToString, reason: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}
