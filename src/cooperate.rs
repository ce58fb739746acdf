//! How long work on a shard's thread may hold it: slices of about [`SLICE`], with a yield to
//! the executor between them. One rule for every long piece of work there (a batch's parse
//! and pushes in `api::batch`, a shard's fire pass in `shard::fire`), so that the shard's
//! other tasks (its loop, HTTP connections, the store's I/O) never wait for more than about
//! one slice behind any of them.
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
/// module doc for why a timer).
pub async fn yield_to_reactor() {
    glommio::timer::sleep(YIELD_TIMER).await;
}
