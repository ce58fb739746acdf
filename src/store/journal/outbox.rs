//! The outbox: records the shard encoded and the commit task has not yet made durable, in the
//! order the shard made them, with the acknowledgement each one owes.
//!
//! The shard appends a record's frame to a ring of bytes and a mark (where the frame ends,
//! its ack, when it was queued) to a queue. The commit task takes a prefix of whole records,
//! writes it, and pops that prefix only once it is durable; on a failure nothing is popped, so
//! the same prefix is written again.
//!
//! Invariants: bytes and marks leave only from the front, only after the commit that carried
//! them is durable. The acks, their admission limits and their timeouts are `store::acks`'s.
//! Records a caller waits for are admitted while fewer than `limit` records wait; records no
//! caller waits for (fires, a webhook's attempts and outcomes, dead letters, leases) count as
//! fires, and at `fire_limit` of them the shard stops firing, which is what makes them. So
//! the outbox holds at most `limit + fire_limit` records, plus what the webhook deliveries
//! already in flight report when they end (at most two records each, bounded by the
//! webhook's in-flight caps). Once the journal failed nothing more is queued (`ShardJournal::push`).
//!
//! Cost: the frame encoded into a scratch buffer and copied on, and one push of its end, per
//! write. The bytes and the ends are kept in fixed chunks that never move (1 MiB of bytes;
//! `store::deque` for the ends), and a chunk a commit emptied is taken again by the next, so a
//! backlog that holds steady allocates nothing and a growing one adds a chunk at a time. (The
//! bytes were one `Vec` whose front each commit drained, moving everything queued after the
//! commit to the front, tens of megabytes a commit on the shard's thread once the disk fell
//! far behind; then a `VecDeque`, which copied the whole backlog in one step at each new
//! peak.)

use crate::error::Error;
use crate::store::acks::Acks;
use crate::store::deque::Deque;
use crate::store::Ack;
use std::collections::VecDeque;
use std::time::Duration;

pub struct Outbox {
    bytes: Bytes,
    /// Where a record is encoded before it joins `bytes`.
    scratch: Vec<u8>,
    /// The stream position of `bytes[0]`.
    base: u64,
    /// Where each queued record's frame ends in `bytes`, counted from the outbox's first byte
    /// ever.
    ends: Deque<u64>,
    /// The callers' acks, one per record, in the same order.
    pub acks: Acks,
}

/// A prefix of the outbox, as the commit task takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Entries: records, and answers that wait for them ([`Outbox::push_answer`]).
    pub records: usize,
    pub bytes: usize,
    /// The records among them that have bytes: what the commit's `batch` record counts.
    pub frames: usize,
}

