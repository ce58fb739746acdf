//! The timer table's (tenant, key) index: slab indices found by the identity's hash.
//!
//! It grows with the table, in small steps, never all at once. The index is split into
//! [`PARTS`] hash tables by the top bits of the hash; a part that fills up doubles alone, so a
//! growth step rehashes 1/1024 of the index. Each bucket keeps 32 bits of the hash (its tag)
//! beside the slab index, so a rehash reads only the part's own buckets, never the slab or the
//! keys. The longest insert while a table grows to ten million timers is 0.3 ms
//! (`cargo run --release --example table_growth -- 10000000`, without transparent huge pages;
//! with 256 parts it was 6 ms). The tag also spares a slab read on most probes that land on
//! another key.
//!
//! Memory: 8 bytes and a control byte per bucket, 7/16 to 7/8 full, and 1024 small tables
//! (32 KiB when empty).

use hashbrown::HashTable;

/// Parts, chosen by the hash's top 10 bits.
pub(crate) const PARTS: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bucket {
    slot: u32,
    tag: u32,
}

/// The hash a part's table works with, made from the stored tag alone: spreads the tag's bits
/// over the 64 (hashbrown takes its control byte from the top ones).
#[inline]
fn spread(tag: u32) -> u64 {
    u64::from(tag).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[inline]
fn part_of(hash: u64) -> usize {
    (hash >> 54) as usize
}

#[inline]
fn tag_of(hash: u64) -> u32 {
    hash as u32
}

pub(crate) struct Index {
    parts: Box<[HashTable<Bucket>]>,
    len: usize,
}

impl Index {
    pub fn new() -> Index {
        Index {
            parts: (0..PARTS).map(|_| HashTable::new()).collect(),
            len: 0,
        }
    }

    /// Entries in the index (the table's tests compare it with the pending count).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Buckets in all parts: what a sweep visits.
    pub fn buckets(&self) -> usize {
        self.parts.iter().map(HashTable::capacity).sum()
    }

    pub fn allocation_size(&self) -> usize {
        self.parts.iter().map(HashTable::allocation_size).sum::<usize>()
            + PARTS * std::mem::size_of::<HashTable<Bucket>>()
    }

    /// The slot stored under `hash` for which `is` says yes.
    #[inline]
    pub fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        self.parts[part_of(hash)]
            .find(spread(tag), |b| b.tag == tag && is(b.slot))
            .map(|b| b.slot)
    }

    /// Adds `slot` under `hash` (the caller knows it is not there yet).
    #[inline]
    pub fn insert(&mut self, hash: u64, slot: u32) {
        let tag = tag_of(hash);
        self.parts[part_of(hash)].insert_unique(spread(tag), Bucket { slot, tag }, |b| {
            spread(b.tag)
        });
        self.len += 1;
    }

    /// Points the entry for `old` under `hash` at `new`; false when there is none.
    #[inline]
    pub fn replace(&mut self, hash: u64, old: u32, new: u32) -> bool {
        let tag = tag_of(hash);
        match self.parts[part_of(hash)].find_mut(spread(tag), |b| b.tag == tag && b.slot == old) {
            Some(b) => {
                b.slot = new;
                true
            }
            None => false,
        }
    }

    /// Removes the entry under `hash` for which `is` says yes; its slot.
    #[inline]
    pub fn remove(&mut self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        let (bucket, _) = self.parts[part_of(hash)]
            .find_entry(spread(tag), |b| b.tag == tag && is(b.slot))
            .ok()?
            .remove();
        self.len -= 1;
        Some(bucket.slot)
    }

    /// Keeps the entries whose slot `keep` says yes to. One pass over every bucket.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let mut len = 0;
        for part in self.parts.iter_mut() {
            part.retain(|b| keep(b.slot));
            len += part.len();
        }
        self.len = len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_hash_and_predicate_and_survive_growth() {
        let mut index = Index::new();
        let hash = |i: u32| u64::from(i).wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(17);
        for i in 0..20_000u32 {
            index.insert(hash(i), i);
        }
        assert_eq!(index.len(), 20_000);
        for i in (0..20_000u32).step_by(7) {
            assert_eq!(index.find(hash(i), |s| s == i), Some(i));
        }
        // Same tag and part, another slot: the predicate decides.
        assert_eq!(index.find(hash(5), |s| s == 6), None);
        assert!(index.replace(hash(9), 9, 90_009));
        assert_eq!(index.find(hash(9), |s| s == 90_009), Some(90_009));
        assert!(!index.replace(hash(9), 9, 1));
        assert_eq!(index.remove(hash(10), |s| s == 10), Some(10));
        assert_eq!(index.remove(hash(10), |s| s == 10), None);
        index.retain(|s| s % 2 == 0);
        assert_eq!(index.len(), (0..20_000u32).filter(|i| i % 2 == 0 && *i != 10).count());
        assert_eq!(index.find(hash(11), |s| s == 11), None);
        assert_eq!(index.find(hash(12), |s| s == 12), Some(12));
    }

    #[test]
    fn one_hash_value_for_two_slots_keeps_both() {
        let mut index = Index::new();
        index.insert(42, 1);
        index.insert(42, 2);
        assert_eq!(index.find(42, |s| s == 2), Some(2));
        assert_eq!(index.remove(42, |s| s == 1), Some(1));
        assert_eq!(index.find(42, |_| true), Some(2));
    }
}
