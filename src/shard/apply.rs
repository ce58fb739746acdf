//! Applying an op: every op from the ring goes through one [`Shard::apply`], whatever the
//! store, and a schedule's quota is settled here.
//!
//! A schedule: the store admits the write (or refuses it: 503), the dead letters leave room
//! (`Shard::admit_room`), the tenant's quota admits a new key (or 429), the table takes the
//! timer at once with a new version (`max(now µs, previous + 1)`), and the store gets the
//! write with the caller's reply, which it answers once the write is durable (`store`; the
//! in-memory store answers at once). A cancel, a read and the dead-letter ops take the same
//! path. Ops that arrive while the store recovers wait on the ring and are applied in order
//! afterwards (`recover.rs`). On a cluster of nodes an op keyed to a partition the shard may
//! not act on now is refused first, naming the partition (`gate.rs`).
//!
//! # Quotas
//!
//! A tenant with a quota holds one slot per pending timer and per dead letter (`quota`). A
//! schedule of a new key reserves a slot before the table is asked and settles it once the
//! table answered ([`settle_quota`]): a new timer keeps it, a replacement gives it back. A
//! slot a timer or a dead letter holds goes back in one place, `fate.rs`. A tenant without a
//! quota may not take the room held for the tenants with one.
//!
//! Cost per op: one store admission, one quota look-up (a new key of a tenant with a quota:
//! one atomic update), the table's upsert, and the store's encoding of the write.

use super::Shard;
use crate::clock::TimeSource;
use crate::error::Error;
use crate::op::{Cancelled, Op, Reply, Scheduled, TimerInfo};
use crate::queue::MessageState;
use crate::quota::QuotaSlot;
use crate::ring::Taken;
use crate::runtime::cooperate::Slice;
use crate::store::Ack;
use crate::timer::{Firing, PackedTimer};
use crate::units::UtcMicros;
use crate::wheel::UpsertError;
use std::sync::atomic::Ordering;

/// Ops applied between two looks at the pass's slice in [`Shard::drain`]: a look is a clock
/// read (about 20 ns), an op a few hundred nanoseconds to a few microseconds.
const DRAIN_CHECK: usize = 32;

impl<S: TimeSource> Shard<S> {
    /// Applies up to one pass's worth of ops from the ring; how many. A shard that shares its
    /// thread (`slice`) also stops once the slice is used up: 4,096 replacements of timers
    /// with kilobyte payloads (a 16 MiB batch arrives as such ops) take milliseconds, and the
    /// shard's timers and other tasks would wait for all of them.
    pub(super) fn drain(&mut self, slice: Option<Slice>) -> usize {
        let batch = self.store.ops_per_pass();
        let mut n = self.apply_deferred();
        let mut taken = Taken::default();
        while n < batch {
            if n % DRAIN_CHECK == DRAIN_CHECK - 1 {
                self.ring.give_back(&mut taken);
                if slice.is_some_and(|s| s.is_over()) {
                    break;
                }
            }
            let Some(op) = self.ring.pop_into(&mut taken) else {
                break;
            };
            if n == 0 {
                self.store.begin_pass();
            }
            self.apply_or_defer(op);
            n += 1;
        }
        self.ring.give_back(&mut taken);
        if n > 0 {
            self.metrics
                .pending
                .store(self.pending() as u64, Ordering::Relaxed);
        }
        n
    }

    /// Applies `op`, or holds it back behind its key's due timer whose record is not durable
    /// yet, or behind an earlier held op of its key (`defer.rs`); refused (503) when the
    /// shard holds as many as it may.
    fn apply_or_defer(&mut self, op: Op) {
        if !self.must_wait(&op) {
            self.apply(op);
        } else if self.deferred.is_full() {
            op.refuse(Error::StoreUnavailable { retry_after_s: 1 });
        } else {
            self.deferred.push(op);
        }
    }

    /// Applies the held ops that need wait no more, in order, holding the others again; how
    /// many it applied.
    pub(super) fn apply_deferred(&mut self) -> usize {
        if self.deferred.is_empty() {
            return 0;
        }
        let mut n = 0;
        for op in self.deferred.take() {
            if self.must_wait(&op) {
                self.deferred.push(op);
                continue;
            }
            if n == 0 {
                self.store.begin_pass();
            }
            self.apply(op);
            n += 1;
        }
        n
    }

    /// At a stop: every held op applied, in order, before the store closes.
    pub(super) fn apply_all_deferred(&mut self) {
        for op in self.deferred.take() {
            self.apply(op);
        }
    }

