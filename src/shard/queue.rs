//! The shard's part of the pull queues (`crate::queue`): a queued message is a timer of this
//! shard's table whose metadata is a `queue::Message`; this file holds the message's
//! transitions and the index that finds ready messages by tenant without walking the table.
//!
//! | transition | function | store | quota |
//! |---|---|---|---|
//! | fired, no callback, queue on → ready | [`enqueued`] (from `fire.rs`, settled by `Settle::fate`) | `fired_kept` | held |
//! | leased or delayed, at its deadline → ready; leased `max_receives` times, or ready past its tenant's retention → dead | [`message_fired`] | `schedule`, `dead` | held |
//! | ready → leased | [`Shard::queue_receive`] | `schedule` | held |
//! | leased → acked | [`Shard::queue_settle`] | `cancel` | released (`fate::release`) |
//! | leased → nacked (ready, delayed, or dead at `max_receives`), extended | [`Shard::queue_settle`] | `schedule`, `dead` | held |
//! | dead → re-driven (delayed, due now) | `Shard::redrive` (`fate.rs`) | `redrive` | moves with it |
//!
//! A receive and a settle answer only once their writes are durable
//! (`Store::answer_after_writes`): an acked message never comes back after a crash, and a
//! leased one comes back at its deadline, from the store's record, like any timer.
//!
//! Ready messages are found through the shard's ready index (`ready.rs`).
//!
//! Each transition bumps its tenant's counter (`QueueFigures`, `/metrics`): one relaxed add,
//! the only cost the figures put on a fire.
//!
//! Cost: a receive is a pop, a table lookup and a re-arm per message; a settle is a lookup and
//! a re-arm or removal. A count (`GET /v1/queues/{tenant}`, a scrape) reads the index's
//! lengths, exact with no walk ([`Shard::queue_lengths`]).

use super::fate::release;
use super::Shard;
use crate::clock::TimeSource;
use crate::error::Error;
use crate::op::{Reply, Scheduled};
use crate::queue::{
    Message, MessageState, PullQueues, QueueCounts, QueueFigures, Received, Settled, Settlement,
    DEFAULT_MAX_RECEIVES,
};
use crate::sink::Next;
use crate::store::Ack;
use crate::timer::{sink_meta, FiredTimer, Firing, PackedTimer};
use crate::units::UtcMicros;
use crate::wheel::TimerTable;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// The message a fired timer enters its tenant's queue as, when it is its own firing, it has
/// no callback, and its tenant's queue is on: kept for its tenant's retention, ready.
pub(super) fn enqueued(shared: &PullQueues, f: &FiredTimer<'_>) -> Option<Next> {
    if f.firing != Firing::Own || !sink_meta(f.meta).is_empty() {
        return None;
    }
    let settings = shared.settings(f.tenant)?;
    let m = Message::queued(f.deadline.0, f.fired_at.as_micros().0);
    Some(Next::Reschedule {
        after: settings.retention,
        meta: m.encode(),
    })
}

/// Counts `n` on `tenant`'s counter `which` picks, if its queue is on.
fn count(shared: &PullQueues, tenant: &str, which: fn(&QueueFigures) -> &AtomicU64, n: u64) {
    if let Some(f) = shared.figures(tenant) {
        QueueFigures::count(which(f), n);
    }
}

/// What becomes of a message whose deadline came (see the module's table).
pub(super) fn message_fired(shared: &PullQueues, f: &FiredTimer<'_>, m: Message) -> Next {
    let dead = Next::Dead {
        meta: m.encode(),
        fire_at: UtcMicros(m.fire_at_us),
    };
    let max = shared
        .max_receives(f.tenant)
        .unwrap_or(DEFAULT_MAX_RECEIVES);
    let now = f.fired_at.as_micros().0;
    if m.state == MessageState::Leased {
        count(shared, f.tenant, |q| &q.expired, 1);
    }
    let ready = Message {
        state: MessageState::Ready,
        ..m
    };
    let left = ready
        .expires_at_us(shared.retention_us(f.tenant))
        .saturating_sub(now);
    // A ready message fires at the end of its retention; one still young (its tenant's
    // retention grew across a restart) is kept to its new end.
    if left == 0 || (m.state == MessageState::Leased && m.receive_count >= max) {
        count(shared, f.tenant, |q| &q.dead, 1);
        return dead;
    }
    Next::Reschedule {
        after: std::time::Duration::from_micros(left),
        meta: ready.encode(),
    }
}

