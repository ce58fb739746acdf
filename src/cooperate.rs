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
//! The yield is a short glommio timer, not `yield_now`: a task left runnable keeps glommio
//! from reaping I/O completions until its preemption timer expires (100 ms), so the other
//! tasks' replies would wait. A task waiting on a timer is not runnable: the executor runs the
//! others, polls io_uring, fires the timer, and the task resumes a few microseconds later.
//!
//! But a glommio timer already due when it is first polled is ready at once (`Timer::poll`
//! compares its deadline with the clock), and the task then goes on without yielding at all.
//! Between making a 1 µs timer and polling it, a thread that the kernel preempts, or code
//! under a sanitizer, easily loses a microsecond: under AddressSanitizer every such yield was
//! skipped, and a burst's passes ran back to back for 100 ms with the shard's other tasks
//! waiting. So [`yield_to_reactor`] makes its timer again, twice as long each time, until the
//! first poll finds it pending: the task always waits at least once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The longest a piece of work holds its shard's thread before it yields, give or take the
/// work between two checks.
pub const SLICE: Duration = Duration::from_micros(200);

/// The timer a yield waits on. Any duration that is still in the future when the timer is
/// first polled will do; the point is that the task is *not* runnable while the executor runs
/// the others.
const YIELD_TIMER: Duration = Duration::from_micros(1);

/// One slice of a shard's thread: from [`Slice::begin`] until [`SLICE`] has passed.
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

    /// When this slice ends.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// Whether this slice is used up (one clock read).
    pub fn is_over(&self) -> bool {
        Instant::now() >= self.end
    }

    /// Yields to the executor, then begins the next slice.
    pub async fn next(&mut self) {
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
    /// The timer waited on, once one was pending at its first poll.
    timer: Option<glommio::timer::Timer>,
}

impl Future for Yield {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(timer) = self.timer.as_mut() {
            return Pin::new(timer).poll(cx).map(|_| ());
        }
        let mut wait = self.first;
        loop {
            let mut timer = glommio::timer::Timer::new(wait);
            if Pin::new(&mut timer).poll(cx).is_pending() {
                self.timer = Some(timer);
                return Poll::Pending;
            }
            // Due before its first poll: longer, so that this one is not.
            wait = wait.saturating_mul(2).max(YIELD_TIMER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
