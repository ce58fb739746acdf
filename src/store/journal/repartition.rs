//! A change of shard count: every old shard's live timers and dead letters sent to their new
//! owner, once, before the shards start.
//!
//! ```text
//!   CURRENT says generation G with M shards; the start asks for N
//!   1. remove gen-(G+1) if an earlier attempt left it; create it with N shard directories
//!   2. for each old shard: load and check its files (the same damage rules as a start),
//!      send each live frame, unchanged, to snap-1 of shard_of(tenant, key, N)
//!   3. end each new snapshot (version floor: the highest of all the old shards), sync it
//!      and its directory
//!   4. if step 2 skipped damage (--journal-skip-corrupt): mark gen-G KEPT (synced)
//!   5. switch CURRENT to G+1                                   ← the switch
//!   6. gen-G: set aside as kept-gen-G if marked, else deleted
//! ```
//!
//! A crash before the switch leaves G in force and the next start begins again; after it, G+1
//! is complete, and the next start finishes step 6. Every write goes through the journal's
//! `Disk`, so the crash matrix's re-partition phase faults each of them.
//!
//! Why the mark: after a lossy replay the old files are the only place the skipped records
//! still exist, and an operator may want to restore them. The mark is written before the
//! switch, so no crash lets a later start delete that generation as merely old.
//!
//! Why one re-partition at start rather than every shard reading every old shard's files:
//! the common start (same count) reads only its own files; the rare one costs one extra
//! sequential read and write of the live data; and no shard ever has to wait for the others
//! before it may acknowledge (with shared old files, none could, until all had taken over
//! their timers, or a crash would leave acknowledged timers in two generations).

use super::current::{self, Current};
use super::file::snapshot_name;
use super::generations::{create_generation, generation_dir, io, mark, remove_older_generations};
use super::io::IoThread;
use super::record::End;
use super::shard_dir::{check_dir, Owner};
use super::snapshot::SnapshotWriter;
use super::JournalConfig;
use crate::error::{Error, Result};
use std::path::Path;

/// Re-partitions the generation `c` names into `new` shards in the next one and switches
/// `CURRENT` to it; the number of timers and dead letters moved.
pub fn run(cfg: &JournalConfig, root: &Path, c: Current, new: usize) -> Result<u64> {
    let disk = &cfg.disk;
    let to = c.generation + 1;
    let target = generation_dir(root, to);
    if target.exists() {
        disk.remove_tree(&target)
            .map_err(|e| io("cannot remove", &target, e))?;
    }
    create_generation(disk, root, to, new)?;
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| Error::Config(format!("journal: cannot start the re-partition: {e}")))?;
    let moved = ex.run(send_all(cfg, root, c, new))?;
    let old = generation_dir(root, c.generation);
    if moved.skipped > 0 {
        mark(disk, &old, moved.skipped)?;
    }
    current::write(
        disk,
        root,
        Current {
            generation: to,
            shards: new,
        },
    )?;
    if let Ok(found) = current::survey(root) {
        remove_older_generations(disk, root, to, &found);
    }
    Ok(moved.timers)
}

/// What [`send_all`] did.
struct Moved {
    timers: u64,
    /// Damaged regions and files its replay skipped.
    skipped: u64,
}

/// Steps 2 and 3 of the module doc.
async fn send_all(cfg: &JournalConfig, root: &Path, c: Current, new: usize) -> Result<Moved> {
    let io_thread = IoThread::start("journal-io-repartition".into(), cfg.disk.clone())
        .map_err(|e| Error::Config(format!("journal: cannot start an I/O thread: {e}")))?;
    let target = generation_dir(root, c.generation + 1);
    let mut outs = Vec::with_capacity(new);
    for s in 0..new {
        let path = target.join(format!("shard-{s}")).join(snapshot_name(1));
        let w = SnapshotWriter::create(&io_thread, &path, s, new, 1)
            .await
            .map_err(|e| io("cannot create", &path, e))?;
        outs.push((path, w));
    }
    let source = generation_dir(root, c.generation);
    let (mut moved, mut floor) = (
        Moved {
            timers: 0,
            skipped: 0,
        },
        0u64,
    );
    for s in 0..c.shards {
        let dir = source.join(format!("shard-{s}"));
        if !dir.exists() {
            continue;
        }
        let owner = Owner {
            shard: s as u32,
            shards: c.shards as u32,
        };
        let checked = check_dir(&dir, cfg.skip_corrupt, Some(owner))
            .await
            .map_err(|e| Error::Config(format!("journal: {e}")))?;
        moved.skipped += checked.skipped_files.len() as u64 + checked.replay.report.corrupt;
        floor = floor.max(checked.replay.end(0).version_floor);
        for (t, frame) in checked.replay.live() {
            let owner = crate::partition::shard_of(t.tenant, t.key, new);
            if let Some((path, w)) = outs.get_mut(owner) {
                w.put(frame)
                    .await
                    .map_err(|e| io("cannot write", path, e))?;
                moved.timers += 1;
            }
        }
    }
    for (path, w) in outs {
        // A new generation's batches start again at 1; its versions stay above the old ones.
        let end = End {
            entries: 0,
            last_batch: 0,
            version_floor: floor,
        };
        w.finish(end)
            .await
            .map_err(|e| io("cannot write", &path, e))?;
        if let Some(dir) = path.parent() {
            io_thread
                .sync_dir(dir)
                .await
                .map_err(|e| io("cannot sync", dir, e))?;
        }
    }
    Ok(moved)
}

#[cfg(test)]
#[path = "repartition_tests.rs"]
mod tests;
