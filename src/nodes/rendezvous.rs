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
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:7480", i / 7, i * 3 + 1))
            .collect()
    }

    /// Five standard deviations of a partition count when each of `n` nodes is equally
    /// likely: the bound a fair hash stays within.
    fn spread(n: usize) -> f64 {
        let p = f64::from(PARTITIONS);
        let q = 1.0 / n as f64;
        5.0 * (p * q * (1.0 - q)).sqrt()
    }

    #[test]
    fn every_partition_has_one_owner_and_the_load_is_about_even() {
        for n in [1, 2, 3, 5, 8, 13] {
            let nodes = nodes(n);
            let counts: Vec<usize> = nodes.iter().map(|x| owned_by(x, &nodes).len()).collect();
            assert_eq!(
                counts.iter().sum::<usize>(),
                PARTITIONS as usize,
                "{n} nodes"
            );
            let fair = f64::from(PARTITIONS) / n as f64;
            for c in &counts {
                assert!(
                    (*c as f64 - fair).abs() <= spread(n),
                    "{n} nodes: counts {counts:?}, fair {fair:.0} ± {:.0}",
                    spread(n)
                );
            }
        }
        assert_eq!(owner::<String>(0, &[]), None);
    }

    #[test]
    fn a_join_moves_only_what_the_new_node_takes_about_one_in_n() {
        for n in [1, 3, 7] {
            let before = nodes(n);
            let mut after = before.clone();
            after.push("10.9.9.9:7480".into());
            let mut moved = 0;
            for p in 0..PARTITIONS {
                let (a, b) = (owner(p, &before), owner(p, &after));
                if a != b {
                    assert_eq!(b, Some("10.9.9.9:7480"), "partition {p} moved elsewhere");
                    moved += 1;
                }
            }
            let fair = f64::from(PARTITIONS) / (n + 1) as f64;
            assert!(
                (f64::from(moved) - fair).abs() <= spread(n + 1),
                "{n}+1 nodes: {moved} moved, fair {fair:.0}"
            );
        }
    }

    #[test]
    fn a_leave_moves_only_the_leaving_node_partitions() {
        let before = nodes(5);
        let gone = before[2].clone();
        let after: Vec<String> = before.iter().filter(|n| **n != gone).cloned().collect();
        for p in 0..PARTITIONS {
            let (a, b) = (owner(p, &before), owner(p, &after));
            if a != Some(gone.as_str()) {
                assert_eq!(a, b, "partition {p} moved though its owner stayed");
            } else {
                assert!(b.is_some_and(|b| b != gone));
            }
        }
    }

    #[test]
    fn the_owner_does_not_depend_on_the_order_nodes_are_listed_in() {
        let mut nodes = nodes(6);
        let first: Vec<Option<String>> = (0..PARTITIONS)
            .map(|p| owner(p, &nodes).map(str::to_owned))
            .collect();
        nodes.reverse();
        nodes.swap(1, 4);
        for p in 0..PARTITIONS {
            assert_eq!(owner(p, &nodes).map(str::to_owned), first[p as usize]);
        }
    }

    #[test]
    fn weights_are_pinned() {
        // A change here makes nodes built before and after it disagree on owners. The value
        // was computed apart from this code (FNV-1a 64 and SplitMix64 as published).
        assert_ne!(weight("a", 1), weight("a", 0));
        assert_ne!(weight("a", 0), weight("b", 0));
        assert_eq!(weight("10.0.0.5:7480", 7), 0xdd11_191f_67b4_630f);
    }
}
