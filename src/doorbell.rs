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
//! Per relayed await: one allocation (the relay) and a lock per poll. Per wake from another
//! thread: a queue push, a fence, and one `write` only when the reader is parked; the reader
//! then wakes every queued task in one pass.

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
pub(crate) fn relay<F: Future + Unpin>(fut: F) -> Relayed<F> {
    let relay = DOORBELL.with(|d| d.borrow().clone()).map(|doorbell| {
        Arc::new(Relay {
            doorbell,
            target: Mutex::new(None),
        })
    });
    Relayed { fut, relay }
}

/// See [`relay`].
pub(crate) struct Relayed<F> {
    fut: F,
    relay: Option<Arc<Relay>>,
}

impl<F: Future + Unpin> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let Some(relay) = this.relay.as_ref() else {
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
        if let Some(relay) = &self.relay {
            relay.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// What [`replies`] saw: replies awaited and answered, wakes the doorbell carried, and
    /// wakes that fell back to glommio's path.
    #[derive(Debug)]
    struct Seen {
        awaited: usize,
        answered: usize,
        relayed: u64,
        fallbacks: u64,
    }

    /// Sends `rounds` replies from another thread to tasks on an executor with a doorbell
    /// (every fourth receiver dropped while the send may be under way), with `broken(round)`
    /// saying in which rounds the bell's writes fail. `None` if no reply arrived for 30 s
    /// (however slow the host, a sanitizer's included, one round never takes that): one was
    /// stranded.
    fn replies(rounds: usize, broken: fn(usize) -> bool, shut_at: Option<usize>) -> Option<Seen> {
        let handoff = Arc::new(crossbeam_queue::ArrayQueue::<
            futures_channel::oneshot::Sender<usize>,
        >::new(64));
        let done = Arc::new(AtomicBool::new(false));
        let sender = {
            let (handoff, done) = (handoff.clone(), done.clone());
            std::thread::spawn(move || loop {
                match handoff.pop() {
                    Some(tx) => {
                        let _ = tx.send(1);
                    }
                    None if done.load(Ordering::Acquire) => return,
                    None => std::thread::yield_now(),
                }
            })
        };
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let stop = done.clone();
        let progress = Arc::new(AtomicU64::new(0));
        let rounds_done = progress.clone();
        let receiver = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let metrics = Arc::new(ShardMetrics::default());
                let doorbell = Doorbell::install(metrics.clone()).expect("doorbell");
                // As a shard's nap timer does (`shard::park::MAX_NAP`): ends any sleep of
                // glommio's with a task runnable, the bound a wake through glommio's path
                // relies on.
                let naps = glommio::spawn_local(async {
                    loop {
                        glommio::timer::sleep(Duration::from_millis(2)).await;
                    }
                });
                let mut broken_now = None;
                let (mut awaited, mut answered) = (0, 0);
                for i in 0..rounds {
                    rounds_done.store(i as u64, Ordering::Relaxed);
                    if shut_at == Some(i) {
                        // The reader reads the end of its socket: it is closed from here on.
                        // SAFETY: the bell is the doorbell's open socket; shutting its writing
                        // half closes no descriptor.
                        let rc =
                            unsafe { libc::shutdown(doorbell.bell.as_raw_fd(), libc::SHUT_WR) };
                        assert_eq!(rc, 0, "shutdown: {}", std::io::Error::last_os_error());
                    }
                    match (broken(i), broken_now.is_some()) {
                        (true, false) => broken_now = Some(Broken::new(&doorbell)),
                        (false, true) => broken_now = None,
                        _ => {}
                    }
                    let (tx, rx) = futures_channel::oneshot::channel::<usize>();
                    if i % 4 == 0 {
                        hand_over(&handoff, tx).await;
                        drop(glommio::spawn_local(async move { relay(rx).await.is_ok() }));
                        continue;
                    }
                    // The reply is handed to the sender only once the task waits for it, and
                    // the task is not polled again until a wake: so each reply's wake comes
                    // from the other thread (a reply sent before the first poll, or racing a
                    // second one, needs no wake and would test nothing).
                    let handoff = handoff.clone();
                    let (mut reply, mut tx) = (relay(rx), Some(tx));
                    let task = glommio::spawn_local(std::future::poll_fn(move |cx| {
                        let Some(t) = tx.take() else {
                            return Pin::new(&mut reply).poll(cx).map(|r| r.is_ok());
                        };
                        if let Poll::Ready(r) = Pin::new(&mut reply).poll(cx) {
                            return Poll::Ready(r.is_ok());
                        }
                        if let Err(t) = handoff.push(t) {
                            tx = Some(t);
                            cx.waker().wake_by_ref();
                        }
                        Poll::Pending
                    }));
                    awaited += 1;
                    answered += usize::from(task.await);
                }
                drop(broken_now);
                stop.store(true, Ordering::Release);
                drop(naps);
                let _ = seen_tx.send(Seen {
                    awaited,
                    answered,
                    relayed: doorbell.relayed.load(Ordering::Relaxed),
                    fallbacks: metrics
                        .doorbell_fallback_wakes_total
                        .load(Ordering::Relaxed),
                });
            })
            .expect("receiver executor");
        let (mut last, mut since) = (0, std::time::Instant::now());
        let seen = loop {
            match seen_rx.recv_timeout(Duration::from_secs(1)) {
                Ok(seen) => break seen,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            let now = progress.load(Ordering::Relaxed);
            if now != last {
                (last, since) = (now, std::time::Instant::now());
            } else if since.elapsed() > Duration::from_secs(30) {
                return None;
            }
        };
        receiver.join().expect("receiver ran");
        sender.join().expect("sender thread");
        Some(seen)
    }

