//! A shard's start: its store loads the shard's timers before the loop applies any op. Ops
//! that arrive meanwhile wait in order; any that wait longer than the store's ack timeout are
//! answered with the store's refusal (`StoreUnavailable`), and the rest are applied once the
//! table is loaded, so the ring's order is kept. Dead letters come back the same way, marked
//! by a store that keeps them apart (the journal) or told by their metadata, and they go to
//! the dead-letter table, not the wheel.
//!
//! A record is inserted by [`Loader`], the one path for a stored timer into the shard: at
//! start, and for a partition loaded at run time (`load_drop.rs`).

use super::dead::{DeadLetters, Letter};
use super::occurrences::RecoveredOccurrences;
use super::Shard;
use crate::clock::TimeSource;
use crate::metrics::{DeliveryMetrics, ShardMetrics};
use crate::op::Op;
use crate::page::Pager;
use crate::quota::Quotas;
use crate::sink::webhook;
use crate::store::Recovered;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use crate::wheel::TimerTable;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<S: TimeSource> Shard<S> {
    /// Recovers the shard's timers; `false` when the shard was stopped first.
    pub(super) async fn recover(&mut self) -> bool {
        let limit = self.store.ack_timeout();
        let refusal = self.store.refusal();
        let mut held: Vec<(Instant, Op)> = Vec::new();
        match self.pager.as_mut() {
            // Paged, most recovered timers never reach the table.
            Some(pager) => pager.reserve(self.store.to_recover()),
            None => self.table.reserve(self.store.to_recover()),
        }
        let (ring, stop, store) = (&self.ring, &self.stop, &mut self.store);
        let mut loader = Loader {
            queues: &mut self.queues,
            table: &mut self.table,
            dead: &mut self.deliveries.dead,
            quotas: &self.quotas,
            metrics: &self.metrics,
            pager: self.pager.as_mut(),
            occurrences: &mut self.recovered_occurrences,
        };
        // Over a cluster of nodes (a closed gate) every partition comes through a load from the
        // node's loop once its lease is held, so recovery loads nothing (the store reads
        // nothing: `store::redis::recover`), and this drops whatever it would hand over.
        let gated = self.gate.is_closed();
        let mut insert = |r: Recovered<'_>| -> bool {
            if gated {
                return true;
            }
            let dead = r.dead.unwrap_or_else(|| webhook::is_dead(r.meta));
            if !dead && loader.page(&r) {
                return true;
            }
            PackedTimer::with_meta(r.tenant, r.key, r.meta, r.payload)
                .is_some_and(|timer| loader.insert_as(timer, r.version, r.deadline, dead))
        };
        let hold = async {
            loop {
                while let Some(op) = ring.pop() {
                    held.push((Instant::now(), op));
                }
                let expired = held.partition_point(|(t, _)| t.elapsed() >= limit);
                for (_, op) in held.drain(..expired) {
                    op.refuse(refusal.clone());
                }
                if stop.load(Ordering::Acquire) {
                    return false;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        };
        let recovered = futures_lite::future::or(store.recover(&mut insert, stop), hold).await;
        if !recovered {
            return false;
        }
        if let Some(pager) = self.pager.as_mut() {
            pager.recovered();
        }
        // Versions only grow, even past a restart with the clock behind.
        self.table.observe_version(self.store.version_floor());
        self.metrics
            .pending
            .store(self.pending() as u64, Ordering::Relaxed);
        self.store.begin_pass();
        for (_, op) in held {
            self.apply(op);
        }
        true
    }
}

/// What inserting a stored record touches of the shard: borrowed apart, so that the store's
/// recovery can hand records over while the shard's ring is being held.
pub(super) struct Loader<'a> {
    /// Where a queued message is indexed (`queue.rs`).
    pub queues: &'a mut super::ShardQueues,
    pub table: &'a mut TimerTable,
    pub dead: &'a mut DeadLetters,
    pub quotas: &'a Quotas,
    pub metrics: &'a ShardMetrics,
    /// Where a timer due beyond the horizon goes, when the shard pages (`page`).
    pub pager: Option<&'a mut Pager>,
    /// Where an occurrence of a schedule is noted ([`RecoveredOccurrences`]).
    pub occurrences: &'a mut RecoveredOccurrences,
}

impl Loader<'_> {
    /// Pages a recovered timer due beyond the horizon, when the shard pages, from the parts
    /// the store hands over (no timer is made for it): whether it was paged. A dead letter, a
    /// timer due sooner, or one whose bucket is full goes through [`Loader::insert`].
    pub fn page(&mut self, r: &Recovered<'_>) -> bool {
        let Some(pager) = self.pager.as_deref_mut() else {
            return false;
        };
        // A queued message stays in the table, where a receive finds it (`queue.rs`).
        if !pager.is_far(r.deadline)
            || r.dead.unwrap_or_else(|| webhook::is_dead(r.meta))
            || crate::queue::is_message(r.meta)
        {
            return false;
        }
        let parts = (r.tenant, r.key, r.meta, r.payload);
        if pager.put_recovered(parts, r.deadline, r.version).is_err() {
            return false;
        }
        self.table.observe_version(r.version);
        // Acknowledged: it counts against its tenant's quota, over it or not. The journal
        // hands each timer over once.
        if let Some(q) = self.quotas.get(r.tenant) {
            q.force();
        }
        true
    }

    /// Inserts a stored record under its stored version: a pending timer into the table, a
    /// dead letter (its metadata says so) into the dead letters; false when the table cannot
    /// take it. A stored timer was acknowledged: it counts against its tenant's quota even if
    /// that leaves the tenant over it (new keys are refused until it drains).
    pub fn insert(&mut self, timer: PackedTimer, version: u64, deadline: UtcMicros) -> bool {
        let dead = webhook::is_dead(timer.meta());
        self.insert_as(timer, version, deadline, dead)
    }

    /// [`Loader::insert`], a dead letter when `dead` (the store said which set it kept the
    /// record in), whatever its metadata says.
    pub fn insert_as(
        &mut self,
        timer: PackedTimer,
        version: u64,
        deadline: UtcMicros,
        dead: bool,
    ) -> bool {
        let quota = self.quotas.get(timer.tenant());
        self.occurrences.note(&timer);
        if dead {
            self.table.observe_version(version);
            let m = self.metrics.webhooks.tenant(timer.tenant());
            if self
                .dead
                .insert(Letter::new(timer, version, deadline))
                .is_none()
            {
                if let Some(q) = quota {
                    q.force();
                }
                DeliveryMetrics::add(&m.dead, 1);
            }
            return true;
        }
        let message = crate::queue::is_message(timer.meta()).then(|| timer.clone());
        let deadline = self.queues.recovered_deadline(&timer, deadline);
        match self.table.insert_with_version(timer, deadline, version) {
            Ok(u) => {
                if let Some(m) = message {
                    self.queues.recovered(&m, version);
                }
                if !u.replaced {
                    if let Some(q) = quota {
                        q.force();
                    }
                }
                true
            }
            Err(_) => false,
        }
    }
}
