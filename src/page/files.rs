//! The page files: one per bucket, `b-<bucket>.page`, appended in memory and written by a task
//! of the shard's executor through an I/O thread of their own (`page-io-<shard>`), never on the
//! shard's thread and never behind the journal's commits.
//!
//! ```text
//!   a bucket:   [ on disk ............ | writing (one write in flight) | pending (appends) ]
//!               offset 0                                                               end
//!
//!   append      the record goes to `pending`; its offset is `end` (a u32: a bucket holds at
//!               most 4 GiB; past that a timer is not paged)
//!   write task  a bucket's `pending` of WRITE_AT bytes or more, or every bucket's once all
//!               of them hold BUFFERED_MAX, becomes `writing`, is written at `on_disk` with
//!               one pwrite, and joins `on_disk`
//!   a load      waits for the write in flight, reads `on_disk` a CHUNK at a time, then takes
//!               `pending` (nothing is appended to a bucket once its load began)
//!   a read      (GET) copies the record from memory, or reads it from disk on the I/O thread
//!   unlink      once its load is done and no read is under way
//! ```
//!
//! A failed write (EIO, a full disk) loses nothing: the bytes go back in front of `pending`
//! and are written again after `RETRY`, so what cannot be written is held in memory, which is
//! where the timers would be without paging. A page that cannot be read back (a failed read, a
//! damaged record) holds timers that are only in the journal now: `Files::lost` ends the
//! process where the journal would on a failed sync (`OnFailure::Exit`), so that a restart
//! pages them again. Else a failed read is retried after `RETRY`, and a damaged record is
//! passed over: the load goes on at the next mark after it (a record start kept at least every
//! `MARK` bytes of a bucket), so that one bad sector costs the timers of about `MARK` bytes,
//! not the rest of the page. A bucket counts the entries that point at it (`live`); those its
//! load did not take are lost from the pages: the bucket stays, marked lost, until each of
//! them is cancelled or replaced, so that no entry points at a bucket that is gone, a GET of
//! one answers that it cannot be read (503), and the count is logged and published
//! (`punctual_page_lost_timers`). They are in the journal: a restart fires them.

mod write;

use super::record;
use super::Loc;
use crate::store::journal::io::{Disk, IoThread};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A bucket's appends are written once they reach this many bytes.
pub const WRITE_AT: usize = 64 << 10;
/// Bytes held in memory, across every bucket, past which every bucket's appends are written.
pub const BUFFERED_MAX: usize = 32 << 20;
/// Bytes of appends one write job takes at most (past its first bucket's).
pub const JOB_BYTES: usize = 8 << 20;
/// Bytes a load reads at a time.
pub const CHUNK: u64 = 1 << 20;
/// The wait before a failed write or read is tried again.
pub const RETRY: Duration = Duration::from_secs(1);
/// A bucket keeps the offset of a record start at least every this many bytes: where a load
/// goes on past a damaged record (4 bytes per `MARK` of page: 4 MB of marks for 4 GB of pages).
pub const MARK: u32 = 4 << 10;

#[derive(Default)]
struct Bucket {
    on_disk: u64,
    writing: Option<Arc<Vec<u8>>>,
    pending: Vec<u8>,
    /// The appends a load took: read from here by a GET until the load is done.
    tail: Option<Arc<Vec<u8>>>,
    loading: bool,
    loaded: bool,
    /// GETs reading the file: it is unlinked once they are done.
    reads: u32,
    /// Index entries that point at this bucket: counted up by each append (each is followed
    /// by its entry) and down by [`Files::forget`].
    live: u64,
    /// Offsets of record starts, ascending, at least `MARK` bytes apart.
    marks: Vec<u32>,
    /// Its load could not take every record its entries point at (a damaged page): those
    /// `live` entries are lost from the pages, and the bucket stays until they are gone.
    lost: bool,
}

impl Bucket {
    fn end(&self) -> u64 {
        self.on_disk
            + self.writing.as_ref().map_or(0, |w| w.len() as u64)
            + self.pending.len() as u64
    }
}

/// What the page files' tasks and the shard share (one thread: `Rc`, `Cell`).
pub struct Files {
    dir: PathBuf,
    io: IoThread,
    buckets: RefCell<BTreeMap<u32, Bucket>>,
    buffered: Cell<usize>,
    /// Rung when a bucket has something to write, or a load needs room in its queue.
    kick: event_listener::Event,
    /// Wakes the shard: a load's chunk arrived.
    nudge: Box<dyn Fn()>,
    closed: Cell<bool>,
    /// End the process on a page that cannot be read back (`punctual serve`), so that its
    /// supervisor restarts it and recovery pages again from the journal; else log and wait.
    exit_on_loss: bool,
    pub stats: Stats,
}

