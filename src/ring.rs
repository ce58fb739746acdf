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

use crate::error::Error;
use crate::units::{Deadline, UtcMicros};
use crate::wheel::table::PackedTimer;
use crossbeam_queue::ArrayQueue;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// A request for the owning shard.
pub(crate) enum Op {
    Schedule {
        timer: PackedTimer,
        deadline: Deadline,
        reply: Option<oneshot::Sender<Result<Scheduled, Error>>>,
    },
    Cancel {
        timer: PackedTimer,
        reply: oneshot::Sender<Result<Cancelled, Error>>,
    },
    Get {
        timer: PackedTimer,
        reply: oneshot::Sender<Option<TimerInfo>>,
    },
}

/// The answer to a schedule (upsert).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub version: u64,
    pub deadline: UtcMicros,
    /// A pending timer under the same key was replaced (HTTP 200 rather than 201).
    pub replaced: bool,
}

/// The answer to a cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// The pending timer was removed; it will not fire.
    Cancelled { version: u64, deadline: UtcMicros },
    /// No timer is pending under that key: unknown, already fired, or already cancelled.
    NotFound,
}

/// A pending timer, as `get` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerInfo {
    pub deadline: UtcMicros,
    pub version: u64,
    pub payload: Vec<u8>,
}

pub(crate) struct Ring {
    shard: usize,
    queue: ArrayQueue<Op>,
    parked: AtomicBool,
    waker: UnixStream,
    rejected: AtomicU64,
}

impl Ring {
    /// A ring and the socket end its shard reads wake-ups from.
    pub fn new(shard: usize, capacity: usize) -> std::io::Result<(Ring, UnixStream)> {
        let (waker, wakee) = UnixStream::pair()?;
        waker.set_nonblocking(true)?;
        wakee.set_nonblocking(true)?;
        let ring = Ring {
            shard,
            queue: ArrayQueue::new(capacity.max(1)),
            parked: AtomicBool::new(false),
            waker,
            rejected: AtomicU64::new(0),
        };
        Ok((ring, wakee))
    }

    pub fn push(&self, op: Op) -> Result<(), Error> {
        if self.queue.push(op).is_err() {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::RingFull {
                shard: self.shard,
                capacity: self.queue.capacity(),
            });
        }
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            self.wake();
        }
        Ok(())
    }

    /// Writes one wake-up byte. A full socket buffer already holds wake-ups: nothing to do.
    pub fn wake(&self) {
        let _ = (&self.waker).write(&[1]);
    }

    pub fn pop(&self) -> Option<Op> {
        self.queue.pop()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The shard is about to park: returns false (and stays awake) if work is already there.
    pub fn prepare_park(&self) -> bool {
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.queue.is_empty() {
            self.parked.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn unpark(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }
}
