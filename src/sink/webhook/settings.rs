//! Webhook settings, built once at start and shared (read-only) by the API, which checks and
//! completes registrations, and by every shard's sink, which signs and delivers.
//!
//! # No open relay
//!
//! A callback URL is accepted only when it starts with one of its tenant's `callback_allow`
//! prefixes (tenants not listed use the top-level list), compared on normalised URLs
//! (`allow.rs`). Without a list, callbacks are refused. Every prefix must name a scheme, a
//! host and the `/` that ends the authority (`https://hooks.example.com/`), so a prefix can
//! never be extended into another host (`https://hooks.example.com.evil.net/`) or smuggle
//! credentials (`…@evil.net`). URLs with user information, a fragment, a dot segment or a
//! backslash are refused outright. Where a delivery may then connect is checked on every
//! resolved address (`address.rs`), against the tenant's `callback_allow_networks`.

use super::allow::AllowList;
use super::meta::{RetryPolicy, MAX_URL};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The sink's maps, keyed by host or tenant: foldhash with a random seed (the keys come from
/// clients' registrations, so a fixed seed would let them aim at one probe sequence).
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The defaults a registration without a `retry` gets (and the config's defaults).
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 5,
    base_delay_ms: 1_000,
    max_delay_ms: 60_000,
};

/// Bounds a retry policy must respect (400 `invalid_field` otherwise).
pub const MAX_ATTEMPTS: u32 = 100;
pub const MAX_DELAY_MS: u64 = 7 * 86_400_000;

/// One tenant's webhook settings.
#[derive(Clone, Debug, Default)]
pub struct TenantWebhooks {
    /// URL prefixes its callbacks must start with, and the networks they may reach; `None`:
    /// the top-level list applies.
    pub allow: Option<AllowList>,
    /// The callback of a registration that names none.
    pub default_url: Option<String>,
    /// The retry policy of a registration that gives none (fields it leaves out too).
    pub retry: Option<RetryPolicy>,
    /// Signs deliveries when set: the scheme and its secrets (`sign.rs`).
    pub signing: Option<super::sign::Signing>,
    /// Callbacks are accepted and delivered (default true).
    pub webhooks: bool,
}

/// Everything the webhook path needs, process-wide.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// A 2xx within this is success (default 5 s).
    pub timeout: Duration,
    /// At a stop, deliveries in flight may finish within this (default 5 s,
    /// `shutdown_grace_ms`); their outcomes are recorded like any other.
    pub shutdown_grace: Duration,
    /// Deliveries in flight per shard to one host (scheme, host, port) (default 64); more
    /// wait, counted, and are retried shortly (not lost, no attempt used).
    pub max_in_flight_per_host: u32,
    /// Deliveries in flight per shard for one tenant (default 256); same treatment.
    pub max_in_flight_per_tenant: u32,
    /// The top-level allow-list: for tenants without their own.
    pub allow: AllowList,
    /// The retry policy of tenants that set none.
    pub retry: RetryPolicy,
    pub tenants: HashMap<String, TenantWebhooks>,
    /// Trust anchors for https callbacks (Mozilla's roots, plus any configured CA).
    pub tls: Arc<rustls::ClientConfig>,
}

/// Why a callback was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    #[error("callback URL {0:?} is not allowed for this tenant (see callback_allow)")]
    NotAllowed(String),
    #[error("callback URL {url:?}: {reason}")]
    Invalid { url: String, reason: &'static str },
    #[error("webhooks are turned off for this tenant")]
    Off,
    #[error("retry: {0}")]
    Retry(String),
}

impl WebhookSettings {
    /// Settings with the documented defaults and no allow-list (every callback refused).
    pub fn new(tls: Arc<rustls::ClientConfig>) -> WebhookSettings {
        WebhookSettings {
            timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            max_in_flight_per_host: 64,
            max_in_flight_per_tenant: 256,
            allow: AllowList::default(),
            retry: DEFAULT_RETRY,
            tenants: HashMap::new(),
            tls,
        }
    }

    pub fn tenant(&self, tenant: &str) -> Option<&TenantWebhooks> {
        self.tenants.get(tenant)
    }

    /// Whether the tenant's webhooks are on (a tenant not listed: on).
    pub fn enabled(&self, tenant: &str) -> bool {
        self.tenant(tenant).is_none_or(|t| t.webhooks)
    }

