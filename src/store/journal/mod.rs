//! The journal store: each shard's timers made durable in its own append-only log on local
//! disk, written on the journal's own I/O thread (`io`, `segment`) and group-committed with
//! `fdatasync`, compacted into snapshots in the background, replayed at start.
//!
//! # What the store owns
//!
//! ```text
//!   <data_dir>/LOCK                       flock: one process per data directory
//!   <data_dir>/CURRENT                    "generation G, shards N": which directories are in force (`current`)
//!   <data_dir>/gen-<G>/shard-<s>/
//!       seg-<seq>.log                     the log: segments in order of seq, each ≤ segment_bytes
//!       snap-<seq>.snap                   the live timers and dead letters of every segment before seq
//!   <data_dir>/kept-gen-<G>/              an old generation a lossy re-partition kept (`repartition`)
//! ```
//!
//! One journal per shard, written only by that shard's thread. The record format (version 2)
//! is in `record`, the file header in `file`; `docs/ARCHITECTURE.md` has both.
//!
//! # Writing: group commit
//!
//! ```text
//!   shard (its loop)                      commit task (same executor)
//!   ─────────────────                     ──────────────────────────────────────────────
//!   schedule: encode the record into      take a prefix of whole records (≤ N records,
//!   the outbox, with the caller's ack     ≤ max_batch_bytes), put a `batch` record first,
//!   (one Vec append, no I/O)              pad to the block, write it at the segment's end
//!                                         (pwrite), fdatasync, then answer every ack in it
//! ```
//!
//! A commit starts as soon as the previous one is durable, so records that arrive while one is
//! in flight go together in the next: a batch waits for at most one commit (well under 1 ms on
//! a local SSD). The shard never waits: it appends and goes on firing; the commit task runs
//! between the shard's passes. Every commit starts on a block boundary, so no write ever
//! touches a block that holds acknowledged records. With `fsync = everysec` or `never`, a
//! commit is acknowledged when its write completes: the data is in the kernel's page cache,
//! which survives a process crash; `everysec` syncs the segment at least once a second, and
//! what a power cut may leave is in `commit` ("the three fsync modes").
//!
//! # Compaction
//!
//! Segments roll at `segment_bytes`. At each roll, when the old files (the snapshot and the
//! sealed segments) hold at most 50% live data (estimated as pending timers × mean record
//! size), a compaction task writes a new snapshot from them — the previous snapshot's timers
//! that no later record touched, plus the last schedule of every timer the segments leave
//! pending, frames copied verbatim — syncs it, gives it its name, and deletes the files it
//! covers. It runs on the shard's executor and yields every 4,096 records, so fires go on.
//! Disk use therefore stays under 2 × the live data + the active segment + one segment of
//! trigger granularity, i.e. under 2 × live + two segments; while a snapshot is being written
//! it also holds that snapshot (at most the live data).
//!
//! # Recovery
//!
//! At start the shard loads its snapshot and segments, indexes the segments (`replay`),
//! checks every CRC, the count of every commit and the continuity of the log (segment seqs
//! and the batch sequence, which runs on across segments, restarts and snapshots), truncates
//! a torn tail (a commit counts whole or not at all; counted) and stops the start on
//! corruption elsewhere (naming the file and offset; `--journal-skip-corrupt` skips and
//! counts instead, see `scan`). Nothing is deleted before that check passed (`layout`). The
//! version floor it finds counts the version lease (`lease`): no timer fires under a version
//! above the last lease made durable, so the floor covers every version that ever fired. Then it opens a new segment (a segment is never appended to after a restart)
//! and hands every live timer, with its version, to the shard; overdue ones fire at once, in
//! deadline order. A different shard count is handled once, before the shards start: every
//! old shard's live timers are sent to their new owner's snapshot in a new generation, which
//! `CURRENT` then names (`layout`).
//!
//! # Faults
//!
//! | fault | what happens |
//! |---|---|
//! | disk full (ENOSPC, EDQUOT, a short write) | nothing is popped; `admit` refuses (503 `store_unavailable`, `Retry-After`), waiting callers are answered the same after the ack timeout, state `Stalled`; the commit is retried with backoff and the store is `Ready` again once one succeeds. A roll that cannot reserve a whole segment creates none (`Log::Missing`: the commit waits, `Stalled`), and compaction runs at the first retry and every tenth to give room back, until the segment can be reserved whole; a start that cannot create its segment comes up `Stalled` (the shard serves and fires, its fired records wait in the outbox) and creates it once there is room |
//! | `fdatasync` fails, or a write fails otherwise | never retried on that file (after a failed sync the kernel may have dropped the data and a retry can report success): every waiting ack is refused, nothing more is acknowledged or queued (records no caller waits for are dropped: their loss only re-delivers), state `Failed` (`/healthz` 503); the log says what may be lost (under `everysec`/`never`, the writes acknowledged since the last good sync) and, with `OnFailure::Exit` (`punctual serve`), the process exits with status 1 (`docs/ARCHITECTURE.md`, "When the disk fails") |
//!
//! # Invariants
//!
//! - An ack is answered `Ok` only after the commit that carried its record was written and
//!   (with `fsync = always`) `fdatasync`'d; in every mode, only once the segment's header and
//!   name are durable.
//! - Records reach the log in the order the shard made them; a commit's records are popped
//!   only once it is durable, so a failed commit is written again whole, at the same offset.
//! - A file is deleted only after a synced snapshot under its final name covers it.
//!
//! # Cost model
//!
//! Per registration on the shard: one frame encoded into the outbox (four copies of the
//! timer's bytes, one CRC32C) and one `VecDeque` push. Per commit: one copy of the batch into a
//! buffer, one `pwrite` and one `fdatasync` on the journal's I/O thread, while the
//! executor sleeps or runs its other tasks. On disk: the frame (9 bytes + 16 + the packed
//! timer), plus per commit a 21-byte `batch` record and padding to 4 KiB.

