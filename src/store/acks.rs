//! The acknowledgements a store owes, in the order the shard made the writes.
//!
//! Every durable store keeps its writes in an outbox until they are durable: the Redis store
//! as commands, the journal as encoded records. Next to them, in the same order, sit the
//! callers' [`Ack`]s. This module owns that second queue and what goes with it, so both stores
//! keep one set of rules:
//!
//! - an ack leaves only from the front, when the write it stands for is durable (answered
//!   `Ok`) or given up for good (answered with the error);
//! - schedules and cancels are admitted while fewer than `limit` writes wait; fires are never
//!   refused (each stands for a timer already admitted), but the shard stops firing while
//!   `fire_limit` fires wait ([`Acks::fire_room`]);
//! - a tenant's share: the writes a caller waits for are counted per tenant (in the share
//!   buckets of `quota.rs`), and a tenant whose writes hold a quarter of `limit` is refused
//!   ([`Room::OverShare`]) while others are still admitted. So when the store falls behind
//!   (a slow disk, a Redis failover), one tenant's churn can take at most a quarter of its
//!   room, and it takes four flooding tenants to fill it for everyone;
//! - a caller that waited past the ack timeout is answered `StoreUnavailable` and its write
//!   stays queued: "not acknowledged" allows either outcome ([`Acks::expire`]).
//!
//! Cost: one push per write, onto fixed chunks that never move (`store::deque`); the queue
//! time is stamped once per shard pass.

use super::Ack;
use crate::error::Error;
use crate::metrics::StoreMetrics;
use crate::store::deque::Deque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct Owed {
    ack: Ack,
    queued: Instant,
    fire: bool,
    /// The share bucket it is counted in: a write a caller waited for when it was queued.
    share: Option<u8>,
}

/// Whether one more schedule or cancel of a tenant fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    Yes,
    /// `limit` writes wait.
    Full,
    /// The tenant's writes hold this many places: its quarter of `limit`.
    OverShare(usize),
}

pub struct Acks {
    owed: Deque<Owed>,
    limit: usize,
    /// Waited-for writes per share bucket, and how many one bucket may hold.
    shares: Box<[u32]>,
    share: usize,
    fire_limit: usize,
    ack_timeout: Duration,
    /// Entries before this index have had their ack timeout checked (and maybe answered).
    checked: usize,
    /// The instant stamped on new entries: taken once per pass of the shard (`stamp`).
    now: Instant,
    /// Fires among the entries.
    fires: usize,
}

impl Acks {
    pub fn new(limit: usize, fire_limit: usize, ack_timeout: Duration) -> Acks {
        Acks {
            owed: Deque::new(),
            limit,
            shares: vec![0; crate::quota::SHARE_BUCKETS].into_boxed_slice(),
            share: (limit / 4).max(1),
            fire_limit,
            ack_timeout,
            checked: 0,
            now: Instant::now(),
            fires: 0,
        }
    }

