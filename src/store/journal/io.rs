//! The journal's I/O: its own thread per shard, and the one type every write goes through.
//!
//! ```text
//!   shard executor (commit, compaction)          the journal's I/O thread (one per shard)
//!   ───────────────────────────────────          ──────────────────────────────────────────
//!   io.run(|disk| disk.write_at(..)) ──job──▶    bounded queue (QUEUE jobs) → runs it:
//!     awaits a oneshot; the executor sleeps        pwrite / fdatasync / ftruncate /
//!     or runs its other tasks          ◀─reply──   fallocate / create / rename / unlink /
//!                                                  mkdir / rmdir / directory fsync,
//!                                                  through `Disk`
//! ```
//!
//! Before the shards start, `layout` (the data directory, `CURRENT`, a re-partition) calls
//! the same `Disk` from the caller's thread: nothing else runs yet, so it may block.
//!
//! Why a thread of its own: glommio's blocking pool is one thread per executor with fixed
//! placement, shared with everything else that blocks (a webhook's name lookup), so a slow
//! `getaddrinfo` would hold every durable write of the shard behind it. Here nothing else runs
//! on the journal's thread, and the reply is a `futures-channel` oneshot awaited through the
//! shard's doorbell (`doorbell`), as the shards' replies are, so that its wake does not go
//! through glommio's foreign-waker path (a trigger of glommio's park bug, see `shard`). The
//! queue is bounded: the commit task has one job in flight, compaction one, so `QUEUE` is never
//! reached in practice; when it is, the caller waits on a short timer, never blocking.
//!
//! # `Disk`: the file operations, faultable
//!
//! Every change the journal makes to its files and directories — in the shards' stores and in
//! `layout` alike — is a method of [`Disk`]; reads are not. In production `Disk` holds `None`
//! and each method is the system call after one branch. A test gives it a [`Faults`] plan
//! (`faults`), which numbers every operation and can fail one with EIO or ENOSPC, "kill the
//! process" at it (it and every later operation change nothing, so the files hold exactly
//! what a crash at that instant leaves in the page cache), or cut the power afterwards: undo
//! every change not yet durable, or, keeping some unsynced writes, the out-of-order writeback
//! a real power cut can leave.

use super::faults::{Faults, Op, Plan};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

/// Jobs the I/O thread's queue holds at most.
const QUEUE: usize = 8;

type Job = Box<dyn FnOnce() + Send>;

/// A shard journal's I/O thread; clones share it. The thread ends when the last clone goes
/// (after the jobs already queued).
#[derive(Clone)]
pub struct IoThread {
    tx: SyncSender<Job>,
    disk: Disk,
}

fn stopped() -> io::Error {
    io::Error::other("the journal's I/O thread stopped")
}

impl IoThread {
    /// Starts an I/O thread named `name` (`journal-io-<shard>` for a shard's journal).
    pub fn start(name: String, disk: Disk) -> io::Result<IoThread> {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        std::thread::Builder::new().name(name).spawn(move || {
            // Started from the shard's thread, this one inherits its single core, and a
            // commit would wait for the shard's passes (and its spinning) to give the
            // core up. It runs off the shards' cores instead, or anywhere when they take
            // every core (`cpus::off_shard_cores`).
            if let Err(e) = crate::cpus::pin_current_thread(&crate::cpus::off_shard_cores()) {
                tracing::warn!(error = %e, "journal: its I/O thread stays on the shard's core");
            }
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
        Ok(IoThread { tx, disk })
    }

    /// Runs `f` on the I/O thread; the calling task waits, the executor does not.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Disk) -> io::Result<R> + Send + 'static,
    ) -> io::Result<R> {
        let (reply, answer) = futures_channel::oneshot::channel();
        let disk = self.disk.clone();
        let mut job: Job = Box::new(move || {
            let _ = reply.send(f(&disk));
        });
        loop {
            match self.tx.try_send(job) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    job = back;
                    glommio::timer::sleep(Duration::from_micros(100)).await;
                }
                Err(TrySendError::Disconnected(_)) => return Err(stopped()),
            }
        }
        // Woken from the I/O thread: through the shard's doorbell, not glommio's foreign
        // wakes (see `doorbell`).
        crate::runtime::doorbell::relay(answer)
            .await
            .map_err(|_| stopped())?
    }

    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// [`Disk::sync_dir`] on this thread.
    #[track_caller]
    pub fn sync_dir(&self, dir: &Path) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        let (dir, at) = (dir.to_path_buf(), Site::caller());
        self.run(move |d| d.sync_dir_at(&dir, at))
    }
}

