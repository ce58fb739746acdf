//! The active segment: the one file a shard appends to, one block-aligned commit at a time.
//!
//! The writes, syncs and truncations run on the journal's own I/O thread (`io`), and the
//! commit task waits for them while the executor sleeps or runs its other tasks. (Through
//! glommio's own file I/O, the executor went round its reactor without sleeping while a commit
//! was in flight: about 0.9 ms of CPU per operation at 1,000 PUT/s,
//! `docs/bench/2026-12-06/NOTES.md`, "The journal's CPU per operation"; through glommio's
//! blocking pool, a commit waited behind any other blocking job of the shard, such as a
//! webhook's name lookup.) The file is written through the page cache and made durable by
//! `fdatasync`.
//!
//! A segment is created whole before it takes a record, in one job of the I/O thread
//! (`create_whole`): the file is made, its full size is reserved with `fallocate` (so a full
//! disk shows at creation, not in the middle of a commit), the header block is written and
//! synced, and the directory is synced so that the name survives a power cut — in every fsync mode, so that no acknowledged commit ever sits in a
//! file whose header or name a power cut can take. Commits then go at `pos`, each padded to
//! the block, so no write touches a block written before it.

use super::file::{segment_name, Header, Kind, BLOCK, UNSYNCED};
use super::io::{Disk, DiskFile, IoThread};
use super::Fsync;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment's file; every call runs on the journal's I/O thread.
pub struct SegmentFile {
    file: Arc<DiskFile>,
    io: IoThread,
}

impl SegmentFile {
    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Disk, &DiskFile) -> io::Result<R> + Send + 'static,
    ) -> io::Result<R> {
        let file = self.file.clone();
        self.io.run(move |disk| f(disk, &file)).await
    }

    /// Writes `buf` at `pos` with one `pwrite`; the bytes written (fewer on a full disk).
    pub async fn write_at(&self, buf: Vec<u8>, pos: u64) -> io::Result<usize> {
        self.run(move |d, f| d.write_at(f, &buf, pos)).await
    }

    /// Writes `buf` at `pos` with one `pwrite` and, once it is all written, makes it durable
    /// with `fdatasync`, in one job of the I/O thread: one hand-over and one wake per commit,
    /// not two. The bytes written, and the sync's outcome (`None` after a short write).
    #[track_caller]
    pub fn write_synced_at(
        &self,
        buf: Vec<u8>,
        pos: u64,
    ) -> impl std::future::Future<Output = io::Result<(usize, Option<io::Result<()>>)>> + '_ {
        let at = super::io::Site::caller();
        self.run(move |d, f| {
            let n = d.write_at(f, &buf, pos)?;
            Ok((n, (n == buf.len()).then(|| d.sync_at(f, at))))
        })
    }

    #[track_caller]
    pub fn fdatasync(&self) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        let at = super::io::Site::caller();
        self.run(move |d, f| d.sync_at(f, at))
    }

    pub async fn truncate(&self, len: u64) -> io::Result<()> {
        self.run(move |d, f| d.set_len(f, len)).await
    }
}

/// The segment the commit task writes, or, after a start on a full disk, the one it must
/// create first (the shard serves reads and fires meanwhile; writes are refused).
pub enum Log {
    Ready(Active),
    Missing(u64),
}

impl Log {
    /// The first segment not yet sealed: every one before it is compaction's to cover.
    pub fn unsealed_seq(&self) -> u64 {
        match self {
            Log::Ready(a) => a.seq,
            Log::Missing(seq) => *seq,
        }
    }

    /// Creates segment `seq` (see [`Active::create`]); `Missing` when the disk is full.
    pub async fn create(
        io: &IoThread,
        dir: &Path,
        seq: u64,
        shard: usize,
        shards: usize,
        cap: u64,
        fsync: Fsync,
    ) -> io::Result<Log> {
        match Active::create(io, dir, seq, shard, shards, cap, fsync).await {
            Ok(a) => Ok(Log::Ready(a)),
            Err(e) if is_no_space(&e) => {
                tracing::error!(dir = %dir.display(), error = %e, "journal: the disk is full at start; pending timers are served and fire, new writes are refused (503 store_unavailable) until there is room for a segment");
                Ok(Log::Missing(seq))
            }
            Err(e) => Err(e),
        }
    }
}

pub struct Active {
    pub file: SegmentFile,
    pub path: PathBuf,
    pub seq: u64,
    /// Where the next commit goes: a multiple of the block.
    pub pos: u64,
    /// The size reserved; a commit that would pass it rolls the segment first.
    pub cap: u64,
}

/// Whether an I/O error is a full disk (a retry can succeed once space returns).
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl Active {
    /// Creates segment `seq` in `dir`, ready for its first commit.
    pub async fn create(
        io: &IoThread,
        dir: &Path,
        seq: u64,
        shard: usize,
        shards: usize,
        cap: u64,
        fsync: Fsync,
    ) -> io::Result<Active> {
        let path = dir.join(segment_name(seq));
        let flags = if fsync.per_commit() { 0 } else { UNSYNCED };
        let header = Header {
            kind: Kind::Segment,
            block: BLOCK as u32,
            shard: shard as u32,
            shards: shards as u32,
            seq,
        }
        .encode_flagged(flags);
        let (d, p) = (dir.to_path_buf(), path.clone());
        let file = io
            .run(move |disk| create_whole(disk, &d, &p, &header, cap))
            .await?;
        Ok(Active {
            file: SegmentFile {
                file: Arc::new(file),
                io: io.clone(),
            },
            path,
            seq,
            pos: BLOCK as u64,
            cap,
        })
    }

    /// Whether a commit of `bytes` (padded) still fits.
    pub fn fits(&self, bytes: u64) -> bool {
        self.pos.saturating_add(bytes) <= self.cap
    }
}

/// Creates a segment whole, as one job of the I/O thread: the file, its full size reserved,
/// its header block written and synced, its name synced. A failure before the name is synced
/// removes the file again (and with it the blocks a failed `fallocate` may keep, as ext4
/// does), so that a full disk leaves nothing behind and the caller retries later, while
/// compaction gives room back.
fn create_whole(
    disk: &Disk,
    dir: &Path,
    path: &Path,
    header: &[u8],
    cap: u64,
) -> io::Result<DiskFile> {
    let file = disk.create_new(path)?;
    let made = reserve(disk, &file, cap)
        .and_then(|()| disk.write_all_at(&file, header, 0))
        .and_then(|()| disk.sync(&file));
    if let Err(e) = made {
        drop(file);
        let _ = disk.unlink(path);
        return Err(e);
    }
    disk.sync_dir(dir)?;
    Ok(file)
}

/// Reserves `cap` bytes for the file (`fallocate`), without changing what it reads; a file
/// system without `fallocate` is not an error (the writes extend the file instead).
fn reserve(disk: &Disk, file: &DiskFile, cap: u64) -> io::Result<()> {
    match disk.allocate(file, cap) {
        Err(e) if !is_no_space(&e) => {
            tracing::debug!(error = %e, "journal: fallocate not supported");
            Ok(())
        }
        done => done,
    }
}

/// `n` rounded up to the block.
pub fn padded(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}
