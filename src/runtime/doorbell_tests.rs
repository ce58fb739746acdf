//! The doorbell's tests (`doorbell.rs`): replies from other threads, failed bells, and where a
//! task's waker is used.

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
                    let rc = unsafe { libc::shutdown(doorbell.bell.as_raw_fd(), libc::SHUT_WR) };
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

/// Keeps the waker of its latest poll where a channel keeps its receiver's (`slot`), and
/// is ready once `answered` is set.
struct Waits {
    slot: Arc<Mutex<Option<Waker>>>,
    answered: Arc<AtomicBool>,
}

impl Future for Waits {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.answered.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
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
            let reply = Arc::new(AtomicBool::new(false));
            let mut fut = relay(Waits {
                slot: slot.clone(),
                answered: reply.clone(),
            });
            let mut cx = Context::from_waker(&task);
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            let held = slot.lock().expect("slot").take().expect("registered");
            let (woken_tx, woken) = std::sync::mpsc::channel();
            let (release, released_rx) = std::sync::mpsc::channel::<()>();
            let sender = std::thread::spawn(move || {
                if answered {
                    reply.store(true, Ordering::Release);
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

/// A reply already sent when its future is first polled is taken at once: no relay is
/// made, and the task's waker is neither cloned nor woken.
#[test]
fn a_reply_already_there_needs_no_relay() {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(|| async {
            let doorbell = Doorbell::install(Arc::new(ShardMetrics::default())).expect("bell");
            let used = Arc::new(Mutex::new(Vec::new()));
            let tracked = Arc::new(Tracked(used.clone()));
            let task = Waker::from(tracked.clone());
            let (tx, rx) = futures_channel::oneshot::channel::<u8>();
            tx.send(7).expect("receiver");
            let mut fut = relay(rx);
            let answer = Pin::new(&mut fut).poll(&mut Context::from_waker(&task));
            assert_eq!(answer, Poll::Ready(Ok(7)));
            assert!(matches!(fut.route, Route::Unasked), "no relay made");
            drop(fut);
            assert_eq!(
                Arc::strong_count(&tracked),
                2,
                "the task's waker was not cloned"
            );
            assert!(used.lock().expect("used").is_empty(), "nor woken");
            assert_eq!(doorbell.relayed(), 0);
        })
        .expect("executor")
        .join()
        .expect("executor ran");
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
