//! The journal store through the library API, on real files: acknowledged timers survive a
//! restart (with the same or another shard count) and fire once; a journal cut at any offset
//! recovers every commit that lies whole before the cut, and nothing of the one it cuts; a flipped bit stops the start with the
//! file and offset, or is skipped and counted; compaction keeps the disk bounded.

#[path = "support/disk.rs"]
mod disk;
#[path = "support/loopfs.rs"]
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

#[test]
fn acknowledged_timers_survive_a_restart_and_fire_once_never_early() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (e, _) = start(2, config(tmp.path())).expect("starts");
    let h = e.handle();
    let due = h.now().0 + 10_000_000; // after the restart, even on a loaded machine
    let versions = schedule(&h, 500, due);
    // Cancelled and replaced timers must come back as they were left.
    assert!(h.cancel("shop", "order-7").is_ok());
    let replaced = h
        .schedule("shop", "order-8", UtcMicros(due + 1), b"again")
        .expect("replace");
    e.shutdown().expect("shutdown");

    let (e, fired) = start(2, config(tmp.path())).expect("restarts");
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
    assert_eq!(recovered, 499);
    let info = e
        .handle()
        .get("shop", "order-8")
        .expect("get")
        .expect("there");
    assert_eq!(
        (info.version, info.payload),
        (replaced.version, b"again".to_vec())
    );
    assert_eq!(
        e.handle()
            .get("shop", "order-3")
            .expect("get")
            .map(|t| t.version),
        versions.get("order-3").copied()
    );
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while fired.lock().map(|f| f.len()).unwrap_or(0) < 499 && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = fired.lock().expect("lock").clone();
    let keys: HashSet<&String> = got.iter().map(|(k, _)| k).collect();
    assert_eq!((got.len(), keys.len()), (499, 499), "each once");
    assert!(!keys.contains(&"order-7".to_string()));
    e.shutdown().expect("shutdown");

    // Fired is durable too: nothing comes back a second time.
    let (e, _) = start(2, config(tmp.path())).expect("restarts again");
    assert_eq!(pending(&e), 0);
    e.shutdown().expect("shutdown");
}

#[test]
fn a_different_shard_count_gives_each_shard_exactly_its_partitions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let due = far();
    let (e, _) = start(3, config(tmp.path())).expect("starts");
    let versions = schedule(&e.handle(), 2000, due);
    e.shutdown().expect("shutdown");
    for shards in [2, 1, 4] {
        let (e, _) = start(shards, config(tmp.path())).expect("restarts");
        let h = e.handle();
        assert_eq!(pending(&e), 2000, "{shards} shards");
        for (key, v) in versions.iter().take(200) {
            assert_eq!(
                h.get("shop", key).expect("get").map(|t| t.version),
                Some(*v)
            );
        }
        // Each shard holds exactly the timers of its own partitions.
        let per_shard: Vec<u64> = h.stats().iter().map(|s| s.pending).collect();
        let mut want = vec![0u64; shards];
        for key in versions.keys() {
            want[punctual::partition::shard_of("shop", key, shards)] += 1;
        }
        assert_eq!(per_shard, want, "{shards} shards");
        e.shutdown().expect("shutdown");
    }
}

