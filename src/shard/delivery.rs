//! What the shard does for its sinks' deliveries once they are under way: their follow-ups,
//! and the dead letters' re-drives and discards (see `sink::webhook` for the whole flow). A
//! fired timer's own fate (kept, buried or retired) is settled at its fire, in the table's
//! poll (`fire.rs`, `Settle`).
//!
//! All of it goes through the one table and the one store, like an op: a follow-up applies
//! only to the exact state it was meant for; a dead letter leaves the table for
//! `DeadLetters` (`dead.rs`) and the store's `dead`. None of this is refused by the store:
//! like fires, these writes stand for timers that were already admitted.

use super::fire::Settle;
use super::Shard;
use crate::clock::TimeSource;
use crate::cooperate::Slice;
use crate::error::Error;
use crate::metrics::DeliveryMetrics;
use crate::op::{Cancelled, DeadInfo, Reply, Scheduled};
use crate::partition::partition_of;
use crate::sink::webhook::redriven;
use crate::sink::{Followup, Next};
use crate::store::Ack;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;

/// Follow-ups applied between two looks at the pass's slice. One is a table lookup and, for
/// a retry, a copy of the timer's payload (up to 64 KiB) and a store write: tens of
/// microseconds at most, so 32 overrun a 200 µs slice by about its length at worst.
pub(super) const FOLLOW_UP_CHECK: usize = 32;

impl<S: TimeSource> Shard<S> {
    /// Tells the sinks that an op took the timer out of the table, or replaced it: what they
    /// keep for it (a place in a cap's queue) goes.
    pub(super) fn forget_in_sinks(&mut self, timer: &PackedTimer) {
        for sink in self.sinks.iter_mut() {
            sink.forget(timer);
        }
    }

    /// [`Shard::forget_in_sinks`] for the timer in the table's `slot`.
    pub(super) fn forget_replaced(&mut self, slot: u32) {
        if let Some(t) = self.table.timer_at(slot) {
            for sink in self.sinks.iter_mut() {
                sink.forget(t);
            }
        }
    }

    /// At a stop: lets the deliveries under way finish, within the sinks' grace, applying
    /// their follow-ups (so each outcome is written to the store before it closes). Nothing
    /// fires meanwhile. A delivery still under way after the grace stays in flight in the
    /// store; after a restart it is made again, without using up an attempt.
    pub(super) async fn finish_deliveries(&mut self) {
        let grace = self
            .sinks
            .iter()
            .map(|s| s.grace())
            .max()
            .unwrap_or_default();
        let until = std::time::Instant::now() + grace;
        loop {
            self.follow_up(None);
            self.store.after_pass();
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || self.sinks.iter().all(|s| s.in_flight() == 0) {
                break;
            }
            let nap = left.min(std::time::Duration::from_millis(5));
            self.pulse.expect_by(nap);
            glommio::timer::sleep(nap).await;
            self.pulse.running();
        }
        self.follow_up(None);
        self.store.after_pass();
    }

    /// Applies the follow-ups the sinks handed over, in the order they were sent; how many.
    /// One that applying them hands over (a wake passed on) waits for the next pass. A shard
    /// that shares its thread stops once `slice` is over, and the rest wait for the next pass
    /// (which comes at once: a pass that applied some did work). Deliveries that end together
    /// (a burst of attempts timing out at one instant, across tenants) hand over thousands,
    /// each a retry copying its timer's payload: all of them in one go held the thread for
    /// milliseconds.
    pub(super) fn follow_up(&mut self, slice: Option<Slice>) -> usize {
        self.deliveries.inbox.take(&mut self.deliveries.followups);
        let mut n = 0;
        while let Some(f) = self.deliveries.followups.pop_front() {
            self.apply_followup(f);
            n += 1;
            if n % FOLLOW_UP_CHECK == 0 && slice.as_ref().is_some_and(Slice::is_over) {
                break;
            }
        }
        n
    }