    /// Whether `op` must wait (`defer.rs`): an op of a key with an op held, or a schedule of a
    /// key whose pending timer is due and has not fired yet: its own firing, not a step of its
    /// delivery (a timer kept for its webhook has fired). Not only one whose record is not
    /// durable: one made durable by the last commit fires at this pass's fire, after the
    /// drain; replaced first, its burst would start over.
    fn must_wait(&self, op: &Op) -> bool {
        let Some(timer) = op.keyed() else {
            return false;
        };
        if self.deferred.holds(timer.identity()) {
            return true;
        }
        matches!(op, Op::Schedule { .. } | Op::Guarded(_))
            && self.table.get(timer.identity()).is_some_and(|v| {
                v.deadline <= self.clock.now().as_micros()
                    && crate::sink::webhook::firing_of(v.timer.meta()) == Firing::Own
            })
            // A store that refuses writes now refuses this one at once, as any (`defer.rs`),
            // counted then: the look here counts nothing.
            && self.store.has_room(timer.tenant())
    }

    /// Applies one op: the table changes at once, the store makes it durable and answers.
    pub(crate) fn apply(&mut self, op: Op) {
        if let Some(e) = op
            .keyed()
            .and_then(|t| self.gate.admit(t, &self.ring).err())
        {
            op.refuse(e);
            return;
        }
        match op {
            Op::Schedule {
                timer,
                deadline,
                reply,
                slot,
                home,
            } => self.schedule(timer, deadline, reply, slot, home),
            Op::Guarded(g) => self.guarded(*g),
            Op::CancelIf {
                timer,
                version,
                reply,
            } => self.cancel_if(timer, version, reply),
            Op::Cancel { timer, reply } => self.cancel(timer, reply),
            Op::Get { timer, reply } => {
                let info = self
                    .table
                    .get(timer.identity())
                    .map(|v| TimerInfo::of(v.timer, v.deadline, v.version));
                let read = match info {
                    Some(_) => None,
                    None => self.pager.as_ref().and_then(|p| p.read(timer.identity())),
                };
                let Some(read) = read else {
                    let _ = reply.send(Ok(info));
                    return;
                };
                // A paged timer is read back from its page on the page I/O thread; the shard
                // goes on.
                let shard = self.id;
                glommio::spawn_local(async move {
                    let answer = match read.await {
                        Ok(r) => Ok(Some(TimerInfo::of(&r.timer, r.deadline, r.version))),
                        Err(e) => {
                            tracing::error!(shard, error = %e, "paging: a paged timer could not be read back for a GET");
                            Err(Error::StoreUnavailable { retry_after_s: 1 })
                        }
                    };
                    let _ = reply.send(answer);
                })
                .detach();
            }
            Op::DeadList {
                tenant,
                after,
                through,
                limit,
                bodies,
                reply,
            } => {
                let range = (after.as_deref(), through.as_deref());
                let _ = reply.send(Ok(self.dead_list(&tenant, range, limit, bodies)));
            }
            Op::ListTimers { query, reply } => {
                let (mut listing, reads) = self.list_step(&query);
                if reads.is_empty() {
                    let _ = reply.send(Ok(listing));
                    return;
                }
                // Paged timers' payloads are read back from their pages on the page I/O
                // thread, as a GET's; the shard goes on.
                let shard = self.id;
                glommio::spawn_local(async move {
                    for (i, read) in reads {
                        match read.await {
                            Ok(r) => {
                                if let Some(t) = listing.timers.get_mut(i) {
                                    t.payload = r.timer.payload().to_vec();
                                }
                            }
                            Err(e) => {
                                tracing::error!(shard, error = %e, "paging: a paged timer's payload could not be read back for a listing");
                                let busy = Error::StoreUnavailable { retry_after_s: 1 };
                                let _ = reply.send(Err(busy));
                                return;
                            }
                        }
                    }
                    let _ = reply.send(Ok(listing));
                })
                .detach();
            }
            Op::DeadRedrive { timer, reply } => self.redrive(timer, reply),
            Op::DeadDiscard { timer, reply } => self.discard(timer, reply),
            Op::QueueReceive {
                tenant,
                max,
                visibility_ms,
                reply,
            } => self.queue_receive(&tenant, max, visibility_ms, reply),
            Op::QueueSettle {
                timer,
                version,
                lease,
                how,
                reply,
            } => self.queue_settle(&timer, (version, lease), how, reply),
            Op::QueueCount { tenant, reply } => {
                let _ = reply.send(Ok(self.queue_lengths(&tenant)));
            }
        }
    }

