use super::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Counts wake-ups into a shared counter. Each round makes its own waker and frees it
/// right after the receiver: a send that woke a waker the receiver had already released
/// would touch freed memory (a use-after-free that AddressSanitizer reports), not just a
/// reference-counted survivor.
struct CountingWaker(Arc<AtomicUsize>);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A polled receiver dropped on one thread while the sender sends on another, two million
/// times: every send either finds the receiver gone (and gets its value back) or lands
/// (and wakes the registered waker), and nothing crashes.
#[test]
fn reply_channel_survives_polled_receivers_dropped_during_sends() {
    const ROUNDS: usize = 2_000_000;
    let handoff = Arc::new(crossbeam_queue::ArrayQueue::<Reply<u64>>::new(1024));
    let sent = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (handoff, sent, refused) = (handoff.clone(), sent.clone(), refused.clone());
        std::thread::spawn(move || {
            let mut done = 0;
            while done < ROUNDS {
                match handoff.pop() {
                    Some(tx) => {
                        match tx.send(done as u64) {
                            Ok(()) => sent.fetch_add(1, Ordering::Relaxed),
                            Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                        };
                        done += 1;
                    }
                    None => std::hint::spin_loop(),
                }
            }
        })
    };
    let wakes = Arc::new(AtomicUsize::new(0));
    let mut landed_before_drop = 0usize;
    for i in 0..ROUNDS {
        let waker = Waker::from(Arc::new(CountingWaker(wakes.clone())));
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = reply_channel::<u64>();
        // Registers the waker: the receiver is now "polled", as an HTTP task's is.
        let first = Pin::new(&mut rx).poll(&mut cx);
        assert!(first.is_pending(), "round {i}: answered before it was sent");
        let mut tx = Some(tx);
        while let Some(t) = tx.take() {
            if let Err(t) = handoff.push(t) {
                tx = Some(t);
                std::hint::spin_loop();
            }
        }
        // Drop at varying moments relative to the send on the other thread.
        for _ in 0..(i % 7) * 8 {
            std::hint::spin_loop();
        }
        if i % 3 == 0 {
            if let Poll::Ready(Ok(_)) = Pin::new(&mut rx).poll(&mut cx) {
                landed_before_drop += 1;
            }
        }
        drop(rx);
        drop(waker);
    }
    sender.join().expect("sender thread");
    let (sent, refused) = (
        sent.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    assert_eq!(sent + refused, ROUNDS);
    assert!(landed_before_drop <= sent);
    // Every landed send woke the waker at most once per round.
    assert!(wakes.load(Ordering::Relaxed) <= ROUNDS);
}

