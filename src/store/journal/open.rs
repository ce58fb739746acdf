//! A shard's start: load and check its files (`open`, before the shard reports itself
//! started, so that corruption stops the start), then hand the live timers to the shard
//! (`hand_over`, from `Store::recover`).
//!
//! ```text
//!   open:       load the newest snapshot and the segments after it (shard_dir::check_dir)
//!               index the segments, check every CRC and the snapshot (replay)
//!               then, only then, delete what the newest snapshot covers
//!               truncate a torn tail, counted; corruption → an error naming file and offset
//!               create the next segment (a segment is never appended to after a restart)
//!   hand_over:  every live timer → the shard's insert, yielding every 4,096
//! ```

use super::file::BLOCK;
use super::replay::{breathe, Replay, YIELD_EVERY};
use super::segment::Log;
use super::shard_dir::{check_dir, Checked, Owner};
use super::ShardJournal;
use crate::metrics::StoreMetrics;
use crate::store::Recovered;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What `open` loaded, and the segment the commit task will write.
pub struct Opened {
    replay: Replay,
    active: Log,
    started: Instant,
}

impl Opened {
    /// The highest version of every record loaded (`replay`).
    pub fn version_floor(&self) -> u64 {
        self.replay.report.version_floor
    }

    /// At most how many timers and dead letters `hand_over` hands the shard.
    pub fn live_bound(&self) -> usize {
        self.replay.live_bound()
    }
}

pub(crate) async fn open(shared: &ShardJournal) -> Result<Opened, String> {
    let started = Instant::now();
    let cfg = &shared.cfg;
    let Checked {
        mut replay,
        obsolete,
        torn,
        ..
    } = check_dir(&shared.dir, cfg.skip_corrupt, Some(owner(shared))).await?;
    // Only now that the newest snapshot and the segments after it are known good.
    for path in obsolete {
        remove(shared, path).await?;
    }
    let snap = replay.snapshot_file();
    shared.next_batch.set(replay.next_batch());
    let report = replay.report.clone();
    let m = shared.m();
    StoreMetrics::count(&m.journal_torn_total, torn);
    StoreMetrics::count(&m.journal_corrupt_total, report.corrupt);
    let mut sealed: Vec<(u64, u64)> = replay
        .segments()
        .iter()
        .map(|s| (s.header.seq, s.buf.len() as u64))
        .collect();
    if let Some((path, end)) = &report.truncate {
        tracing::warn!(shard = shared.shard, file = %path.display(), offset = end, "journal: torn tail truncated (a commit cut short by a crash; it was never acknowledged)");
    }
    // The newest segment is never written again: give back its reserved tail, or drop it
    // whole when it holds no record.
    if let (Some(end), Some(last)) = (report.last_end, sealed.last().copied()) {
        let path = shared.dir.join(super::file::segment_name(last.0));
        if end <= BLOCK as u64 {
            remove(shared, path).await?;
            sealed.pop();
        } else if end < last.1 {
            cut(shared, &mut replay, last.0, end)
                .await
                .map_err(|e| format!("cannot truncate {}: {e}", path.display()))?;
            if let Some(l) = sealed.last_mut() {
                l.1 = end;
            }
        }
    }
    if report.corrupt > 0 {
        tracing::error!(
            shard = shared.shard,
            regions = report.corrupt,
            "journal: corrupt records skipped (--journal-skip-corrupt); the timers they held are lost"
        );
    }
    let next = sealed
        .last()
        .map(|s| s.0.saturating_add(1))
        .into_iter()
        .chain(snap.map(|s| s.0))
        .max()
        .unwrap_or(1)
        .max(1);
    // With `--fsync everysec` or `never` the newest segment may hold commits a crashed run
    // acknowledged unsynced: sync it before a newer one exists, so that only the newest
    // segment can ever hold unsynced commits (the rule `scan` relies on).
    if let Some(&(seq, _)) = sealed.last() {
        let path = shared.dir.join(super::file::segment_name(seq));
        let shown = path.display().to_string();
        shared
            .io
            .run(move |d| d.sync(&d.open(&path)?))
            .await
            .map_err(|e| format!("cannot sync {shown}: {e}"))?;
    }
    let active = Log::create(
        &shared.io,
        &shared.dir,
        next,
        shared.shard,
        shared.shards,
        cfg.segment_bytes,
        cfg.fsync,
    )
    .await
    .map_err(|e| format!("cannot create a segment in {}: {e}", shared.dir.display()))?;
    {
        let mut files = shared.files.borrow_mut();
        files.snapshot = snap;
        files.sealed = sealed;
    }
    shared.publish_files(BLOCK as u64);
    Ok(Opened {
        replay,
        active,
        started,
    })
}

fn owner(shared: &ShardJournal) -> Owner {
    Owner {
        shard: shared.shard as u32,
        shards: shared.shards as u32,
    }
}

/// Removes a file a start found it may delete.
async fn remove(shared: &ShardJournal, path: PathBuf) -> Result<(), String> {
    let shown = path.display().to_string();
    shared
        .io
        .run(move |d| d.unlink(&path))
        .await
        .map_err(|e| format!("cannot remove {shown}: {e}"))
}

/// Cuts segment `seq` to `end`, the valid length of its torn tail, made durable.
async fn cut(
    shared: &ShardJournal,
    replay: &mut Replay,
    seq: u64,
    end: u64,
) -> std::io::Result<()> {
    let Some(path) = replay.unmap_segment(seq) else {
        return Ok(());
    };
    shared
        .io
        .run(move |d| {
            let f = d.open(&path)?;
            d.set_len(&f, end)?;
            d.sync(&f)
        })
        .await?;
    replay.map_segment(seq)
}

/// Hands every live timer to `insert`; the segment for the commit task, or `None` if
/// `stop` was set first.
pub(crate) async fn hand_over(
    shared: &ShardJournal,
    opened: Opened,
    insert: &mut dyn FnMut(Recovered<'_>) -> bool,
    stop: &AtomicBool,
) -> Option<Log> {
    let Opened {
        replay,
        active,
        started,
    } = opened;
    let (mut loaded, mut refused) = (0u64, 0u64);
    for (i, (t, frame)) in replay.live().enumerate() {
        let fits = insert(Recovered {
            tenant: t.tenant,
            key: t.key,
            version: t.version,
            deadline: t.deadline,
            meta: t.meta,
            payload: t.payload,
            dead: Some(super::record::is_dead_letter(frame)),
        });
        if fits {
            loaded += 1;
            shared.note_record(frame.len());
        } else {
            refused += 1;
            if refused == 1 {
                tracing::error!(shard = shared.shard, tenant = t.tenant, key = t.key, "journal: recovered timer does not fit this shard (capacity or range); it stays in the journal");
            }
        }
        if (i + 1) % YIELD_EVERY == 0 {
            if stop.load(Ordering::Acquire) {
                return None;
            }
            breathe().await;
        }
    }
    drop(replay);
    // Timers that did not fit stay live in the journal's files (compaction replays files, not
    // the shard's table), so a restart with room recovers them.
    if refused > 0 {
        StoreMetrics::count(&shared.m().errors_total, refused);
        tracing::error!(shard = shared.shard, refused, "journal: recovered timers refused by the shard; they stay in the journal: raise shard_capacity and restart");
    }
    shared.live.set(loaded);
    shared.m().recovered(loaded, started.elapsed());
    tracing::info!(
        shard = shared.shard,
        timers = loaded,
        ms = started.elapsed().as_millis() as u64,
        "journal: recovered pending timers"
    );
    Some(active)
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
