//! What a table's poll records of the timers it fires (`table.rs`), kept so that recording
//! never stops a burst: neither structure grows by copying itself into fresh pages.
//!
//! - [`FiredBits`]: one bit per slab index, in chunks that match the slab's. The bitmap grows
//!   with the slab, one chunk of [`WORDS`] words (8 KiB) for each chunk of slab entries, and
//!   never moves what it holds. A single vector grown by doubling (as it was) copied and zeroed
//!   half of itself at every power of two of the slab: at 2^22 and 2^23 timers that was 1 and
//!   2 MiB of fresh pages in one insert, which stopped the inserting shard for 0.6 to 5.5 ms
//!   on a virtual machine, where a page fault costs microseconds. A chunk's pages are written
//!   (zeroed) when it is added, during an insert, so that a burst's fires never wait for a
//!   fresh page.
//! - [`FiredList`]: the (hash, slab index) of each timer a poll fired, for the index removals
//!   after it, in chunks of [`LIST_CHUNK`] entries. A poll of a big table records up to 1/32 of
//!   it (250,000 at 8 M pending); a vector doubling inside the poll copied up to 2 MiB between
//!   two fires, and a 400,000-timer burst out of 8 M waited 1 to 5.6 ms at once. A new chunk is
//!   one allocation and copies nothing; the chunks a small poll needs are kept between polls.

use super::slab::CHUNK;

/// Words of one chunk: a bit for each entry of a slab chunk.
const WORDS: usize = CHUNK / 64;

#[derive(Default)]
pub(crate) struct FiredBits {
    chunks: Vec<Box<[u64]>>,
}

impl FiredBits {
    /// Makes room for bit `index` (and every bit below it); a no-op once there is.
    pub fn cover(&mut self, index: u32) {
        let needed = index as usize / CHUNK + 1;
        while self.chunks.len() < needed {
            // Allocated, then written: a zeroed allocation (`vec![0; WORDS]`) can hand over
            // pages not yet touched, and their faults would come in a burst instead.
            #[allow(clippy::slow_vector_initialization)]
            let mut chunk = Vec::with_capacity(WORDS);
            chunk.resize(WORDS, 0u64);
            self.chunks.push(chunk.into_boxed_slice());
        }
    }

    /// Bits this bitmap holds (a multiple of the slab's chunk).
    pub fn covered(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Bit `index`'s chunk, word in it, and mask.
    fn locate(index: u32) -> (usize, usize, u64) {
        let i = index as usize;
        (i / CHUNK, (i % CHUNK) / 64, 1 << (index % 64))
    }

    fn word(&mut self, index: u32) -> (&mut u64, u64) {
        let (chunk, word, mask) = Self::locate(index);
        (&mut self.chunks[chunk][word], mask)
    }

    pub fn set(&mut self, index: u32) {
        let (word, mask) = self.word(index);
        *word |= mask;
    }

    pub fn clear(&mut self, index: u32) {
        let (word, mask) = self.word(index);
        *word &= !mask;
    }

    pub fn get(&self, index: u32) -> bool {
        let (chunk, word, mask) = Self::locate(index);
        self.chunks[chunk][word] & mask != 0
    }

    /// Clears every bit.
    pub fn clear_all(&mut self) {
        for chunk in &mut self.chunks {
            chunk.fill(0);
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.chunks.len() * WORDS * 8 + self.chunks.capacity() * std::mem::size_of::<Box<[u64]>>()
    }
}

/// Entries of one [`FiredList`] chunk: 64 KiB of (hash, slab index).
const LIST_CHUNK: usize = 4096;

/// Chunks a list keeps between polls: 65,536 entries, 1 MiB.
const LIST_KEPT: usize = 16;

#[derive(Default)]
pub(crate) struct FiredList {
    /// Filled in order; those past `used` are empty, kept for the next poll.
    chunks: Vec<Vec<(u64, u32)>>,
    /// Chunks holding entries: every one before the last is full.
    used: usize,
}

impl FiredList {
    pub fn push(&mut self, entry: (u64, u32)) {
        if self.used == 0 || self.chunks[self.used - 1].len() == LIST_CHUNK {
            if self.used == self.chunks.len() {
                self.chunks.push(Vec::with_capacity(LIST_CHUNK));
            }
            self.used += 1;
        }
        self.chunks[self.used - 1].push(entry);
    }

    pub fn iter(&self) -> impl Iterator<Item = &(u64, u32)> {
        self.chunks[..self.used].iter().flatten()
    }

    /// Empties the list, keeping at most [`LIST_KEPT`] chunks' room for the next poll: a
    /// burst's big list is given back.
    pub fn clear(&mut self) {
        for chunk in &mut self.chunks[..self.used] {
            chunk.clear();
        }
        self.used = 0;
        self.chunks.truncate(LIST_KEPT);
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.chunks.len() * LIST_CHUNK * std::mem::size_of::<(u64, u32)>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<(u64, u32)>>()
    }
}

#[cfg(test)]
#[path = "fired_tests.rs"]
mod tests;
