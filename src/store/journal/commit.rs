//! The commit task: one per shard, spawned on the shard's executor. It turns the outbox into
//! group commits, rolls segments, starts compactions, and handles a full or failing disk.
//!
//! ```text
//!   loop:
//!     answer callers whose ack timed out (their records stay queued)
//!     nothing queued?            wait for the shard's kick
//!     batch = whole records from the front (≤ max_batch_records, ≤ max_batch_bytes)
//!     it does not fit the segment? roll: create the next one, seal this one, maybe compact
//!     write [batch record | records | zero padding] at the segment's end; fdatasync
//!       (under `always`, both in one job of the I/O thread)
//!     durable → pop the batch, answer its acks
//!     disk full → keep it queued, refuse new writes, back off, write it again
//!     sync or other write error → refuse everything, stop (never sync that file again)
//! ```
//!
//! # The three fsync modes
//!
//! | mode | a commit is acknowledged | a power cut loses | a crash of the process loses |
//! |---|---|---|---|
//! | `always` (default) | after its `fdatasync` | nothing acknowledged | nothing acknowledged |
//! | `everysec` | after its write; the segment is synced once a second while anything is unsynced | at most about the last second | nothing acknowledged |
//! | `never` | after its write; a segment is synced when it is sealed, and at close | what the kernel had not yet written back (about 30 s with Linux's defaults) | nothing acknowledged |
//!
//! In every mode a segment's header and name are synced before its first commit, a segment is
//! synced before the next one is created (so only the newest can hold unsynced commits), and
//! a start syncs the newest segment it found before it creates the next. A segment written in
//! `everysec` or `never` says so in its header (`file::UNSYNCED`): a power cut may leave any
//! part of its unsynced tail unwritten, holes included, and recovery keeps the longest valid
//! prefix of it without `--journal-skip-corrupt` (`scan`, `Role::LastUnsynced`).

use super::file::BLOCK;
use super::outbox::Batch;
use super::record::{put_batch, FRAME};
use super::segment::{is_no_space, padded, Active, Log};
use super::{Fsync, OnFailure, ShardJournal};
use crate::metrics::{StoreMetrics, StoreState};
use std::io;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const BACKOFF_START: Duration = Duration::from_millis(10);

/// `everysec`: the longest an acknowledged commit stays unsynced.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Bytes of the `batch` record that opens every commit.
const BATCH_RECORD: usize = FRAME + 12;

/// Why a commit did not happen.
enum Fault {
    /// The disk is full: retry later, the same records at the same place.
    NoSpace(io::Error),
    /// A sync (or a write) failed: the file's state is unknown, never sync it again.
    Fatal {
        what: &'static str,
        error: io::Error,
    },
}

