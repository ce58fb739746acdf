//! The watchdog's tests: its looks at a pulse, the noted waits, the io_uring probe.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::task::Wake;

struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Count {
    fn woken(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// A pulse whose registered waker counts its wakes.
fn counted_pulse() -> (Pulse, Arc<Count>) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let pulse = Pulse::default();
    pulse.set_waker(Some(Waker::from(count.clone())));
    (pulse, count)
}

/// A glommio executor that sleeps for 3 s with nothing to do, and its thread's id.
fn idle_executor() -> (glommio::ExecutorJoinHandle<()>, i32) {
    let (tx, rx) = std::sync::mpsc::channel();
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            // SAFETY: gettid takes no arguments and cannot fail.
            let _ = tx.send(unsafe { libc::gettid() });
            glommio::timer::sleep(Duration::from_secs(3)).await;
        })
        .expect("executor");
    let tid = rx.recv_timeout(Duration::from_secs(10)).expect("tid");
    (ex, tid)
}

#[test]
fn a_shard_past_its_time_is_woken_and_a_running_one_is_not() {
    let (pulse, count) = counted_pulse();
    let grace = Duration::from_millis(5);
    let now = monotonic_ns();
    let busy = |_| false;
    assert_eq!(
        pulse.check(now + 60_000_000_000, grace, busy),
        Look::Nothing,
        "running: never woken"
    );
    pulse.expect_by(Duration::from_millis(1));
    assert_eq!(
        pulse.check(monotonic_ns(), grace, busy),
        Look::Nothing,
        "not yet due"
    );
    assert_eq!(
        pulse.check(monotonic_ns() + 10_000_000, grace, busy),
        Look::Nothing,
        "late but busy: a wake would not help"
    );
    assert_eq!(count.woken(), 0);
    let asleep = |_| true;
    assert_eq!(
        pulse.check(monotonic_ns() + 10_000_000, grace, asleep),
        Look::Stalled { runnable: false }
    );
    assert_eq!(count.woken(), 1);
    pulse.running();
    assert_eq!(
        pulse.check(monotonic_ns() + 10_000_000, grace, busy),
        Look::Nothing
    );
    pulse.set_waker(None);
    pulse.expect_by(Duration::ZERO);
    assert_eq!(
        pulse.check(monotonic_ns() + 10_000_000, grace, asleep),
        Look::Nothing,
        "no waker: nothing to wake"
    );
}

/// The watchdog thread finds a late shard whose executor sleeps in io_uring, wakes it
/// and counts the stall.
#[test]
fn the_watchdog_thread_wakes_a_stalled_shard_and_counts_it() {
    let (sleeper, tid) = idle_executor();
    let (pulse, count) = counted_pulse();
    let pulse = Arc::new(pulse);
    pulse.tid.store(tid, Ordering::Relaxed);
    let metrics = Arc::new(ShardMetrics::default());
    pulse.expect_by(Duration::ZERO);
    let dog = Watchdog::spawn(
        vec![(pulse.clone(), metrics.clone())],
        Duration::from_millis(1),
        Duration::from_millis(1),
        &[],
    )
    .expect("watchdog thread");
    let give_up = std::time::Instant::now() + Duration::from_secs(3);
    while count.woken() == 0 && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(dog);
    sleeper.join().expect("executor ran");
    assert!(count.woken() >= 1);
    assert_eq!(metrics.executor_stalls_total.load(Ordering::Relaxed), 1);
    assert!(metrics.watchdog_wakes_total.load(Ordering::Relaxed) >= 1);
}

/// A late shard whose thread is busy is never woken, however long: each cross-thread wake
/// would hold a reference on glommio's 16-bit task count until the thread returns to its
/// executor, and would not make it run sooner.
#[test]
fn a_busy_late_shard_is_not_woken() {
    let (pulse, count) = counted_pulse();
    let grace = Duration::from_millis(5);
    pulse.expect_by(Duration::ZERO);
    let later = monotonic_ns() + 10_000_000;
    let woken = (0..100_000)
        .filter(|i| pulse.check(later + i, grace, |_| false) != Look::Nothing)
        .count();
    assert_eq!(woken, 0);
    assert_eq!(count.woken(), 0);
}

