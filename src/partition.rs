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
/// value is stored, so it must never change with a dependency's version. A recurring
/// schedule's internal keys ([`schedule_key`], [`occurrence_key`]) go where the schedule's
/// own key would: the schedule's timer and its occurrences share one shard.
pub fn partition_of(tenant: &str, key: &str) -> u32 {
    let bytes = tenant
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(routing_key(key).bytes());
    (fnv1a64(bytes) % u64::from(PARTITIONS)) as u32
}

/// What begins every internal key of a recurring schedule: a byte no valid key holds
/// (`error::validate_name`), so no client can name, list or cancel one as a timer.
pub const INTERNAL: char = '@';

/// The key of schedule `key`'s one pending timer (whose payload is its record): `@key`.
pub fn schedule_key(key: &str) -> String {
    format!("{INTERNAL}{key}")
}

/// The key of the timer that delivers schedule `key`'s occurrence at `occurrence_us`:
/// `@key@occurrence_us`, one per occurrence, so that the same occurrence armed twice (a
/// repeat after a crash) is one timer.
pub fn occurrence_key(key: &str, occurrence_us: u64) -> String {
    format!("{INTERNAL}{key}{INTERNAL}{occurrence_us}")
}

/// The schedule's key when `key` is a schedule's timer ([`schedule_key`]), else `None`.
pub fn schedule_of(key: &str) -> Option<&str> {
    key.strip_prefix(INTERNAL)
        .filter(|k| !k.is_empty() && !k.contains(INTERNAL))
}

/// The key a timer is routed by: the schedule's own key for an internal one.
fn routing_key(key: &str) -> &str {
    match key.strip_prefix(INTERNAL) {
        Some(rest) => rest.split(INTERNAL).next().unwrap_or(rest),
        None => key,
    }
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
