//! The durable-store core: what the journal and the Redis store do alike, around an outbox
//! each of them fills in its own format.
//!
//! Both stores keep, on the shard's thread, the same things next to their own: the shard's
//! id and count, the outbox of writes not yet durable (whose acks are `acks.rs`'s [`Acks`]),
//! the event that wakes the store's task, the closing flag, the shard's metrics, and the
//! limits their configurations set (ack timeout, `Retry-After`, the outbox's bounds). They
//! also answer the shard's hooks the same way: admission against the outbox's room and the
//! tenant's share, the refusal, the per-pass stamp and ack-timeout sweep, the room for fires
//! and the pause in firing. [`Durable`] holds those fields and answers those hooks once; each
//! store's `Store` impl forwards to it and keeps only what is its own (the journal's health and
//! version lease, Redis's connection and streams).
//!
//! Each store's shared state (`journal::ShardJournal`, `redis::RedisLink`) embeds a
//! `Durable` and dereferences to it, so that the store and its tasks read `shared.outbox` or
//! `shared.shard` whichever part holds them: a plain struct, generic only over the outbox,
//! reads more simply than a trait of accessors, and the tasks' code does not change.

use super::acks::{Acks, Room};
use crate::error::{Error, Result};
use crate::metrics::{ShardMetrics, StoreMetrics};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ops a shard applies per pass on a durable store: short passes, so that the store's task
/// (on the same executor) runs between them instead of after a 4,096-op pass.
pub const OPS_PER_PASS: usize = 512;

/// What a store's configuration sets for its outbox and its callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Writes the outbox holds before durable registrations are refused.
    pub max_buffered: usize,
    /// Writes no caller waits for (fires among them) before the shard holds due timers back.
    pub max_buffered_fires: usize,
    /// Longest a durable schedule or cancel waits before `StoreUnavailable`.
    pub ack_timeout: Duration,
    /// The `Retry-After` a refused durable write suggests, in seconds.
    pub retry_after_s: u64,
}

/// An outbox as the core sees it: a queue of writes whose acks are an [`Acks`], one per
/// write, in the same order.
pub trait Queue {
    fn acks(&self) -> &Acks;

    fn acks_mut(&mut self) -> &mut Acks;
}

/// Implements [`Queue`] for an outbox that keeps its acks in its field `acks`.
macro_rules! queue_with_acks_field {
    ($outbox:ty) => {
        impl $crate::store::durable::Queue for $outbox {
            fn acks(&self) -> &$crate::store::acks::Acks {
                &self.acks
            }

            fn acks_mut(&mut self) -> &mut $crate::store::acks::Acks {
                &mut self.acks
            }
        }
    };
}
pub(crate) use queue_with_acks_field;

/// The fields and hooks both durable stores share (see the module doc).
pub(crate) struct Durable<O> {
    pub shard: usize,
    pub shards: usize,
    pub outbox: RefCell<O>,
    /// Wakes the store's task: writes wait, or the store closes.
    pub wake: event_listener::Event,
    pub closing: Cell<bool>,
    pub metrics: Arc<ShardMetrics>,
    pub limits: Limits,
}

impl<O: Queue> Durable<O> {
    /// The core of shard `shard` of `shards`, with an empty outbox made by `outbox` from the
    /// limits (`limit`, `fire_limit`, `ack_timeout`).
    pub fn new(
        limits: Limits,
        shard: usize,
        shards: usize,
        metrics: Arc<ShardMetrics>,
        outbox: impl FnOnce(usize, usize, Duration) -> O,
    ) -> Durable<O> {
        Durable {
            shard,
            shards,
            outbox: RefCell::new(outbox(
                limits.max_buffered,
                limits.max_buffered_fires,
                limits.ack_timeout,
            )),
            wake: event_listener::Event::new(),
            closing: Cell::new(false),
            metrics,
            limits,
        }
    }

    pub fn m(&self) -> &StoreMetrics {
        &self.metrics.store
    }

