//! The wheel's storage: a slab of entries addressed by `u32` index, with a free list and a
//! generation per slot, so a stale [`EntryRef`] (its timer fired, cancelled, or replaced) is
//! detected instead of touching someone else's timer.
//!
//! The entries live in chunks of [`CHUNK`] that are never moved: growing the slab allocates one
//! more chunk (its pages are touched one entry at a time, as entries arrive) and copies
//! nothing, so a slab of ten million entries grows without a pause. An index is its chunk's
//! number and the position in it.
//!
//! Cost model: insert pops the free list or pushes onto the last chunk, O(1); remove is O(1),
//! and so is a fired entry's re-arm (its value taken and given back, the entry never freed).
//! An entry is 24 bytes of bookkeeping plus the caller's value.

use super::list::{Pos, NIL};

/// A reference to one scheduled entry. Stale once the entry is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryRef {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

pub(crate) struct Entry<T> {
    pub deadline: u64,
    pub prev: u32,
    pub next: u32,
    pub generation: u32,
    pub pos: Pos,
    pub value: Option<T>,
}

const CHUNK_BITS: u32 = 16;
/// Entries per chunk: 2.5 MiB of 40-byte entries.
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = (CHUNK as u32) - 1;

pub(crate) struct Slab<T> {
    /// Each chunk is allocated with room for `CHUNK` entries and filled in order; only the
    /// last one is partly filled.
    chunks: Vec<Vec<Entry<T>>>,
    /// Entries ever pushed: one past the highest index handed out.
    high: usize,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    /// A slab with chunks allocated up front for `capacity` entries (0: none until needed).
    pub fn with_capacity(capacity: usize) -> Slab<T> {
        Slab {
            chunks: (0..capacity.div_ceil(CHUNK))
                .map(|_| Vec::with_capacity(CHUNK))
                .collect(),
            high: 0,
            free_head: NIL,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// One past the highest index handed out so far: every index is below it.
    pub fn index_bound(&self) -> usize {
        self.high
    }

    /// Whether [`Slab::insert`] would take a value: a freed entry, or index space left.
    pub fn has_room(&self) -> bool {
        self.free_head != NIL || u32::try_from(self.high).is_ok_and(|i| i != NIL)
    }

    /// Stores `value` and returns its index. `None` when the index space (u32) is spent.
    pub fn insert(&mut self, deadline: u64, value: T) -> Option<u32> {
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let entry = self.get_mut(index);
            let next = entry.next;
            entry.deadline = deadline;
            entry.prev = NIL;
            entry.next = NIL;
            entry.value = Some(value);
            self.free_head = next;
            index
        } else {
            let index = u32::try_from(self.high).ok().filter(|&i| i != NIL)?;
            let chunk = self.high >> CHUNK_BITS;
            if chunk == self.chunks.len() {
                self.chunks.push(Vec::with_capacity(CHUNK));
            }
            self.high += 1;
            self.chunks[chunk].push(Entry {
                deadline,
                prev: NIL,
                next: NIL,
                generation: 0,
                pos: Pos::FREE,
                value: Some(value),
            });
            index
        };
        self.len += 1;
        Some(index)
    }

    /// Frees `index` and returns its value. The generation moves on, so handles to it go stale.
    pub fn remove(&mut self, index: u32) -> T {
        let value = self.take(index);
        self.release(index);
        value
    }

    /// Takes the value out of the live entry `index`, which stays allocated: [`Slab::release`]
    /// frees it, or [`Slab::refill`] gives it a value again (a fired entry re-armed).
    pub fn take(&mut self, index: u32) -> T {
        let entry = self.get_mut(index);
        debug_assert!(entry.pos != Pos::FREE, "take from free slab entry {index}");
        match entry.value.take() {
            Some(v) => v,
            None => unreachable!("slab entry {index} was live without a value"),
        }
    }

    /// Frees the entry `index`, whose value was taken. The generation moves on, so handles to
    /// it go stale.
    pub fn release(&mut self, index: u32) {
        let free_head = self.free_head;
        let entry = self.get_mut(index);
        debug_assert!(entry.pos != Pos::FREE, "double free of slab entry {index}");
        debug_assert!(
            entry.value.is_none(),
            "release of slab entry {index} with a value"
        );
        entry.generation = entry.generation.wrapping_add(1);
        entry.pos = Pos::FREE;
        entry.next = free_head;
        self.free_head = index;
        self.len -= 1;
    }

    /// Gives the entry `index`, whose value was taken, a deadline and a value again; its
    /// index and generation stay, so handles to it stay valid.
    pub fn refill(&mut self, index: u32, deadline: u64, value: T) {
        let entry = self.get_mut(index);
        debug_assert!(
            entry.pos != Pos::FREE && entry.value.is_none(),
            "refill of slab entry {index}, free or holding a value"
        );
        entry.deadline = deadline;
        entry.value = Some(value);
    }

    /// Entry `index`. Panics when `index` was never handed out (a bug: indices come only from
    /// `insert`).
    #[inline]
    pub fn get(&self, index: u32) -> &Entry<T> {
        let (chunk, at) = self.locate(index);
        // SAFETY: `locate` checked `index < high`. Entries are pushed in index order, chunk by
        // chunk, so chunk `index >> CHUNK_BITS` exists and holds more than `at` entries.
        unsafe { self.chunks.get_unchecked(chunk).get_unchecked(at) }
    }

    /// Entry `index`, to change. Panics like [`Slab::get`].
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut Entry<T> {
        let (chunk, at) = self.locate(index);
        // SAFETY: as in `get`.
        unsafe { self.chunks.get_unchecked_mut(chunk).get_unchecked_mut(at) }
    }

    /// The chunk and the position in it of entry `index`, which must have been handed out.
    /// One comparison instead of two bounds checks through the chunk list: on a slab of a
    /// million entries, the two checks made a cancel 100 ns slower (`benches/wheel.rs`).
    #[inline]
    fn locate(&self, index: u32) -> (usize, usize) {
        assert!(
            (index as usize) < self.high,
            "slab index {index} was never handed out (high {})",
            self.high
        );
        (
            (index >> CHUNK_BITS) as usize,
            (index & CHUNK_MASK) as usize,
        )
    }

    /// The index behind `r` when its entry is still live.
    pub fn resolve(&self, r: EntryRef) -> Option<u32> {
        let entry = self.peek(r.index)?;
        (entry.generation == r.generation && entry.pos != Pos::FREE).then_some(r.index)
    }

    /// Entry `index` if it was ever handed out: for a walk that may hold a stale index
    /// (`warm.rs`), where [`Slab::get`] would panic.
    pub fn peek(&self, index: u32) -> Option<&Entry<T>> {
        self.chunks
            .get((index >> CHUNK_BITS) as usize)?
            .get((index & CHUNK_MASK) as usize)
    }

    /// A reference to the entry at `index`, as it is now.
    pub fn entry_ref(&self, index: u32) -> EntryRef {
        EntryRef {
            index,
            generation: self.get(index).generation,
        }
    }

    /// Heap bytes held by the slab (its chunks' capacity).
    pub fn heap_bytes(&self) -> usize {
        self.chunks.len() * CHUNK * std::mem::size_of::<Entry<T>>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Entry<T>>>()
    }
}
