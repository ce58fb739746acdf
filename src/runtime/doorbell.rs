//! A shard's doorbell: how another thread wakes a task on the shard's executor without going
//! through glommio's foreign-waker path.
//!
//! # Why
//!
//! glommio 0.9 delivers a wake from another thread by queueing the waker and, when the
//! executor is flagged asleep, writing its notifier `eventfd`, whose read sits in the
//! executor's *latency* ring. The flag goes stale: the executor raises it before each sleep and
//! clears it only after a sleep it really took, so after a round that looked like sleeping and
//! found work instead, the next foreign wake writes the `eventfd` while the executor is awake
//! and has already taken that waker from its queue. The read's completion then lands in the
//! latency ring with no task behind it, and an unconsumed latency completion is exactly what
//! makes glommio's next round run nothing and park its thread with tasks runnable (see the
//! shard module doc). Every reply from another thread (a shard answering an HTTP task of
//! another shard, the journal's I/O thread, the name resolver) is such a wake.
//!
//! glommio's foreign path has a second defect, in its tasks' reference counts. The count is
//! atomic, the rest of a task's header is not, and a task's join handle is not counted. A
//! waker released on another thread that takes the count to zero clones itself again, from
//! zero, to queue a last wake; a join handle dropped on the home thread in that window reads
//! zero and frees the task, and the queued clone then wakes freed memory (glommio panics with
//! "Waker invariant broken", or worse). So no task's waker of ours is woken or dropped on
//! another thread: a wake from there takes the waker out and queues it here, and a relayed
//! future drops the waker it keeps on its home thread once it is answered or dropped
//! (`Relay::release`).
//!
//! A doorbell takes those wakes off glommio's path. The waker a relayed future hands out is
//! ours: woken on the shard's own thread it wakes the task directly; woken from another
//! thread it queues the task's waker here and, only when the doorbell's reader is parked,
//! writes one byte to a socket pair. The reader is a task on the shard's executor reading the
//! other end: a poll on glommio's *main* ring, with a task behind it, which never makes a
//! round run nothing. It wakes the queued wakers from the shard's thread, where glommio's
//! wake is local.
//!
//! The handshake is the ring's (`ring`): the reader sets `parked`, fences, and looks at the
//! queue once more before it reads; a waker pushes, fences, and writes only if it swaps
//! `parked` from true. Either the reader sees the waker, or the waker sees the flag.
//!
//! # When the bell fails
//!
//! A waker that took `parked` owes the reader a byte; if it cannot write one, the reader
//! sleeps on with the wakers queued, and every later waker finds `parked` false and writes
//! nothing: the doorbell would be deaf, and every reply to the shard's tasks stranded. So:
//!
//! - `EINTR` is retried (at most [`WRITE_TRIES`] times); `WouldBlock` means the socket holds
//!   unread bytes already, so the reader will wake.
//! - Any other error (or `EINTR` past the tries) falls back: the waker sets `parked` again
//!   (the reader is still in its read, so the next waker rings afresh), fences, and wakes the
//!   reader's own task through glommio's foreign-wake path, by reference. The reader looks at
//!   the queue at every poll, after it has registered its waker, so it drains what is queued,
//!   including any waker that found `parked` false. Only the reader's waker crosses, and only
//!   by reference: none is released on another thread (the second defect above).
//! - If the reader's socket fails (its read ends or errs), the doorbell is `closed` for good:
//!   the reader stays, waiting on its waker alone, and every later waker falls back at once,
//!   after the same push-fence-look.
//!
//! Each wake that falls back is counted (`punctual_doorbell_fallback_wakes_total`) and the
//! first error is logged. The bound that
//! then holds is glommio's own: the task runs once the executor takes the notifier's wake,
//! which the stall described in the shard module doc can delay, and which a shard's nap
//! timer ([`MAX_NAP`](crate::shard), 2 ms) or the watchdog ends. So a reply is never stranded;
//! one that falls back may wait up to about 2 ms more.
//!
//! # Cost
//!
//! A relayed future whose answer is already there at its first poll costs one poll, with a
//! waker that does nothing (`Waker::noop`, harmless on any thread): no relay, no lock. That is
//! most of a batch's items, which are awaited in order once the first one's commit answered
//! them all (a relay for each was a sixth of the batch path's added cost per registration,
//! `docs/BENCHMARKS.md`). One that waits costs that poll again, one allocation (the relay) and
//! a lock per poll. Per wake from another thread: a queue push, a fence, and one `write` only
//! when the reader is parked; the reader then wakes every queued task in one pass.

use crate::metrics::ShardMetrics;
use crossbeam_queue::SegQueue;
use std::cell::RefCell;
use std::future::Future;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;

