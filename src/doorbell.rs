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
//! # Cost
//!
//! Per relayed await: one allocation (the relay) and a lock per poll. Per wake from another
//! thread: a queue push, a fence, and one `write` only when the reader is parked; the reader
//! then wakes every queued task in one pass.

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

/// One executor's doorbell; see the module doc.
pub(crate) struct Doorbell {
    home: ThreadId,
    wakers: SegQueue<Waker>,
    parked: AtomicBool,
    bell: UnixStream,
    /// Wakes that came from another thread through this doorbell.
    relayed: AtomicU64,
}

thread_local! {
    static DOORBELL: RefCell<Option<Arc<Doorbell>>> = const { RefCell::new(None) };
}

impl Doorbell {
    /// Makes this thread's doorbell and spawns its reader on the current glommio executor;
    /// futures on this thread that are [`relay`]ed use it from then on.
    pub fn install() -> std::io::Result<Arc<Doorbell>> {
        let (bell, reader) = UnixStream::pair()?;
        bell.set_nonblocking(true)?;
        reader.set_nonblocking(true)?;
        let doorbell = Arc::new(Doorbell {
            home: std::thread::current().id(),
            wakers: SegQueue::new(),
            parked: AtomicBool::new(false),
            bell,
            relayed: AtomicU64::new(0),
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

    /// Wakes from other threads this doorbell has carried so far.
    #[cfg(test)]
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    /// From another thread: queues `waker` for the reader and rings if it is parked.
    fn ring(&self, waker: Waker) {
        self.relayed.fetch_add(1, Ordering::Relaxed);
        self.wakers.push(waker);
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            // A full socket buffer already holds a ring: nothing to do.
            let _ = (&self.bell).write(&[1]);
        }
    }
}

/// The reader: wakes the queued tasks from the shard's thread, then parks on the socket.
async fn answer(doorbell: Arc<Doorbell>, mut reader: glommio::net::UnixStream) {
    use futures_lite::AsyncReadExt;
    let mut buf = [0u8; 64];
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
        match reader.read(&mut buf).await {
            Ok(n) if n > 0 => {}
            // The other end is ours and lives as long as the doorbell: an end or an error
            // means the executor is going away.
            _ => return,
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
        Pin::new(&mut this.fut).poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Replies sent from another thread reach tasks on an executor with a doorbell through
    /// it, never lost, with receivers often dropped while the send is under way.
    #[test]
    fn replies_from_another_thread_arrive_through_the_doorbell() {
        const ROUNDS: usize = 20_000;
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
        let receiver = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let doorbell = Doorbell::install().expect("doorbell");
                let mut answered = 0usize;
                for i in 0..ROUNDS {
                    let (tx, rx) = futures_channel::oneshot::channel::<usize>();
                    let mut tx = Some(tx);
                    while let Some(t) = tx.take() {
                        if let Err(t) = handoff.push(t) {
                            tx = Some(t);
                            glommio::timer::sleep(Duration::from_micros(10)).await;
                        }
                    }
                    let task = glommio::spawn_local(async move { relay(rx).await.is_ok() });
                    if i % 4 == 0 {
                        drop(task);
                    } else if task.await {
                        answered += 1;
                    }
                }
                done.store(true, Ordering::Release);
                (answered, doorbell.relayed())
            })
            .expect("receiver executor");
        let (answered, relayed) = receiver.join().expect("receiver ran");
        sender.join().expect("sender thread");
        assert_eq!(answered, ROUNDS - ROUNDS / 4, "every awaited reply arrived");
        assert!(relayed > 0, "the replies' wakes came through the doorbell");
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
