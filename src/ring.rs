//! One bounded MPSC ring per shard: any thread pushes registrations, cancels and reads to the
//! shard that owns the key; the shard drains it in batches.
//!
//! The queue is crossbeam's `ArrayQueue` (lock-free, bounded). A full ring is back-pressure:
//! the push fails with [`Error::RingFull`], is counted, and nothing is dropped silently.
//!
//! # Waking a parked shard
//!
//! A parked shard sleeps in io_uring on a read of a Unix socket (plus a timer). A producer
//! that finds the shard's `parked` flag set clears it and writes one byte, which completes the
//! read at once: wake-up costs one `write` syscall, and only when the shard is actually
//! parked. The flag handshake is the classic store-fence-load pair on both sides:
//!
//! ```text
//!   producer: push(op); fence(SeqCst); if parked.swap(false) { write(1 byte) }
//!   shard:    parked = true; fence(SeqCst); if !queue.is_empty() { parked = false; don't park }
//! ```
//!
//! Either the shard sees the op, or the producer sees the flag: a wake-up is never lost.
//!
//! # A tenant's share
//!
//! One tenant may hold at most a quarter of a shard's ring at once; past it
//! its requests are refused ([`Error::RingShare`], `503 overloaded`) while other tenants' still
//! enter, so one tenant's churn can fill at most a quarter of the ring, and it takes four
//! flooding tenants at once to fill it for everyone. Tenants are counted in `SHARE_BUCKETS`
//! buckets by a hash of their name (two tenants in one bucket share its quarter): a push adds
//! one to its bucket, and the shard's drain subtracts what it took out in one step per run of
//! ops of one bucket ([`Taken`]), at the latest every 32 ops: a bucket's count may stand up
//! to 32 ops above what the ring holds of it. (A subtraction per op wrote, at every pop, the
//! line the pushing threads write: 50 ns a registration.) The same rule holds for
//! the writes waiting for the shard's durable store (`store/acks.rs`).
//!
//! # Loads and drops of partitions
//!
//! Beside the queue, a shard handed the lease holders takes [`Control`]s from the node's loop:
//! a partition to load or to drop. They do not go through the queue, whose bound is
//! back-pressure for clients: a control refused for room would leave a partition unloaded (its
//! ops refused) or loaded after its lease was lost. They wait in a map by partition instead, the
//! latest one per partition winning (a load purges the partition before it inserts, so a drop
//! followed by a load is the load, and a load followed by a drop is the drop). So what waits is
//! at most one control per partition the shard owns, whatever the loop sends while the shard is
//! busy; a push is a lock held for one map insert, and wakes the shard as a push of an op does.
//! The shard takes them all at the start of its next pass, before the ops. Until it has, the
//! partition is "in flux" (one bit per partition, set and cleared with the map's entry): the
//! shard's gate acts on nothing of it, so an op that arrives between the loop's decision and
//! the shard's next pass is not applied to what the load is about to replace.

use crate::error::Error;
use crate::op::{Control, Op};
use crossbeam_queue::ArrayQueue;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::partition::PARTITIONS;
use crate::quota::{share_bucket, SHARE_BUCKETS};

/// The word and bit of `partition` in `Ring::in_flux`.
fn flux_bit(partition: u32) -> (usize, u64) {
    ((partition / 64) as usize, 1 << (partition % 64))
}

/// Ops popped from a ring whose share is not yet given back ([`Ring::pop_into`]): a run of
/// one share bucket.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    bucket: u8,
    ops: u32,
}

pub(crate) struct Ring {
    shard: usize,
    /// Each op with its tenant's share bucket.
    queue: ArrayQueue<(u8, Op)>,
    /// Ops in the ring per share bucket.
    shares: Box<[AtomicU32]>,
    share: u32,
    parked: AtomicBool,
    /// Set when the shard has stopped for good: ops pushed after it are refused.
    closed: AtomicBool,
    waker: UnixStream,
    rejected: AtomicU64,
    /// Loads and drops of partitions not yet taken by the shard, the latest per partition.
    controls: Mutex<BTreeMap<u32, Control>>,
    /// Set while `controls` may hold one: the shard's cheap look before taking the lock.
    controlled: AtomicBool,
    /// One bit per partition, set exactly while `controls` holds one for it (both change under
    /// its lock): the shard acts on no partition whose load or drop is on its way.
    in_flux: Box<[AtomicU64]>,
}

