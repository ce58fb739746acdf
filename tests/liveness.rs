//! No path of the engine waits without a bound: a start that cannot finish fails within its
//! start limit, and a shutdown that cannot finish returns within its own, naming the shards.
//! Each test runs the engine call on a thread and gives up on it after a generous bound, so a
//! hang fails the test instead of hanging the suite.

#[path = "support/held.rs"]
mod held;

use held::{bounded, HUNG};
use punctual::engine::Pinning;
use punctual::{EngineBuilder, Error, UtcMicros};
use std::time::Duration;

/// Shard 1 never reports (its start hook does not return): the build fails within its start
/// limit, names shard 1, and does not wait for a thread that cannot stop.
#[test]
fn a_shard_stuck_in_its_start_fails_the_build_within_the_start_limit() {
    let (hold, holder) = held::hold();
    let built = bounded(move || {
        EngineBuilder::new()
            .shards(2)
            .pinning(Pinning::None)
            .start_timeout(Duration::from_millis(500))
            .on_shard_start(move |id, _| {
                if id == 1 {
                    holder.hold();
                }
            })
            .build()
            .map(drop)
    });
    hold.release();
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
    let (hold, holder) = held::hold();
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .shutdown_timeout(Duration::from_millis(500))
        .on_fire(move |_| holder.hold())
        .build()
        .expect("engine starts");
    hold.enter(&engine.handle(), "hold");
    let stopped = bounded(move || engine.shutdown());
    hold.release();
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
    let (hold, holder) = held::hold();
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .on_fire(move |f| {
            if f.key == "boom" {
                holder.hold();
                panic!("a fire handler panics");
            }
        })
        .build()
        .expect("engine starts");
    let h = engine.handle();
    hold.enter(&h, "boom");
    // The shard is held: these calls wait on its ring when it panics.
    let (done_rx, _callers) = held::callers(&h, 8);
    std::thread::sleep(Duration::from_millis(100));
    hold.release();
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
