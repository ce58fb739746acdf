//! Per-tenant access from the configuration: the bearer token.
//!
//! Quotas of pending timers are the engine's (`quota`): the shards count what they hold, and
//! the handlers only take a slot first so that a batch is refused in item order
//! (`Handle::quota`, `Handle::schedule_holding`). The map of tenants is built once at start
//! and only read afterwards.

use crate::config::TenantConfig;
use std::collections::HashMap;
use std::sync::Arc;
// Constant time: the time a comparison takes does not tell how much of a guess was right.
use subtle::ConstantTimeEq;

pub struct Tenant {
    token: Option<String>,
}

/// Tenants that have a token; any other tenant is open.
#[derive(Clone, Default)]
pub struct Tenants(Arc<HashMap<String, Tenant>>);

impl Tenants {
    pub fn new(config: &std::collections::BTreeMap<String, TenantConfig>) -> Self {
        let map = config
            .iter()
            .map(|(name, c)| {
                let t = Tenant {
                    token: c.token.clone(),
                };
                (name.clone(), t)
            })
            .collect();
        Tenants(Arc::new(map))
    }

    pub fn get(&self, tenant: &str) -> Option<&Tenant> {
        self.0.get(tenant)
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
        scheme.eq_ignore_ascii_case(b"bearer") && bool::from(given.ct_eq(token.as_bytes()))
    }
}

fn split_scheme(h: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = h.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = h.split_at(sp);
    let token = rest.iter().position(|&b| b != b' ').map(|i| &rest[i..])?;
    Some((scheme, token.trim_ascii_end()))
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
                ..Default::default()
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
}