/// What the files did, for the metrics.
#[derive(Default)]
pub struct Stats {
    pub write_errors: Cell<u64>,
    pub read_errors: Cell<u64>,
    pub damaged: Cell<u64>,
    pub bytes_on_disk: Cell<u64>,
    /// Paged timers whose page lost them: they fire after a restart, from the journal.
    pub lost: Cell<u64>,
}

impl Files {
    /// Starts the page I/O thread and makes `dir`. The pages of an earlier run are gone: the
    /// engine removed them before the shards started (`page::clear`).
    pub async fn open(
        dir: PathBuf,
        shard: usize,
        disk: Disk,
        exit_on_loss: bool,
        nudge: Box<dyn Fn()>,
    ) -> std::io::Result<Rc<Files>> {
        let io = IoThread::start(format!("page-io-{shard}"), disk)?;
        let d = dir.clone();
        io.run(move |_| std::fs::create_dir_all(&d)).await?;
        Ok(Rc::new(Files {
            dir,
            io,
            buckets: RefCell::default(),
            buffered: Cell::new(0),
            kick: event_listener::Event::new(),
            nudge,
            closed: Cell::new(false),
            exit_on_loss,
            stats: Stats::default(),
        }))
    }

    fn path(&self, bucket: u32) -> PathBuf {
        self.dir.join(format!("b-{bucket}.page"))
    }

    /// Bytes of appends not yet on disk.
    pub fn buffered(&self) -> usize {
        self.buffered.get()
    }

    /// The first bucket at or after `from` that holds anything.
    pub fn next_bucket(&self, from: u32) -> Option<u32> {
        self.buckets.borrow().range(from..).next().map(|(b, _)| *b)
    }

    /// Appends the record `put` writes to `bucket`'s file; where it went, or `None` (nothing
    /// appended) when the bucket would pass 4 GiB or the record cannot be made.
    pub fn append(&self, bucket: u32, put: impl FnOnce(&mut Vec<u8>) -> Option<()>) -> Option<Loc> {
        let mut buckets = self.buckets.borrow_mut();
        let b = buckets.entry(bucket).or_default();
        if b.loading || b.loaded {
            // Its load took or is taking its appends: this one would be lost. The caller
            // keeps the timer in the wheel (callers page only past the loads, so this is a
            // guard, not a path).
            return None;
        }
        let offset = u32::try_from(b.end()).ok()?;
        let before = b.pending.len();
        put(&mut b.pending)?;
        let added = b.pending.len() - before;
        if u32::try_from(u64::from(offset) + added as u64).is_err() {
            b.pending.truncate(before);
            return None;
        }
        if b.marks.last().is_none_or(|m| offset - m >= MARK) {
            b.marks.push(offset);
        }
        b.live += 1;
        let buffered = self.buffered.get() + added;
        self.buffered.set(buffered);
        if (before < WRITE_AT && b.pending.len() >= WRITE_AT) || buffered >= BUFFERED_MAX {
            self.kick.notify(1);
        }
        Some(Loc { bucket, offset })
    }

    pub fn close(&self) {
        self.closed.set(true);
        self.kick.notify(usize::MAX);
    }

    /// Marks `bucket` as loading: nothing more is appended to it or written of it.
    pub fn begin_load(&self, bucket: u32) -> Rc<PageChunks> {
        if let Some(b) = self.buckets.borrow_mut().get_mut(&bucket) {
            b.loading = true;
        }
        Rc::new(PageChunks::default())
    }