mod ceiling;
pub mod check;
pub mod commit;
pub mod compact;
pub mod config;
#[cfg(test)]
mod crash;
pub mod current;
pub mod faults;
pub mod file;
pub mod generations;
#[cfg(test)]
pub(crate) mod harness;
pub mod io;
pub mod layout;
pub mod open;
pub mod outbox;
pub mod record;
pub mod repartition;
pub mod replay;
pub mod scan;
pub mod segment;
pub mod shard_dir;
mod shared;
pub mod snapshot;
#[cfg(test)]
mod testlog;

pub use config::{Fsync, JournalConfig, OnFailure};
pub(crate) use shared::ShardJournal;

use super::{durable, Ack, DeadLetter, LocalFuture, Recovered, Store};
use crate::error::{Error, Result};
use crate::metrics::{ShardMetrics, StoreState};
use crate::op::Scheduled;
use crate::timer::FiredTimer;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One shard's journal store.
pub struct JournalStore {
    shared: Rc<ShardJournal>,
    /// What `open` loaded, until `recover` hands it to the shard.
    opened: Option<open::Opened>,
    task: Option<glommio::Task<()>>,
    /// The highest version the journal's records ever carried (see `replay`).
    version_floor: u64,
}

impl JournalStore {
    /// Opens the shard's journal on the shard's thread: loads and checks its files, truncates
    /// a torn tail and starts a new segment. An error (corruption, I/O) stops the start.
    pub async fn open(
        cfg: JournalConfig,
        data: Arc<layout::DataDir>,
        shard: usize,
        shards: usize,
        metrics: Arc<ShardMetrics>,
    ) -> Result<JournalStore> {
        metrics.store.set_state(StoreState::Recovering);
        let io =
            io::IoThread::start(format!("journal-io-{shard}"), cfg.disk.clone()).map_err(|e| {
                Error::ShardStart {
                    shard,
                    reason: format!("cannot start the journal's I/O thread: {e}"),
                }
            })?;
        let shared = Rc::new(ShardJournal::new(cfg, data, shard, shards, metrics, io));
        let opened = open::open(&shared)
            .await
            .map_err(|reason| Error::ShardStart { shard, reason })?;
        Ok(JournalStore {
            shared,
            opened: Some(opened),
            task: None,
            version_floor: 0,
        })
    }

    /// A pending timer rewritten under the same version, with new delivery metadata and
    /// deadline (an `attempt` record: an upsert that keeps its version).
    fn attempt(&mut self, timer: &PackedTimer, version: u64, deadline: UtcMicros, ack: Ack) {
        let shared = &self.shared;
        let size = shared.push(
            Some(version),
            |b| record::put_timer(b, true, version, deadline, timer),
            ack,
            timer.tenant(),
        );
        shared.note_record(size);
    }

