//! Acknowledged timers across a restart, with the same or another shard count, and compaction
//! keeping the disk bounded.

use super::*;

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