/// The shard begins a wait (`expect_by`, then a noted wait polled once, pending): the
/// sender that ends it, and the wait.
fn wait_on<'a>(
    pulse: &'a Pulse,
    cx: &mut Context<'_>,
) -> (
    futures_channel::oneshot::Sender<()>,
    Noted<'a, futures_channel::oneshot::Receiver<()>>,
) {
    pulse.expect_by(Duration::ZERO);
    let (tx, rx) = futures_channel::oneshot::channel::<()>();
    let mut wait = pulse.noted(rx);
    assert!(Pin::new(&mut wait).poll(cx).is_pending());
    (tx, wait)
}

/// A stall is `runnable` (glommio's park bug) only when what the shard's wait handed its
/// noted waker to had woken it a grace or more before the look: not when nothing has
/// woken it yet (a late timer), nor when the wake is more recent than the grace.
#[test]
fn a_stall_is_runnable_only_when_the_shards_wait_had_woken_it_a_grace_before() {
    let (pulse, _count) = counted_pulse();
    let grace = Duration::from_millis(5);
    let task = Arc::new(Count(AtomicUsize::new(0)));
    let task_waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&task_waker);
    let asleep = |_| true;

    // Nothing has woken the wait: a late timer, not a runnable task.
    let (_tx, _wait) = wait_on(&pulse, &mut cx);
    let later = monotonic_ns() + 10_000_000;
    assert_eq!(
        pulse.check(later, grace, asleep),
        Look::Stalled { runnable: false }
    );
    pulse.running();

    // Its wake came through the noted waker to the task, and the look is a grace later.
    let (tx, _wait) = wait_on(&pulse, &mut cx);
    tx.send(()).expect("the wait listens");
    assert_eq!(task.woken(), 1, "the wake reached the shard's task");
    let woken = monotonic_ns();
    assert_eq!(
        pulse.check(woken + 2 * grace.as_nanos() as u64, grace, asleep),
        Look::Stalled { runnable: true }
    );
    pulse.running();

    // Woken less than a grace before the look: not counted as runnable.
    let (tx, _wait) = wait_on(&pulse, &mut cx);
    std::thread::sleep(Duration::from_millis(3));
    // Read before the send: the wake is noted no earlier, so half a grace from here is less
    // than a grace after it, however long the thread is preempted around the send.
    let before = monotonic_ns();
    tx.send(()).expect("the wait listens");
    assert_eq!(
        pulse.check(before + grace.as_nanos() as u64 / 2, grace, asleep),
        Look::Stalled { runnable: false }
    );
    pulse.running();

    // A new wait forgets the last one's wake.
    pulse.expect_by(Duration::ZERO);
    assert_eq!(
        pulse.check(monotonic_ns() + 10_000_000, grace, asleep),
        Look::Stalled { runnable: false }
    );
}

/// A late shard whose executor sleeps in io_uring is a stall: counted once, and woken at
/// every look until it runs (a sleeping executor takes each wake at once).
#[test]
fn a_stalled_executor_is_counted_once_and_woken_until_it_runs() {
    let (pulse, count) = counted_pulse();
    let grace = Duration::from_millis(5);
    pulse.expect_by(Duration::ZERO);
    let later = monotonic_ns() + 10_000_000;
    assert_eq!(pulse.check(later, grace, |_| false), Look::Nothing);
    assert_eq!(
        pulse.check(later + 1, grace, |_| true),
        Look::Stalled { runnable: false }
    );
    for i in 2..10 {
        assert_eq!(pulse.check(later + i, grace, |_| true), Look::WokenAgain);
    }
    assert_eq!(pulse.check(later + 10, grace, |_| false), Look::Nothing);
    assert_eq!(count.woken(), 9);
    pulse.running();
    assert_eq!(pulse.check(later + 11, grace, |_| true), Look::Nothing);
}

