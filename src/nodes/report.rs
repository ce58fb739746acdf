//! What `GET /cluster` answers and `punctual cluster status` prints: the live nodes, the
//! partitions each holds the lease of and under which epochs, the partitions no one holds,
//! the leases of nodes not in the live set, and this node's own view (what it holds, what its
//! routing view says it should own). Built from one read of Redis ([`Snapshot`], taken by
//! `status`) and this node's [`Holdings`], on the thread that answers the request.
//!
//! # The JSON
//!
//! Partition sets are written compactly, as a count and ranges (`"0-12,15,20-21"`,
//! [`ranges`]); a holder's epochs as their min, max and the partitions under each epoch
//! (`{"1": "0-511", "3": "600"}`: after a settled start, one or two entries). Everything is
//! serde, both ways: the CLI reads back what the endpoint wrote.
//!
//! # Cost model
//!
//! One pass over the 1,024 lease values and one over [`Holdings`] (1,024 uncontended mutex
//! locks) per answer; a few small allocations per holder. Nothing is kept between answers.

use super::holdings::LOAD_OVERDUE;
use super::node::Holdings;
use super::routing::Owner;
use super::status::Snapshot;
use crate::partition::PARTITIONS;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// A set of partitions: how many, and their ranges (`"0-12,15"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitions {
    pub count: u32,
    pub ranges: String,
}

impl Partitions {
    /// `sorted` must increase.
    pub fn of(sorted: &[u32]) -> Partitions {
        Partitions {
            count: sorted.len() as u32,
            ranges: ranges(sorted),
        }
    }
}

/// The epochs of a holder's leases: min, max, and the partitions under each epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epochs {
    pub min: u64,
    pub max: u64,
    /// Epoch → the partitions held under it, as ranges.
    pub partitions: BTreeMap<u64, String>,
}

impl Epochs {
    /// Of (partition, epoch) pairs, partitions increasing; `None` for none.
    pub fn of(held: &[(u32, u64)]) -> Option<Epochs> {
        let mut by_epoch: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for &(p, e) in held {
            by_epoch.entry(e).or_default().push(p);
        }
        let min = *by_epoch.keys().next()?;
        let max = *by_epoch.keys().next_back()?;
        Some(Epochs {
            min,
            max,
            partitions: by_epoch
                .into_iter()
                .map(|(e, ps)| (e, ranges(&ps)))
                .collect(),
        })
    }
}

/// A node that holds leases: a live one (with its record) or one not in the live set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub id: String,
    /// From the membership record; `None` for a node not in the live set.
    pub advertise: Option<String>,
    /// When this incarnation started (UTC microseconds), from the record.
    pub started_at_us: Option<u64>,
    pub partitions: Partitions,
    /// `None` when it holds nothing.
    pub epochs: Option<Epochs>,
}

/// What the answering node itself holds and should own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThisNode {
    pub id: String,
    /// The partitions whose leases it holds, valid now (`Holdings`).
    pub holds: Partitions,
    /// The partitions its routing view (the live set of its last good heartbeat) says it
    /// should own. Differs from `holds` for about two rounds after a change of the live set,
    /// longer when its view lags or Redis refuses it leases.
    pub should_own: Partitions,
    /// Partitions it holds whose records were not handed to its shards within
    /// `holdings::LOAD_OVERDUE` (5 s) of their gain: an alert (their timers do not fire).
    #[serde(default)]
    pub load_overdue: Partitions,
}

/// The whole answer of `GET /cluster`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// When the read of Redis started (UTC microseconds).
    pub read_at_us: u64,
    /// The live nodes, sorted by id, each with the leases it holds.
    pub live: Vec<Holder>,
    /// Partitions whose lease key is absent.
    pub unowned: Partitions,
    /// Leases held by nodes not in the live set (dead or gone, their leases not yet lapsed).
    pub not_live: Vec<Holder>,
    /// Partitions whose lease value does not read as `<node>/<nonce>-<token>:<epoch>`.
    pub unreadable: Partitions,
    pub this_node: ThisNode,
}

/// `<node>/<nonce>-<token>:<epoch>` → (node, epoch); `None` for anything else (no panic on any
/// input). The node id may hold `:` (`host:port`) but not `/`; the epoch is decimal digits.
pub fn parse_holder(value: &str) -> Option<(&str, u64)> {
    let (incarnation, epoch) = value.rsplit_once(':')?;
    if epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let epoch = epoch.parse().ok()?;
    let (node, nonce) = incarnation.rsplit_once('/')?;
    (!node.is_empty() && !nonce.is_empty()).then_some((node, epoch))
}

/// Increasing partitions as ranges: `[0, 1, 2, 5, 7, 8]` → `"0-2,5,7-8"`; `""` for none.
/// Out-of-order input still gives a true (if longer) description.
pub fn ranges(sorted: &[u32]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut i = 0;
    while let Some(&first) = sorted.get(i) {
        let mut last = first;
        while sorted
            .get(i + 1)
            .is_some_and(|&n| Some(n) == last.checked_add(1))
        {
            last += 1;
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = if first == last {
            write!(out, "{first}")
        } else {
            write!(out, "{first}-{last}")
        };
        i += 1;
    }
    out
}

impl Report {
    /// The answer for the node `me`, from `snapshot` and its `holdings` at `now`.
    pub fn of(snapshot: &Snapshot, me: &str, holdings: &Holdings, now: Instant) -> Report {
        let mut held: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
        let mut unowned = Vec::new();
        let mut unreadable = Vec::new();
        for p in 0..PARTITIONS {
            match snapshot.leases.get(p as usize).and_then(Option::as_deref) {
                None => unowned.push(p),
                Some(value) => match parse_holder(value) {
                    Some((node, epoch)) => held.entry(node).or_default().push((p, epoch)),
                    None => unreadable.push(p),
                },
            }
        }
        let live = snapshot
            .live
            .iter()
            .map(|r| {
                let of = held.remove(r.id.as_str()).unwrap_or_default();
                Holder {
                    id: r.id.clone(),
                    advertise: Some(r.advertise.clone()),
                    started_at_us: Some(r.started_at_us),
                    ..holder(&r.id, &of)
                }
            })
            .collect();
        let not_live = held.iter().map(|(id, of)| holder(id, of)).collect();
        let view = holdings.routing.current();
        let should_own: Vec<u32> = (0..PARTITIONS)
            .filter(|&p| view.owner(p) == Owner::Me)
            .collect();
        Report {
            read_at_us: snapshot.read_at_us,
            live,
            unowned: Partitions::of(&unowned),
            not_live,
            unreadable: Partitions::of(&unreadable),
            this_node: ThisNode {
                id: me.to_string(),
                holds: Partitions::of(&holdings.owned(now)),
                should_own: Partitions::of(&should_own),
                load_overdue: Partitions::of(&holdings.loading.overdue(now, LOAD_OVERDUE)),
            },
        }
    }
}

fn holder(id: &str, of: &[(u32, u64)]) -> Holder {
    let partitions: Vec<u32> = of.iter().map(|&(p, _)| p).collect();
    Holder {
        id: id.to_string(),
        advertise: None,
        started_at_us: None,
        partitions: Partitions::of(&partitions),
        epochs: Epochs::of(of),
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