pub(crate) async fn run(shared: Rc<ShardJournal>, mut log: Log) {
    let mut backoff = BACKOFF_START;
    let mut stalls = 0u32;
    let mut seq = shared.next_batch.get();
    if matches!(log, Log::Missing(_)) {
        shared.set_health(StoreState::Stalled);
    }
    loop {
        expire(&shared);
        let closing = shared.closing.get();
        // `everysec`: sync what was acknowledged unsynced, at least once a second.
        let due = shared
            .unsynced_since
            .get()
            .filter(|_| shared.cfg.fsync == Fsync::EverySec);
        if let (Some(since), Log::Ready(active)) = (due, &log) {
            if closing || since.elapsed() >= SYNC_EVERY {
                if let Err(e) = sync(&shared, active).await {
                    fail(&shared, &active.path, "fdatasync", &e);
                    return;
                }
            }
        }
        let empty = shared.outbox.borrow().is_empty();
        if empty && matches!(log, Log::Ready(_)) {
            if closing {
                if let Log::Ready(active) = &log {
                    close(&shared, active).await;
                }
                return;
            }
            let listener = shared.wake.listen();
            if shared.outbox.borrow().is_empty() && !shared.closing.get() {
                match due {
                    Some(since) => {
                        let left = SYNC_EVERY.saturating_sub(since.elapsed());
                        futures_lite::future::or(listener, glommio::timer::sleep(left)).await;
                    }
                    None => listener.await,
                }
            }
            continue;
        }
        let done = if empty {
            ensure(&shared, &mut log).await
        } else {
            match commit(&shared, &mut log, seq).await {
                Ok(Written::Yes) => {
                    seq += 1;
                    Ok(())
                }
                Ok(Written::Nothing) => Ok(()),
                Ok(Written::Held) => {
                    held(&shared).await;
                    continue;
                }
                Err(fault) => Err(fault),
            }
        };
        match done {
            Ok(()) => {
                backoff = BACKOFF_START;
                if shared.health.get() == StoreState::Stalled {
                    shared.set_health(StoreState::Ready);
                    tracing::info!(
                        shard = shared.shard,
                        "journal: writing again; durable writes are acknowledged"
                    );
                }
            }
            Err(Fault::NoSpace(e)) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                if shared.health.get() == StoreState::Ready {
                    shared.set_health(StoreState::Stalled);
                    stalls = 0;
                    tracing::error!(shard = shared.shard, dir = %shared.dir.display(), error = %e, "journal: the disk is full; new timers are refused (503 store_unavailable) and the commit is retried until space returns; nothing acknowledged is lost");
                }
                // The journal's own dead records may be what fills the disk: compact the
                // sealed segments now, at the first retry and every 10th (a disk that stays
                // full is not replayed at every one), rather than at a roll that cannot come.
                if stalls % 10 == 0 {
                    super::compact::make_room(&shared, log.unsealed_seq());
                }
                stalls = stalls.wrapping_add(1);
                if shared.closing.get() {
                    // A full disk still syncs: what was acknowledged unsynced is made durable
                    // before the task ends, as at any clean stop.
                    if let Log::Ready(active) = &log {
                        close(&shared, active).await;
                    }
                    return;
                }
                pause(&shared, &mut backoff).await;
            }
            Err(Fault::Fatal { what, error }) => {
                let path = shared
                    .dir
                    .join(super::file::segment_name(log.unsealed_seq()));
                fail(&shared, &path, what, &error);
                return;
            }
        }
    }
}

/// Creates the segment a `Missing` log waits for (after a start on a full disk, or a roll
/// that found no room); maybe starts a compaction.
async fn ensure(shared: &Rc<ShardJournal>, log: &mut Log) -> Result<(), Fault> {
    let Log::Missing(seq) = *log else {
        return Ok(());
    };
    let cfg = &shared.cfg;
    let next = Active::create(
        &shared.io,
        &shared.dir,
        seq,
        shared.shard,
        shared.shards,
        cfg.segment_bytes,
        cfg.fsync,
    )
    .await
    .map_err(|e| {
        if is_no_space(&e) {
            Fault::NoSpace(e)
        } else {
            Fault::Fatal {
                what: "segment creation",
                error: e,
            }
        }
    })?;
    *log = Log::Ready(next);
    shared.publish_files(BLOCK as u64);
    super::compact::maybe_start(shared, seq);
    Ok(())
}

/// At close, with nothing more to write (or no room to): gives back the reserved tail and
/// whatever a failed write left past the last commit, so that the next start reads only
/// records, and syncs (in every mode, so that a clean stop loses nothing acknowledged). A
/// crash before it leaves zeros, which read as the end.
async fn close(shared: &ShardJournal, active: &Active) {
    if let Err(e) = active.file.truncate(active.pos).await {
        tracing::debug!(file = %active.path.display(), error = %e, "journal: cannot trim the last segment at close");
    }
    if let Err(e) = sync(shared, active).await {
        tracing::error!(file = %active.path.display(), error = %e, "journal: cannot sync the last segment at close; {}", lost_by_a_failed_sync(shared.cfg.fsync, shared.unsynced_since.get()));
    }
}

/// Syncs the active segment; what was acknowledged unsynced is durable once it succeeds.
async fn sync(shared: &ShardJournal, active: &Active) -> io::Result<()> {
    active.file.fdatasync().await?;
    shared.unsynced_since.set(None);
    Ok(())
}

/// What [`commit`] did.
enum Written {
    Yes,
    /// Nothing to write: the batch held only answers (`Outbox::push_answer`), now answered.
    Nothing,
    /// Nothing: the batch needs a new segment and a compaction is running ([`held`]).
    Held,
}