/// A journal file open for writing, with the path the fault layer knows it by.
pub struct DiskFile {
    file: File,
    path: PathBuf,
}

impl DiskFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The journal's file operations (see the module doc). `Default` is the real disk.
#[derive(Clone, Default)]
pub struct Disk {
    faults: Option<Arc<Faults>>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.faults.is_some() {
            "Disk(faulty)"
        } else {
            "Disk"
        })
    }
}

impl PartialEq for Disk {
    fn eq(&self, other: &Disk) -> bool {
        match (&self.faults, &other.faults) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Disk {
    /// A disk whose operations follow `faults` (tests).
    pub fn faulty(faults: Arc<Faults>) -> Disk {
        Disk {
            faults: Some(faults),
        }
    }

    fn step(&self, op: Op<'_>) -> io::Result<Option<MutexGuard<'_, Plan>>> {
        match &self.faults {
            None => Ok(None),
            Some(f) => f.step(op).map(Some),
        }
    }

    /// Opens an existing file for writing (changes nothing, so it is not counted; readable
    /// too, so that the fault plan can keep what a change overwrites).
    pub fn open(&self, path: &Path) -> io::Result<DiskFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(DiskFile {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Creates `path` (which must not exist) for reading and writing.
    pub fn create_new(&self, path: &Path) -> io::Result<DiskFile> {
        let plan = self.step(Op::Create(path))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        if let Some(mut p) = plan {
            p.created(path);
        }
        Ok(DiskFile {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Writes `buf` at `pos` with one `pwrite`: the bytes written (fewer on a full disk).
    pub fn write_at(&self, f: &DiskFile, buf: &[u8], pos: u64) -> io::Result<usize> {
        let mut buf = buf;
        if let Some(mut p) = self.step(Op::Write)? {
            if std::mem::take(&mut p.short) {
                buf = &buf[..buf.len() / 2];
            }
            p.before_change(&f.file, &f.path, pos, buf.len() as u64)?;
        }
        f.file.write_at(buf, pos)
    }

    /// Writes all of `buf` at `pos` with one `pwrite`; a short write (a full disk) is
    /// `StorageFull`.
    pub fn write_all_at(&self, f: &DiskFile, buf: &[u8], pos: u64) -> io::Result<()> {
        let n = self.write_at(f, buf, pos)?;
        if n == buf.len() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("short write: {n} of {} bytes", buf.len()),
        ))
    }

    /// Creates `path` (which must not exist) holding `bytes`, synced (its name is not: sync
    /// the directory, or rename it first).
    #[track_caller]
    pub fn create_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let at = Site::caller();
        let f = self.create_new(path)?;
        self.write_all_at(&f, bytes, 0)?;
        self.sync_at(&f, at)
    }

    /// `fdatasync`: the file's data and length are durable.
    #[track_caller]
    pub fn sync(&self, f: &DiskFile) -> io::Result<()> {
        self.sync_at(f, Site::caller())
    }

    /// [`Disk::sync`], called from `at`.
    pub fn sync_at(&self, f: &DiskFile, at: Site) -> io::Result<()> {
        if at.removed() {
            return Ok(());
        }
        let plan = match self.step(Op::Sync) {
            Err(e) => {
                if let Some(faults) = &self.faults {
                    faults.sync_failed(&f.file);
                }
                return Err(e);
            }
            Ok(plan) => plan,
        };
        f.file.sync_data()?;
        if let Some(mut p) = plan {
            p.synced(&f.file)?;
        }
        Ok(())
    }

    /// Sets the file's length.
    pub fn set_len(&self, f: &DiskFile, len: u64) -> io::Result<()> {
        if let Some(mut p) = self.step(Op::Truncate)? {
            let old = f.file.metadata()?.len();
            p.before_change(&f.file, &f.path, len.min(old), old.saturating_sub(len))?;
        }
        f.file.set_len(len)
    }

    /// Reserves `len` bytes of disk for the file (`fallocate`; the length becomes at least
    /// `len`, the new bytes read as zeros).
    pub fn allocate(&self, f: &DiskFile, len: u64) -> io::Result<()> {
        let off = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size"))?;
        if let Some(mut p) = self.step(Op::Allocate)? {
            p.before_change(&f.file, &f.path, 0, 0)?;
        }
        // SAFETY: the descriptor belongs to `f.file`, alive for the call; fallocate reads no
        // memory of ours.
        let rc = unsafe { libc::fallocate(f.file.as_raw_fd(), 0, 0, off) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Renames `from` to `to`, replacing what `to` named.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self.step(Op::Rename)? {
            None => std::fs::rename(from, to),
            Some(mut p) => p.rename(from, to),
        }
    }

    /// Removes a file's name.
    pub fn unlink(&self, path: &Path) -> io::Result<()> {
        match self.step(Op::Unlink)? {
            None => std::fs::remove_file(path),
            Some(mut p) => p.unlink(path),
        }
    }

    /// Creates the directory `path` unless it is there (its parent must be).
    pub fn create_dir(&self, path: &Path) -> io::Result<()> {
        if path.is_dir() {
            return Ok(());
        }
        let plan = self.step(Op::CreateDir)?;
        std::fs::create_dir(path)?;
        if let Some(mut p) = plan {
            p.created(path);
        }
        Ok(())
    }

    /// Removes the empty directory `path`.
    pub fn remove_dir(&self, path: &Path) -> io::Result<()> {
        match self.step(Op::RemoveDir)? {
            None => std::fs::remove_dir(path),
            Some(mut p) => p.unlink(path),
        }
    }

    /// Removes `dir` and everything in it: each file, then each directory, deepest first.
    pub fn remove_tree(&self, dir: &Path) -> io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                self.remove_tree(&entry.path())?;
            } else {
                self.unlink(&entry.path())?;
            }
        }
        self.remove_dir(dir)
    }

    /// Makes a directory's entries durable (names created, renamed or removed in it).
    #[track_caller]
    pub fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.sync_dir_at(dir, Site::caller())
    }

    /// [`Disk::sync_dir`], called from `at`.
    pub fn sync_dir_at(&self, dir: &Path, at: Site) -> io::Result<()> {
        if at.removed() {
            return Ok(());
        }
        let plan = self.step(Op::SyncDir)?;
        File::open(dir)?.sync_all()?;
        if let Some(mut p) = plan {
            p.dir_synced(dir);
        }
        Ok(())
    }
}

/// Where a sync is called from: in test builds, a mutation run can remove the sync of one call
/// site (or of several together), as if its line were deleted, to show that the crash matrix
/// catches it (`PUNCTUAL_MUTANT_SKIP=<file>:<line>[,<file>:<line>…]`;
/// `PUNCTUAL_MUTANT_SITES=<path>` lists the sites a run calls, one a line;
/// `scripts/journal_mutants.sh`, `docs/DRILLS.md`). Release and integration-test builds carry
/// no hook.
#[derive(Clone, Copy, Debug)]
pub struct Site(&'static std::panic::Location<'static>);

impl Site {
    #[track_caller]
    pub fn caller() -> Site {
        Site(std::panic::Location::caller())
    }

    /// Whether a mutation run removed this call site (never, outside test builds).
    fn removed(self) -> bool {
        #[cfg(test)]
        {
            mutants::removed(self.0)
        }
        #[cfg(not(test))]
        {
            let _ = self.0;
            false
        }
    }
}

#[cfg(test)]
mod mutants {
    use std::io::Write;
    use std::sync::{Mutex, OnceLock};

    static SKIP: OnceLock<Option<String>> = OnceLock::new();
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

    pub fn removed(at: &std::panic::Location<'_>) -> bool {
        let site = format!("{}:{}", at.file(), at.line());
        if let Some(path) = std::env::var_os("PUNCTUAL_MUTANT_SITES") {
            let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
            if !seen.contains(&site) {
                seen.push(site.clone());
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path);
                if let Ok(mut f) = file {
                    let _ = writeln!(f, "{site}");
                }
            }
        }
        SKIP.get_or_init(|| std::env::var("PUNCTUAL_MUTANT_SKIP").ok())
            .as_deref()
            .is_some_and(|s| s.split(',').any(|one| one == site))
    }
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;
