//! The data directory: its lock, `CURRENT`, the generation directories, and the one-time
//! re-partition when the shard count changes.
//!
//! `CURRENT` names the generation in force and its shard count. It is only ever replaced
//! whole (written to `CURRENT.tmp`, synced, renamed, the directory synced), so a crash leaves
//! either the old generation or the new one in force, never a mix.
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
    let current = read_current(&root)?;
    let generation = match current {
        Some((g, n)) if n == shards => {
            remove_other_generations(&root, g);
            for s in 0..shards {
                let d = generation_dir(&root, g).join(format!("shard-{s}"));
                std::fs::create_dir_all(&d).map_err(|e| io("cannot create", &d, e))?;
            }
            g
        }
        Some((g, n)) => {
            tracing::info!(
                from = n,
                to = shards,
                "journal: the shard count changed; sending every pending timer to its new shard"
            );
            let started = std::time::Instant::now();
            let moved = repartition(cfg, &root, g, n, shards)?;
            tracing::info!(
                timers = moved,
                ms = started.elapsed().as_millis() as u64,
                "journal: re-partitioned"
            );
            g + 1
        }
        None => {
            remove_other_generations(&root, 0);
            create_generation(&root, 1, shards)?;
            write_current(&root, 1, shards)?;
            1
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

/// (generation, shards) from `CURRENT`, if there is one.
fn read_current(root: &Path) -> Result<Option<(u64, usize)>> {
    let path = root.join("CURRENT");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("cannot read", &path, e)),
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    match (field("generation "), field("shards ")) {
        (Some(g), Some(n)) if n > 0 => Ok(Some((g, n as usize))),
        _ => Err(Error::Config(format!(
            "journal: {} is not a punctual CURRENT file: {text:?}",
            path.display()
        ))),
    }
}

fn write_current(root: &Path, generation: u64, shards: usize) -> Result<()> {
    let tmp = root.join("CURRENT.tmp");
    let text = format!(
        "punctual journal format {}\ngeneration {generation}\nshards {shards}\n",
        record::FORMAT
    );
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, root.join("CURRENT"))?;
        sync_dir(root)
    };
    write().map_err(|e| io("cannot write", &root.join("CURRENT"), e))
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

/// Deletes every `gen-*` directory but `keep`: what a crashed re-partition or an old
/// generation left.
fn remove_other_generations(root: &Path, keep: u64) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(g) = name
            .to_str()
            .and_then(|n| n.strip_prefix("gen-"))
            .and_then(|g| g.parse::<u64>().ok())
        else {
            continue;
        };
        if g != keep {
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                tracing::warn!(dir = %e.path().display(), error = %err, "journal: cannot remove an old generation");
            }
        }
    }
}

/// Loads a shard directory: its newest snapshot and the segments after it. Files an older
/// snapshot covers, unfinished snapshots and a last segment whose header never reached the
/// disk are deleted (the last counted as torn in `torn`).
pub fn load_dir(
    dir: &Path,
    skip_corrupt: bool,
    torn: &mut u64,
) -> std::result::Result<(Option<Source>, Vec<Source>), String> {
    let listing = Listing::read(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for p in &listing.leftovers {
        let _ = std::fs::remove_file(p);
    }
    let snap_seq = listing.snapshots.last().copied();
    let covered = |seq: u64| snap_seq.is_some_and(|s| seq < s);
    for &s in &listing.snapshots {
        if Some(s) != snap_seq {
            let _ = std::fs::remove_file(dir.join(snapshot_name(s)));
        }
    }
    let mut segments = Vec::new();
    let last = listing.segments.last().copied();
    for &seq in &listing.segments {
        let path = dir.join(super::file::segment_name(seq));
        if covered(seq) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let buf = Buf::map(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        match Header::decode(&buf) {
            Ok(header) if header.kind == Kind::Segment => segments.push(Source {
                path,
                buf,
                header,
            }),
            // A crash while the segment was being created: nothing in it was acknowledged.
            Err(_) if Some(seq) == last && buf.iter().all(|&b| b == 0) => {
                *torn += 1;
                let _ = std::fs::remove_file(&path);
            }
            Err(why) if skip_corrupt => {
                tracing::error!(file = %path.display(), %why, "journal: unreadable segment skipped");
            }
            Ok(_) => return Err(format!("{} is not a segment", path.display())),
            Err(why) => {
                return Err(format!(
                    "journal file {} is corrupt at offset 0: {why}. Restore the file, or start with --journal-skip-corrupt to skip it",
                    path.display()
                ))
            }
        }
    }
    let snapshot = match snap_seq {
        None => None,
        Some(seq) => {
            let path = dir.join(snapshot_name(seq));
            let buf =
                Buf::map(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            match Header::decode(&buf) {
                Ok(header) if header.kind == Kind::Snapshot => Some(Source {
                    path,
                    buf,
                    header,
                }),
                Err(why) if skip_corrupt => {
                    tracing::error!(file = %path.display(), %why, "journal: unreadable snapshot skipped");
                    None
                }
                Ok(_) => return Err(format!("{} is not a snapshot", path.display())),
                Err(why) => {
                    return Err(format!(
                        "journal file {} is corrupt at offset 0: {why}. Restore the file, or start with --journal-skip-corrupt to skip it",
                        path.display()
                    ))
                }
            }
        }
    };
    Ok((snapshot, segments))
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
            let mut torn = 0;
            let (snapshot, segments) = load_dir(&dir, cfg.skip_corrupt, &mut torn)
                .map_err(|e| Error::Config(format!("journal: {e}")))?;
            let mut replay = Replay::new(snapshot, segments, cfg.skip_corrupt, true);
            replay
                .index()
                .await
                .map_err(|e| Error::Config(format!("journal: {e}")))?;
            replay
                .check_snapshot()
                .await
                .map_err(|e| Error::Config(format!("journal: {e}")))?;
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
    write_current(root, to, new)?;
    remove_other_generations(root, to);
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

/// Replays one shard directory as a start would (without creating a segment), on a
/// temporary executor of the calling thread: its live timers and what was torn or skipped.
/// For tests and inspection; files a start would delete are deleted.
pub fn read_shard_dir(
    dir: &Path,
    skip_corrupt: bool,
) -> std::result::Result<(Vec<Found>, super::replay::Report), String> {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| e.to_string())?;
    ex.run(async {
        let mut torn = 0;
        let (snapshot, segments) = load_dir(dir, skip_corrupt, &mut torn)?;
        let mut replay = Replay::new(snapshot, segments, skip_corrupt, true);
        replay.index().await?;
        replay.check_snapshot().await?;
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
        report.torn += torn;
        Ok((found, report))
    })
}
