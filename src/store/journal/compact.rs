//! Compaction: a snapshot of the live timers of the old files, written in the background,
//! then the old files deleted.
//!
//! ```text
//!   at a segment roll, when old bytes ≥ one segment and old bytes ≥ 2 × estimated live bytes:
//!     inputs  = the snapshot (if any) + every sealed segment (all before the new active one)
//!     replay  = index the sealed segments; the snapshot's untouched timers + their live ones
//!     write   snap-<active seq>.tmp: header, every live frame verbatim, an end record —
//!             exactly that many bytes, so the file's length is its content; fdatasync
//!             (data and length)
//!     rename  to snap-<active seq>.snap; sync the directory       ← the switch
//!     delete  the inputs; sync the directory
//! ```
//!
//! The task runs on the shard's executor and yields once a slice of about 200 µs is used up
//! (`replay::Pace`), so the shard keeps firing and the commit task keeps committing; only one
//! compaction runs at a time. Paced by time, a compaction can fall behind a shard that writes
//! faster than it replays, so the commit task writes at most one segment while a compaction
//! runs: the roll after it waits for the compaction to end (`commit::held`). That keeps the
//! disk within the inputs, the snapshot in writing and one segment, however fast the writes. Its
//! writes (`snapshot`), syncs and changes of name go through the journal's I/O thread. A crash
//! before the rename leaves a `.tmp` that the next start deletes; after it, the next start
//! deletes whatever inputs are left. A full disk abandons the snapshot (the next roll tries
//! again); damage in an input stops compaction for this run of the process, loudly, and leaves
//! the files for the operator (the next start reports the same damage).

use super::file::{snapshot_name, snapshot_tmp_name, Header};
use super::io::IoThread;
use super::replay::{Buf, Pace, Replay, Source};
use super::snapshot::SnapshotWriter;
use super::ShardJournal;
use crate::metrics::{StoreMetrics, StoreState};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Starts a compaction if the old files are mostly dead (see the module doc).
pub(crate) fn maybe_start(shared: &Rc<ShardJournal>, active_seq: u64) {
    let (old, inputs) = {
        let f = shared.files.borrow();
        if f.compacting || f.sealed.is_empty() || shared.closing.get() {
            return;
        }
        (f.old_bytes(), (f.snapshot, f.sealed.clone()))
    };
    let live = shared.live_bytes();
    if old < shared.cfg.segment_bytes || old < live.saturating_mul(2) {
        return;
    }
    if shared.health.get() != StoreState::Ready {
        return;
    }
    shared.files.borrow_mut().compacting = true;
    tracing::debug!(
        shard = shared.shard,
        old,
        live,
        "journal: compacting the old files into a snapshot"
    );
    spawn(shared, inputs.0, inputs.1, active_seq);
}

/// The disk is full: compacts the sealed segments (everything before `active_seq`) whenever
/// the old files hold more than the live data, whatever the usual thresholds, so that the
/// journal's dead records give their room back without waiting for a roll, which cannot come
/// while no commit can be written (a compaction at the last roll may have found no room).
pub(crate) fn make_room(shared: &Rc<ShardJournal>, active_seq: u64) {
    let inputs = {
        let f = shared.files.borrow();
        let behind = f.snapshot.is_none_or(|s| s.0 < active_seq);
        if f.compacting || f.sealed.is_empty() || !behind || shared.closing.get() {
            return;
        }
        if f.old_bytes() <= shared.live_bytes() || shared.health.get() == StoreState::Failed {
            return;
        }
        (f.snapshot, f.sealed.clone())
    };
    shared.files.borrow_mut().compacting = true;
    tracing::info!(
        shard = shared.shard,
        "journal: the disk is full; compacting the sealed segments to make room"
    );
    spawn(shared, inputs.0, inputs.1, active_seq);
}

/// Starts the task and keeps its handle where `close` finds it (replacing a finished one).
fn spawn(
    shared: &Rc<ShardJournal>,
    snapshot: Option<(u64, u64)>,
    sealed: Vec<(u64, u64)>,
    out: u64,
) {
    let running = Running::mark(shared);
    let task = glommio::spawn_local(run(running, snapshot, sealed, out));
    *shared.compaction.borrow_mut() = Some(task);
}

/// A compaction task's hold on `Files::running`: marked when the task is spawned, cleared (and
/// a held commit let go on) when its future is dropped, however it ends: done, failed, or
/// cancelled by `close`, even before its first poll.
struct Running(Rc<ShardJournal>);