/// The probe sees a glommio executor with nothing to do as asleep in io_uring.
#[test]
fn the_io_uring_probe_sees_an_idle_glommio_executor_asleep() {
    let (ex, tid) = idle_executor();
    let give_up = std::time::Instant::now() + Duration::from_secs(3);
    let mut seen = false;
    while !seen && std::time::Instant::now() < give_up {
        seen = asleep_in_io_uring(tid);
        std::thread::sleep(Duration::from_millis(5));
    }
    ex.join().expect("executor ran");
    assert!(seen, "an idle executor sleeps in io_uring_enter");
}

/// The probe reads this thread as not asleep in io_uring (it is running this test), and
/// an unknown thread as not asleep.
#[test]
fn the_io_uring_probe_reads_a_running_thread_as_awake() {
    // SAFETY: gettid takes no arguments and cannot fail.
    let me = unsafe { libc::gettid() };
    assert!(!asleep_in_io_uring(me));
    assert!(!asleep_in_io_uring(0));
    assert!(!asleep_in_io_uring(i32::MAX));
}

/// While a shard starts, it is nudged every START_NUDGE, but never again before it
/// answered the last nudge with a poll: at most one wake is outstanding.
#[test]
fn a_start_is_nudged_with_at_most_one_wake_outstanding() {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let pulse = Pulse::default();
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let mut pending = std::pin::pin!(std::future::pending::<()>());
    assert!(pulse.poll_start(pending.as_mut(), &mut cx).is_pending());
    let step = START_NUDGE.as_nanos() as u64;
    let t0 = monotonic_ns() + step;
    for i in 0..50 {
        let look = pulse.check(t0 + i * step, GRACE, |_| false);
        assert_eq!(look, Look::Nothing, "a nudge is not a stall");
    }
    assert_eq!(count.woken(), 1, "unanswered: no second nudge");
    assert!(pulse.poll_start(pending.as_mut(), &mut cx).is_pending());
    pulse.check(t0 + 100 * step, GRACE, |_| false);
    assert_eq!(count.woken(), 2, "answered: nudged again");
    let mut ready = std::pin::pin!(std::future::ready(7));
    assert_eq!(pulse.poll_start(ready.as_mut(), &mut cx), Poll::Ready(7));
    pulse.check(t0 + 200 * step, GRACE, |_| false);
    assert_eq!(count.woken(), 2, "started: no more nudges");
}

/// Records the thread its last reference is released on.
struct ReleasedOn(Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>);
impl Wake for ReleasedOn {
    fn wake(self: Arc<Self>) {}
}
impl Drop for ReleasedOn {
    fn drop(&mut self) {
        *self.0.lock().expect("released") = Some(std::thread::current().id());
    }
}

/// Every waker a pulse keeps of the shard's tasks (its own, the home task's, and the one
/// its noted waits wake) is released by `leave` on the shard's thread, though the watchdog's
/// thread drops the pulse last.
#[test]
fn leaving_releases_every_task_waker_on_the_shards_thread() {
    let released = Arc::new(std::sync::Mutex::new(None));
    let pulse = Arc::new(Pulse::default());
    {
        let waker = Waker::from(Arc::new(ReleasedOn(released.clone())));
        pulse.set_waker(Some(waker.clone()));
        *pulse.home.lock().expect("home") = Some(waker.clone());
        let mut wait = pulse.noted(std::future::pending::<()>());
        let polled = Pin::new(&mut wait).poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
    }
    pulse.leave();
    let watchdog = std::thread::spawn(move || drop(pulse));
    watchdog.join().expect("watchdog");
    assert_eq!(
        *released.lock().expect("released"),
        Some(std::thread::current().id())
    );
}
