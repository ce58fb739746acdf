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
//! pages them again; else it logs and counts, a failed read is retried after `RETRY`, and a
//! damaged page's timers wait for the next start.

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
        let buffered = self.buffered.get() + added;
        self.buffered.set(buffered);
        if (before < WRITE_AT && b.pending.len() >= WRITE_AT) || buffered >= BUFFERED_MAX {
            self.kick.notify(1);
        }
        Some(Loc { bucket, offset })
    }

    /// Takes the next write: the buckets with `WRITE_AT` bytes of appends or more or, once all
    /// of them hold `BUFFERED_MAX`, those with the most, up to `JOB_BYTES` in all (at least
    /// one bucket); their bytes move to `writing`. One job for many buckets, so that a start,
    /// which pages what recovery hands over faster than one bucket's write a turn would take
    /// away, keeps its buffers bounded.
    fn next_write(&self) -> Vec<(u32, u64, Arc<Vec<u8>>)> {
        let mut buckets = self.buckets.borrow_mut();
        let over = self.buffered.get() >= BUFFERED_MAX;
        let writable = |b: &Bucket| b.writing.is_none() && !b.loading && !b.pending.is_empty();
        let mut picked: Vec<(u32, usize)> = buckets
            .iter()
            .filter(|(_, b)| writable(b) && (over || b.pending.len() >= WRITE_AT))
            .map(|(n, b)| (*n, b.pending.len()))
            .collect();
        if over {
            picked.sort_unstable_by_key(|p| std::cmp::Reverse(p.1));
        }
        let mut total = 0;
        let mut jobs = Vec::new();
        for (n, len) in picked {
            if total > 0 && total + len > JOB_BYTES {
                break;
            }
            total += len;
            let Some(b) = buckets.get_mut(&n) else {
                continue;
            };
            let bytes = Arc::new(std::mem::take(&mut b.pending));
            b.writing = Some(bytes.clone());
            jobs.push((n, b.on_disk, bytes));
        }
        jobs
    }

    /// The write of `bucket` ended; false when it failed.
    fn written(&self, bucket: u32, result: std::io::Result<()>) -> bool {
        let mut buckets = self.buckets.borrow_mut();
        let Some(b) = buckets.get_mut(&bucket) else {
            return true;
        };
        let Some(bytes) = b.writing.take() else {
            return true;
        };
        match result {
            Ok(()) => {
                b.on_disk += bytes.len() as u64;
                self.buffered.set(self.buffered.get() - bytes.len());
                self.stats
                    .bytes_on_disk
                    .set(self.stats.bytes_on_disk.get() + bytes.len() as u64);
                true
            }
            Err(e) => {
                let n = self.stats.write_errors.get() + 1;
                self.stats.write_errors.set(n);
                if n == 1 || n.is_power_of_two() {
                    tracing::warn!(bucket, error = %e, errors = n, "paging: a page could not be written; its timers stay in memory and the write is tried again");
                }
                let mut back = Arc::try_unwrap(bytes).unwrap_or_else(|a| (*a).clone());
                back.append(&mut b.pending);
                b.pending = back;
                false
            }
        }
    }

    /// Writes pages as their buckets fill, until the files are closed.
    pub async fn write_task(files: Rc<Files>) {
        while !files.closed.get() {
            let listener = files.kick.listen();
            let jobs = files.next_write();
            if jobs.is_empty() {
                listener.await;
                continue;
            }
            drop(listener);
            let paths: Vec<_> = jobs.iter().map(|(b, _, _)| files.path(*b)).collect();
            let writes: Vec<_> = jobs
                .iter()
                .map(|(_, at, bytes)| (*at, bytes.clone()))
                .collect();
            // One result per bucket, in order; the job stops at the first failure, and the
            // buckets after it count as failed too (written again later).
            let results = files
                .io
                .run(move |d| {
                    let mut out = Vec::with_capacity(paths.len());
                    for (path, (at, bytes)) in paths.iter().zip(&writes) {
                        let r = write_page(d, path, *at, bytes);
                        let failed = r.is_err();
                        out.push(r);
                        if failed {
                            break;
                        }
                    }
                    Ok(out)
                })
                .await;
            let mut results = match results {
                Ok(r) => r.into_iter(),
                Err(e) => vec![Err(e)].into_iter(),
            };
            let mut failed = false;
            for (bucket, _, _) in jobs {
                let r = results.next().unwrap_or_else(|| {
                    Err(std::io::Error::other("not written: an earlier page failed"))
                });
                failed |= !files.written(bucket, r);
            }
            if failed {
                glommio::timer::sleep(RETRY).await;
            }
            // A load may be waiting for this write to end.
            files.kick.notify(usize::MAX);
        }
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
    /// supervisor restarts it and recovery pages them again; else they wait, and the log says
    /// to restart.
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
            "paging: a page {what}. Its timers are safe in the journal but cannot be loaded from this page: restart the service to load them from the journal. Check the disk (dmesg, SMART)."
        );
    }

    /// The shard took a chunk: the read task may go on.
    pub fn took_chunk(&self) {
        self.kick.notify(usize::MAX);
    }

    /// `bucket`'s load is done: its file goes once no read is under way.
    pub fn end_load(self: &Rc<Files>, bucket: u32) {
        if let Some(b) = self.buckets.borrow_mut().get_mut(&bucket) {
            b.loaded = true;
        }
        self.release(bucket);
    }

    fn release(self: &Rc<Files>, bucket: u32) {
        let gone = {
            let mut buckets = self.buckets.borrow_mut();
            match buckets.get(&bucket) {
                Some(b) if b.loaded && b.reads == 0 => buckets.remove(&bucket),
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

/// Writes `bytes` at `at` of `path`, creating the file with its first write.
fn write_page(d: &Disk, path: &std::path::Path, at: u64, bytes: &[u8]) -> std::io::Result<()> {
    let f = if at == 0 {
        match d.create_new(path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => d.open(path)?,
            other => other?,
        }
    } else {
        d.open(path)?
    };
    d.write_all_at(&f, bytes, at)
}

/// Where a record's bytes are.
pub enum Bytes {
    Here(record::PageRecord),
    OnDisk(Read),
    Gone,
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
