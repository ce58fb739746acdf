//! A timer's end: every state a timer takes from its fire until it leaves the shard, one
//! function per transition, and the one place its tenant's quota slot goes back ([`release`]).
//!
//! # The states
//!
//! ```text
//!   pending ────────── fire ──▶ fired ─┬─ keep ──────────────▶ kept for delivery
//!                                      ├─ done, unkeepable ──▶ retired      (slot released)
//!                                      └─ dead ──────────────▶ dead letter
//!   kept for delivery ── follow-up, op ┬─ delivered ─────────▶ retired      (slot released)
//!                                      ├─ retried ───────────▶ pending, at its backoff
//!                                      ├─ dead ──────────────▶ dead letter
//!                                      └─ cancelled ─────────▶ gone         (slot released)
//!   dead letter ─────────────── op ────┬─ re-driven ─────────▶ pending, due now
//!                                      └─ discarded, replaced ▶ gone       (slot released)
//! ```
//!
//! | state | where it lives | what the store holds | quota slot |
//! |---|---|---|---|
//! | pending | the table (or a page) | the timer's record | held |
//! | fired | in the table's poll, between the sinks' answer and its fate ([`Settle::fate`]) | the record | held |
//! | kept for delivery | the table, re-armed at its safety net with the sink's metadata | the kept record (`Store::fired_kept`) | held |
//! | retried | the table, at its backoff (a follow-up's `Reschedule`) | the record rewritten | held |
//! | dead letter | `DeadLetters` (`dead.rs`) | the letter (`Store::dead`, `Store::fired_dead`) | held |
//! | a schedule's timer | the table, at its next occurrence (or a year ahead, paused), its record as payload (`schedule::ScheduleRecord`) | that record | held |
//! | retired, cancelled, discarded | gone | nothing (`Store::fired`, `Store::cancel`, `Store::dead_removed`) | released |
//!
//! | transition | function | store | quota |
//! |---|---|---|---|
//! | fired → kept, retired or dead | [`Settle::fate`] | `fired_kept` (a step's: `schedule`), `fired` / `cancel`, `fired_dead` / `dead` | — / release / — |
//! | fired → retired, unkeepable (metadata over 65,535 bytes, a deadline past the wheel's range) | [`Settle::unkeepable`], [`Settle::retire`] | `fired` or `cancel` | release |
//! | fired or kept → dead | [`Settle::bury`] | `fired_dead` or `dead` | kept by the letter; a letter it replaces releases |
//! | kept → delivered, retried, dead, woken | [`Shard::apply_followup`] | `cancel`, `schedule`, `dead`, — | release / — / — / — |
//! | pending or kept → cancelled | `Shard::apply` (`apply.rs`), through [`Shard::release_quota`] | `cancel` | release |
//! | dead → re-driven | [`Shard::redrive`] | `redrive` | moves with it |
//! | dead → discarded | [`Shard::discard`] | `dead_removed` | release |
//! | due, not this node's | [`Settle::unfired`], [`Settle::set_aside`] | — (the record stays for the partition's holder) | release (a set-aside one is taken again by its load) |
//! | pending or dead, purged with its partition | [`purged`], [`letter_purged`] | — | release |
//! | a schedule's timer fired → its occurrences armed, itself re-armed at its next one, or ended | [`Shard::recur`] | `schedule` per occurrence, then `schedule` of the record (ended: `cancel`) | forced per occurrence / — (ended: release) |
//! | a queued message's: enqueued, received, acked, nacked, extended, expired | `queue.rs`, one function each (its table) | `fired_kept`, `schedule`, `cancel`, `dead` | held; an ack releases |
//!
//! Every release goes through [`release`]; nothing else in the shard gives a slot back (a
//! schedule's reservation not kept is given back by its `QuotaSlot`, in `quota`, before it
//! was ever a timer's). A new state is a row in each table above and a function here, as a
//! recurring schedule's is ([`Shard::recur`]), or a table of its own beside it, as a queued
//! message's is (`queue.rs`, one function per transition; an ack gives its slot back through
//! [`release`]).
//!
//! # Kept, settled in the call that fires it
//!
//! The fire pass (`fire.rs`) polls the table with `TimerTable::poll_keeping`: for each timer
//! due the sinks answer ([`Next`]) and [`Settle::fate`] answers the table with the timer's
//! fate before the next one fires. Done, buried, or not keepable: it leaves the table. Kept (a
//! webhook's attempt under way, a held-back delivery's safety net): the store is told, and the
//! table re-arms the same slab entry at the new deadline with the new metadata, under its
//! version and its index entry: no removal, lookup or insert, and never twice in one poll.
//!
//! # Outcomes, applied to the state they were meant for
//!
//! What a delivery learns later comes back as a follow-up (`Followups::send`), applied at the
//! next pass (`delivery.rs` drains them): only to the exact state it was meant for (version
//! and metadata), so a cancel or a replacement in between wins. None of these writes is
//! refused by the store: like fires, they stand for timers already admitted.
//!
//! Cost: per fire, one match on the sinks' answer; a kept timer's new bytes (one allocation)
//! and its store write; a release is one quota look-up (nothing when no tenant has a quota)
//! and two atomic updates.

