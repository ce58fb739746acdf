//! Listing a tenant's pending timers by key prefix, gathered from every shard: each shard,
//! asked at once, answers its first `limit + 1` keys from its key order (`shard/list.rs`), the shards' keys
//! are merged, and the page is the first `limit` of them, with the key to go on after when
//! there is more. The page also says which partitions it saw whole: those open on their shard
//! as it listed (`shard/gate.rs`); on a node alone, every one.

use super::handle::Handle;
use crate::error::{validate_name, Error, NameKind, Result};
use crate::op::{reply_channel, ListQuery, Listed, Op};
use crate::partition::PartitionSet;
use crate::runtime::doorbell::relay;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A page of a listing: the timers, by key, and the key the next page starts after (`None`
/// on the last page).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimerPage {
    pub timers: Vec<Listed>,
    pub next: Option<String>,
    /// The partitions listed whole: every pending timer of theirs that the page's range
    /// holds is in it.
    pub covered: PartitionSet,
}

impl Handle {
    /// The first `query.limit` pending timers of `query.tenant` whose key starts with
    /// `query.prefix` and comes after `query.after`, by key, from every shard.
    pub fn list_timers_async(
        &self,
        query: ListQuery,
    ) -> impl Future<Output = Result<TimerPage>> + Send + 'static {
        let checked = validate_name(NameKind::Tenant, &query.tenant);
        let inner = self.inner.clone();
        let limit = query.limit;
        // One more than the page, to know whether another page follows.
        let query = Arc::new(ListQuery {
            limit: limit.saturating_add(1),
            ..query
        });
        async move {
            checked?;
            let mut all: Vec<Listed> = Vec::new();
            let mut covered = PartitionSet::default();
            if inner.stopping.load(Ordering::Acquire) {
                return Err(Error::ShuttingDown);
            }
            // Every shard asked at once, so that they list side by side.
            let mut asked = Vec::with_capacity(inner.rings.len());
            for ring in &inner.rings {
                let (tx, rx) = reply_channel();
                let op = Op::ListTimers {
                    query: query.clone(),
                    reply: tx,
                };
                ring.push(&query.tenant, op)?;
                asked.push(rx);
            }
            for rx in asked {
                let listing = relay(rx).await.map_err(|_| Error::ShuttingDown)??;
                all.extend(listing.timers);
                Listed::keep_first(&mut all, query.limit);
                covered = covered.union(&listing.open);
            }
            let next = (all.len() > limit)
                .then(|| all.get(limit.saturating_sub(1)).map(|t| t.key.clone()))
                .flatten();
            all.truncate(limit);
            Ok(TimerPage {
                timers: all,
                next,
                covered,
            })
        }
    }
}
