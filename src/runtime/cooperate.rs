//! How long work on a shard's thread may hold it: slices of about [`SLICE`], with a yield to
//! the executor between them. One rule for every long piece of work there (a batch's parse
//! and pushes in `api::batch`, a shard's fire pass in `shard::fire`, a large answer's writes
//! in `hyperio`), so that the shard's other tasks (its loop, HTTP connections, the store's
//! I/O) never wait for more than about one slice behind any of them.
//!
//! ```text
//!   let mut slice = Slice::begin();
//!   for each piece of work:
//!       do it
//!       every so many pieces: if slice.is_over() { slice.next().await }   (yield, new slice)
//! ```
//!
//! The check reads the clock (`Instant::now`, a vDSO call of about 20 ns), so callers check
//! every few pieces, sized so that a check costs about 1% of the work between two checks and
//! the work between two checks stays well under a slice.
//!
//! A slice also ends early when the thread's shard is due: a shard that parks on a thread it
//! shares says when its park ends ([`ShardAway`]), and every slice that is running then
//! ends at its next check. Without it, a timer that fell due during a slice waited for the
//! rest of that slice and of every other task's slice that ran before the executor looked at
//! its timers again (`SLICE` each), which is most of the lateness while large batches are
//! posted. With it, the wait is the work between two checks.
//!
//! The yield is a short glommio timer, not `yield_now`: a task left runnable keeps glommio
//! from reaping I/O completions until its preemption timer expires (100 ms), so the other
//! tasks' replies would wait. A task waiting on a timer is not runnable: the executor runs the
//! others, polls io_uring, fires the timer, and the task resumes a few microseconds later.
//!
//! A glommio timer is ready whenever it is polled after its deadline (`Timer::poll` compares
//! the deadline with the clock), whether or not the executor has been back to its reactor. A
//! yield polled again by its own task before that does not yield at all, and hyper does just
//! that: its connection task polls the request's handler up to 16 times a turn and then wakes
//! itself (`yield_now`), so a handler that "yields" while reading a large body was polled
//! again a microsecond later, found its timer due and went on, and the connection read and
//! copied the body for milliseconds while the executor never reached its reactor, nor the
//! shard whose park had ended. So a [`Yield`] is ready only once the reactor has fired its
//! timer (it passes the timer a waker of its own, which notes the firing): however often its
//! task polls it, the task's other work waits behind one reactor pass.
//!
//! And a glommio timer already due when it is first polled is ready at once, and the task
//! then goes on without yielding at all.
//! Between making a 1 µs timer and polling it, a thread that the kernel preempts, or code
//! under a sanitizer, easily loses a microsecond: under AddressSanitizer every such yield was
//! skipped, and a burst's passes ran back to back for 100 ms with the shard's other tasks
//! waiting. So [`yield_to_reactor`] makes its timer again, twice as long each time, until the
//! first poll finds it pending: the task always waits at least once.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// The longest a piece of work holds its shard's thread before it yields, give or take the
/// work between two checks.
pub const SLICE: Duration = Duration::from_micros(200);

/// The timer a yield waits on. Any duration that is still in the future when the timer is
/// first polled will do; the point is that the task is *not* runnable while the executor runs
/// the others.
const YIELD_TIMER: Duration = Duration::from_micros(1);

thread_local! {
    /// When this thread's shard next wants the thread (its park ends), while it is parked on
    /// a thread it shares; `None` while it runs, and on every other thread.
    static SHARD_DUE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// While it lives, this thread's shard is away until the instant it was made with: slices on
/// this thread end at their next check once that instant has passed. Dropped (the shard runs
/// again, or its wait was given up), the thread is the shard's again.
#[must_use = "the shard counts as away only while this lives"]
pub struct ShardAway(());

impl ShardAway {
    /// The thread's shard parks, or yields, until `at`.
    pub fn until(at: Instant) -> ShardAway {
        SHARD_DUE.with(|d| d.set(Some(at)));
        ShardAway(())
    }
}

impl Drop for ShardAway {
    fn drop(&mut self) {
        SHARD_DUE.with(|d| d.set(None));
    }
}

/// Whether this thread's shard is due (its park has ended) at `now`.
fn shard_due(now: Instant) -> bool {
    SHARD_DUE.with(|d| d.get().is_some_and(|at| now >= at))
}

/// One slice of a shard's thread: from [`Slice::begin`] until [`SLICE`] has passed, or until
/// the thread's shard is due, whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct Slice {
    end: Instant,
}