    /// Writes waiting to be durable.
    pub fn len(&self) -> usize {
        self.owed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// Takes the queue time for the writes of the coming pass.
    pub fn stamp(&mut self) {
        self.now = Instant::now();
    }

    /// Whether one more schedule or cancel of `tenant` fits.
    pub fn room_for(&self, tenant: &str) -> Room {
        if self.owed.len() >= self.limit {
            return Room::Full;
        }
        let held = self.shares[usize::from(crate::quota::share_bucket(tenant))];
        if held as usize >= self.share {
            return Room::OverShare(self.share);
        }
        Room::Yes
    }

    /// `Ok` when one more schedule or cancel of `tenant` fits; else the refusal, counted in
    /// `m`: `unavailable()` when `limit` writes wait, `StoreShare` when the tenant holds its
    /// share of them.
    pub fn admit(
        &self,
        tenant: &str,
        shard: usize,
        m: &StoreMetrics,
        unavailable: impl FnOnce() -> Error,
    ) -> Result<(), Error> {
        match self.room_for(tenant) {
            Room::Yes => Ok(()),
            Room::Full => {
                StoreMetrics::count(&m.refused_total, 1);
                Err(unavailable())
            }
            Room::OverShare(share) => {
                StoreMetrics::count(&m.share_refused_total, 1);
                Err(Error::StoreShare { shard, share })
            }
        }
    }

    /// How many more fires fit before the shard must hold due timers back.
    pub fn fire_room(&self) -> usize {
        self.fire_limit.saturating_sub(self.fires)
    }

    /// Whether a fire waits (fires are written at once: their lateness counts).
    pub fn has_fires(&self) -> bool {
        self.fires > 0
    }

    /// The ack of a write of `tenant` just queued (a fire's, when `fire`). One a caller waits
    /// for counts against the tenant's share until it leaves the queue.
    pub fn push(&mut self, ack: Ack, fire: bool, tenant: &str) {
        debug_assert!(
            self.owed.back().is_none_or(|last| last.queued <= self.now),
            "writes are queued in the order the shard made them (`expire` stops at the first that has time left)"
        );
        self.fires += usize::from(fire);
        let share = ack.is_waiting().then(|| crate::quota::share_bucket(tenant));
        if let Some(b) = share {
            self.shares[usize::from(b)] += 1;
        }
        self.owed.push_back(Owed {
            ack,
            queued: self.now,
            fire,
            share,
        });
        debug_assert!(self.fires <= self.owed.len(), "fires are among the writes");
    }

    /// When the write `skip` places from the front was queued.
    pub fn queued_at(&self, skip: usize) -> Option<Instant> {
        self.owed.get(skip).map(|o| o.queued)
    }

    /// The front write is durable (`Ok`) or given up: answers its caller. False when nothing
    /// was queued.
    pub fn pop(&mut self, outcome: Result<(), Error>) -> bool {
        let Some(o) = self.owed.pop_front() else {
            return false;
        };
        self.checked = self.checked.saturating_sub(1);
        self.fires -= usize::from(o.fire);
        if let Some(b) = o.share {
            self.shares[usize::from(b)] -= 1;
        }
        debug_assert!(
            self.fires <= self.owed.len() && self.checked <= self.owed.len(),
            "fires and checked writes are among the writes"
        );
        o.ack.answer(outcome);
        true
    }

    /// Answers `StoreUnavailable` to callers that waited past the ack timeout; their writes
    /// stay queued. How many were answered.
    pub fn expire(&mut self, now: Instant, retry_after_s: u64) -> u64 {
        let mut answered = 0;
        while let Some(o) = self.owed.get_mut(self.checked) {
            if now.saturating_duration_since(o.queued) < self.ack_timeout {
                break;
            }
            if o.ack.is_waiting() {
                std::mem::replace(&mut o.ack, Ack::None)
                    .answer(Err(Error::StoreUnavailable { retry_after_s }));
                answered += 1;
            }
            self.checked += 1;
        }
        answered
    }

    /// After each pass of the shard: answers callers past the ack timeout (counted) and
    /// publishes how many writes wait; when any do, wakes the store's task through `wake`.
    pub fn after_pass(
        &mut self,
        m: &StoreMetrics,
        retry_after_s: u64,
        wake: &event_listener::Event,
    ) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let expired = self.expire(Instant::now(), retry_after_s);
        if expired > 0 {
            StoreMetrics::count(&m.ack_timeouts_total, expired);
        }
        m.pending_writes.store(n as u64, Ordering::Relaxed);
        wake.notify(1);
    }
}

