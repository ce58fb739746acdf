//! What happens when a shard's thread panics.
//!
//! # The policy
//!
//! - **The server (`punctual serve`) is crash-only.** A panic anywhere aborts the process
//!   (`api::serve` installs the hook): the supervisor (systemd, Kubernetes) restarts it, and
//!   the durable store recovers every acknowledged timer from its journal or Redis. A process
//!   that lost one shard's thread would keep answering on the others with a hole in its key
//!   space, and its own state (quotas, webhook caps) could no longer be trusted.
//! - **The library unwinds.** An embedding program may catch panics, so the engine does not
//!   abort it. Instead, as the shard's thread unwinds, [`ShardFailure`] closes the shard's
//!   ring: every op queued on it, and every op pushed later, is answered
//!   [`Error::ShuttingDown`](crate::error::Error::ShuttingDown), so no caller waits for a
//!   shard that will not run again. The shard counts as failed (`punctual_shard_failed` in
//!   the metrics, `Handle::failed_shards`, and `/healthz` answers 503), and the engine's
//!   shutdown reports the panicked shard.
//!
//! The ops the shard had taken off its ring are answered too: their reply senders live in
//! the shard's state, which the unwinding executor drops, and a dropped sender answers its
//! caller `ShuttingDown`.

use crate::metrics::ShardMetrics;
use crate::ring::Ring;
use crate::runtime::watchdog::Pulse;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Lives on a shard's thread, outside its executor; when the thread unwinds from a panic it
/// closes the shard's ring and marks the shard failed (see the module doc).
pub(crate) struct ShardFailure {
    pub id: usize,
    pub ring: Arc<Ring>,
    pub metrics: Arc<ShardMetrics>,
    pub pulse: Arc<Pulse>,
}

impl Drop for ShardFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        self.metrics.failed.store(1, Ordering::Relaxed);
        // The watchdog must not wake a task whose executor is gone.
        self.pulse.abandon();
        self.ring.close();
        tracing::error!(
            shard = self.id,
            "shard thread panicked: its ring is closed and every call to it is answered \
             shutting_down; restart the process (the durable store recovers its timers)"
        );
    }
}