    /// What a write gets when the store cannot take it.
    pub fn unavailable(&self) -> Error {
        Error::StoreUnavailable {
            retry_after_s: self.limits.retry_after_s,
        }
    }

    /// A write refused for want of the store (counted).
    pub fn refuse(&self) -> Error {
        StoreMetrics::count(&self.m().refused_total, 1);
        self.unavailable()
    }

    pub fn ack_timeout(&self) -> Duration {
        self.limits.ack_timeout
    }

    /// `Ok` when one more durable write of `tenant` fits in the outbox; else the refusal,
    /// counted (`Acks::admit`).
    pub fn admit(&self, tenant: &str) -> Result<()> {
        let outbox = self.outbox.borrow();
        outbox
            .acks()
            .admit(tenant, self.shard, self.m(), || self.unavailable())
    }

    /// Whether [`Durable::admit`] would admit one more write of `tenant` now; nothing counted.
    pub fn has_room(&self, tenant: &str) -> bool {
        matches!(self.outbox.borrow().acks().room_for(tenant), Room::Yes)
    }

    /// Stamps the writes of the pass the shard is about to apply (one clock read a pass).
    pub fn begin_pass(&self) {
        self.outbox.borrow_mut().acks_mut().stamp();
    }

    /// Tells the store's task that writes are waiting, and answers `StoreUnavailable` to
    /// callers past the ack timeout (`Acks::after_pass`), so that no caller waits much longer
    /// than it, even while the task is stuck on the disk or on Redis. The shard passes at
    /// least every 100 ms (its clock anchor is a deadline of its own), and a shard its
    /// executor failed to wake is woken by the watchdog within about 10 ms of that
    /// (`runtime::watchdog`); the store's task also answers expired callers whenever it runs.
    /// So a caller waits at most the ack timeout plus about 110 ms.
    pub fn after_pass(&self) {
        let mut outbox = self.outbox.borrow_mut();
        outbox
            .acks_mut()
            .after_pass(self.m(), self.limits.retry_after_s, &self.wake);
    }

    /// How many more fires the outbox takes before the shard must hold due timers back.
    pub fn fire_room(&self) -> usize {
        self.outbox.borrow().acks().fire_room()
    }

    /// Publishes whether the shard holds due timers back; a pause is counted, and logged
    /// with `why`, once when it begins, not per pass.
    pub fn fires_held(&self, held: bool, why: &str) {
        let m = self.m();
        let was = m.fires_held.swap(u64::from(held), Ordering::Relaxed);
        if held && was == 0 {
            StoreMetrics::count(&m.fire_pauses_total, 1);
            tracing::warn!(
                shard = self.shard,
                limit = self.limits.max_buffered_fires,
                "{why}"
            );
        }
    }

    /// Answers `StoreUnavailable` to the callers past the ack timeout (counted); their
    /// writes stay queued.
    pub fn expire(&self) {
        self.expire_in(self.outbox.borrow_mut().acks_mut());
    }

    /// [`Durable::expire`], with the outbox's acks already borrowed.
    pub fn expire_in(&self, acks: &mut Acks) {
        let n = acks.expire(Instant::now(), self.limits.retry_after_s);
        if n > 0 {
            StoreMetrics::count(&self.m().ack_timeouts_total, n);
        }
    }

    /// Sleeps one backoff step (answering timed-out callers meanwhile) and doubles it, up to
    /// `max` (see `acks::pause`).
    pub async fn pause(&self, backoff: &mut Duration, max: Duration) {
        super::acks::pause(backoff, max, || self.closing.get(), || self.expire()).await;
    }

    /// Starts closing: the store's task is told to write what it can and stop. The instant
    /// by which `close` gives up: one ack timeout from now.
    pub fn begin_close(&self) -> Instant {
        self.closing.set(true);
        self.wake.notify(usize::MAX);
        Instant::now() + crate::units::capped(self.limits.ack_timeout)
    }
}