/// The message a ready index entry names, if it is still there and ready under that version
/// (an entry is a hint: `ready.rs`).
fn ready_at(table: &TimerTable, tenant: &str, key: &str, version: u64) -> Option<Message> {
    message_at(table, tenant, key)
        .filter(|(m, v, _)| *v == version && m.state == MessageState::Ready)
        .map(|(m, ..)| m)
}

/// The message under (tenant, key) in `table`, if it is one, with its version and deadline.
fn message_at(table: &TimerTable, tenant: &str, key: &str) -> Option<(Message, u64, UtcMicros)> {
    let probe = PackedTimer::new(tenant, key, &[])?;
    let v = table.get(probe.identity())?;
    Some((Message::decode(v.timer.meta())?, v.version, v.deadline))
}

impl<S: TimeSource> Shard<S> {
    /// Receives up to `max` of `tenant`'s ready messages, oldest first, each leased until
    /// `visibility_ms` from now; answered once the leases are durable.
    pub(super) fn queue_receive(
        &mut self,
        tenant: &str,
        max: usize,
        visibility_ms: u64,
        reply: Reply<Result<Vec<Received>, Error>>,
    ) {
        if let Err(e) = self.store.admit(tenant) {
            let _ = reply.send(Err(e));
            return;
        }
        let now = self.clock.now().as_micros();
        let deadline = now.saturating_add_micros(visibility_ms.saturating_mul(1000));
        let mut got = Vec::new();
        while got.len() < max {
            let Some((key, version)) = self
                .queues
                .ready
                .get_mut(tenant)
                .and_then(|q| q.pop_front())
            else {
                break;
            };
            let Some(m) = ready_at(&self.table, tenant, &key, version) else {
                self.queues.popped_stale(tenant);
                continue;
            };
            self.queues.next_lease += 1;
            let leased = Message {
                state: MessageState::Leased,
                receive_count: m.receive_count.saturating_add(1),
                lease: self.queues.next_lease,
                ..m
            };
            let Some(payload) = self.rearm(tenant, &key, version, leased, deadline, Ack::None)
            else {
                continue;
            };
            self.queues.made_out(tenant, &key, false);
            got.push(Received {
                key: key.into(),
                version,
                lease: leased.lease,
                fire_at_us: m.fire_at_us,
                fired_at_us: m.fired_at_us,
                receive_count: leased.receive_count,
                payload,
            });
        }
        if !got.is_empty() {
            count(
                &self.queues.shared,
                tenant,
                |q| &q.received,
                got.len() as u64,
            );
        }
        if self
            .queues
            .ready
            .get(tenant)
            .is_some_and(VecDeque::is_empty)
        {
            self.queues.index_emptied(tenant);
        }
        let ack = Ack::Then(Box::new(move |r| {
            let _ = reply.send(r.map(|()| got));
        }));
        self.store.answer_after_writes(tenant, ack);
    }

