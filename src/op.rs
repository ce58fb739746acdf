//! What crosses a ring: the ops a shard applies, and the answers it sends back.
//!
//! Every op that expects an answer carries the sending half of a one-shot channel
//! (`Reply`); the caller keeps the receiving half, on whatever thread or executor it runs.

use crate::error::Error;
use crate::quota::QuotaSlot;
use crate::timer::PackedTimer;
use crate::units::{Deadline, UtcMicros};

/// The sending half of a one-shot reply channel: the shard answers an op through it.
///
/// `futures-channel`'s oneshot: the receiver may sit on another thread (a caller blocked in
/// `Handle::schedule`, or an HTTP task on another shard's executor), and a receiver that was
/// polled may be dropped while the shard sends (hyper drops a request's future when its client
/// goes away). The channel's waker slot is taken under its lock and woken only after it has
/// been moved out, so a send racing a drop wakes a live waker or none (the stress tests at the
/// end of this file race the two millions of times, across plain threads and across glommio
/// executors).
pub(crate) type Reply<T> = futures_channel::oneshot::Sender<T>;

/// A reply channel for an op: the sender travels in the op, the receiver stays with the caller.
pub(crate) fn reply_channel<T>() -> (Reply<T>, futures_channel::oneshot::Receiver<T>) {
    futures_channel::oneshot::channel()
}

/// A request for the owning shard.
pub(crate) enum Op {
    Schedule {
        timer: PackedTimer,
        deadline: Deadline,
        reply: Option<Reply<Result<Scheduled, Error>>>,
        /// A quota slot the caller already took for this timer (see `quota`).
        slot: Option<QuotaSlot>,
        /// Packed on the owning shard's own thread (an HTTP request that landed on the key's
        /// owner): its allocation is the shard's already, and the wheel keeps it as it is.
        home: bool,
    },
    Cancel {
        timer: PackedTimer,
        reply: Reply<Result<Cancelled, Error>>,
    },
    /// A schedule with terms (a condition, a debounce): boxed, so that the plain schedule's
    /// op, the hot path's, keeps its size.
    Guarded(Box<Guarded>),
    /// Cancels the pending timer under (tenant, key) only if its version is `version`.
    CancelIf {
        timer: PackedTimer,
        version: u64,
        reply: Reply<Result<Cancelled, Error>>,
    },
    Get {
        timer: PackedTimer,
        reply: Reply<Result<Option<TimerInfo>, Error>>,
    },
    /// The shard's dead letters of `tenant`, by key, after `after` and up to `through`
    /// (inclusive), at most `limit`; with their metadata and payloads only when `bodies`.
    DeadList {
        tenant: String,
        after: Option<String>,
        through: Option<String>,
        limit: usize,
        bodies: bool,
        reply: Reply<Result<Vec<DeadInfo>, Error>>,
    },
    /// A step of a listing: the shard's pending timers that `query` picks, looked for in the
    /// slab entries from `from` on, a bounded step of them at a time.
    ListTimers {
        query: std::sync::Arc<ListQuery>,
        from: u32,
        reply: Reply<Result<Listing, Error>>,
    },
    /// Re-drives the dead letter under (tenant, key): pending again, due now, a fresh budget.
    DeadRedrive {
        timer: PackedTimer,
        reply: Reply<Result<Scheduled, Error>>,
    },
    /// Discards the dead letter under (tenant, key).
    DeadDiscard {
        timer: PackedTimer,
        reply: Reply<Result<Cancelled, Error>>,
    },
}

impl Op {
    /// The timer an op names by (tenant, key): every op but a dead-letter listing.
    pub fn keyed(&self) -> Option<&PackedTimer> {
        match self {
            Op::Schedule { timer, .. }
            | Op::Cancel { timer, .. }
            | Op::CancelIf { timer, .. }
            | Op::Get { timer, .. }
            | Op::DeadRedrive { timer, .. }
            | Op::DeadDiscard { timer, .. } => Some(timer),
            Op::Guarded(g) => Some(&g.timer),
            Op::DeadList { .. } | Op::ListTimers { .. } => None,
        }
    }

