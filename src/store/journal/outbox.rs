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
//! Cost: the frame encoded into a scratch buffer and copied onto the ring, and one push of its
//! end (onto fixed chunks, `store::deque`) per write, no allocation once the ring has grown; a
//! commit's pop moves no byte. (The bytes were one `Vec` whose front each commit drained,
//! moving everything queued after the commit to the front: tens of megabytes a commit, on the
//! shard's thread, once the disk fell far behind.) The ring of bytes itself still doubles, in
//! one step, at each new peak of the backlog.

use crate::error::Error;
use crate::store::acks::Acks;
use crate::store::deque::Deque;
use crate::store::Ack;
use std::collections::VecDeque;
use std::time::Duration;

pub struct Outbox {
    bytes: VecDeque<u8>,
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
    pub records: usize,
    pub bytes: usize,
}

impl Outbox {
    pub fn new(limit: usize, fire_limit: usize, ack_timeout: Duration) -> Outbox {
        Outbox {
            bytes: VecDeque::new(),
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
        self.bytes.extend(&self.scratch);
        self.ends.push_back(self.end());
        let detached = !ack.is_waiting();
        self.acks.push(ack, detached, tenant);
        debug_assert_eq!(self.ends.len(), self.acks.len(), "one ack per record");
    }

    /// The stream position after the last record queued.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
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
        };
        for &end in self.ends.iter().take(max_records) {
            let bytes = (end - self.base) as usize;
            if b.records > 0 && bytes > max_bytes {
                break;
            }
            b = Batch {
                records: b.records + 1,
                bytes,
            };
        }
        b
    }

    /// The bytes of `batch`, in two pieces (the ring may wrap within it; either may be empty).
    pub fn bytes(&self, batch: Batch) -> (&[u8], &[u8]) {
        let (front, back) = self.bytes.as_slices();
        let n = batch.bytes;
        match n.checked_sub(front.len()) {
            None => (&front[..n], &[]),
            Some(rest) => (front, &back[..rest.min(back.len())]),
        }
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
        let n = batch.bytes.min(self.bytes.len());
        self.bytes.drain(..n);
        self.base += n as u64;
    }

    /// Answers `outcome` to everything queued and forgets it (the store failed for good).
    pub fn abandon(&mut self, outcome: Result<(), Error>) {
        let all = Batch {
            records: self.ends.len(),
            bytes: self.bytes.len(),
        };
        self.complete(all, outcome);
    }
}

crate::store::durable::queue_with_acks_field!(Outbox);

#[cfg(test)]
mod tests {
    use super::*;

    fn push(o: &mut Outbox, n: usize) {
        o.push(
            |b| {
                b.extend(std::iter::repeat_n(7u8, n));
                n
            },
            Ack::None,
            "",
        );
    }

    #[test]
    fn a_batch_takes_whole_records_within_its_bounds() {
        let mut o = Outbox::new(10, 10, Duration::from_secs(2));
        push(&mut o, 10);
        push(&mut o, 20);
        push(&mut o, 30);
        assert_eq!(
            o.batch(10, 35),
            Batch {
                records: 2,
                bytes: 30
            }
        );
        assert_eq!(o.batch(1, 1).records, 1, "one record always goes");
        let b = o.batch(2, 1000);
        o.complete(b, Ok(()));
        assert_eq!(o.len(), 1);
        assert_eq!(
            o.batch(10, 1000),
            Batch {
                records: 1,
                bytes: 30
            }
        );
        let (front, back) = o.bytes(o.batch(10, 1000));
        assert_eq!(front.len() + back.len(), 30);
    }

    /// A commit's pop leaves the records queued after it where they are: with one buffer
    /// drained from the front, every commit moved the whole backlog behind it.
    #[test]
    fn a_pop_moves_none_of_the_bytes_queued_after_it() {
        let mut o = Outbox::new(10, 10, Duration::from_secs(2));
        push(&mut o, 1_000);
        push(&mut o, 100_000);
        let all = o.batch(2, usize::MAX);
        let second_at = o.bytes(all).0[1_000..].as_ptr();
        let first = o.batch(1, usize::MAX);
        o.complete(first, Ok(()));
        let (front, back) = o.bytes(o.batch(1, usize::MAX));
        assert_eq!(front.len() + back.len(), 100_000);
        assert_eq!(front.as_ptr(), second_at, "the queued record was moved");
    }

    /// A batch's bytes are the records' frames in order, whether or not the ring wraps
    /// within them, and a commit's pop leaves the rest as it was.
    #[test]
    fn a_batch_shows_its_frames_in_order_across_the_ring_s_wrap() {
        let mut o = Outbox::new(1_000, 1_000, Duration::from_secs(2));
        let mut queued: VecDeque<u8> = VecDeque::new();
        let mut next = 0u8;
        for round in 0..200usize {
            for _ in 0..(round % 7 + 1) {
                let len = (usize::from(next) * 13) % 50 + 1;
                let frame: Vec<u8> = (0..len).map(|i| next.wrapping_add(i as u8)).collect();
                queued.extend(&frame);
                o.push(
                    |b| {
                        b.extend_from_slice(&frame);
                        len
                    },
                    Ack::None,
                    "",
                );
                next = next.wrapping_add(1);
            }
            let batch = o.batch(round % 5 + 1, 64);
            let (front, back) = o.bytes(batch);
            let got: Vec<u8> = front.iter().chain(back).copied().collect();
            let want: Vec<u8> = queued.drain(..batch.bytes).collect();
            assert_eq!(got, want, "round {round}");
            o.complete(batch, Ok(()));
            assert_eq!(o.end() - o.committed(), queued.len() as u64);
        }
    }
}
