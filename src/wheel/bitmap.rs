//! One bit per slab index, in chunks that match the slab's: the table's record of which timers
//! a poll fired (`table.rs`).
//!
//! The bitmap grows with the slab, one chunk of [`WORDS`] words (8 KiB) for each chunk of slab
//! entries, and never moves what it holds. A single vector grown by doubling (as it was) copied
//! and zeroed half of itself at every power of two of the slab: at 2^22 and 2^23 timers that
//! was 1 and 2 MiB of fresh pages in one insert, which stopped the inserting shard for 0.6 to
//! 5.5 ms on a virtual machine, where a page fault costs microseconds. A chunk's pages are
//! written (zeroed) when it is added, during an insert, so that a burst's fires never wait for
//! a fresh page.

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

    fn word(&mut self, index: u32) -> &mut u64 {
        let i = index as usize;
        &mut self.chunks[i / CHUNK][(i % CHUNK) / 64]
    }

    pub fn set(&mut self, index: u32) {
        *self.word(index) |= 1 << (index % 64);
    }

    pub fn clear(&mut self, index: u32) {
        *self.word(index) &= !(1 << (index % 64));
    }

    pub fn get(&self, index: u32) -> bool {
        let i = index as usize;
        self.chunks[i / CHUNK][(i % CHUNK) / 64] & (1 << (index % 64)) != 0
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_across_chunks_are_set_read_and_cleared_alone() {
        let mut bits = FiredBits::default();
        let last = (3 * CHUNK - 1) as u32;
        bits.cover(last);
        assert_eq!(bits.covered(), 3 * CHUNK);
        let picked = [
            0,
            63,
            64,
            CHUNK as u32 - 1,
            CHUNK as u32,
            2 * CHUNK as u32 + 5,
            last,
        ];
        for &i in &picked {
            bits.set(i);
        }
        for i in 0..=last {
            assert_eq!(bits.get(i), picked.contains(&i), "bit {i}");
        }
        bits.clear(CHUNK as u32);
        assert!(!bits.get(CHUNK as u32) && bits.get(CHUNK as u32 - 1));
        bits.clear_all();
        assert!((0..=last).all(|i| !bits.get(i)));
    }

    /// Growing never adds more than one chunk's bytes at a time, at any size: the step that
    /// used to double the whole bitmap (and stopped an insert for milliseconds) is gone.
    #[test]
    fn covering_one_more_index_adds_at_most_one_chunk() {
        let mut bits = FiredBits::default();
        let mut before = bits.heap_bytes();
        let mut largest = 0;
        for index in (0..(1u32 << 22)).step_by(997) {
            bits.cover(index);
            let now = bits.heap_bytes();
            largest = largest.max(now - before);
            before = now;
        }
        // One chunk, and the list of chunks doubling (16 bytes a chunk, far less).
        assert!(largest <= 2 * WORDS * 8, "a step grew {largest} bytes");
        assert_eq!(bits.covered(), 1 << 22);
    }
}
