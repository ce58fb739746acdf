//! A shard directory as a start finds it: its files loaded, each header checked against its
//! name and its shard, the log indexed and checked — and what the start may delete once all
//! of that passed.
//!
//! [`load_dir`] only lists what a start may delete (older snapshots, the segments the newest
//! snapshot covers, unfinished snapshots, a last segment whose header never reached the disk);
//! [`check_dir`] replays and checks, and keeps that list only when nothing was skipped
//! (`--journal-skip-corrupt`): the files a skipped one would have covered stay for the
//! operator. Nothing here changes a file.

use super::file::{snapshot_name, Header, Kind, Listing};
use super::record;
use super::replay::{Buf, Replay, Source};
use std::path::{Path, PathBuf};

/// A shard directory's files, loaded, and what a start may delete once they are found good.
pub struct ShardFiles {
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
/// checked against its name and `owner`. Deletes nothing.
pub fn load_dir(
    dir: &Path,
    skip_corrupt: bool,
    owner: Option<Owner>,
) -> std::result::Result<ShardFiles, String> {
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
        let buf = Buf::map_from_disk(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
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
            let buf = Buf::map_from_disk(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
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
    Ok(ShardFiles {
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