impl Ring {
    /// A ring and the socket end its shard reads wake-ups from.
    pub fn new(shard: usize, capacity: usize) -> std::io::Result<(Ring, UnixStream)> {
        let (waker, wakee) = UnixStream::pair()?;
        waker.set_nonblocking(true)?;
        wakee.set_nonblocking(true)?;
        let capacity = capacity.max(1);
        let ring = Ring {
            shard,
            queue: ArrayQueue::new(capacity),
            shares: (0..SHARE_BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            share: u32::try_from(capacity / 4).unwrap_or(u32::MAX).max(1),
            parked: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waker,
            rejected: AtomicU64::new(0),
            controls: Mutex::new(BTreeMap::new()),
            controlled: AtomicBool::new(false),
            in_flux: (0..PARTITIONS.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        };
        Ok((ring, wakee))
    }

    /// Pushes `op` for `tenant` (the name its share is counted by; "" for ops of no tenant).
    pub fn push(&self, tenant: &str, op: Op) -> Result<(), Error> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        let bucket = share_bucket(tenant);
        let held = &self.shares[usize::from(bucket)];
        if held.fetch_add(1, Ordering::Relaxed) >= self.share {
            held.fetch_sub(1, Ordering::Relaxed);
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::RingShare {
                shard: self.shard,
                share: self.share as usize,
            });
        }
        if self.queue.push((bucket, op)).is_err() {
            held.fetch_sub(1, Ordering::Relaxed);
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::RingFull {
                shard: self.shard,
                capacity: self.queue.capacity(),
            });
        }
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::Relaxed) {
            // The shard closed the ring after our first look: its last sweep may have missed
            // this op, so sweep again here (the queue takes pops from any thread).
            self.refuse_all();
            return Ok(());
        }
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            self.wake();
        }
        Ok(())
    }

    /// The shard stops for good: every op on the ring, and every op pushed later, is answered
    /// `ShuttingDown`. The same store-fence-load pair as parking: either the sweep here sees a
    /// racing producer's op, or that producer sees `closed` and sweeps itself.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.refuse_all();
    }

    fn refuse_all(&self) {
        while let Some(op) = self.pop() {
            op.refuse(Error::ShuttingDown);
        }
    }

    /// Hands the shard a load or drop of `partition`, replacing one that waits for it (see the
    /// module doc), and wakes the shard if it is parked. Never blocks on the shard and never
    /// refuses; after the shard stopped for good, it is dropped with the ring.
    pub fn control(&self, partition: u32, control: Control) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut controls = self.lock_controls();
            controls.insert(partition, control);
            self.flux(partition, true);
        }
        self.controlled.store(true, Ordering::SeqCst);
        self.nudge();
    }

    /// Whether a load or drop of `partition` waits for the shard: until the shard takes it,
    /// what the shard holds of the partition may be stale.
    pub fn awaits_control(&self, partition: u32) -> bool {
        let (word, bit) = flux_bit(partition);
        self.in_flux
            .get(word)
            .is_some_and(|w| w.load(Ordering::SeqCst) & bit != 0)
    }

    fn flux(&self, partition: u32, on: bool) {
        let (word, bit) = flux_bit(partition);
        if let Some(w) = self.in_flux.get(word) {
            if on {
                w.fetch_or(bit, Ordering::SeqCst);
            } else {
                w.fetch_and(!bit, Ordering::SeqCst);
            }
        }
    }

    /// The loads and drops waiting, by partition (empty when none waits).
    pub fn take_controls(&self) -> BTreeMap<u32, Control> {
        if !self.controlled.swap(false, Ordering::AcqRel) {
            return BTreeMap::new();
        }
        let mut controls = self.lock_controls();
        for &p in controls.keys() {
            self.flux(p, false);
        }
        std::mem::take(&mut *controls)
    }

    fn lock_controls(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Control>> {
        // A poisoned map still holds whole entries: inserts and takes only.
        self.controls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether ops or controls wait for the shard.
    pub fn has_work(&self) -> bool {
        !self.queue.is_empty() || self.controlled.load(Ordering::Acquire)
    }

    /// Wakes the shard if it is parked: for work that reaches it by another way than the
    /// ring (a delivery's outcome, from a task on the shard's own executor).
    pub fn nudge(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            self.wake();
        }
    }

    /// Writes one wake-up byte. A full socket buffer already holds wake-ups: nothing to do.
    pub fn wake(&self) {
        let _ = (&self.waker).write(&[1]);
    }

    pub fn pop(&self) -> Option<Op> {
        let mut taken = Taken::default();
        let op = self.pop_into(&mut taken);
        self.give_back(&mut taken);
        op
    }

    /// [`Ring::pop`] for a drain: the op's share is given back later, by [`Ring::give_back`],
    /// one subtraction for a run of ops of one share bucket (or at once, when the bucket
    /// changes). Every subtraction is a write to a line the pushing threads write too.
    pub fn pop_into(&self, taken: &mut Taken) -> Option<Op> {
        let (bucket, op) = self.queue.pop()?;
        if taken.ops > 0 && taken.bucket != bucket {
            self.give_back(taken);
        }
        taken.bucket = bucket;
        taken.ops += 1;
        Some(op)
    }

    /// Gives back the shares of the ops `taken` holds.
    pub fn give_back(&self, taken: &mut Taken) {
        if taken.ops == 0 {
            return;
        }
        let held = self.shares[usize::from(taken.bucket)].fetch_sub(taken.ops, Ordering::Relaxed);
        debug_assert!(
            held >= taken.ops,
            "pops take out ops their pushes counted: {held} held, {taken:?} taken"
        );
        taken.ops = 0;
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The shard is about to park: returns false (and stays awake) if work is already there.
    pub fn prepare_park(&self) -> bool {
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.has_work() {
            self.parked.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn unpark(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