#[test]
fn compaction_keeps_the_disk_bounded_while_ten_times_the_live_set_churns() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.segment_bytes = 1 << 20;
    cfg.max_batch_bytes = 256 * 1024;
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let due = far();
    let live = 20_000usize;
    let payload = vec![b'x'; 100];
    let record = 9 + 16 + 2 + 4 + 12 + 2 + 100; // frame + version/deadline + identity + meta + payload
    let live_bytes = (live * record) as u64;
    let seg = cfg.segment_bytes;
    let mut worst = 0u64;
    let mut snapshots = 0;
    for round in 0..10 {
        // In chunks of concurrent calls, so that group commit carries many per fdatasync.
        for chunk in (0..live).collect::<Vec<_>>().chunks(500) {
            let mut calls = Vec::new();
            for &i in chunk {
                let key = format!("k{round:02}-{i:07}");
                calls.push(h.schedule_async("shop", &key, UtcMicros(due), &payload));
            }
            let mut cancels = Vec::new();
            if round > 0 {
                for &i in chunk {
                    cancels.push(h.cancel_async("shop", &format!("k{:02}-{i:07}", round - 1)));
                }
            }
            for r in futures_lite::future::block_on(futures_util::future::join_all(calls)) {
                r.expect("schedule");
            }
            for r in futures_lite::future::block_on(futures_util::future::join_all(cancels)) {
                r.expect("cancel");
            }
            worst = worst.max(allocated_bytes(tmp.path()));
        }
        let disk = allocated_bytes(tmp.path());
        snapshots = e.handle().store_metrics()[0]
            .store
            .journal_snapshots_total
            .load(std::sync::atomic::Ordering::Relaxed);
        eprintln!("round {round}: disk {disk} B, live {live_bytes} B, snapshots {snapshots}");
    }
    assert_eq!(pending(&e), live as u64);
    assert!(snapshots >= 3, "compaction ran ({snapshots} snapshots)");
    let bound = 2 * live_bytes + 2 * seg;
    assert!(
        worst <= bound + live_bytes,
        "disk {worst} B over 2 × live {live_bytes} + 2 segments {seg}, plus one snapshot in writing"
    );
    e.shutdown().expect("shutdown");
    for f in files_under(tmp.path()) {
        eprintln!(
            "{} {:?}",
            f.display(),
            std::fs::metadata(&f).map(|m| m.len())
        );
    }
    let settled = allocated_bytes(tmp.path());
    assert!(
        settled <= bound,
        "disk {settled} B over the bound {bound} B"
    );
    let (e, _) = start(1, cfg).expect("restarts");
    assert_eq!(pending(&e), live as u64);
    e.shutdown().expect("shutdown");
}

/// The one shard directory of a one-shard journal under `root`.
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

#[test]
fn a_journal_cut_at_any_offset_recovers_every_record_before_the_cut() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let versions = fill(tmp.path(), 600);
    let dir = shard_dir(tmp.path());
    let seg = files_under(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.len() > 4096)
                .unwrap_or(false)
        })
        .expect("a segment with records");
    let whole = std::fs::read(&seg).expect("read");
    let data_end = whole.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let ends = schedule_ends(&whole[..data_end]);
    assert_eq!(ends.len(), 600, "every schedule is in the segment");
    // Every offset across the last records, and 1,000 more spread over the whole file.
    let mut cuts: Vec<usize> = (data_end.saturating_sub(1200)..=data_end).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..800 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        cuts.push(4096 + (x as usize) % (data_end - 4096));
    }
    let mut torn = 0;
    for cut in cuts {
        let trial = tmp.path().join("trial");
        let _ = std::fs::remove_dir_all(&trial);
        std::fs::create_dir_all(&trial).expect("trial dir");
        std::fs::write(trial.join(seg.file_name().expect("name")), &whole[..cut])
            .expect("cut copy");
        let (found, report) = punctual::store::journal::layout::read_shard_dir(&trial, false)
            .unwrap_or_else(|e| panic!("cut at {cut}: recovery failed: {e}"));
        torn += report.torn;
        let got: HashMap<&str, u64> = found.iter().map(|f| (f.key.as_str(), f.version)).collect();
        for (key, end) in &ends {
            if *end <= cut {
                assert_eq!(
                    got.get(key.as_str()),
                    versions.get(key),
                    "cut at {cut}: {key} lost"
                );
            } else {
                assert!(
                    !got.contains_key(key.as_str()),
                    "cut at {cut}: {key} invented"
                );
            }
        }
    }
    assert!(torn > 900, "most cuts tear a record ({torn})");
}

