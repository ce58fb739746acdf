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
