//! The history's thread and its log on disk: [`History::open`] loads the log (the journal
//! store), rewrites it with only what is kept, and starts the thread that takes the shards'
//! batches, appends them to the log and applies them to the index.
//!
//! The log is JSON lines, one [`Event`] a line, appended and flushed (not fsynced) batch by
//! batch. A line that does not parse (the last one, torn by a kill) is skipped at the load.
//! Once it holds more than twice the lines its live entries need (plus [`COMPACT_SLACK`]), it
//! is rewritten from the index (a new file renamed over it), so it stays within a small
//! multiple of the retention's and the caps' bound.

use super::event::{Event, Outcome, Recorder};
use super::index::{Index, Page};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Batches waiting for the history's thread, at most (a shard sends one a pass at most).
const CHANNEL_BATCHES: usize = 1024;

/// Lines the log may hold beyond twice its live ones before it is rewritten.
const COMPACT_SLACK: usize = 65_536;

/// Creates `dir` and holds its `LOCK` (`flock`, exclusive, not waiting) for as long as the
/// file lives; refused while another process holds it.
fn hold(dir: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(dir)?;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("the history is in use by another punctual process ({e}); stop it or choose another --data-dir"),
        ));
    }
    Ok(f)
}

/// Holds `dir` (see [`hold`]), loads its log into `index`, and rewrites the log with only
/// what is kept: the lock and the log to append to.
fn on_disk(dir: &Path, index: &mut Index) -> io::Result<(File, Log)> {
    let lock = hold(dir)?;
    let path = dir.join(LOG_NAME);
    let skipped = load(&path, index)?;
    if skipped > 0 {
        tracing::warn!(
            path = %path.display(),
            skipped,
            "history: lines of the log did not parse and were skipped (a torn write)"
        );
    }
    index.trim(now_us());
    let lines = rewrite(&path, index)?;
    let log = Log {
        out: append(&path)?,
        path,
        lines,
        failed: false,
    };
    Ok((lock, log))
}

/// The log's name in its directory.
pub const LOG_NAME: &str = "history.log";

/// The history: the index the API reads and the channel the shards' recorders send to.
pub struct History {
    /// The log's directory held for this process (`flock`), on disk only: the history opens
    /// before the journal takes its data directory's lock, and a second process started on
    /// the same directory must leave the log alone (the journal's lock then refuses it).
    _lock: Option<File>,
    index: Arc<Mutex<Index>>,
    tx: SyncSender<Vec<Event>>,
    dropped: Arc<AtomicU64>,
    durable: bool,
}

impl History {
    /// The history, its log in `dir` (none: in memory only), entries kept for `retention`
    /// after their last event, at most `cap` per tenant; its thread started.
    pub fn open(dir: Option<&Path>, retention: Duration, cap: usize) -> io::Result<Arc<History>> {
        let retention_us = u64::try_from(retention.as_micros()).unwrap_or(u64::MAX);
        let mut index = Index::new(retention_us, cap);
        // A history that cannot be kept on disk is kept in memory, said once, rather than stop
        // the start: the journal beside it gives the reason that matters first (a disk that
        // fails, a directory another process holds, where the journal then refuses the start).
        let (lock, log) = match dir.map(|d| (d, on_disk(d, &mut index))) {
            Some((_, Ok((lock, log)))) => (Some(lock), Some(log)),
            Some((d, Err(e))) => {
                tracing::error!(
                    dir = %d.display(),
                    error = %e,
                    "history: cannot keep the history of fires on disk; it is kept in memory only until the next start"
                );
                (None, None)
            }
            None => (None, None),
        };
        let durable = log.is_some();
        let index = Arc::new(Mutex::new(index));
        let (tx, rx) = sync_channel(CHANNEL_BATCHES);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            index: index.clone(),
            log,
            trimmed_us: now_us(),
            dropped: dropped.clone(),
            reported: 0,
        };
        std::thread::Builder::new()
            .name("punctual-history".into())
            .spawn(move || writer.run(rx))?;
        Ok(Arc::new(History {
            _lock: lock,
            index,
            tx,
            dropped,
            durable,
        }))
    }

    /// A shard's recorder.
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.tx.clone(), self.dropped.clone())
    }

    /// A page of `tenant`'s entries (`Index::page`), now.
    pub fn page(&self, tenant: &str, key: Option<&str>, after: Option<u64>, limit: usize) -> Page {
        lock(&self.index).page(tenant, key, after, limit, now_us())
    }

    /// Entries held now, all tenants together.
    pub fn entries(&self) -> usize {
        lock(&self.index).len()
    }

    /// Whether the history is on disk (the journal store) rather than in memory only.
    pub fn durable(&self) -> bool {
        self.durable
    }

    /// Events dropped so far: a shard's buffer or the channel was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn lock(index: &Mutex<Index>) -> MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn now_us() -> u64 {
    crate::clock::clock_ns(libc::CLOCK_REALTIME) / 1_000
}