    /// Cancels the pending timer under (tenant, key), in the wheel or paged.
    pub(super) fn cancel(&mut self, timer: PackedTimer, reply: Reply<Result<Cancelled, Error>>) {
        let paged = match self.table.get(timer.identity()) {
            Some(_) => None,
            None => match self.pager.as_ref().and_then(|p| p.find(timer.identity())) {
                Some(p) => Some(p),
                None => {
                    // Not durable until the writes before it are: a first DELETE's
                    // cancel may still wait (`Store::answer_after_writes`).
                    let ack = Ack::Cancel(reply, Cancelled::NotFound);
                    self.store.answer_after_writes(timer.tenant(), ack);
                    return;
                }
            },
        };
        if let Err(e) = self.store.admit(timer.tenant()) {
            let _ = reply.send(Err(e));
            return;
        }
        if paged.is_some() {
            if let Some(p) = self.pager.as_mut().and_then(|p| p.remove(timer.identity())) {
                self.release_quota(timer.tenant());
                let answer = Cancelled::Cancelled {
                    version: p.version,
                    deadline: p.deadline,
                };
                self.store
                    .cancel(timer.tenant(), timer.key(), Ack::Cancel(reply, answer));
            }
        } else if let Some((deadline, record)) = self.table.cancel(timer.identity()) {
            self.forget_in_sinks(&record.timer);
            self.queues.left(&record.timer);
            self.release_quota(record.timer.tenant());
            let answer = Cancelled::Cancelled {
                version: record.version,
                deadline,
            };
            self.store.cancel(
                record.timer.tenant(),
                record.timer.key(),
                Ack::Cancel(reply, answer),
            );
        }
    }

    /// A schedule (upsert): admitted by the store, the room and the quota, placed with a new
    /// version, and written.
    #[inline]
    pub(super) fn schedule(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        reply: Option<Reply<Result<Scheduled, Error>>>,
        slot: Option<QuotaSlot>,
        home: bool,
    ) {
        let scheduled = self
            .store
            .admit(timer.tenant())
            .and_then(|()| self.admit_room(&timer))
            .and_then(|()| self.admit_quota(&timer, slot))
            .and_then(|slot| {
                let version = self.table.next_version(self.clock.now().as_micros());
                let (placed, replaced) = self.place(timer, deadline, version, home)?;
                settle_quota(slot, replaced);
                let s = Scheduled {
                    version,
                    deadline,
                    replaced,
                };
                Ok((placed, s))
            });
        match scheduled {
            Ok((Placed::Wheel(at), s)) => {
                if s.replaced {
                    self.forget_replaced(at);
                }
                let ack = reply.map_or(Ack::None, |tx| Ack::Schedule(tx, s));
                match self.table.timer_at(at) {
                    Some(timer) => self.store.schedule(timer, &s, ack),
                    // Just inserted: always there.
                    None => ack.answer(Ok(())),
                }
            }
            Ok((Placed::Paged(timer), s)) => {
                let ack = reply.map_or(Ack::None, |tx| Ack::Schedule(tx, s));
                self.store.schedule(&timer, &s, ack);
            }
            Err(e) => refuse_schedule(self.id, reply, e),
        }
    }

    /// Puts a timer being scheduled where it goes: paged when its deadline is far and the
    /// shard pages, else into the wheel. Either way a copy of its key in the other place goes.
    /// Whether it replaced a pending timer.
    fn place(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        version: u64,
        home: bool,
    ) -> Result<(Placed, bool), Error> {
        // The wheel keeps the timer until it fires, and its fire frees it here: a timer that
        // another thread packed is copied into this thread's heap first (`into_local`).
        let local = |t: PackedTimer| if home { t } else { t.into_local() };
        if self.pager.is_none() {
            let leaving = self.queue_state_of(timer.identity());
            let timer = local(timer);
            return match self.table.insert_with_version(timer, deadline, version) {
                Ok(u) => {
                    self.left_queue(u.slot, leaving);
                    Ok((Placed::Wheel(u.slot), u.replaced))
                }
                Err(e) => Err(self.upsert_error(e, deadline)),
            };
        }
        if !self.table.in_range(deadline) {
            return Err(self.upsert_error(UpsertError::OutOfRange, deadline));
        }
        if !self.holds(timer.identity()) && self.pending() >= self.table.capacity() {
            return Err(self.upsert_error(UpsertError::Capacity, deadline));
        }
        // A debounced timer stays in the wheel: its next PUT reads its burst there.
        let far = |p: &&mut crate::page::Pager| {
            p.is_far(deadline) && crate::timer::Debounce::of(timer.meta()).is_none()
        };
        if let Some(pager) = self.pager.as_mut().filter(far) {
            if let Ok(old) = pager.put(&timer, deadline, version) {
                let in_wheel = self.table.cancel(timer.identity());
                if let Some((_, record)) = &in_wheel {
                    self.forget_in_sinks(&record.timer);
                    self.queues.left(&record.timer);
                }
                return Ok((Placed::Paged(timer), old.is_some() || in_wheel.is_some()));
            }
            // Its bucket is full: the wheel keeps it.
        }
        let leaving = self.queue_state_of(timer.identity());
        // Into the wheel first, then out of the pages: a timer is never in neither.
        let u = match self.table.insert_loaded(local(timer), deadline, version) {
            Ok(u) => u,
            Err(e) => return Err(self.upsert_error(e, deadline)),
        };
        self.left_queue(u.slot, leaving);
        let paged = match (self.pager.as_mut(), self.table.timer_at(u.slot)) {
            (Some(pager), Some(t)) => pager.remove(t.identity()).is_some(),
            _ => false,
        };
        Ok((Placed::Wheel(u.slot), u.replaced || paged))
    }

