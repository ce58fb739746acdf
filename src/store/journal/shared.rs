//! What a shard's journal store and its tasks (commit, compaction) share, on the shard's
//! thread only: the outbox, the files, the health, the version lease, the I/O thread.

use super::lease::Lease;
use super::outbox::Outbox;
use super::{io, layout, record, JournalConfig};
use crate::error::Error;
use crate::metrics::{ShardMetrics, StoreMetrics, StoreState};
use crate::store::Ack;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Whether the commit task can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    Ready,
    /// The disk is full: retrying.
    Stalled,
    /// A sync or write failed: nothing more is acknowledged.
    Failed,
}

/// The files the shard's log consists of, besides the active segment; shared by the commit
/// and compaction tasks.
#[derive(Debug, Default)]
pub(crate) struct Files {
    /// (seq, bytes) of the snapshot.
    pub snapshot: Option<(u64, u64)>,
    /// (seq, bytes) of the sealed segments, oldest first.
    pub sealed: Vec<(u64, u64)>,
    pub compacting: bool,
}

impl Files {
    pub fn old_bytes(&self) -> u64 {
        self.snapshot.map_or(0, |s| s.1) + self.sealed.iter().map(|s| s.1).sum::<u64>()
    }
}

/// What the shard and its tasks share, on the shard's thread only.
pub(crate) struct Shared {
    pub cfg: JournalConfig,
    /// This shard's directory.
    pub dir: PathBuf,
    pub shard: usize,
    pub shards: usize,
    pub outbox: RefCell<Outbox>,
    pub files: RefCell<Files>,
    pub wake: event_listener::Event,
    pub closing: Cell<bool>,
    pub health: Cell<Health>,
    /// When the oldest commit acknowledged but not yet synced was written (`everysec`,
    /// `never`): what a failed sync may have lost.
    pub unsynced_since: Cell<Option<Instant>>,
    /// Records no caller waited for, dropped because the journal had failed.
    pub dropped: Cell<u64>,
    /// The version ceiling durable ahead of the versions handed out (`lease`).
    pub lease: RefCell<Lease>,
    /// Pending timers, and the bytes of the schedule records that made them: the estimate of
    /// the live data that decides compaction.
    pub live: Cell<u64>,
    pub record_bytes: Cell<(u64, u64)>,
    /// The batch sequence the commit task's first commit carries: the one after the last
    /// that recovery read, so that the sequence runs on across restarts (`replay`).
    pub next_batch: Cell<u64>,
    pub metrics: Arc<ShardMetrics>,
    /// The compaction running or last run (`compact`), so that `close` can wait for it or
    /// stop it: a task left behind would keep this store, and the data directory's lock, alive
    /// after its executor is gone.
    pub compaction: RefCell<Option<glommio::Task<()>>>,
    /// The journal's own I/O thread: every write, sync and change of name runs there.
    pub io: io::IoThread,
    /// Holds the data directory's lock while any shard's store lives.
    pub _lock: Arc<layout::DataDir>,
}

impl Shared {
    pub fn m(&self) -> &StoreMetrics {
        &self.metrics.store
    }

    pub fn unavailable(&self) -> Error {
        Error::StoreUnavailable {
            retry_after_s: self.cfg.retry_after_s(),
        }
    }

    /// Estimated live bytes: pending timers × the mean schedule record.
    pub fn live_bytes(&self) -> u64 {
        let (bytes, records) = self.record_bytes.get();
        match bytes.checked_div(records) {
            Some(mean) => self.live.get().saturating_mul(mean),
            None => 0,
        }
    }

    /// A schedule-like record of `bytes` was queued (0: none was).
    pub fn note_record(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let (b, n) = self.record_bytes.get();
        self.record_bytes.set((b + bytes as u64, n + 1));
    }

    pub fn publish_files(&self, active: u64) {
        let f = self.files.borrow();
        let m = self.m();
        m.journal_segments
            .store(f.sealed.len() as u64 + 1, Ordering::Relaxed);
        m.journal_disk_bytes
            .store(f.old_bytes() + active, Ordering::Relaxed);
    }

    pub fn set_health(&self, h: Health) {
        self.health.set(h);
        self.m().set_state(match h {
            Health::Ready => StoreState::Ready,
            Health::Stalled => StoreState::Stalled,
            Health::Failed => StoreState::Failed,
        });
    }

    /// Queues one record with its ack: the only way into the outbox. `version`, the version
    /// the record carries, first renews the lease when it must grow (`lease`): the lease record
    /// goes ahead of it, so no commit holds the version without a ceiling above it.
    ///
    /// Once the journal has failed nothing is queued, since nothing will ever be written: a
    /// waiting caller is refused at once, and a record no caller waits for is dropped and
    /// counted. Every such record only moves a timer that was already durable on (a fire, a
    /// webhook's attempt or outcome, a dead letter, a lease), so its loss can make a restart
    /// deliver that timer again, never lose it. The frame's size; 0 when nothing was queued.
    pub fn push(
        &self,
        version: Option<u64>,
        encode: impl FnOnce(&mut Vec<u8>) -> usize,
        ack: Ack,
        tenant: &str,
    ) -> usize {
        if self.health.get() == Health::Failed {
            if ack.is_waiting() {
                ack.answer(Err(self.unavailable()));
            } else {
                self.dropped.set(self.dropped.get() + 1);
            }
            return 0;
        }
        let renew = version.and_then(|v| self.lease.borrow_mut().note(v));
        let mut outbox = self.outbox.borrow_mut();
        if let Some(ceiling) = renew {
            outbox.push(|b| record::put_lease(b, ceiling), Ack::None, "");
            self.lease.borrow_mut().queued_at(outbox.end(), ceiling);
        }
        let mut size = 0;
        outbox.push(
            |b| {
                size = encode(b);
                size
            },
            ack,
            tenant,
        );
        size
    }
}
