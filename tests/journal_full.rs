//! The journal on a full disk, a real one (a small ext4 on a loop device; root only): a disk
//! with less room than a segment keeps taking writes once compaction gives back the journal's
//! dead records, and a start on a full disk comes up, serves, fires, refuses writes with 503
//! and writes again once there is room. Every wait is bounded; nothing asserts a duration.

#[path = "support/loopfs.rs"]
mod loopfs;

use loopfs::LoopFs;
use punctual::engine::Pinning;
use punctual::store::journal::JournalConfig;
use punctual::{EngineBuilder, Error, UtcMicros};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Fired = Arc<Mutex<Vec<String>>>;

fn mount(tmp: &Path) -> Option<LoopFs> {
    match LoopFs::mount(tmp) {
        Ok(fs) => Some(fs),
        Err(why) if std::env::var_os("PUNCTUAL_SKIP_ROOT_TESTS").is_some() => {
            eprintln!("\n!!! SKIPPED (PUNCTUAL_SKIP_ROOT_TESTS): the full-disk tests need root and a loop device: {why}\n");
            None
        }
        Err(why) => panic!(
            "the full-disk tests need root and a loop device to mount a small ext4 they can fill: {why}. Run as root, or set PUNCTUAL_SKIP_ROOT_TESTS=1 to skip them knowingly"
        ),
    }
}

fn config(dir: &Path) -> JournalConfig {
    let mut cfg = JournalConfig::new(dir);
    cfg.segment_bytes = 4 << 20;
    cfg.ack_timeout = Duration::from_secs(2);
    cfg.retry_max = Duration::from_millis(200);
    cfg
}

fn start(cfg: JournalConfig) -> (punctual::Engine, Fired) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let fired: Fired = Arc::default();
    let f = fired.clone();
    let e = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .journal_config(cfg)
        .on_fire(move |t| {
            if let Ok(mut v) = f.lock() {
                v.push(t.key.to_string());
            }
        })
        .build()
        .expect("the engine starts");
    (e, fired)
}

fn far() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
        + 3_600_000_000
}

/// Fills the file system with a ballast file, then gives back `leave` bytes of it.
fn fill(mnt: &Path, leave: u64) -> std::path::PathBuf {
    use std::io::Write;
    let ballast = mnt.join("ballast");
    let mut f = std::fs::File::create(&ballast).expect("ballast");
    for chunk in [1 << 20, 4 << 10] {
        let buf = vec![1u8; chunk];
        while f.write_all(&buf).is_ok() {}
    }
    let _ = f.sync_all();
    let len = f.metadata().map_or(0, |m| m.len());
    f.set_len(len.saturating_sub(leave)).expect("give back");
    f.sync_all().expect("sync the ballast");
    ballast
}

/// Sends `op` for every key at once and again for those answered `503 store_unavailable`,
/// until each is acknowledged; fails at `deadline`.
fn until_acknowledged<T, F>(deadline: Instant, keys: &[String], op: impl Fn(&str) -> F)
where
    F: std::future::Future<Output = Result<T, Error>>,
{
    let mut left: Vec<&String> = keys.iter().collect();
    while !left.is_empty() {
        let answers = futures_lite::future::block_on(futures_util::future::join_all(
            left.iter().map(|k| op(k)),
        ));
        let mut again = Vec::new();
        for (k, a) in left.iter().zip(answers) {
            match a {
                Ok(_) => {}
                Err(Error::StoreUnavailable { .. }) if Instant::now() < deadline => again.push(*k),
                Err(e) => panic!("{k} never acknowledged: {e}"),
            }
        }
        if !again.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        left = again;
    }
}

