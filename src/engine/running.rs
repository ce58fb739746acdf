//! A running engine: its shard threads and the threads that watch them.

use super::handle::Handle;
use crate::clock::SetWatch;
use crate::shard::watchdog::Watchdog;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A running engine. Dropping it shuts it down; `shutdown` does the same and reports.
pub struct Engine {
    pub(super) handle: Handle,
    pub(super) threads: Vec<glommio::ExecutorJoinHandle<()>>,
    pub(super) stop: Arc<AtomicBool>,
    /// Stopped after the shards (fields drop after `Drop::drop` has joined them).
    pub(super) _watchdog: Option<Watchdog>,
    pub(super) _set_watch: Option<SetWatch>,
}

impl Engine {
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops every shard and joins its thread. Pending in-memory timers are dropped.
    pub fn shutdown(mut self) -> std::result::Result<(), String> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::result::Result<(), String> {
        self.handle.inner.stopping.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        for ring in &self.handle.inner.rings {
            ring.wake();
        }
        let mut failed = Vec::new();
        for (id, t) in self.threads.drain(..).enumerate() {
            if t.join().is_err() {
                failed.push(id);
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("shard threads {failed:?} panicked"))
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
