//! Paging: timers due beyond a horizon kept on disk, not in memory, and loaded into the wheel
//! ahead of their time. For the journal store only, and off unless `page_horizon` is set.
//!
//! ```text
//!   schedule, due ≥ start of bucket `line`   index: 40 bytes (id, deadline, version, where)
//!   (at least `horizon` ahead)               page file of its bucket: the whole record
//!   schedule, due before                     the wheel, as without paging
//!
//!   buckets: `horizon` / 4 wide, numbered from the shard's start
//!   ├── loaded ──┤├─ loading ─┤├── line ──▶ paged
//!   now ........ now + horizon
//!
//!   each pass: once bucket `line` starts less than `horizon` ahead, its load begins (line + 1):
//!     its file is read a chunk at a time on the page I/O thread, and the shard, in slices,
//!     puts each record whose index entry still points at it into the wheel, under its
//!     version, and removes the entry; then the file goes
//! ```
//!
//! A loaded timer the wheel cannot take now (its slab's index space spent, a deadline past
//! its range) is not dropped: it is held here, its entry pointing at `HELD`, still found,
//! read, cancelled and replaced as a paged timer is, and offered to the wheel again at every
//! step of the loads until it goes in. A damaged page's timers are `files.rs`'s to tell.
//!
//! The journal stays what makes a timer durable: every record is written there as without
//! paging, and a start rebuilds the pages from it (`Loader` pages what recovery hands over).
//! The pages are a second copy in another order, written without `fsync`, and emptied at each
//! start. So paging changes nothing in the journal's format, its replay, compaction or its
//! tools, and nothing it does can lose an acknowledged timer: what the pages lose, a restart
//! gives back.
//!
//! A paged timer is exact as a timer in the wheel is: a GET reads its record back (from
//! memory while its bucket's appends are not yet written); a replace or a cancel finds it by
//! its id; its tenant's quota and the shard's capacity count it; its version is the one the
//! journal has. A load is `horizon` ahead of its bucket: with a one-hour horizon, a bucket of
//! 15 minutes starts loading an hour before its first timer is due.
//!
//! # Files
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Pager`]: which timers are paged, and the loads |
//! | `index.rs` | the in-memory entries, by keyed hash |
//! | `keys.rs` | the paged keys in order per tenant, for listings by prefix |
//! | `files.rs` | the page files, their writes, reads, and the loads' reads |
//! | `take.rs` | a load's records taken into the wheel, past a damaged one |
//! | `record.rs` | a record's bytes, and where one lies (`Loc`) |

mod files;
pub mod index;
mod keys;
pub mod record;
mod take;

pub use record::Loc;
use record::HELD;

use crate::store::journal::io::Disk;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use files::{Bytes, Files};
use index::{Far, FarIndex, Id, Keyed};
use keys::PagedKeys;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;
use take::{take_records, Load, Step};

/// The directory under a journal's data directory that holds every shard's pages.
pub(crate) fn pages_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("pages")
}

/// Where an earlier run's pages wait for their removal: `pages.gone-<pid>-<ns>`.
const GONE: &str = "pages.gone-";

/// Clears away the pages an earlier run left (every shard's, whatever the shard count was
/// then, and whether or not this run pages): the journal holds their timers. Before the shards
/// start, on the caller's thread, which only renames them aside; a thread of their own,
/// `page-clear`, removes them and any that a crash left aside before, so that a start does not
/// wait on the unlinks (at 100 M paged timers, 15 GiB in thousands of files: 5 to 15 s).
pub(crate) fn clear(data_dir: &std::path::Path) -> std::io::Result<()> {
    let mut gone: Vec<PathBuf> = std::fs::read_dir(data_dir)?
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(GONE)))
        .map(|e| e.path())
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let aside = data_dir.join(format!("{GONE}{}-{nanos}", std::process::id()));
    match std::fs::rename(pages_dir(data_dir), &aside) {
        Ok(()) => gone.push(aside),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if gone.is_empty() {
        return Ok(());
    }
    let aside = gone.clone();
    let spawned = std::thread::Builder::new()
        .name("page-clear".into())
        .spawn(move || remove_all(&aside));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "paging: no thread to remove an earlier run's pages; removing them before the start");
        remove_all(&gone);
    }
    Ok(())
}

/// Removes directories of an earlier run's pages; one that cannot be is logged and left for
/// the next start (nothing reads it).
fn remove_all(dirs: &[PathBuf]) {
    for dir in dirs {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "paging: cannot remove an earlier run's pages; the next start tries again");
        }
    }
}

/// Buckets ahead of the first unloaded one that may be paged into: 16,384, 170 days with a
/// one-hour horizon. A timer due later stays in the wheel. Each bucket that holds a timer is a
/// file and a few hundred bytes of memory, so without a bound one tenant spreading timers one
/// to a bucket over decades would cost a file and a 4 KiB block per timer, the disk the
/// journal shares with every tenant.
const MAX_BUCKETS: u32 = 16_384;

/// A shard's paged timers (see the module doc).
pub(crate) struct Pager {
    horizon_us: u64,
    width_us: u64,
    /// Where bucket 0 starts.
    origin: u64,
    /// The first bucket that neither loaded nor is loading: a timer due in it or later is paged.
    line: u32,
    index: FarIndex,
    keyed: Keyed,
    /// The paged timers' keys, in order per tenant: each entry of `index` has its key here.
    keys: PagedKeys,
    files: Rc<Files>,
    load: Option<Load>,
    /// Loaded timers the wheel did not take, with their ids; their entries point at `HELD`.
    held: Vec<(Id, record::PageRecord)>,
    /// Writes the pages; cancelled when the pager goes.
    _writer: glommio::Task<()>,
}

/// What a paged timer is, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paged {
    pub deadline: UtcMicros,
    pub version: u64,
}

impl Pager {
    /// Opens the pages of one shard in `dir` (emptied: see the module doc), starting at `now`.
    /// `nudge` wakes the shard when a load has read more; `exit_on_loss`: a page that cannot
    /// be read back ends the process (see `Files::lost`). On the shard's executor.
    pub async fn open(
        dir: PathBuf,
        shard: usize,
        horizon: Duration,
        now: UtcMicros,
        disk: Disk,
        exit_on_loss: bool,
        nudge: Box<dyn Fn()>,
    ) -> std::io::Result<Pager> {
        let files = Files::open(dir, shard, disk, exit_on_loss, nudge).await?;
        let horizon_us = (horizon.as_micros() as u64).max(4);
        let width_us = horizon_us / 4;
        let origin = now.0 - now.0 % width_us;
        let writer = glommio::spawn_local(Files::write_task(files.clone()));
        let mut pager = Pager {
            horizon_us,
            width_us,
            origin,
            line: 0,
            index: FarIndex::default(),
            keyed: Keyed::new(),
            keys: PagedKeys::default(),
            files,
            load: None,
            held: Vec::new(),
            _writer: writer,
        };
        pager.line = pager.first_unloaded(now);
        Ok(pager)
    }

    /// The first bucket that starts at least `horizon` after `now`.
    fn first_unloaded(&self, now: UtcMicros) -> u32 {
        let ahead = (now.0 + self.horizon_us).saturating_sub(self.origin);
        u32::try_from(ahead.div_ceil(self.width_us)).unwrap_or(u32::MAX)
    }

    /// The bucket of `deadline`, if it has one (never `HELD`'s number).
    fn bucket(&self, deadline: UtcMicros) -> Option<u32> {
        let from = deadline.0.checked_sub(self.origin)?;
        u32::try_from(from / self.width_us)
            .ok()
            .filter(|b| *b != HELD.bucket)
    }

    /// Paged timers.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether a timer due at `deadline` is paged: in a bucket not loaded yet, and less
    /// than `MAX_BUCKETS` past the first of those.
    pub fn is_far(&self, deadline: UtcMicros) -> bool {
        self.bucket(deadline)
            .is_some_and(|b| b >= self.line && b - self.line < MAX_BUCKETS)
    }

    /// The paged timer `identity`, if there is one.
    pub fn find(&self, identity: &[u8]) -> Option<Paged> {
        self.index.get(self.keyed.id(identity)).map(|f| Paged {
            deadline: f.deadline,
            version: f.version,
        })
    }

    /// Pages `timer` (its deadline is far: [`Pager::is_far`]). `Err(())` when it cannot be
    /// (its bucket is full): nothing changed, and the caller keeps it in the wheel. Else
    /// the paged timer it replaced, if any.
    pub fn put(
        &mut self,
        timer: &PackedTimer,
        deadline: UtcMicros,
        version: u64,
    ) -> Result<Option<Paged>, ()> {
        let id = self.keyed.id(timer.identity());
        let old = self.page(id, deadline, version, |out| {
            record::put(out, timer, deadline, version)
        })?;
        if old.is_none() {
            // `keyed.id` took it: its key is 255 bytes at most, as the keys hold.
            self.keys.insert(timer.tenant(), timer.key());
        }
        Ok(old)
    }

    /// [`Pager::put`] of a timer a start recovered, in its parts (tenant, key, metadata,
    /// payload) as the journal hands it over, once per timer: the same record and entry,
    /// without making the timer first, the entry gathered with others of its part
    /// (`FarIndex::insert_recovered`). Nothing may read the pages until
    /// [`Pager::recovered`].
    pub fn put_recovered(
        &mut self,
        parts: (&str, &str, &[u8], &[u8]),
        deadline: UtcMicros,
        version: u64,
    ) -> Result<(), ()> {
        let id = self.keyed.id_of(parts.0, parts.1).ok_or(())?;
        let at = self.append(deadline, |out| {
            record::put_parts(out, parts, deadline, version)
        })?;
        self.index.insert_recovered(Far {
            id,
            deadline,
            version,
            at,
        });
        self.keys.insert(parts.0, parts.1);
        Ok(())
    }

    /// The start's recovery is over: its paged timers go into the index.
    pub fn recovered(&mut self) {
        let replaced = self.index.recovered();
        let met = replaced.len();
        for old in &replaced {
            self.forget(old);
        }
        if met > 0 {
            tracing::error!(
                timers = met,
                "paging: recovery handed over timers whose ids another one had; the later of each pair is kept"
            );
        }
    }

    /// Appends the record `write` makes to the bucket of `deadline` (a far one); where it is.
    fn append(
        &mut self,
        deadline: UtcMicros,
        write: impl FnOnce(&mut Vec<u8>) -> Option<()>,
    ) -> Result<Loc, ()> {
        let bucket = self
            .bucket(deadline)
            .filter(|_| self.is_far(deadline))
            .ok_or(())?;
        self.files.append(bucket, write).ok_or(())
    }

    /// Appends the record `write` makes to the bucket of `deadline`, and points the entry of
    /// `id` at it.
    fn page(
        &mut self,
        id: Id,
        deadline: UtcMicros,
        version: u64,
        write: impl FnOnce(&mut Vec<u8>) -> Option<()>,
    ) -> Result<Option<Paged>, ()> {
        let at = self.append(deadline, write)?;
        let old = self.index.insert(Far {
            id,
            deadline,
            version,
            at,
        });
        if let Some(old) = &old {
            self.forget(old);
        }
        Ok(old.map(|f| Paged {
            deadline: f.deadline,
            version: f.version,
        }))
    }

    /// Room in the index for about `n` more paged timers (a start: how many it recovers).
    pub fn reserve(&mut self, n: usize) {
        self.index.reserve(n);
    }

    /// Removes the paged timer `identity` (a cancel, or a replace into the wheel).
    pub fn remove(&mut self, identity: &[u8]) -> Option<Paged> {
        let far = self.index.remove(self.keyed.id(identity))?;
        self.forget(&far);
        if let Some((tenant, key)) = keys::parts(identity) {
            self.keys.remove(tenant, key);
        }
        Some(Paged {
            deadline: far.deadline,
            version: far.version,
        })
    }

    /// `far`'s entry is gone or points elsewhere now: its bucket counts one entry less, or its
    /// held timer goes.
    fn forget(&mut self, far: &Far) {
        if far.at == HELD {
            self.held.retain(|(id, _)| *id != far.id);
        } else {
            self.files.forget(far.at.bucket, 1);
        }
    }

    /// `tenant`'s paged timers from the key `start` on (after it when `after`), by key, each
    /// with what it is, to `f` until it answers `false`.
    pub fn walk_keys(
        &self,
        tenant: &str,
        start: &str,
        after: bool,
        mut f: impl FnMut(&str, Paged) -> bool,
    ) {
        self.keys.walk(tenant, start, after, |key| {
            let far = self
                .keyed
                .id_of(tenant, key)
                .and_then(|id| self.index.get(id));
            match far {
                Some(far) => f(
                    key,
                    Paged {
                        deadline: far.deadline,
                        version: far.version,
                    },
                ),
                // Every key held has its entry; one without is passed over.
                None => true,
            }
        });
    }

    /// Paged keys held in order, and about the bytes of memory they take.
    #[cfg(test)]
    pub fn keys_held(&self) -> (usize, usize) {
        (self.keys.len(), self.keys.bytes())
    }

    /// Timers held because the wheel did not take them (see the module doc).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Reads the paged timer `identity` back (a GET): its timer as it was paged, with its
    /// deadline and version; `None` if there is no such timer. The future needs nothing of the
    /// shard: spawn it, and answer from it.
    pub fn read(
        &self,
        identity: &[u8],
    ) -> Option<impl std::future::Future<Output = std::io::Result<record::PageRecord>> + 'static>
    {
        let far = *self.index.get(self.keyed.id(identity))?;
        let bytes = match self
            .held
            .iter()
            .find(|(id, _)| far.at == HELD && *id == far.id)
        {
            Some((_, r)) => Bytes::Here(r.clone()),
            None => self.files.record_at(far.at),
        };
        Some(async move {
            match bytes {
                Bytes::Here(r) => Ok(r),
                Bytes::OnDisk(read) => read.run().await,
                Bytes::Gone => Err(std::io::Error::other("the page holds no such record")),
                Bytes::Lost => Err(std::io::Error::other(
                    "its page was damaged: the journal holds it, and a restart fires it",
                )),
            }
        })
    }

    /// One step of the loads: starts the next that is due, and puts what its reads brought
    /// into the wheel through `insert` (deadline, version), until `stop` says so (asked every
    /// `take::LOAD_CHECK` records: the shard's slice is over, or a timer is due). `insert` hands
    /// back a timer the wheel did not take: it is held, and offered again at the next step.
    /// How many timers went in.
    pub fn load_step(
        &mut self,
        now: UtcMicros,
        mut stop: impl FnMut() -> bool,
        mut insert: impl FnMut(PackedTimer, UtcMicros, u64) -> Result<(), PackedTimer>,
    ) -> usize {
        let mut n = self.offer_held(&mut insert);
        loop {
            if self.load.is_none() && !self.begin_load(now) {
                return n;
            }
            let Some(load) = self.load.as_mut() else {
                return n;
            };
            match take_records(
                load,
                (&mut self.index, &mut self.keys),
                &self.keyed,
                &self.files,
                &mut self.held,
                &mut stop,
                &mut insert,
            ) {
                Step::More(k) => return n + k,
                Step::Done(k) => {
                    n += k;
                    let bucket = load.bucket;
                    self.load = None;
                    self.files.end_load(bucket);
                }
            }
        }
    }

    /// Offers the held timers to the wheel again; how many went in. One whose entry no longer
    /// points at `HELD` was cancelled or replaced since: it goes.
    fn offer_held(
        &mut self,
        insert: &mut impl FnMut(PackedTimer, UtcMicros, u64) -> Result<(), PackedTimer>,
    ) -> usize {
        if self.held.is_empty() {
            return 0;
        }
        let mut n = 0;
        for (id, mut r) in std::mem::take(&mut self.held) {
            if self.index.get(id).is_none_or(|f| f.at != HELD) {
                continue;
            }
            self.keys.remove(r.timer.tenant(), r.timer.key());
            match insert(r.timer, r.deadline, r.version) {
                Ok(()) => {
                    self.index.remove(id);
                    n += 1;
                }
                Err(timer) => {
                    self.keys.insert(timer.tenant(), timer.key());
                    r.timer = timer;
                    self.held.push((id, r));
                }
            }
        }
        n
    }

    /// Begins the load of the next bucket that holds anything and starts within `horizon` of
    /// `now`; whether one began. Empty buckets are passed over.
    fn begin_load(&mut self, now: UtcMicros) -> bool {
        let due = self.first_unloaded(now);
        if self.line >= due {
            return false;
        }
        let Some(bucket) = self.files.next_bucket(self.line).filter(|b| *b < due) else {
            self.line = due;
            return false;
        };
        self.line = bucket + 1;
        let loaded = self.files.begin_load(bucket);
        let reader =
            glommio::spawn_local(Files::read_task(self.files.clone(), bucket, loaded.clone()));
        self.load = Some(Load {
            bucket,
            loaded,
            carry: Vec::new(),
            pos: 0,
            skip: 0,
            _reader: reader,
        });
        true
    }

    /// Bytes of pages held in memory, not yet written.
    pub fn buffered(&self) -> usize {
        self.files.buffered()
    }

    /// (write errors, read errors, damaged records, bytes on disk).
    pub fn stats(&self) -> (u64, u64, u64, u64) {
        let s = &self.files.stats;
        (
            s.write_errors.get(),
            s.read_errors.get(),
            s.damaged.get(),
            s.bytes_on_disk.get(),
        )
    }

    /// Paged timers a damaged page lost: the journal holds them, and a restart fires them.
    pub fn lost(&self) -> u64 {
        self.files.stats.lost.get()
    }
}

impl Drop for Pager {
    /// Stops the page tasks that outlive the pager's fields: a read task of a load, or a
    /// read for a GET, waiting on the files' event.
    fn drop(&mut self) {
        self.files.close();
    }
}

#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod loss_tests;
#[cfg(test)]
mod tests;
