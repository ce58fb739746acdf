//! What a shard's journal store and its tasks (commit, compaction) share, on the shard's
//! thread only: [`ShardJournal`], the durable-store core (`store::durable`: the outbox and its
//! acks, the metrics, the wake-up) with what is the journal's own: the files, the health, the
//! version lease, the I/O thread.

use super::ceiling::VersionCeiling;
use super::outbox::Outbox;
use super::{io, layout, record, JournalConfig};
use crate::metrics::{ShardMetrics, StoreState};
use crate::store::durable::Durable;
use crate::store::Ack;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// The files the shard's log consists of, besides the active segment; shared by the commit
/// and compaction tasks.
#[derive(Debug, Default)]
pub(crate) struct Files {
    /// (seq, bytes) of the snapshot.
    pub snapshot: Option<(u64, u64)>,
    /// (seq, bytes) of the sealed segments, oldest first.
    pub sealed: Vec<(u64, u64)>,
    /// No new compaction may start: one is running, or a damaged input stopped compaction
    /// for this run of the process.
    pub compacting: bool,
    /// A compaction task is running (cleared when it ends, however it ends). While it runs,
    /// the commit task writes at most one segment (`commit::held`).
    pub running: bool,
    /// The commit task waited for the running compaction (counted once per compaction).
    pub held: bool,
}

impl Files {
    pub fn old_bytes(&self) -> u64 {
        self.snapshot.map_or(0, |s| s.1) + self.sealed.iter().map(|s| s.1).sum::<u64>()
    }
}

/// One shard's journal: what the store and its commit and compaction tasks share, on the
/// shard's thread only. It dereferences to its durable-store core ([`Durable`]), which holds
/// the outbox, the shard's id, the wake-up and the metrics.
pub(crate) struct ShardJournal {
    pub core: Durable<Outbox>,
    pub cfg: JournalConfig,
    /// This shard's directory.
    pub dir: PathBuf,
    pub files: RefCell<Files>,
    /// Whether the commit task can write: `Ready`, `Stalled` (the disk is full: retrying) or
    /// `Failed` (a sync or write failed: nothing more is acknowledged). The same values as
    /// the store's published state ([`ShardJournal::set_health`] sets both); the others
    /// (`Recovering` during `open`) are not the commit task's, so it keeps its own cell.
    pub health: Cell<StoreState>,
    /// When the oldest commit acknowledged but not yet synced was written (`everysec`,
    /// `never`): what a failed sync may have lost.
    pub unsynced_since: Cell<Option<Instant>>,
    /// Records no caller waited for, dropped because the journal had failed.
    pub dropped: Cell<u64>,
    /// The version ceiling durable ahead of the versions handed out (`lease`).
    pub ceiling: RefCell<VersionCeiling>,
    /// Pending timers, and the bytes of the schedule records that made them: the estimate of
    /// the live data that decides compaction.
    pub live: Cell<u64>,
    pub record_bytes: Cell<(u64, u64)>,
    /// The batch sequence the commit task's first commit carries: the one after the last
    /// that recovery read, so that the sequence runs on across restarts (`replay`).
    pub next_batch: Cell<u64>,
    /// The compaction running or last run (`compact`), so that `close` can wait for it or
    /// stop it: a task left behind would keep this store, and the data directory's lock, alive
    /// after its executor is gone.
    pub compaction: RefCell<Option<glommio::Task<()>>>,
    /// Notified when a compaction task ends: a commit held back behind it goes on.
    pub compacted: event_listener::Event,
    /// The journal's own I/O thread: every write, sync and change of name runs there.
    pub io: io::IoThread,
    /// Holds the data directory's lock while any shard's store lives.
    pub _lock: Arc<layout::DataDir>,
}

impl std::ops::Deref for ShardJournal {
    type Target = Durable<Outbox>;

    fn deref(&self) -> &Durable<Outbox> {
        &self.core
    }
}

impl ShardJournal {
    /// Shard `shard` of `shards`'s journal in `data`, with an empty outbox, `Ready`.
    pub fn new(
        cfg: JournalConfig,
        data: Arc<layout::DataDir>,
        shard: usize,
        shards: usize,
        metrics: Arc<ShardMetrics>,
        io: io::IoThread,
    ) -> ShardJournal {
        ShardJournal {
            core: Durable::new(cfg.limits(), shard, shards, metrics, Outbox::new),
            dir: data.shard_dir(shard),
            cfg,
            files: RefCell::new(Files::default()),
            health: Cell::new(StoreState::Ready),
            unsynced_since: Cell::new(None),
            dropped: Cell::new(0),
            ceiling: RefCell::new(VersionCeiling::default()),
            live: Cell::new(0),
            record_bytes: Cell::new((0, 0)),
            next_batch: Cell::new(1),
            compaction: RefCell::new(None),
            compacted: event_listener::Event::new(),
            io,
            _lock: data,
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

    /// The commit task's health, published as the store's state too.
    pub fn set_health(&self, h: StoreState) {
        debug_assert!(
            matches!(
                h,
                StoreState::Ready | StoreState::Stalled | StoreState::Failed
            ),
            "the commit task is ready, stalled or failed, not {h:?}"
        );
        self.health.set(h);
        self.m().set_state(h);
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
        if self.health.get() == StoreState::Failed {
            if ack.is_waiting() {
                ack.answer(Err(self.unavailable()));
            } else {
                self.dropped.set(self.dropped.get() + 1);
            }
            return 0;
        }
        let renew = version.and_then(|v| self.ceiling.borrow_mut().note(v));
        let mut outbox = self.outbox.borrow_mut();
        if let Some(ceiling) = renew {
            outbox.push(|b| record::put_lease(b, ceiling), Ack::None, "");
            self.ceiling.borrow_mut().queued_at(outbox.end(), ceiling);
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