    /// Gives `tx` to the sender thread, waiting while its queue is full.
    async fn hand_over(
        handoff: &crossbeam_queue::ArrayQueue<futures_channel::oneshot::Sender<usize>>,
        tx: futures_channel::oneshot::Sender<usize>,
    ) {
        let mut tx = Some(tx);
        while let Some(t) = tx.take() {
            if let Err(t) = handoff.push(t) {
                tx = Some(t);
                glommio::timer::sleep(Duration::from_micros(10)).await;
            }
        }
    }

    /// Every write of the bell fails (`EBADF`) while it lives, its socket still open (so the
    /// reader still waits in its read, as after a transient error).
    struct Broken {
        bell: i32,
        saved: i32,
    }

    impl Broken {
        fn new(doorbell: &Doorbell) -> Broken {
            let read_only = std::fs::File::open("/dev/null").expect("/dev/null");
            let bell = doorbell.bell.as_raw_fd();
            // SAFETY: `bell` is the doorbell's open socket; `dup` gives a second descriptor of
            // it that this guard owns, so `dup2` replacing `bell` (atomically, with a
            // read-only file) closes nothing the reader's end depends on.
            let saved = unsafe { libc::dup(bell) };
            assert!(saved >= 0, "dup: {}", std::io::Error::last_os_error());
            // SAFETY: both descriptors are open; see above.
            let rc = unsafe { libc::dup2(read_only.as_raw_fd(), bell) };
            assert!(rc >= 0, "dup2: {}", std::io::Error::last_os_error());
            Broken { bell, saved }
        }
    }

    impl Drop for Broken {
        fn drop(&mut self) {
            // SAFETY: `saved` is this guard's own descriptor of the bell's socket and `bell`
            // is open; the socket goes back under its number, and `saved` is closed once.
            unsafe {
                libc::dup2(self.saved, self.bell);
                libc::close(self.saved);
            }
        }
    }

    /// Replies sent from another thread reach tasks on an executor with a doorbell through
    /// it, never lost, with receivers often dropped while the send is under way.
    #[test]
    fn replies_from_another_thread_arrive_through_the_doorbell() {
        let seen = replies(20_000, |_| false, None).expect("no reply stranded");
        assert_eq!(seen.answered, seen.awaited, "every awaited reply arrived");
        assert!(
            seen.relayed >= seen.awaited as u64,
            "every awaited reply's wake came through the doorbell: {seen:?}"
        );
        assert_eq!(seen.fallbacks, 0, "{seen:?}");
    }

    /// The bell's writes fail (an error other than `WouldBlock`) for a stretch of the replies,
    /// twice: no reply is stranded, the ones that could not ring went through glommio's path
    /// (counted), and the doorbell carries the replies again once the bell works.
    #[test]
    fn a_bell_that_cannot_be_rung_strands_no_reply() {
        let seen = replies(
            6_000,
            |i| (1_000..2_000).contains(&i) || (3_000..4_000).contains(&i),
            None,
        )
        .expect("no reply stranded behind a failed ring");
        assert_eq!(seen.answered, seen.awaited, "every awaited reply arrived");
        assert!(
            seen.relayed >= seen.awaited as u64,
            "every awaited reply was woken from the other thread: {seen:?}"
        );
        assert!(seen.fallbacks > 0, "the failed rings fell back: {seen:?}");
        assert!(seen.relayed > seen.fallbacks, "{seen:?}");
    }

    /// A task's waker that records the thread of each of its wakes and of its last release.
    struct Tracked(Arc<Mutex<Vec<ThreadId>>>);

