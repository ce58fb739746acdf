//! No path of the engine waits without a bound: a start that cannot finish fails within its
//! start limit, and a shutdown that cannot finish returns within its own, naming the shards.
//! Each test runs the engine call on a thread and gives up on it after a generous bound, so a
//! hang fails the test instead of hanging the suite.

use punctual::engine::Pinning;
use punctual::{EngineBuilder, Error, UtcMicros};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Far past every limit the tests set: reaching it means the call hung.
const HUNG: Duration = Duration::from_secs(60);

/// Blocks the calling thread until `release` is set (checked every millisecond).
fn hold(release: &AtomicBool) {
    while !release.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread; its result, or `None` if it had not returned within [`HUNG`].
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HUNG).ok()
}

/// Shard 1 never reports (its start hook does not return): the build fails within its start
/// limit, names shard 1, and does not wait for a thread that cannot stop.
#[test]
fn a_shard_stuck_in_its_start_fails_the_build_within_the_start_limit() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let built = bounded(move || {
        EngineBuilder::new()
            .shards(2)
            .pinning(Pinning::None)
            .start_timeout(Duration::from_millis(500))
            .on_shard_start(move |id, _| {
                if id == 1 {
                    hold(&gate);
                }
            })
            .build()
            .map(drop)
    });
    release.store(true, Ordering::Release);
    match built {
        None => panic!("build hung past {HUNG:?} on a shard that never started"),
        Some(Ok(())) => panic!("build succeeded with a shard that never started"),
        Some(Err(Error::ShardStart { shard, reason })) => {
            assert_eq!(shard, 1, "{reason}");
            assert!(reason.contains("[1]"), "names the stuck shard: {reason}");
        }
        Some(Err(e)) => panic!("unexpected error {e:?}"),
    }
}

/// A shard held inside a fire handler cannot stop: the shutdown returns within its limit
/// and says which shard it left behind, and callers on that shard are not left waiting.
#[test]
fn a_shard_that_cannot_stop_is_reported_by_a_bounded_shutdown() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let (entered_tx, entered_rx) = mpsc::channel();
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .shutdown_timeout(Duration::from_millis(500))
        .on_fire(move |_| {
            let _ = entered_tx.lock().map(|tx| tx.send(()));
            hold(&gate);
        })
        .build()
        .expect("engine starts");
    let h = engine.handle();
    h.schedule("t", "hold", UtcMicros(h.now().0), b"")
        .expect("scheduled");
    entered_rx
        .recv_timeout(HUNG)
        .expect("the shard entered the handler");
    let stopped = bounded(move || engine.shutdown());
    release.store(true, Ordering::Release);
    match stopped {
        None => panic!("shutdown hung past {HUNG:?}"),
        Some(Ok(())) => panic!("shutdown reported success with a shard still running"),
        Some(Err(e)) => assert!(e.contains("[0]") && e.contains("did not stop"), "{e}"),
    }
}

/// A shard whose thread panics (here inside a fire handler) answers every caller: those
/// queued on its ring when it panicked and those that come later are refused
/// `ShuttingDown`, never left waiting. The shard reports itself failed, and the shutdown
/// names it.
#[test]
fn a_panicking_shard_answers_every_caller_and_reports_itself() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let (entered_tx, entered_rx) = mpsc::channel();
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .on_fire(move |f| {
            if f.key == "boom" {
                let _ = entered_tx.lock().map(|tx| tx.send(()));
                hold(&gate);
                panic!("a fire handler panics");
            }
        })
        .build()
        .expect("engine starts");
    let h = engine.handle();
    h.schedule("t", "boom", UtcMicros(h.now().0), b"")
        .expect("scheduled");
    entered_rx
        .recv_timeout(HUNG)
        .expect("the shard entered the handler");
    // The shard is held: these calls wait on its ring when it panics.
    let (done_tx, done_rx) = mpsc::channel();
    for i in 0..8 {
        let (h, done) = (h.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let r = h.schedule(
                "t",
                &format!("k{i}"),
                UtcMicros(h.now().0 + 60_000_000),
                b"",
            );
            let _ = done.send(r);
        });
    }
    std::thread::sleep(Duration::from_millis(100));
    release.store(true, Ordering::Release);
    for _ in 0..8 {
        let r = done_rx
            .recv_timeout(HUNG)
            .expect("a caller queued on the panicked shard is answered");
        assert!(matches!(r, Err(Error::ShuttingDown)), "{r:?}");
    }
    let later = bounded({
        let h = h.clone();
        move || h.schedule("t", "later", UtcMicros(h.now().0 + 60_000_000), b"")
    });
    assert!(
        matches!(later, Some(Err(Error::ShuttingDown))),
        "a call after the panic is refused: {later:?}"
    );
    assert_eq!(h.failed_shards(), vec![0]);
    assert!(h.stats()[0].failed);
    let stopped = bounded(move || engine.shutdown()).expect("shutdown returns");
    assert!(
        stopped.as_ref().is_err_and(|e| e.contains("panicked")),
        "{stopped:?}"
    );
}
