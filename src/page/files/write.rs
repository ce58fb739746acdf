//! The page files' writes: a task of the shard's executor takes the buckets whose appends are
//! due to be written (see `files.rs`), writes them on the page I/O thread, and puts back in
//! front of `pending` what failed, to try again after `RETRY`.

use super::{Bucket, Files, BUFFERED_MAX, JOB_BYTES, RETRY, WRITE_AT};
use crate::store::journal::io::Disk;
use std::rc::Rc;
use std::sync::Arc;

impl Files {
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