    /// Reads `bucket` for its load into `out`, a chunk at a time (see the module doc).
    pub async fn read_task(files: Rc<Files>, bucket: u32, out: Rc<PageChunks>) {
        // The write in flight ends first, so that what is on disk is all there.
        let on_disk = loop {
            let listener = files.kick.listen();
            let state = files
                .buckets
                .borrow()
                .get(&bucket)
                .map(|b| (b.writing.is_some(), b.on_disk));
            match state {
                None => {
                    out.done.set(true);
                    (files.nudge)();
                    return;
                }
                Some((true, _)) => listener.await,
                Some((false, n)) => break n,
            }
        };
        let path = files.path(bucket);
        let mut at = 0;
        // Failed reads in a row: logged at the 1st, 2nd, 4th, 8th…, as the writes' are, so
        // that a disk that keeps failing does not fill the log at one line a second.
        let mut failures = 0u64;
        while at < on_disk {
            let n = CHUNK.min(on_disk - at);
            let p = path.clone();
            let read = files
                .io
                .run(move |_| {
                    let f = std::fs::File::open(&p)?;
                    let mut buf = vec![0u8; n as usize];
                    f.read_exact_at(&mut buf, at)?;
                    Ok(buf)
                })
                .await;
            match read {
                Ok(buf) => {
                    if failures > 0 {
                        tracing::info!(
                            bucket,
                            offset = at,
                            failures,
                            "paging: a page read back after failed tries; its load goes on"
                        );
                        failures = 0;
                    }
                    at += n;
                    out.chunks.borrow_mut().push_back(Arc::new(buf));
                    (files.nudge)();
                }
                Err(e) => {
                    let errors = files.stats.read_errors.get() + 1;
                    files.stats.read_errors.set(errors);
                    failures += 1;
                    if files.exit_on_loss {
                        files.lost(bucket, at, &format!("could not be read back: {e}"));
                    } else if failures.is_power_of_two() {
                        tracing::error!(
                            bucket,
                            offset = at,
                            failures,
                            error = %e,
                            "paging: a page could not be read back; the read is tried again every second (logged at the 1st, 2nd, 4th… failure in a row). Its timers are safe in the journal, but until a read succeeds they and the later pages' timers are not loaded: a restart loads them from the journal. Check the disk (dmesg, SMART)."
                        );
                    }
                    glommio::timer::sleep(RETRY).await;
                    continue;
                }
            }
            // At most two chunks wait for the shard.
            while out.chunks.borrow().len() >= 2 && !files.closed.get() {
                let listener = files.kick.listen();
                if out.chunks.borrow().len() < 2 {
                    break;
                }
                listener.await;
            }
        }
        let tail = {
            let mut buckets = files.buckets.borrow_mut();
            buckets.get_mut(&bucket).map(|b| {
                let tail = Arc::new(std::mem::take(&mut b.pending));
                files.buffered.set(files.buffered.get() - tail.len());
                b.tail = Some(tail.clone());
                tail
            })
        };
        if let Some(tail) = tail.filter(|t| !t.is_empty()) {
            out.chunks.borrow_mut().push_back(tail);
        }
        out.done.set(true);
        (files.nudge)();
    }

    /// A page's timers cannot be loaded from it (a read that failed, a damaged record). They
    /// are in the journal: with `exit_on_loss` the process ends now (status 1), so that its
    /// supervisor restarts it and recovery pages them again; else the load goes on past the
    /// damage, and its end counts and logs the timers it could not take (`end_load`).
    pub fn lost(&self, bucket: u32, offset: u64, what: &str) {
        if self.exit_on_loss {
            tracing::error!(
                bucket,
                offset,
                "paging: a page {what}. Its timers are safe in the journal: the process exits now (status 1) so that its supervisor restarts it and recovery pages them again from the journal. Check the disk (dmesg, SMART)."
            );
            std::process::exit(1);
        }
        tracing::error!(
            bucket,
            offset,
            "paging: a page {what}. The load goes on at the next record it can find; the timers it cannot take are counted when it ends."
        );
    }

    /// The shard took a chunk: the read task may go on.
    pub fn took_chunk(&self) {
        self.kick.notify(usize::MAX);
    }

    /// `bucket`'s load is done: its file goes once no read is under way and no entry points
    /// at it. Entries that still do are those whose records the load could not take (a
    /// damaged page): the bucket is marked lost, and the count logged and published.
    pub fn end_load(self: &Rc<Files>, bucket: u32) {
        if let Some(b) = self.buckets.borrow_mut().get_mut(&bucket) {
            b.loaded = true;
            if b.live > 0 {
                b.lost = true;
                self.stats.lost.set(self.stats.lost.get() + b.live);
                tracing::error!(
                    bucket,
                    timers = b.live,
                    lost = self.stats.lost.get(),
                    "paging: timers of a damaged page could not be loaded from it. They are safe in the journal and fire after a restart, late; until then they do not fire, a GET of one answers 503, and a cancel or a replace of one works. Restart the service soon. Check the disk (dmesg, SMART)."
                );
            }
        }
        self.release(bucket);
    }

