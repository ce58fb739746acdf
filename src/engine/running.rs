//! A running engine: its shard threads and the threads that watch them, and its shutdown,
//! which waits for each shard within a bound ([`SHUTDOWN_LIMIT`]).

use super::handle::Handle;
use crate::clock::SetWatch;
use crate::runtime::watchdog::Watchdog;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a shutdown waits for the shards to stop (they flush their stores first). A shard
/// still running after it is left behind and reported, so a shutdown always returns.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(60);

/// A running engine. Dropping it shuts it down; `shutdown` does the same and reports.
pub struct Engine {
    pub(super) handle: Handle,
    pub(super) threads: Vec<std::thread::JoinHandle<()>>,
    pub(super) stop: Arc<AtomicBool>,
    /// How long a shutdown waits for the shards.
    pub(super) shutdown_limit: Duration,
    /// Stopped after the shards (fields drop after `Drop::drop` has joined them).
    pub(super) _watchdog: Option<Watchdog>,
    pub(super) _set_watch: Option<SetWatch>,
}

impl Engine {
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops every shard and joins its thread, within the shutdown limit
    /// (60 s unless the builder set another). Pending in-memory
    /// timers are dropped. An error names the shards that panicked or did not stop in time.
    pub fn shutdown(mut self) -> std::result::Result<(), String> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::result::Result<(), String> {
        self.handle.inner.stopping.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        for ring in &self.handle.inner.rings {
            ring.wake();
        }
        let limit = self.shutdown_limit;
        let report = join_within(std::mem::take(&mut self.threads), limit);
        let mut errors = Vec::new();
        if !report.panicked.is_empty() {
            errors.push(format!("shard threads {:?} panicked", report.panicked));
        }
        if !report.stuck.is_empty() {
            errors.push(format!(
                "shard threads {:?} did not stop within {} s and were left behind",
                report.stuck,
                limit.as_secs_f64()
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!("{e}");
        }
    }
}

/// What joining the shard threads found.
#[derive(Debug, Default)]
pub(super) struct JoinReport {
    /// Shards whose thread ended in a panic.
    pub panicked: Vec<usize>,
    /// Shards whose thread had not ended within the limit.
    pub stuck: Vec<usize>,
}

/// Joins `threads` (shard `i` is `threads[i]`), each on a helper thread, waiting for them up
/// to `limit` in all: a thread that cannot wake (a stalled executor, a blocked start hook) is
/// left to its helper, which stays detached, instead of blocking the caller for ever.
pub(super) fn join_within(
    threads: Vec<std::thread::JoinHandle<()>>,
    limit: Duration,
) -> JoinReport {
    let n = threads.len();
    let mut report = JoinReport::default();
    if n == 0 {
        return report;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for (id, t) in threads.into_iter().enumerate() {
        let tx = tx.clone();
        let joiner = std::thread::Builder::new()
            .name(format!("punctual-join-{id}"))
            .spawn(move || {
                let _ = tx.send((id, t.join().is_ok()));
            });
        if let Err(e) = joiner {
            // Its handle went with the failed spawn: the thread runs on, detached.
            tracing::error!(shard = id, error = %e, "cannot start a thread to join the shard; not waiting for it");
        }
    }
    drop(tx);
    let give_up = Instant::now() + crate::units::capped(limit);
    let mut joined = vec![false; n];
    for _ in 0..n {
        let left = give_up.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((id, ok)) => {
                joined[id] = true;
                if !ok {
                    report.panicked.push(id);
                }
            }
            Err(_) => break,
        }
    }
    report.stuck = (0..n).filter(|&i| !joined[i]).collect();
    report
}