use super::dead::{DeadLetters, Letter};
use super::Shard;
use crate::clock::TimeSource;
use crate::error::Error;
use crate::metrics::{DeliveryMetrics, ShardMetrics};
use crate::op::{Cancelled, Reply, Scheduled};
use crate::partition::{occurrence_key, partition_of, schedule_of};
use crate::queue;
use crate::quota::Quotas;
use crate::schedule::{Limits, ScheduleRecord};
use crate::sink::webhook::{for_occurrence, redriven};
use crate::sink::{Followup, Next, Sink};
use crate::store::{Ack, Store};
use crate::timer::{FiredTimer, Firing, PackedTimer};
use crate::units::UtcMicros;
use crate::wheel::Fate;
use std::sync::atomic::Ordering;

/// Gives a slot of `tenant`'s quota back, if it has one: the one place a timer or a dead
/// letter that leaves the shard does so.
#[inline]
pub(super) fn release(quotas: &Quotas, tenant: &str) {
    if let Some(q) = quotas.get(tenant) {
        q.release();
    }
}

/// A pending timer a purge took out of the table (its partition dropped or reloaded): the
/// sinks forget it and its slot goes back; the store keeps its record for the partition's
/// holder.
pub(super) fn purged(sinks: &mut [Box<dyn Sink>], quotas: &Quotas, timer: &PackedTimer) {
    for sink in sinks.iter_mut() {
        sink.forget(timer);
    }
    release(quotas, timer.tenant());
}

/// A dead letter a purge took: its slot goes back, and the tenant's count of letters down.
pub(super) fn letter_purged(quotas: &Quotas, metrics: &ShardMetrics, letter: &Letter) {
    let tenant = letter.timer.tenant();
    release(quotas, tenant);
    DeliveryMetrics::add(&metrics.webhooks.tenant(tenant).dead, -1);
}

/// What settling a fired timer's fate touches of the shard besides its table: borrowed apart
/// from the table, so that the fire pass settles each timer while the table polls.
pub(super) struct Settle<'a> {
    pub id: usize,
    pub store: &'a mut dyn Store,
    pub quotas: &'a Quotas,
    pub metrics: &'a ShardMetrics,
    pub dead: &'a mut DeadLetters,
    /// The latest deadline the table re-arms a timer at in this poll (`TimerTable::horizon`).
    pub horizon: UtcMicros,
}