    /// Answers the op with `e` without applying it (a shard that is stopping, or a store that
    /// cannot take it). A detached schedule has no one to answer: it is logged.
    pub fn refuse(self, e: Error) {
        match self {
            Op::Schedule {
                reply: Some(tx), ..
            } => {
                let _ = tx.send(Err(e));
            }
            Op::Schedule {
                reply: None, timer, ..
            } => {
                tracing::warn!(timer = ?timer, error = %e, "detached schedule refused");
            }
            Op::Cancel { reply, .. } | Op::CancelIf { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::Guarded(g) => {
                let _ = g.reply.send(Err(e));
            }
            Op::Get { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadList { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::ListTimers { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadRedrive { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadDiscard { reply, .. } => {
                let _ = reply.send(Err(e));
            }
        }
    }
}

/// A schedule with terms: what a conditional or debounced PUT asks beyond an upsert.
pub(crate) struct Guarded {
    pub timer: PackedTimer,
    pub deadline: Deadline,
    pub terms: Terms,
    pub reply: Reply<Result<Scheduled, Error>>,
    /// A quota slot the caller already took for this timer (see `quota`).
    pub slot: Option<QuotaSlot>,
    /// Packed on the owning shard's own thread (see `Op::Schedule`).
    pub home: bool,
}

/// What a schedule asks beyond an upsert (docs/API.md, "Conditional writes" and "Debounce").
/// The owning shard checks it against its table in the same step as the write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terms {
    /// Applied only when the key is in this state.
    pub cond: Option<Condition>,
    /// Debounce: the deadline is never later than the burst's first arming plus this many
    /// microseconds.
    pub max_wait_us: Option<u64>,
}

impl Terms {
    /// Nothing beyond an upsert.
    pub fn is_plain(&self) -> bool {
        self.cond.is_none() && self.max_wait_us.is_none()
    }
}

/// The state a conditional write needs the key in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// No timer pending under the key (`"if": "absent"`).
    Absent,
    /// A timer pending under the key with this version (`"if_version": V`).
    Version(u64),
}

/// Which pending timers a listing picks: `tenant`'s, whose key starts with `prefix` and comes
/// after `after`, the first `limit` by key; with their payloads when `payloads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub tenant: String,
    pub prefix: String,
    pub after: Option<String>,
    pub limit: usize,
    pub payloads: bool,
}

impl ListQuery {
    /// Whether the listing picks `timer`.
    pub fn picks(&self, timer: &PackedTimer) -> bool {
        timer.tenant() == self.tenant
            && timer.key().starts_with(&self.prefix)
            && self.after.as_deref().is_none_or(|a| timer.key() > a)
    }
}

/// A step's answer: the first timers it picked, by key, and the slab entry to go on from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub timers: Vec<Listed>,
    /// `None` once the step reached the end of the shard's slab.
    pub next: Option<u32>,
}

/// A pending timer as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    /// Its own deadline, as `GET` shows it.
    pub fire_at_us: u64,
    pub version: u64,
    /// Empty unless the listing asked for payloads.
    pub payload: Vec<u8>,
}

impl Listed {
    /// Keeps the first `limit` of `timers` by key, each key once.
    pub fn keep_first(timers: &mut Vec<Listed>, limit: usize) {
        timers.sort_by(|a, b| a.key.cmp(&b.key));
        timers.dedup_by(|a, b| a.key == b.key);
        timers.truncate(limit);
    }
}

