//! The keys of a shard's paged timers, by tenant and in key order: the one copy in memory of
//! a paged timer's key (its record is on disk, its index entry a hash of it), kept so that a
//! listing by key prefix, and the bulk cancel that reads such listings, reach paged timers as
//! they reach those in the wheel (`shard/list.rs`).
//!
//! Kept by the pager in step with its index: a key goes in when its timer is paged (a write,
//! a start's recovery) and out when it leaves the pages (a cancel, a replace into the wheel,
//! a load).
//!
//! Memory: per paged timer its key's bytes in an allocation of their own and about 25 bytes
//! of tree (a 16-byte box in nodes about two-thirds full): about 60 bytes for a 32-byte key,
//! beside the index's 40.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

#[derive(Default)]
pub(crate) struct PagedKeys {
    by_tenant: HashMap<Box<str>, BTreeSet<Box<str>>>,
}

impl PagedKeys {
    pub fn insert(&mut self, tenant: &str, key: &str) {
        match self.by_tenant.get_mut(tenant) {
            Some(keys) => {
                if !keys.contains(key) {
                    keys.insert(key.into());
                }
            }
            None => {
                self.by_tenant
                    .insert(tenant.into(), BTreeSet::from([key.into()]));
            }
        }
    }

    pub fn remove(&mut self, tenant: &str, key: &str) {
        if let Some(keys) = self.by_tenant.get_mut(tenant) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_tenant.remove(tenant);
            }
        }
    }

    /// The keys of `tenant` from `start` on (after it, when `after`), in order.
    pub fn range_from<'a>(
        &'a self,
        tenant: &str,
        start: &'a str,
        after: bool,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let from = match after {
            true => Bound::Excluded(start),
            false => Bound::Included(start),
        };
        self.by_tenant
            .get(tenant)
            .into_iter()
            .flat_map(move |keys| keys.range::<str, _>((from, Bound::Unbounded)))
            .map(|k| &**k)
    }
}
