//! The active segment: the one file a shard appends to, through a glommio `DmaFile` (O_DIRECT,
//! io_uring), one block-aligned commit at a time.
//!
//! A segment is created whole before it takes a record: the file is made, its full size is
//! reserved with `fallocate` (so a full disk shows at creation, not in the middle of a commit),
//! the header block is written and synced, and the directory is synced so that the name
//! survives a power cut. Commits then go at `pos`, each padded to the block, so no write
//! touches a block written before it.

use super::file::{segment_name, Header, Kind, BLOCK};
use glommio::io::{DmaFile, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

pub struct Active {
    pub file: DmaFile,
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .dma_open(&path)
            .await
            .map_err(io::Error::from)?;
        if let Err(e) = Self::prepare(&file, seq, shard, shards, cap, sync).await {
            let _ = file.close().await;
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
        file: &DmaFile,
        seq: u64,
        shard: usize,
        shards: usize,
        cap: u64,
        sync: bool,
    ) -> io::Result<()> {
        if let Err(e) = file.pre_allocate(cap, false).await {
            let e = io::Error::from(e);
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
        let mut buf = file.alloc_dma_buffer(BLOCK);
        buf.as_bytes_mut().copy_from_slice(&header);
        let n = file.write_at(buf, 0).await.map_err(io::Error::from)?;
        if n != BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "short write of a segment header",
            ));
        }
        if sync {
            file.fdatasync().await.map_err(io::Error::from)?;
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