#[test]
fn a_disk_with_less_room_than_a_segment_keeps_writing_as_compaction_frees_dead_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(fs) = mount(tmp.path()) else {
        return;
    };
    let cfg = config(&fs.mnt.join("data"));
    let (e, _) = start(cfg.clone());
    let h = e.handle();
    assert!(h.wait_store_ready(Duration::from_secs(30)));
    let due = far();
    let live: Vec<(String, u64)> = (0..50)
        .map(|i| {
            let k = format!("live-{i}");
            let s = h.schedule("shop", &k, UtcMicros(due), b"x").expect("live");
            (k, s.version)
        })
        .collect();
    // Less room than one segment: the next roll cannot reserve a whole one.
    let _ballast = fill(&fs.mnt, 2 << 20);
    // Churn about three segments of records that die at once.
    let payload = vec![b'p'; 2000];
    let deadline = Instant::now() + Duration::from_secs(120);
    for round in 0..60 {
        let keys: Vec<String> = (0..100).map(|i| format!("churn-{round}-{i}")).collect();
        until_acknowledged(deadline, &keys, |k| {
            h.schedule_async("shop", k, UtcMicros(due), &payload)
        });
        until_acknowledged(deadline, &keys, |k| h.cancel_async("shop", k));
    }
    let snapshots: u64 = h
        .store_metrics()
        .iter()
        .map(|m| {
            m.store
                .journal_snapshots_total
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    assert!(snapshots > 0, "compaction ran on the nearly full disk");
    e.shutdown().expect("shutdown");

    let (e, _) = start(cfg);
    let h = e.handle();
    for (k, v) in &live {
        assert_eq!(
            h.get("shop", k).expect("get").map(|t| t.version),
            Some(*v),
            "{k} lost"
        );
    }
    assert_eq!(
        h.get("shop", "churn-59-99").expect("get"),
        None,
        "cancelled"
    );
    e.shutdown().expect("shutdown");
    drop(fs);
}

#[test]
fn a_start_on_a_full_disk_serves_fires_and_refuses_writes_until_there_is_room() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(fs) = mount(tmp.path()) else {
        return;
    };
    let cfg = config(&fs.mnt.join("data"));
    let (e, _) = start(cfg.clone());
    let h = e.handle();
    assert!(h.wait_store_ready(Duration::from_secs(30)));
    let kept = h
        .schedule("shop", "kept", UtcMicros(far()), b"x")
        .expect("kept");
    let soon = h.now().0 + 3_000_000;
    h.schedule("shop", "soon", UtcMicros(soon), b"x")
        .expect("soon");
    e.shutdown().expect("shutdown");

    let ballast = fill(&fs.mnt, 0);
    let (e, fired) = start(cfg.clone());
    let h = e.handle();
    assert_eq!(
        h.get("shop", "kept").expect("get").map(|t| t.version),
        Some(kept.version),
        "reads are served"
    );
    assert!(matches!(
        h.schedule("shop", "while-full", UtcMicros(far()), b"x"),
        Err(Error::StoreUnavailable { .. })
    ));
    let give_up = Instant::now() + Duration::from_secs(30);
    while !fired.lock().is_ok_and(|f| f.iter().any(|k| k == "soon")) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fired.lock().is_ok_and(|f| f.iter().any(|k| k == "soon")),
        "a due timer fires on a full disk"
    );
    std::fs::remove_file(&ballast).expect("free the space");
    assert!(
        h.wait_store_ready(Duration::from_secs(30)),
        "writes are acknowledged once there is room"
    );
    let after = h
        .schedule("shop", "after", UtcMicros(far()), b"x")
        .expect("acknowledged");
    e.shutdown().expect("shutdown");

    let (e, _) = start(cfg);
    let h = e.handle();
    assert_eq!(
        h.get("shop", "after").expect("get").map(|t| t.version),
        Some(after.version)
    );
    assert_eq!(
        h.get("shop", "kept").expect("get").map(|t| t.version),
        Some(kept.version)
    );
    assert_eq!(
        h.get("shop", "soon").expect("get"),
        None,
        "its fire, made on the full disk, was written once there was room"
    );
    e.shutdown().expect("shutdown");
    drop(fs);
}
