//! Where a timer lives: (tenant, key) → one of [`PARTITIONS`] fixed partitions → a shard.
//!
//! The partition is stored (the Redis layout names its keys by partition, and the journal
//! files its records by it), so its function must never change: FNV-1a is written out here,
//! not taken from a hashing crate whose output may change with a version. Shards own
//! partitions, never keys (`partition % shards`), so a restart with another shard count still
//! finds every timer, and the routing of a request and the durable layout always agree.

/// Fixed number of partitions. Shards own partitions (`partition % shards == shard`), never
/// keys, so a restart with another shard count still finds every timer. Changing this number
/// orphans every pending timer already stored: it is part of the on-disk format.
pub const PARTITIONS: u32 = 1024;

/// The partition of (tenant, key): FNV-1a (64-bit) over `tenant`, a 0xff separator (a byte no
/// valid name holds) and `key`, modulo [`PARTITIONS`]. FNV is written out here on purpose: the
/// value is stored, so it must never change with a dependency's version.
pub fn partition_of(tenant: &str, key: &str) -> u32 {
    let bytes = tenant
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(key.bytes());
    (fnv1a64(bytes) % u64::from(PARTITIONS)) as u32
}

/// FNV-1a (64-bit) over `bytes`: the stored partition function's hash, and the one the
/// cluster's rendezvous weights start from (nodes built apart must agree on both).
pub fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The shard of `shards` that owns (tenant, key).
pub fn shard_of(tenant: &str, key: &str, shards: usize) -> usize {
    partition_of(tenant, key) as usize % shards.max(1)
}

/// Whether `shard` of `shards` owns `partition`.
pub fn owns(shard: usize, shards: usize, partition: u32) -> bool {
    partition as usize % shards.max(1) == shard
}

/// A set of partitions, a bit each: which partitions a listing saw whole (`shard/list.rs`,
/// `engine/list.rs`), and, on a cluster of nodes, whether every node's together cover them all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionSet([u64; PARTITIONS as usize / 64]);

impl PartitionSet {
    /// Every partition.
    pub fn full() -> Self {
        PartitionSet([u64::MAX; PARTITIONS as usize / 64])
    }

    pub fn insert(&mut self, partition: u32) {
        if let Some(w) = self.0.get_mut(partition as usize / 64) {
            *w |= 1 << (partition % 64);
        }
    }

    pub fn contains(&self, partition: u32) -> bool {
        self.0
            .get(partition as usize / 64)
            .is_some_and(|w| w & (1 << (partition % 64)) != 0)
    }

    pub fn union(mut self, other: &Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
        self
    }

    pub fn intersection(mut self, other: &Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= b;
        }
        self
    }

    pub fn is_full(&self) -> bool {
        self.0.iter().all(|&w| w == u64::MAX)
    }

    /// The partitions in the set, increasing.
    pub fn members(&self) -> Vec<u32> {
        (0..PARTITIONS).filter(|&p| self.contains(p)).collect()
    }

    /// The partitions not in the set, increasing.
    pub fn missing(&self) -> Vec<u32> {
        (0..PARTITIONS).filter(|&p| !self.contains(p)).collect()
    }
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