impl Settle<'_> {
    /// The fate of `timer`, fired as `f`, whose sinks answered `next`; the store is told and
    /// the quota settled here, the table does the rest.
    #[inline]
    pub fn fate(
        &mut self,
        f: &FiredTimer<'_>,
        timer: &PackedTimer,
        next: Next,
    ) -> Fate<PackedTimer> {
        match next {
            Next::Reschedule { after, meta } => {
                let us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX);
                let deadline = f.fired_at.as_micros().saturating_add_micros(us);
                if deadline > self.horizon {
                    tracing::error!(
                        shard = self.id,
                        tenant = f.tenant,
                        key = f.key,
                        deadline_us = deadline.0,
                        "a sink kept a fired timer due past the wheel's range: the timer is \
                         retired (its record goes, its quota slot is released) and its \
                         delivery stops"
                    );
                    self.retire(f);
                    return Fate::Done;
                }
                let Some(kept) = timer.with_new_meta(&meta) else {
                    self.unkeepable(f, meta.len());
                    return Fate::Done;
                };
                let s = Scheduled {
                    version: f.version,
                    deadline,
                    replaced: false,
                };
                if f.firing == Firing::Own {
                    self.store.fired_kept(f, &kept, &s);
                } else {
                    self.store.schedule(&kept, &s, Ack::None);
                }
                Fate::Rearm(deadline, kept)
            }
            Next::Dead { meta, fire_at } => {
                match timer.with_new_meta(&meta) {
                    Some(letter) => {
                        let own = f.firing == Firing::Own;
                        self.bury(letter, f.version, fire_at, own.then_some(f));
                    }
                    None => self.unkeepable(f, meta.len()),
                }
                Fate::Done
            }
            Next::Done | Next::Wake => {
                // A sink never answers a fire with `Wake`; taken as done.
                self.retire(f);
                Fate::Done
            }
        }
    }

    /// Retires a fired timer that leaves the table for good: the store hears of its own
    /// firing, or drops the record of a step of its delivery; its tenant's quota slot goes
    /// back.
    #[inline]
    pub fn retire(&mut self, f: &FiredTimer<'_>) {
        if f.firing == Firing::Own {
            self.store.fired(f);
        } else {
            self.store.cancel(f.tenant, f.key, Ack::None);
        }
        release(self.quotas, f.tenant);
    }

    /// A sink kept (or buried) a fired timer with delivery metadata of `meta_len` bytes, more
    /// than a timer holds (`PackedTimer::with_meta`): it cannot stay, so it is retired like a
    /// timer that is done, and says so.
    fn unkeepable(&mut self, f: &FiredTimer<'_>, meta_len: usize) {
        tracing::error!(
            shard = self.id,
            tenant = f.tenant,
            key = f.key,
            meta_len,
            "a sink kept a fired timer with {meta_len} bytes of delivery metadata, over the \
             65,535 a timer holds: the timer is retired (its record goes, its quota slot is \
             released) and its delivery stops"
        );
        self.retire(f);
    }

    /// Files a dead letter (already out of the table) and tells the store, with the fire when
    /// it was the timer's own firing that killed it. It keeps its quota slot; one it replaces
    /// gives its slot back.
    pub fn bury(
        &mut self,
        letter: PackedTimer,
        version: u64,
        fire_at: UtcMicros,
        fired: Option<&FiredTimer<'_>>,
    ) {
        let letter = Letter::new(letter, version, fire_at);
        match fired {
            Some(f) => self.store.fired_dead(f, &letter.stored()),
            None => self.store.dead(&letter.stored()),
        }
        let m = self.metrics.webhooks.tenant(letter.timer.tenant());
        DeliveryMetrics::add(&m.dead, 1);
        let tenant = letter.timer.tenant().to_string();
        if self.dead.insert(letter).is_some() {
            DeliveryMetrics::add(&m.dead, -1);
            release(self.quotas, &tenant);
        }
    }

    /// A due timer of a partition the shard may not act on now (`gate.rs`) left the wheel
    /// unfired: the sinks forget it, its slot goes back, and the store hears nothing (its
    /// record stays for the partition's holder).
    pub fn unfired(&mut self, sinks: &mut [Box<dyn Sink>], timer: &PackedTimer) {
        for sink in sinks.iter_mut() {
            sink.forget(timer);
        }
        release(self.quotas, timer.tenant());
        self.metrics.unfired_total.fetch_add(1, Ordering::Relaxed);
    }

    /// A due timer of the partition being loaded was set aside by the load, to go in again
    /// with its last step (`load_drop.rs`): its slot goes back, and that insert takes it
    /// again.
    pub fn set_aside(&mut self, tenant: &str) {
        release(self.quotas, tenant);
    }
}

impl<S: TimeSource> Shard<S> {
    /// A pending timer of `tenant` left the table (cancelled), or a dead letter left.
    pub(super) fn release_quota(&self, tenant: &str) {
        release(&self.quotas, tenant);
    }

    /// Applies a sink's follow-up: the outcome of a kept timer's delivery (delivered, retried,
    /// dead) or a wake of a held-back one, only if the timer is still pending with the
    /// version and metadata it was meant for.
    pub(super) fn apply_followup(&mut self, f: Followup) {
        let identity = f.timer.identity();
        let current = self.table.get(identity);
        // A timer of a partition being purged is gone already, or about to be: a re-armed
        // entry could land below the purge's cursor and escape it (`load_drop.rs`).
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
            .store(self.pending() as u64, Ordering::Relaxed);
    }

