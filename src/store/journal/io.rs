//! The journal's I/O: its own thread per shard, and the one type every write goes through.
//!
//! ```text
//!   shard executor (commit, compaction)          the journal's I/O thread (one per shard)
//!   ───────────────────────────────────          ──────────────────────────────────────────
//!   io.run(|disk| disk.write_at(..)) ──job──▶    bounded queue (QUEUE jobs) → runs it:
//!     awaits a oneshot; the executor sleeps        pwrite / fdatasync / ftruncate /
//!     or runs its other tasks          ◀─reply──   fallocate / create / rename / unlink /
//!                                                  directory fsync, through `Disk`
//! ```
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
//! Every change the journal makes to its files is a method of [`Disk`]. In production `Disk`
//! holds `None` and each method is the system call after one branch. A test gives it a
//! [`Faults`] plan, which numbers every operation and can:
//!
//! - fail the N-th with EIO (once) or ENOSPC (from then on, until cleared);
//! - "kill the process" at the N-th: it and every later operation fail and change nothing, so
//!   the files hold exactly what a crash at that instant leaves in the page cache;
//! - cut the power ([`Faults::power_cut`]): undo every change not yet made durable — file
//!   contents and lengths since the file's last `fdatasync`, names created, renamed or removed
//!   since their directory's last fsync — or, `keep`ing some unsynced writes, the out-of-order
//!   writeback a real power cut can leave (a zero hole before a persisted later write).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// Starts the I/O thread of shard `shard`'s journal.
    pub fn start(shard: usize, disk: Disk) -> io::Result<IoThread> {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name(format!("journal-io-{shard}"))
            .spawn(move || {
                // Started from the shard's thread, this one inherits its single core, and a
                // commit would wait for the shard's passes (and its spinning) to give the
                // core up. It runs wherever the process may run instead.
                if let Err(e) = crate::cpus::pin_current_thread(&crate::cpus::available_cores()) {
                    tracing::warn!(shard, error = %e, "journal: its I/O thread stays on the shard's core");
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
        crate::doorbell::relay(answer)
            .await
            .map_err(|_| stopped())?
    }

    pub fn disk(&self) -> &Disk {
        &self.disk
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

    /// Opens an existing file for writing (changes nothing, so it is not counted).
    pub fn open(&self, path: &Path) -> io::Result<DiskFile> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
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
        if let Some(mut p) = self.step(Op::Write)? {
            p.before_change(f, pos, buf.len() as u64)?;
        }
        f.file.write_at(buf, pos)
    }

    /// `fdatasync`: the file's data and length are durable.
    pub fn sync(&self, f: &DiskFile) -> io::Result<()> {
        let plan = self.step(Op::Sync)?;
        f.file.sync_data()?;
        if let Some(mut p) = plan {
            p.synced(f)?;
        }
        Ok(())
    }

    /// Sets the file's length.
    pub fn set_len(&self, f: &DiskFile, len: u64) -> io::Result<()> {
        if let Some(mut p) = self.step(Op::Truncate)? {
            let old = f.file.metadata()?.len();
            p.before_change(f, len.min(old), old.saturating_sub(len))?;
        }
        f.file.set_len(len)
    }

    /// Reserves `len` bytes of disk for the file (`fallocate`; the length becomes at least
    /// `len`, the new bytes read as zeros).
    pub fn allocate(&self, f: &DiskFile, len: u64) -> io::Result<()> {
        let off = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size"))?;
        if let Some(mut p) = self.step(Op::Allocate)? {
            p.before_change(f, 0, 0)?;
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

    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let plan = self.step(Op::Rename)?;
        std::fs::rename(from, to)?;
        if let Some(mut p) = plan {
            p.renamed(from, to);
        }
        Ok(())
    }

    pub fn unlink(&self, path: &Path) -> io::Result<()> {
        match self.step(Op::Unlink)? {
            None => std::fs::remove_file(path),
            Some(mut p) => p.unlink(path),
        }
    }

    /// Makes a directory's entries durable (names created, renamed or removed in it).
    pub fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let plan = self.step(Op::SyncDir)?;
        File::open(dir)?.sync_all()?;
        if let Some(mut p) = plan {
            p.dir_synced(dir);
        }
        Ok(())
    }
}

/// An operation, as the fault plan counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Create(&'a Path),
    Write,
    Sync,
    Truncate,
    Allocate,
    Rename,
    Unlink,
    SyncDir,
}

/// How the N-th operation fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// EIO, that operation only.
    Eio,
    /// ENOSPC, that operation and every later write, allocation or creation, until
    /// [`Faults::clear`].
    NoSpace,
    /// The process dies: that operation and every later one fail and change nothing.
    Die,
}

