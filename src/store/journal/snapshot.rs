//! A snapshot file written front to back: its header block, the frames of the live timers and
//! dead letters (verbatim), and the end record, then `fdatasync`'d (data and length).
//!
//! ```text
//!   create   a new file (its name must not exist): the header, with the shard and seq it is for
//!   put      each frame; gathered, written `CHUNK` bytes at a time through the I/O thread
//!   finish   the end record (entries counted here), the rest written, fdatasync
//! ```
//!
//! Compaction writes one under a `.tmp` name and renames it; a re-partition writes one per new
//! shard under its final name in a generation no `CURRENT` names yet. Either way the caller
//! syncs the directory once the name is final. The file is exactly as long as its content, so
//! its length is durable with its data.

use super::file::{Header, Kind, BLOCK};
use super::io::{DiskFile, IoThread};
use super::record::{put_end, End};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Bytes gathered before each write.
const CHUNK: usize = 1 << 20;

pub(crate) struct SnapshotWriter {
    io: IoThread,
    file: Arc<DiskFile>,
    buf: Vec<u8>,
    pos: u64,
    entries: u64,
}

impl SnapshotWriter {
    /// Creates `path` for the snapshot `seq` of shard `shard` of `shards`.
    pub async fn create(
        io: &IoThread,
        path: &Path,
        shard: usize,
        shards: usize,
        seq: u64,
    ) -> io::Result<SnapshotWriter> {
        let owned = path.to_path_buf();
        let file = io.run(move |d| d.create_new(&owned)).await?;
        let mut w = SnapshotWriter {
            io: io.clone(),
            file: Arc::new(file),
            buf: Vec::with_capacity(CHUNK),
            pos: 0,
            entries: 0,
        };
        let header = Header {
            kind: Kind::Snapshot,
            block: BLOCK as u32,
            shard: shard as u32,
            shards: shards as u32,
            seq,
        };
        w.buf.extend_from_slice(&header.encode());
        Ok(w)
    }

    /// Appends one entry's frame.
    pub async fn put(&mut self, frame: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(frame);
        self.entries += 1;
        if self.buf.len() >= CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    /// Entries put so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    async fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        let (file, pos, len) = (self.file.clone(), self.pos, buf.len());
        self.io
            .run(move |d| d.write_all_at(&file, &buf, pos))
            .await?;
        self.pos += len as u64;
        Ok(())
    }

    /// Ends the file with `end` (whose `entries` is set to the entries put), writes what is
    /// left and syncs; the file's length.
    pub async fn finish(mut self, end: End) -> io::Result<u64> {
        let end = End {
            entries: self.entries,
            ..end
        };
        put_end(&mut self.buf, end);
        self.flush().await?;
        let file = self.file.clone();
        self.io.run(move |d| d.sync(&file)).await?;
        Ok(self.pos)
    }
}