/// A change of which partitions a shard may act on, from the node's loop (`cluster`), pushed
/// beside the ring's ops ([`crate::ring::Ring::control`]). Only a shard handed the lease
/// holders receives them.
pub(crate) enum Control {
    /// The partition's records, read after its lease was gained: they replace whatever of the
    /// partition the shard holds, and the shard acts on it from then on. With them, the
    /// partition's version floor: the highest version any owner wrote there, which the
    /// shard's next versions are above (`cluster::load::Read::floor`).
    Load(Vec<Loaded>, u64),
    /// The lease is gone: the shard forgets the partition's timers and dead letters, without
    /// firing or deleting anything in the store.
    Drop,
}

/// A record of a partition being loaded, as recovery inserts it: a pending timer, or a dead
/// letter (its metadata says which).
pub(crate) struct Loaded {
    pub timer: PackedTimer,
    pub version: u64,
    pub deadline: UtcMicros,
}

/// The answer to a schedule (upsert).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub version: u64,
    pub deadline: UtcMicros,
    /// A pending timer under the same key was replaced (HTTP 200 rather than 201).
    pub replaced: bool,
}

/// The answer to a cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// The pending timer was removed; it will not fire.
    Cancelled { version: u64, deadline: UtcMicros },
    /// No timer is pending under that key: unknown, already fired, or already cancelled.
    NotFound,
}

/// A pending timer, as `get` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerInfo {
    pub deadline: UtcMicros,
    pub version: u64,
    /// Delivery metadata (a callback's state; empty without one).
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
}

impl TimerInfo {
    /// What a read answers of `timer`, pending at `deadline` under `version`.
    pub fn of(timer: &PackedTimer, deadline: UtcMicros, version: u64) -> TimerInfo {
        TimerInfo {
            deadline,
            version,
            meta: timer.meta().to_vec(),
            payload: timer.payload().to_vec(),
        }
    }
}

/// A dead letter, as the dead-letter list shows it. How its delivery ended (attempts, last
/// status or error, callback) was read from its final delivery metadata once, when the letter
/// was made, under the names the store records it by (`store::DeadLetter`). A listing of keys
/// only leaves everything after `fire_at` empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadInfo {
    pub key: String,
    pub version: u64,
    /// The timer's own deadline.
    pub fire_at: UtcMicros,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's answer, when it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt got no answer, when it got none.
    pub last_error: Option<String>,
    /// The callback's URL (`None` when the metadata could not be read).
    pub callback: Option<String>,
    /// Its final delivery metadata, verbatim.
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
    /// The bytes a listing with bodies copies for this letter (metadata, payload, error and
    /// callback), given with or without the body, so that a listing can ask for bodies in
    /// parts of bounded size.
    pub body_bytes: usize,
}

impl DeadInfo {
    /// A letter as a listing of keys shows it: everything after `fire_at` empty.
    pub(crate) fn without_body(
        key: &str,
        version: u64,
        fire_at: UtcMicros,
        body_bytes: usize,
    ) -> DeadInfo {
        DeadInfo {
            key: key.to_string(),
            version,
            fire_at,
            attempts: 0,
            last_status: None,
            last_error: None,
            callback: None,
            meta: Vec::new(),
            payload: Vec::new(),
            body_bytes,
        }
    }

    /// The page cut into consecutive runs of letters whose bodies take at most `budget` bytes
    /// together; a letter larger than `budget` is a run of its own.
    pub(crate) fn parts(page: &[DeadInfo], budget: usize) -> Vec<&[DeadInfo]> {
        let mut parts = Vec::new();
        let (mut start, mut bytes) = (0, 0usize);
        for (i, letter) in page.iter().enumerate() {
            if i > start && bytes.saturating_add(letter.body_bytes) > budget {
                parts.push(&page[start..i]);
                (start, bytes) = (i, 0);
            }
            bytes = bytes.saturating_add(letter.body_bytes);
        }
        if start < page.len() {
            parts.push(&page[start..]);
        }
        parts
    }
}

#[cfg(test)]
mod tests {
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
                    let _doorbell = crate::runtime::doorbell::Doorbell::install(metrics.clone())
                        .expect("doorbell");
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
}
