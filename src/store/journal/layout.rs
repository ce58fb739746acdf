//! The data directory: its lock, `CURRENT`, the generation directories, and the one-time
//! re-partition when the shard count changes.
//!
//! `CURRENT` names the generation in force and its shard count (`current`: its format, and
//! why a start refuses a data directory without a valid one). It is only ever replaced whole,
//! so a crash leaves either the old generation or the new one in force, never a mix. A start
//! deletes a generation only when `CURRENT` names a newer one with all its shard directories.
//!
//! A shard directory's files are checked before any of them is deleted: [`load_dir`] only
//! lists what a start may delete (older snapshots, the segments the newest snapshot covers,
//! unfinished snapshots, a last segment whose header never reached the disk), and the start
//! deletes them once the replay has found the newest snapshot and the segments good.
//!
//! # A change of shard count
//!
//! Shards own partitions (`partition % shards`), so with another count most timers have a new
//! owner. Before any shard starts, [`prepare`] replays every old shard's files (snapshot and
//! segments, with the same damage rules as a normal start), sends each live timer's frame,
//! unchanged, to the snapshot of its new owner in generation G+1, syncs those snapshots and
//! their directories, then switches `CURRENT` and deletes generation G. A crash before the
//! switch leaves G in force and the next start begins again; after it, G+1 is complete.
//!
//! Why one re-partition at start rather than every shard reading every old shard's files:
//! the common start (same count) reads only its own files; the rare one costs one extra
//! sequential read and write of the live data; and no shard ever has to wait for the others
//! before it may acknowledge (with shared old files, none could, until all had taken over
//! their timers, or a crash would leave acknowledged timers in two generations).

use super::current::{self, Current};
use super::file::{snapshot_name, Header, Kind, Listing, BLOCK};
use super::record;
use super::replay::{Buf, Replay, Source};
use super::JournalConfig;
use crate::error::{Error, Result};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The data directory in force, locked for this process while any shard's store lives.
#[derive(Debug)]
pub struct DataDir {
    pub root: PathBuf,
    pub generation: u64,
    _lock: File,
}

impl DataDir {
    pub fn generation_dir(&self) -> PathBuf {
        generation_dir(&self.root, self.generation)
    }

    pub fn shard_dir(&self, shard: usize) -> PathBuf {
        self.generation_dir().join(format!("shard-{shard}"))
    }
}

fn generation_dir(root: &Path, generation: u64) -> PathBuf {
    root.join(format!("gen-{generation}"))
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Config(format!("journal: {what} {}: {e}", path.display()))
}

