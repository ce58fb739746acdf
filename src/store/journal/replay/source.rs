//! A file of the log as replay reads it: [`Source`], its header and its bytes, mapped
//! read-only ([`Buf`]) rather than read into the heap.

use super::super::file::Header;
use std::path::PathBuf;

/// A file's bytes: mapped read-only, or (an empty file, a test) owned.
pub enum Buf {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl Buf {
    /// Maps the file at `path` read-only.
    ///
    /// Only files that nothing writes while they are mapped are opened here: at start, before
    /// the shard writes; in compaction, sealed segments and a finished snapshot, never the
    /// segment being written. A file is truncated only after its mapping is dropped.
    pub fn map(path: &std::path::Path) -> std::io::Result<Buf> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Buf::Owned(Vec::new()));
        }
        // SAFETY: the mapping is read-only and private to this process, and the journal's
        // files are not modified while mapped (see above; the data directory's lock keeps
        // other punctual processes out). Mapping a file that another program truncates is
        // outside that contract: the read would fault (SIGBUS), as it would for any mmap user.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Buf::Mapped(map))
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Owned(v) => v,
            Buf::Mapped(m) => m,
        }
    }
}

/// One file of the log, loaded.
pub struct Source {
    pub path: PathBuf,
    pub buf: Buf,
    pub header: Header,
}
