//! The generation directories of a data directory: `gen-<G>/shard-<s>/`, created whole,
//! removed once `CURRENT` names a newer complete one.
//!
//! Every change goes through the journal's `Disk`, so the crash matrix faults it.

use super::current::Generation;
use super::io::Disk;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

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
/// what an old generation or a finished re-partition left. A newer one (an unfinished
/// re-partition) is left alone; the next re-partition starts it again.
pub(super) fn remove_older_generations(disk: &Disk, root: &Path, keep: u64, found: &[Generation]) {
    for g in found {
        let dir = generation_dir(root, g.number);
        if g.number < keep {
            if let Err(err) = disk.remove_tree(&dir) {
                tracing::warn!(dir = %dir.display(), error = %err, "journal: cannot remove an old generation");
            }
        } else if g.number > keep {
            tracing::warn!(dir = %dir.display(), current = keep, "journal: a generation newer than CURRENT's (an unfinished change of shard count) is left alone");
        }
    }
}
