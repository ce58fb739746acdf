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
use super::record::{put_batch, FRAME};
use super::segment::{is_no_space, padded, Active, Log};
use super::{Fsync, Health, Shared};
use crate::metrics::StoreMetrics;
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

pub(crate) async fn run(shared: Rc<Shared>, mut log: Log) {
    let mut backoff = BACKOFF_START;
    let mut stalls = 0u32;
    let mut seq = shared.next_batch.get();
    // `everysec`: when the oldest acknowledged commit not yet synced was written.
    let mut unsynced: Option<Instant> = None;
    if matches!(log, Log::Missing(_)) {
        shared.set_health(Health::Stalled);
    }
    loop {
        expire(&shared);
        let closing = shared.closing.get();
        if let (Some(since), Log::Ready(active)) = (unsynced, &log) {
            if closing || since.elapsed() >= SYNC_EVERY {
                if let Err(e) = active.file.fdatasync().await {
                    fail(&shared, &active.path, "fdatasync", &e);
                    return;
                }
                unsynced = None;
            }
        }
        let empty = shared.outbox.borrow().is_empty();
        if empty && matches!(log, Log::Ready(_)) {
            if closing {
                if let Log::Ready(active) = &log {
                    close(active).await;
                }
                return;
            }
            let listener = shared.wake.listen();
            if shared.outbox.borrow().is_empty() && !shared.closing.get() {
                match unsynced {
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
            commit(&shared, &mut log, seq).await.map(|()| {
                seq += 1;
                if shared.cfg.fsync == Fsync::EverySec && unsynced.is_none() {
                    unsynced = Some(Instant::now());
                }
            })
        };
        match done {
            Ok(()) => {
                backoff = BACKOFF_START;
                if shared.health.get() == Health::Stalled {
                    shared.set_health(Health::Ready);
                    tracing::info!(
                        shard = shared.shard,
                        "journal: writing again; durable writes are acknowledged"
                    );
                }
            }
            Err(Fault::NoSpace(e)) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                if shared.health.get() == Health::Ready {
                    shared.set_health(Health::Stalled);
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
async fn ensure(shared: &Rc<Shared>, log: &mut Log) -> Result<(), Fault> {
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

/// At close, with nothing left to write: gives back the reserved tail, so that the next start
/// reads only records, and syncs (in every mode, so that a clean stop loses nothing). A crash
/// before it leaves zeros, which read as the end.
async fn close(active: &Active) {
    if let Err(e) = active.file.truncate(active.pos).await {
        tracing::debug!(file = %active.path.display(), error = %e, "journal: cannot trim the last segment at close");
        return;
    }
    if let Err(e) = active.file.fdatasync().await {
        tracing::warn!(file = %active.path.display(), error = %e, "journal: cannot sync the last segment at close");
    }
}

/// Writes and syncs the next batch.
async fn commit(shared: &Rc<Shared>, log: &mut Log, seq: u64) -> Result<(), Fault> {
    let cfg = &shared.cfg;
    ensure(shared, log).await?;
    let batch = shared
        .outbox
        .borrow()
        .batch(cfg.max_batch_records, cfg.max_batch_bytes);
    let size = padded(BATCH_RECORD + batch.bytes);
    if matches!(log, Log::Ready(a) if !a.fits(size as u64)) {
        roll(shared, log).await?;
    }
    let Log::Ready(active) = log else {
        return Err(Fault::NoSpace(io::Error::other("no segment to write")));
    };
    let mut buf = vec![0u8; size];
    {
        let b = &mut buf[..];
        let mut head = Vec::with_capacity(BATCH_RECORD);
        put_batch(&mut head, seq, batch.records as u32);
        let outbox = shared.outbox.borrow();
        let records = outbox.bytes(batch);
        let body_end = BATCH_RECORD + records.len();
        b[..BATCH_RECORD].copy_from_slice(&head);
        b[BATCH_RECORD..body_end].copy_from_slice(records);
        b[body_end..].fill(0);
    }
    let started = Instant::now();
    match active.file.write_at(buf, active.pos).await {
        Ok(n) if n == size => {}
        Ok(n) => {
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
    }
    if cfg.fsync.per_commit() {
        active.file.fdatasync().await.map_err(|e| Fault::Fatal {
            what: "fdatasync",
            error: e,
        })?;
    }
    active.pos += size as u64;
    let m = shared.m();
    m.flush_seconds.observe(started.elapsed().as_nanos() as u64);
    m.batch_commands.observe(batch.records as u64);
    StoreMetrics::count(&m.journal_bytes_total, size as u64);
    StoreMetrics::count(&m.journal_records_total, batch.records as u64);
    let mut outbox = shared.outbox.borrow_mut();
    outbox.complete(batch, Ok(()));
    m.pending_writes
        .store(outbox.len() as u64, Ordering::Relaxed);
    drop(outbox);
    shared.publish_files(active.pos);
    Ok(())
}

/// Seals the active segment and starts the next; maybe starts a compaction.
///
/// Sealing comes first and closes the sealed file, so that when the disk has no room for
/// the next segment the sealed one is already compaction's input: the commit loop compacts
/// while the log waits (`Log::Missing`, `compact::make_room`), and the room that frees (the
/// deleted files' blocks, released with their last descriptor) is what the next one takes.
async fn roll(shared: &Rc<Shared>, log: &mut Log) -> Result<(), Fault> {
    if let Log::Ready(active) = log {
        if !shared.cfg.fsync.per_commit() {
            // Without per-commit syncs, the sealed segment is synced once, so that a later
            // segment never outlives an earlier one's unsynced tail on a power cut.
            active.file.fdatasync().await.map_err(|e| Fault::Fatal {
                what: "fdatasync",
                error: e,
            })?;
        }
        // Give back the reserved tail; a crash before this reaches the disk leaves zeros,
        // which read as the end.
        if let Err(e) = active.file.truncate(active.pos).await {
            tracing::debug!(file = %active.path.display(), error = %e, "journal: cannot trim a sealed segment");
        }
        let (seq, pos) = (active.seq, active.pos);
        shared.files.borrow_mut().sealed.push((seq, pos));
        *log = Log::Missing(seq + 1);
        shared.publish_files(0);
    }
    ensure(shared, log).await
}

/// The journal cannot know what reached the disk: refuse everything from now on.
fn fail(shared: &Shared, file: &std::path::Path, what: &str, error: &io::Error) {
    StoreMetrics::count(&shared.m().errors_total, 1);
    shared.set_health(Health::Failed);
    let refusal = shared.unavailable();
    shared.outbox.borrow_mut().abandon(Err(refusal));
    tracing::error!(
        shard = shared.shard,
        file = %file.display(),
        %error,
        "journal: {what} failed. Writes not yet acknowledged may or may not be on disk, and the kernel may have dropped them, so this file is never synced again and this shard acknowledges nothing more (503, /healthz unavailable); timers keep firing from memory. Check the disk (dmesg, SMART, free space), then restart punctual: recovery replays what the journal holds, and every acknowledged timer is there"
    );
}

/// Sleeps one backoff step (answering timed-out callers meanwhile) and doubles it, up to
/// `retry_max` (see `store::acks::pause`).
async fn pause(shared: &Shared, backoff: &mut Duration) {
    crate::store::acks::pause(
        backoff,
        shared.cfg.retry_max,
        || shared.closing.get(),
        || expire(shared),
    )
    .await;
}

fn expire(shared: &Shared) {
    let n = shared
        .outbox
        .borrow_mut()
        .acks
        .expire(Instant::now(), shared.cfg.retry_max.as_secs().max(1));
    if n > 0 {
        StoreMetrics::count(&shared.m().ack_timeouts_total, n);
    }
}