    /// `n` entries that pointed at `bucket` point elsewhere now, or are gone (a load took
    /// them, a cancel, a replace).
    pub fn forget(self: &Rc<Files>, bucket: u32, n: u64) {
        if n == 0 {
            return;
        }
        let lost = {
            let mut buckets = self.buckets.borrow_mut();
            let Some(b) = buckets.get_mut(&bucket) else {
                return;
            };
            debug_assert!(
                b.live >= n,
                "bucket {bucket}: {n} of {} entries forgotten",
                b.live
            );
            b.live = b.live.saturating_sub(n);
            b.lost
        };
        if lost {
            self.stats.lost.set(self.stats.lost.get().saturating_sub(n));
            self.release(bucket);
        }
    }

    /// The first record start kept after offset `at` of `bucket` (see `MARK`).
    pub fn mark_after(&self, bucket: u32, at: u64) -> Option<u64> {
        let buckets = self.buckets.borrow();
        let marks = &buckets.get(&bucket)?.marks;
        let i = marks.partition_point(|m| u64::from(*m) <= at);
        marks.get(i).map(|m| u64::from(*m))
    }

    fn release(self: &Rc<Files>, bucket: u32) {
        let gone = {
            let mut buckets = self.buckets.borrow_mut();
            match buckets.get(&bucket) {
                Some(b) if b.loaded && b.reads == 0 && b.live == 0 => buckets.remove(&bucket),
                _ => None,
            }
        };
        let Some(b) = gone else { return };
        self.buffered.set(self.buffered.get() - b.pending.len());
        self.stats
            .bytes_on_disk
            .set(self.stats.bytes_on_disk.get().saturating_sub(b.on_disk));
        if b.on_disk == 0 {
            return;
        }
        let (files, path) = (self.clone(), self.path(bucket));
        glommio::spawn_local(async move {
            if let Err(e) = files.io.run(move |d| d.unlink(&path)).await {
                tracing::warn!(bucket, error = %e, "paging: a loaded page could not be removed");
            }
        })
        .detach();
    }

    /// The bytes of the record at `at`, copied now if they are in memory; else a read of the
    /// file, which keeps it until the read is done.
    pub fn record_at(self: &Rc<Files>, at: Loc) -> Bytes {
        let mut buckets = self.buckets.borrow_mut();
        let Some(b) = buckets.get_mut(&at.bucket) else {
            return Bytes::Gone;
        };
        if b.lost {
            return Bytes::Lost;
        }
        let offset = u64::from(at.offset);
        if offset < b.on_disk {
            b.reads += 1;
            return Bytes::OnDisk(Read {
                files: self.clone(),
                at,
            });
        }
        let mut from = offset - b.on_disk;
        for part in [b.writing.as_deref(), b.tail.as_deref(), Some(&b.pending)]
            .into_iter()
            .flatten()
        {
            if from < part.len() as u64 {
                return match record::take(&part[from as usize..]) {
                    record::Taken::Record(r, _) => Bytes::Here(r),
                    _ => Bytes::Gone,
                };
            }
            from -= part.len() as u64;
        }
        Bytes::Gone
    }
}

/// Where a record's bytes are.
pub enum Bytes {
    Here(record::PageRecord),
    OnDisk(Read),
    Gone,
    /// Its page was damaged: only the journal holds it now.
    Lost,
}

/// A read of one record from its page file (a GET); the file stays until it is done.
pub struct Read {
    files: Rc<Files>,
    at: Loc,
}

impl Read {
    pub async fn run(self) -> std::io::Result<record::PageRecord> {
        let path = self.files.path(self.at.bucket);
        let offset = u64::from(self.at.offset);
        let bytes = self
            .files
            .io
            .run(move |_| {
                let f = std::fs::File::open(&path)?;
                let mut head = [0u8; 8];
                f.read_exact_at(&mut head, offset)?;
                let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
                let mut buf = vec![0u8; 8 + len];
                f.read_exact_at(&mut buf, offset)?;
                Ok(buf)
            })
            .await?;
        match record::take(&bytes) {
            record::Taken::Record(r, _) => Ok(r),
            _ => {
                let damaged = &self.files.stats.damaged;
                damaged.set(damaged.get() + 1);
                Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a damaged page record",
                ))
            }
        }
    }
}

impl Drop for Read {
    /// Done, or dropped: the file may go.
    fn drop(&mut self) {
        let bucket = self.at.bucket;
        if let Some(b) = self.files.buckets.borrow_mut().get_mut(&bucket) {
            b.reads -= 1;
        }
        self.files.release(bucket);
    }
}

/// A load's chunks, from its read task to the shard.
#[derive(Default)]
pub struct PageChunks {
    pub chunks: RefCell<VecDeque<Arc<Vec<u8>>>>,
    pub done: Cell<bool>,
}