impl Slice {
    /// A slice that starts now.
    pub fn begin() -> Slice {
        Slice {
            end: Instant::now() + SLICE,
        }
    }

    /// A slice already used up, as a slow host leaves one after a single chunk of work
    /// (tests that count a pass's steps must not depend on the host's speed).
    #[cfg(test)]
    pub(crate) fn used_up() -> Slice {
        Slice {
            end: Instant::now(),
        }
    }

    /// Whether this slice is used up, or the thread's shard is due (one clock read).
    pub fn is_over(&self) -> bool {
        let now = Instant::now();
        now >= self.end || shard_due(now)
    }

    /// Yields to the executor, then begins the next slice.
    pub async fn next(&mut self) {
        #[cfg(test)]
        LONGEST.with(|l| {
            l.set(
                l.get()
                    .max((Instant::now() + SLICE).saturating_duration_since(self.end)),
            )
        });
        yield_to_reactor().await;
        *self = Slice::begin();
    }
}

/// Gives the thread to the executor's other tasks, and to its I/O, then comes back (see the
/// module doc for why a timer, and why it is made again when it is due at once).
pub fn yield_to_reactor() -> Yield {
    Yield {
        first: YIELD_TIMER,
        timer: None,
    }
}

/// See [`yield_to_reactor`].
pub struct Yield {
    /// The first timer's length.
    first: Duration,
    /// The timer waited on, once one was pending at its first poll, and the note of its
    /// firing.
    timer: Option<(glommio::timer::Timer, Arc<Fired>)>,
}

/// The waker a yield's timer is polled with: notes that the reactor fired the timer, then
/// wakes the task that last polled the yield.
struct Fired {
    fired: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Fired {
    fn task(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        // Nothing panics while holding it; a poisoned lock still holds a waker.
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for Fired {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        if let Some(task) = self.task().take() {
            task.wake();
        }
    }
}

impl Future for Yield {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some((_, fired)) = self.timer.as_ref() {
            // Ready once the reactor fired the timer, never merely because its deadline
            // passed (see the module doc). The timer is not polled again: it keeps the
            // waker that notes its firing.
            if fired.fired.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            *fired.task() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let fired = Arc::new(Fired {
            fired: AtomicBool::new(false),
            task: Mutex::new(Some(cx.waker().clone())),
        });
        let waker = Waker::from(fired.clone());
        let mut own = Context::from_waker(&waker);
        let mut wait = self.first;
        loop {
            let mut timer = glommio::timer::Timer::new(wait);
            if Pin::new(&mut timer).poll(&mut own).is_pending() {
                self.timer = Some((timer, fired));
                return Poll::Pending;
            }
            // Due before its first poll: longer, so that this one is not.
            wait = wait.saturating_mul(2).max(YIELD_TIMER);
        }
    }
}

/// Runs `f` to its end on a fresh executor of this thread (for tests of async code).
#[cfg(test)]
pub(crate) fn on_executor<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor")
        .run(f)
}

#[cfg(test)]
thread_local! {
    /// The longest slice ended by [`Slice::next`] on this thread since [`longest_slice`].
    static LONGEST: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// The longest slice that sliced work on this thread held it before yielding, since the
/// last call (for the figures, which so measure the code itself, its buffers' growth and
/// page faults included, rather than a copy of its loop).
#[cfg(test)]
pub(crate) fn longest_slice() -> Duration {
    LONGEST.with(|l| l.replace(Duration::ZERO))
}

#[cfg(test)]
#[path = "cooperate_tests.rs"]
mod tests;
