//! The shard's dead letters: webhook timers whose delivery failed for good, kept until they are
//! re-driven or discarded (and persisted by the store, which hands them back at start).
//!
//! At most one per (tenant, key): a later dead letter under the same key replaces the earlier.
//! Kept per tenant, ordered by key, so that a tenant's list (`GET /v1/dead/{tenant}`) is a
//! range read that pages by key across shards. A dead letter holds its tenant's quota slot
//! until it leaves.
//!
//! Cost: a `HashMap` lookup by tenant and a `BTreeMap` operation by key per change; none of it
//! on the firing path.

use crate::op::DeadInfo;
use crate::units::UtcMicros;
use crate::wheel::table::PackedTimer;
use std::collections::{BTreeMap, HashMap};

/// One dead letter: its timer (tenant, key, final metadata, payload), version and deadline.
pub(crate) struct Letter {
    pub timer: PackedTimer,
    pub version: u64,
    pub fire_at: UtcMicros,
}

#[derive(Default)]
pub(crate) struct DeadLetters {
    by_tenant: HashMap<Box<str>, BTreeMap<Box<str>, Letter>>,
}

impl DeadLetters {
    /// Files a dead letter; the one it replaced, if any.
    pub fn insert(&mut self, letter: Letter) -> Option<Letter> {
        let keys = self
            .by_tenant
            .entry(letter.timer.tenant().into())
            .or_default();
        keys.insert(letter.timer.key().into(), letter)
    }

    pub fn get(&self, tenant: &str, key: &str) -> Option<&Letter> {
        self.by_tenant.get(tenant)?.get(key)
    }

    pub fn remove(&mut self, tenant: &str, key: &str) -> Option<Letter> {
        let keys = self.by_tenant.get_mut(tenant)?;
        let letter = keys.remove(key)?;
        if keys.is_empty() {
            self.by_tenant.remove(tenant);
        }
        Some(letter)
    }

    /// Up to `limit` of the tenant's dead letters with a key after `after`, by key.
    pub fn list(&self, tenant: &str, after: Option<&str>, limit: usize) -> Vec<DeadInfo> {
        let Some(keys) = self.by_tenant.get(tenant) else {
            return Vec::new();
        };
        let range = match after {
            Some(a) => {
                keys.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
            }
            None => keys.range::<str, _>(..),
        };
        range
            .take(limit)
            .map(|(k, l)| DeadInfo {
                key: k.to_string(),
                version: l.version,
                fire_at: l.fire_at,
                meta: l.timer.meta().to_vec(),
                payload: l.timer.payload().to_vec(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(tenant: &str, key: &str, version: u64) -> Letter {
        Letter {
            timer: PackedTimer::with_meta(tenant, key, b"m", b"{}").expect("short"),
            version,
            fire_at: UtcMicros(version),
        }
    }

    #[test]
    fn one_letter_per_key_listed_by_key_after_a_cursor() {
        let mut d = DeadLetters::default();
        for k in ["b", "a", "c"] {
            assert!(d.insert(letter("t", k, 1)).is_none());
        }
        d.insert(letter("u", "a", 1));
        assert_eq!(d.insert(letter("t", "a", 2)).map(|l| l.version), Some(1));
        let keys = |v: Vec<DeadInfo>| v.into_iter().map(|i| i.key).collect::<Vec<_>>();
        assert_eq!(keys(d.list("t", None, 10)), ["a", "b", "c"]);
        assert_eq!(keys(d.list("t", Some("a"), 1)), ["b"]);
        assert_eq!(d.list("t", None, 10)[0].version, 2);
        assert!(d.remove("t", "b").is_some() && d.remove("t", "b").is_none());
        assert!(d.remove("u", "a").is_some());
        assert_eq!(d.list("t", None, 10).len(), 2);
        assert!(d.list("u", None, 10).is_empty());
    }
}
