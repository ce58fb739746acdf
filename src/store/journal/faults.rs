//! The fault plan a test gives the journal's [`Disk`](super::io::Disk): it numbers every file
//! operation, fails the one chosen, and remembers what is not yet durable so that a power cut
//! can undo it.
//!
//! ```text
//!   Fault::Eio      operation N fails with EIO, once
//!   Fault::NoSpace  N and every later write, allocation or creation fail with ENOSPC (until clear)
//!   Fault::Short    write N writes half its bytes and says so; later growth fails as NoSpace
//!   Fault::Die      N and every later operation fail and change nothing: the process died
//!   power_cut       undo, newest first, every change not durable: bytes and lengths since the
//!                   file's last good fdatasync (under whatever name the file has now: a
//!                   rename does not make its bytes durable); names created, renamed or
//!                   removed (files and directories) since their directory's last fsync
//!                   (but a name in a directory whose removal was durable: gone with it).
//!                   `keep` spares chosen unsynced writes: out-of-order writeback, a hole
//!                   before a later write; `power_cut_keeping_removals` spares every removal
//!                   of a name: a directory's changes written back out of order
//!   after an EIO    a sync that failed leaves the file's unsynced bytes undoable for good: a
//!                   later sync that succeeds does not make them durable (the kernel may have
//!                   dropped them and reports the error once), only its own later writes
//! ```
//!
//! A removed name waits under the plan's `trash` directory until its directory is synced, so
//! that a power cut can put it back. The plan is shared (every shard of a test may use it);
//! its lock is held only for the bookkeeping of one operation.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

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
    CreateDir,
    RemoveDir,
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
    /// That operation, a write, writes only the first half of its bytes (a disk that filled
    /// in the middle of it) and returns the count; every later write, allocation or creation
    /// fails with ENOSPC, until [`Faults::clear`].
    Short,
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
    /// A rename; the file it replaced, if any, waits under `trash` until the directory is
    /// synced (a power cut before that leaves the old file under the name).
    Renamed {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
    /// A name removed: the file waits under `trash` until its directory is synced.
    Unlinked { path: PathBuf, trash: PathBuf },
    /// A sync of this inode failed here: its changes before it stay undoable.
    Poisoned(u64),
}

