//! Who may call for a tenant, and how often: the tenant table from the configuration.
//!
//! A request for a tenant passes three checks, in this order, before its body is read:
//!
//! | check | refused with | when |
//! |---|---|---|
//! | the tenant is known | `401 unknown_tenant` | `[tenants.*]` tables are configured, this tenant has none, and `open_tenants` is off |
//! | its bearer token | `401 unauthorized` | the tenant has a `token` and the request does not carry it |
//! | its request rate | `429 rate_limited` + `Retry-After` | the tenant has `max_requests_per_s` and used up its burst |
//!
//! The token is checked before the rate, so a caller without the token cannot spend a
//! tenant's budget. Every request counts once against the rate (a batch too: its size is
//! bounded by `max_batch_body_bytes`, and the timers it holds by the quota).
//!
//! The rate limiter is `governor`'s GCRA: one atomic word per tenant, shared by every
//! shard's server, so the limit holds for the process whichever shard accepted the
//! connection; a check is one compare-and-swap and never blocks.
//!
//! Quotas of pending timers are the engine's (`quota`): the shards count what they hold, and
//! the handlers only take a slot first so that a batch is refused in item order
//! (`Handle::quota`, `Handle::schedule_holding`). The table is built once at start and only
//! read afterwards.

use super::error::ApiError;
use crate::config::TenantConfig;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
// Constant time: the time a comparison takes does not tell how much of a guess was right.
use subtle::ConstantTimeEq;

struct Tenant {
    token: Option<String>,
    limiter: Option<DefaultDirectRateLimiter>,
}

/// The configured tenants, and whether others are served.
#[derive(Clone)]
pub struct Tenants {
    table: Arc<HashMap<String, Tenant>>,
    serve_unlisted: bool,
    clock: DefaultClock,
}

impl Default for Tenants {
    /// No table: every tenant is open.
    fn default() -> Self {
        Tenants::new(&BTreeMap::new(), true)
    }
}

impl Tenants {
    /// `serve_unlisted`: whether a tenant without a table is served (see
    /// `Config::serves_unlisted_tenants`).
    pub fn new(config: &BTreeMap<String, TenantConfig>, serve_unlisted: bool) -> Self {
        let table = config
            .iter()
            .map(|(name, c)| {
                let t = Tenant {
                    token: c.token.clone(),
                    limiter: c.max_requests_per_s.and_then(|rate| {
                        let rate = NonZeroU32::new(u32::try_from(rate).unwrap_or(u32::MAX))?;
                        let burst = c
                            .burst
                            .and_then(|b| NonZeroU32::new(u32::try_from(b).unwrap_or(u32::MAX)))
                            .unwrap_or(rate);
                        Some(RateLimiter::direct(
                            Quota::per_second(rate).allow_burst(burst),
                        ))
                    }),
                };
                (name.clone(), t)
            })
            .collect();
        Tenants {
            table: Arc::new(table),
            serve_unlisted,
            clock: DefaultClock::default(),
        }
    }

    /// Whether a request for `tenant` with this `Authorization` header may proceed now: the
    /// three checks of the module doc, in their order. A header sent for a tenant without a
    /// token is ignored; the scheme name is case-insensitive.
    pub fn admit(&self, tenant: &str, authorization: Option<&[u8]>) -> Result<(), ApiError> {
        self.admit_as(tenant, authorization, None)
    }

    /// As `admit`, for a read: `reader` (the `metrics_token`, when one is set) opens it as
    /// the tenant's own token does. The tenant must still be known, and the read counts
    /// against the tenant's rate, so a reader cannot spend more of the server than the
    /// tenant may.
    pub fn admit_read(
        &self,
        tenant: &str,
        authorization: Option<&[u8]>,
        reader: Option<&str>,
    ) -> Result<(), ApiError> {
        self.admit_as(tenant, authorization, reader)
    }

    fn admit_as(
        &self,
        tenant: &str,
        authorization: Option<&[u8]>,
        reader: Option<&str>,
    ) -> Result<(), ApiError> {
        let Some(t) = self.table.get(tenant) else {
            return if self.serve_unlisted {
                Ok(())
            } else {
                Err(ApiError::UnknownTenant(tenant.to_string()))
            };
        };
        if let Some(token) = t.token.as_deref() {
            let read = reader.is_some_and(|r| bearer_matches(authorization, r));
            if !read && !bearer_matches(authorization, token) {
                return Err(ApiError::Unauthorized(tenant.to_string()));
            }
        }
        if let Some(limiter) = &t.limiter {
            if let Err(not_until) = limiter.check() {
                let wait = not_until.wait_time_from(self.clock.now());
                return Err(ApiError::RateLimited {
                    tenant: tenant.to_string(),
                    // Whole seconds, rounded up: a client that waits as told is admitted.
                    retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                });
            }
        }
        Ok(())
    }
}

/// Whether `authorization` is `Bearer <token>` (scheme in any case, the token exact, compared
/// in constant time).
pub fn bearer_matches(authorization: Option<&[u8]>, token: &str) -> bool {
    let Some((scheme, given)) = authorization.and_then(split_scheme) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer") && bool::from(given.ct_eq(token.as_bytes()))
}

fn split_scheme(h: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = h.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = h.split_at(sp);
    let token = rest.iter().position(|&b| b != b' ').map(|i| &rest[i..])?;
    Some((scheme, token.trim_ascii_end()))
}

#[cfg(test)]
#[path = "tenants_tests.rs"]
mod tests;