    /// The queue state of the timer under `identity`, if it is a message, before a write
    /// replaces it. No lookup on a shard that holds no message.
    fn queue_state_of(&self, identity: &[u8]) -> Option<MessageState> {
        if self.queues.holds_none() {
            return None;
        }
        self.queues.state_of(self.table.get(identity)?.timer)
    }

    /// The message read by [`Shard::queue_state_of`] was replaced by the timer now in `slot`:
    /// it leaves its queue's counts (`ShardQueues::left`).
    fn left_queue(&mut self, slot: u32, leaving: Option<MessageState>) {
        let Some(state) = leaving else { return };
        if let Some(t) = self.table.timer_at(slot) {
            let (tenant, key) = (t.tenant().to_owned(), t.key().to_owned());
            self.queues.left_as(&tenant, &key, state);
        }
    }

    /// Whether the shard holds a pending timer `identity`, in the wheel or paged.
    pub(super) fn holds(&self, identity: &[u8]) -> bool {
        self.table.get(identity).is_some()
            || self
                .pager
                .as_ref()
                .is_some_and(|p| p.find(identity).is_some())
    }

    /// Pending timers, in the wheel and paged.
    pub(super) fn pending(&self) -> usize {
        self.table.len() + self.pager.as_ref().map_or(0, |p| p.len())
    }

    /// The quota slot a schedule of `timer` needs: the caller's, a fresh one for a new key of
    /// a tenant with a quota, or none (no quota, or a replacement). `QuotaExceeded` when a new
    /// key would pass the quota. Settle it with [`settle_quota`] once the table has answered;
    /// dropping it gives the slot back.
    fn admit_quota(
        &self,
        timer: &PackedTimer,
        slot: Option<QuotaSlot>,
    ) -> Result<Option<QuotaSlot>, Error> {
        let Some(quota) = self.quotas.get(timer.tenant()) else {
            let held = self.quotas.held_per_shard();
            if held > 0
                && self.pending() + held >= self.table.capacity()
                && !self.holds(timer.identity())
            {
                // The room left is held for tenants with a quota (`quota`).
                return Err(self.upsert_error(UpsertError::Capacity, UtcMicros(0)));
            }
            return Ok(slot);
        };
        if slot.is_some() || self.holds(timer.identity()) {
            return Ok(slot);
        }
        QuotaSlot::reserve(quota)
            .map(Some)
            .ok_or_else(|| Error::QuotaExceeded {
                tenant: timer.tenant().to_string(),
                limit: quota.limit,
            })
    }

    pub(super) fn upsert_error(&self, e: UpsertError, deadline: UtcMicros) -> Error {
        match e {
            UpsertError::Capacity => Error::CapacityExceeded {
                shard: self.id,
                capacity: self.table.capacity(),
            },
            UpsertError::OutOfRange => Error::DeadlineOutOfRange {
                deadline_us: deadline.0,
            },
        }
    }
}

/// Where a scheduled timer went: the wheel's slot, or paged (the timer, for the store's record).
enum Placed {
    Wheel(u32),
    Paged(PackedTimer),
}

/// Settles a schedule's quota slot once the table applied it: a new timer keeps it, a
/// replacement gives it back (the replaced timer held one already).
fn settle_quota(slot: Option<QuotaSlot>, replaced: bool) {
    if let Some(slot) = slot {
        if !replaced {
            slot.keep();
        }
    }
}

/// Answers a schedule that was not applied; a detached one has no caller, so it is logged.
fn refuse_schedule(shard: usize, reply: Option<Reply<Result<Scheduled, Error>>>, e: Error) {
    match reply {
        Some(tx) => {
            let _ = tx.send(Err(e));
        }
        None => tracing::warn!(shard, error = %e, "detached schedule refused"),
    }
}
