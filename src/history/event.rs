//! What the history records: an [`Event`] (a fire, or a delivery attempt's end) with its
//! [`Outcome`], and a shard's [`Recorder`], the buffer events wait in until the shard hands
//! them to the history's thread once a pass (`mod.rs` tells the flow).

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

/// Events a shard holds between two passes, at most.
pub const BUFFER_MAX: usize = 4096;

/// Attempts an entry keeps (its last ones): a re-driven dead letter adds more.
pub const ATTEMPTS_KEPT: usize = 100;

/// Where a fire stands after its last event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Fired with no webhook (the stream, the in-process handler): done.
    Fired,
    /// Went to its tenant's pull queue.
    Queued,
    /// Its webhook delivery is under way: an attempt in flight or the next one waiting.
    Retrying,
    /// An attempt was answered `2xx`.
    Delivered,
    /// Became a dead letter.
    DeadLettered,
}

/// One attempt's end: the receiver's status, or the class of the error (`last_error`'s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub at_us: u64,
    pub status: Option<u16>,
    pub error: Option<Box<str>>,
}

/// One thing that happened to a timer's firing: the fire itself (`attempt` none, `at_us`
/// when it fired) or the end of a delivery attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub tenant: Box<str>,
    pub key: Box<str>,
    pub version: u64,
    pub fire_at_us: u64,
    pub at_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Attempt>,
    pub outcome: Outcome,
}

/// A shard's end of the history: its buffer of events and the channel to the history's
/// thread. Lives on the shard's thread (inside its `Followups`).
pub struct Recorder {
    buf: RefCell<Vec<Event>>,
    tx: SyncSender<Vec<Event>>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    pub(crate) fn new(tx: SyncSender<Vec<Event>>, dropped: Arc<AtomicU64>) -> Recorder {
        Recorder {
            buf: RefCell::new(Vec::new()),
            tx,
            dropped,
        }
    }

    /// Holds `e` until the shard's next [`Recorder::flush`]; a full buffer ([`BUFFER_MAX`]:
    /// a pass that fired more, a shard alone on its thread fires a whole burst in one) is
    /// handed over first, without waiting.
    #[inline]
    pub fn record(&self, e: Event) {
        if self.buf.borrow().len() >= BUFFER_MAX {
            self.flush();
        }
        self.buf.borrow_mut().push(e);
    }

    /// Hands what is held to the history's thread, as one batch, without waiting: a full
    /// channel drops the batch (counted).
    pub fn flush(&self) {
        let mut buf = self.buf.borrow_mut();
        if buf.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut *buf);
        drop(buf);
        match self.tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => {
                self.dropped.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Events held now (tests, the bench).
    pub fn held(&self) -> usize {
        self.buf.borrow().len()
    }
}
