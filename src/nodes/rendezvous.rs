//! Which live node owns each partition: rendezvous (highest-random-weight) hashing.
//!
//! Every node weighs every (node, partition) pair with the same fixed function and gives the
//! partition to the node of highest weight (ties, which need equal 64-bit weights, to the
//! smaller node id). No coordination is needed: nodes that see the same live set compute the
//! same owners. When a node joins, it takes exactly the partitions for which it now weighs
//! most (about P/(N+1)) and no other partition moves; when one leaves, only its own
//! partitions move, each to the node that weighs second for it.
//!
//! The weight is FNV-1a over the node id, a 0xff separator and the partition's four bytes
//! (little-endian), finished with the SplitMix64 mixer so that neighbouring partitions spread.
//! Both are written out here: every node must compute the same weights whatever it was built
//! with, so no hashing crate whose output may change with a version.
//!
//! Cost: P × N weights per computation (1,024 × a few nodes: microseconds), done when the live
//! set changes, never per request.

use crate::partition::{fnv1a64, PARTITIONS};

/// The weight of `node` for `partition`.
pub fn weight(node: &str, partition: u32) -> u64 {
    let bytes = node
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(partition.to_le_bytes());
    splitmix64(fnv1a64(bytes))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The owner of `partition` among `nodes`; `None` when there is no node.
pub fn owner<S: AsRef<str>>(partition: u32, nodes: &[S]) -> Option<&str> {
    nodes.iter().map(AsRef::as_ref).max_by(|a, b| {
        weight(a, partition)
            .cmp(&weight(b, partition))
            .then_with(|| b.cmp(a))
    })
}

/// The partitions `node` owns among `nodes` (in increasing order; empty if it is not one).
pub fn owned_by<S: AsRef<str>>(node: &str, nodes: &[S]) -> Vec<u32> {
    (0..PARTITIONS)
        .filter(|&p| owner(p, nodes) == Some(node))
        .collect()
}

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;
