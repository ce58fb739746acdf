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
mod tests {
    use super::super::current::Current;
    use super::super::file::snapshot_name;
    use super::super::generations::generation_dir;
    use super::super::testlog::{schedule, segment, snapshot};
    use super::*;

    fn cfg(root: &Path) -> JournalConfig {
        JournalConfig::new(root)
    }

    fn shard_dir(root: &Path, g: u64, s: usize) -> PathBuf {
        let d = generation_dir(root, g).join(format!("shard-{s}"));
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn set_current(root: &Path, generation: u64, shards: usize) {
        current::write(&Disk::default(), root, Current { generation, shards }).expect("CURRENT");
    }

    fn refused(root: &Path) -> String {
        match prepare(&cfg(root), 1) {
            Err(e) => e.to_string(),
            Ok(d) => panic!("started on generation {}", d.generation),
        }
    }

    #[test]
    fn a_fresh_directory_and_a_first_start_cut_before_current_start_empty() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(prepare(&cfg(tmp.path()), 2).expect("fresh").generation, 1);
        let tmp = tempfile::tempdir().expect("tempdir");
        shard_dir(tmp.path(), 1, 0); // created, then the crash: no CURRENT, no file
        assert_eq!(prepare(&cfg(tmp.path()), 1).expect("restart").generation, 1);
    }

    #[test]
    fn journal_files_without_a_valid_current_refuse_the_start_and_stay() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let seg = shard_dir(root, 4, 0).join(super::super::file::segment_name(1));
        segment(seg.parent().expect("dir"), 1, 1, &[vec![schedule("k", 1)]]);
        let why = refused(root);
        for part in [
            "CURRENT",
            "is missing",
            "gen-4",
            "punctual journal check",
            "printf",
        ] {
            assert!(why.contains(part), "{part:?} not in: {why}");
        }
        assert!(why.contains(&root.display().to_string()), "{why}");
        assert!(seg.exists(), "the start deleted a file");
        std::fs::write(root.join("CURRENT"), "generation 4\nshards 1\n").expect("write");
        let why = refused(root);
        assert!(why.contains("not valid"), "{why}");
        assert!(seg.exists());
        // The command the message gives puts it right.
        set_current(root, 4, 1);
        assert_eq!(prepare(&cfg(root), 1).expect("restored").generation, 4);
        assert!(seg.exists());
    }

    #[test]
    fn a_current_of_another_format_is_refused_without_a_fix_that_would_misread_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        snapshot(&shard_dir(root, 1, 0), 1, &[schedule("k", 1)], 0, 1);
        std::fs::write(
            root.join("CURRENT"),
            "punctual journal format 1\ngeneration 1\nshards 1\n",
        )
        .expect("write");
        let why = refused(root);
        assert!(
            why.contains("journal format 1") && why.contains("not migrated"),
            "{why}"
        );
        assert!(!why.contains("printf"), "{why}");
        assert!(generation_dir(root, 1)
            .join("shard-0")
            .join(snapshot_name(1))
            .exists());
    }

    #[test]
    fn current_naming_a_missing_generation_or_shard_refuses_and_deletes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let old = shard_dir(root, 1, 0);
        snapshot(&old, 1, &[schedule("k", 1)], 0, 1);
        set_current(root, 2, 1);
        let why = refused(root);
        assert!(why.contains("gen-2, which is not there"), "{why}");
        assert!(old.join(snapshot_name(1)).exists());
        shard_dir(root, 2, 1);
        set_current(root, 2, 2);
        let why = refused(root);
        assert!(why.contains("shard-0 is not there"), "{why}");
        assert!(old.join(snapshot_name(1)).exists());
    }

    #[test]
    fn only_generations_older_than_a_complete_current_one_are_deleted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        for g in [1, 2, 3] {
            snapshot(&shard_dir(root, g, 0), 1, &[schedule("k", g)], 0, g);
        }
        set_current(root, 2, 1);
        assert_eq!(prepare(&cfg(root), 1).expect("start").generation, 2);
        assert!(
            !generation_dir(root, 1).exists(),
            "the old generation stays"
        );
        assert!(generation_dir(root, 2).exists());
        assert!(generation_dir(root, 3).exists(), "a newer one was deleted");
    }

    /// Segment 1 of shard 0 of 1 as its creation leaves it before any commit: the header, then
    /// the reserved size in zeros.
    fn empty_segment(dir: &Path) -> PathBuf {
        let path = dir.join(super::super::file::segment_name(1));
        let mut b = super::super::file::Header {
            kind: super::super::file::Kind::Segment,
            block: 4096,
            shard: 0,
            shards: 1,
            seq: 1,
        }
        .encode();
        b.resize(64 << 10, 0);
        std::fs::write(&path, b).expect("write");
        path
    }

    #[test]
    fn a_first_start_cut_short_after_creating_an_empty_segment_starts_empty() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let seg = empty_segment(&shard_dir(root, 1, 0));
        let data = prepare(&cfg(root), 1).expect("nothing was ever acknowledged: it starts");
        assert_eq!(data.generation, 1);
        assert!(!seg.exists(), "the empty segment is removed");
        assert_eq!(
            current::read(root).expect("read"),
            Ok(Some(Current {
                generation: 1,
                shards: 1
            }))
        );
    }

    #[test]
    fn a_directory_without_current_is_refused_when_anything_but_empty_segments_is_there() {
        // A record after the header, a snapshot beside the empty segment, empty segments in
        // two generations: each could hold what was acknowledged.
        let with_record = |root: &Path| {
            let dir = shard_dir(root, 1, 0);
            segment(&dir, 1, 1, &[vec![schedule("k", 1)]]);
        };
        let with_snapshot = |root: &Path| {
            let dir = shard_dir(root, 1, 0);
            empty_segment(&dir);
            snapshot(&dir, 1, &[], 0, 1);
        };
        let in_two_generations = |root: &Path| {
            empty_segment(&shard_dir(root, 1, 0));
            empty_segment(&shard_dir(root, 2, 0));
        };
        let cases: [&dyn Fn(&Path); 3] = [&with_record, &with_snapshot, &in_two_generations];
        for make in cases {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path();
            make(root);
            let why = refused(root);
            assert!(why.contains("is missing"), "{why}");
            assert!(!root.join("CURRENT").exists());
            let seg = generation_dir(root, 1)
                .join("shard-0")
                .join(super::super::file::segment_name(1));
            assert!(seg.exists(), "the refused start deleted a file");
        }
    }
}