#[test]
fn a_flipped_bit_stops_the_start_naming_the_file_and_offset_or_is_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let versions = fill(tmp.path(), 300);
    let dir = shard_dir(tmp.path());
    let seg = files_under(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.len() > 4096)
                .unwrap_or(false)
        })
        .expect("a segment with records");
    let mut bytes = std::fs::read(&seg).expect("read");
    let ends = schedule_ends(&bytes);
    // A bit in the third record: acknowledged data with later commits after it.
    let at = ends[2].1 - 5;
    bytes[at] ^= 0x08;
    std::fs::write(&seg, &bytes).expect("write");

    let mut cfg = config(tmp.path());
    cfg.segment_bytes = 1 << 20;
    cfg.max_batch_bytes = 256 * 1024;
    let err = match start(1, cfg.clone()) {
        Ok(_) => panic!("a corrupt journal must not start"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&seg.display().to_string()) && err.contains("offset"),
        "the error names the file and offset: {err}"
    );
    assert!(err.contains("--journal-skip-corrupt"), "{err}");

    cfg.skip_corrupt = true;
    let (e, _) = start(1, cfg).expect("starts, skipping");
    let corrupt: u64 = e.handle().store_metrics()[0]
        .store
        .journal_corrupt_total
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(corrupt, 1);
    let left = pending(&e);
    assert!(
        (300 - 64..300).contains(&left),
        "only the damaged commit is lost: {left}"
    );
    assert_eq!(
        e.handle()
            .get("shop", "order-00299")
            .expect("get")
            .map(|t| t.version),
        versions.get("order-00299").copied()
    );
    e.shutdown().expect("shutdown");
}

#[test]
fn a_full_disk_refuses_with_store_unavailable_loses_nothing_and_recovers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs = match LoopFs::mount(tmp.path()) {
        Ok(fs) => fs,
        Err(why) if std::env::var_os("PUNCTUAL_SKIP_ROOT_TESTS").is_some() => {
            eprintln!("\n!!! SKIPPED (PUNCTUAL_SKIP_ROOT_TESTS): the ENOSPC test needs root and a loop device: {why}\n");
            return;
        }
        Err(why) => panic!(
            "the ENOSPC test needs root and a loop device to mount a small ext4 it can fill: {why}. Run as root, or set PUNCTUAL_SKIP_ROOT_TESTS=1 to skip it knowingly"
        ),
    };
    let mut cfg = config(&fs.mnt.join("data"));
    cfg.segment_bytes = 4 << 20;
    cfg.ack_timeout = Duration::from_secs(2);
    cfg.retry_max = Duration::from_millis(200);
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let due = far();
    let payload = vec![b'p'; 1000];
    // Fill the disk with a ballast file, leaving less than a segment.
    let ballast = fs.mnt.join("ballast");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&ballast).expect("ballast");
        let chunk = vec![1u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let mut acked = HashMap::new();
    let mut refused = 0;
    let mut i = 0;
    while refused == 0 && i < 20_000 {
        let keys: Vec<String> = (i..i + 200).map(|n| format!("k{n:06}")).collect();
        i += 200;
        let calls: Vec<_> = keys
            .iter()
            .map(|k| h.schedule_async("shop", k, UtcMicros(due), &payload))
            .collect();
        for (k, r) in keys.iter().zip(futures_lite::future::block_on(
            futures_util::future::join_all(calls),
        )) {
            match r {
                Ok(s) => {
                    acked.insert(k.clone(), s.version);
                }
                Err(Error::StoreUnavailable { retry_after_s }) => {
                    assert!(retry_after_s >= 1);
                    refused += 1;
                }
                Err(other) => panic!("{other}"),
            }
        }
    }
    assert!(refused > 0, "the full disk refused writes");
    assert!(!h.store_healthy(), "unhealthy while the disk is full");
    assert!(matches!(
        h.schedule("shop", "while-full", UtcMicros(due), b"x"),
        Err(Error::StoreUnavailable { .. })
    ));
    std::fs::remove_file(&ballast).expect("free the space");
    assert!(
        h.wait_store_ready(Duration::from_secs(20)),
        "writes again once space returns"
    );
    let s = h
        .schedule("shop", "after", UtcMicros(due), b"x")
        .expect("acknowledged again");
    acked.insert("after".into(), s.version);
    e.shutdown().expect("shutdown");

    let (e, _) = start(1, cfg).expect("restarts");
    let h = e.handle();
    for (k, v) in &acked {
        assert_eq!(
            h.get("shop", k).expect("get").map(|t| t.version),
            Some(*v),
            "{k} lost"
        );
    }
    e.shutdown().expect("shutdown");
    drop(fs);
}

