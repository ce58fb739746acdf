//! The intrusive lists that hold the wheel's entries: a slot's list (or the expired list) is
//! a head and a tail index into the slab, and each entry carries `prev`, `next` and its
//! [`Pos`], the list it is on. Unlinking is O(1) without searching.

/// log2 of the number of slots per level.
pub(crate) const SLOT_BITS: u32 = 6;
/// Slots per level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;

/// "No entry": the end of a list, or an empty free list.
pub(crate) const NIL: u32 = u32::MAX;

/// Where an entry lives. Fits in 16 bits: 9 levels × 64 slots, plus five markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos(pub u16);

impl Pos {
    /// In the list of timers that were already due when they were inserted.
    pub const EXPIRED: Pos = Pos(u16::MAX - 1);
    /// On the free list.
    pub const FREE: Pos = Pos(u16::MAX);
    /// Fired and re-armed by the poll under way: linked when it ends.
    pub const REARMED: Pos = Pos(u16::MAX - 2);
    /// The head of a sorted run of expired entries; its `prev` holds the run's id
    /// (`expired.rs`).
    pub const RUN_HEAD: Pos = Pos(u16::MAX - 3);
    /// In a sorted run of expired entries, after its head.
    pub const RUN: Pos = Pos(u16::MAX - 4);

    pub fn slot(level: u32, slot: usize) -> Pos {
        Pos((level as usize * SLOTS + slot) as u16)
    }

    pub fn level_and_slot(self) -> (u32, usize) {
        let raw = self.0 as usize;
        ((raw / SLOTS) as u32, raw % SLOTS)
    }
}

/// Head and tail of one list, as slab indices (`NIL` when empty).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotList {
    pub head: u32,
    pub tail: u32,
}

impl SlotList {
    pub const EMPTY: SlotList = SlotList {
        head: NIL,
        tail: NIL,
    };
}