    pub fn signing(&self, tenant: &str) -> Option<&super::sign::Signing> {
        self.tenant(tenant).and_then(|t| t.signing.as_ref())
    }

    /// The allow-list that applies to `tenant`.
    pub fn allow_list(&self, tenant: &str) -> &AllowList {
        match self.tenant(tenant).and_then(|t| t.allow.as_ref()) {
            Some(list) => list,
            None => &self.allow,
        }
    }

    /// The callback URL for a registration: the one given, else the tenant's default; checked
    /// against the tenant's allow-list. `Ok(None)`: no callback.
    pub fn callback_for(
        &self,
        tenant: &str,
        given: Option<&str>,
    ) -> Result<Option<String>, CallbackError> {
        let url = match given {
            Some(u) => u,
            None => match self.tenant(tenant).and_then(|t| t.default_url.as_deref()) {
                Some(u) => u,
                None => return Ok(None),
            },
        };
        if !self.enabled(tenant) {
            return Err(CallbackError::Off);
        }
        let invalid = |reason| CallbackError::Invalid {
            url: url.to_string(),
            reason,
        };
        if url.len() > MAX_URL {
            return Err(invalid("longer than 2,048 bytes"));
        }
        let parsed = super::allow::parse(url).map_err(invalid)?;
        if !self.allow_list(tenant).permits(&parsed) {
            return Err(CallbackError::NotAllowed(url.to_string()));
        }
        // Kept as normalised, so that the delivery requests what was checked.
        let normalised = parsed.as_str();
        Target::parse(normalised)?;
        Ok(Some(normalised.to_string()))
    }

    /// The retry policy for a registration: the fields given over the tenant's over the
    /// top-level defaults, then checked.
    pub fn retry_for(
        &self,
        tenant: &str,
        max_attempts: Option<u64>,
        base_delay_ms: Option<u64>,
        max_delay_ms: Option<u64>,
    ) -> Result<RetryPolicy, CallbackError> {
        let d = self
            .tenant(tenant)
            .and_then(|t| t.retry)
            .unwrap_or(self.retry);
        let attempts = max_attempts.unwrap_or(u64::from(d.max_attempts));
        let p = RetryPolicy {
            max_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            base_delay_ms: base_delay_ms.unwrap_or(d.base_delay_ms),
            max_delay_ms: max_delay_ms.unwrap_or(d.max_delay_ms),
        };
        check_retry(&p).map_err(CallbackError::Retry)?;
        Ok(p)
    }
}

/// Checks a retry policy against the documented bounds.
pub fn check_retry(p: &RetryPolicy) -> Result<(), String> {
    if !(1..=MAX_ATTEMPTS).contains(&p.max_attempts) {
        return Err(format!("max_attempts must be 1 to {MAX_ATTEMPTS}"));
    }
    if !(1..=MAX_DELAY_MS).contains(&p.base_delay_ms) {
        return Err(format!("base_delay_ms must be 1 to {MAX_DELAY_MS}"));
    }
    if !(p.base_delay_ms..=MAX_DELAY_MS).contains(&p.max_delay_ms) {
        return Err(format!(
            "max_delay_ms must be at least base_delay_ms and at most {MAX_DELAY_MS}"
        ));
    }
    Ok(())
}

/// Where a delivery goes: the connection pool's key, and the request's path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Parses a callback URL into its target and its path-and-query.
    pub fn parse(url: &str) -> Result<(Target, String), CallbackError> {
        let invalid = |reason| CallbackError::Invalid {
            url: url.to_string(),
            reason,
        };
        if url.len() > MAX_URL {
            return Err(invalid("longer than 2,048 bytes"));
        }
        if url.contains('#') {
            return Err(invalid("a fragment is not allowed"));
        }
        let uri: hyper::Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(invalid("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or(invalid("no host"))?;
        if authority.as_str().contains('@') {
            return Err(invalid("user information is not allowed"));
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok((Target { https, host, port }, path))
    }

    /// The `Host` header's value.
    pub fn host_header(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// A TLS client configuration with Mozilla's roots and the PEM certificates in `extra_ca`
/// (a private CA); the `ring` provider, TLS 1.2 and 1.3.
pub fn tls_config(extra_ca: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = extra_ca {
        use rustls_pki_types::pem::PemObject;
        let mut added = 0;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("CA file: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("CA file: a certificate was refused: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("CA file: no PEM certificate in it".into());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