struct Log {
    out: BufWriter<File>,
    path: PathBuf,
    /// Lines in the file.
    lines: usize,
    /// A write failed (logged once; the index goes on in memory).
    failed: bool,
}

struct Writer {
    index: Arc<Mutex<Index>>,
    log: Option<Log>,
    /// When the index was last trimmed (and the drops last looked at).
    trimmed_us: u64,
    /// Events the shards dropped, and how many of them the log has reported.
    dropped: Arc<AtomicU64>,
    reported: u64,
}

impl Writer {
    /// Until every sender is gone: each batch written, then applied (so what the API shows
    /// is in the log already).
    fn run(mut self, rx: Receiver<Vec<Event>>) {
        while let Ok(batch) = rx.recv() {
            if let Some(log) = &mut self.log {
                let written = write_batch(&mut log.out, &batch);
                log.lines += batch.len();
                if let Err(e) = written {
                    if !std::mem::replace(&mut log.failed, true) {
                        tracing::error!(path = %log.path.display(), error = %e, "history: cannot write the log; the history goes on in memory");
                    }
                }
            }
            let mut index = lock(&self.index);
            for e in batch {
                index.apply(e);
            }
            // A look at every tenant's oldest entry: once a second at most (reads leave out
            // what is past the retention meanwhile).
            let now = now_us();
            if now.saturating_sub(self.trimmed_us) >= 1_000_000 {
                index.trim(now);
                self.trimmed_us = now;
                let dropped = self.dropped.load(Ordering::Relaxed);
                if dropped > self.reported {
                    tracing::warn!(
                        events = dropped - self.reported,
                        "history: events were dropped, the shards' buffers or the queue to the \
                         history's thread being full; the history misses them"
                    );
                    self.reported = dropped;
                }
            }
            if let Some(log) = &mut self.log {
                if log.lines > 2 * index.len() + COMPACT_SLACK {
                    match rewrite(&log.path, &index).and_then(|n| Ok((n, append(&log.path)?))) {
                        Ok((n, out)) => {
                            log.lines = n;
                            log.out = out;
                        }
                        Err(e) => {
                            tracing::error!(path = %log.path.display(), error = %e, "history: cannot rewrite the log")
                        }
                    }
                }
            }
        }
    }
}

fn write_batch(out: &mut BufWriter<File>, batch: &[Event]) -> io::Result<()> {
    for e in batch {
        serde_json::to_writer(&mut *out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

fn append(path: &Path) -> io::Result<BufWriter<File>> {
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(BufWriter::new(f))
}

/// Applies the log at `path` (none yet: nothing) to `index`; how many lines did not parse.
fn load(path: &Path, index: &mut Index) -> io::Result<usize> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut skipped = 0;
    for line in BufReader::new(f).split(b'\n') {
        match serde_json::from_slice::<Event>(&line?) {
            Ok(e) => index.apply(e),
            Err(_) => skipped += 1,
        }
    }
    Ok(skipped)
}

/// Writes the index's entries as the log at `path` (a new file renamed over it); its lines.
fn rewrite(path: &Path, index: &Index) -> io::Result<usize> {
    let tmp = path.with_extension("log.new");
    let mut out = BufWriter::new(File::create(&tmp)?);
    let mut lines = 0;
    let mut failed = Ok(());
    index.each(|tenant, entry| {
        if failed.is_err() {
            return;
        }
        let n = entry.attempts.len();
        let fire = Event {
            tenant: tenant.into(),
            key: entry.key.clone(),
            version: entry.version,
            fire_at_us: entry.fire_at_us,
            at_us: entry.fired_at_us,
            attempt: None,
            outcome: if n == 0 {
                entry.outcome
            } else {
                Outcome::Retrying
            },
        };
        let attempts = entry.attempts.iter().enumerate().map(|(i, a)| Event {
            at_us: a.at_us,
            attempt: Some(a.clone()),
            outcome: if i + 1 == n {
                entry.outcome
            } else {
                Outcome::Retrying
            },
            ..fire.clone()
        });
        let all: Vec<Event> = std::iter::once(fire.clone()).chain(attempts).collect();
        lines += all.len();
        failed = write_batch(&mut out, &all);
    });
    failed?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(lines)
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