impl Outbox {
    pub fn new(limit: usize, fire_limit: usize, ack_timeout: Duration) -> Outbox {
        Outbox {
            bytes: Bytes::default(),
            scratch: Vec::new(),
            base: 0,
            ends: Deque::new(),
            acks: Acks::new(limit, fire_limit, ack_timeout),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends one record: `encode` writes its frame into the buffer. A record no caller
    /// waits for counts against the acks' fire limit (`Acks::fire_room`), fire or not: the
    /// shard holds due timers back at that bound, so such records stay bounded while the disk
    /// cannot take them (see the invariants above).
    /// `tenant` is whose write it is (counted against its share when a caller waits).
    pub fn push(&mut self, encode: impl FnOnce(&mut Vec<u8>) -> usize, ack: Ack, tenant: &str) {
        self.scratch.clear();
        encode(&mut self.scratch);
        self.bytes.push(&self.scratch);
        self.ends.push_back(self.end());
        let detached = !ack.is_waiting();
        self.acks.push(ack, detached, tenant);
        debug_assert_eq!(self.ends.len(), self.acks.len(), "one ack per record");
    }

    /// An answer that waits for every record queued before it: an entry of no bytes, which
    /// the commit that carries it counts in no `batch` record (`Batch::frames`).
    pub fn push_answer(&mut self, ack: Ack, tenant: &str) {
        self.ends.push_back(self.end());
        self.acks.push(ack, false, tenant);
    }

    /// The stream position after the last record queued.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len as u64
    }

    /// The stream position up to which records left as durable (or given up).
    pub fn committed(&self) -> u64 {
        self.base
    }

    /// The next commit: whole records from the front, at most `max_records` and, past the
    /// first, at most `max_bytes`.
    pub fn batch(&self, max_records: usize, max_bytes: usize) -> Batch {
        let mut b = Batch {
            records: 0,
            bytes: 0,
            frames: 0,
        };
        for &end in self.ends.iter().take(max_records) {
            let bytes = (end - self.base) as usize;
            if b.records > 0 && bytes > max_bytes {
                break;
            }
            b = Batch {
                records: b.records + 1,
                frames: b.frames + usize::from(bytes > b.bytes),
                bytes,
            };
        }
        b
    }

    /// The bytes of `batch`, in order, in pieces (one per chunk it spans).
    pub fn bytes(&self, batch: Batch) -> impl Iterator<Item = &[u8]> {
        self.bytes.first(batch.bytes)
    }

    /// Pops `batch` (durable now, or never to be), answering each ack with `outcome`.
    pub fn complete(&mut self, batch: Batch, outcome: Result<(), Error>) {
        debug_assert!(
            batch.records <= self.ends.len(),
            "a batch of queued records"
        );
        let mut last_end = self.base;
        for _ in 0..batch.records {
            let Some(end) = self.ends.pop_front() else {
                break;
            };
            last_end = end;
            self.acks.pop(outcome.clone());
        }
        debug_assert_eq!(
            last_end - self.base,
            batch.bytes as u64,
            "a batch is a prefix of whole records"
        );
        debug_assert_eq!(self.ends.len(), self.acks.len(), "one ack per record");
        let n = batch.bytes.min(self.bytes.len);
        self.bytes.pop(n);
        self.base += n as u64;
    }

    /// Answers `outcome` to everything queued and forgets it (the store failed for good).
    pub fn abandon(&mut self, outcome: Result<(), Error>) {
        let all = Batch {
            records: self.ends.len(),
            bytes: self.bytes.len,
            frames: 0,
        };
        self.complete(all, outcome);
    }
}

/// Bytes per chunk of the outbox's bytes.
const BYTES_CHUNK: usize = 1 << 20;

/// A FIFO of bytes in chunks of [`BYTES_CHUNK`]: pushed at the back, popped at the front, read
/// in pieces. Every chunk but the last is full; the first is read from `head`.
#[derive(Default)]
struct Bytes {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes of the first chunk already popped.
    head: usize,
    len: usize,
    /// A chunk emptied by a pop, for the next push that needs one.
    spare: Option<Vec<u8>>,
}

impl Bytes {
    fn push(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.chunks.back().is_none_or(|c| c.len() == BYTES_CHUNK) {
                let mut chunk = self
                    .spare
                    .take()
                    .unwrap_or_else(|| Vec::with_capacity(BYTES_CHUNK));
                chunk.clear();
                self.chunks.push_back(chunk);
            }
            let Some(last) = self.chunks.back_mut() else {
                return;
            };
            let n = (BYTES_CHUNK - last.len()).min(data.len());
            last.extend_from_slice(&data[..n]);
            data = &data[n..];
            self.len += n;
        }
    }

    /// Drops the first `n` bytes.
    fn pop(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        while let Some(first) = self.chunks.front() {
            let left = first.len() - self.head;
            if n < left {
                self.head += n;
                return;
            }
            n -= left;
            self.spare = self.chunks.pop_front();
            self.head = 0;
        }
    }

    /// The first `n` bytes, in pieces.
    fn first(&self, n: usize) -> impl Iterator<Item = &[u8]> {
        let mut left = n.min(self.len);
        let mut head = self.head;
        self.chunks.iter().map_while(move |chunk| {
            if left == 0 {
                return None;
            }
            let piece = &chunk[head.min(chunk.len())..];
            head = 0;
            let take = piece.len().min(left);
            left -= take;
            Some(&piece[..take])
        })
    }

    /// Heap bytes of the chunks.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>()
            + self.spare.as_ref().map_or(0, Vec::capacity)
    }
}

crate::store::durable::queue_with_acks_field!(Outbox);

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod tests;