    /// Queues a dead-letter record (for `fired_dead`, it is the timer's fire too).
    fn push_dead(&mut self, letter: &DeadLetter<'_>) {
        let shared = &self.shared;
        let size = shared.push(
            Some(letter.version),
            |b| record::put_dead_letter(b, letter.version, letter.fire_at, letter.timer),
            Ack::None,
            letter.timer.tenant(),
        );
        shared.note_record(size);
    }
}

impl Store for JournalStore {
    fn kind(&self) -> &'static str {
        "journal"
    }

    fn recover<'a>(
        &'a mut self,
        insert: &'a mut dyn FnMut(Recovered<'_>) -> bool,
        stop: &'a AtomicBool,
    ) -> LocalFuture<'a, bool> {
        Box::pin(async move {
            let Some(opened) = self.opened.take() else {
                return !stop.load(Ordering::Acquire);
            };
            self.version_floor = opened.version_floor();
            *self.shared.ceiling.borrow_mut() =
                ceiling::VersionCeiling::recovered(self.version_floor);
            let Some(log) = open::hand_over(&self.shared, opened, insert, stop).await else {
                return false;
            };
            self.task = Some(glommio::spawn_local(commit::run(self.shared.clone(), log)));
            true
        })
    }

    fn version_floor(&self) -> u64 {
        self.version_floor
    }

    fn to_recover(&self) -> usize {
        self.opened.as_ref().map_or(0, open::Opened::live_bound)
    }

    /// `Ok` when the journal can write and one more write of `tenant` fits in the outbox;
    /// else the refusal, counted.
    fn admit(&self, tenant: &str) -> Result<()> {
        if self.shared.health.get() != StoreState::Ready {
            return Err(self.shared.refuse());
        }
        self.shared.admit(tenant)
    }

    fn has_room(&self, tenant: &str) -> bool {
        self.shared.health.get() == StoreState::Ready && self.shared.has_room(tenant)
    }

    fn refusal(&self) -> Error {
        self.shared.unavailable()
    }

    fn ack_timeout(&self) -> Duration {
        self.shared.ack_timeout()
    }

    /// Shorter passes, so that the commit task runs between them.
    fn ops_per_pass(&self) -> usize {
        durable::OPS_PER_PASS
    }

    fn begin_pass(&mut self) {
        self.shared.begin_pass();
    }

    fn schedule(&mut self, timer: &PackedTimer, s: &Scheduled, ack: Ack) {
        let shared = &self.shared;
        let size = shared.push(
            Some(s.version),
            |b| record::put_timer(b, false, s.version, s.deadline, timer),
            ack,
            timer.tenant(),
        );
        shared.note_record(size);
        if !s.replaced {
            shared.live.set(shared.live.get() + 1);
        }
    }

    fn cancel(&mut self, tenant: &str, key: &str, ack: Ack) {
        self.shared
            .push(None, |b| record::put_cancel(b, tenant, key), ack, tenant);
        self.shared
            .live
            .set(self.shared.live.get().saturating_sub(1));
    }

    /// At once when nothing waits to be written (and the journal can write); else behind
    /// what waits, as an entry of no bytes, admitted like a write: a store that cannot take
    /// one (full, stalled, failed) refuses, since what the shard's tables show may then never
    /// reach the disk.
    fn answer_after_writes(&mut self, tenant: &str, ack: Ack) {
        let shared = &self.shared;
        let ready = shared.health.get() == StoreState::Ready;
        if ready && shared.outbox.borrow().is_empty() {
            ack.answer(Ok(()));
            return;
        }
        if let Err(e) = self.admit(tenant) {
            ack.answer(Err(e));
            return;
        }
        shared.outbox.borrow_mut().push_answer(ack, tenant);
    }

    /// Once the journal failed, no bound: nothing is queued any more, and the lease that was
    /// pending never will be durable, so the timers whose records were written fire from
    /// memory (`may_fire` holds the others). Else none while a version handed out is above
    /// the durable lease (`lease`), else the outbox's room for records no caller waits for.
    fn fire_room(&self) -> usize {
        let shared = &self.shared;
        if shared.health.get() == StoreState::Failed {
            return usize::MAX;
        }
        if !shared.ceiling.borrow().covers() {
            return 0;
        }
        shared.fire_room()
    }

    /// Once its record is durable (`lease`, "A fire waits for its own record"). Once the
    /// journal failed, timers whose records were written keep firing from memory; one whose
    /// record never was does not fire in this process: what it replaced is what the disk
    /// holds, and a restart fires that.
    fn may_fire(&self, version: u64) -> bool {
        self.shared.ceiling.borrow().written(version)
    }

    fn fires_held(&mut self, held: bool) {
        self.shared.fires_held(held, "journal: due timers are held back (not lost) until the journal has written what waits: the records no caller waits for reached their bound, or a version lease is not durable yet");
    }

    fn fired(&mut self, t: &FiredTimer<'_>) {
        let shared = &self.shared;
        shared.live.set(shared.live.get().saturating_sub(1));
        shared.push(
            Some(t.version),
            |b| record::put_fired(b, t.version, t.tenant, t.key),
            Ack::None,
            t.tenant,
        );
    }

    /// A timer that stays pending after its own firing (a webhook delivery under way): an
    /// attempt record under its version, so a crash re-delivers it, never loses it.
    fn fired_kept(&mut self, _t: &FiredTimer<'_>, kept: &PackedTimer, s: &Scheduled) {
        self.attempt(kept, s.version, s.deadline, Ack::None);
    }

    /// A dead letter record: the dead letter is filed under its identity, apart from the
    /// pending timers, and the pending timer it was leaves them (see `record`). It counts as
    /// live data for compaction.
    fn dead(&mut self, letter: &DeadLetter<'_>) {
        self.push_dead(letter);
    }

    /// The timer's own firing made it a dead letter: one dead-letter record, which is the
    /// fire too, so that no crash keeps the fire and loses the dead letter.
    fn fired_dead(&mut self, _t: &FiredTimer<'_>, letter: &DeadLetter<'_>) {
        let live = &self.shared.live;
        live.set(live.get().saturating_sub(1));
        self.push_dead(letter);
    }

    /// A dead letter discarded: a dead-removed record (the pending timers are not touched).
    fn dead_removed(&mut self, tenant: &str, key: &str, ack: Ack) {
        self.shared.push(
            None,
            |b| record::put_dead_removed(b, tenant, key),
            ack,
            tenant,
        );
    }

    /// A dead letter re-driven: one record that removes it and makes `timer` pending, so that
    /// no crash can apply one half without the other.
    fn redrive(&mut self, timer: &PackedTimer, s: &Scheduled, ack: Ack) {
        let shared = &self.shared;
        let size = shared.push(
            Some(s.version),
            |b| record::put_redrive(b, s.version, s.deadline, timer),
            ack,
            timer.tenant(),
        );
        shared.note_record(size);
        shared.live.set(shared.live.get() + 1);
    }

    /// Wakes the commit task and answers callers past the ack timeout
    /// (`durable::Durable::after_pass` has the bound this gives).
    fn after_pass(&mut self) {
        let shared = &self.shared;
        let end = shared.outbox.borrow().end();
        shared.ceiling.borrow_mut().mark(end);
        shared.after_pass();
    }

    /// Commits what it can within the ack timeout, then stops the commit task and any
    /// compaction (each waited for until the same deadline, then cancelled), and waits for
    /// the I/O thread to finish the jobs they left, so that nothing of this store touches its
    /// files once `close` returns.
    fn close(&mut self) -> LocalFuture<'_, ()> {
        Box::pin(async move {
            let shared = &self.shared;
            let until = shared.begin_close();
            if let Some(task) = self.task.take() {
                finish_by(task, until).await;
            }
            let compaction = shared.compaction.borrow_mut().take();
            if let Some(task) = compaction {
                finish_by(task, until).await;
            }
            // The queue runs in order: once this no-op is done, every earlier job is.
            let _ = shared.io.run(|_| Ok(())).await;
            if shared.dropped.get() > 0 {
                tracing::warn!(
                    shard = shared.shard,
                    records = shared.dropped.get(),
                    "journal closed after it failed: records no caller waited for (fires, webhook attempts and outcomes, dead letters) were dropped; a restart may deliver their timers again"
                );
            }
            let left = shared.outbox.borrow().len();
            if left > 0 {
                tracing::warn!(
                    shard = shared.shard,
                    writes = left,
                    "journal closed with writes not yet durable; they were never acknowledged"
                );
            }
        })
    }
}

/// Waits for `task` until `until`, then cancels it and waits until it has stopped (its
/// future dropped, and with it what it held).
async fn finish_by(mut task: glommio::Task<()>, until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    let done = futures_lite::future::or(
        async {
            (&mut task).await;
            true
        },
        async {
            glommio::timer::sleep(left).await;
            false
        },
    )
    .await;
    if !done {
        task.cancel().await;
    }
}
