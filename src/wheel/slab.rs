//! The wheel's storage: a slab of entries addressed by `u32` index, with a free list and a
//! generation per slot, so a stale [`Handle`] (its timer fired, cancelled, or replaced) is
//! detected instead of touching someone else's timer.
//!
//! Cost model: insert pops the free list or pushes onto the vector (amortised O(1), and no
//! allocation at all once `with_capacity` covers the peak); remove is O(1). An entry is
//! 24 bytes of bookkeeping plus the caller's value.

use super::list::{Pos, NIL};

/// A reference to one scheduled entry. Stale once the entry is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
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

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub fn with_capacity(capacity: usize) -> Slab<T> {
        Slab {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// One past the highest index handed out so far: every index is below it.
    pub fn index_bound(&self) -> usize {
        self.entries.len()
    }

    /// Stores `value` and returns its index. `None` when the index space (u32) is spent.
    pub fn insert(&mut self, deadline: u64, value: T) -> Option<u32> {
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.deadline = deadline;
            entry.prev = NIL;
            entry.next = NIL;
            entry.value = Some(value);
            index
        } else {
            let index = u32::try_from(self.entries.len())
                .ok()
                .filter(|&i| i != NIL)?;
            self.entries.push(Entry {
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
        let free_head = self.free_head;
        let entry = &mut self.entries[index as usize];
        debug_assert!(entry.pos != Pos::FREE, "double free of slab entry {index}");
        entry.generation = entry.generation.wrapping_add(1);
        entry.pos = Pos::FREE;
        entry.next = free_head;
        self.free_head = index;
        self.len -= 1;
        match entry.value.take() {
            Some(v) => v,
            None => unreachable!("slab entry {index} was live without a value"),
        }
    }

    pub fn get(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub fn get_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }

    /// The index behind `handle` when it is still live.
    pub fn resolve(&self, handle: Handle) -> Option<u32> {
        let entry = self.entries.get(handle.index as usize)?;
        (entry.generation == handle.generation && entry.pos != Pos::FREE).then_some(handle.index)
    }

    pub fn handle(&self, index: u32) -> Handle {
        Handle {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// Heap bytes held by the slab (its vector's capacity).
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry<T>>()
    }
}
