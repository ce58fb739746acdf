//! The active segment: the one file a shard appends to, one block-aligned commit at a time.
//!
//! The writes, syncs and truncations run on the shard executor's blocking thread (glommio's
//! `spawn_blocking`), and the executor waits for them asleep. Through glommio's own file I/O,
//! the executor went round its reactor without sleeping while a commit was in flight (its
//! poll ring cannot sleep with a request outstanding): about 0.9 ms of CPU per operation at
//! 1,000 PUT/s (`BENCHMARKS.md`, "the journal's CPU per operation"). The file is written
//! through the page cache and made durable by `fdatasync`, as before.
//!
//! A segment is created whole before it takes a record: the file is made, its full size is
//! reserved with `fallocate` (so a full disk shows at creation, not in the middle of a commit),
//! the header block is written and synced, and the directory is synced so that the name
//! survives a power cut. Commits then go at `pos`, each padded to the block, so no write
//! touches a block written before it.

use super::file::{segment_name, Header, Kind, BLOCK};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment's file, used from the shard's executor; every call runs on its blocking thread.
pub struct SegmentFile(Arc<File>);

impl SegmentFile {
    /// Runs `f` on the executor's blocking thread; the executor sleeps until it is done.
    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&File) -> io::Result<R> + Send + 'static,
    ) -> io::Result<R> {
        let file = self.0.clone();
        glommio::executor().spawn_blocking(move || f(&file)).await
    }

    /// Creates `path`, which must not exist yet.
    pub async fn create_new(path: &Path) -> io::Result<SegmentFile> {
        let path = path.to_path_buf();
        let file = glommio::executor()
            .spawn_blocking(move || {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
            })
            .await?;
        Ok(SegmentFile(Arc::new(file)))
    }

    /// Writes `buf` at `pos` with one `pwrite`; the bytes written (fewer on a full disk).
    pub async fn write_at(&self, buf: Vec<u8>, pos: u64) -> io::Result<usize> {
        self.run(move |f| f.write_at(&buf, pos)).await
    }

    pub async fn fdatasync(&self) -> io::Result<()> {
        self.run(File::sync_data).await
    }

    pub async fn truncate(&self, len: u64) -> io::Result<()> {
        self.run(move |f| f.set_len(len)).await
    }

    /// Reserves `len` bytes of disk for the file (`fallocate`), without changing what it reads.
    pub async fn pre_allocate(&self, len: u64) -> io::Result<()> {
        let len = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment size"))?;
        self.run(move |f| {
            // SAFETY: the descriptor belongs to `f`, which is alive for the call; fallocate
            // reads no memory of ours.
            let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
        .await
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
        dir: &Path,
        seq: u64,
        shard: usize,
        shards: usize,
        cap: u64,
        sync: bool,
    ) -> io::Result<Active> {
        let path = dir.join(segment_name(seq));
        let file = SegmentFile::create_new(&path).await?;
        if let Err(e) = Self::prepare(&file, seq, shard, shards, cap, sync).await {
            drop(file);
            let _ = glommio::io::remove(&path).await;
            return Err(e);
        }
        if sync {
            sync_dir(dir).await?;
        }
        Ok(Active {
            file,
            path,
            seq,
            pos: BLOCK as u64,
            cap,
        })
    }

    async fn prepare(
        file: &SegmentFile,
        seq: u64,
        shard: usize,
        shards: usize,
        cap: u64,
        sync: bool,
    ) -> io::Result<()> {
        if let Err(e) = file.pre_allocate(cap).await {
            if is_no_space(&e) {
                return Err(e);
            }
            // A file system without fallocate: the writes extend the file instead.
            tracing::debug!(error = %e, "journal: fallocate not supported");
        }
        let header = Header {
            kind: Kind::Segment,
            block: BLOCK as u32,
            shard: shard as u32,
            shards: shards as u32,
            seq,
        }
        .encode();
        let mut buf = vec![0u8; BLOCK];
        buf.copy_from_slice(&header);
        let n = file.write_at(buf, 0).await?;
        if n != BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "short write of a segment header",
            ));
        }
        if sync {
            file.fdatasync().await?;
        }
        Ok(())
    }

    /// Whether a commit of `bytes` (padded) still fits.
    pub fn fits(&self, bytes: u64) -> bool {
        self.pos.saturating_add(bytes) <= self.cap
    }
}

/// Makes a directory's entries durable (a new or renamed file's name).
pub async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = glommio::io::Directory::open(dir)
        .await
        .map_err(io::Error::from)?;
    let r = d.sync().await.map_err(io::Error::from);
    let _ = d.close().await;
    r
}

/// `n` rounded up to the block.
pub fn padded(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}
