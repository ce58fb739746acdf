//! The generation directories of a data directory: `gen-<G>/shard-<s>/`, created whole,
//! removed once `CURRENT` names a newer complete one — or, when a lossy re-partition marked
//! one (`KEPT`), set aside as `kept-gen-<G>` instead, with a log line that says where.
//!
//! Every change goes through the journal's `Disk`, so the crash matrix faults it.

use super::current::Generation;
use super::io::Disk;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The mark of a generation to keep (its content says why).
const KEPT: &str = "KEPT";

pub(super) fn generation_dir(root: &Path, generation: u64) -> PathBuf {
    root.join(format!("gen-{generation}"))
}

pub(super) fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Config(format!("journal: {what} {}: {e}", path.display()))
}

/// Creates generation `generation` with the directories of `shards` shards (those already
/// there stay), and makes their names durable.
pub(super) fn create_generation(
    disk: &Disk,
    root: &Path,
    generation: u64,
    shards: usize,
) -> Result<PathBuf> {
    let g = generation_dir(root, generation);
    disk.create_dir(&g)
        .map_err(|e| io("cannot create", &g, e))?;
    for s in 0..shards {
        let d = g.join(format!("shard-{s}"));
        disk.create_dir(&d)
            .map_err(|e| io("cannot create", &d, e))?;
    }
    disk.sync_dir(&g).map_err(|e| io("cannot sync", &g, e))?;
    disk.sync_dir(root)
        .map_err(|e| io("cannot sync", root, e))?;
    Ok(g)
}

/// Deletes the generations older than `keep`, which `CURRENT` names and which is complete:
/// what an old generation or a finished re-partition left. One that a lossy re-partition
/// marked is set aside instead ([`set_aside`]). A newer one (an unfinished
/// re-partition) is left alone; the next re-partition starts it again.
pub(super) fn remove_older_generations(disk: &Disk, root: &Path, keep: u64, found: &[Generation]) {
    for g in found {
        let dir = generation_dir(root, g.number);
        if g.number < keep {
            let removed = if is_marked(&dir) {
                set_aside(disk, root, g.number)
            } else {
                disk.remove_tree(&dir)
            };
            if let Err(err) = removed {
                tracing::warn!(dir = %dir.display(), error = %err, "journal: cannot remove an old generation");
            }
        } else if g.number > keep {
            tracing::warn!(dir = %dir.display(), current = keep, "journal: a generation newer than CURRENT's (an unfinished change of shard count) is left alone");
        }
    }
}

/// Marks generation directory `dir` as one to keep: its replay skipped `skipped` damaged
/// regions or files, which exist nowhere else.
pub(super) fn mark(disk: &Disk, dir: &Path, skipped: u64) -> Result<()> {
    let path = dir.join(KEPT);
    let why = format!(
        "A change of shard count replayed this generation with --journal-skip-corrupt and skipped {skipped} damaged regions or files; the timers they held are not in the newer generation. Kept for inspection or restore; delete it by hand.\n"
    );
    if path.exists() {
        disk.unlink(&path)
            .map_err(|e| io("cannot replace", &path, e))?;
    }
    disk.create_synced(&path, why.as_bytes())
        .and_then(|()| disk.sync_dir(dir))
        .map_err(|e| io("cannot write", &path, e))
}

/// Whether generation directory `dir` is marked to be kept.
pub(super) fn is_marked(dir: &Path) -> bool {
    dir.join(KEPT).exists()
}

/// Moves a marked old generation out of the generations, to `kept-gen-<G>`, and says where.
pub(super) fn set_aside(disk: &Disk, root: &Path, generation: u64) -> std::io::Result<()> {
    let from = generation_dir(root, generation);
    let to = root.join(format!("kept-gen-{generation}"));
    disk.rename(&from, &to)?;
    disk.sync_dir(root)?;
    tracing::error!(
        kept = %to.display(),
        "journal: the change of shard count skipped damaged records (--journal-skip-corrupt); the old generation, with every file it had, is kept here for inspection or restore (the timers those records held are not served); delete it by hand"
    );
    Ok(())
}
