//! The webhook keys of the configuration (file only): the top-level ones below, and per tenant
//! `callback_url`, `callback_allow`, `webhook_secret`, `retry_*`, `webhooks` and `stream` in
//! `[tenants.<name>]` (`TenantConfig`).
//!
//! ```toml
//! callback_allow = ["https://hooks.example.com/"]   # tenants not listed below
//! callback_allow_networks = ["10.1.0.0/16"]        # internal targets deliveries may reach
//! webhook_timeout_ms = 5000
//! retry_max_attempts = 5
//!
//! [tenants.shop]
//! callback_allow = ["https://shop.example.com/hooks/"]
//! callback_url = "https://shop.example.com/hooks/timers"
//! webhook_secret = "…"
//! stream = false          # webhooks only, no Redis Stream entry
//! ```

use super::file::{invalid, ConfigError, FileConfig, TenantConfig};
use crate::sink::webhook::address::parse_networks;
use crate::sink::webhook::allow::{self, check_allow_prefix, AllowList};
use crate::sink::webhook::settings::{check_retry, DEFAULT_RETRY};
use crate::sink::webhook::sign::{Scheme, Signing};
use crate::sink::webhook::RetryPolicy;
use serde::Serialize;

/// The top-level webhook settings, defaults written in `Default`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookConfig {
    /// URL prefixes callbacks must start with, for tenants without their own list. Empty:
    /// callbacks are refused (`400 callback_not_allowed`).
    pub callback_allow: Vec<String>,
    /// Networks deliveries may reach beyond the public internet (loopback, private,
    /// link-local… are refused otherwise), for tenants without their own list.
    pub callback_allow_networks: Vec<String>,
    /// A 2xx within this many ms is success [default: 5000].
    pub webhook_timeout_ms: u64,
    /// Deliveries in flight per shard to one host [default: 64].
    pub webhook_max_in_flight_per_host: u64,
    /// Deliveries in flight per shard for one tenant [default: 256].
    pub webhook_max_in_flight_per_tenant: u64,
    /// A PEM file of extra trust anchors for https callbacks (a private CA).
    pub webhook_ca_file: Option<String>,
    pub retry_max_attempts: u64,
    pub retry_base_delay_ms: u64,
    pub retry_max_delay_ms: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            callback_allow: Vec::new(),
            callback_allow_networks: Vec::new(),
            webhook_timeout_ms: 5_000,
            webhook_max_in_flight_per_host: 64,
            webhook_max_in_flight_per_tenant: 256,
            webhook_ca_file: None,
            retry_max_attempts: u64::from(DEFAULT_RETRY.max_attempts),
            retry_base_delay_ms: DEFAULT_RETRY.base_delay_ms,
            retry_max_delay_ms: DEFAULT_RETRY.max_delay_ms,
        }
    }
}