/// A test's plan of faults for one or more journals (every shard may share it), and the
/// record of what is not yet durable. See the module doc.
pub struct Faults {
    plan: Mutex<Plan>,
}

/// A change not yet durable, undone by a power cut.
enum Undo {
    /// A file's bytes at `at` (and its length) before a write, truncate or allocation.
    Bytes {
        /// The file's inode (a sync under any name makes its changes durable) and its name
        /// when changed (newer renames and removals are undone first, so it is there again).
        ino: u64,
        file: PathBuf,
        at: u64,
        old: Vec<u8>,
        len: u64,
    },
    /// A name created in its directory.
    Created(PathBuf),
    Renamed {
        from: PathBuf,
        to: PathBuf,
    },
    /// A name removed: the file waits under `trash` until its directory is synced.
    Unlinked {
        path: PathBuf,
        trash: PathBuf,
    },
}

#[derive(Default)]
struct Plan {
    done: u64,
    at: Option<(u64, Fault)>,
    dead: bool,
    full: bool,
    /// Unsynced changes, oldest first.
    undo: Vec<Undo>,
    trash: PathBuf,
    trashed: u64,
    /// Operations by kind, for the report.
    log: Vec<String>,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl Faults {
    /// A plan that faults nothing yet; removed files wait in `trash` (a directory on the same
    /// file system) until their directory is synced.
    pub fn new(trash: &Path) -> Arc<Faults> {
        Arc::new(Faults {
            plan: Mutex::new(Plan {
                trash: trash.to_path_buf(),
                ..Plan::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails operation number `n` (counted from 0 over everything this plan saw) with `fault`.
    pub fn fail_at(&self, n: u64, fault: Fault) {
        self.lock().at = Some((n, fault));
    }

    /// Operations done so far.
    pub fn count(&self) -> u64 {
        self.lock().done
    }

    /// Whether the simulated process has died.
    pub fn dead(&self) -> bool {
        self.lock().dead
    }

    /// Ends a full disk (and a pending fault).
    pub fn clear(&self) {
        let mut p = self.lock();
        p.full = false;
        p.at = None;
    }

    /// The operations so far, one word each.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Cuts the power: undoes every change not durable, newest first, except the unsynced
    /// writes (numbered from 0, oldest first) for which `keep` says true — writeback that
    /// reached the disk before the cut. Call it once the journals using the plan are closed.
    pub fn power_cut(&self, keep: impl Fn(usize) -> bool) -> io::Result<()> {
        let mut p = self.lock();
        p.dead = true;
        let undo = std::mem::take(&mut p.undo);
        let mut i = undo
            .iter()
            .filter(|u| matches!(u, Undo::Bytes { .. }))
            .count();
        for u in undo.into_iter().rev() {
            match u {
                Undo::Bytes {
                    file, at, old, len, ..
                } => {
                    i -= 1;
                    if keep(i) || !file.exists() {
                        continue;
                    }
                    let f = std::fs::OpenOptions::new().write(true).open(&file)?;
                    f.write_at(&old, at)?;
                    f.set_len(len)?;
                }
                Undo::Created(path) => {
                    let _ = std::fs::remove_file(path);
                }
                Undo::Renamed { from, to } => std::fs::rename(to, from)?,
                Undo::Unlinked { path, trash } => std::fs::rename(trash, path)?,
            }
        }
        Ok(())
    }

    /// Unsynced writes recorded now (the range `keep` of [`Faults::power_cut`] numbers).
    pub fn unsynced_writes(&self) -> usize {
        self.lock()
            .undo
            .iter()
            .filter(|u| matches!(u, Undo::Bytes { .. }))
            .count()
    }

    fn step(&self, op: Op<'_>) -> io::Result<MutexGuard<'_, Plan>> {
        let mut p = self.lock();
        let n = p.done;
        p.done += 1;
        p.log.push(format!("{op:?}"));
        if p.dead {
            return Err(eio());
        }
        match p.at {
            Some((at, Fault::Die)) if at == n => {
                p.dead = true;
                return Err(eio());
            }
            Some((at, Fault::Eio)) if at == n => return Err(eio()),
            Some((at, Fault::NoSpace)) if at == n => p.full = true,
            _ => {}
        }
        let grows = matches!(op, Op::Write | Op::Allocate | Op::Create(_));
        if p.full && grows {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(p)
    }
}

impl Plan {
    /// Saves what a change of `len` bytes at `at` of `f` overwrites, and the file's length.
    fn before_change(&mut self, f: &DiskFile, at: u64, len: u64) -> io::Result<()> {
        let size = f.file.metadata()?.len();
        let end = at.saturating_add(len).min(size);
        let mut old = vec![0u8; end.saturating_sub(at) as usize];
        f.file.read_exact_at(&mut old, at)?;
        self.undo.push(Undo::Bytes {
            ino: std::os::unix::fs::MetadataExt::ino(&f.file.metadata()?),
            file: f.path.clone(),
            at,
            old,
            len: size,
        });
        Ok(())
    }

    fn synced(&mut self, f: &DiskFile) -> io::Result<()> {
        let synced = std::os::unix::fs::MetadataExt::ino(&f.file.metadata()?);
        self.undo
            .retain(|u| !matches!(u, Undo::Bytes { ino, .. } if *ino == synced));
        Ok(())
    }

    fn created(&mut self, path: &Path) {
        self.undo.push(Undo::Created(path.to_path_buf()));
    }

    fn renamed(&mut self, from: &Path, to: &Path) {
        self.undo.push(Undo::Renamed {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
    }

    fn unlink(&mut self, path: &Path) -> io::Result<()> {
        self.trashed += 1;
        let trash = self.trash.join(format!("unlinked-{}", self.trashed));
        std::fs::rename(path, &trash)?;
        self.undo.push(Undo::Unlinked {
            path: path.to_path_buf(),
            trash,
        });
        Ok(())
    }

    fn dir_synced(&mut self, dir: &Path) {
        let in_dir = |p: &Path| p.parent() == Some(dir);
        self.undo.retain(|u| match u {
            Undo::Bytes { .. } => true,
            Undo::Created(p) => !in_dir(p),
            Undo::Renamed { to, .. } => !in_dir(to),
            Undo::Unlinked { path, .. } => !in_dir(path),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> Vec<u8> {
        std::fs::read(p).unwrap_or_default()
    }

    #[test]
    fn a_power_cut_undoes_exactly_what_was_not_made_durable() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, trash) = (tmp.path().join("d"), tmp.path().join("trash"));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::create_dir_all(&trash).expect("trash");
        let faults = Faults::new(&trash);
        let disk = Disk::faulty(faults.clone());
        let (kept, lost, moved, gone) = (
            dir.join("kept"),
            dir.join("lost"),
            dir.join("moved"),
            dir.join("gone"),
        );
        let io = || -> io::Result<()> {
            let k = disk.create_new(&kept)?;
            disk.write_at(&k, b"synced", 0)?;
            disk.sync(&k)?;
            let g = disk.create_new(&gone)?;
            disk.write_at(&g, b"old", 0)?;
            disk.sync(&g)?;
            disk.sync_dir(&dir)?;
            disk.write_at(&k, b"SYNCED and more", 0)?;
            disk.unlink(&gone)?;
            let l = disk.create_new(&lost)?;
            disk.write_at(&l, b"never synced", 0)?;
            disk.sync(&l)?;
            disk.rename(&lost, &moved)?;
            Ok(())
        };
        io().expect("the operations");
        assert_eq!(faults.count(), 13);
        assert_eq!(read(&kept), b"SYNCED and more");
        assert!(!gone.exists() && moved.exists());
        faults.power_cut(|_| false).expect("power cut");
        assert_eq!(read(&kept), b"synced", "the unsynced overwrite is undone");
        assert_eq!(
            read(&gone),
            b"old",
            "an unlink before the directory sync is undone"
        );
        assert!(
            !moved.exists() && !lost.exists(),
            "a name never made durable is gone, whatever its data"
        );
        assert!(faults.dead(), "nothing runs after the power is cut");
        assert!(disk.sync_dir(&dir).is_err());
    }

    #[test]
    fn a_fault_fails_its_operation_and_death_stops_every_later_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let faults = Faults::new(tmp.path());
        let disk = Disk::faulty(faults.clone());
        let f = disk.create_new(&tmp.path().join("f")).expect("create");
        faults.fail_at(1, Fault::Eio);
        assert_eq!(
            disk.write_at(&f, b"x", 0).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO))
        );
        assert!(disk.write_at(&f, b"x", 0).is_ok(), "EIO is once");
        faults.fail_at(3, Fault::NoSpace);
        assert!(disk.sync(&f).is_ok(), "before the fault");
        for _ in 0..2 {
            assert_eq!(
                disk.write_at(&f, b"y", 1).map_err(|e| e.raw_os_error()),
                Err(Some(libc::ENOSPC))
            );
        }
        assert!(disk.sync(&f).is_ok(), "a full disk still syncs");
        faults.clear();
        assert!(disk.write_at(&f, b"y", 1).is_ok(), "room again");
        faults.fail_at(faults.count(), Fault::Die);
        assert!(disk.sync(&f).is_err() && disk.write_at(&f, b"z", 2).is_err());
        assert_eq!(
            read(&tmp.path().join("f")),
            b"xy",
            "nothing after the death"
        );
    }
}