    fn apply_followup(&mut self, f: Followup) {
        let identity = f.timer.identity();
        let current = self.table.get(identity);
        // A timer of a partition being purged is gone already, or about to be: a re-armed
        // entry could land below the purge's cursor and escape it (`partitions.rs`).
        let purged = self
            .purging
            .as_ref()
            .is_some_and(|p| p.covers(partition_of(f.timer.tenant(), f.timer.key())));
        if purged
            || !current.is_some_and(|v| v.version == f.version && v.timer.meta() == f.timer.meta())
        {
            // Cancelled, replaced or moved on since: not ours to change. A wake it leaves
            // unused is passed on, so the slot it stood for is not left idle.
            if f.next == Next::Wake {
                for sink in self.sinks.iter_mut() {
                    sink.wake_unused(&f.timer);
                }
            }
            return;
        }
        let payload = match f.next {
            Next::Done => Vec::new(),
            _ => current.map_or_else(Vec::new, |v| v.timer.payload().to_vec()),
        };
        let (tenant, key) = (f.timer.tenant(), f.timer.key());
        match f.next {
            Next::Done => {
                if self.table.cancel(identity).is_some() {
                    self.store.cancel(tenant, key, Ack::None);
                    self.release_quota(tenant);
                }
            }
            Next::Reschedule { after, meta } => {
                let Some(new) = PackedTimer::with_meta(tenant, key, &meta, &payload) else {
                    return;
                };
                let deadline = self.after(after);
                match self.table.insert_with_version(new, deadline, f.version) {
                    Ok(u) => {
                        let s = Scheduled {
                            version: f.version,
                            deadline,
                            replaced: true,
                        };
                        if let Some(t) = self.table.timer_at(u.slot) {
                            self.store.schedule(t, &s, Ack::None);
                        }
                    }
                    Err(e) => {
                        let e = self.upsert_error(e, deadline);
                        tracing::error!(shard = self.id, tenant, key, error = %e, "a webhook retry could not be scheduled");
                    }
                }
            }
            Next::Dead { meta, fire_at } => {
                if self.table.cancel(identity).is_some() {
                    if let Some(letter) = PackedTimer::with_meta(tenant, key, &meta, &payload) {
                        self.bury(letter, f.version, fire_at);
                    }
                }
            }
            Next::Wake => {
                // Due now; the store keeps its later deadline as the safety net.
                let now = self.clock.now().as_micros();
                if let Some(t) = PackedTimer::with_meta(tenant, key, f.timer.meta(), &payload) {
                    let _ = self.table.insert_with_version(t, now, f.version);
                }
            }
        }
        self.metrics
            .pending
            .store(self.pending() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Files a dead letter (already out of the table) with the store, like a fired one
    /// (`Settle::bury`), without a fire.
    fn bury(&mut self, letter: PackedTimer, version: u64, fire_at: UtcMicros) {
        Settle {
            id: self.id,
            store: &mut *self.store,
            quotas: &self.quotas,
            metrics: &self.metrics,
            dead: &mut self.deliveries.dead,
            horizon: self.table.horizon(),
        }
        .bury(letter, version, fire_at, None);
    }

    /// The deadline `after` from now.
    fn after(&self, after: std::time::Duration) -> UtcMicros {
        let us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX);
        self.clock.now().as_micros().saturating_add_micros(us)
    }

    /// The tenant's dead letters in the key range (after, through], at most `limit`.
    pub(super) fn dead_list(
        &self,
        tenant: &str,
        range: (Option<&str>, Option<&str>),
        limit: usize,
        bodies: bool,
    ) -> Vec<DeadInfo> {
        self.deliveries.dead.list(tenant, range, limit, bodies)
    }

    /// Dead letters take room in the shard like pending timers: a new key is refused
    /// (`CapacityExceeded`) while the table's timers and the dead letters together fill the
    /// shard's capacity. A timer that dies moves from one to the other, so a dead letter never
    /// has to be dropped for room.
    pub(super) fn admit_room(&self, timer: &PackedTimer) -> Result<(), Error> {
        let dead = self.deliveries.dead.len();
        let capacity = self.table.capacity();
        if dead > 0
            && self.pending().saturating_add(dead) >= capacity
            && !self.holds(timer.identity())
        {
            return Err(Error::CapacityExceeded {
                shard: self.id,
                capacity,
            });
        }
        Ok(())
    }

    /// Re-drives the dead letter under `timer`'s (tenant, key): pending again, due now, with a
    /// fresh attempt budget and its old version (so the same `Idempotency-Key`).
    pub(super) fn redrive(&mut self, timer: PackedTimer, reply: Reply<Result<Scheduled, Error>>) {
        let (tenant, key) = (timer.tenant(), timer.key());
        let meta = match self.deliveries.dead.get(tenant, key) {
            Some(l) => redriven(l.timer.meta()),
            None => {
                let _ = reply.send(Err(Error::DeadLetterNotFound {
                    tenant: tenant.to_string(),
                    key: key.to_string(),
                }));
                return;
            }
        };
        if self.holds(timer.identity()) {
            let _ = reply.send(Err(Error::TimerPending {
                tenant: tenant.to_string(),
                key: key.to_string(),
            }));
            return;
        }
        if let Err(e) = self.store.admit(tenant) {
            let _ = reply.send(Err(e));
            return;
        }
        let Some(letter) = self.deliveries.dead.remove(tenant, key) else {
            return;
        };
        let now = self.clock.now().as_micros();
        let new =
            meta.and_then(|m| PackedTimer::with_meta(tenant, key, &m, letter.timer.payload()));
        let Some(new) = new else {
            self.deliveries.dead.insert(letter);
            let _ = reply.send(Err(Error::DeadLetterNotFound {
                tenant: tenant.to_string(),
                key: key.to_string(),
            }));
            return;
        };
        match self.table.insert_with_version(new, now, letter.version) {
            Ok(u) => {
                let s = Scheduled {
                    version: letter.version,
                    deadline: now,
                    replaced: false,
                };
                match self.table.timer_at(u.slot) {
                    Some(t) => self.store.redrive(t, &s, Ack::Schedule(reply, s)),
                    None => self.store.dead_removed(tenant, key, Ack::None),
                }
                DeliveryMetrics::add(&self.metrics.webhooks.tenant(tenant).dead, -1);
            }
            Err(e) => {
                let e = self.upsert_error(e, now);
                self.deliveries.dead.insert(letter);
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Discards the dead letter under `timer`'s (tenant, key); its quota slot is given back.
    pub(super) fn discard(&mut self, timer: PackedTimer, reply: Reply<Result<Cancelled, Error>>) {
        let (tenant, key) = (timer.tenant(), timer.key());
        if self.deliveries.dead.get(tenant, key).is_none() {
            let ack = Ack::Cancel(reply, Cancelled::NotFound);
            self.store.answer_after_writes(tenant, ack);
            return;
        }
        if let Err(e) = self.store.admit(tenant) {
            let _ = reply.send(Err(e));
            return;
        }
        if let Some(letter) = self.deliveries.dead.remove(tenant, key) {
            self.release_quota(tenant);
            DeliveryMetrics::add(&self.metrics.webhooks.tenant(tenant).dead, -1);
            let answer = Cancelled::Cancelled {
                version: letter.version,
                deadline: letter.fire_at,
            };
            self.store
                .dead_removed(tenant, key, Ack::Cancel(reply, answer));
        }
    }
}
