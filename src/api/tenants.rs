//! Per-tenant policy from the configuration: the bearer token and the quota of pending timers.
//!
//! The engine does not count timers per tenant, so quotas are counted here: a new timer takes
//! a slot before it is scheduled (`reserve`), gives it back if it turned out to replace a
//! pending one or failed, and the slot is released when the timer fires (from the engine's
//! fire handler) or is cancelled. Counting is lock-free (one atomic per quota'd tenant); the
//! map of tenants is built once at start and only read afterwards.

use crate::config::TenantConfig;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub struct Tenant {
    token: Option<String>,
    pub quota: Option<Quota>,
}

pub struct Quota {
    pub limit: u64,
    pending: AtomicI64,
}

impl Quota {
    /// Takes a slot for a new timer; false when the quota is reached.
    pub fn reserve(&self) -> bool {
        let prev = self.pending.fetch_add(1, Ordering::AcqRel);
        if prev >= self.limit as i64 {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Takes a slot without checking (a replacement whose old timer fired meanwhile).
    pub fn force(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    pub fn release(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Acquire)
    }
}

/// Tenants that have a token or a quota; any other tenant is open and unlimited.
#[derive(Clone, Default)]
pub struct Tenants(Arc<HashMap<String, Tenant>>);

impl Tenants {
    pub fn new(config: &std::collections::BTreeMap<String, TenantConfig>) -> Self {
        let map = config
            .iter()
            .map(|(name, c)| {
                let t = Tenant {
                    token: c.token.clone(),
                    quota: c.max_pending.map(|limit| Quota {
                        limit,
                        pending: AtomicI64::new(0),
                    }),
                };
                (name.clone(), t)
            })
            .collect();
        Tenants(Arc::new(map))
    }

    pub fn get(&self, tenant: &str) -> Option<&Tenant> {
        self.0.get(tenant)
    }

    pub fn quota(&self, tenant: &str) -> Option<&Quota> {
        self.0.get(tenant).and_then(|t| t.quota.as_ref())
    }

    /// Whether a request for `tenant` with this `Authorization` header may proceed. A header
    /// sent for a tenant without a token is ignored; the scheme name is case-insensitive.
    pub fn authorized(&self, tenant: &str, authorization: Option<&[u8]>) -> bool {
        let Some(token) = self.get(tenant).and_then(|t| t.token.as_deref()) else {
            return true;
        };
        let Some(h) = authorization else {
            return false;
        };
        let Some((scheme, given)) = split_scheme(h) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer") && constant_time_eq(given, token.as_bytes())
    }
}

fn split_scheme(h: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = h.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = h.split_at(sp);
    let token = rest.iter().position(|&b| b != b' ').map(|i| &rest[i..])?;
    Some((scheme, token.trim_ascii_end()))
}

/// Compares without an early exit, so the time taken does not tell how much of a guess was
/// right (only its length).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn tenants() -> Tenants {
        let mut m = BTreeMap::new();
        m.insert(
            "acme".to_string(),
            TenantConfig {
                token: Some("s3cret".into()),
                max_pending: Some(2),
            },
        );
        Tenants::new(&m)
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_token_exact() {
        let t = tenants();
        assert!(t.authorized("acme", Some(b"Bearer s3cret")));
        assert!(t.authorized("acme", Some(b"bEaReR s3cret")));
        assert!(!t.authorized("acme", Some(b"Bearer s3cre")));
        assert!(!t.authorized("acme", Some(b"Basic s3cret")));
        assert!(!t.authorized("acme", Some(b"Bearer")));
        assert!(!t.authorized("acme", None));
        assert!(t.authorized("open", Some(b"Bearer whatever")));
    }

    #[test]
    fn quota_refuses_past_its_limit_and_frees_on_release() {
        let t = tenants();
        let q = t.quota("acme").expect("configured");
        assert!(q.reserve() && q.reserve());
        assert!(!q.reserve());
        q.release();
        assert!(q.reserve());
        assert_eq!(q.pending(), 2);
    }
}
