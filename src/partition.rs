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

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
