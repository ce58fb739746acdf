//! The node's loop as `serve` runs it, on a Redis Cluster shared with other nodes
//! (`--redis redis+cluster://… --advertise host:port`): the loop (`nodes::node`) keeps this
//! node's heartbeat and partition leases on a thread of its own, its [`Holdings`] fence every
//! shard's writes and gate every shard's ops, and it hands the shards each partition to load
//! when gained and to drop when lost (`Handle::partitions`).
//!
//! # Start and stop
//!
//! The holdings exist before the engine (the shards are built with them) and hold nothing, so
//! every keyed request is answered 503 until the loop's first round has acquired and the
//! reader has loaded the partition. The loop starts once every shard listens. At a stop the
//! engine stops first, while the leases are still renewed, so that the shards' stores flush
//! what they queued under them; then the loop (woken at once) releases every lease and leaves
//! the live set, which the other nodes see at their next tick (50 ms) and take over, rather
//! than at their next round or a TTL later (`nodes::node`). The wait for
//! that is bounded ([`NodeLoop::stop`]); a node killed instead releases nothing, and its leases
//! lapse within a TTL.

use crate::engine::RedisConfig;
use crate::nodes::node::Holdings;
use crate::nodes::reader::Shards;
use crate::nodes::start;
use crate::nodes::status::Status;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a stop waits for the loop to release its leases: a round in progress, the
/// release and the leave each give up after a round (a second).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The running loop.
pub struct NodeLoop {
    stop: Arc<AtomicBool>,
    /// To wake the loop at the stop.
    holdings: Arc<Holdings>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts the loop for the node advertised at `advertise` on the cluster of `redis`.
/// `status` is served on the loop's thread (`nodes::status`) until the loop stops.
pub fn start(
    redis: &RedisConfig,
    advertise: &str,
    secret: Option<&str>,
    holdings: Arc<Holdings>,
    shards: Arc<dyn Shards>,
    status: Arc<Status>,
) -> Result<NodeLoop, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = start::spawn_for(
        redis,
        advertise,
        secret,
        holdings.clone(),
        shards,
        status,
        stop.clone(),
    )?;
    Ok(NodeLoop {
        stop,
        holdings,
        thread,
    })
}

impl NodeLoop {
    /// Stops the loop, which releases the leases and leaves the live set; waits at most
    /// [`STOP_WAIT`] for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.holdings.wake();
        let until = Instant::now() + STOP_WAIT;
        while !self.thread.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.thread.is_finished() {
            let _ = self.thread.join();
            tracing::info!("node: leases released, left the live set");
        } else {
            tracing::warn!("node: the loop did not stop in time; its leases lapse within a TTL");
        }
    }
}
