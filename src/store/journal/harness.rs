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
mod tests {
    use super::*;

    #[test]
    fn a_commit_does_not_wait_behind_the_executors_blocking_pool() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            // Occupy the executor's blocking pool (where a webhook's name lookup runs) until
            // the commit is answered, or 60 s.
            let (release, held) = std::sync::mpsc::channel::<()>();
            let started = Arc::new(AtomicBool::new(false));
            let running = started.clone();
            let blocker = glommio::spawn_local(glommio::executor().spawn_blocking(move || {
                running.store(true, std::sync::atomic::Ordering::Release);
                let _ = held.recv_timeout(Duration::from_secs(60));
            }));
            for _ in 0..10_000 {
                if started.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            assert!(
                started.load(std::sync::atomic::Ordering::Acquire),
                "the blocking job runs"
            );
            let answer = node.schedule("k", 1, u64::MAX / 2, b"");
            node.pass();
            let acked = answer.acknowledged(Duration::from_secs(30)).await;
            let _ = release.send(());
            blocker.await;
            assert!(
                acked,
                "the commit waited behind the executor's blocking pool"
            );
            node.close().await;
        });
    }

    #[test]
    fn the_harness_recovers_what_it_acknowledged() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        let far = u64::MAX / 2;
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            let answers = vec![
                node.schedule("a", 1, far, b""),
                node.schedule("b", 2, far, b""),
                node.cancel("b", 2),
                node.schedule("c", 3, 5, b""),
            ];
            node.fired("c", 3);
            node.dead("d", 4, b"");
            let removed = node.dead_removed("d", 4);
            node.pass();
            for a in answers.into_iter().chain([removed]) {
                assert!(a.acknowledged(Duration::from_secs(30)).await);
            }
            node.close().await;
        });
        let data = prepare(&cfg, 1).expect("prepare again");
        let found = on_executor(async {
            let node = Node::open(&cfg, data, 0, 1).await.expect("reopens");
            let found = node.recovered.clone();
            node.close().await;
            found
        });
        let keys: Vec<_> = found.iter().map(|f| (f.key.as_str(), f.version)).collect();
        assert_eq!(keys, [("a", 1)]);
    }

    /// An answer read from the tables waits for the writes queued before it, and adds
    /// nothing to the log: alone, or between records of one commit, the log replays.
    #[test]
    fn an_answer_after_writes_waits_for_them_and_writes_nothing() {
        use crate::store::journal::faults::Fault;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (cfg, faults) = faulty(&tmp.path().join("d"), super::super::Fsync::Always);
        let data = prepare(&cfg, 1).expect("prepare");
        let far = u64::MAX / 2;
        let wait = Duration::from_secs(30);
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            assert!(node.not_found().acknowledged(wait).await, "nothing waits");
            let a = node.schedule("a", 1, far, b"");
            node.pass();
            assert!(a.acknowledged(wait).await);
            faults.fail_at(faults.count(), Fault::NoSpace);
            let cancel = node.cancel("a", 1);
            let retry = node.not_found();
            node.pass();
            let early =
                futures_lite::future::or(async { Some(retry.acknowledged(wait).await) }, async {
                    glommio::timer::sleep(Duration::from_millis(200)).await;
                    None
                })
                .await;
            assert_eq!(early, None, "answered while the cancel was not durable");
            faults.clear();
            assert!(cancel.acknowledged(wait).await);
            let answers = [
                node.not_found(),
                node.schedule("b", 2, far, b""),
                node.not_found(),
                node.schedule("c", 3, far, b""),
            ];
            node.pass();
            for a in answers {
                assert!(a.acknowledged(wait).await);
            }
            node.close().await;
        });
        let found = reopen(&cfg, |n| n.recovered.clone());
        let keys: Vec<_> = found.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["b", "c"]);
    }

    /// A commit cut short by a full disk, then a roll (what waits no longer fits the segment):
    /// the roll's cut of the partial commit is durable before the next segment takes a commit,
    /// so no power cut (writeback took the partial bytes, not the cut) leaves a partial commit
    /// in the sealed segment, which the next start would refuse.
    #[test]
    fn a_short_write_then_a_roll_leaves_no_partial_commit_in_the_sealed_segment() {
        use crate::store::journal::faults::Fault;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (cfg, faults) = faulty(&tmp.path().join("d"), super::super::Fsync::Always);
        let data = prepare(&cfg, 1).expect("prepare");
        let (far, wait) = (u64::MAX / 2, Duration::from_secs(30));
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            node.payload = vec![b'p'; 8 << 10];
            for pass in 0..10u64 {
                let answers: Vec<Answer> = (0..10u64)
                    .map(|i| node.schedule(&format!("k{pass}-{i}"), 1 + pass * 10 + i, far, b""))
                    .collect();
                node.pass();
                for a in answers {
                    assert!(a.acknowledged(wait).await);
                }
            }
            faults.fail_at(faults.count(), Fault::Short);
            let cut = node.schedule("cut", 200, far, b"");
            node.pass();
            for _ in 0..3_000 {
                if !node.admits() {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            assert!(!node.admits(), "the short write stalled the journal");
            // Records no caller waits for still queue: the next batch outgrows the segment.
            for i in 0..40 {
                node.dead(&format!("d{i}"), 300 + i, b"");
            }
            node.pass();
            faults.clear();
            assert!(cut.acknowledged(wait).await);
            assert_eq!(node.store.shared.files.borrow().sealed.len(), 1, "rolled");
            node.close().await;
        });
        // Writeback took the partial commit's bytes; the cut of the file did not reach the
        // disk unless it was synced.
        let partial_kept = |i: usize| i == 0;
        faults.power_cut(partial_kept).expect("power cut");
        let found = reopen(&cfg, |n| n.recovered.len());
        assert_eq!(found, 101 + 40);
    }

    /// A dead letter comes back a dead letter because its record says so, not because its
    /// metadata decodes as one: a dead letter whose metadata does not (written by another
    /// version, damaged) must never come back a pending timer, which would fire again.
    #[test]
    fn a_dead_letter_whose_metadata_does_not_decode_comes_back_a_dead_letter() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            node.dead("d", 7, b"not a callback's metadata");
            let a = node.schedule("a", 8, u64::MAX / 2, b"");
            node.pass();
            assert!(a.acknowledged(Duration::from_secs(30)).await);
            node.close().await;
        });
        let e = crate::EngineBuilder::new()
            .shards(1)
            .pinning(crate::engine::Pinning::None)
            .spin(Duration::ZERO)
            .journal_config(cfg)
            .build()
            .expect("starts");
        let h = e.handle();
        let pending = h.get(TENANT, "d").expect("get");
        let dead = futures_lite::future::block_on(h.dead_letters_async(TENANT, None, 10))
            .expect("dead letters");
        let _ = e.shutdown();
        assert_eq!(pending, None, "the dead letter came back pending");
        assert_eq!(dead.len(), 1);
    }

    #[test]
    fn a_start_on_a_full_disk_serves_and_fires_refuses_writes_then_writes_once_there_is_room() {
        use crate::store::journal::faults::Fault;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, trash) = (tmp.path().join("d"), tmp.path().join("trash"));
        std::fs::create_dir_all(&trash).expect("trash");
        let mut cfg = config(&dir);
        cfg.retry_max = Duration::from_millis(20);
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            let a = [
                node.schedule("kept", 1, u64::MAX / 2, b""),
                node.schedule("due", 2, 5, b""),
            ];
            node.pass();
            for a in a {
                assert!(a.acknowledged(Duration::from_secs(30)).await);
            }
            node.close().await;
        });
        // Every write, allocation and creation fails from the first operation on.
        let faults = Faults::new(&trash);
        faults.fail_at(0, Fault::NoSpace);
        cfg.disk = Disk::faulty(faults.clone());
        let data = prepare(&cfg, 1).expect("prepare on a full disk");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1)
                .await
                .expect("a full disk does not stop the start");
            let mut keys: Vec<_> = node.recovered.iter().map(|f| f.key.clone()).collect();
            keys.sort();
            assert_eq!(keys, ["due", "kept"], "every pending timer is served");
            assert!(!node.admits(), "writes are refused while there is no room");
            node.fired("due", 2);
            node.pass();
            faults.clear();
            let mut admitted = false;
            for _ in 0..3_000 {
                if node.admits() {
                    admitted = true;
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert!(admitted, "writes are admitted once there is room");
            let a = node.schedule("after", 3, u64::MAX / 2, b"");
            node.pass();
            assert!(a.acknowledged(Duration::from_secs(30)).await);
            node.close().await;
        });
        let found = reopen(&cfg, |n| n.recovered.clone());
        let mut keys: Vec<_> = found.iter().map(|f| (f.key.as_str(), f.version)).collect();
        keys.sort();
        assert_eq!(
            keys,
            [("after", 3), ("kept", 1)],
            "the fire made while full was kept"
        );
    }
}