/// A DELETE answered 503 on a full disk leaves its cancel queued, not durable: a retry must
/// not answer 404 from the table (API.md: "a retried DELETE that answers 404 means the first
/// attempt had removed the timer"), since a restart before the cancel commits brings the timer
/// back. The retry waits behind the cancel, and is refused while the disk stays full.
#[test]
fn a_retried_delete_never_answers_404_while_the_first_cancel_is_not_durable() {
    use punctual::store::journal::faults::{Fault, Faults};
    use punctual::store::journal::io::Disk;
    let tmp = tempfile::tempdir().expect("tempdir");
    let trash = tmp.path().join("trash");
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let mut cfg = config(&tmp.path().join("data"));
    cfg.ack_timeout = Duration::from_millis(500);
    cfg.retry_max = Duration::from_millis(20);
    cfg.disk = Disk::faulty(faults.clone());
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let kept = h
        .schedule("shop", "k", UtcMicros(far()), b"x")
        .expect("durable");
    faults.fail_at(faults.count(), Fault::NoSpace);
    assert!(
        matches!(h.cancel("shop", "k"), Err(Error::StoreUnavailable { .. })),
        "the cancel cannot be written"
    );
    let retry = h.cancel("shop", "k");
    assert!(
        matches!(retry, Err(Error::StoreUnavailable { .. })),
        "the retry told {retry:?} while the first cancel was not durable"
    );
    e.shutdown().expect("shutdown");
    cfg.disk = Disk::default();
    let (e, _) = start(1, cfg).expect("restarts");
    assert_eq!(
        e.handle().get("shop", "k").expect("get").map(|t| t.version),
        Some(kept.version),
        "the cancel never became durable: the timer is still pending"
    );
    e.shutdown().expect("shutdown");
}

/// A replacement due at once fires only once its record is durable: fired before, a crash
/// before its commit would bring back the version it replaced, and a receiver would see the
/// new version, then the old one. While the disk cannot take the record the new version is
/// held (not lost), and it fires once the record is written.
#[test]
fn a_replacement_fires_only_once_its_record_is_durable() {
    use punctual::store::journal::faults::{Fault, Faults};
    use punctual::store::journal::io::Disk;
    let tmp = tempfile::tempdir().expect("tempdir");
    let trash = tmp.path().join("trash");
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let mut cfg = config(&tmp.path().join("data"));
    cfg.ack_timeout = Duration::from_millis(300);
    cfg.retry_max = Duration::from_millis(20);
    cfg.disk = Disk::faulty(faults.clone());
    let (e, fired) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let v1 = h
        .schedule("shop", "k", UtcMicros(far()), b"v1")
        .expect("durable")
        .version;
    faults.fail_at(faults.count(), Fault::NoSpace);
    let replaced = h.schedule("shop", "k", h.now(), b"v2");
    assert!(
        matches!(replaced, Err(Error::StoreUnavailable { .. })),
        "{replaced:?}"
    );
    // Two more ack timeouts' worth of passes: a due timer would have fired long since.
    std::thread::sleep(Duration::from_millis(600));
    let seen = fired.lock().map(|f| f.clone()).unwrap_or_default();
    assert!(
        seen.is_empty(),
        "fired {seen:?} while its record was not durable (v1 = {v1})"
    );
    faults.clear();
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while fired.lock().is_ok_and(|f| f.is_empty()) && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = fired.lock().map(|f| f.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 1, "fires once its record is durable: {seen:?}");
    assert!(seen[0].1 > v1, "the replacement fired: {seen:?}");
    e.shutdown().expect("shutdown");
    cfg.disk = Disk::default();
    let (e, _) = start(1, cfg).expect("restarts");
    assert_eq!(e.handle().get("shop", "k").expect("get"), None, "fired");
    e.shutdown().expect("shutdown");
}

