//! A file of the log as replay reads it: [`Source`], its header and its bytes, mapped
//! read-only ([`Buf`]) rather than read into the heap.
//!
//! # Reading what the disk holds, and surviving what it cannot read
//!
//! A mapped page that the disk cannot read faults with SIGBUS at its first touch, which no
//! caller can handle: a bad block in a journal file killed a start (in a loop, under a
//! supervisor), a compaction, and `punctual journal check`. So every file is read through
//! with `pread` before it is mapped ([`Buf::map`]): a block that fails fails there, as an
//! error that names the file and the offset, and the pages read are then in the page cache,
//! where the mapping finds them. (Should the kernel evict a page between the two and the disk
//! then fail to read it again, the fault is still a SIGBUS: the read-through narrows that
//! window to the replay itself, it does not close it.)
//!
//! At start and in `journal check` a file is first synced and evicted from the page cache
//! ([`Buf::map_from_disk`]): after a failed `fdatasync` the kernel may keep serving pages it
//! never wrote (marked clean), and a restart on the same boot would replay them, acknowledge
//! on top of them and lose them at the next eviction or reboot. Evicted, replay reads what
//! the disk returns. A sync that fails here is logged, and what the disk holds is read.
//!
//! Cost: one more sequential read of each file at start and per compaction input (through a
//! 1 MiB buffer, from the page cache once read), and at start one `fdatasync` and one
//! `posix_fadvise` per file.

use super::super::file::Header;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A file's bytes: mapped read-only, or (an empty file, a test) owned.
pub enum Buf {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

/// Bytes read per `pread` of the read-through.
const READ_THROUGH: usize = 1 << 20;

impl Buf {
    /// Maps the file at `path` read-only, once every byte of it was read (see the module
    /// doc); an unreadable block is an error naming its offset.
    ///
    /// Only files that nothing writes while they are mapped are opened here: at start, before
    /// the shard writes; in compaction, sealed segments and a finished snapshot, never the
    /// segment being written. A file is truncated only after its mapping is dropped.
    pub fn map(path: &Path) -> io::Result<Buf> {
        let file = std::fs::File::open(path)?;
        Buf::map_file(&file)
    }

    /// [`Buf::map`], of what the disk holds: the file is synced and its cached pages dropped
    /// first (see the module doc).
    pub fn map_from_disk(path: &Path) -> io::Result<Buf> {
        let file = std::fs::File::open(path)?;
        if let Err(e) = file.sync_data() {
            tracing::error!(file = %path.display(), error = %e, "journal: a file could not be synced at start: what it holds on disk is replayed, and writes the kernel had not written back are lost");
        }
        // SAFETY: posix_fadvise only reads its arguments; the descriptor is open for as long
        // as `file` lives. Its result is advice taken or not: a failure leaves the cache as
        // it was.
        let advice =
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if advice != 0 {
            tracing::warn!(file = %path.display(), errno = advice, "journal: the page cache could not be dropped for a file at start");
        }
        Buf::map_file(&file)
    }

    fn map_file(file: &std::fs::File) -> io::Result<Buf> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(Buf::Owned(Vec::new()));
        }
        read_through(file, len)?;
        // SAFETY: the mapping is read-only and private to this process, and the journal's
        // files are not modified while mapped (see `map`; the data directory's lock keeps
        // other punctual processes out). Mapping a file that another program truncates is
        // outside that contract: the read would fault (SIGBUS), as it would for any mmap user.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Buf::Mapped(map))
    }
}

/// Reads the first `len` bytes of `file` with `pread`, keeping none of them: an error names
/// the offset of the read that failed.
fn read_through(file: &std::fs::File, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; READ_THROUGH.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let want = buf.len().min((len - at) as usize);
        match file.read_at(&mut buf[..want], at) {
            Ok(0) => break,
            Ok(n) => at += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("{e} at offset {at}"))),
        }
    }
    Ok(())
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
