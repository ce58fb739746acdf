//! Tests' way to drive one shard's journal store directly, through the calls a shard makes
//! (`Store::schedule`, `cancel`, `fired`, `dead`, `dead_removed`, `after_pass`), on a glommio
//! executor of the test's thread, and to read back what a start recovers.

use super::faults::Faults;
use super::io::Disk;
use super::layout::{self, DataDir};
use super::{JournalConfig, JournalStore};
use crate::error::Error;
use crate::metrics::ShardMetrics;
use crate::op::{reply_channel, Cancelled, Scheduled};
use crate::store::{Ack, DeadLetter, Store};
use crate::timer::PackedTimer;
use crate::timer::{FiredTimer, Firing};
use crate::units::{UtcMicros, UtcNanos};
use futures_channel::oneshot::Receiver;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub const TENANT: &str = "t";

/// A timer as a start hands it to the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub key: String,
    pub version: u64,
    pub deadline: u64,
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
    /// Handed over as a dead letter.
    pub dead: bool,
}

/// The caller's end of one durable write.
pub enum Answer {
    Schedule(Receiver<Result<Scheduled, Error>>),
    Cancel(Receiver<Result<Cancelled, Error>>),
}

impl Answer {
    /// Whether the write was acknowledged (waits at most `limit`).
    pub async fn acknowledged(self, limit: Duration) -> bool {
        let wait = async {
            match self {
                Answer::Schedule(rx) => matches!(rx.await, Ok(Ok(_))),
                Answer::Cancel(rx) => matches!(rx.await, Ok(Ok(_))),
            }
        };
        futures_lite::future::or(wait, async {
            glommio::timer::sleep(limit).await;
            false
        })
        .await
    }
}

/// One shard's store, opened and recovered.
pub struct Node {
    pub store: JournalStore,
    pub recovered: Vec<Found>,
    /// The payload of the timers this node schedules.
    pub payload: Vec<u8>,
}

/// Locks the data directory for `shards` shards (re-partitioning it if the count changed).
pub fn prepare(cfg: &JournalConfig, shards: usize) -> Result<Arc<DataDir>, String> {
    layout::prepare(cfg, shards).map_err(|e| e.to_string())
}

