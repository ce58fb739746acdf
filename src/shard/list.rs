//! A listing by key prefix (`GET /v1/timers/{tenant}?prefix=`): the shard's pending timers of
//! the tenant whose key starts with the prefix and comes after the page's last key, read in
//! key order from the table's key order (`wheel/keys.rs`): the search to the page's first key
//! and then only the page, however many timers the shard holds, in one op.
//!
//! Timers paged beyond the horizon (`page`) are not listed: their keys are on disk only, and
//! a copy in memory would cost as much again as paging keeps (docs/API.md says so).
//!
//! Cost: O(log n) to the first key (key comparisons through the table), then for each timer
//! listed a copy of its key (and payload, when asked); `limit + 1` at most, 10,001.

use super::terms::Current;
use super::Shard;
use crate::clock::TimeSource;
use crate::op::{ListQuery, Listed, Listing};

impl<S: TimeSource> Shard<S> {
    /// The first `query.limit` timers `query` picks, by key.
    pub(super) fn list_step(&self, query: &ListQuery) -> Listing {
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
        let (open, changes) = self.gate.open_now(&self.ring);
        Listing {
            timers,
            open,
            changes,
        }
    }
}