impl Running {
    fn mark(shared: &Rc<ShardJournal>) -> Running {
        shared.files.borrow_mut().running = true;
        Running(shared.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut files = self.0.files.borrow_mut();
        files.running = false;
        files.held = false;
        drop(files);
        self.0.compacted.notify(usize::MAX);
    }
}

async fn run(running: Running, snapshot: Option<(u64, u64)>, sealed: Vec<(u64, u64)>, out: u64) {
    let shared = &running.0;
    let started = Instant::now();
    let result = compact(shared, snapshot, &sealed, out).await;
    shared.files.borrow_mut().compacting = false;
    match result {
        Ok((timers, bytes)) => {
            {
                let mut f = shared.files.borrow_mut();
                f.snapshot = Some((out, bytes));
                f.sealed.retain(|s| s.0 >= out);
            }
            let m = shared.m();
            StoreMetrics::count(&m.journal_snapshots_total, 1);
            m.journal_snapshot_ns
                .store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            tracing::debug!(
                shard = shared.shard,
                timers,
                bytes,
                ms = started.elapsed().as_millis() as u64,
                "journal: snapshot written, old files deleted"
            );
        }
        Err(Stop::NoSpace(e)) => {
            tracing::warn!(shard = shared.shard, error = %e, "journal: no space for a snapshot; compaction retried at the next segment roll");
        }
        Err(Stop::Io(e)) => {
            StoreMetrics::count(&shared.m().errors_total, 1);
            tracing::warn!(shard = shared.shard, error = %e, "journal: compaction failed; retried at the next segment roll");
        }
        Err(Stop::Damage(e)) => {
            StoreMetrics::count(&shared.m().errors_total, 1);
            // Never again in this process: the same damage would stop it every time.
            shared.files.borrow_mut().compacting = true;
            tracing::error!(shard = shared.shard, error = %e, "journal: compaction stopped by a damaged file; the journal keeps growing until the file is restored (the next start reports it)");
        }
    }
}

enum Stop {
    NoSpace(std::io::Error),
    /// Any other I/O error: try again at the next roll.
    Io(std::io::Error),
    /// A damaged input: compaction stops for this run of the process.
    Damage(String),
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Stop {
        if super::segment::is_no_space(&e) {
            Stop::NoSpace(e)
        } else {
            Stop::Io(e)
        }
    }
}

/// Writes snapshot `out` from the inputs and deletes them; (timers, bytes) of the snapshot.
async fn compact(
    shared: &ShardJournal,
    snapshot: Option<(u64, u64)>,
    sealed: &[(u64, u64)],
    out: u64,
) -> Result<(u64, u64), Stop> {
    let dir = &shared.dir;
    let io = &shared.io;
    let snap = match snapshot {
        Some((seq, _)) => Some(load(io, &dir.join(snapshot_name(seq))).await?),
        None => None,
    };
    let mut segments = Vec::with_capacity(sealed.len());
    for &(seq, _) in sealed {
        segments.push(load(io, &dir.join(super::file::segment_name(seq))).await?);
    }
    let mut replay = Replay::new(snap, segments, false, false);
    replay.index().await.map_err(Stop::Damage)?;
    replay.check_snapshot().await.map_err(Stop::Damage)?;

    let tmp = dir.join(snapshot_tmp_name(out));
    let written = write(shared, &replay, &tmp, out).await;
    let (timers, bytes) = match written {
        Ok(w) => w,
        Err(e) => {
            let doomed = tmp.clone();
            let _ = io.run(move |d| d.unlink(&doomed)).await;
            return Err(e);
        }
    };
    // Unmapping the inputs tears down their page tables (milliseconds for large segments):
    // the I/O thread does it, not the shard's.
    let _ = io
        .run(move |_| {
            drop(replay);
            Ok(())
        })
        .await;
    let name = dir.join(snapshot_name(out));
    io.run(move |d| d.rename(&tmp, &name)).await?;
    io.sync_dir(dir).await?;
    let mut doomed: Vec<PathBuf> = sealed
        .iter()
        .map(|&(seq, _)| dir.join(super::file::segment_name(seq)))
        .collect();
    doomed.extend(snapshot.map(|(seq, _)| dir.join(snapshot_name(seq))));
    for p in doomed {
        let shown = p.display().to_string();
        if let Err(e) = io.run(move |d| d.unlink(&p)).await {
            tracing::warn!(file = %shown, error = %e, "journal: cannot delete a compacted file (the next start does)");
        }
    }
    let _ = io.sync_dir(dir).await;
    Ok((timers, bytes))
}

async fn write(
    shared: &ShardJournal,
    replay: &Replay,
    tmp: &Path,
    out: u64,
) -> Result<(u64, u64), Stop> {
    // A `.tmp` left by a crash of an earlier run was deleted at start; one left by a failed
    // compaction of this run was deleted when it failed.
    let mut w = SnapshotWriter::create(&shared.io, tmp, shared.shard, shared.shards, out).await?;
    let mut pace = Pace::new();
    for step in replay.live_steps() {
        if let Some((_, frame)) = step {
            w.put(frame).await?;
        }
        pace.step().await;
    }
    let timers = w.entries();
    let bytes = w.finish(replay.end(timers)).await?;
    Ok((timers, bytes))
}

/// A whole file, mapped on the journal's I/O thread (no blocking call on the shard's thread).
async fn load(io: &IoThread, path: &Path) -> Result<Source, Stop> {
    let owned = path.to_path_buf();
    let read = io.run(move |_| Buf::map(&owned)).await?;
    let header =
        Header::decode(&read).map_err(|why| Stop::Damage(format!("{}: {why}", path.display())))?;
    Ok(Source {
        path: path.to_path_buf(),
        buf: read,
        header,
    })
}
