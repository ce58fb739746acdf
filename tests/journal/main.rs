//! The journal store through the library API, on real files: acknowledged timers survive a
//! restart (with the same or another shard count) and fire once; a journal cut at any offset
//! recovers every commit that lies whole before the cut, and nothing of the one it cuts; a flipped bit stops the start with the
//! file and offset, or is skipped and counted; compaction keeps the disk bounded.

#[path = "../support/disk.rs"]
mod disk;
#[path = "../support/loopfs.rs"]
mod loopfs;

use disk::{allocated_bytes, files_under};

use loopfs::LoopFs;
use punctual::engine::Pinning;
use punctual::store::journal::JournalConfig;
use punctual::{EngineBuilder, Error, UtcMicros};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Fired = Arc<Mutex<Vec<(String, u64)>>>;

fn config(dir: &Path) -> JournalConfig {
    let mut cfg = JournalConfig::new(dir);
    // Outcomes, not latency: a disk shared with compilers can be slow.
    cfg.ack_timeout = Duration::from_secs(20);
    cfg
}

fn start(shards: usize, cfg: JournalConfig) -> Result<(punctual::Engine, Fired), Error> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let fired: Fired = Arc::default();
    let f = fired.clone();
    let e = EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(200_000)
        .journal_config(cfg)
        .on_fire(move |t| {
            if let Ok(mut v) = f.lock() {
                v.push((t.key.to_string(), t.version));
            }
        })
        .build()?;
    assert!(e.handle().wait_store_ready(Duration::from_secs(30)));
    Ok((e, fired))
}

fn far() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
        + 3_600_000_000
}

/// Schedules `n` timers `order-<i>` due at `due`; their versions.
fn schedule(h: &punctual::Handle, n: usize, due: u64) -> HashMap<String, u64> {
    (0..n)
        .map(|i| {
            let key = format!("order-{i}");
            let s = h
                .schedule(
                    "shop",
                    &key,
                    UtcMicros(due),
                    format!("{{\"n\":{i}}}").as_bytes(),
                )
                .expect("durable schedule acknowledged");
            (key, s.version)
        })
        .collect()
}

/// Pending timers, all shards together, once the shards have published their recovered
/// count (a shard publishes it just after its store reports ready).
fn pending(e: &punctual::Engine) -> u64 {
    let count = || e.handle().stats().iter().map(|s| s.pending).sum::<u64>();
    let recovered: u64 = e
        .handle()
        .store_metrics()
        .iter()
        .map(|m| {
            m.store
                .recovered_timers
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    while count() < recovered && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(5));
    }
    count()
}

fn shard_dir(root: &Path) -> PathBuf {
    root.join("gen-1").join("shard-0")
}

/// Fills a one-shard journal with `n` timers in concurrent chunks (so commits carry many
/// records); their versions by key.
fn fill(root: &Path, n: usize) -> HashMap<String, u64> {
    let mut cfg = config(root);
    cfg.segment_bytes = 1 << 20;
    cfg.max_batch_bytes = 256 * 1024;
    let (e, _) = start(1, cfg).expect("starts");
    let h = e.handle();
    let due = far();
    let mut versions = HashMap::new();
    let keys: Vec<String> = (0..n).map(|i| format!("order-{i:05}")).collect();
    for chunk in keys.chunks(64) {
        let calls: Vec<_> = chunk
            .iter()
            .map(|k| h.schedule_async("shop", k, UtcMicros(due), b"{\"p\":1}"))
            .collect();
        let done = futures_lite::future::block_on(futures_util::future::join_all(calls));
        for (k, r) in chunk.iter().zip(done) {
            versions.insert(k.clone(), r.expect("acknowledged").version);
        }
    }
    e.shutdown().expect("shutdown");
    versions
}

/// (key, end of its commit) of every schedule record in a segment, in order: a commit counts
/// whole or not at all, so a cut recovers a record only when its whole commit lies before it.
fn schedule_ends(buf: &[u8]) -> Vec<(String, usize)> {
    use punctual::store::journal::record::Record;
    use punctual::store::journal::scan::{Role, Scan};
    let (mut out, mut commit): (Vec<(String, usize)>, Vec<String>) = (Vec::new(), Vec::new());
    let mut end = 0;
    for item in Scan::new(buf, 4096, 4096, Role::Sealed, false) {
        match item {
            Ok((Record::Batch { .. }, _, _)) => {
                out.extend(commit.drain(..).map(|k| (k, end)));
            }
            Ok((record, frame, at)) => {
                end = at + frame.len();
                if let Record::Schedule(t) = record {
                    commit.push(t.key.to_string());
                }
            }
            Err(_) => break,
        }
    }
    out.extend(commit.drain(..).map(|k| (k, end)));
    out
}

mod damage;
mod durable;
mod restarts;