impl Node {
    /// Opens shard `shard` of `shards` and recovers it.
    pub async fn open(
        cfg: &JournalConfig,
        data: Arc<DataDir>,
        shard: usize,
        shards: usize,
    ) -> Result<Node, String> {
        let metrics = Arc::new(ShardMetrics::default());
        let mut store = JournalStore::open(cfg.clone(), data, shard, shards, metrics)
            .await
            .map_err(|e| e.to_string())?;
        let mut recovered = Vec::new();
        let stop = AtomicBool::new(false);
        let mut insert = |r: crate::store::Recovered<'_>| {
            recovered.push(Found {
                key: r.key.to_string(),
                version: r.version,
                deadline: r.deadline.0,
                meta: r.meta.to_vec(),
                payload: r.payload.to_vec(),
                dead: r.dead == Some(true),
            });
            true
        };
        if !store.recover(&mut insert, &stop).await {
            return Err("recovery stopped".into());
        }
        Ok(Node {
            store,
            recovered,
            payload: b"payload".to_vec(),
        })
    }

    fn timer(&self, key: &str, meta: &[u8]) -> PackedTimer {
        PackedTimer::with_meta(TENANT, key, meta, &self.payload).unwrap_or_else(|| unreachable!())
    }

    /// Whether the store admits a durable write now (the shard asks before each).
    pub fn admits(&self) -> bool {
        self.store.admit(TENANT).is_ok()
    }

    pub fn schedule(&mut self, key: &str, version: u64, deadline: u64, meta: &[u8]) -> Answer {
        let (tx, rx) = reply_channel();
        let s = Scheduled {
            version,
            deadline: UtcMicros(deadline),
            replaced: false,
        };
        let timer = self.timer(key, meta);
        self.store.schedule(&timer, &s, Ack::Schedule(tx, s));
        Answer::Schedule(rx)
    }

    pub fn cancel(&mut self, key: &str, version: u64) -> Answer {
        let (tx, rx) = reply_channel();
        let c = Cancelled::Cancelled {
            version,
            deadline: UtcMicros(0),
        };
        self.store.cancel(TENANT, key, Ack::Cancel(tx, c));
        Answer::Cancel(rx)
    }

    pub fn fired(&mut self, key: &str, version: u64) {
        self.store.fired(&FiredTimer {
            shard: 0,
            tenant: TENANT,
            key,
            version,
            deadline: UtcMicros(1),
            fired_at: UtcNanos(1_000),
            meta: &[],
            payload: &self.payload,
            firing: Firing::Own,
        });
    }

    /// A timer fired by its own firing and kept for a delivery attempt: an attempt record,
    /// the same version, a new deadline and delivery metadata (`Store::fired_kept`).
    pub fn kept(&mut self, key: &str, version: u64, deadline: u64, meta: &[u8]) {
        let kept = self.timer(key, meta);
        let s = Scheduled {
            version,
            deadline: UtcMicros(deadline),
            replaced: true,
        };
        let fired = FiredTimer {
            shard: 0,
            tenant: TENANT,
            key,
            version,
            deadline: UtcMicros(1),
            fired_at: UtcNanos(1_000),
            meta: &[],
            payload: &self.payload,
            firing: Firing::Own,
        };
        self.store.fired_kept(&fired, &kept, &s);
    }

    pub fn dead(&mut self, key: &str, version: u64, meta: &[u8]) {
        let timer = self.timer(key, meta);
        self.store.dead(&DeadLetter {
            timer: &timer,
            version,
            fire_at: UtcMicros(1),
            attempts: 1,
            last_status: Some(400),
            last_error: None,
            callback: "http://127.0.0.1:9/",
        });
    }

    pub fn dead_removed(&mut self, key: &str, version: u64) -> Answer {
        let (tx, rx) = reply_channel();
        let c = Cancelled::Cancelled {
            version,
            deadline: UtcMicros(1),
        };
        self.store.dead_removed(TENANT, key, Ack::Cancel(tx, c));
        Answer::Cancel(rx)
    }

    /// A dead letter pending again under its version (one record).
    pub fn redrive(&mut self, key: &str, version: u64, deadline: u64) -> Answer {
        let (tx, rx) = reply_channel();
        let s = Scheduled {
            version,
            deadline: UtcMicros(deadline),
            replaced: false,
        };
        let timer = self.timer(key, b"");
        self.store.redrive(&timer, &s, Ack::Schedule(tx, s));
        Answer::Schedule(rx)
    }

    /// A DELETE's 404, answered once the writes queued before it are durable.
    pub fn not_found(&mut self) -> Answer {
        let (tx, rx) = reply_channel();
        let ack = Ack::Cancel(tx, Cancelled::NotFound);
        self.store.answer_after_writes(TENANT, ack);
        Answer::Cancel(rx)
    }

    /// Ends the shard's pass: the commit task takes what was queued.
    pub fn pass(&mut self) {
        self.store.after_pass();
        self.store.begin_pass();
    }

    pub async fn close(mut self) {
        self.store.close().await;
    }
}

/// Runs `f` on a fresh glommio executor of this thread.
pub fn on_executor<T>(f: impl std::future::Future<Output = T>) -> T {
    match glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).make() {
        Ok(ex) => ex.run(f),
        Err(e) => panic!("cannot start an executor: {e}"),
    }
}

/// A journal config for tests: the smallest segments, long timeouts (outcomes, not latency).
pub fn config(dir: &std::path::Path) -> JournalConfig {
    let mut cfg = JournalConfig::new(dir);
    cfg.segment_bytes = 1 << 20;
    cfg.max_batch_bytes = 256 << 10;
    cfg.ack_timeout = Duration::from_secs(60);
    cfg
}

/// [`config`] for `dir` on a disk the returned plan faults (its trash beside `dir`), retrying
/// a full disk every 20 ms at most.
pub fn faulty(dir: &std::path::Path, fsync: super::Fsync) -> (JournalConfig, Arc<Faults>) {
    let trash = dir.with_extension("trash");
    if let Err(e) = std::fs::create_dir_all(&trash) {
        panic!("cannot create {}: {e}", trash.display());
    }
    let faults = Faults::new(&trash);
    let mut cfg = config(dir);
    cfg.fsync = fsync;
    cfg.disk = Disk::faulty(faults.clone());
    cfg.retry_max = Duration::from_millis(20);
    (cfg, faults)
}

/// Starts `cfg`'s data directory again with one shard, on the real disk, and reads `what` of
/// the recovered node.
pub fn reopen<T>(cfg: &JournalConfig, what: impl FnOnce(&Node) -> T) -> T {
    let mut cfg = cfg.clone();
    cfg.disk = Disk::default();
    let data = match prepare(&cfg, 1) {
        Ok(d) => d,
        Err(e) => panic!("the restart is refused: {e}"),
    };
    on_executor(async {
        let node = match Node::open(&cfg, data, 0, 1).await {
            Ok(n) => n,
            Err(e) => panic!("the restart fails: {e}"),
        };
        let found = what(&node);
        node.close().await;
        found
    })
}

#[cfg(test)]
#[path = "harness_tests.rs"]
mod tests;
