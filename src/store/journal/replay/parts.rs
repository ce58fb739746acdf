//! The replay index in parts: [`PARTS`] hash tables, chosen by the top bits of the 32 hash
//! bits each entry keeps, so that a growth step rehashes one part, never the whole index.
//!
//! Compaction builds this index on the shard's own thread, one record per paced step; a
//! single table's doubling is one step that cannot be cut, and with ten million identities in
//! the sealed segments it moved 200 MB into fresh pages at once, stopping the shard's fires
//! for about as long as it stops them at start (tens to hundreds of milliseconds). A part
//! holds 1/4,096 of the entries (about 2,400 at ten million), so a growth step is a few
//! microseconds. Empty, the parts cost their headers: 128 KiB.

use super::{widen, Loc};
use hashbrown::HashTable;

/// Bits of the kept hash that choose the part: its top ones. hashbrown places a bucket by the
/// widened hash's low bits, which the low bits of the kept hash decide, and filters probes by
/// its top 7, which every kept bit moves: neither is fixed within a part.
const PART_BITS: u32 = 12;

/// Parts of an index.
pub(super) const PARTS: usize = 1 << PART_BITS;

pub(super) struct Parts(Vec<HashTable<Loc>>);

impl Parts {
    pub fn new() -> Parts {
        Parts((0..PARTS).map(|_| HashTable::new()).collect())
    }

    fn part(hash: u32) -> usize {
        (hash >> (32 - PART_BITS)) as usize
    }

    pub fn find(&self, hash: u32, is: impl FnMut(&Loc) -> bool) -> Option<&Loc> {
        self.0[Self::part(hash)].find(widen(hash), is)
    }

    pub fn find_mut(&mut self, hash: u32, is: impl FnMut(&Loc) -> bool) -> Option<&mut Loc> {
        self.0[Self::part(hash)].find_mut(widen(hash), is)
    }

    /// Adds `loc`, whose identity the index does not hold.
    pub fn insert_unique(&mut self, loc: Loc) {
        self.0[Self::part(loc.hash)].insert_unique(widen(loc.hash), loc, |l| widen(l.hash));
    }

    /// Entries held, live or gone.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.iter().map(HashTable::len).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Loc> {
        self.0.iter().flat_map(|part| part.iter())
    }

    /// Heap bytes of the buckets of the part that holds `hash`.
    #[cfg(test)]
    fn part_size(&self, hash: u32) -> usize {
        self.0[Self::part(hash)].allocation_size()
    }

    /// Heap bytes of the parts' buckets and headers.
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        self.0.iter().map(HashTable::allocation_size).sum::<usize>()
            + self.0.capacity() * std::mem::size_of::<HashTable<Loc>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No insert grows the index by more than a part's doubling: one table, as it was, grew by
    /// the whole index at each power of two (at a million entries a step of 24 MB).
    #[test]
    fn an_insert_grows_at_most_one_part() {
        let mut index = Parts::new();
        let mut hash = 0x2545_f491u32;
        let mut largest = 0;
        let n = 1u32 << 20;
        for off in 0..n {
            // xorshift: every kept-hash bit moves, as foldhash's do.
            hash ^= hash << 13;
            hash ^= hash >> 17;
            hash ^= hash << 5;
            // Only the part an insert goes to can grow: its size before and after.
            let before = index.part_size(hash);
            index.insert_unique(Loc::new(hash, 0, off as usize, false, true));
            largest = largest.max(index.part_size(hash) - before);
        }
        assert_eq!(index.iter().count(), n as usize);
        // A part holds about n / PARTS = 256 entries; its largest doubling to 1,024 buckets
        // adds about 14 KiB. The whole index is over 16 MB.
        assert!(
            largest < 64 << 10,
            "one insert grew the index {largest} bytes"
        );
        let total = index.allocation_size();
        assert!(total > 16 << 20, "{total}");
        let mut hash = 0x2545_f491u32;
        for off in 0..n {
            hash ^= hash << 13;
            hash ^= hash >> 17;
            hash ^= hash << 5;
            let found = index.find(hash, |l| l.off as usize == off as usize);
            assert!(found.is_some(), "entry {off} found in its part");
        }
    }
}