/// Writes of the bell's byte tried when each is interrupted (`EINTR`) before the waker falls
/// back to glommio's path.
const WRITE_TRIES: usize = 8;

/// One executor's doorbell; see the module doc.
pub(crate) struct Doorbell {
    home: ThreadId,
    wakers: SegQueue<Waker>,
    parked: AtomicBool,
    /// The reader's socket failed: every waker falls back (see the module doc).
    closed: AtomicBool,
    bell: UnixStream,
    /// Wakes that came from another thread through this doorbell.
    relayed: AtomicU64,
    /// The reader task's own waker, registered at each of its polls: woken by reference when
    /// the bell cannot be rung (see the module doc).
    reader: Mutex<Option<Waker>>,
    /// Where wakes that fell back to glommio's path are counted.
    metrics: Arc<ShardMetrics>,
}

thread_local! {
    static DOORBELL: RefCell<Option<Arc<Doorbell>>> = const { RefCell::new(None) };
}

impl Doorbell {
    /// Makes this thread's doorbell and spawns its reader on the current glommio executor;
    /// futures on this thread that are [`relay`]ed use it from then on. Wakes that fall back
    /// to glommio's path are counted in `metrics`.
    pub fn install(metrics: Arc<ShardMetrics>) -> std::io::Result<Arc<Doorbell>> {
        let (bell, reader) = UnixStream::pair()?;
        bell.set_nonblocking(true)?;
        reader.set_nonblocking(true)?;
        let doorbell = Arc::new(Doorbell {
            home: std::thread::current().id(),
            wakers: SegQueue::new(),
            parked: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            bell,
            relayed: AtomicU64::new(0),
            reader: Mutex::new(None),
            metrics,
        });
        // SAFETY: `reader` is a connected Unix socket that nothing else owns; the glommio
        // stream made from its descriptor becomes its sole owner.
        let reader = unsafe {
            use std::os::fd::{FromRawFd, IntoRawFd};
            glommio::net::UnixStream::from_raw_fd(reader.into_raw_fd())
        };
        glommio::spawn_local(answer(doorbell.clone(), reader)).detach();
        DOORBELL.with(|d| *d.borrow_mut() = Some(doorbell.clone()));
        Ok(doorbell)
    }

    /// Wakes from other threads that came through this doorbell so far.
    #[cfg(test)]
    pub(crate) fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    /// From another thread: queues `waker` for the reader and rings if it is parked; wakes
    /// the queued tasks itself when the bell cannot be rung (see the module doc).
    fn ring(&self, waker: Waker) {
        self.relayed.fetch_add(1, Ordering::Relaxed);
        self.wakers.push(waker);
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::Relaxed) {
            self.fall_back();
            return;
        }
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.write_bell() {
                if self
                    .metrics
                    .doorbell_fallback_wakes_total
                    .load(Ordering::Relaxed)
                    == 0
                {
                    tracing::error!(error = %e, "doorbell: the bell cannot be rung; replies wake this shard's tasks through glommio");
                }
                // The reader still waits in its read: the next waker rings afresh, and this
                // one wakes the reader, which drains what is queued, including any waker
                // that found `parked` false.
                self.parked.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                self.fall_back();
            }
        }
    }

    /// Writes the bell's byte: `Ok` once it is written or the socket already holds one.
    fn write_bell(&self) -> std::io::Result<()> {
        let mut last = None;
        for _ in 0..WRITE_TRIES {
            match (&self.bell).write(&[1]) {
                Ok(_) => return Ok(()),
                // A full socket buffer already holds a ring.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::ErrorKind::Interrupted.into()))
    }

    /// Wakes the reader's task from the calling thread, by reference, through glommio's
    /// foreign path; counted.
    fn fall_back(&self) {
        self.metrics
            .doorbell_fallback_wakes_total
            .fetch_add(1, Ordering::Relaxed);
        if let Some(w) = self
            .reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            w.wake_by_ref();
        }
    }

    /// The reader's poll: registers its waker, then says whether wakers are queued. In that
    /// order, so that a waker that fell back before the registration (and found no reader to
    /// wake) has pushed before this look.
    fn reader_polled(&self, waker: &Waker) -> bool {
        {
            let mut slot = self.reader.lock().unwrap_or_else(|p| p.into_inner());
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        }
        !self.wakers.is_empty()
    }
}

/// Held by the reader: when the executor drops it, the reader's waker and any queued wakers
/// are released there, on their home thread, and the doorbell is closed.
struct ReaderGone(Arc<Doorbell>);

impl Drop for ReaderGone {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        drop(
            self.0
                .reader
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        while let Some(w) = self.0.wakers.pop() {
            drop(w);
        }
    }
}