/// Locks the data directory and makes its generation match `shards` (re-partitioning the old
/// one if the count changed). Runs on the caller's thread, before the shards start.
pub fn prepare(cfg: &JournalConfig, shards: usize) -> Result<Arc<DataDir>> {
    // Absolute: glommio opens directories relative to nothing (a relative path fails with
    // EBADF), and the shards must not depend on the working directory anyway.
    let root = std::path::absolute(&cfg.dir).map_err(|e| io("cannot resolve", &cfg.dir, e))?;
    std::fs::create_dir_all(&root).map_err(|e| io("cannot create", &root, e))?;
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
        Ok(None) if found.iter().any(|g| g.files > 0) => {
            return Err(current::refusal(&root, "missing", &found))
        }
        // A first start that stopped before writing CURRENT: nothing was ever written.
        Ok(None) => {
            create_generation(&root, 1, shards)?;
            current::write(
                &root,
                Current {
                    generation: 1,
                    shards,
                },
            )?;
            1
        }
        Ok(Some(c)) => {
            in_force(&root, c, &found)?;
            if c.shards == shards {
                remove_older_generations(&root, c.generation, &found);
                c.generation
            } else {
                tracing::info!(
                    from = c.shards,
                    to = shards,
                    "journal: the shard count changed; sending every pending timer to its new shard"
                );
                let started = std::time::Instant::now();
                let moved = repartition(cfg, &root, c.generation, c.shards, shards)?;
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

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

fn create_generation(root: &Path, generation: u64, shards: usize) -> Result<PathBuf> {
    let g = generation_dir(root, generation);
    for s in 0..shards {
        let d = g.join(format!("shard-{s}"));
        std::fs::create_dir_all(&d).map_err(|e| io("cannot create", &d, e))?;
        sync_dir(&d).map_err(|e| io("cannot sync", &d, e))?;
    }
    sync_dir(&g).map_err(|e| io("cannot sync", &g, e))?;
    sync_dir(root).map_err(|e| io("cannot sync", root, e))?;
    Ok(g)
}

/// Deletes the generations older than `keep`, which `CURRENT` names and which is complete:
/// what an old generation or a finished re-partition left. A newer one (an unfinished
/// re-partition) is left alone; the next re-partition starts it again.
fn remove_older_generations(root: &Path, keep: u64, found: &[current::Generation]) {
    for g in found {
        let dir = generation_dir(root, g.number);
        if g.number < keep {
            if let Err(err) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %err, "journal: cannot remove an old generation");
            }
        } else if g.number > keep {
            tracing::warn!(dir = %dir.display(), current = keep, "journal: a generation newer than CURRENT's (an unfinished change of shard count) is left alone");
        }
    }
}

/// A shard directory's files, loaded, and what a start may delete once they are found good.
pub struct Loaded {
    pub snapshot: Option<Source>,
    pub segments: Vec<Source>,
    /// Older snapshots, the segments the newest snapshot covers, unfinished snapshots, and a
    /// last segment whose header never reached the disk.
    pub obsolete: Vec<PathBuf>,
    /// Last segments whose header never reached the disk (counted as torn).
    pub torn: u64,
    /// Files skipped as unreadable (`skip_corrupt`), and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// The shard a directory's files must belong to: every header must name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub shard: u32,
    pub shards: u32,
}

/// The header of the file named for `seq`, or why it is not one that belongs where it lies.
pub(crate) fn header_of(
    buf: &[u8],
    seq: u64,
    owner: Option<Owner>,
) -> std::result::Result<Header, String> {
    let header = Header::decode(buf)?;
    if header.seq != seq {
        return Err(format!(
            "its header says seq {}, its name {seq}",
            header.seq
        ));
    }
    match owner {
        Some(o) if (header.shard, header.shards) != (o.shard, o.shards) => Err(format!(
            "its header says shard {} of {}, but it lies in the directory of shard {} of {} (a file from elsewhere?)",
            header.shard, header.shards, o.shard, o.shards
        )),
        _ => Ok(header),
    }
}

/// Loads a shard directory: its newest snapshot and the segments after it, each header
/// checked against its name and `owner`. Deletes nothing (see the module doc).
pub fn load_dir(
    dir: &Path,
    skip_corrupt: bool,
    owner: Option<Owner>,
) -> std::result::Result<Loaded, String> {
    let listing = Listing::read(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut obsolete = listing.leftovers.clone();
    let snap_seq = listing.snapshots.last().copied();
    let covered = |seq: u64| snap_seq.is_some_and(|s| seq < s);
    for &s in &listing.snapshots {
        if Some(s) != snap_seq {
            obsolete.push(dir.join(snapshot_name(s)));
        }
    }
    let (mut torn, mut skipped) = (0, Vec::new());
    let mut segments = Vec::new();
    let last = listing.segments.last().copied();
    for &seq in &listing.segments {
        let path = dir.join(super::file::segment_name(seq));
        if covered(seq) {
            obsolete.push(path);
            continue;
        }
        let buf = Buf::map(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        match header_of(&buf, seq, owner) {
            Ok(header) if header.kind == Kind::Segment => {
                segments.push(Source { path, buf, header })
            }
            // A crash while the segment was being created: nothing in it was acknowledged.
            Err(_) if Some(seq) == last && buf.iter().all(|&b| b == 0) => {
                torn += 1;
                obsolete.push(path);
            }
            Err(why) if skip_corrupt => {
                tracing::error!(file = %path.display(), %why, "journal: unreadable segment skipped");
                skipped.push((path, why));
            }
            Ok(_) => return Err(format!("{} is not a segment", path.display())),
            Err(why) => return Err(unreadable(&path, &why)),
        }
    }
    let snapshot = match snap_seq {
        None => None,
        Some(seq) => {
            let path = dir.join(snapshot_name(seq));
            let buf =
                Buf::map(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            match header_of(&buf, seq, owner) {
                Ok(header) if header.kind == Kind::Snapshot => Some(Source { path, buf, header }),
                Err(why) if skip_corrupt => {
                    tracing::error!(file = %path.display(), %why, "journal: unreadable snapshot skipped");
                    skipped.push((path, why));
                    None
                }
                Ok(_) => return Err(format!("{} is not a snapshot", path.display())),
                Err(why) => return Err(unreadable(&path, &why)),
            }
        }
    };
    Ok(Loaded {
        snapshot,
        segments,
        obsolete,
        torn,
        skipped,
    })
}

fn unreadable(path: &Path, why: &str) -> String {
    format!(
        "journal file {} is corrupt at offset 0: {why}. See what the directory holds with `punctual journal check {}`; then restore the file, or start with --journal-skip-corrupt to skip it",
        path.display(),
        super::replay::data_dir_of(path).display()
    )
}

/// A shard directory replayed and checked, as a start does before it changes anything.
pub struct Checked {
    pub replay: Replay,
    /// What the start may delete now (none when damage was skipped: the files a skipped one
    /// would have covered stay for the operator).
    pub obsolete: Vec<PathBuf>,
    /// Torn tails found, and the last segment whose header never reached the disk.
    pub torn: u64,
    /// Files skipped whole as unreadable (`skip_corrupt`), and why.
    pub skipped_files: Vec<(PathBuf, String)>,
}

/// Loads, indexes and checks a shard directory (every CRC, the snapshot, continuity);
/// deletes nothing.
pub async fn check_dir(
    dir: &Path,
    skip_corrupt: bool,
    owner: Option<Owner>,
) -> std::result::Result<Checked, String> {
    let loaded = load_dir(dir, skip_corrupt, owner)?;
    let mut replay = Replay::new(loaded.snapshot, loaded.segments, skip_corrupt, true);
    replay.index().await?;
    replay.check_snapshot().await?;
    let lossy = !loaded.skipped.is_empty() || replay.report.corrupt > 0;
    Ok(Checked {
        torn: replay.report.torn + loaded.torn,
        skipped_files: loaded.skipped,
        obsolete: if lossy { Vec::new() } else { loaded.obsolete },
        replay,
    })
}

/// Sends every live timer of generation `from` (with `old` shards) to its owner among `new`
/// shards in generation `from + 1`, then switches `CURRENT`; the number of timers moved.
fn repartition(cfg: &JournalConfig, root: &Path, from: u64, old: usize, new: usize) -> Result<u64> {
    let to = from + 1;
    let _ = std::fs::remove_dir_all(generation_dir(root, to));
    let target = create_generation(root, to, new)?;
    let mut outs = Vec::with_capacity(new);
    for s in 0..new {
        let path = target.join(format!("shard-{s}")).join(snapshot_name(1));
        let mut w = std::io::BufWriter::with_capacity(
            1 << 20,
            File::create(&path).map_err(|e| io("cannot create", &path, e))?,
        );
        let header = Header {
            kind: Kind::Snapshot,
            block: BLOCK as u32,
            shard: s as u32,
            shards: new as u32,
            seq: 1,
        };
        w.write_all(&header.encode())
            .map_err(|e| io("cannot write", &path, e))?;
        outs.push((path, w, 0u64));
    }
    let source = generation_dir(root, from);
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| Error::Config(format!("journal: cannot start the re-partition: {e}")))?;
    let (moved, floor) = ex.run(async {
        let (mut moved, mut floor) = (0u64, 0u64);
        for s in 0..old {
            let dir = source.join(format!("shard-{s}"));
            if !dir.exists() {
                continue;
            }
            let owner = Owner {
                shard: s as u32,
                shards: old as u32,
            };
            let replay = check_dir(&dir, cfg.skip_corrupt, Some(owner))
                .await
                .map_err(|e| Error::Config(format!("journal: {e}")))?
                .replay;
            floor = floor.max(replay.end(0).version_floor);
            for (t, frame) in replay.live() {
                let owner = crate::partition::shard_of(t.tenant, t.key, new);
                if let Some((path, w, n)) = outs.get_mut(owner) {
                    w.write_all(frame)
                        .map_err(|e| io("cannot write", path, e))?;
                    *n += 1;
                    moved += 1;
                }
            }
        }
        Ok::<(u64, u64), Error>((moved, floor))
    })?;
    for (path, w, n) in outs {
        let mut end = Vec::new();
        // A new generation's batches start again at 1; its versions stay above the old ones.
        let end_record = record::End {
            entries: n,
            last_batch: 0,
            version_floor: floor,
        };
        record::put_end(&mut end, end_record);
        let mut f = w
            .into_inner()
            .map_err(|e| io("cannot write", &path, e.into_error()))?;
        f.write_all(&end)
            .map_err(|e| io("cannot write", &path, e))?;
        f.sync_all().map_err(|e| io("cannot sync", &path, e))?;
        if let Some(dir) = path.parent() {
            sync_dir(dir).map_err(|e| io("cannot sync", dir, e))?;
        }
    }
    current::write(
        root,
        Current {
            generation: to,
            shards: new,
        },
    )?;
    if let Ok(found) = current::survey(root) {
        remove_older_generations(root, to, &found);
    }
    Ok(moved)
}

/// A timer as [`read_shard_dir`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub tenant: String,
    pub key: String,
    pub version: u64,
    pub deadline_us: u64,
    /// A dead letter, not a pending timer.
    pub dead: bool,
}

/// Replays one shard directory as a start would (without creating a segment or deleting
/// anything), on a temporary executor of the calling thread: its live timers and what was
/// torn or skipped. For tests and inspection.
pub fn read_shard_dir(
    dir: &Path,
    skip_corrupt: bool,
) -> std::result::Result<(Vec<Found>, super::replay::Report), String> {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| e.to_string())?;
    ex.run(async {
        let Checked { replay, torn, .. } = check_dir(dir, skip_corrupt, None).await?;
        let found = replay
            .live()
            .map(|(t, frame)| Found {
                tenant: t.tenant.to_string(),
                key: t.key.to_string(),
                version: t.version,
                deadline_us: t.deadline.0,
                dead: record::is_dead_letter(frame),
            })
            .collect();
        let mut report = replay.report.clone();
        report.torn = torn;
        Ok((found, report))
    })
}

#[cfg(test)]
mod tests {
    use super::super::current::Current;
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
        current::write(root, Current { generation, shards }).expect("CURRENT");
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
}