/// Writes and syncs the next batch.
async fn commit(shared: &Rc<ShardJournal>, log: &mut Log, seq: u64) -> Result<Written, Fault> {
    let cfg = &shared.cfg;
    ensure(shared, log).await?;
    let batch = shared
        .outbox
        .borrow()
        .batch(cfg.max_batch_records, cfg.max_batch_bytes);
    if batch.frames == 0 {
        // Only answers that waited for records already durable: nothing to write.
        durable(shared, batch);
        return Ok(Written::Nothing);
    }
    let size = padded(BATCH_RECORD + batch.bytes);
    if matches!(log, Log::Ready(a) if !a.fits(size as u64)) {
        if shared.files.borrow().running && !shared.closing.get() {
            return Ok(Written::Held);
        }
        roll(shared, log).await?;
    }
    let Log::Ready(active) = log else {
        return Err(Fault::NoSpace(io::Error::other("no segment to write")));
    };
    let mut buf = vec![0u8; size];
    {
        let b = &mut buf[..];
        let mut head = Vec::with_capacity(BATCH_RECORD);
        put_batch(&mut head, seq, batch.frames as u32);
        let outbox = shared.outbox.borrow();
        b[..BATCH_RECORD].copy_from_slice(&head);
        let mut at = BATCH_RECORD;
        for piece in outbox.bytes(batch) {
            b[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        debug_assert_eq!(
            at,
            BATCH_RECORD + batch.bytes,
            "the batch's bytes are queued"
        );
        b[at..].fill(0);
    }
    let started = Instant::now();
    let written = if cfg.fsync.per_commit() {
        active.file.write_synced_at(buf, active.pos).await
    } else {
        active
            .file
            .write_at(buf, active.pos)
            .await
            .map(|n| (n, None))
    };
    let synced = match written {
        Ok((n, synced)) if n == size => synced,
        Ok((n, _)) => {
            return Err(Fault::NoSpace(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("short write: {n} of {size} bytes"),
            )))
        }
        Err(e) => {
            return Err(if is_no_space(&e) {
                Fault::NoSpace(e)
            } else {
                Fault::Fatal {
                    what: "write",
                    error: e,
                }
            });
        }
    };
    if let Some(synced) = synced {
        synced.map_err(|e| Fault::Fatal {
            what: "fdatasync",
            error: e,
        })?;
    } else if shared.unsynced_since.get().is_none() {
        shared.unsynced_since.set(Some(started));
    }
    active.pos += size as u64;
    let m = shared.m();
    m.flush_seconds.observe(started.elapsed().as_nanos() as u64);
    m.batch_commands.observe(batch.frames as u64);
    StoreMetrics::count(&m.journal_bytes_total, size as u64);
    StoreMetrics::count(&m.journal_records_total, batch.frames as u64);
    let queued = durable(shared, batch);
    m.pending_writes.store(queued as u64, Ordering::Relaxed);
    shared.publish_files(active.pos);
    Ok(Written::Yes)
}

/// `batch` is durable: answers its callers and tells the version ceiling how far the log is committed.
/// The records still queued behind it.
fn durable(shared: &ShardJournal, batch: Batch) -> usize {
    let mut outbox = shared.outbox.borrow_mut();
    outbox.complete(batch, Ok(()));
    shared
        .ceiling
        .borrow_mut()
        .committed(outbox.committed(), outbox.is_empty());
    outbox.len()
}

/// The longest one look of [`held`] waits, so that the loop still answers callers whose ack
/// timed out and notices a close.
const HOLD_LOOK: Duration = Duration::from_millis(50);

/// The batch needs a new segment while a compaction runs: waits for the compaction's end (or
/// [`HOLD_LOOK`]; the loop comes back). A compaction shares the shard's thread in slices, so
/// a shard that writes faster than it replays would otherwise seal segment after segment
/// behind it, and the disk would outgrow its bound (the compaction's inputs, the snapshot in
/// writing and one segment: `compact`). Holding the roll holds every writer of the shard
/// until the compaction ends, a few hundred milliseconds at most in practice; their records
/// wait in the outbox, which admission bounds.
async fn held(shared: &ShardJournal) {
    let listener = shared.compacted.listen();
    if !shared.files.borrow().running || shared.closing.get() {
        return;
    }
    if !std::mem::replace(&mut shared.files.borrow_mut().held, true) {
        StoreMetrics::count(&shared.m().journal_compaction_holds_total, 1);
    }
    futures_lite::future::or(listener, glommio::timer::sleep(HOLD_LOOK)).await;
}

/// Seals the active segment and starts the next; maybe starts a compaction.
///
/// Sealing comes first and closes the sealed file, so that when the disk has no room for
/// the next segment the sealed one is already compaction's input: the commit loop compacts
/// while the log waits (`Log::Missing`, `compact::make_room`), and the room that frees (the
/// deleted files' blocks, released with their last descriptor) is what the next one takes.
async fn roll(shared: &Rc<ShardJournal>, log: &mut Log) -> Result<(), Fault> {
    if let Log::Ready(active) = log {
        // Cut the file at its last commit: this gives back the reserved tail, and removes
        // what a write cut short by a full disk left past it (a partial commit, which in a
        // sealed segment is corruption, not a torn tail). Then sync, in every mode: the cut
        // must be durable before the next segment takes a commit, and without per-commit
        // syncs the sealed segment's unsynced tail must not be outlived by a later segment.
        let sealed = async {
            active.file.truncate(active.pos).await?;
            sync(shared, active).await
        };
        sealed.await.map_err(|e| Fault::Fatal {
            what: "sealing a segment (truncate and fdatasync)",
            error: e,
        })?;
        let (seq, pos) = (active.seq, active.pos);
        shared.files.borrow_mut().sealed.push((seq, pos));
        *log = Log::Missing(seq + 1);
        shared.publish_files(0);
    }
    ensure(shared, log).await
}

/// The journal cannot know what reached the disk: refuse everything from now on, say what
/// may be lost, and (`OnFailure::Exit`) end the process.
fn fail(shared: &ShardJournal, file: &std::path::Path, what: &str, error: &io::Error) {
    StoreMetrics::count(&shared.m().errors_total, 1);
    shared.set_health(StoreState::Failed);
    let refusal = shared.unavailable();
    shared.outbox.borrow_mut().abandon(Err(refusal));
    let exit = shared.cfg.on_failure == OnFailure::Exit;
    tracing::error!(
        shard = shared.shard,
        file = %file.display(),
        %error,
        "journal: {what} failed. After a failed sync the kernel may have dropped written data while still showing it, so this file is never synced again and this shard acknowledges nothing more; writes not yet acknowledged were refused (503). {} {}",
        lost_by_a_failed_sync(shared.cfg.fsync, shared.unsynced_since.get()),
        if exit {
            "The process exits now (status 1) so that its supervisor restarts it: recovery replays what the disk really holds. Check the disk first (dmesg, SMART, free space)."
        } else {
            "Timers keep firing from memory (/healthz unavailable). Check the disk (dmesg, SMART, free space), then restart: recovery replays what the disk really holds."
        }
    );
    if exit {
        std::process::exit(1);
    }
}

/// What a failed sync (or write) may have taken of what was acknowledged, said no stronger
/// than the fsync mode allows: a restart recovers what the disk holds, which is every
/// acknowledged write only when each was synced before its acknowledgement.
fn lost_by_a_failed_sync(fsync: Fsync, unsynced_since: Option<Instant>) -> String {
    match (fsync.per_commit(), unsynced_since) {
        (true, _) | (false, None) => "Every acknowledged write was synced before this failure (each before its acknowledgement under --fsync always): a restart recovers every acknowledged timer the disk still returns.".to_string(),
        (false, Some(since)) => format!(
            "Writes acknowledged in the last {} ms (--fsync {}: acknowledged before they were synced) were never made durable and MAY BE LOST, whatever a restart shows: the kernel may have dropped them from its cache or still serve them from it; timers acknowledged before that were synced and are recovered.",
            since.elapsed().as_millis(),
            match fsync {
                Fsync::EverySec => "everysec",
                _ => "never",
            }
        ),
    }
}

/// Sleeps one backoff step (answering timed-out callers meanwhile) and doubles it, up to
/// `retry_max` (see `store::acks::pause`).
async fn pause(shared: &ShardJournal, backoff: &mut Duration) {
    crate::store::acks::pause(
        backoff,
        shared.cfg.retry_max,
        || shared.closing.get(),
        || expire(shared),
    )
    .await;
}

fn expire(shared: &ShardJournal) {
    let n = shared
        .outbox
        .borrow_mut()
        .acks
        .expire(Instant::now(), shared.cfg.retry_max.as_secs().max(1));
    if n > 0 {
        StoreMetrics::count(&shared.m().ack_timeouts_total, n);
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
