//! The outbox: records the shard encoded and the commit task has not yet made durable, in the
//! order the shard made them, with the acknowledgement each one owes.
//!
//! The shard appends a record's frame to one byte buffer and a mark (where the frame ends,
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
//! Cost: one `Vec` append (the frame) and one `VecDeque` push per write, no allocation once
//! the buffers have grown; a commit's pop moves only the bytes queued after it.

use crate::error::Error;
use crate::store::acks::Acks;
use crate::store::Ack;
use std::collections::VecDeque;
use std::time::Duration;

pub struct Outbox {
    bytes: Vec<u8>,
    /// The stream position of `bytes[0]`.
    base: u64,
    /// Where each queued record's frame ends in `bytes`, counted from the outbox's first byte
    /// ever.
    ends: VecDeque<u64>,
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
            bytes: Vec::new(),
            base: 0,
            ends: VecDeque::new(),
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
        encode(&mut self.bytes);
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

    /// The bytes of `batch`.
    pub fn bytes(&self, batch: Batch) -> &[u8] {
        self.bytes.get(..batch.bytes).unwrap_or_default()
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
        assert_eq!(o.bytes(o.batch(10, 1000)).len(), 30);
    }
}