    /// A recurring schedule's timer fired at `now` (it left the table in the poll, unseen by
    /// the sinks): the occurrences due are armed as timers of their own, due at their nominal
    /// time (fired by the next pass, delivered as any timer), and the schedule's timer is
    /// armed again at its next occurrence, its record carrying the moved cursor under a new
    /// version; or, the schedule ended, it is gone and its quota slot goes back.
    ///
    /// The store hears the occurrences first and the schedule's record after, in one call
    /// of the shard, and an occurrence fires only once its record is durable: a crash that
    /// keeps the record keeps the occurrences, so none is lost; one that keeps neither fires
    /// the same occurrences again at the restart (none of them was delivered). An occurrence
    /// already pending under its key (armed before a crash that lost the record after it; its
    /// delivery's outcome comes after the record in the log, so it is still pending) is not
    /// armed twice, nor is one that came back so and fired before its schedule did
    /// (`RecoveredOccurrences`). Each occurrence takes a quota slot past the quota (`Quota::force`):
    /// it stands for a schedule already admitted, and leaves through `release` as any timer.
    /// The catch-up policy judges what is on time at `judged_at` (`fire.rs` says which).
    pub(super) fn recur(&mut self, now: UtcMicros, judged_at: UtcMicros, timer: &PackedTimer) {
        let (tenant, internal) = (timer.tenant(), timer.key());
        let Some(key) = schedule_of(internal) else {
            return;
        };
        let planned = ScheduleRecord::decode(timer.payload())
            .ok_or_else(|| "its record does not read".to_string())
            .and_then(|mut r| {
                let s = r.schedule(&Limits::default()).map_err(|e| e.to_string())?;
                Ok((r.fire(&s, judged_at), r))
            });
        let (plan, record) = match planned {
            Ok(p) => p,
            Err(why) => {
                tracing::error!(shard = self.id, tenant, key, why = %why, "a recurring schedule cannot go on and is removed");
                self.store.cancel(tenant, internal, Ack::None);
                self.release_quota(tenant);
                return;
            }
        };
        // Occurrences that came back from the store fire from their own records.
        let recovered = self.recovered_occurrences.take(tenant, key);
        for fire in &plan.fires {
            let at = fire.occurrence.at;
            if recovered.contains(&at.0) {
                continue;
            }
            let meta = match timer.meta().is_empty() {
                true => Some(Vec::new()),
                false => for_occurrence(timer.meta(), at.0),
            };
            let body = record.occurrence_body(key, fire);
            let o = meta.and_then(|m| {
                PackedTimer::with_meta(tenant, &occurrence_key(key, at.0), &m, &body)
            });
            let Some(o) = o.filter(|o| self.table.get(o.identity()).is_none()) else {
                continue;
            };
            if let Some(q) = self.quotas.get(tenant) {
                q.force();
            }
            if !self.arm_internal(o, at, now) {
                self.release_quota(tenant);
            }
        }
        self.metrics
            .schedule_occurrences_total
            .fetch_add(plan.fires.len() as u64, Ordering::Relaxed);
        self.metrics
            .schedule_skipped_total
            .fetch_add(plan.skipped, Ordering::Relaxed);
        let again = plan.arm.and_then(|at| {
            let t = PackedTimer::with_meta(tenant, internal, timer.meta(), &record.encode())?;
            Some((t, at))
        });
        let armed = again.is_some_and(|(t, at)| self.arm_internal(t, at, now));
        if !armed {
            self.store.cancel(tenant, internal, Ack::None);
            self.release_quota(tenant);
        }
    }

    /// Puts an internal timer of a schedule into the table under a new version, past the
    /// capacity (it stands for a schedule admitted already), and writes it; false (logged)
    /// when the wheel cannot take it.
    fn arm_internal(&mut self, timer: PackedTimer, at: UtcMicros, now: UtcMicros) -> bool {
        let version = self.table.next_version(now);
        match self.table.insert_loaded(timer, at, version) {
            Ok(u) => {
                let s = Scheduled {
                    version,
                    deadline: at,
                    replaced: u.replaced,
                };
                if let Some(t) = self.table.timer_at(u.slot) {
                    self.store.schedule(t, &s, Ack::None);
                }
                true
            }
            Err(e) => {
                let e = self.upsert_error(e, at);
                tracing::error!(shard = self.id, error = %e, "a recurring schedule's timer could not be armed");
                false
            }
        }
    }

    /// Files a dead letter (already out of the table) with the store, like a fired one
    /// (`Settle::bury`), without a fire.
    pub(super) fn bury(&mut self, letter: PackedTimer, version: u64, fire_at: UtcMicros) {
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

    /// Re-drives the dead letter under `timer`'s (tenant, key): pending again, due now, with a
    /// fresh attempt budget and its old version (so the same `Idempotency-Key`). Its quota
    /// slot moves with it.
    pub(super) fn redrive(&mut self, timer: PackedTimer, reply: Reply<Result<Scheduled, Error>>) {
        let (tenant, key) = (timer.tenant(), timer.key());
        let now_us = self.clock.now().as_micros().0;
        let meta = match self.deliveries.dead.get(tenant, key) {
            Some(l) => redriven(l.timer.meta()).or_else(|| queue::redriven(l.timer.meta(), now_us)),
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

#[cfg(test)]
#[path = "recur_tests.rs"]
mod recur_tests;