impl WebhookConfig {
    pub(super) fn resolve(file: &FileConfig) -> Result<WebhookConfig, ConfigError> {
        let d = WebhookConfig::default();
        let in_range = |key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
            let v = v.unwrap_or(default);
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(invalid(key, v, format!("must be {lo} to {hi}")))
            }
        };
        let w = WebhookConfig {
            callback_allow: file.callback_allow.clone().unwrap_or_default(),
            callback_allow_networks: file.callback_allow_networks.clone().unwrap_or_default(),
            webhook_timeout_ms: in_range(
                "webhook_timeout_ms",
                file.webhook_timeout_ms,
                d.webhook_timeout_ms,
                1,
                600_000,
            )?,
            webhook_max_in_flight_per_host: in_range(
                "webhook_max_in_flight_per_host",
                file.webhook_max_in_flight_per_host,
                d.webhook_max_in_flight_per_host,
                1,
                1 << 20,
            )?,
            webhook_max_in_flight_per_tenant: in_range(
                "webhook_max_in_flight_per_tenant",
                file.webhook_max_in_flight_per_tenant,
                d.webhook_max_in_flight_per_tenant,
                1,
                1 << 20,
            )?,
            webhook_ca_file: file.webhook_ca_file.clone(),
            retry_max_attempts: file.retry_max_attempts.unwrap_or(d.retry_max_attempts),
            retry_base_delay_ms: file.retry_base_delay_ms.unwrap_or(d.retry_base_delay_ms),
            retry_max_delay_ms: file.retry_max_delay_ms.unwrap_or(d.retry_max_delay_ms),
        };
        check_prefixes("callback_allow", &w.callback_allow)?;
        check_networks("callback_allow_networks", &w.callback_allow_networks)?;
        check_retry(&w.retry()).map_err(|e| invalid("retry_max_attempts", "…", e))?;
        for (name, t) in &file.tenants {
            let key = |k: &str| format!("tenants.{name}.{k}");
            if let Some(list) = &t.callback_allow {
                check_prefixes(&key("callback_allow"), list)?;
            }
            if let Some(list) = &t.callback_allow_networks {
                check_networks(&key("callback_allow_networks"), list)?;
            }
            if let Some(p) = w.tenant_retry(t) {
                check_retry(&p).map_err(|e| invalid(&key("retry_max_attempts"), "…", e))?;
            }
            t.signing().map_err(|(k, e)| invalid(&key(k), "***", e))?;
            if let Some(url) = &t.callback_url {
                let list = t.callback_allow.as_ref().unwrap_or(&w.callback_allow);
                let allowed = AllowList::new(list, &[])
                    .map_err(|e| invalid(&key("callback_allow"), "…", e))?;
                let parsed =
                    allow::parse(url).map_err(|e| invalid(&key("callback_url"), url, e))?;
                if !allowed.permits(&parsed) {
                    return Err(invalid(
                        &key("callback_url"),
                        url,
                        "is not allowed by the tenant's callback_allow",
                    ));
                }
            }
        }
        Ok(w)
    }

    /// The top-level retry policy.
    pub fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: u32::try_from(self.retry_max_attempts).unwrap_or(u32::MAX),
            base_delay_ms: self.retry_base_delay_ms,
            max_delay_ms: self.retry_max_delay_ms,
        }
    }

    /// A tenant's retry policy, when it sets any of its fields (the rest from the top level).
    pub fn tenant_retry(&self, t: &TenantConfig) -> Option<RetryPolicy> {
        if t.retry_max_attempts.is_none()
            && t.retry_base_delay_ms.is_none()
            && t.retry_max_delay_ms.is_none()
        {
            return None;
        }
        let d = self.retry();
        Some(RetryPolicy {
            max_attempts: t
                .retry_max_attempts
                .map_or(d.max_attempts, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            base_delay_ms: t.retry_base_delay_ms.unwrap_or(d.base_delay_ms),
            max_delay_ms: t.retry_max_delay_ms.unwrap_or(d.max_delay_ms),
        })
    }
}

fn check_prefixes(key: &str, list: &[String]) -> Result<(), ConfigError> {
    for p in list {
        check_allow_prefix(p).map_err(|e| invalid(key, p, e))?;
        AllowList::new(std::slice::from_ref(p), &[]).map_err(|e| invalid(key, p, e))?;
    }
    Ok(())
}

fn check_networks(key: &str, list: &[String]) -> Result<(), ConfigError> {
    parse_networks(list)
        .map(|_| ())
        .map_err(|e| invalid(key, "…", e))
}

impl TenantConfig {
    /// The tenant's signing from `webhook_secret` or `webhook_secrets` and
    /// `webhook_signature`; `None` without a secret. An error names the key at fault.
    pub fn signing(&self) -> Result<Option<Signing>, (&'static str, String)> {
        let scheme = match self.webhook_signature.as_deref() {
            None | Some("punctual") => Scheme::Punctual,
            Some("standard") => Scheme::Standard,
            Some(_) => {
                return Err((
                    "webhook_signature",
                    "must be \"punctual\" or \"standard\"".into(),
                ))
            }
        };
        let secrets = match (&self.webhook_secret, &self.webhook_secrets) {
            (Some(_), Some(_)) => {
                return Err((
                    "webhook_secrets",
                    "give webhook_secret or webhook_secrets, not both".into(),
                ))
            }
            (Some(one), None) => std::slice::from_ref(one),
            (None, Some(list)) if list.is_empty() => {
                return Err(("webhook_secrets", "must hold at least one secret".into()))
            }
            (None, Some(list)) => list.as_slice(),
            (None, None) if self.webhook_signature.is_some() => {
                return Err((
                    "webhook_signature",
                    "needs webhook_secret or webhook_secrets".into(),
                ))
            }
            (None, None) => return Ok(None),
        };
        let key = if self.webhook_secrets.is_some() {
            "webhook_secrets"
        } else {
            "webhook_secret"
        };
        Signing::new(scheme, secrets)
            .map(Some)
            .map_err(|e| (key, e))
    }
}