/// Where logical block `lblk` of `file` lies on its device, in bytes (FIBMAP; root only), and
/// the file system's block size.
fn physical_block(file: &std::fs::File, lblk: u64) -> (u64, u64) {
    use std::os::unix::io::AsRawFd;
    let (mut bsz, mut blk): (libc::c_int, libc::c_int) = (0, lblk as libc::c_int);
    // SAFETY: FIGETBSZ and FIBMAP write one int through the pointer, which outlives the call;
    // the descriptor is open.
    let (a, b) = unsafe {
        (
            libc::ioctl(file.as_raw_fd(), 2 /* FIGETBSZ */, &mut bsz),
            libc::ioctl(file.as_raw_fd(), 1 /* FIBMAP */, &mut blk),
        )
    };
    assert!(
        a == 0 && b == 0 && blk > 0,
        "FIBMAP: {}",
        std::io::Error::last_os_error()
    );
    (blk as u64 * bsz as u64, bsz as u64)
}

/// The page cache can hold a commit the disk does not, as after a failed `fdatasync` (the
/// kernel keeps the pages it could not write, marked clean): here the commit's blocks are
/// zeroed on the device under the mounted file system, whose cache still has them. A restart
/// must replay the disk: had it replayed the cache, its next commit would carry the next
/// batch number, and once the cache went (a reboot) the commit it read would be missing, a
/// gap that refuses the start.
#[test]
fn a_restart_replays_what_the_disk_holds_not_what_the_page_cache_kept() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs = match LoopFs::mount(tmp.path()) {
        Ok(fs) => fs,
        Err(why) if std::env::var_os("PUNCTUAL_SKIP_ROOT_TESTS").is_some() => {
            eprintln!("\n!!! SKIPPED (PUNCTUAL_SKIP_ROOT_TESTS): the page-cache test needs root and a loop device: {why}\n");
            return;
        }
        Err(why) => panic!(
            "the page-cache test needs root and a loop device to write under a mounted file system: {why}. Run as root, or set PUNCTUAL_SKIP_ROOT_TESTS=1 to skip it knowingly"
        ),
    };
    let mut cfg = config(&fs.mnt.join("data"));
    cfg.segment_bytes = 4 << 20;
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let due = UtcMicros(far());
    h.schedule("shop", "a", due, b"a").expect("a");
    h.schedule("shop", "b", due, b"b").expect("b");
    e.shutdown().expect("shutdown");
    // The last commit (b's) is the segment's last 4 KiB; zero it on the device only.
    let seg = std::fs::read_dir(shard_dir(&fs.mnt.join("data")))
        .expect("shard dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .expect("a segment");
    let file = std::fs::File::open(&seg).expect("segment");
    let len = file.metadata().expect("stat").len();
    assert!(len >= 8192 && len % 4096 == 0, "{len}");
    let img = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp.path().join("fs.img"))
        .expect("image");
    let (_, bsz) = physical_block(&file, 0);
    for lblk in (len - 4096) / bsz..len / bsz {
        let (at, bsz) = physical_block(&file, lblk);
        img.write_all_at(&vec![0u8; bsz as usize], at)
            .expect("zero");
    }
    img.sync_all().expect("sync the image");
    let mut cached = vec![0u8; 4096];
    file.read_exact_at(&mut cached, len - 4096).expect("read");
    assert!(
        cached.iter().any(|&b| b != 0),
        "the cache still holds b's commit"
    );
    drop(file);

    let (e, _) = start(1, cfg.clone()).expect("restarts");
    let h = e.handle();
    let b = h.get("shop", "b").expect("get");
    h.schedule("shop", "c", due, b"c").expect("c");
    e.shutdown().expect("shutdown");
    assert_eq!(
        b, None,
        "replayed b's commit from the page cache; the disk never held it"
    );
    // What a reboot does to the cache.
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
    let (e, _) = start(1, cfg).expect("starts from what the disk holds");
    let h = e.handle();
    for k in ["a", "c"] {
        assert!(h.get("shop", k).expect("get").is_some(), "{k} lost");
    }
    e.shutdown().expect("shutdown");
    drop(fs);
}
