//! Where a held timer lies: a slot in chunks of [`CHUNK`] that never move, taken from a free
//! list, and found by its identity through [`PARTS`] hash tables of (hash, slot) chosen by the
//! top bits of the identity's hash. The queues (`mod.rs`) link the slots into their FIFOs;
//! this file only stores, finds and frees them.
//!
//! A growth step is at most a chunk (128 KiB, its pages written as it fills) or one part's
//! doubling (1/1,024 of the index): nothing already held is copied, which a burst of a
//! million holds inside one fire poll needs. Cost per find, index or unindex: one hash of the
//! identity (seeded at random: identities come from clients' registrations) and a probe of
//! one part.

use crate::timer::PackedTimer;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// A timer held back by a cap: its identity and its metadata when it was held, and its version.
pub(crate) struct HeldBack {
    pub timer: PackedTimer,
    pub version: u64,
}

/// Slots per chunk: 128 KiB of 32-byte slots.
pub(super) const CHUNK: usize = 4096;

/// Bits of an identity's hash that choose its part of the index: its top ones.
const PART_BITS: u32 = 10;

/// Parts of the index. Empty, they cost their headers: 32 KiB.
const PARTS: usize = 1 << PART_BITS;

/// No slot, no FIFO: the end of a list.
pub(super) const NIL: u32 = u32::MAX;

/// A held timer in its FIFO, or a free slot (`held` `None`, `next` the next free one).
pub(super) struct Slot {
    pub held: Option<HeldBack>,
    pub prev: u32,
    pub next: u32,
    pub fifo: u32,
}

/// Where the index finds a held timer: the low half of its identity's hash, and its slot.
#[derive(Clone, Copy)]
struct Ix {
    hash: u32,
    slot: u32,
}

/// The hash hashbrown places and filters an entry by: every bit of the kept half moves its top
/// seven bits (the probe filter) and its low bits (the bucket).
fn widen(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The part of the index an identity's hash goes to.
fn part(hash: u64) -> usize {
    (hash >> (64 - PART_BITS)) as usize
}

/// The slots, their free list and the index by identity.
pub(super) struct Slots {
    chunks: Vec<Vec<Slot>>,
    /// The first free slot; free slots link through `next`.
    free: u32,
    index: Vec<HashTable<Ix>>,
    /// Seeded at random: identities come from clients' registrations.
    hasher: foldhash::fast::RandomState,
}

impl Default for Slots {
    fn default() -> Slots {
        Slots {
            chunks: Vec::new(),
            free: NIL,
            index: (0..PARTS).map(|_| HashTable::new()).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl Slots {
    /// The hash an identity is indexed by.
    pub fn hash(&self, identity: &[u8]) -> u64 {
        self.hasher.hash_one(identity)
    }

    /// The slot of the held timer with `identity` (whose hash is `hash`), if one is held.
    pub fn find(&self, hash: u64, identity: &[u8]) -> Option<u32> {
        let lo = hash as u32;
        self.index[part(hash)]
            .find(widen(lo), |ix| ix.hash == lo && self.is(ix.slot, identity))
            .map(|ix| ix.slot)
    }

    fn is(&self, slot: u32, identity: &[u8]) -> bool {
        self.get(slot)
            .held
            .as_ref()
            .is_some_and(|h| h.timer.identity() == identity)
    }

    /// Indexes the timer in `slot`, whose identity hashes to `hash`.
    pub fn index(&mut self, hash: u64, slot: u32) {
        let lo = hash as u32;
        self.index[part(hash)].insert_unique(widen(lo), Ix { hash: lo, slot }, |ix| widen(ix.hash));
    }

    /// Takes `slot` out of the index, if it is there under `hash`.
    pub fn unindex(&mut self, hash: u64, slot: u32) {
        let lo = hash as u32;
        if let Ok(entry) = self.index[part(hash)].find_entry(widen(lo), |ix| ix.slot == slot) {
            entry.remove();
        }
    }

    /// A free slot, from the free list or the end of the last chunk (a new chunk when full).
    pub fn alloc(&mut self) -> Option<u32> {
        if self.free != NIL {
            let slot = self.free;
            self.free = self.get(slot).next;
            return Some(slot);
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            if self.chunks.len() >= (NIL as usize) / CHUNK {
                return None;
            }
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let n = self.chunks.len() - 1;
        let chunk = self.chunks.last_mut()?;
        chunk.push(Slot {
            held: None,
            prev: NIL,
            next: NIL,
            fifo: NIL,
        });
        u32::try_from(n * CHUNK + chunk.len() - 1).ok()
    }

    /// Puts `slot`, unlinked and emptied, on the free list.
    pub fn release(&mut self, slot: u32) {
        let free = self.free;
        self.get_mut(slot).next = free;
        self.free = slot;
    }

    pub fn get(&self, slot: u32) -> &Slot {
        let s = slot as usize;
        &self.chunks[s / CHUNK][s % CHUNK]
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut Slot {
        let s = slot as usize;
        &mut self.chunks[s / CHUNK][s % CHUNK]
    }

    /// Heap bytes of the slots and the index.
    #[cfg(test)]
    pub fn allocation_size(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<Slot>()
            + self
                .index
                .iter()
                .map(HashTable::allocation_size)
                .sum::<usize>()
    }

    /// Heap bytes of the slots and of the index part that `identity` goes to: the two a hold
    /// of it can grow.
    #[cfg(test)]
    pub fn footprint_for(&self, identity: &[u8]) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<Slot>()
            + self.index[part(self.hash(identity))].allocation_size()
    }

    /// Slots made, taken or free.
    #[cfg(test)]
    pub fn made(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}