/// The same race with the receivers inside tasks of one glommio executor and the sender on
/// another, as the HTTP tasks and the shards are: each reply is awaited through the
/// executor's doorbell (`doorbell::relay`), as theirs are, while the tasks that wait are
/// being dropped. (Without the doorbell the sends would wake and release the tasks' wakers
/// on glommio's foreign path, whose reference count races a task's drop: see `doorbell`.)
#[test]
fn reply_channel_across_glommio_executors_with_receivers_dropped_mid_send() {
    const ROUNDS: usize = 200_000;
    let handoff = Arc::new(crossbeam_queue::ArrayQueue::<Reply<u64>>::new(256));
    let done = Arc::new(AtomicBool::new(false));
    let sender = {
        let (handoff, done) = (handoff.clone(), done.clone());
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("reply-sender")
            .spawn(move || async move {
                let mut sent = 0u64;
                loop {
                    match handoff.pop() {
                        Some(tx) => {
                            let _ = tx.send(sent);
                            sent += 1;
                        }
                        None if done.load(Ordering::Acquire) => return sent,
                        None => futures_lite::future::yield_now().await,
                    }
                }
            })
            .expect("sender executor")
    };
    let receiver = {
        let (handoff, done) = (handoff.clone(), done.clone());
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("reply-receiver")
            .spawn(move || async move {
                let metrics = Arc::new(crate::metrics::ShardMetrics::default());
                let _doorbell =
                    crate::runtime::doorbell::Doorbell::install(metrics.clone()).expect("doorbell");
                // As a shard's nap timer does (`shard::park::MAX_NAP`): ends a sleep of
                // glommio's with a task runnable after a foreign wake it missed (the shard
                // module doc). Without it, under ThreadSanitizer's slowdown, the receiver slept
                // in io_uring for good with its task woken, and the sender spun.
                let naps = glommio::spawn_local(async {
                    loop {
                        glommio::timer::sleep(std::time::Duration::from_millis(2)).await;
                    }
                });
                let mut answered = 0usize;
                for i in 0..ROUNDS {
                    let (tx, rx) = reply_channel::<u64>();
                    let mut tx = Some(tx);
                    while let Some(t) = tx.take() {
                        if let Err(t) = handoff.push(t) {
                            tx = Some(t);
                            futures_lite::future::yield_now().await;
                        }
                    }
                    // The task polls the receiver (registering its waker) and is dropped
                    // at once or after a few turns, often while the send is under way.
                    let task = glommio::spawn_local(async move {
                        crate::runtime::doorbell::relay(rx).await.is_ok()
                    });
                    if i % 2 == 0 {
                        for _ in 0..(i % 5) {
                            futures_lite::future::yield_now().await;
                        }
                        drop(task);
                    } else if task.await {
                        answered += 1;
                    }
                }
                done.store(true, Ordering::Release);
                drop(naps);
                let fallbacks = metrics
                    .doorbell_fallback_wakes_total
                    .load(Ordering::Relaxed);
                (answered, fallbacks)
            })
            .expect("receiver executor")
    };
    let (answered, fallbacks) = receiver.join().expect("receiver executor ran");
    let sent = sender.join().expect("sender executor ran");
    assert_eq!(sent as usize, ROUNDS);
    assert_eq!(answered, ROUNDS / 2, "every awaited reply arrived");
    assert_eq!(fallbacks, 0, "every wake came through the doorbell");
}

fn letter(key: &str, body_bytes: usize) -> DeadInfo {
    DeadInfo::without_body(key, 1, UtcMicros(1), body_bytes)
}

/// The parts cover the page in order, each letter once; every part keeps within the
/// budget, except a part of one letter larger than it; and a part ends only where its
/// next letter would not have fitted.
#[test]
fn a_page_is_cut_into_runs_within_the_budget_each_letter_once() {
    let sizes = [0, 300, 700, 1, 1_500, 999, 1_000, 0, 0, 200, 800, 1];
    let page: Vec<DeadInfo> = sizes
        .iter()
        .enumerate()
        .map(|(i, &b)| letter(&format!("k{i:02}"), b))
        .collect();
    let parts = DeadInfo::parts(&page, 1_000);
    let joined: Vec<&str> = parts
        .iter()
        .flat_map(|p| p.iter().map(|l| l.key.as_str()))
        .collect();
    let keys: Vec<&str> = page.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(joined, keys);
    let bytes = |p: &[DeadInfo]| p.iter().map(|l| l.body_bytes).sum::<usize>();
    for (i, p) in parts.iter().enumerate() {
        assert!(!p.is_empty());
        assert!(
            bytes(p) <= 1_000 || p.len() == 1,
            "part {i}: {} bytes",
            bytes(p)
        );
        if let Some(next) = parts.get(i + 1) {
            assert!(
                bytes(p) + next[0].body_bytes > 1_000,
                "part {i} ended early"
            );
        }
    }
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    assert_eq!(lens, [3, 1, 1, 1, 3, 2, 1]);
    assert!(DeadInfo::parts(&[], 1_000).is_empty());
    assert_eq!(DeadInfo::parts(&page, usize::MAX).len(), 1);
}
