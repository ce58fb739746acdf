//! The timer table's (tenant, key) index: slab indices found by the identity's hash.
//!
//! It grows with the table, in small steps, never all at once. The index is split into parts,
//! hash tables chosen by bits of the hash; a part that fills up doubles alone, so a growth step
//! rehashes one part, each entry through its slab entry and key bytes (one table growing whole
//! would stop the shard for as long as it takes to rehash everything). The number of parts
//! follows the table's capacity ([`parts_for`]), so that a part holds at most about 1,024
//! entries when the table is full (610 at the default capacity of ten million). With 4,096
//! parts for every capacity, a part held 2,400 entries at ten million timers, and 414 and 1,123
//! inserts took over 1 ms while a table grew to ten million (2 runs on a 2-vCPU guest); with
//! the 16,384 parts of that capacity now, 1 and 2 did
//! (`cargo run --release --example table_growth -- 10000000`). 65,536 parts did no better
//! there, and made inserts at ten million timers 25–50% slower: their 2 MiB of table headers
//! miss the cache where 16,384's 512 KiB mostly do not (`cargo bench --bench wheel --
//! table/10M`).
//!
//! A variant that kept 32 bits of the hash in each bucket (8-byte buckets, rehashed without
//! touching the slab) made inserts of new keys 20 ns faster but cancels 40–60 ns slower at a
//! million timers (`cargo bench --bench wheel -- table/1M`), and took 6 bytes more per timer;
//! the 4-byte buckets stayed.
//!
//! Memory: 4 bytes and a control byte per bucket, 7/16 to 7/8 full, and one small table header
//! per part (32 bytes: 128 KiB for 4,096 parts, 2 MiB for 65,536).

use hashbrown::HashTable;

/// The fewest parts, whatever the capacity.
pub(crate) const MIN_PARTS: usize = 4096;

/// The most parts: 16 bits of the hash, bits 40 to 55. hashbrown places a bucket by the hash's
/// low bits and filters probes with its top 7 bits, so the part's bits must be neither.
pub(crate) const MAX_PARTS: usize = 1 << 16;

/// Entries a part holds when the table is at its capacity, about.
const PART_ENTRIES: usize = 1024;

/// Parts for a table of at most `capacity` timers: a power of two from [`MIN_PARTS`] to
/// [`MAX_PARTS`], about `capacity / 1024` (16,384 for the default capacity of ten million).
pub(crate) fn parts_for(capacity: usize) -> usize {
    (capacity / PART_ENTRIES)
        .checked_next_power_of_two()
        .unwrap_or(MAX_PARTS)
        .clamp(MIN_PARTS, MAX_PARTS)
}

pub(crate) struct Index {
    /// A power of two of them, so a part is chosen by a mask.
    parts: Box<[HashTable<u32>]>,
    len: usize,
}

impl Index {
    /// An empty index for a table of at most `capacity` timers.
    pub fn new(capacity: usize) -> Index {
        Index {
            parts: (0..parts_for(capacity)).map(|_| HashTable::new()).collect(),
            len: 0,
        }
    }

    #[inline]
    fn part_of(&self, hash: u64) -> usize {
        ((hash >> 40) as usize) & (self.parts.len() - 1)
    }

    /// Entries in the index (the table's tests compare it with the pending count).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn allocation_size(&self) -> usize {
        self.parts
            .iter()
            .map(HashTable::allocation_size)
            .sum::<usize>()
            + self.parts.len() * std::mem::size_of::<HashTable<u32>>()
    }

    /// The slot stored under `hash` for which `is` says yes.
    #[inline]
    pub fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.parts[self.part_of(hash)]
            .find(hash, |&slot| is(slot))
            .copied()
    }

    /// Adds `slot` under `hash` (the caller knows it is not there yet). `hash_of` gives the
    /// hash of a slot already in the index, for when its part grows.
    #[inline]
    pub fn insert(&mut self, hash: u64, slot: u32, hash_of: impl Fn(u32) -> u64) {
        self.parts[self.part_of(hash)].insert_unique(hash, slot, |&s| hash_of(s));
        self.len += 1;
    }

    /// Room for `additional` more entries, so that adding them grows hardly a part, in no more
    /// memory than growing would take: each part reserves its share less one standard
    /// deviation (a part's share is binomial). hashbrown rounds that up to a power of two of
    /// buckets, which mostly holds the part's whole share; a part that overflows it doubles
    /// alone, as it would have grown anyway. Reserving more (the share and four deviations)
    /// doubled most parts whenever the share lay just below a power of two: at 25 M timers a
    /// shard, the index twice its grown size: 11.25 GiB resident after recovering 50 M timers
    /// on 2 shards, against 10.84–10.86 GiB with this reserve. Too few to fill every part's
    /// smallest table are left to grow as they come. `hash_of` as for [`Index::insert`].
    pub fn reserve(&mut self, additional: usize, hash_of: impl Fn(u32) -> u64) {
        let share = additional / self.parts.len();
        if share < 4 {
            return;
        }
        let each = share - share.isqrt();
        for part in self.parts.iter_mut() {
            part.reserve(each, |&s| hash_of(s));
        }
    }

    /// Points the entry for `old` under `hash` at `new`; false when there is none.
    #[inline]
    pub fn replace(&mut self, hash: u64, old: u32, new: u32) -> bool {
        match self.parts[self.part_of(hash)].find_mut(hash, |&s| s == old) {
            Some(slot) => {
                *slot = new;
                true
            }
            None => false,
        }
    }

    /// Removes the entry under `hash` for which `is` says yes; its slot.
    #[inline]
    pub fn remove(&mut self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let (slot, _) = self.parts[self.part_of(hash)]
            .find_entry(hash, |&s| is(s))
            .ok()?
            .remove();
        self.len -= 1;
        Some(slot)
    }

    /// Keeps the entries whose slot `keep` says yes to. One pass over every bucket.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let mut len = 0;
        for part in self.parts.iter_mut() {
            part.retain(|&mut s| keep(s));
            len += part.len();
        }
        self.len = len;
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
