//! Per-tenant quotas of pending timers, counted where timers live: in the shards.
//!
//! A tenant with `max_pending = N` holds at most N pending timers, all shards together. The
//! count is one atomic per quota'd tenant, shared by every shard (a tenant's keys spread over
//! all of them), changed only when a shard's table really changes:
//!
//! | event on a shard                          | count |
//! |-------------------------------------------|-------|
//! | a schedule that adds a key                | +1, refused when already at N |
//! | a schedule that replaces a pending key    | 0     |
//! | a fire, a cancel                          | −1    |
//! | recovery loads a timer                    | +1, never refused (it was acknowledged) |
//!
//! A caller that wants refusals in its own order (the HTTP batch: "the items past the quota")
//! takes a slot first with [`Quota::reserve`] and sends the op as *reserved*; the shard then
//! keeps the slot for a new key and gives it back for a replacement or a failure. Everything
//! else (a store that answers `StoreUnavailable` after its ack timeout while the timer stays,
//! a restart) leaves the count equal to the tenants' pending timers, which is what the quota
//! promises.
//!
//! # Room held for quotas
//!
//! A quota caps a tenant; it would promise nothing if tenants without one could take every
//! slot of a shard. So the capacity that quota'd tenants may still claim (the sum of their
//! unused quotas, spread evenly over the shards) is held for them: a new key of a tenant
//! without a quota is refused `CapacityExceeded` once a shard's free room is no more than
//! that share. Tenants with a quota are refused only at their quota or at the shard's full
//! capacity. When the quotas add up to more than the capacity, tenants without one get no
//! room at all; the engine warns about that at start.
//!
//! The map is built once at start and only read afterwards; tenants without a quota cost one
//! `is_empty` check per schedule and fire when no tenant has one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Buckets tenants are counted in for their share of a shard's queues: its ring of requests
/// (`ring.rs`) and its store's writes waiting to be durable (`store/acks.rs`). One tenant may
/// hold a quarter of either; two tenants in one bucket share its quarter.
pub const SHARE_BUCKETS: usize = 256;

/// The share bucket of `tenant` (FNV-1a of its name).
pub fn share_bucket(tenant: &str) -> u8 {
    let mut h: u32 = 0x811c_9dc5;
    for b in tenant.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % SHARE_BUCKETS as u32) as u8
}

/// One tenant's quota and its pending count.
#[derive(Debug)]
pub struct Quota {
    pub limit: u64,
    pending: AtomicI64,
    /// The sum of `limit − pending` over every quota of the same [`Quotas`].
    unused: Arc<AtomicI64>,
}

impl Quota {
    pub fn new(limit: u64) -> Quota {
        let unused = Arc::new(AtomicI64::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        Quota::sharing(limit, unused)
    }

    fn sharing(limit: u64, unused: Arc<AtomicI64>) -> Quota {
        Quota {
            limit,
            pending: AtomicI64::new(0),
            unused,
        }
    }

    /// Takes a slot for a new timer; false (and nothing taken) when the quota is reached.
    pub fn reserve(&self) -> bool {
        let limit = i64::try_from(self.limit).unwrap_or(i64::MAX);
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(|_| self.unused.fetch_sub(1, Ordering::AcqRel))
            .is_ok()
    }

    /// Takes a slot without checking: a recovered timer, already acknowledged.
    pub fn force(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.unused.fetch_sub(1, Ordering::AcqRel);
    }

    /// Gives a slot back: the timer fired or was cancelled, or a reservation was not used.
    pub fn release(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        self.unused.fetch_add(1, Ordering::AcqRel);
    }

    /// Pending timers counted against the quota.
    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Acquire)
    }
}

/// A slot taken from a quota and not yet settled. It travels with a schedule op; dropped
/// anywhere (the op refused, failed, or turned out to replace a pending timer) it gives the
/// slot back. [`QuotaSlot::keep`] hands it to the new timer, which gives it back when it
/// fires or is cancelled.
#[derive(Debug)]
pub struct QuotaSlot(Option<Arc<Quota>>);

impl QuotaSlot {
    /// Takes a slot; `None` when the quota is reached.
    pub fn reserve(quota: &Arc<Quota>) -> Option<QuotaSlot> {
        quota.reserve().then(|| QuotaSlot(Some(quota.clone())))
    }

    /// The new timer now holds the slot.
    pub fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for QuotaSlot {
    fn drop(&mut self) {
        if let Some(q) = self.0.take() {
            q.release();
        }
    }
}

/// The quotas of every tenant that has one.
#[derive(Debug, Default)]
pub struct Quotas {
    map: HashMap<Box<str>, Arc<Quota>>,
    /// The sum of the quotas' unused slots (see the module doc).
    unused: Arc<AtomicI64>,
    /// Shards the unused slots are spread over.
    shards: usize,
}

impl Quotas {
    /// The quotas of these tenants, with the room they may still claim spread over `shards`.
    pub fn new(limits: impl IntoIterator<Item = (String, u64)>, shards: usize) -> Quotas {
        let unused = Arc::new(AtomicI64::new(0));
        let map: HashMap<_, _> = limits
            .into_iter()
            .map(|(t, n)| {
                unused.fetch_add(i64::try_from(n).unwrap_or(i64::MAX / 4), Ordering::AcqRel);
                (
                    t.into_boxed_str(),
                    Arc::new(Quota::sharing(n, unused.clone())),
                )
            })
            .collect();
        Quotas {
            map,
            unused,
            shards: shards.max(1),
        }
    }

    #[inline]
    pub fn get(&self, tenant: &str) -> Option<&Arc<Quota>> {
        if self.map.is_empty() {
            return None;
        }
        self.map.get(tenant)
    }

    /// Slots one shard holds for the quota'd tenants: their unused quotas, spread evenly over
    /// the shards, rounded up. 0 when no tenant has a quota.
    #[inline]
    pub fn held_per_shard(&self) -> usize {
        if self.map.is_empty() {
            return 0;
        }
        let unused = self.unused.load(Ordering::Acquire).max(0) as u64;
        usize::try_from(unused.div_ceil(self.shards as u64)).unwrap_or(usize::MAX)
    }

    /// The sum of the limits, to compare with the capacity at start.
    pub fn total_limit(&self) -> u64 {
        self.map
            .values()
            .map(|q| q.limit)
            .fold(0, u64::saturating_add)
    }

    /// (tenant, limit, pending) of every quota, for exporters.
    pub fn snapshot(&self) -> Vec<(String, u64, i64)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|(t, q)| (t.to_string(), q.limit, q.pending()))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
#[path = "quota_tests.rs"]
mod tests;