    impl Tracked {
        fn note(&self) {
            self.0
                .lock()
                .expect("tracked")
                .push(std::thread::current().id());
        }
    }

    impl Wake for Tracked {
        fn wake(self: Arc<Self>) {
            self.note();
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.note();
        }
    }

    /// Keeps the waker of its first poll where a channel keeps its receiver's (`slot`), and is
    /// ready from its second poll.
    struct Waits {
        slot: Arc<Mutex<Option<Waker>>>,
        polled: bool,
    }

    impl Future for Waits {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.polled {
                return Poll::Ready(());
            }
            self.polled = true;
            *self.slot.lock().expect("slot") = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A relayed future on an executor with a doorbell, whose sender's thread takes the
    /// relay's waker from the channel and keeps it until the future is gone: answered after a
    /// wake from that thread (`answered`), or dropped while it waits; with the bell's writes
    /// failing throughout (`broken`). Returns the home thread and the threads of the task
    /// waker's wakes and last release.
    fn task_waker_used(answered: bool, broken: bool) -> (ThreadId, Vec<ThreadId>) {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let doorbell = Doorbell::install(Arc::new(ShardMetrics::default())).expect("bell");
                let broken = broken.then(|| Broken::new(&doorbell));
                let used = Arc::new(Mutex::new(Vec::new()));
                let task = Waker::from(Arc::new(Tracked(used.clone())));
                let slot = Arc::new(Mutex::new(None));
                let mut fut = relay(Waits {
                    slot: slot.clone(),
                    polled: false,
                });
                let mut cx = Context::from_waker(&task);
                assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
                let held = slot.lock().expect("slot").take().expect("registered");
                let (woken_tx, woken) = std::sync::mpsc::channel();
                let (release, released_rx) = std::sync::mpsc::channel::<()>();
                let sender = std::thread::spawn(move || {
                    if answered {
                        held.wake_by_ref();
                    }
                    let _ = woken_tx.send(());
                    let _ = released_rx.recv();
                    drop(held);
                });
                woken.recv().expect("sender");
                if answered {
                    // The task is polled again after its wake, and answered.
                    assert!(Pin::new(&mut fut).poll(&mut cx).is_ready());
                }
                drop(fut);
                drop(task);
                // The wake queued at the doorbell is woken (and released) by its reader here.
                for _ in 0..5_000 {
                    if doorbell.wakers.is_empty() {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                assert!(doorbell.wakers.is_empty(), "the doorbell's reader ran");
                release.send(()).expect("sender waits");
                sender.join().expect("sender thread");
                drop(broken);
                let on = used.lock().expect("used").clone();
                (std::thread::current().id(), on)
            })
            .expect("executor")
            .join()
            .expect("executor ran")
    }

    /// The task's waker a relay keeps is woken and released on the task's own thread only:
    /// once the future is answered or dropped, though the sender's thread still holds the
    /// relay's waker, and when the bell cannot be rung. Woken or released on the sender's
    /// thread, it would take glommio's foreign path (see the module doc).
    #[test]
    fn a_task_waker_is_used_on_its_own_thread_only() {
        for (answered, broken) in [(true, false), (false, false), (true, true), (false, true)] {
            let (home, used) = task_waker_used(answered, broken);
            assert!(!used.is_empty(), "released at all");
            assert!(
                used.iter().all(|t| *t == home),
                "answered {answered}, broken {broken}: woken or released on {used:?}, home {home:?}"
            );
            assert_eq!(used.len(), 1 + usize::from(answered), "{used:?}");
        }
    }

    /// The reader's socket fails (it reads the end) a third of the way through: no reply is
    /// stranded, and every one after that fell back.
    #[test]
    fn a_doorbell_whose_socket_fails_strands_no_reply() {
        let seen = replies(6_000, |_| false, Some(2_000)).expect("no reply stranded");
        assert_eq!(seen.answered, seen.awaited, "every awaited reply arrived");
        assert!(
            seen.fallbacks >= 3_000,
            "the replies after the failure fell back: {seen:?}"
        );
        assert!(seen.relayed >= seen.awaited as u64, "{seen:?}");
    }

    /// Without a doorbell on the thread (a caller blocked on its own thread), a relayed
    /// future is the future itself.
    #[test]
    fn a_thread_without_a_doorbell_polls_the_future_as_it_is() {
        let (tx, rx) = futures_channel::oneshot::channel::<u8>();
        let waiter = std::thread::spawn(move || futures_lite::future::block_on(relay(rx)));
        let _ = tx.send(7);
        assert_eq!(waiter.join().expect("waiter"), Ok(7));
    }
}
