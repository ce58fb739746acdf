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
//! The map is built once at start and only read afterwards; tenants without a quota cost one
//! `is_empty` check per schedule and fire when no tenant has one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// One tenant's quota and its pending count.
#[derive(Debug)]
pub struct Quota {
    pub limit: u64,
    pending: AtomicI64,
}

impl Quota {
    pub fn new(limit: u64) -> Quota {
        Quota {
            limit,
            pending: AtomicI64::new(0),
        }
    }

    /// Takes a slot for a new timer; false (and nothing taken) when the quota is reached.
    pub fn reserve(&self) -> bool {
        let limit = i64::try_from(self.limit).unwrap_or(i64::MAX);
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Takes a slot without checking: a recovered timer, already acknowledged.
    pub fn force(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives a slot back: the timer fired or was cancelled, or a reservation was not used.
    pub fn release(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
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
pub struct Quotas(HashMap<Box<str>, Arc<Quota>>);

impl Quotas {
    pub fn new(limits: impl IntoIterator<Item = (String, u64)>) -> Quotas {
        Quotas(
            limits
                .into_iter()
                .map(|(t, n)| (t.into_boxed_str(), Arc::new(Quota::new(n))))
                .collect(),
        )
    }

    #[inline]
    pub fn get(&self, tenant: &str) -> Option<&Arc<Quota>> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(tenant)
    }

    /// (tenant, limit, pending) of every quota, for exporters.
    pub fn snapshot(&self) -> Vec<(String, u64, i64)> {
        let mut v: Vec<_> = self
            .0
            .iter()
            .map(|(t, q)| (t.to_string(), q.limit, q.pending()))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_refuses_past_the_limit_and_release_frees_a_slot() {
        let q = Quota::new(2);
        assert!(q.reserve() && q.reserve());
        assert!(!q.reserve());
        assert_eq!(q.pending(), 2, "a refused reserve takes nothing");
        q.release();
        assert!(q.reserve());
        q.force();
        assert_eq!(q.pending(), 3, "recovery may exceed the limit");
        assert!(!q.reserve());
    }

    #[test]
    fn concurrent_reserves_never_exceed_the_limit() {
        let q = std::sync::Arc::new(Quota::new(1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || (0..10_000).filter(|_| q.reserve()).count())
            })
            .collect();
        let taken: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
        assert_eq!(taken, 1000);
        assert_eq!(q.pending(), 1000);
    }

    #[test]
    fn a_slot_is_given_back_when_dropped_and_kept_when_kept() {
        let q = Arc::new(Quota::new(1));
        let slot = QuotaSlot::reserve(&q).expect("room");
        assert!(QuotaSlot::reserve(&q).is_none());
        drop(slot);
        assert_eq!(q.pending(), 0);
        QuotaSlot::reserve(&q).expect("room again").keep();
        assert_eq!(q.pending(), 1);
    }

    #[test]
    fn tenants_without_a_quota_have_none() {
        let qs = Quotas::new([("acme".to_string(), 5)]);
        assert_eq!(qs.get("acme").map(|q| q.limit), Some(5));
        assert!(qs.get("open").is_none());
        assert!(Quotas::default().get("acme").is_none());
    }
}
