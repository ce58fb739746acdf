//! Compaction: a snapshot of the live timers of the old files, written in the background,
//! then the old files deleted.
//!
//! ```text
//!   at a segment roll, when old bytes ≥ one segment and old bytes ≥ 2 × estimated live bytes:
//!     inputs  = the snapshot (if any) + every sealed segment (all before the new active one)
//!     replay  = index the sealed segments; the snapshot's untouched timers + their live ones
//!     write   snap-<active seq>.tmp: header, every live frame verbatim, an end record; sync
//!     rename  to snap-<active seq>.snap; sync the directory       ← the switch
//!     delete  the inputs; sync the directory
//! ```
//!
//! The task runs on the shard's executor and yields every 4,096 records, so the shard keeps
//! firing and the commit task keeps committing; only one compaction runs at a time. A crash
//! before the rename leaves a `.tmp` that the next start deletes; after it, the next start
//! deletes whatever inputs are left. A full disk abandons the snapshot (the next roll tries
//! again); damage in an input stops compaction for this run of the process, loudly, and leaves
//! the files for the operator (the next start reports the same damage).

use super::file::{snapshot_name, snapshot_tmp_name, Header, Kind, BLOCK};
use super::record::put_end;
use super::replay::{breathe, Buf, Replay, Source, YIELD_EVERY};
use super::segment::sync_dir;
use super::{Health, Shared};
use crate::metrics::StoreMetrics;
use futures_lite::AsyncWriteExt;
use glommio::io::{DmaStreamWriterBuilder, OpenOptions};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Starts a compaction if the old files are mostly dead (see the module doc).
pub(crate) fn maybe_start(shared: &Rc<Shared>, active_seq: u64) {
    let (old, inputs) = {
        let f = shared.files.borrow();
        if f.compacting || f.sealed.is_empty() {
            return;
        }
        (f.old_bytes(), (f.snapshot, f.sealed.clone()))
    };
    let live = shared.live_bytes();
    if old < shared.cfg.segment_bytes || old < live.saturating_mul(2) {
        return;
    }
    if shared.health.get() != Health::Ready {
        return;
    }
    shared.files.borrow_mut().compacting = true;
    tracing::debug!(
        shard = shared.shard,
        old,
        live,
        "journal: compacting the old files into a snapshot"
    );
    glommio::spawn_local(run(shared.clone(), inputs.0, inputs.1, active_seq)).detach();
}

async fn run(shared: Rc<Shared>, snapshot: Option<(u64, u64)>, sealed: Vec<(u64, u64)>, out: u64) {
    let started = Instant::now();
    let result = compact(&shared, snapshot, &sealed, out).await;
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
    shared: &Shared,
    snapshot: Option<(u64, u64)>,
    sealed: &[(u64, u64)],
    out: u64,
) -> Result<(u64, u64), Stop> {
    let dir = &shared.dir;
    let snap = match snapshot {
        Some((seq, _)) => Some(load(&dir.join(snapshot_name(seq))).await?),
        None => None,
    };
    let mut segments = Vec::with_capacity(sealed.len());
    for &(seq, _) in sealed {
        segments.push(load(&dir.join(super::file::segment_name(seq))).await?);
    }
    let mut replay = Replay::new(snap, segments, false, false);
    replay.index().await.map_err(Stop::Damage)?;
    replay.check_snapshot().await.map_err(Stop::Damage)?;

    let tmp = dir.join(snapshot_tmp_name(out));
    let written = write(shared, &replay, &tmp, out).await;
    let (timers, bytes) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = glommio::io::remove(&tmp).await;
            return Err(e);
        }
    };
    drop(replay);
    glommio::io::rename(&tmp, dir.join(snapshot_name(out)))
        .await
        .map_err(std::io::Error::from)?;
    sync_dir(dir).await?;
    let mut doomed: Vec<PathBuf> = sealed
        .iter()
        .map(|&(seq, _)| dir.join(super::file::segment_name(seq)))
        .collect();
    doomed.extend(snapshot.map(|(seq, _)| dir.join(snapshot_name(seq))));
    for p in &doomed {
        if let Err(e) = glommio::io::remove(p).await {
            tracing::warn!(file = %p.display(), error = %e, "journal: cannot delete a compacted file (the next start does)");
        }
    }
    let _ = sync_dir(dir).await;
    Ok((timers, bytes))
}

async fn write(shared: &Shared, replay: &Replay, tmp: &Path, out: u64) -> Result<(u64, u64), Stop> {
    // Readable too, though only written: the first DMA open on a device makes glommio probe
    // it with a read, and a write-only file fails that probe with EBADF, which glommio logs
    // as an error.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(tmp)
        .await
        .map_err(std::io::Error::from)?;
    let mut w = DmaStreamWriterBuilder::new(file)
        .with_buffer_size(1 << 20)
        .with_write_behind(2)
        .build();
    let header = Header {
        kind: Kind::Snapshot,
        block: BLOCK as u32,
        shard: shared.shard as u32,
        shards: shared.shards as u32,
        seq: out,
    };
    w.write_all(&header.encode()).await?;
    let mut timers = 0u64;
    for (_, frame) in replay.live() {
        w.write_all(frame).await?;
        timers += 1;
        if timers % YIELD_EVERY as u64 == 0 {
            breathe().await;
        }
    }
    let mut end = Vec::new();
    put_end(&mut end, timers);
    w.write_all(&end).await?;
    let bytes = w.current_pos();
    // Closing flushes, syncs and trims the file to what was written.
    w.close().await?;
    Ok((timers, bytes))
}

/// A whole file, mapped on glommio's blocking pool (no blocking call on the shard's thread).
async fn load(path: &Path) -> Result<Source, Stop> {
    let owned = path.to_path_buf();
    let read = glommio::executor()
        .spawn_blocking(move || Buf::map(&owned))
        .await?;
    let header =
        Header::decode(&read).map_err(|why| Stop::Damage(format!("{}: {why}", path.display())))?;
    Ok(Source {
        path: path.to_path_buf(),
        buf: read,
        header,
    })
}
