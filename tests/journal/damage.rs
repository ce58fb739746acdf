//! A journal cut at any offset, a flipped bit, a full disk: what a start recovers, refuses or
//! skips.

use super::*;

/// The one shard directory of a one-shard journal under `root`.
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
