//! A listing by key prefix (`GET /v1/timers/{tenant}?prefix=`): the shard's pending timers of
//! the tenant whose key starts with the prefix and comes after the page's last key, read in
//! key order from the table's key order (`wheel/keys.rs`): the search to the page's first key
//! and then only the page, however many timers the shard holds, in one op.
//!
//! Timers paged beyond the horizon (`page`) are listed too, from the pager's key order
//! (`page/keys.rs`), the same way: the shard's page is the first keys of the two merged.
//! Their payloads, when asked, are read back from their pages, as a `GET` reads them, by a
//! task of the shard's that answers once they are read.
//!
//! Cost: O(log n) to the first key (key comparisons through the table), then for each timer
//! listed a copy of its key (and payload, when asked); `limit + 1` at most, 10,001.

use super::terms::Current;
use super::Shard;
use crate::clock::TimeSource;
use crate::op::{ListQuery, Listed, Listing};
use crate::page::record::PageRecord;
use std::future::Future;
use std::pin::Pin;

/// A paged timer's payload to read back for a listing: its place in the listing, and the
/// read.
pub(super) type PayloadRead = (
    usize,
    Pin<Box<dyn Future<Output = std::io::Result<PageRecord>>>>,
);

impl<S: TimeSource> Shard<S> {
    /// The first `query.limit` timers `query` picks, by key, in the wheel or paged; and the
    /// reads of the paged ones' payloads when the query asks for payloads.
    pub(super) fn list_step(&self, query: &ListQuery) -> (Listing, Vec<PayloadRead>) {
        let mut timers: Vec<Listed> = Vec::new();
        let limit = query.limit.max(1);
        let (start, after) = match query.after.as_deref() {
            Some(a) if a >= query.prefix.as_str() => (a, true),
            _ => (query.prefix.as_str(), false),
        };
        self.table.walk_keys(&query.tenant, start, after, |view| {
            if !view.timer.key().starts_with(&query.prefix) {
                return false;
            }
            if !query.picks(view.timer) {
                // Under the prefix but not the listing's kind: a recurring schedule's
                // internal timer, passed over (`ListQuery::picks`).
                return true;
            }
            let current = Current::of(&view);
            timers.push(Listed {
                key: view.timer.key().to_string(),
                fire_at_us: current.fire_at_us,
                version: current.version,
                payload: match query.payloads {
                    true => view.timer.payload().to_vec(),
                    false => Vec::new(),
                },
            });
            timers.len() < limit
        });
        let mut reads = Vec::new();
        if let Some(pager) = &self.pager {
            let mut paged: Vec<Listed> = Vec::new();
            pager.walk_keys(&query.tenant, start, after, |key, p| {
                if !key.starts_with(&query.prefix) {
                    return false;
                }
                if query.picks_key(key) {
                    paged.push(Listed {
                        key: key.to_string(),
                        fire_at_us: p.deadline.0,
                        version: p.version,
                        payload: Vec::new(),
                    });
                }
                paged.len() < limit
            });
            let at;
            (timers, at) = merge(timers, paged, limit);
            if query.payloads {
                for i in at {
                    let identity = identity(&query.tenant, &timers[i].key);
                    if let Some(read) = pager.read(&identity) {
                        reads.push((i, Box::pin(read) as Pin<Box<dyn Future<Output = _>>>));
                    }
                }
            }
        }
        let (open, changes) = self.gate.open_now(&self.ring);
        let listing = Listing {
            timers,
            open,
            changes,
        };
        (listing, reads)
    }
}

/// The first `limit` of `wheel` and `paged`, both by key, merged by key (a key in both, which
/// a timer never is, once); and where in it the paged ones are.
pub(super) fn merge(
    wheel: Vec<Listed>,
    paged: Vec<Listed>,
    limit: usize,
) -> (Vec<Listed>, Vec<usize>) {
    if paged.is_empty() {
        return (wheel, Vec::new());
    }
    let mut out = Vec::with_capacity((wheel.len() + paged.len()).min(limit));
    let mut at = Vec::new();
    let (mut w, mut p) = (wheel.into_iter().peekable(), paged.into_iter().peekable());
    while out.len() < limit {
        let from_paged = match (w.peek(), p.peek()) {
            (Some(a), Some(b)) if a.key == b.key => {
                p.next();
                false
            }
            (Some(a), Some(b)) => b.key < a.key,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (None, None) => break,
        };
        let next = if from_paged { p.next() } else { w.next() };
        let Some(next) = next else { break };
        if from_paged {
            at.push(out.len());
        }
        out.push(next);
    }
    (out, at)
}

/// The identity of (`tenant`, `key`), as `PackedTimer::identity` has it; a listing's keys
/// are at most 255 bytes (the pager holds none longer).
fn identity(tenant: &str, key: &str) -> Vec<u8> {
    let mut id = Vec::with_capacity(2 + tenant.len() + key.len());
    id.push(u8::try_from(tenant.len()).unwrap_or(u8::MAX));
    id.push(u8::try_from(key.len()).unwrap_or(u8::MAX));
    id.extend_from_slice(tenant.as_bytes());
    id.extend_from_slice(key.as_bytes());
    id
}

#[cfg(test)]
#[path = "list_tests.rs"]
mod tests;