/// Sleeps one backoff step, calling `tick` at least every 20 ms (so that callers past their
/// ack timeout are answered meanwhile), unless `stop` says to give up; then doubles the step
/// up to `max`. Both saturate: any configured duration is safe here.
pub async fn pause(
    backoff: &mut Duration,
    max: Duration,
    stop: impl Fn() -> bool,
    mut tick: impl FnMut(),
) {
    let until = Instant::now() + crate::units::capped(*backoff);
    while Instant::now() < until && !stop() {
        tick();
        let step = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(20));
        glommio::timer::sleep(step).await;
    }
    *backoff = backoff.saturating_mul(2).min(max);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::op::{reply_channel, Scheduled};

    /// A schedule's ack and the caller's end of its reply (for the stores' tests too).
    pub(crate) fn sched() -> (
        Ack,
        futures_channel::oneshot::Receiver<Result<Scheduled, Error>>,
    ) {
        let (tx, rx) = reply_channel();
        let s = Scheduled {
            version: 1,
            deadline: crate::units::UtcMicros(5),
            replaced: false,
        };
        (Ack::Schedule(tx, s), rx)
    }

    /// A tenant's waited-for writes hold at most a quarter of the room; writes no caller
    /// waits for (fires, detached schedules) do not count against it; a write that leaves
    /// gives its place back.
    #[test]
    fn a_tenant_is_refused_past_its_share_while_another_is_admitted() {
        let mut a = Acks::new(8, 8, Duration::from_secs(2));
        a.push(Ack::None, true, "flood");
        a.push(Ack::None, false, "flood");
        for _ in 0..2 {
            assert_eq!(a.room_for("flood"), Room::Yes);
            a.push(sched().0, false, "flood");
        }
        assert_eq!(a.room_for("flood"), Room::OverShare(2));
        assert_eq!(a.room_for("calm"), Room::Yes);
        let m = StoreMetrics::default();
        let refused = a.admit("flood", 3, &m, || unreachable!("not full"));
        assert_eq!(refused, Err(Error::StoreShare { shard: 3, share: 2 }));
        assert_eq!(m.share_refused_total.load(Ordering::Relaxed), 1);
        for _ in 0..4 {
            a.push(sched().0, false, "calm");
        }
        assert_eq!(a.room_for("calm"), Room::Full);
        // The two detached writes leave first, then the first flood write: its place is back.
        for _ in 0..3 {
            assert!(a.pop(Ok(())));
        }
        assert_eq!(a.room_for("flood"), Room::Yes);
    }

    #[test]
    fn ack_timeout_answers_unavailable_and_keeps_the_write() {
        let mut a = Acks::new(10, 10, Duration::from_millis(0));
        let (ack, rx) = sched();
        a.push(ack, false, "t");
        assert_eq!(a.expire(Instant::now(), 1), 1);
        assert_eq!(
            futures_lite::future::block_on(rx).ok(),
            Some(Err(Error::StoreUnavailable { retry_after_s: 1 }))
        );
        assert_eq!(a.len(), 1);
        assert_eq!(a.expire(Instant::now(), 1), 0, "answered once");
        assert!(a.pop(Ok(())));
        assert!(a.is_empty());
    }

    #[test]
    fn pops_answer_in_order_and_room_counts_writes_and_fires_apart() {
        let mut a = Acks::new(1, 2, Duration::from_secs(2));
        let (ack, rx) = sched();
        a.push(ack, false, "t");
        assert_eq!(a.room_for("t"), Room::Full);
        a.push(Ack::None, true, "t");
        assert_eq!(a.fire_room(), 1);
        assert!(a.has_fires());
        assert!(a.pop(Ok(())));
        assert!(matches!(futures_lite::future::block_on(rx), Ok(Ok(s)) if s.version == 1));
        assert!(a.pop(Ok(())));
        assert_eq!(
            (a.fire_room(), a.has_fires(), a.pop(Ok(()))),
            (2, false, false)
        );
    }

    #[test]
    fn backoff_saturates_whatever_the_configured_maximum() {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .expect("executor");
        let backoff = ex.run(async {
            let mut backoff = Duration::MAX - Duration::from_secs(1);
            pause(&mut backoff, Duration::MAX, || true, || {}).await;
            pause(&mut backoff, Duration::MAX, || true, || {}).await;
            backoff
        });
        assert_eq!(backoff, Duration::MAX);
    }
}