#[derive(Default)]
pub(super) struct Plan {
    done: u64,
    at: Option<(u64, Fault)>,
    dead: bool,
    full: bool,
    /// The write under way is cut short (`Fault::Short`).
    pub(super) short: bool,
    /// Unsynced changes, oldest first.
    undo: Vec<Undo>,
    trash: PathBuf,
    trashed: u64,
    /// Operations by kind and file name, for the report and to compare interleavings.
    log: Vec<String>,
    /// Whether the planned fault (`at`) was reached.
    hit: bool,
    /// Files (inodes) whose sync failed: their changes up to then are never made durable.
    poisoned: Vec<u64>,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// Whether the directory `path` is in was removed.
fn gone_dir(path: &Path) -> bool {
    path.parent().is_some_and(|d| !d.exists())
}

/// Where the file with inode `ino`, written as `path`, is now: `path`, or a name in the same
/// directory a rename gave it; `None` once it has no name there (removed).
fn current_name(path: &Path, ino: u64) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    if path.metadata().is_ok_and(|m| m.ino() == ino) {
        return Some(path.to_path_buf());
    }
    std::fs::read_dir(path.parent()?)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.metadata().is_ok_and(|m| m.ino() == ino))
        .map(|e| e.path())
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

    /// A sync of `f` failed (see [`Plan::sync_failed`]).
    pub(super) fn sync_failed(&self, f: &File) {
        self.lock().sync_failed(f);
    }

    /// Whether the planned fault was reached (a plan whose operation never came injects
    /// nothing, and a case built on it tests nothing).
    pub fn hit(&self) -> bool {
        self.lock().hit
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

    /// Ends a full disk the planned fault made; a fault not reached yet stays planned (a
    /// crash point in what comes next, a close say, is still hit).
    pub fn end_full(&self) {
        let mut p = self.lock();
        if p.hit {
            p.full = false;
            p.at = None;
        }
    }

    /// The operations so far, one word each.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Cuts the power: undoes every change not durable, newest first, except the unsynced
    /// writes (numbered from 0, oldest first) for which `keep` says true — writeback that
    /// reached the disk before the cut. Call it once the journals using the plan are closed.
    pub fn power_cut(&self, keep: impl Fn(usize) -> bool) -> io::Result<()> {
        self.cut(keep, false)
    }

    /// Cuts the power, undoing every change not durable but the removals of names: the
    /// directory's writeback reached them and not the renames or creations before them, as
    /// POSIX allows (a file system that writes a directory's changes in order, as ext4's
    /// journal does, never leaves this).
    pub fn power_cut_keeping_removals(&self) -> io::Result<()> {
        self.cut(|_| false, true)
    }

    fn cut(&self, keep: impl Fn(usize) -> bool, keep_removals: bool) -> io::Result<()> {
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
                    ino,
                    file,
                    at,
                    old,
                    len,
                } => {
                    i -= 1;
                    // Under its name then, or the one a rename gave it since.
                    let Some(file) = (!keep(i)).then(|| current_name(&file, ino)).flatten() else {
                        continue;
                    };
                    let f = std::fs::OpenOptions::new().write(true).open(&file)?;
                    f.write_at(&old, at)?;
                    f.set_len(len)?;
                }
                Undo::Created(path) if path.is_dir() => {
                    let _ = std::fs::remove_dir_all(path);
                }
                Undo::Created(path) => {
                    let _ = std::fs::remove_file(path);
                }
                // A name in a directory whose own removal was durable (newer changes are
                // undone first, so a removal that was not is undone already): gone with it.
                Undo::Renamed { to, .. } | Undo::Unlinked { path: to, .. } if gone_dir(&to) => {}
                Undo::Renamed { from, to, replaced } => {
                    std::fs::rename(&to, from)?;
                    if let Some(old) = replaced {
                        std::fs::rename(old, to)?;
                    }
                }
                Undo::Unlinked { .. } if keep_removals => {}
                Undo::Unlinked { path, trash } => std::fs::rename(trash, path)?,
                Undo::Poisoned(_) => {}
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

    pub(super) fn step(&self, op: Op<'_>) -> io::Result<MutexGuard<'_, Plan>> {
        let mut p = self.lock();
        let n = p.done;
        p.done += 1;
        p.log.push(match op {
            Op::Create(path) => format!("Create({:?})", path.file_name().unwrap_or_default()),
            other => format!("{other:?}"),
        });
        if p.dead {
            return Err(eio());
        }
        if p.at.is_some_and(|(at, _)| at == n) {
            p.hit = true;
        }
        match p.at {
            Some((at, Fault::Die)) if at == n => {
                p.dead = true;
                return Err(eio());
            }
            Some((at, Fault::Eio)) if at == n => return Err(eio()),
            Some((at, Fault::NoSpace)) if at == n => p.full = true,
            Some((at, Fault::Short)) if at == n && op == Op::Write => {
                p.full = true;
                p.short = true;
                return Ok(p);
            }
            _ => {}
        }
        let grows = matches!(op, Op::Write | Op::Allocate | Op::Create(_) | Op::CreateDir);
        if p.full && grows {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(p)
    }
}

impl Plan {
    /// Saves what a change of `len` bytes at `at` of `f` overwrites, and the file's length.
    pub(super) fn before_change(
        &mut self,
        f: &File,
        path: &Path,
        at: u64,
        len: u64,
    ) -> io::Result<()> {
        let size = f.metadata()?.len();
        let end = at.saturating_add(len).min(size);
        let mut old = vec![0u8; end.saturating_sub(at) as usize];
        f.read_exact_at(&mut old, at)?;
        self.undo.push(Undo::Bytes {
            ino: std::os::unix::fs::MetadataExt::ino(&f.metadata()?),
            file: path.to_path_buf(),
            at,
            old,
            len: size,
        });
        Ok(())
    }

    /// A sync of `f` succeeded: its changes are durable, but those made before a sync of it
    /// that failed (see the module doc).
    pub(super) fn synced(&mut self, f: &File) -> io::Result<()> {
        let synced = std::os::unix::fs::MetadataExt::ino(&f.metadata()?);
        let mut poisoned_before = None;
        if self.poisoned.contains(&synced) {
            // Only what was changed after the failed sync (its last undo entry) is durable now.
            poisoned_before = self
                .undo
                .iter()
                .rposition(|u| matches!(u, Undo::Poisoned(ino) if *ino == synced));
        }
        let mut i = 0;
        self.undo.retain(|u| {
            let keep = match u {
                Undo::Bytes { ino, .. } if *ino == synced => poisoned_before.is_some_and(|p| i < p),
                _ => true,
            };
            i += 1;
            keep
        });
        Ok(())
    }

    /// A sync of `f` failed: its changes so far can never be made durable.
    pub(super) fn sync_failed(&mut self, f: &File) {
        if let Ok(m) = f.metadata() {
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            self.poisoned.push(ino);
            self.undo.push(Undo::Poisoned(ino));
        }
    }

    pub(super) fn created(&mut self, path: &Path) {
        self.undo.push(Undo::Created(path.to_path_buf()));
    }

    /// Renames `from` to `to`, keeping a file it replaces in the trash.
    pub(super) fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let replaced = match to.symlink_metadata() {
            Ok(_) => {
                let trash = self.next_trash();
                std::fs::rename(to, &trash)?;
                Some(trash)
            }
            Err(_) => None,
        };
        if let Err(e) = std::fs::rename(from, to) {
            if let Some(old) = &replaced {
                std::fs::rename(old, to)?;
            }
            return Err(e);
        }
        self.undo.push(Undo::Renamed {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            replaced,
        });
        Ok(())
    }

    fn next_trash(&mut self) -> PathBuf {
        self.trashed += 1;
        self.trash.join(format!("removed-{}", self.trashed))
    }

    pub(super) fn unlink(&mut self, path: &Path) -> io::Result<()> {
        let trash = self.next_trash();
        std::fs::rename(path, &trash)?;
        self.undo.push(Undo::Unlinked {
            path: path.to_path_buf(),
            trash,
        });
        Ok(())
    }

    pub(super) fn dir_synced(&mut self, dir: &Path) {
        let in_dir = |p: &Path| p.parent() == Some(dir);
        self.undo.retain(|u| match u {
            Undo::Bytes { .. } => true,
            Undo::Created(p) => !in_dir(p),
            Undo::Renamed { to, .. } => !in_dir(to),
            Undo::Unlinked { path, .. } => !in_dir(path),
            Undo::Poisoned(_) => true,
        });
    }
}
