use super::*;

/// A slice ends once the thread's shard is due, however much of it is left, and the
/// shard's return ends that: a slice begun now is not over while the shard is away until
/// an hour from now, is over at once when it was due a moment ago, and the shard's
/// away-marker is gone once dropped.
#[test]
fn a_slice_ends_when_the_thread_s_shard_is_due() {
    let slice = Slice {
        end: Instant::now() + Duration::from_secs(3600),
    };
    assert!(!slice.is_over());
    {
        let _away = ShardAway::until(Instant::now() + Duration::from_secs(3600));
        assert!(!slice.is_over(), "the shard is not due for an hour");
    }
    {
        let _away = ShardAway::until(Instant::now());
        assert!(slice.is_over(), "the shard is due: the slice must end");
    }
    assert!(
        !slice.is_over(),
        "the shard is back: its marker must be gone"
    );
    assert!(!shard_due(Instant::now() + Duration::from_secs(3600 * 24)));
}

/// A yield that its own task polls again and again without going back to the executor
/// (as hyper's connection task polls a handler up to 16 times a turn, then wakes itself)
/// stays pending, however long past its timer's deadline, until the executor's reactor
/// fires the timer; then it is ready.
#[test]
fn a_yield_polled_again_by_its_own_task_waits_for_the_reactor() {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    ex.run(async {
        let mut y = yield_to_reactor();
        let spun = Instant::now();
        while spun.elapsed() < Duration::from_millis(2) {
            let polled = futures_lite::future::poll_once(&mut y).await;
            assert!(
                polled.is_none(),
                "the yield was ready {:?} after it began, without a pass of the reactor",
                spun.elapsed()
            );
            std::hint::spin_loop();
        }
        y.await;
    });
}

/// A yield whose first timer is due before it is polled (as when the thread loses the
/// microsecond between making and polling it) still waits: its first poll is pending, so
/// the executor runs its other tasks and polls its I/O before the yield returns.
#[test]
fn a_yield_whose_timer_is_due_at_once_still_waits() {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    ex.run(async {
        for _ in 0..100 {
            let mut y = Yield {
                first: Duration::ZERO,
                timer: None,
            };
            let first = futures_lite::future::poll_once(&mut y).await;
            assert!(first.is_none(), "the yield returned at its first poll");
            y.await;
        }
    });
}