    /// Acks, nacks or extends the message under `timer`'s (tenant, key) if it is still leased
    /// as `version` and `lease` and its lease has not passed; `Settled::LeaseExpired` if not.
    /// Answered once the change is durable.
    pub(super) fn queue_settle(
        &mut self,
        timer: &PackedTimer,
        (version, lease): (u64, u64),
        how: Settlement,
        reply: Reply<Result<Settled, Error>>,
    ) {
        let (tenant, key) = (timer.tenant(), timer.key());
        let now = self.clock.now().as_micros();
        let leased = message_at(&self.table, tenant, key).filter(|(m, v, deadline)| {
            *v == version && m.state == MessageState::Leased && m.lease == lease && *deadline > now
        });
        let Some((m, _, _)) = leased else {
            let ack = Ack::Then(Box::new(move |r| {
                let _ = reply.send(r.map(|()| Settled::LeaseExpired));
            }));
            self.store.answer_after_writes(tenant, ack);
            return;
        };
        if let Err(e) = self.store.admit(tenant) {
            let _ = reply.send(Err(e));
            return;
        }
        let ack = Ack::Then(Box::new(move |r| {
            let _ = reply.send(r.map(|()| Settled::Done));
        }));
        let shared = &self.queues.shared;
        let max = shared.max_receives(tenant).unwrap_or(DEFAULT_MAX_RECEIVES);
        let expires_at_us = m.expires_at_us(shared.retention_us(tenant));
        match how {
            Settlement::Ack => count(shared, tenant, |q| &q.acked, 1),
            Settlement::Nack { .. } => count(shared, tenant, |q| &q.nacked, 1),
            Settlement::Extend { .. } => {}
        }
        let ms = |ms: u64| now.saturating_add_micros(ms.saturating_mul(1000));
        if !matches!(how, Settlement::Extend { .. }) {
            self.queues.settled(tenant, key);
        }
        match how {
            Settlement::Ack => {
                if self.table.cancel(timer.identity()).is_some() {
                    self.store.cancel(tenant, key, ack);
                    release(&self.quotas, tenant);
                }
            }
            Settlement::Extend { visibility_ms } => {
                self.rearm(tenant, key, version, m, ms(visibility_ms), ack);
            }
            Settlement::Nack { .. } if m.receive_count >= max || expires_at_us <= now.0 => {
                count(&self.queues.shared, tenant, |q| &q.dead, 1);
                let dead = Message {
                    state: MessageState::Ready,
                    ..m
                };
                if let Some((_, record)) = self.table.cancel(timer.identity()) {
                    let payload = record.timer.payload();
                    if let Some(l) = PackedTimer::with_meta(tenant, key, &dead.encode(), payload) {
                        self.bury(l, version, UtcMicros(m.fire_at_us));
                    }
                }
                self.store.answer_after_writes(tenant, ack);
            }
            Settlement::Nack { delay_ms: 0 } => {
                let ready = Message {
                    state: MessageState::Ready,
                    ..m
                };
                let at = UtcMicros(expires_at_us);
                if self.rearm(tenant, key, version, ready, at, ack).is_some() {
                    self.queues.made_ready(tenant, key, version);
                }
            }
            Settlement::Nack { delay_ms } => {
                let delayed = Message {
                    state: MessageState::Delayed,
                    ..m
                };
                if self
                    .rearm(tenant, key, version, delayed, ms(delay_ms), ack)
                    .is_some()
                {
                    self.queues.made_out(tenant, key, true);
                }
            }
        }
        self.metrics
            .pending
            .store(self.pending() as u64, Ordering::Relaxed);
    }

    /// Puts the message under (tenant, key) back in the table as `m`, due at `deadline`, and
    /// has the store write it, answering `ack`; its payload, or `None` (and `ack` answered
    /// with an error) if the table could not take it.
    fn rearm(
        &mut self,
        tenant: &str,
        key: &str,
        version: u64,
        m: Message,
        deadline: UtcMicros,
        ack: Ack,
    ) -> Option<Vec<u8>> {
        let probe = PackedTimer::new(tenant, key, &[])?;
        let payload = self.table.get(probe.identity())?.timer.payload().to_vec();
        let new = PackedTimer::with_meta(tenant, key, &m.encode(), &payload)?;
        match self.table.insert_with_version(new, deadline, version) {
            Ok(u) => {
                let s = Scheduled {
                    version,
                    deadline,
                    replaced: true,
                };
                if let Some(t) = self.table.timer_at(u.slot) {
                    self.store.schedule(t, &s, ack);
                }
                Some(payload)
            }
            Err(e) => {
                let e = self.upsert_error(e, deadline);
                tracing::error!(shard = self.id, tenant, key, error = %e, "a queued message could not be re-armed");
                ack.answer(Err(e));
                None
            }
        }
    }

    /// The shard's figures of `tenant`'s messages, exact, from the index's lengths with no
    /// walk (`ready.rs`): the oldest ready message is the one at the head of the ready index
    /// (ready longest) once the entries there that moved on are dropped.
    pub(super) fn queue_lengths(&mut self, tenant: &str) -> QueueCounts {
        let table = &self.table;
        let mut oldest = None;
        let mut dropped = 0;
        if let Some(q) = self.queues.ready.get_mut(tenant) {
            while let Some((key, version)) = q.front() {
                if let Some(m) = ready_at(table, tenant, key, *version) {
                    oldest = Some(m.queued_at_us);
                    break;
                }
                q.pop_front();
                dropped += 1;
            }
        }
        for _ in 0..dropped {
            self.queues.popped_stale(tenant);
        }
        let (ready, in_flight, delayed) = self.queues.lengths(tenant);
        QueueCounts {
            ready,
            in_flight,
            delayed,
            oldest_queued_at_us: oldest,
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