/// The reader: wakes the queued tasks from the shard's thread, then parks on the socket (and
/// on its own waker, which a waker that could not ring wakes). It runs as long as the
/// executor.
async fn answer(doorbell: Arc<Doorbell>, mut socket: glommio::net::UnixStream) {
    use futures_lite::AsyncRead;
    let gone = ReaderGone(doorbell);
    let doorbell = &gone.0;
    let mut buf = [0u8; 64];
    // Kept open after it fails, so that a ring racing the failure writes into a socket, not
    // into a closed peer (`EPIPE`).
    let mut reading = true;
    loop {
        while let Some(w) = doorbell.wakers.pop() {
            w.wake();
        }
        doorbell.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !doorbell.wakers.is_empty() {
            doorbell.parked.store(false, Ordering::Relaxed);
            continue;
        }
        let read = std::future::poll_fn(|cx| {
            if doorbell.reader_polled(cx.waker()) {
                return Poll::Ready(None);
            }
            if !reading {
                return Poll::Pending;
            }
            Pin::new(&mut socket).poll_read(cx, &mut buf).map(Some)
        })
        .await;
        match read {
            // Woken with wakers queued (a fall-back), or a ring.
            None | Some(Ok(1..)) => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // The other end is ours and lives as long as the doorbell: an end or an error
            // leaves the reader with its own waker only (see the module doc).
            Some(end) => {
                tracing::error!(result = ?end, "doorbell: its socket failed; replies wake this shard's tasks through glommio from now on");
                doorbell.closed.store(true, Ordering::SeqCst);
                reading = false;
            }
        }
        doorbell.parked.store(false, Ordering::Relaxed);
    }
}

/// The waker a relayed future hands out (see the module doc).
struct Relay {
    doorbell: Arc<Doorbell>,
    /// The task's own waker, taken by the wake that uses it.
    target: Mutex<Option<Waker>>,
}

impl Relay {
    /// Drops the task's waker here, on its home thread, once the future no longer needs it.
    ///
    /// The sender's thread may hold the last reference to this relay (the waker it took from
    /// the channel) for a moment after the reply. A task waker still inside would then be
    /// dropped there, on glommio's foreign path, whose reference count races the task's own
    /// drop (see the module doc).
    fn release(&self) {
        let target = self.target.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(target);
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let target = self.target.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(target) = target else { return };
        if std::thread::current().id() == self.doorbell.home {
            target.wake();
        } else {
            self.doorbell.ring(target);
        }
    }
}

/// `fut`, whose wakes from other threads reach this thread's task through its doorbell, or
/// `fut` unchanged on a thread without one (a caller's own thread, a foreign executor).
///
/// `fut` must register the waker of its latest poll, as every channel's receiver does: its
/// first poll is with a waker that does nothing, and only if that poll waits is it polled
/// again, at once, with the relay's.
pub(crate) fn relay<F: Future + Unpin>(fut: F) -> Relayed<F> {
    Relayed {
        fut,
        route: Route::Unasked,
    }
}

/// See [`relay`].
pub(crate) struct Relayed<F> {
    fut: F,
    route: Route,
}

/// How a relayed future's wakes reach its task, settled at the first poll that waits.
enum Route {
    /// Not yet waited: an answer there at the first poll needs no relay.
    Unasked,
    /// No doorbell on this thread: the task's own waker.
    Direct,
    Relay(Arc<Relay>),
}

impl<F: Future + Unpin> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if let Route::Unasked = this.route {
            // A waker that does nothing, wherever it is woken or released, so none of
            // glommio's wakers can cross to another thread through this poll.
            let answer = Pin::new(&mut this.fut).poll(&mut Context::from_waker(Waker::noop()));
            if answer.is_ready() {
                return answer;
            }
            this.route = match DOORBELL.with(|d| d.borrow().clone()) {
                Some(doorbell) => Route::Relay(Arc::new(Relay {
                    doorbell,
                    target: Mutex::new(None),
                })),
                None => Route::Direct,
            };
        }
        let Route::Relay(relay) = &this.route else {
            return Pin::new(&mut this.fut).poll(cx);
        };
        {
            let mut target = relay.target.lock().unwrap_or_else(|p| p.into_inner());
            if !target.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *target = Some(cx.waker().clone());
            }
        }
        let waker = Waker::from(relay.clone());
        let answer = Pin::new(&mut this.fut).poll(&mut Context::from_waker(&waker));
        if answer.is_ready() {
            relay.release();
        }
        answer
    }
}

impl<F> Drop for Relayed<F> {
    fn drop(&mut self) {
        if let Route::Relay(relay) = &self.route {
            relay.release();
        }
    }
}

#[cfg(test)]
#[path = "doorbell_tests.rs"]
mod tests;
