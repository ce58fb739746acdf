//! A FIFO in fixed chunks: the queues a durable store keeps on the shard's thread (the writes
//! waiting for Redis, the acks they owe, where each journal record ends), which grow to their
//! bound whenever the store falls behind.
//!
//! A `VecDeque` grows by doubling, and its doubling copies everything queued into fresh pages
//! in one step: with 200,000 Redis writes of 232 bytes queued, 30 MB at once, between two
//! fires. Here a push adds at most one chunk of about 64 KiB, nothing queued ever moves, and a
//! chunk emptied at the front is kept (one) for the next push at the back, so a queue that
//! holds steady allocates nothing.
//!
//! Every chunk but the first and the last is full; so the `i`-th element is found by
//! arithmetic, in O(1).

use std::collections::VecDeque;

/// Bytes per chunk, roughly: 64 KiB, and never fewer than 16 elements.
const CHUNK_BYTES: usize = 64 << 10;

pub struct Deque<T> {
    chunks: VecDeque<VecDeque<T>>,
    /// An emptied chunk kept for the next one needed.
    spare: Option<VecDeque<T>>,
    len: usize,
}

impl<T> Default for Deque<T> {
    fn default() -> Deque<T> {
        Deque {
            chunks: VecDeque::new(),
            spare: None,
            len: 0,
        }
    }
}

impl<T> Deque<T> {
    /// Elements per chunk.
    const CHUNK: usize = {
        let n = CHUNK_BYTES
            / (if size_of::<T>() == 0 {
                1
            } else {
                size_of::<T>()
            });
        if n < 16 {
            16
        } else {
            n
        }
    };

    pub fn new() -> Deque<T> {
        Deque::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_back(&mut self, value: T) {
        if self.chunks.back().is_none_or(|c| c.len() == Self::CHUNK) {
            let chunk = self
                .spare
                .take()
                .unwrap_or_else(|| VecDeque::with_capacity(Self::CHUNK));
            self.chunks.push_back(chunk);
        }
        if let Some(last) = self.chunks.back_mut() {
            last.push_back(value);
            self.len += 1;
        }
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let first = self.chunks.front_mut()?;
        let value = first.pop_front()?;
        self.len -= 1;
        if first.is_empty() {
            // An emptied chunk: the next push at the back takes it again.
            self.spare = self.chunks.pop_front();
        }
        Some(value)
    }

    pub fn back(&self) -> Option<&T> {
        self.chunks.back()?.back()
    }

    /// Where the `i`-th element is: its chunk and its place in it.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        let first = self.chunks.front()?.len();
        if i < first {
            return Some((0, i));
        }
        let rest = i - first;
        Some((1 + rest / Self::CHUNK, rest % Self::CHUNK))
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        let (c, at) = self.locate(i)?;
        self.chunks.get(c)?.get(at)
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let (c, at) = self.locate(i)?;
        self.chunks.get_mut(c)?.get_mut(at)
    }

    /// From the front, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Heap bytes of the chunks (not the list of chunks).
    #[cfg(test)]
    fn chunk_bytes(&self) -> usize {
        (self.chunks.iter().map(VecDeque::capacity).sum::<usize>()
            + self.spare.as_ref().map_or(0, VecDeque::capacity))
            * size_of::<T>()
    }
}

#[cfg(test)]
#[path = "deque_tests.rs"]
mod tests;
