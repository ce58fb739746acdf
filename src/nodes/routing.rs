//! Where a partition's requests go: the routing view the node's loop publishes each round for
//! the API, partition → the advertised address of its owner among the live nodes.
//!
//! # What this part owns
//!
//! [`Routing`], one immutable view (the live set it was computed from, and each partition's
//! owner by `rendezvous`), and [`RoutingTable`], the slot the loop swaps a new view into and
//! every request reads the current one from. The view says who *should* own a partition, as
//! the loop's leases are sought; it never lets anyone act on one: the owner's lease does, and
//! the owner's shards check it (`shard::gate`). A request sent to a node that is the owner by
//! this view but does not hold the lease yet is answered 503 there, as one sent to it directly.
//!
//! # Invariants
//!
//! - A view is a pure function of the live set (ids and advertised addresses): two nodes that
//!   saw the same live set route every partition to the same node.
//! - A view never changes once published; a new live set makes a new view.
//! - Before the loop's first good heartbeat the view is empty: every partition is
//!   [`Owner::Unknown`], and a request is answered where it arrived.
//!
//! # Cost model
//!
//! Per request: one uncontended mutex lock and an `Arc` clone ([`RoutingTable::current`]),
//! then an index per key. Per round: a comparison of the live set with the view's; only a
//! changed live set costs the rendezvous computation (1,024 × N weights) and one allocation.

use super::membership::NodeRecord;
use super::rendezvous;
use crate::partition::PARTITIONS;
use std::sync::{Arc, Mutex};

/// Who owns a partition, by the current view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner<'a> {
    /// This node.
    Me,
    /// Another live node, at this advertised address (`host:port`).
    Other(&'a Arc<str>),
    /// No view yet (or the partition is out of range): answer where the request arrived.
    Unknown,
}

/// One routing view: the live set it was computed from, and each partition's owner.
#[derive(Debug, Default)]
pub struct Routing {
    /// The live nodes' (id, advertised address), sorted by id.
    live: Vec<(String, Arc<str>)>,
    /// Per partition: the index in `live` of its owner.
    owner: Vec<u16>,
    /// The index of this node in `live`, if it is in it.
    me: Option<usize>,
}

impl Routing {
    /// The view of `live` (any order) for the node whose id is `me`.
    pub fn of(me: &str, live: &[NodeRecord]) -> Routing {
        let mut live: Vec<(String, Arc<str>)> = live
            .iter()
            .map(|r| (r.id.clone(), Arc::from(r.advertise.as_str())))
            .collect();
        live.sort_by(|a, b| a.0.cmp(&b.0));
        live.dedup_by(|a, b| a.0 == b.0);
        live.truncate(usize::from(u16::MAX));
        let ids: Vec<&str> = live.iter().map(|(id, _)| id.as_str()).collect();
        let owner = (0..PARTITIONS)
            .map(|p| {
                rendezvous::owner(p, &ids)
                    .and_then(|o| ids.iter().position(|id| *id == o))
                    .map_or(u16::MAX, |i| i as u16)
            })
            .collect();
        let me = ids.iter().position(|id| *id == me);
        Routing { live, owner, me }
    }

    /// The owner of `partition`.
    pub fn owner(&self, partition: u32) -> Owner<'_> {
        let Some(&i) = self.owner.get(partition as usize) else {
            return Owner::Unknown;
        };
        let i = usize::from(i);
        match self.live.get(i) {
            None => Owner::Unknown,
            Some(_) if self.me == Some(i) => Owner::Me,
            Some((_, addr)) => Owner::Other(addr),
        }
    }

    /// The advertised addresses of the other live nodes, each once.
    pub fn others(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::with_capacity(self.live.len());
        for (i, (_, addr)) in self.live.iter().enumerate() {
            if self.me != Some(i) && !out.contains(addr) {
                out.push(addr.clone());
            }
        }
        out
    }

    /// Whether this view was computed from exactly `live` (sorted by id, as `beat` answers).
    fn is_of(&self, live: &[NodeRecord]) -> bool {
        self.live.len() == live.len()
            && self
                .live
                .iter()
                .zip(live)
                .all(|((id, addr), r)| *id == r.id && **addr == *r.advertise)
    }
}

/// The current [`Routing`]: swapped by the loop, read by every request.
#[derive(Debug, Default)]
pub struct RoutingTable(Mutex<Arc<Routing>>);

impl RoutingTable {
    /// The view now (empty before the loop's first good heartbeat).
    pub fn current(&self) -> Arc<Routing> {
        // A poisoned lock still holds a whole `Arc`: assignments only.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Publishes the view of `live` for `me`, unless the current one is of the same live set.
    pub fn publish(&self, me: &str, live: &[NodeRecord]) {
        if self.current().is_of(live) {
            return;
        }
        let view = Arc::new(Routing::of(me, live));
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }
}

#[cfg(test)]
#[path = "routing_tests.rs"]
mod tests;
