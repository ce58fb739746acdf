//! The data directory: its lock, `CURRENT`, the generation directories, and what a start
//! checks in a shard directory before it deletes anything.
//!
//! `CURRENT` names the generation in force and its shard count (`current`: its format, and
//! why a start refuses a data directory without a valid one). It is only ever replaced whole,
//! so a crash leaves either the old generation or the new one in force, never a mix. A start
//! deletes a generation only when `CURRENT` names a newer one with all its shard directories.
//!
//! A shard directory's files are checked before any of them is deleted (`shard_dir`); the
//! generation directories are `generations`'s.
//!
//! Every change to the directory (its creation, a generation's directories, `CURRENT`, the
//! removal of an old generation) goes through the journal's `Disk` (`io`), so the crash matrix
//! faults it like the shards' own writes. `LOCK` is opened directly: it holds no data, and its
//! loss changes nothing.
//!
//! A change of shard count is `repartition`'s.

use super::current::{self, Current};
use super::generations::{create_generation, io, remove_older_generations};
use super::io::Disk;
use super::JournalConfig;
use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use super::shard_dir::{read_shard_dir, Found};

/// The data directory in force, locked for this process while any shard's store lives.
#[derive(Debug)]
pub struct DataDir {
    pub root: PathBuf,
    pub generation: u64,
    _lock: File,
}

impl DataDir {
    pub fn generation_dir(&self) -> PathBuf {
        super::generations::generation_dir(&self.root, self.generation)
    }

    pub fn shard_dir(&self, shard: usize) -> PathBuf {
        self.generation_dir().join(format!("shard-{shard}"))
    }
}

/// Locks the data directory and makes its generation match `shards` (re-partitioning the old
/// one if the count changed). Runs on the caller's thread, before the shards start.
pub fn prepare(cfg: &JournalConfig, shards: usize) -> Result<Arc<DataDir>> {
    let disk = &cfg.disk;
    // Absolute: glommio opens directories relative to nothing (a relative path fails with
    // EBADF), and the shards must not depend on the working directory anyway.
    let root = std::path::absolute(&cfg.dir).map_err(|e| io("cannot resolve", &cfg.dir, e))?;
    create_root(disk, &root)?;
    let lock = lock(&root)?;
    let found = current::survey(&root)?;
    let generation = match current::read(&root)? {
        Err(why @ current::Invalid::OtherFormat(_)) => {
            return Err(Error::Config(format!(
                "journal: {} says {why}",
                root.join("CURRENT").display()
            )))
        }
        Err(why) => {
            return Err(current::refusal(
                &root,
                &format!("not valid ({why})"),
                &found,
            ))
        }
        Ok(None) => first_start(disk, &root, &found, shards)?,
        Ok(Some(c)) => {
            in_force(&root, c, &found)?;
            if c.shards == shards {
                remove_older_generations(disk, &root, c.generation, &found);
                c.generation
            } else {
                tracing::info!(
                    from = c.shards,
                    to = shards,
                    "journal: the shard count changed; sending every pending timer to its new shard"
                );
                let started = std::time::Instant::now();
                let moved = super::repartition::run(cfg, &root, c, shards)?;
                tracing::info!(
                    timers = moved,
                    ms = started.elapsed().as_millis() as u64,
                    "journal: re-partitioned"
                );
                c.generation + 1
            }
        }
    };
    Ok(Arc::new(DataDir {
        root,
        generation,
        _lock: lock,
    }))
}

/// A start without `CURRENT`: a first start, or one that a crash cut short before it wrote
/// `CURRENT` — which may have left empty segments, never a record (`current::leftover_of_a_first_start`).
/// Anything else is refused (`current::refusal`).
fn first_start(
    disk: &Disk,
    root: &Path,
    found: &[current::Generation],
    shards: usize,
) -> Result<u64> {
    let generation = if found.iter().any(|g| g.files > 0) {
        let Some((generation, empty)) = current::leftover_of_a_first_start(found, root)? else {
            return Err(current::refusal(root, "missing", found));
        };
        tracing::warn!(
            files = ?empty,
            "journal: CURRENT is missing, and the only journal files are segments that hold no record (a first start cut short): removing them and starting empty"
        );
        for path in &empty {
            disk.unlink(path)
                .map_err(|e| io("cannot remove", path, e))?;
            if let Some(dir) = path.parent() {
                disk.sync_dir(dir).map_err(|e| io("cannot sync", dir, e))?;
            }
        }
        generation
    } else {
        1
    };
    create_generation(disk, root, generation, shards)?;
    let c = Current { generation, shards };
    current::write(disk, root, c)?;
    Ok(generation)
}

/// Creates the data directory and any missing parent; a parent that gained an entry is synced,
/// so that the directory outlives a power cut once `CURRENT` in it is durable.
fn create_root(disk: &Disk, root: &Path) -> Result<()> {
    let missing: Vec<&Path> = root.ancestors().take_while(|a| !a.is_dir()).collect();
    for dir in missing.iter().rev() {
        disk.create_dir(dir)
            .map_err(|e| io("cannot create", dir, e))?;
        if let Some(parent) = dir.parent() {
            disk.sync_dir(parent)
                .map_err(|e| io("cannot sync", parent, e))?;
        }
    }
    Ok(())
}

fn lock(root: &Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let path = root.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io("cannot open", &path, e))?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(Error::Config(format!(
            "journal: the data directory {} is in use by another punctual process ({}); stop it or choose another --data-dir",
            root.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(f)
}

/// Checks that the generation `CURRENT` names is there whole; else the refusal.
fn in_force(root: &Path, c: Current, found: &[current::Generation]) -> Result<()> {
    let what = match found.iter().find(|g| g.number == c.generation) {
        None => format!("naming gen-{}, which is not there", c.generation),
        Some(g) if !g.complete(c.shards) => {
            let missing: Vec<String> = (0..c.shards)
                .filter(|s| g.shards.binary_search(s).is_err())
                .map(|s| format!("shard-{s}"))
                .collect();
            format!(
                "naming gen-{} with {} shards, whose {} is not there",
                c.generation,
                c.shards,
                missing.join(", ")
            )
        }
        Some(_) => return Ok(()),
    };
    Err(current::refusal(root, &what, found))
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
