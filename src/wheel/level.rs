//! One level of the wheel: 64 slots, each the head and tail of an intrusive list of slab
//! entries, and an `occupied` bitmap with one bit per non-empty slot.
//!
//! 64 slots is a power of two on purpose: the slot of a deadline is a shift and a mask, and
//! the next occupied slot is one `trailing_zeros` on the bitmap.

use super::list::{SlotList, SLOTS, SLOT_BITS};

const SLOT_MASK: u64 = (SLOTS as u64) - 1;

pub(crate) struct Level {
    /// Which level this is; level `n` has slots `64^n` µs wide.
    level: u32,
    /// Bit `s` is set when slot `s` holds at least one entry.
    occupied: u64,
    slots: [SlotList; SLOTS],
    /// Entries in each slot: what cascading the slot will cost.
    counts: [u32; SLOTS],
}

impl Level {
    pub fn new(level: u32) -> Level {
        Level {
            level,
            occupied: 0,
            slots: [SlotList::EMPTY; SLOTS],
            counts: [0; SLOTS],
        }
    }

    /// Entries in slot `s`.
    pub fn count(&self, s: usize) -> u32 {
        self.counts[s]
    }

    /// Slot `s` gained (`delta` = 1) or lost (`delta` = -1) an entry.
    pub fn add_count(&mut self, s: usize, delta: i32) {
        self.counts[s] = self.counts[s].wrapping_add_signed(delta);
    }

    /// Takes slot `s`'s list (and count) out, leaving the slot empty.
    pub fn take(&mut self, s: usize) -> (SlotList, u32) {
        self.mark_empty(s);
        let count = std::mem::take(&mut self.counts[s]);
        (
            std::mem::replace(&mut self.slots[s], SlotList::EMPTY),
            count,
        )
    }

    /// Puts a list of `count` entries back into the (empty) slot `s`.
    pub fn put_back(&mut self, s: usize, list: SlotList, count: u32) {
        self.slots[s] = list;
        self.counts[s] = count;
        self.mark_occupied(s);
    }

    pub fn slot(&self, s: usize) -> &SlotList {
        &self.slots[s]
    }

    pub fn slot_mut(&mut self, s: usize) -> &mut SlotList {
        &mut self.slots[s]
    }

    pub fn mark_occupied(&mut self, s: usize) {
        self.occupied |= occupied_bit(s);
    }

    pub fn mark_empty(&mut self, s: usize) {
        self.occupied &= !occupied_bit(s);
    }

    pub fn is_empty(&self) -> bool {
        self.occupied == 0
    }

    /// The start (in µs) of the first occupied slot at or after `elapsed`'s slot on this
    /// level, and that slot's index. Entries never sit in a slot before `elapsed`'s slot (the
    /// wheel cascades a slot when `elapsed` reaches it), so there is no wrap-around to handle.
    pub fn next_occupied(&self, elapsed: u64) -> Option<(u64, usize)> {
        let current = slot_for(elapsed, self.level);
        let candidates = self.occupied & (u64::MAX << current);
        if candidates == 0 {
            return None;
        }
        let slot = candidates.trailing_zeros() as usize;
        let level_start = elapsed & !(level_range(self.level) - 1);
        Some((level_start + slot as u64 * slot_range(self.level), slot))
    }
}

fn occupied_bit(slot: usize) -> u64 {
    1u64 << slot
}

/// Width of one slot on `level`, in µs: 1, 64, 4096, ...
pub(crate) fn slot_range(level: u32) -> u64 {
    1u64 << (SLOT_BITS * level)
}

/// Span of the whole `level`, in µs: 64 slots of `slot_range(level)`.
pub(crate) fn level_range(level: u32) -> u64 {
    1u64 << (SLOT_BITS * (level + 1))
}

/// The slot that `when` falls into on `level`.
pub(crate) fn slot_for(when: u64, level: u32) -> usize {
    ((when >> (SLOT_BITS * level)) & SLOT_MASK) as usize
}

/// The level on which a deadline `when` belongs, seen from `elapsed`: the level of the
/// highest bit in which they differ. Equal values belong on level 0.
pub(crate) fn level_for(elapsed: u64, when: u64) -> u32 {
    let masked = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros();
    significant / SLOT_BITS
}

#[cfg(test)]
#[path = "level_tests.rs"]
mod tests;
